//! Data formats of connectors and HTTP endpoints: how bytes become changes
//! of a table, and how a view's changes become bytes.
//!
//! Inputs: `json` (with `update_format` = `insert_delete` | `raw` |
//! `weighted` | `debezium`, newline-delimited or, with `array`, one JSON
//! array) and `csv` (one row to insert per record). Outputs: `json` (by
//! default `{"insert": row}` / `{"delete": row}` per line; a connector's
//! `update_format` may ask for `weighted` or `debezium` events instead) and
//! `csv` (the row's columns and its weight). Kafka connectors also speak
//! Avro, which is binary and schema-bound: see [`crate::avro`].

use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use eddy_io::json::UpdateFormat;
use eddy_io::Parsed;
use serde_json::{json, Value};

/// How an input's bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

impl InputFormat {
    /// Reads a format from its name and options (query parameters or a
    /// connector's `format.config`).
    pub fn new(
        name: &str,
        update_format: Option<&str>,
        array: Option<bool>,
    ) -> Result<Self, String> {
        match name {
            "json" => Ok(Self::Json {
                update: update_format.unwrap_or("insert_delete").parse()?,
                array: array.unwrap_or(false),
            }),
            "csv" => match update_format {
                None | Some("raw") | Some("insert_delete") => Ok(Self::Csv),
                Some(other) => Err(format!("update format '{other}' is not supported for csv")),
            },
            other => Err(format!("unknown format '{other}' (json, csv)")),
        }
    }

    /// Reads a connector's `"format": {"name": …, "config": {…}}`; JSON
    /// newline-delimited `insert_delete` when absent.
    pub fn from_config(format: Option<&Value>) -> Result<Self, String> {
        let Some(format) = format else {
            return Self::new("json", None, None);
        };
        let name = format
            .get("name")
            .and_then(Value::as_str)
            .ok_or("format needs a \"name\"")?;
        let config = format.get("config");
        let update = config
            .and_then(|c| c.get("update_format"))
            .and_then(Value::as_str);
        let array = config.and_then(|c| c.get("array")).and_then(Value::as_bool);
        Self::new(name, update, array)
    }

    /// Whether input may be cut at line ends and each piece parsed alone.
    pub fn line_oriented(&self) -> bool {
        !matches!(self, Self::Json { array: true, .. })
    }

    /// Parses a piece of input into changes of a table with `schema`.
    pub fn parse(&self, text: &str, schema: &SchemaRef) -> Parsed {
        match *self {
            Self::Json { update, array } => eddy_io::json::parse(text, schema, update, array),
            Self::Csv => eddy_io::csv::parse(text, schema, 1),
        }
    }
}

/// How a view's changes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// One JSON change per line in an update format (`insert_delete`:
    /// `{"insert": row}` / `{"delete": row}`).
    Json(UpdateFormat),
    /// CSV records: the row's columns, then its weight.
    Csv,
}

impl OutputFormat {
    /// Reads a format name (JSON changes as `insert_delete`).
    pub fn new(name: &str) -> Result<Self, String> {
        Self::with_update_format(name, None)
    }

    /// Reads a format name and, for JSON, its update format.
    fn with_update_format(name: &str, update: Option<&str>) -> Result<Self, String> {
        match (name, update) {
            ("json", update) => match update.unwrap_or("insert_delete").parse()? {
                UpdateFormat::Raw => Err("update format 'raw' cannot write deletions; use insert_delete, weighted or debezium".into()),
                update => Ok(Self::Json(update)),
            },
            ("csv", None) => Ok(Self::Csv),
            ("csv", Some(other)) => Err(format!("update format '{other}' is not supported for csv output")),
            (other, _) => Err(format!("unknown format '{other}' (json, csv)")),
        }
    }

    /// Reads a connector's `"format": {"name": …, "config":
    /// {"update_format": …}}`; JSON `insert_delete` when absent.
    pub fn from_config(format: Option<&Value>) -> Result<Self, String> {
        let Some(f) = format else {
            return Self::new("json");
        };
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .ok_or("format needs a \"name\"")?;
        let update = f.pointer("/config/update_format").and_then(Value::as_str);
        Self::with_update_format(name, update)
    }

    /// Encodes a change: one line per record (a row of weight `w` is written
    /// `|w|` times in JSON, once with its weight in CSV).
    pub fn encode(&self, changes: &ZSet) -> Result<String, String> {
        match self {
            Self::Json(update) => {
                let mut out = String::new();
                for change in eddy_io::json::encode_changes_as(changes, *update)? {
                    out.push_str(&change.to_string());
                    out.push('\n');
                }
                Ok(out)
            }
            Self::Csv => eddy_io::csv::encode(&eddy_io::with_weight_column(changes)?, false),
        }
    }

    /// One chunk of an HTTP egress stream, in the shape of Feldera's:
    /// `{"sequence_number": n, "json_data": [changes]}` or
    /// `{"sequence_number": n, "text_data": "csv"}`, then a newline.
    pub fn egress_chunk(&self, sequence_number: u64, changes: &ZSet) -> Result<String, String> {
        let chunk = match self {
            Self::Json(update) => json!({
                "sequence_number": sequence_number,
                "json_data": eddy_io::json::encode_changes_as(changes, *update)?,
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

    #[test]
    fn formats_from_names_and_configs() {
        assert_eq!(
            InputFormat::new("json", Some("raw"), Some(true)).unwrap(),
            InputFormat::Json {
                update: UpdateFormat::Raw,
                array: true
            }
        );
        assert!(InputFormat::new("avro", None, None).is_err());
        assert!(InputFormat::new("csv", Some("weighted"), None).is_err());
        let cfg = json!({"name": "csv"});
        assert_eq!(
            InputFormat::from_config(Some(&cfg)).unwrap(),
            InputFormat::Csv
        );
        assert!(!InputFormat::new("json", None, Some(true))
            .unwrap()
            .line_oriented());
        let debezium = json!({"name": "json", "config": {"update_format": "debezium"}});
        assert_eq!(
            OutputFormat::from_config(Some(&debezium)).unwrap(),
            OutputFormat::Json(UpdateFormat::Debezium)
        );
        assert_eq!(
            InputFormat::from_config(Some(&debezium)).unwrap(),
            InputFormat::Json {
                update: UpdateFormat::Debezium,
                array: false
            }
        );
        let raw = json!({"name": "json", "config": {"update_format": "raw"}});
        assert!(OutputFormat::from_config(Some(&raw)).is_err());
        assert!(OutputFormat::from_config(Some(&json!({"name": "avro"}))).is_err());
    }

    #[test]
    fn csv_output_carries_weights() {
        let parsed = InputFormat::Csv.parse("1,a\n2,b\n", &schema());
        assert!(parsed.errors.is_empty());
        let mut z = parsed.changes;
        z = ZSet::new(z.batch().clone(), vec![1, -2]);
        assert_eq!(OutputFormat::Csv.encode(&z).unwrap(), "1,a,1\n2,b,-2\n");
        let json = OutputFormat::new("json")
            .unwrap()
            .egress_chunk(3, &z)
            .unwrap();
        let v: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["sequence_number"], 3);
        assert_eq!(v["json_data"].as_array().unwrap().len(), 3);
        assert_eq!(v["json_data"][1]["delete"]["name"], "b");
    }
}
