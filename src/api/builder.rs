//! Building a client: the step from checked settings (`config`) to a running coordinator
//! (`engine`). The builder's settings and their validation are in `config::builder`.

use std::time::Duration;

use crate::api::redlock::RedLock;
use crate::config::RedLockBuilder;
use crate::engine::coordinator::Coordinator;
use crate::error::ConfigError;
use crate::report::NodeReport;

impl RedLockBuilder {
    /// Checks the configuration and starts connecting to every node in the background.
    ///
    /// It does not wait for connections: a service starts and takes locks while a minority
    /// of its nodes is down, and nodes that come up later are used as soon as they connect.
    /// See [`RedLock::wait_for_nodes`] to wait for them.
    ///
    /// # Errors
    /// [`ConfigError`] for invalid settings, or when called outside a Tokio runtime. Nothing
    /// is sent to any node in that case.
    pub fn build(&self) -> Result<RedLock, ConfigError> {
        let config = self.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConfigError::NoRuntime);
        }
        // What `Config::findings` found, said as its docs describe.
        for finding in config.findings() {
            tracing::warn!(severity = %finding.severity, "{}", finding.message);
        }
        if config.decoder_warning {
            let bounded = crate::report::decoder::decoder_is_bounded();
            if let Some(finding) = crate::report::decoder::finding(bounded) {
                crate::report::decoder::print_once(&finding);
            }
        }
        Ok(RedLock(Coordinator::connect(config, true)?))
    }

    /// Like [`build`](Self::build), then waits (up to the connect timeout) for the nodes to
    /// connect and be checked, and refuses a configuration in which two URLs reach the same
    /// server (the same `run_id`: a hostname and its address, say). Nodes that are down are
    /// not waited for beyond the timeout and do not fail the call.
    ///
    /// # Errors
    /// As [`build`](Self::build); [`ConfigError::SameServer`] for two URLs of one server.
    pub async fn connect(&self) -> Result<RedLock, ConfigError> {
        let redlock = self.build()?;
        redlock
            .wait_for_nodes(redlock.config().connect_timeout)
            .await;
        redlock.check_distinct()?;
        Ok(redlock)
    }

    /// Reports on every node without taking any lock and without writing anything to any
    /// node (`INFO`, `CONFIG GET`, `TIME`, and permission probes that change nothing). The
    /// clock rate is measured over `clock_window`. This is what `quorumlock doctor` prints.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid configuration, as [`validate`](Self::validate).
    pub async fn inspect(&self, clock_window: Duration) -> Result<Vec<NodeReport>, ConfigError> {
        let config = self.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConfigError::NoRuntime);
        }
        let timeout = config.connect_timeout;
        let inspecting = RedLock(Coordinator::connect(config, false)?);
        inspecting.wait_for_nodes(timeout).await;
        Ok(inspecting.inspect(clock_window).await)
    }
}
