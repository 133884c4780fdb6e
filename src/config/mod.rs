//! Configuration: the builder's settings and their validation (`builder`), node URLs
//! ([`url`]), clients and configurations given ready-made ([`given`]), TLS files ([`tls`]),
//! configuration files ([`file`], feature `serde`) and the checks that turn settings into
//! findings ([`checks`]). Never names the client: building one is the public face's step
//! (`api`).
//!
//! Imports `error`, `algo` and `report`.

pub(crate) mod builder;
mod candidacy;
pub(crate) mod checks;
#[cfg(feature = "serde")]
pub(crate) mod file;
pub(crate) mod given;
mod keep_alive;
pub(crate) mod tls;
pub(crate) mod url;

pub(crate) use builder::*;
pub use candidacy::Candidacy;
pub use keep_alive::KeepAlive;
