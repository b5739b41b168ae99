//! The `/stats` document, in the shape of Feldera's: typed, so that the
//! OpenAPI description is generated from what is sent.

use std::collections::BTreeMap;

use serde::Serialize;
use utoipa::ToSchema;

/// A running or paused pipeline's counters.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = PipelineStats)]
pub struct StatsReport {
    pub global_metrics: GlobalMetrics,
    /// Changes dropped as late, per table or view that declares a LATENESS.
    pub late_records: BTreeMap<String, u64>,
    /// Deletions refused, per table declared WITH ('append_only' = 'true').
    pub refused_deletions: BTreeMap<String, u64>,
    /// Change rows each view has output over all steps.
    pub view_changes: BTreeMap<String, u64>,
    /// Each operator that keeps state (and each view's or materialized
    /// table's contents), as of a recent step.
    pub operators: Vec<OperatorReport>,
    /// Always null (Feldera's suspend).
    pub suspend_error: Option<String>,
    pub inputs: Vec<EndpointReport>,
    pub outputs: Vec<EndpointReport>,
}

/// The pipeline's counters as a whole.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GlobalMetrics {
    /// `Running` or `Paused`.
    pub state: &'static str,
    /// Always false.
    pub bootstrap_in_progress: bool,
    /// The server's resident memory.
    pub rss_bytes: u64,
    /// CPU time of the pipeline's worker thread (its steps and outputs;
    /// not its connectors' threads), in milliseconds.
    pub cpu_msecs: u64,
    /// When the pipeline started, seconds since the epoch.
    pub start_time: u64,
    pub uptime_msecs: u64,
    /// This run of the pipeline (a new one each start).
    #[schema(format = "uuid")]
    pub incarnation_uuid: String,
    /// Bytes of state batches in the pipeline's storage files.
    pub storage_bytes: u64,
    /// State batch files in the pipeline's storage folder.
    pub storage_files: u64,
    /// Of `state_memory_bytes`, what the state in files keeps in memory
    /// to be read: their fences and Bloom filters.
    pub storage_index_bytes: u64,
    /// Bytes written to storage files since the pipeline started.
    pub storage_written_bytes: u64,
    /// State batches that could not be written to storage (they stayed in
    /// memory).
    pub storage_write_errors: u64,
    /// Why storage is degraded, while it is.
    pub storage_degraded: Option<String>,
    /// Free bytes on the storage folder's file system.
    pub storage_free_bytes: Option<u64>,
    /// Journal writes and checkpoints that failed.
    pub durability_failures: u64,
    /// Merges of state batches into storage files run off the step's
    /// critical path.
    pub storage_background_merges: u64,
    /// Bytes of storage file blocks held by the block cache.
    pub storage_cache_bytes: u64,
    /// Bytes the block cache may hold (`runtime_config.storage.cache_mib`).
    pub storage_cache_capacity_bytes: u64,
    /// Reads of storage file blocks answered by the block cache.
    pub storage_cache_hits: u64,
    /// Reads of storage file blocks that went to the file.
    pub storage_cache_misses: u64,
    pub buffered_input_records: u64,
    pub total_input_records: u64,
    /// Bytes the inputs received (HTTP bodies, messages, files).
    pub total_input_bytes: u64,
    pub total_processed_records: u64,
    pub total_completed_records: u64,
    /// Every input connector is at its end and all it fed was processed.
    pub pipeline_complete: bool,
    pub transaction_status: &'static str,
    pub transaction_id: u64,
    /// Steps taken.
    pub steps: u64,
    pub last_step_latency_micros: u64,
    /// Changes dropped as late (LATENESS), all relations.
    pub late_records: u64,
    /// Deletions refused by tables declared append_only, all tables.
    pub refused_deletions: u64,
    /// Bytes of state kept by the operators and the views' contents, as of
    /// a recent step.
    pub state_memory_bytes: u64,
    /// Entries (rows, keys, groups) of that state.
    pub state_entries: u64,
}

/// The state one operator keeps.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OperatorReport {
    pub node: u64,
    pub operator: String,
    pub entries: u64,
    pub memory_bytes: u64,
    /// Bytes of the operator's state batches in storage files.
    pub storage_bytes: u64,
    /// The workers the operator's state is split over
    /// (`runtime_config.workers` for an operator partitioned by a key, 1
    /// for the others).
    pub shards: u64,
}

/// One connector's counters.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = EndpointStats)]
pub struct EndpointReport {
    pub endpoint_name: String,
    pub config: EndpointConfig,
    pub metrics: EndpointMetrics,
    pub paused: bool,
    pub barrier: bool,
    /// The error that stopped the connector (its input or output ends
    /// there), if one did.
    pub fatal_error: Option<String>,
    /// The connector's last error, if any.
    pub last_error: Option<String>,
}

/// What a connector feeds or drains.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndpointConfig {
    /// The table or view.
    pub stream: String,
}

/// A connector's counters: inputs add `num_parse_errors` and
/// `end_of_input`, outputs `transmitted_records`, `transmitted_bytes`,
/// `dropped_records` and `num_encode_errors`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EndpointMetrics {
    pub total_bytes: u64,
    pub total_records: u64,
    pub num_transport_errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_parse_errors: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_of_input: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transmitted_records: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transmitted_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_records: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_encode_errors: Option<u64>,
}
