//! A pipeline's runtime settings, `runtime_config` as Feldera names them,
//! read once into [`RuntimeConfig`] when a client sends them. Fields Eddy
//! uses are typed and checked; Feldera's settings that have no effect here
//! (profilers, tracing, Kubernetes resources, clocks) are accepted so that
//! its clients' configurations are taken as they are; any other field is
//! refused by name. The JSON as sent is kept beside, only to echo it back.

mod units;

use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

pub use units::{Size, Span};

/// The most workers a pipeline runs: more would only add shards to step.
pub const MAX_WORKERS: u64 = 64;

/// Why a `runtime_config` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A field that does not read (unknown, of the wrong type, a value
    /// out of its range), by its path (empty: the whole config).
    #[error("'runtime_config{}': {reason}", if path.is_empty() { String::new() } else { format!(".{path}") })]
    Field {
        /// Where, as `fault_tolerance.model`.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// More workers than a pipeline runs.
    #[error("'runtime_config.workers' is {0}: a pipeline runs at most {MAX_WORKERS} workers")]
    TooManyWorkers(u64),
    /// A setting given under both its names.
    #[error("'runtime_config.{newer}' and '{older}' are one setting written twice: give one")]
    Twice {
        /// The newer name.
        newer: &'static str,
        /// The older one.
        older: &'static str,
    },
    /// More hosts than one.
    #[error("'runtime_config.hosts' is {0}: a pipeline runs on one host")]
    Hosts(u64),
}

/// `runtime_config`: Feldera's settings. Eddy reads those described; the
/// others are accepted and kept, not used. Unknown fields are a 400.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Shards of each keyed operator (1 when absent).
    #[serde(default, deserialize_with = "whole")]
    #[schema(schema_with = whole_schema)]
    pub workers: Option<u64>,
    /// Hosts the pipeline spans: one, here.
    #[serde(default, deserialize_with = "whole")]
    #[schema(schema_with = whole_schema)]
    pub hosts: Option<u64>,
    /// Records the input buffer holds.
    #[serde(default, deserialize_with = "whole")]
    #[schema(schema_with = whole_schema)]
    pub max_buffered_records: Option<u64>,
    /// Memory budget in MiB: past it, state goes to disk sooner.
    #[serde(default, deserialize_with = "whole")]
    #[schema(schema_with = whole_schema)]
    pub max_rss_mb: Option<u64>,
    /// The same budget as a size (`"2G"`, `"1536Mi"`), Feldera's newer name.
    #[serde(default, deserialize_with = "units::with_unit")]
    #[schema(value_type = Option<String>)]
    pub max_rss: Option<Size>,
    /// Whether (and how) state is kept in storage: `true`, `false` or
    /// `{min_storage_bytes, min_spill_size, cache_mib}`.
    #[serde(default)]
    #[schema(value_type = Value)]
    pub storage: Option<StorageSetting>,
    /// Checkpoints and the journal.
    #[serde(default, deserialize_with = "object")]
    pub fault_tolerance: Option<FaultToleranceConfig>,
    /// Resources; `memory_mb_max` bounds ad-hoc queries.
    #[serde(default, deserialize_with = "object")]
    pub resources: Option<Resources>,
    // Feldera's settings that Eddy accepts and does not need: its
    // profiler, tracing, batching delays, clocks, Kubernetes provisioning.
    #[serde(rename = "cpu_profiler")]
    _cpu_profiler: Option<Value>,
    #[serde(rename = "tracing")]
    _tracing: Option<Value>,
    #[serde(rename = "tracing_endpoint_jaeger")]
    _tracing_endpoint_jaeger: Option<Value>,
    #[serde(rename = "min_batch_size_records")]
    _min_batch_size_records: Option<Value>,
    #[serde(rename = "max_buffering_delay_usecs")]
    _max_buffering_delay_usecs: Option<Value>,
    #[serde(rename = "clock_resolution_usecs")]
    _clock_resolution_usecs: Option<Value>,
    #[serde(rename = "clock_timezone_offset")]
    _clock_timezone_offset: Option<Value>,
    #[serde(rename = "pin_cpus")]
    _pin_cpus: Option<Value>,
    #[serde(rename = "provisioning_timeout_secs")]
    _provisioning_timeout_secs: Option<Value>,
    #[serde(rename = "max_parallel_connector_init")]
    _max_parallel_connector_init: Option<Value>,
    #[serde(rename = "init_containers")]
    _init_containers: Option<Value>,
    #[serde(rename = "checkpoint_during_suspend")]
    _checkpoint_during_suspend: Option<Value>,
    #[serde(rename = "http_workers")]
    _http_workers: Option<Value>,
    #[serde(rename = "io_workers")]
    _io_workers: Option<Value>,
    #[serde(rename = "dev_tweaks")]
    _dev_tweaks: Option<Value>,
    #[serde(rename = "logging")]
    _logging: Option<Value>,
    #[serde(rename = "env")]
    _env: Option<Value>,
    #[serde(rename = "datafusion_memory_mb")]
    _datafusion_memory_mb: Option<Value>,
    #[serde(rename = "datafusion_memory")]
    _datafusion_memory: Option<Value>,
    #[serde(rename = "max_buffering_delay")]
    _max_buffering_delay: Option<Value>,
    #[serde(rename = "clock_resolution")]
    _clock_resolution: Option<Value>,
    #[serde(rename = "provisioning_timeout")]
    _provisioning_timeout: Option<Value>,
}

