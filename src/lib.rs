#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod config;
mod error;
mod keep;
mod lock;
mod node;
mod quorum;
mod redlock;
mod scripts;
mod token;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use config::{Config, NodeUrl, RedLockBuilder, Retry, ENV_VARS, MAX_NODES};
pub use error::{ConfigError, Error, NodeError, NodeErrorKind};
pub use keep::{KeepAlive, KeptLock, LockHandle, LostReason};
pub use lock::{Lock, Released};
pub use quorum::{drift, quorum, validity, DRIFT_FLOOR};
pub use redlock::RedLock;
pub use token::Token;
