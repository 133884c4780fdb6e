#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
// docs.rs (Cargo.toml, [package.metadata.docs.rs]) marks feature-gated items with their feature.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod admission;
mod batch;
mod config;
mod decoder;
mod error;
mod failure;
mod fencing;
mod health;
mod inspect;
mod keep;
mod keeper;
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

pub use config::{Config, NodeUrl, RedLockBuilder, Retry, ENV_VARS, MAX_NODES};
pub use decoder::decoder_is_bounded;
pub use error::{ConfigError, Error, NodeError, NodeErrorKind};
pub use keep::{KeepAlive, KeptLock, LockHandle, LostReason};
pub use lock::{Lock, Released};
pub use quorum::{drift, quorum, validity, DRIFT_FLOOR};
pub use redlock::RedLock;
pub use report::{Finding, NodeReport, Severity};
pub use stats::Stats;
pub use token::Token;
