//! The chaos suite's shared parts: the history every run records (`history`), the checker
//! that reads it (`checker`), the contending workers that produce it (`workload`), the
//! candidates of the election scenarios (`election`), and a scenario's run around them,
//! whatever injects the faults (`run`).
//!
//! Used by tests/chaos_compose.rs (Docker Compose), tests/chaos_local.rs (local `redis-server`
//! processes) and examples/chaos_client.rs (the client run inside containers), each through
//! `#[path = ".../chaos/mod.rs"] mod chaos;`. docs/chaos.md describes the suite.
#![allow(dead_code, unreachable_pub)]

pub mod checker;
pub mod election;
pub mod history;
pub mod run;
pub mod workload;