/// `storage`: `true`, `false`, or its options (storage on).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub enum StorageSetting {
    /// On or off.
    Enabled(bool),
    /// On, with options.
    Options(Box<StorageOptions>),
}

impl TryFrom<Value> for StorageSetting {
    type Error = String;
    fn try_from(v: Value) -> Result<Self, String> {
        match v {
            Value::Bool(b) => Ok(Self::Enabled(b)),
            Value::Object(_) => serde_json::from_value(v)
                .map(|o| Self::Options(Box::new(o)))
                .map_err(|e| format!("storage: {e}")),
            other => Err(format!(
                "storage must be true, false or an object, not {other}"
            )),
        }
    }
}

/// `storage`'s options.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageOptions {
    /// Bytes from which a state batch goes to disk.
    #[serde(default, deserialize_with = "whole")]
    pub min_storage_bytes: Option<u64>,
    /// The same as a size (`"10Mi"`), Feldera's newer name.
    #[serde(default, deserialize_with = "units::bytes")]
    pub min_spill_size: Option<Size>,
    /// The block cache, in MiB.
    #[serde(default, deserialize_with = "whole")]
    pub cache_mib: Option<u64>,
    /// Feldera's: the backend (a folder here), step sizes, compression.
    #[serde(rename = "backend")]
    _backend: Option<Value>,
    #[serde(rename = "min_step_storage_bytes")]
    _min_step_storage_bytes: Option<Value>,
    #[serde(rename = "compression")]
    _compression: Option<Value>,
}

/// `fault_tolerance`, as Feldera names it: periodic checkpoints, the HTTP
/// ingress journal and exactly-once outputs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FaultToleranceConfig {
    /// `exactly_once` when absent; `null` is none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<FaultToleranceModel>)]
    pub model: Option<Option<FaultToleranceModel>>,
    /// Seconds between periodic checkpoints (60 when absent).
    #[serde(default, deserialize_with = "whole")]
    #[schema(schema_with = whole_schema)]
    pub checkpoint_interval_secs: Option<u64>,
    /// The same as a duration (`"60s"`, `"5m"`), Feldera's newer name.
    #[serde(default, deserialize_with = "units::span")]
    #[schema(value_type = Option<String>)]
    pub checkpoint_interval: Option<Span>,
}

/// The schema of what [`whole`] reads: any whole number from 0 (not held
/// to 64-bit signed, as utoipa's `u64` would say), or null.
fn whole_schema() -> utoipa::openapi::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(0))
        .build()
}

