//! The one way a format is chosen: a connector's `"format": {"name": …,
//! "config": {…}}` (or an HTTP endpoint's query) read once into a
//! [`FormatConfig`], whose configuration types refuse fields they do not
//! know by name, then turned into what a reader or a writer needs.
//!
//! Text formats, which a byte stream carries and which may be cut at line
//! ends: `json` (Feldera's update formats `insert_delete`, `raw`,
//! `weighted` and `debezium`, newline-delimited or, with `array`, one JSON
//! array) and `csv` (one row to insert per record; written with the row's
//! weight last). Binary formats: `avro` (messages, see [`crate::avro`]) and
//! `parquet` (files, see [`crate::parquet`]). `raw` ([`crate::raw`]) takes
//! a byte stream's chunks or lines as they are, bytes and all.

use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::avro::AvroConfig;
use crate::json::UpdateFormat;
use crate::raw::RawConfig;
use crate::Parsed;

/// Why a format cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// A name that is no format.
    #[error("unknown format '{0}' (json, csv, avro, parquet, raw)")]
    Unknown(String),
    /// A configuration that does not read: an unknown field, a wrong type.
    #[error("format '{format}': {reason}")]
    Config {
        /// The format's name.
        format: &'static str,
        /// What is wrong, naming the field.
        reason: String,
    },
    /// A configuration that reads but cannot be used where it is given.
    #[error("format '{format}': {reason}")]
    Unsupported {
        /// The format's name.
        format: &'static str,
        /// Why not, and what can be used instead.
        reason: String,
    },
}

/// The kinds of format, for transports to say which they carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatKind {
    /// JSON changes.
    Json,
    /// CSV records.
    Csv,
    /// Avro messages.
    Avro,
    /// Parquet files.
    Parquet,
    /// Bytes as they arrive.
    Raw,
}

impl FormatKind {
    /// The format's name, as written in a connector.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Csv => "csv",
            Self::Avro => "avro",
            Self::Parquet => "parquet",
            Self::Raw => "raw",
        }
    }
}

/// A connector's format, with its configuration.
#[derive(Debug, Clone, PartialEq)]
pub enum FormatConfig {
    /// JSON changes.
    Json(JsonConfig),
    /// CSV records.
    Csv(CsvConfig),
    /// Avro messages.
    Avro(AvroConfig),
    /// Parquet files.
    Parquet(ParquetConfig),
    /// Bytes as they arrive.
    Raw(RawConfig),
}

/// `json`'s configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JsonConfig {
    /// How each change is written (`insert_delete` when absent).
    pub update_format: UpdateFormat,
    /// One JSON array of changes instead of one change per line.
    pub array: bool,
    /// The producer whose JSON this is. Debezium's flavours read as plain
    /// Debezium events: a value its converter writes in a form the column's
    /// type does not read is a rejected row, never a guess.
    pub json_flavor: JsonFlavor,
    /// The columns that make a row's key in a key-value store (Redis).
    pub key_fields: Option<Vec<String>>,
}

/// `json_flavor`: whose JSON a connector reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JsonFlavor {
    /// Feldera's own encoding.
    #[default]
    Default,
    /// Debezium's MySQL connector with the JSON converter.
    DebeziumMysql,
    /// Debezium's PostgreSQL (and other) connectors with the JSON converter.
    DebeziumPostgres,
}

/// `csv`'s configuration (no settings yet: a field given is refused).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvConfig {
    /// How each record is read: `raw` and `insert_delete` both insert it.
    #[serde(default)]
    pub update_format: Option<UpdateFormat>,
}

/// `parquet`'s configuration (no settings: a field given is refused).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetConfig {}

/// The format as written: a name and an optional configuration object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    name: String,
    #[serde(default)]
    config: Value,
}

fn config<T: serde::de::DeserializeOwned + Default>(
    format: &'static str,
    config: Value,
) -> Result<T, FormatError> {
    if config.is_null() {
        return Ok(T::default());
    }
    if !config.is_object() {
        // serde would read a struct from a list as well.
        return Err(FormatError::Config {
            format,
            reason: format!("config must be an object, not {config}"),
        });
    }
    // The field that does not read, by its path in the config.
    serde_path_to_error::deserialize(config).map_err(|e| FormatError::Config {
        format,
        reason: match e.path().iter().next() {
            Some(_) => format!("'{}': {}", e.path(), e.inner()),
            None => e.into_inner().to_string(),
        },
    })
}

