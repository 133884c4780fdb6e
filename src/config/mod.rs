//! Configuration: the builder and its validation (`builder`), the validated settings
//! (`settings`), the retry policy (`retry`), the environment's variables (`env`), node URLs
//! ([`url`]), clients and configurations given ready-made ([`given`]), TLS files ([`tls`]),
//! configuration files ([`file`], feature `serde`) and the checks that turn settings into
//! findings ([`checks`]). Never names the client: building one is the public face's step
//! (`api`).
//!
//! Imports `error`, `algo` and `report`.

pub(crate) mod builder;
mod candidacy;
pub(crate) mod checks;
pub(crate) mod env;
#[cfg(feature = "serde")]
pub(crate) mod file;
pub(crate) mod given;
mod keep_alive;
pub(crate) mod retry;
pub(crate) mod settings;
pub(crate) mod tls;
pub(crate) mod url;

pub(crate) use builder::*;
pub use candidacy::Candidacy;
pub use keep_alive::KeepAlive;
pub(crate) use retry::*;
pub(crate) use settings::*;
