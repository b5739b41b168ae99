//! The Avro format, as Feldera configures it (`"format": {"name": "avro",
//! "config": {…}}`): Confluent's wire format (a zero byte, the schema's
//! 4-byte id in the registry, then the Avro datum), with the writer's
//! schema fetched from a schema registry by that id, or given in the
//! config (`schema`, with `skip_schema_id` for bare datums).
//!
//! Input (`update_format` `raw`: each message a row to insert; `debezium`:
//! each message a Debezium change event with `before`, `after` and `op`)
//! is decoded into one JSON change per message ([`AvroDecoder`]). Output
//! (`raw`) writes one message per change with an `op` header (`insert` or
//! `delete`), its datum in a schema generated from the view, every column
//! nullable where the view's is ([`AvroEncoder`]). The registry itself is
//! reached by the transport that carries the messages, through
//! [`SchemaSource`].

mod decode;
mod encode;
mod schema;

pub use decode::AvroDecoder;
pub use encode::{AvroEncoder, AvroMessage};
pub use schema::{check_schema, schema_of};

use apache_avro::Schema;
use serde::Deserialize;

use crate::format::FormatError;

/// `avro`'s configuration, as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AvroConfig {
    /// `raw` (rows) or, for input, `debezium` (change events).
    pub update_format: AvroUpdateFormat,
    /// The writer's schema, as JSON text.
    pub schema: Option<String>,
    /// Messages are bare datums, without Confluent's id prefix.
    pub skip_schema_id: bool,
    /// The schema registry's URLs, tried in turn.
    pub registry_urls: Vec<String>,
    /// Basic authentication with the registry.
    pub registry_username: Option<String>,
    /// Basic authentication's password.
    pub registry_password: Option<String>,
    /// Bearer authentication with the registry.
    pub registry_authorization_token: Option<String>,
    /// How long a registry request may take (10 s when absent).
    pub registry_timeout_secs: Option<u64>,
}

/// `update_format` of Avro.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AvroUpdateFormat {
    /// One row per message.
    #[default]
    Raw,
    /// Debezium change events.
    Debezium,
}

/// An Avro configuration checked for one direction, with its schema parsed.
#[derive(Debug, Clone)]
pub struct AvroFormat {
    debezium: bool,
    /// The configured schema, parsed and as written (the registry is sent
    /// the text: the parsing canonical form would drop logical types).
    schema: Option<(Schema, String)>,
    skip_schema_id: bool,
    registry: bool,
}

/// Where a decoder finds the writer's schema of a message by its id, and
/// where an encoder registers its own.
pub trait SchemaSource: Send {
    /// The schema registered under `id`.
    fn schema(&self, id: u32) -> Result<Schema, String>;
    /// Registers `schema` (JSON text) under `subject`; its id.
    fn register(&self, subject: &str, schema: &str) -> Result<u32, String>;
}

fn unsupported(reason: impl Into<String>) -> FormatError {
    FormatError::Unsupported {
        format: "avro",
        reason: reason.into(),
    }
}

impl AvroConfig {
    /// Whether a registry is configured.
    pub fn has_registry(&self) -> bool {
        !self.registry_urls.is_empty()
    }