impl FormatConfig {
    /// Reads a connector's `"format"` object.
    pub fn from_value(value: &Value) -> Result<Self, FormatError> {
        let written: Written =
            serde_json::from_value(value.clone()).map_err(|e| FormatError::Config {
                format: "?",
                reason: format!("{e} (a format is {{\"name\": …, \"config\": {{…}}}})"),
            })?;
        Ok(match written.name.as_str() {
            "json" => Self::Json(config("json", written.config)?),
            "csv" => Self::Csv(config("csv", written.config)?),
            "avro" => Self::Avro(config("avro", written.config)?),
            "parquet" => Self::Parquet(config("parquet", written.config)?),
            "raw" => Self::Raw(config("raw", written.config)?),
            other => return Err(FormatError::Unknown(other.to_string())),
        })
    }

    /// A format named by an HTTP endpoint's query (`format`,
    /// `update_format`, `array`, and raw's `mode`).
    pub fn from_query(
        name: &str,
        update_format: Option<&str>,
        array: Option<bool>,
        mode: Option<&str>,
    ) -> Result<Self, FormatError> {
        let mut config = serde_json::Map::new();
        if let Some(m) = mode {
            config.insert("mode".into(), json!(m));
        }
        if let Some(u) = update_format {
            config.insert("update_format".into(), json!(u));
        }
        // `array` is a setting of JSON's; the endpoint's query carries it
        // whatever the format (Feldera's ingress ignores it for CSV).
        if let (Some(a), "json") = (array, name) {
            config.insert("array".into(), json!(a));
        }
        Self::from_value(&json!({"name": name, "config": config}))
    }

    /// Its kind.
    pub fn kind(&self) -> FormatKind {
        match self {
            Self::Json(_) => FormatKind::Json,
            Self::Csv(_) => FormatKind::Csv,
            Self::Avro(_) => FormatKind::Avro,
            Self::Parquet(_) => FormatKind::Parquet,
            Self::Raw(_) => FormatKind::Raw,
        }
    }

    /// Checks that a table or view with `fields` can be read or written
    /// in this format, where the format says what columns it needs.
    pub fn check(&self, fields: &datafusion::arrow::datatypes::Fields) -> Result<(), FormatError> {
        match self {
            Self::Raw(c) => c.check(fields),
            _ => Ok(()),
        }
    }

    /// How a byte stream in this format is read.
    pub fn text_input(&self) -> Result<InputFormat, FormatError> {
        match self {
            Self::Json(c) => Ok(InputFormat::Json {
                update: c.update_format,
                array: c.array,
            }),
            Self::Csv(c) => match c.update_format {
                None | Some(UpdateFormat::Raw) | Some(UpdateFormat::InsertDelete) => {
                    Ok(InputFormat::Csv)
                }
                Some(other) => Err(FormatError::Unsupported {
                    format: "csv",
                    reason: format!(
                        "update format '{}' is not supported for csv (raw, insert_delete)",
                        other.name()
                    ),
                }),
            },
            Self::Raw(c) => Ok(InputFormat::Raw(c.clone())),
            other => Err(not_text(other.kind())),
        }
    }

    /// How a view's changes are written as a byte stream in this format.
    pub fn text_output(&self) -> Result<OutputFormat, FormatError> {
        match self {
            Self::Json(c) if c.array => Err(FormatError::Unsupported {
                format: "json",
                reason: "output is written one change per line, not as an array".into(),
            }),
            Self::Json(c) => match c.update_format {
                UpdateFormat::Raw => Err(FormatError::Unsupported {
                    format: "json",
                    reason: "update format 'raw' cannot write deletions; use insert_delete, weighted or debezium".into(),
                }),
                update => Ok(OutputFormat::Json(update)),
            },
            Self::Csv(c) => match c.update_format {
                None => Ok(OutputFormat::Csv),
                Some(other) => Err(FormatError::Unsupported {
                    format: "csv",
                    reason: format!(
                        "update format '{}' is not supported for csv output",
                        other.name()
                    ),
                }),
            },
            Self::Raw(_) => Err(FormatError::Unsupported {
                format: "raw",
                reason: "raw is an input format: a view is written as json or csv".into(),
            }),
            other => Err(not_text(other.kind())),
        }
    }
}

