//! A pipeline's descriptor as the API answers it (Feldera's shape): what
//! `GET /v0/pipelines/{name}` and the definition changes return, typed so
//! that the OpenAPI description is generated from what is sent.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::checked::{ProgramInfo, SqlCompilation};
use crate::error::ErrorBody;

/// Deployment states reported to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[schema(as = DeploymentStatus)]
pub enum Deployment {
    /// Not running; no state.
    Stopped,
    /// Steps run as input arrives.
    Running,
    /// Running, and taking the steps of the input replayed from its
    /// journal after a restart: the views do not yet hold everything the
    /// pipeline had taken before (Feldera's `Replaying`).
    Replaying,
    /// Running, but no steps are taken and connectors wait.
    Paused,
    /// Finishing its last step.
    Stopping,
}

/// Whether the program checked.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum ProgramStatus {
    /// It checked; the pipeline can start.
    Success,
    /// It did not; `program_error` says why.
    SqlError,
}

/// Feldera's resources status: a pipeline here runs in the server.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum ResourcesStatus {
    /// Not running.
    Stopped,
    /// Running or paused.
    Provisioned,
}

/// Whether the pipeline keeps a storage folder.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub enum StorageStatus {
    /// No state kept.
    Cleared,
    /// Running, or stopped with checkpoints.
    InUse,
}

/// The program's errors, as Feldera's compiler reports them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProgramError {
    /// The SQL errors (none when the program checked).
    pub sql_compilation: SqlCompilation,
    /// Always null (there is no Rust compilation).
    pub rust_compilation: Option<Value>,
    /// Always null.
    pub system_error: Option<Value>,
}

/// A pipeline's descriptor. With `selector=status` the fields
/// `program_code`, `udf_rust`, `udf_toml`, `program_config`,
/// `runtime_config` and `program_info` are left out.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Pipeline)]
pub struct PipelineDescriptor {
    #[schema(format = "uuid")]
    pub id: String,
    #[schema(pattern = "^[A-Za-z0-9_-]{1,100}$")]
    pub name: String,
    pub description: String,
    #[schema(format = DateTime)]
    pub created_at: String,
    /// Counts definition changes, from 1.
    #[schema(minimum = 1)]
    pub version: u64,
    /// This server's version.
    pub platform_version: String,
    /// Counts program changes.
    pub program_version: u64,
    pub program_status: ProgramStatus,
    #[schema(format = DateTime)]
    pub program_status_since: String,
    pub program_error: ProgramError,
    pub deployment_status: Deployment,
    #[schema(format = DateTime)]
    pub deployment_status_since: String,
    pub deployment_desired_status: Deployment,
    #[schema(format = DateTime)]
    pub deployment_desired_status_since: String,
    /// The last deployment error (`StartFailed`, `WorkerFailed`), or null.
    pub deployment_error: Option<ErrorBody>,
    /// `AwaitingApproval` while a changed program waits for `POST
    /// /approve`; otherwise the deployment status of a running or paused
    /// pipeline, null when stopped.
    pub deployment_runtime_status: Option<String>,
    /// What a changed program keeps and computes: `{"tables": {"added",
    /// "modified", "removed", "unchanged"}, "views": {…}}`, while it awaits
    /// approval and after a start that bootstrapped; null otherwise.
    pub deployment_runtime_status_details: Option<Value>,
    /// Always null.
    pub deployment_id: Option<String>,
    /// Always null.
    pub deployment_initial: Option<String>,
    pub deployment_resources_status: ResourcesStatus,
    pub deployment_resources_desired_status: ResourcesStatus,
    pub storage_status: StorageStatus,
    /// Set while storage is degraded (`StorageDegraded`): the pipeline runs
    /// and answers reads, refuses input it cannot journal, and retries
    /// checkpoints.
    pub storage_error: Option<ErrorBody>,
    /// The checkpoint the last start resumed from, if any.
    pub checkpoint_resumed: Option<u64>,
    pub refresh_version: u64,
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_code: Option<String>,
    /// Kept, unused (Feldera's Rust UDFs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udf_rust: Option<String>,
    /// Kept, unused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udf_toml: Option<String>,
    /// As given (an object unless the client sent something else).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program_config: Option<Value>,
    /// As given (an object unless the client sent something else).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_config: Option<Value>,
    /// The schema and connectors; null when the program has an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<ProgramInfo>)]
    pub program_info: Option<Option<ProgramInfo>>,
}