/// A whole number, or `null`; anything else is refused as not one.
fn whole<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::{Error, Unexpected};
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        Value::Number(n) if n.is_u64() => Ok(n.as_u64()),
        v => {
            let unexpected = match &v {
                Value::Number(n) => n.as_i64().map_or(
                    Unexpected::Float(n.as_f64().unwrap_or(0.0)),
                    Unexpected::Signed,
                ),
                Value::String(s) => Unexpected::Str(s),
                Value::Bool(b) => Unexpected::Bool(*b),
                Value::Array(_) => Unexpected::Seq,
                _ => Unexpected::Map,
            };
            Err(D::Error::invalid_type(unexpected, &"a whole number"))
        }
    }
}

/// An object, or `null`: serde would read a struct from a list as well.
fn object<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    use serde::de::Error;
    match Value::deserialize(d)? {
        Value::Null => Ok(None),
        v @ Value::Object(_) => serde_json::from_value(v)
            .map(Some)
            .map_err(D::Error::custom),
        other => Err(D::Error::custom(format!("must be an object, not {other}"))),
    }
}

/// A field that is present, `null` or not.
fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// `fault_tolerance.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum FaultToleranceModel {
    /// Every input once in the outputs.
    ExactlyOnce,
    /// Inputs replayed after a failure may appear twice in outputs.
    AtLeastOnce,
    /// No fault tolerance.
    None,
}

/// `resources`: Feldera's Kubernetes resources; Eddy reads `memory_mb_max`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Memory in MiB; a quarter bounds each ad-hoc query.
    #[serde(default, deserialize_with = "whole")]
    #[schema(schema_with = whole_schema)]
    pub memory_mb_max: Option<u64>,
    /// The same as a size (`"4Gi"`), Feldera's newer name.
    #[serde(default, deserialize_with = "units::with_unit")]
    #[schema(value_type = Option<String>)]
    pub memory_max: Option<Size>,
    #[serde(rename = "memory_mb_min")]
    _memory_mb_min: Option<Value>,
    #[serde(rename = "cpu_cores_min")]
    _cpu_cores_min: Option<Value>,
    #[serde(rename = "cpu_cores_max")]
    _cpu_cores_max: Option<Value>,
    #[serde(rename = "storage_mb_max")]
    _storage_mb_max: Option<Value>,
    #[serde(rename = "storage_class")]
    _storage_class: Option<Value>,
    #[serde(rename = "service_account_name")]
    _service_account_name: Option<Value>,
    #[serde(rename = "namespace")]
    _namespace: Option<Value>,
    #[serde(rename = "memory_min")]
    _memory_min: Option<Value>,
    #[serde(rename = "storage_max")]
    _storage_max: Option<Value>,
    #[serde(rename = "storage_min")]
    _storage_min: Option<Value>,
    #[serde(rename = "storage_mb_min")]
    _storage_mb_min: Option<Value>,
    #[serde(rename = "volume_attributes_class")]
    _volume_attributes_class: Option<Value>,
}

/// The fault tolerance a runtime config asks for: `exactly_once` (else
/// `at_least_once`) and the seconds between periodic checkpoints, held to
/// 1..=3600.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultTolerance {
    /// `exactly_once` (else `at_least_once`).
    pub exactly_once: bool,
    /// Seconds between periodic checkpoints.
    pub checkpoint_interval_secs: u64,
}