fn not_text(kind: FormatKind) -> FormatError {
    FormatError::Unsupported {
        format: kind.name(),
        reason: format!(
            "{} is not a text format: it is read and written only by connectors that carry it",
            kind.name()
        ),
    }
}

/// How a byte stream's changes are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputFormat {
    /// JSON changes.
    Json {
        /// How each change is written.
        update: UpdateFormat,
        /// One JSON array instead of one change per line.
        array: bool,
    },
    /// CSV rows, inserted.
    Csv,
    /// Chunks or lines as they are, inserted.
    Raw(RawConfig),
}

impl InputFormat {
    /// JSON changes, one per line, in `update` format.
    pub fn json_lines(update: UpdateFormat) -> Self {
        Self::Json {
            update,
            array: false,
        }
    }

    /// Whether input may be cut at line ends and each piece parsed alone.
    pub fn line_oriented(&self) -> bool {
        match self {
            Self::Json { array, .. } => !array,
            Self::Csv => true,
            Self::Raw(c) => c.line_oriented(),
        }
    }

    /// Whether a piece of input is given as its bytes ([`Self::parse_bytes`])
    /// rather than as text.
    pub fn takes_bytes(&self) -> bool {
        matches!(self, Self::Raw(_))
    }

    /// Parses a piece of input into changes of a table with `schema`.
    pub fn parse(&self, text: &str, schema: &SchemaRef) -> Parsed {
        match self {
            Self::Json { update, array } => crate::json::parse(text, schema, *update, *array),
            Self::Csv => crate::csv::parse(text, schema, 1),
            Self::Raw(c) => c.parse(text.as_bytes(), schema),
        }
    }

    /// Parses a piece of input given as bytes (a format that
    /// [`takes_bytes`](Self::takes_bytes)).
    pub fn parse_bytes(&self, bytes: &[u8], schema: &SchemaRef) -> Parsed {
        match self {
            Self::Raw(c) => c.parse(bytes, schema),
            text => match std::str::from_utf8(bytes) {
                Ok(t) => text.parse(t, schema),
                Err(e) => Parsed {
                    changes: ZSet::empty(schema),
                    errors: vec![crate::RowError {
                        line: 1,
                        reason: format!("not valid UTF-8: {e}"),
                    }],
                },
            },
        }
    }
}

impl Default for InputFormat {
    /// JSON `insert_delete`, one change per line: what a connector without
    /// a format reads.
    fn default() -> Self {
        Self::json_lines(UpdateFormat::InsertDelete)
    }
}

/// How a view's changes are written as bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// One JSON change per line in an update format (`insert_delete`:
    /// `{"insert": row}` / `{"delete": row}`).
    Json(UpdateFormat),
    /// CSV records: the row's columns, then its weight.
    Csv,
}

impl Default for OutputFormat {
    /// JSON `insert_delete`: what a connector without a format writes.
    fn default() -> Self {
        Self::Json(UpdateFormat::InsertDelete)
    }
}

impl OutputFormat {
    /// Encodes a change: one line per record (a row of weight `w` is written
    /// `|w|` times in JSON, once with its weight in CSV).
    pub fn encode(&self, changes: &ZSet) -> Result<String, String> {
        match self {
            Self::Json(update) => {
                let mut out = String::new();
                for change in crate::json::encode_changes_as(changes, *update)? {
                    out.push_str(&change.to_string());
                    out.push('\n');
                }
                Ok(out)
            }
            Self::Csv => crate::csv::encode(&crate::with_weight_column(changes)?, false),
        }
    }

