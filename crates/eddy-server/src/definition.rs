//! Pipeline definitions: what a client sends (`PipelineUpdate`), what is
//! kept in the data directory (`PipelineDef`), and the checks of what
//! clients may name and set.

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::runtime_config::{ConfigError, RuntimeConfig};

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
    /// Runtime settings (`workers`, `max_buffered_records`, …).
    #[serde(default)]
    pub runtime_config: RuntimeSettings,
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

/// The body of `POST /v0/pipelines` (`name` and `program_code` needed),
/// `PUT /v0/pipelines/{name}` (`program_code` needed) and `PATCH
/// /v0/pipelines/{name}` (the fields to change; absent or null ones are
/// kept). `name`, when given with a path, must be the path's. Unknown
/// fields are a 400.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = PipelineDefinition)]
pub struct PipelineUpdate {
    /// The pipeline's name.
    #[schema(pattern = "^[A-Za-z0-9_-]{1,100}$")]
    pub name: Option<String>,
    /// Free text.
    pub description: Option<String>,
    /// The SQL program; checked on the spot.
    pub program_code: Option<String>,
    /// Runtime settings.
    #[schema(value_type = Option<RuntimeConfig>)]
    pub runtime_config: Option<Value>,
    /// Program settings, kept as given.
    pub program_config: Option<Value>,
    /// Kept, unused (Feldera's Rust UDFs).
    pub udf_rust: Option<String>,
    /// Kept, unused.
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

/// A pipeline's `runtime_config`: as the client sent it (echoed back) and
/// as read ([`RuntimeConfig`]). A client's is checked before it is kept;
/// one kept by an older version that this one refuses is loaded with its
/// error, which a start reports.
#[derive(Debug, Clone)]
pub struct RuntimeSettings {
    raw: Value,
    typed: Result<RuntimeConfig, ConfigError>,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            raw: empty_object(),
            typed: Ok(RuntimeConfig::default()),
        }
    }
}

impl RuntimeSettings {
    /// Reads what a client sent, refusing what does not read.
    pub fn new(raw: Value) -> Result<Self, ConfigError> {
        let typed = RuntimeConfig::from_value(&raw)?;
        Ok(Self {
            raw,
            typed: Ok(typed),
        })
    }

    /// The settings as sent.
    pub fn raw(&self) -> &Value {
        &self.raw
    }

    /// The settings as read, or why they are refused.
    pub fn checked(&self) -> Result<&RuntimeConfig, ConfigError> {
        self.typed.as_ref().map_err(Clone::clone)
    }

    /// The settings as read (the defaults where they are refused, which
    /// only a start looks past, by [`checked`](Self::checked)).
    pub fn get(&self) -> &RuntimeConfig {
        static DEFAULT: std::sync::OnceLock<RuntimeConfig> = std::sync::OnceLock::new();
        self.typed
            .as_ref()
            .unwrap_or_else(|_| DEFAULT.get_or_init(RuntimeConfig::default))
    }
}

impl Serialize for RuntimeSettings {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for RuntimeSettings {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        let typed = RuntimeConfig::from_value(&raw);
        Ok(Self { raw, typed })
    }
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
        let typed = RuntimeConfig::from_value(&c);
        def.runtime_config = RuntimeSettings { raw: c, typed };
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
