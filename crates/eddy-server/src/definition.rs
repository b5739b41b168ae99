//! Pipeline definitions: what a client sends (`PipelineUpdate`), what is
//! kept in the data directory (`PipelineDef`), and the checks of what
//! clients may name and set.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult};

/// A pipeline's definition as the user gave it; saved as JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PipelineDef {
    /// Unique id (a UUID).
    pub id: String,
    /// Name, unique on the server.
    pub name: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
    /// The SQL program.
    pub program_code: String,
    /// Runtime settings (`workers`, `max_buffered_records`, …), kept as given.
    #[serde(default = "empty_object")]
    pub runtime_config: Value,
    /// Program settings, kept as given.
    #[serde(default = "empty_object")]
    pub program_config: Value,
    /// Kept for Feldera's clients; Eddy has no Rust UDFs.
    #[serde(default)]
    pub udf_rust: String,
    /// Kept for Feldera's clients.
    #[serde(default)]
    pub udf_toml: String,
    /// Tags, kept as given.
    #[serde(default)]
    pub tags: Vec<String>,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// Bumped by every change of the definition.
    pub version: u64,
    /// Bumped by every change of the program.
    pub program_version: u64,
}

pub(crate) fn empty_object() -> Value {
    json!({})
}

/// What a client may send to create or change a pipeline.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineUpdate {
    /// Name (must match the path when given there).
    pub name: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// The SQL program.
    pub program_code: Option<String>,
    /// Runtime settings.
    pub runtime_config: Option<Value>,
    /// Program settings.
    pub program_config: Option<Value>,
    /// Ignored (Feldera's Rust UDFs).
    pub udf_rust: Option<String>,
    /// Ignored (Feldera's Rust UDFs).
    pub udf_toml: Option<String>,
    /// Tags.
    pub tags: Option<Vec<String>>,
}

/// Checks a pipeline name: 1 to 100 letters, digits, `_` or `-`.
pub fn check_name(name: &str) -> ApiResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "InvalidName",
            format!("invalid pipeline name '{name}': use 1 to 100 letters, digits, '_' or '-'"),
        ))
    }
}

/// Checks the runtime settings Eddy reads: each a whole number when given.
pub fn check_runtime_config(config: &Value) -> ApiResult<()> {
    if let Some(r) = config.get("resources") {
        if !(r.is_object() || r.is_null()) {
            return Err(ApiError::bad_request(
                "'runtime_config.resources' must be a JSON object",
            ));
        }
    }
    match config.get("storage") {
        None | Some(Value::Null) | Some(Value::Bool(_)) | Some(Value::Object(_)) => {}
        Some(v) => {
            return Err(ApiError::bad_request(format!(
                "'runtime_config.storage' must be true, false or an object, not {v}"
            )))
        }
    }
    fault_tolerance(config).map_err(ApiError::bad_request)?;
    if let Some(n) = config.get("workers").and_then(Value::as_u64) {
        let max = crate::deploy::MAX_WORKERS;
        if n > max {
            return Err(ApiError::bad_request(format!(
                "'runtime_config.workers' is {n}: a pipeline runs at most {max} workers"
            )));
        }
    }
    for pointer in [
        "/workers",
        "/max_buffered_records",
        "/resources/memory_mb_max",
        "/max_rss_mb",
        "/storage/min_storage_bytes",
        "/storage/cache_mib",
    ] {
        match config.pointer(pointer) {
            None | Some(Value::Null) => {}
            Some(v) if v.is_u64() => {}
            Some(v) => {
                return Err(ApiError::bad_request(format!(
                    "'runtime_config{}' must be a whole number, not {v}",
                    pointer.replace('/', ".")
                )))
            }
        }
    }
    Ok(())
}

/// `runtime_config.fault_tolerance`, as Feldera names it: `{"model":
/// "exactly_once" | "at_least_once" | "none", "checkpoint_interval_secs":
/// n}`. A present object without a model means `exactly_once`; the interval
/// defaults to 60 seconds and is held to 1..=3600.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultTolerance {
    /// `exactly_once` (else `at_least_once`).
    pub exactly_once: bool,
    /// Seconds between periodic checkpoints.
    pub checkpoint_interval_secs: u64,
}

/// The fault tolerance a runtime config asks for (`None`: none).
pub fn fault_tolerance(config: &Value) -> Result<Option<FaultTolerance>, String> {
    let ft = match config.get("fault_tolerance") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(format!(
                "'runtime_config.fault_tolerance' must be an object, not {v}"
            ))
        }
    };
    // Every field is checked, whatever the model.
    let interval = match ft.get("checkpoint_interval_secs") {
        None | Some(Value::Null) => 60,
        Some(v) => v.as_u64().ok_or_else(|| {
            format!("'runtime_config.fault_tolerance.checkpoint_interval_secs' must be a whole number, not {v}")
        })?,
    };
    let exactly_once = match ft.get("model") {
        None => true,
        Some(Value::String(m)) => match m.as_str() {
            "exactly_once" => true,
            "at_least_once" => false,
            "none" => return Ok(None),
            other => {
                return Err(format!(
                    "'runtime_config.fault_tolerance.model' must be \"exactly_once\", \"at_least_once\" or \"none\", not \"{other}\""
                ))
            }
        },
        Some(Value::Null) => return Ok(None),
        Some(v) => {
            return Err(format!(
                "'runtime_config.fault_tolerance.model' must be a string, not {v}"
            ))
        }
    };
    Ok(Some(FaultTolerance {
        exactly_once,
        checkpoint_interval_secs: interval.clamp(1, 3600),
    }))
}

/// Applies a client's change to a definition, bumping its versions.
pub fn apply(def: &mut PipelineDef, update: PipelineUpdate) {
    if let Some(d) = update.description {
        def.description = d;
    }
    if let Some(code) = update.program_code {
        if code != def.program_code {
            def.program_code = code;
            def.program_version += 1;
        }
    }
    if let Some(c) = update.runtime_config {
        def.runtime_config = c;
    }
    if let Some(c) = update.program_config {
        def.program_config = c;
    }
    if let Some(u) = update.udf_rust {
        def.udf_rust = u;
    }
    if let Some(u) = update.udf_toml {
        def.udf_toml = u;
    }
    if let Some(t) = update.tags {
        def.tags = t;
    }
    def.version += 1;
}