impl RuntimeConfig {
    /// Reads and checks a runtime config as a client sent it.
    pub fn from_value(value: &Value) -> Result<Self, ConfigError> {
        if value.is_null() {
            return Ok(Self::default());
        }
        let config: Self =
            serde_path_to_error::deserialize(value.clone()).map_err(|e| ConfigError::Field {
                path: match e.path().iter().next() {
                    Some(_) => e.path().to_string(),
                    None => String::new(),
                },
                reason: e.inner().to_string(),
            })?;
        if let Some(n) = config.workers.filter(|&n| n > MAX_WORKERS) {
            return Err(ConfigError::TooManyWorkers(n));
        }
        let ft = config.fault_tolerance.unwrap_or_default();
        let storage = config.storage_options();
        let resources = config.resources.clone().unwrap_or_default();
        for (given, newer, older) in [
            (
                config.max_rss.is_some() && config.max_rss_mb.is_some(),
                "max_rss",
                "max_rss_mb",
            ),
            (
                ft.checkpoint_interval.is_some() && ft.checkpoint_interval_secs.is_some(),
                "fault_tolerance.checkpoint_interval",
                "fault_tolerance.checkpoint_interval_secs",
            ),
            (
                storage.min_spill_size.is_some() && storage.min_storage_bytes.is_some(),
                "storage.min_spill_size",
                "storage.min_storage_bytes",
            ),
            (
                resources.memory_max.is_some() && resources.memory_mb_max.is_some(),
                "resources.memory_max",
                "resources.memory_mb_max",
            ),
        ] {
            if given {
                return Err(ConfigError::Twice { newer, older });
            }
        }
        if let Some(h) = config.hosts.filter(|&h| h > 1) {
            return Err(ConfigError::Hosts(h));
        }
        Ok(config)
    }

    /// Workers (1 when absent).
    pub fn workers(&self) -> usize {
        self.workers.unwrap_or(1).clamp(1, MAX_WORKERS) as usize
    }

    /// Whether state is kept in storage: unless `storage` is `false`.
    pub fn storage_enabled(&self) -> bool {
        !matches!(self.storage, Some(StorageSetting::Enabled(false)))
    }

    /// `storage`'s options (none given: the defaults).
    pub fn storage_options(&self) -> StorageOptions {
        match &self.storage {
            Some(StorageSetting::Options(o)) => (**o).clone(),
            _ => StorageOptions::default(),
        }
    }

    /// The fault tolerance asked for (`None`: none).
    pub fn fault_tolerance(&self) -> Option<FaultTolerance> {
        let ft = self.fault_tolerance?;
        let exactly_once = match ft.model {
            None | Some(Some(FaultToleranceModel::ExactlyOnce)) => true,
            Some(Some(FaultToleranceModel::AtLeastOnce)) => false,
            Some(None | Some(FaultToleranceModel::None)) => return None,
        };
        let secs = ft
            .checkpoint_interval
            .map(Span::seconds)
            .or(ft.checkpoint_interval_secs)
            .unwrap_or(60);
        Some(FaultTolerance {
            exactly_once,
            checkpoint_interval_secs: secs.clamp(1, 3600),
        })
    }

    /// The memory budget in bytes, if one is set.
    pub fn max_rss_bytes(&self) -> Option<u64> {
        (self.max_rss.map(|s| s.0)).or(self.max_rss_mb.map(|mb| mb.saturating_mul(1 << 20)))
    }

    /// `resources.memory_max` (or `memory_mb_max`) in bytes.
    pub fn memory_max_bytes(&self) -> Option<u64> {
        let r = self.resources.as_ref()?;
        (r.memory_max.map(|s| s.0)).or(r.memory_mb_max.map(|mb| mb.saturating_mul(1 << 20)))
    }

    /// `storage.min_spill_size` (or `min_storage_bytes`).
    pub fn min_storage_bytes(&self) -> Option<u64> {
        let o = self.storage_options();
        o.min_spill_size.map(|s| s.0).or(o.min_storage_bytes)
    }