    /// One chunk of an HTTP egress stream, in the shape of Feldera's:
    /// `{"sequence_number": n, "json_data": [changes]}` or
    /// `{"sequence_number": n, "text_data": "csv"}`, then a newline.
    pub fn egress_chunk(&self, sequence_number: u64, changes: &ZSet) -> Result<String, String> {
        let chunk = match self {
            Self::Json(update) => json!({
                "sequence_number": sequence_number,
                "json_data": crate::json::encode_changes_as(changes, *update)?,
            }),
            Self::Csv => json!({
                "sequence_number": sequence_number,
                "text_data": self.encode(changes)?,
            }),
        };
        Ok(format!("{chunk}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    fn read(v: Value) -> Result<FormatConfig, FormatError> {
        FormatConfig::from_value(&v)
    }

    #[test]
    fn formats_from_names_and_configs() {
        assert_eq!(
            FormatConfig::from_query("json", Some("raw"), Some(true), None)
                .unwrap()
                .text_input()
                .unwrap(),
            InputFormat::Json {
                update: UpdateFormat::Raw,
                array: true
            }
        );
        assert_eq!(
            FormatConfig::from_query("xml", None, None, None).unwrap_err(),
            FormatError::Unknown("xml".into())
        );
        let csv_array = FormatConfig::from_query("csv", Some("insert_delete"), Some(false), None);
        assert_eq!(csv_array.unwrap().text_input().unwrap(), InputFormat::Csv);
        let csv_weighted = FormatConfig::from_query("csv", Some("weighted"), None, None).unwrap();
        assert!(csv_weighted.text_input().is_err());
        let csv = read(json!({"name": "csv"})).unwrap();
        assert_eq!(csv.text_input().unwrap(), InputFormat::Csv);
        assert_eq!(csv.text_output().unwrap(), OutputFormat::Csv);
        let debezium = read(json!({"name": "json", "config": {"update_format": "debezium"}}));
        let debezium = debezium.unwrap();
        assert_eq!(
            debezium.text_output().unwrap(),
            OutputFormat::Json(UpdateFormat::Debezium)
        );
        assert_eq!(
            debezium.text_input().unwrap(),
            InputFormat::json_lines(UpdateFormat::Debezium)
        );
        let raw = read(json!({"name": "json", "config": {"update_format": "raw"}})).unwrap();
        assert!(raw.text_output().is_err());
        let avro = read(json!({"name": "avro", "config": {"schema": "\"int\""}})).unwrap();
        assert_eq!(avro.kind(), FormatKind::Avro);
        assert!(avro.text_input().is_err());
        assert!(!InputFormat::Json {
            update: UpdateFormat::InsertDelete,
            array: true
        }
        .line_oriented());
    }

    /// Fields a format does not know are refused by name, as are values
    /// of the wrong type or outside a field's choices.
    #[test]
    fn unknown_fields_are_refused_by_name() {
        let err = read(json!({"name": "json", "config": {"update_fromat": "raw"}})).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `update_fromat`"),
            "{err}"
        );
        let err = read(json!({"name": "json", "config": {"update_format": "upsert"}})).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `upsert`"),
            "{err}"
        );
        let err = read(json!({"name": "json", "config": {"array": "yes"}})).unwrap_err();
        assert!(err.to_string().contains("invalid type"), "{err}");
        let err = read(json!({"name": "csv", "config": {"delimiter": ";"}})).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `delimiter`"),
            "{err}"
        );
        let err = read(json!({"name": "parquet", "config": {"compression": "zstd"}})).unwrap_err();
        assert!(
            err.to_string().contains("unknown field `compression`"),
            "{err}"
        );
        let err = read(json!({"name": "json", "conf": {}})).unwrap_err();
        assert!(err.to_string().contains("unknown field `conf`"), "{err}");
        let err =
            read(json!({"name": "json", "config": {"json_flavor": "snowflake"}})).unwrap_err();
        assert!(
            err.to_string().contains("unknown variant `snowflake`"),
            "{err}"
        );
        let mysql = json!({"name": "json", "config": {"update_format": "debezium", "json_flavor": "debezium_mysql"}});
        assert!(read(mysql).is_ok());
    }

    #[test]
    fn csv_output_carries_weights() {
        let parsed = InputFormat::Csv.parse("1,a\n2,b\n", &schema());
        assert!(parsed.errors.is_empty());
        let mut z = parsed.changes;
        z = ZSet::new(z.batch().clone(), vec![1, -2]);
        assert_eq!(OutputFormat::Csv.encode(&z).unwrap(), "1,a,1\n2,b,-2\n");
        let json = OutputFormat::default().egress_chunk(3, &z).unwrap();
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["sequence_number"], 3);
        assert_eq!(v["json_data"].as_array().unwrap().len(), 3);
        assert_eq!(v["json_data"][1]["delete"]["name"], "b");
    }
}
