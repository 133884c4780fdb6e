#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// docs.rs (Cargo.toml, [package.metadata.docs.rs]) marks feature-gated items with their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod algo;
mod api;
mod config;
mod engine;
mod error;
mod node;
mod report;
mod stats;

#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

// The model checker's way in to `algo/` (tests/model.rs, docs/verification.md): not API.
#[cfg(feature = "model")]
#[doc(hidden)]
#[path = "model.rs"]
pub mod __model;

pub use algo::quorum::{drift, quorum, validity, DRIFT_FLOOR};
pub use api::blocking;
pub use api::election::Leadership;
pub use api::kept::{KeptLock, LockHandle};
pub use api::lock::Lock;
pub use api::redlock::RedLock;
pub use api::rwlock::{RwGuard, RwLock};
pub use api::semaphore::{Permit, Semaphore};
pub use config::builder::RedLockBuilder;
pub use config::env::ENV_VARS;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::file::{ConfigFile, RetryFile, TlsFileSettings};
pub use config::retry::Retry;
pub use config::settings::Config;
pub use config::url::NodeUrl;
pub use config::Candidacy;
pub use config::KeepAlive;
pub use engine::census::{PermitHolder, RwHolder};
pub use engine::held::Access;
pub use engine::held::Released;
pub use engine::held::Token;
pub use engine::machinery::Shutdown;
pub use engine::observe::Leader;
pub use error::{
    ConfigError, Error, FoundKind, LostReason, NodeError, NodeErrorKind, MAX_NODES, MAX_PERMITS,
};
/// The Redis client quorumlock runs on, for nodes given as fred clients or configurations
/// ([`RedLockBuilder::fred_client`], [`RedLockBuilder::fred_config`]): an application that
/// uses it through this path needs no fred dependency of its own, and names the very types
/// quorumlock takes.
pub use fred;
pub use report::capabilities::ReleasePath;
pub use report::decoder::decoder_is_bounded;
pub use report::node_report::{Finding, NodeReport, Severity};
pub use stats::Stats;