    /// The memory budget in MiB (rounded up), if one is set.
    pub fn max_rss_mib(&self) -> Option<u64> {
        self.max_rss_bytes().map(|b| b.div_ceil(1 << 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Result<RuntimeConfig, String> {
        RuntimeConfig::from_value(&v).map_err(|e| e.to_string())
    }

    /// What Feldera's Python client sends by default is taken as it is.
    #[test]
    fn feldera_clients_configs_are_taken() {
        let sent = json!({
            "max_rss_mb": null,
            "workers": 4, "tracing": false, "tracing_endpoint_jaeger": "",
            "cpu_profiler": true, "max_buffering_delay_usecs": 0,
            "min_batch_size_records": 0,
            "fault_tolerance": {"model": "at_least_once", "checkpoint_interval_secs": null},
            "resources": {"cpu_cores_max": null, "memory_mb_max": 512, "storage_class": null},
            "storage": {"min_storage_bytes": null},
        });
        let c = read(sent).unwrap();
        assert_eq!(c.workers(), 4);
        assert_eq!(
            c.fault_tolerance(),
            Some(FaultTolerance {
                exactly_once: false,
                checkpoint_interval_secs: 60
            })
        );
        assert_eq!(c.memory_max_bytes(), Some(512 << 20));
        assert!(c.storage_enabled());
        assert_eq!(read(json!({})).unwrap(), RuntimeConfig::default());
        assert_eq!(read(Value::Null).unwrap(), RuntimeConfig::default());
    }

    /// Feldera's newer client writes sizes and durations as text.
    #[test]
    fn newer_feldera_names_read_as_sizes_and_durations() {
        let sent = json!({
            "max_rss": "2Gi", "max_buffering_delay": "1ms", "clock_resolution": "1s",
            "fault_tolerance": {"model": "exactly_once", "checkpoint_interval": "5m"},
            "resources": {"memory_max": "4Gi", "volume_attributes_class": null, "storage_min": "1G"},
            "storage": {"min_spill_size": "10Mi"},
        });
        let c = read(sent).unwrap();
        assert_eq!(c.max_rss_bytes(), Some(2 << 30));
        assert_eq!(c.max_rss_mib(), Some(2048));
        assert_eq!(c.memory_max_bytes(), Some(4 << 30));
        assert_eq!(c.min_storage_bytes(), Some(10 << 20));
        assert_eq!(c.fault_tolerance().unwrap().checkpoint_interval_secs, 300);
        let twice = read(json!({"max_rss": "1G", "max_rss_mb": 1000})).unwrap_err();
        assert!(twice.contains("written twice"), "{twice}");
        let bare = read(json!({"max_rss": "16000"})).unwrap_err();
        assert!(
            bare.contains("'runtime_config.max_rss'") && bare.contains("no unit"),
            "{bare}"
        );
    }

    #[test]
    fn wrong_fields_are_refused_by_name() {
        let err = |v: Value| read(v).unwrap_err();
        let wokers = err(json!({"wokers": 2}));
        assert!(
            wokers.starts_with("'runtime_config.wokers': unknown field `wokers`"),
            "{wokers}"
        );
        assert!(err(json!({"workers": -1})).contains("expected a whole number"));
        let four = err(json!({"workers": "four"}));
        assert!(four.contains("'runtime_config.workers'"), "{four}");
        let nested = err(json!({"storage": {"cache_mib": 1.5}}));
        assert!(nested.contains("whole number"), "{nested}");
        assert!(err(json!({"workers": 65})).contains("at most 64"));
        assert!(err(json!({"hosts": 3})).contains("one host"));
        assert!(err(json!({"storage": "yes"})).contains("storage"));
        assert!(err(json!({"storage": {"cache": 3}})).contains("storage"));
        assert!(err(json!({"fault_tolerance": {"model": "twice"}})).contains("twice"));
        assert!(err(json!({"resources": {"gpus": 1}})).contains("unknown field `gpus`"));
        let list = err(json!({"fault_tolerance": [null, null]}));
        assert!(list.contains("must be an object"), "{list}");
        assert!(!read(json!({"storage": false})).unwrap().storage_enabled());
        let none = read(json!({"fault_tolerance": {"model": "none"}})).unwrap();
        assert_eq!(none.fault_tolerance(), None);
        let null = read(json!({"fault_tolerance": {"model": null}})).unwrap();
        assert_eq!(null.fault_tolerance(), None);
        let exact = read(json!({"fault_tolerance": {"checkpoint_interval_secs": 0}})).unwrap();
        assert_eq!(
            exact
                .fault_tolerance()
                .map(|f| (f.exactly_once, f.checkpoint_interval_secs)),
            Some((true, 1))
        );
    }
}
