//! What one client may ask of a shared server: sizes, counts and times,
//! each with a flag of `eddy serve` and a documented default.

use std::time::Duration;

use crate::query::QueryLimits;

/// The limits a server enforces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest request body that is read whole: pipeline definitions
    /// (`PUT`/`POST`/`PATCH`). Ingress bodies are streamed and not bounded in
    /// size, only in memory.
    pub max_body_bytes: usize,
    /// Largest program text (and ad-hoc query text).
    pub max_program_bytes: usize,
    /// Most pipelines defined on the server.
    pub max_pipelines: usize,
    /// Most egress streams open at once on one pipeline.
    pub max_egress_streams: usize,
    /// Memory of one ad-hoc query, for pipelines that set no memory budget
    /// (`runtime_config.resources.memory_max` or `memory_mb_max`); those
    /// that do get a quarter of it.
    pub query_memory_bytes: usize,
    /// Time one ad-hoc query may run.
    pub query_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_body_bytes: 16 << 20,
            max_program_bytes: 1 << 20,
            max_pipelines: 100,
            max_egress_streams: 16,
            query_memory_bytes: 1 << 30,
            query_timeout: Duration::from_secs(60),
        }
    }
}

impl Limits {
    /// The limits of an ad-hoc query of a pipeline whose runtime settings
    /// are `runtime_config`.
    pub fn query(&self, runtime_config: &crate::runtime_config::RuntimeConfig) -> QueryLimits {
        let memory_bytes = match runtime_config.memory_max_bytes() {
            Some(bytes) => usize::try_from(bytes / 4).unwrap_or(usize::MAX),
            None => self.query_memory_bytes,
        };
        QueryLimits {
            memory_bytes: memory_bytes.max(1 << 20),
            timeout: self.query_timeout,
            max_text_bytes: self.max_program_bytes,
        }
    }
}