    /// Checks the configuration for input (`input`) or output and parses
    /// its schema.
    pub fn checked(&self, input: bool) -> Result<AvroFormat, FormatError> {
        let debezium = match self.update_format {
            AvroUpdateFormat::Raw => false,
            AvroUpdateFormat::Debezium if input => true,
            AvroUpdateFormat::Debezium => {
                return Err(unsupported(
                    "update format 'debezium' is read, not written (raw)",
                ))
            }
        };
        let schema = match &self.schema {
            None => None,
            Some(s) => {
                let schema =
                    Schema::parse_str(s).map_err(|e| unsupported(format!("'schema': {e}")))?;
                check_schema(&schema).map_err(|e| unsupported(format!("'schema': {e}")))?;
                Some((schema, s.clone()))
            }
        };
        let registry = self.has_registry();
        if input && schema.is_none() && !registry {
            return Err(unsupported("input needs 'registry_urls' or a 'schema'"));
        }
        if input && schema.is_some() && registry {
            return Err(unsupported(
                "input takes 'registry_urls' or a 'schema', not both",
            ));
        }
        if self.skip_schema_id && schema.is_none() {
            return Err(unsupported(
                "'skip_schema_id' needs a 'schema' (there is no id to look up)",
            ));
        }
        Ok(AvroFormat {
            debezium,
            schema,
            skip_schema_id: self.skip_schema_id,
            registry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::FormatConfig;
    use datafusion::arrow::array::{Date32Array, Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema as ArrowSchema};
    use eddy_dbsp::ZSet;
    use serde_json::{json, Value};
    use std::sync::Arc;

    fn config(config: Value) -> AvroConfig {
        match FormatConfig::from_value(&json!({"name": "avro", "config": config})).unwrap() {
            FormatConfig::Avro(c) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn configs_are_checked() {
        assert!(config(json!({})).checked(true).is_err());
        assert!(config(json!({"schema": "{"})).checked(true).is_err());
        assert!(config(json!({"update_format": "debezium"}))
            .checked(false)
            .is_err());
        assert!(config(json!({"skip_schema_id": true}))
            .checked(true)
            .is_err());
        let both = json!({"schema": "\"int\"", "registry_urls": ["http://127.0.0.1:1/"]});
        assert!(config(both).checked(true).is_err());
        let ok = config(json!({"registry_urls": ["http://127.0.0.1:1/"]})).checked(true);
        assert!(ok.is_ok(), "{ok:?}");
        let err =
            FormatConfig::from_value(&json!({"name": "avro", "config": {"registry_proxy": "x"}}))
                .unwrap_err();
        assert!(
            err.to_string().contains("unknown field `registry_proxy`"),
            "{err}"
        );
    }

    #[test]
    fn rows_round_trip_through_the_generated_schema() {
        let fields = ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("amount", DataType::Decimal128(10, 2), true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(fields),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    Some("ann"),
                    None,
                ])),
                Arc::new(Date32Array::from(vec![Some(19724), None])),
                Arc::new(
                    datafusion::arrow::array::Decimal128Array::from(vec![Some(-1234), None])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let changes = ZSet::new(batch, vec![1, -2]);
        let format = config(json!({})).checked(false).unwrap();
        let columns = changes.batch().schema().fields().clone();
        let encoder = AvroEncoder::new(format, &columns).unwrap();
        let messages = encoder.encode(&changes).unwrap();
        let ops: Vec<&str> = messages.iter().map(|m| m.0).collect();
        assert_eq!(ops, ["insert", "delete", "delete"]);
        let schema = encoder.schema_text().to_string();
        let reader = config(json!({"schema": schema, "skip_schema_id": true}));
        let mut decoder = AvroDecoder::new(reader.checked(true).unwrap(), None);
        let first: Value =
            serde_json::from_str(&decoder.decode(&messages[0].1, &columns).unwrap().unwrap())
                .unwrap();
        assert_eq!(
            first,
            json!({"insert": {"id": 1, "name": "ann", "d": "2024-01-02", "amount": "-12.34"}})
        );
        let second: Value =
            serde_json::from_str(&decoder.decode(&messages[1].1, &columns).unwrap().unwrap())
                .unwrap();
        assert_eq!(
            second,
            json!({"insert": {"id": 2, "name": null, "d": null, "amount": null}})
        );
        assert!(decoder.decode(b"\x00\x01", &columns).is_err());
        let narrow = Fields::from(vec![Field::new("ID", DataType::Int64, false)]);
        let only_id: Value =
            serde_json::from_str(&decoder.decode(&messages[0].1, &narrow).unwrap().unwrap())
                .unwrap();
        assert_eq!(only_id, json!({"insert": {"id": 1}}));
    }
}
