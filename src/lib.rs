#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// docs.rs (Cargo.toml, [package.metadata.docs.rs]) marks feature-gated items with their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admission;
mod batch;
mod byo;
mod capabilities;
mod config;
#[cfg(feature = "serde")]
mod config_serde;
mod decoder;
mod election;
mod error;
mod failure;
mod fencing;
mod handover;
mod health;
mod inspect;
mod keep;
mod keeper;
mod leader;
mod listen;
mod lock;
mod node;
mod node_url;
mod probe;
mod quorum;
mod redlock;
mod report;
mod scripts;
mod stats;
mod tls;
mod token;
mod wake;

#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub mod testkit;

pub use capabilities::ReleasePath;
pub use config::{Config, NodeUrl, RedLockBuilder, Retry, ENV_VARS, MAX_NODES};
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config_serde::{ConfigFile, RetryFile, TlsFileSettings};
pub use decoder::decoder_is_bounded;
pub use election::{Candidacy, Leadership};
pub use error::{ConfigError, Error, NodeError, NodeErrorKind};
/// The Redis client quorumlock runs on, for nodes given as fred clients or configurations
/// ([`RedLockBuilder::fred_client`], [`RedLockBuilder::fred_config`]): an application that
/// uses it through this path needs no fred dependency of its own, and names the very types
/// quorumlock takes.
pub use fred;
pub use keep::{KeepAlive, KeptLock, LockHandle, LostReason};
pub use leader::Leader;
pub use lock::{Lock, Released};
pub use quorum::{drift, quorum, validity, DRIFT_FLOOR};
pub use redlock::RedLock;
pub use report::{Finding, NodeReport, Severity};
pub use stats::Stats;
pub use token::Token;
