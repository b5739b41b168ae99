//! Avro messages to JSON changes: each message decoded with its writer's
//! schema (the configured one, or the registry's by the message's id) into
//! one line of JSON that the table's JSON parser reads, so that Avro rows
//! meet the same type checks and error reports as JSON rows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value as Avro;
use apache_avro::Schema;
use chrono::{DateTime, NaiveDate, NaiveTime};
use datafusion::arrow::datatypes::Fields;
use serde_json::{json, Map, Value};

use super::{check_schema, AvroFormat, SchemaSource};
use crate::json::UpdateFormat;

/// How long a schema id that failed to load is not asked for again.
const FAILED_LOOKUP_RETRY: Duration = Duration::from_secs(30);

/// Turns Avro messages into JSON changes for a table.
pub struct AvroDecoder {
    config: AvroFormat,
    /// The registry, when the schemas are not configured.
    registry: Option<Box<dyn SchemaSource>>,
    /// Schemas fetched from the registry and checked, by id; a failure is
    /// kept (with its time) so that messages naming a bad or unknown id do
    /// not each wait for the registry.
    schemas: HashMap<u32, Result<Schema, (String, Instant)>>,
}

impl AvroDecoder {
    /// A decoder for `config`, finding schemas by id in `registry` (which
    /// a configuration with `registry_urls` needs).
    pub fn new(config: AvroFormat, registry: Option<Box<dyn SchemaSource>>) -> Self {
        // A hostile message may claim a huge string or array: no single
        // allocation of a decoded value may exceed 64 MiB (the first call
        // in the process sets the bound).
        apache_avro::util::max_allocation_bytes(64 << 20);
        Self {
            config,
            registry,
            schemas: HashMap::new(),
        }
    }

    /// The JSON update format of what [`decode`](Self::decode) returns.
    pub fn update_format(&self) -> UpdateFormat {
        if self.config.debezium {
            UpdateFormat::Debezium
        } else {
            UpdateFormat::InsertDelete
        }
    }

    /// One message as one line of JSON for a table with `columns`:
    /// `{"insert": row}` (raw) or the Debezium event. A record's fields
    /// that the table lacks are left out (a schema may carry more than the
    /// table keeps); the table's nullable columns that the record lacks are
    /// NULL. `None` for a Debezium tombstone (an empty message).
    pub fn decode(&mut self, message: &[u8], columns: &Fields) -> Result<Option<String>, String> {
        if message.is_empty() && self.config.debezium {
            return Ok(None);
        }
        let (schema, mut datum) = if self.config.skip_schema_id {
            match &self.config.schema {
                Some((schema, _)) => (schema, message),
                None => return Err("'skip_schema_id' needs a 'schema'".into()),
            }
        } else {
            let (id, datum) =
                match message {
                    [0, a, b, c, d, rest @ ..] => (u32::from_be_bytes([*a, *b, *c, *d]), rest),
                    _ => return Err(
                        "not in Confluent's wire format (a zero byte and a 4-byte schema id first)"
                            .into(),
                    ),
                };
            let schema = match (&self.config.schema, &self.registry) {
                (Some((s, _)), _) => s,
                (None, Some(registry)) => {
                    let stale = matches!(
                        self.schemas.get(&id),
                        Some(Err((_, at))) if at.elapsed() > FAILED_LOOKUP_RETRY
                    );
                    if stale || !self.schemas.contains_key(&id) {
                        let fetched = registry.schema(id).and_then(|s| {
                            check_schema(&s).map_err(|e| format!("schema {id}: {e}"))?;
                            Ok(s)
                        });
                        self.schemas
                            .insert(id, fetched.map_err(|e| (e, Instant::now())));
                    }
                    match &self.schemas[&id] {
                        Ok(s) => s,
                        Err((e, _)) => return Err(e.clone()),
                    }
                }
                (None, None) => {
                    return Err(if self.config.registry {
                        "the schema registry is not reachable from here".into()
                    } else {
                        "no schema to read the message with".into()
                    })
                }
            };
            (schema, datum)
        };
        let value = apache_avro::from_avro_datum(schema, &mut datum, None)
            .map_err(|e| format!("Avro datum: {e}"))?;
        if !datum.is_empty() {
            return Err(format!("{} bytes after the Avro datum", datum.len()));
        }
        let names = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
        let mut json = to_json(&value, schema, names.get_names())?;
        let keep = |row: &mut Value| {
            if let Value::Object(fields) = row {
                fields.retain(|k, _| columns.iter().any(|c| c.name().eq_ignore_ascii_case(k)));
            }
        };
        let line = if self.config.debezium {
            if let Value::Object(event) = &mut json {
                event.get_mut("before").map(keep);
                event.get_mut("after").map(keep);
            }
            json
        } else {
            keep(&mut json);
            json!({ "insert": json })
        };
        Ok(Some(line.to_string()))
    }
}

/// An Avro value as the JSON that the table's JSON parser reads: logical
/// types in SQL's text forms (`2024-01-02`, `2024-01-02 03:04:05.000006`,
/// decimals with their scale), bytes as hex.
fn to_json(value: &Avro, schema: &Schema, names: &HashMap<Name, &Schema>) -> Result<Value, String> {
    let schema = match schema {
        Schema::Ref { name } => *names
            .get(name)
            .ok_or_else(|| format!("unknown Avro type {name}"))?,
        s => s,
    };
    Ok(match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(*b),
        Avro::Int(i) => json!(i),
        Avro::Long(i) => json!(i),
        Avro::Float(f) => float(f64::from(*f)),
        Avro::Double(f) => float(*f),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Value::String(hex(b)),
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s.clone()),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::Union(i, v) => {
            let variant = match schema {
                Schema::Union(u) => u
                    .variants()
                    .get(*i as usize)
                    .ok_or("an Avro union index out of range")?,
                other => other,
            };
            to_json(v, variant, names)?
        }
        Avro::Array(items) => {
            let item = match schema {
                Schema::Array(a) => &*a.items,
                _ => return Err("an Avro array without an array schema".into()),
            };
            Value::Array(
                items
                    .iter()
                    .map(|v| to_json(v, item, names))
                    .collect::<Result<_, _>>()?,
            )
        }
        Avro::Map(entries) => {
            let item = match schema {
                Schema::Map(m) => &*m.types,
                _ => return Err("an Avro map without a map schema".into()),
            };
            let mut out = Map::new();
            for (k, v) in entries {
                out.insert(k.clone(), to_json(v, item, names)?);
            }
            Value::Object(out)
        }
        Avro::Record(fields) => {
            let Schema::Record(r) = schema else {
                return Err("an Avro record without a record schema".into());
            };
            let mut out = Map::new();
            for ((name, v), field) in fields.iter().zip(&r.fields) {
                out.insert(name.clone(), to_json(v, &field.schema, names)?);
            }
            Value::Object(out)
        }
        Avro::Date(days) => Value::String(date(i64::from(*days))?),
        Avro::TimeMillis(ms) => Value::String(time(i64::from(*ms) * 1000)?),
        Avro::TimeMicros(us) => Value::String(time(*us)?),
        Avro::TimestampMillis(ms) | Avro::LocalTimestampMillis(ms) => Value::String(timestamp(
            ms.checked_mul(1000).ok_or("timestamp out of range")?,
        )?),
        Avro::TimestampMicros(us) | Avro::LocalTimestampMicros(us) => {
            Value::String(timestamp(*us)?)
        }
        Avro::TimestampNanos(ns) | Avro::LocalTimestampNanos(ns) => {
            Value::String(timestamp(ns.div_euclid(1000))?)
        }
        Avro::Decimal(d) => {
            let Schema::Decimal(ds) = schema else {
                return Err("an Avro decimal without a decimal schema".into());
            };
            let bytes: Vec<u8> = d.try_into().map_err(|e| format!("Avro decimal: {e}"))?;
            Value::String(decimal_text(unscaled(&bytes)?, ds.scale as u32))
        }
        Avro::BigDecimal(d) => Value::String(d.to_string()),
        Avro::Duration(_) => return Err("Avro durations have no SQL column type".into()),
    })
}

/// A float as JSON: NaN and the infinities, which JSON numbers cannot
/// hold, as the strings the JSON parser reads for them.
fn float(f: f64) -> Value {
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("inf".into()),
        None => Value::String("-inf".into()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn date(days: i64) -> Result<String, String> {
    NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|epoch| epoch.checked_add_signed(chrono::Duration::try_days(days)?))
        .map(|d| d.format("%Y-%m-%d").to_string())
        .ok_or_else(|| format!("date {days} days from 1970 is out of range"))
}

fn time(micros: i64) -> Result<String, String> {
    let secs = u32::try_from(micros.div_euclid(1_000_000)).map_err(|_| "time out of range")?;
    let nanos = (micros.rem_euclid(1_000_000) * 1000) as u32;
    NaiveTime::from_num_seconds_from_midnight_opt(secs, nanos)
        .map(|t| t.format("%H:%M:%S%.6f").to_string())
        .ok_or_else(|| format!("time {micros} µs is out of range"))
}

fn timestamp(micros: i64) -> Result<String, String> {
    DateTime::from_timestamp_micros(micros)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        .ok_or_else(|| format!("timestamp {micros} µs is out of range"))
}

/// A big-endian two's complement integer of at most 16 bytes.
fn unscaled(bytes: &[u8]) -> Result<i128, String> {
    if bytes.len() > 16 {
        return Err("an Avro decimal wider than 128 bits".into());
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut full = [fill; 16];
    full[16 - bytes.len()..].copy_from_slice(bytes);
    Ok(i128::from_be_bytes(full))
}

fn decimal_text(unscaled: i128, scale: u32) -> String {
    if scale == 0 {
        return unscaled.to_string();
    }
    let digits = unscaled.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if unscaled < 0 { "-" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_types_become_sql_text() {
        assert_eq!(date(19724).unwrap(), "2024-01-02");
        assert_eq!(time(3_723_000_004).unwrap(), "01:02:03.000004");
        assert_eq!(
            timestamp(1_704_164_645_000_006).unwrap(),
            "2024-01-02 03:04:05.000006"
        );
        assert_eq!(decimal_text(-1234, 2), "-12.34");
        assert_eq!(decimal_text(5, 3), "0.005");
        for v in [0i128, 1, -1, 127, 128, -128, -129, 1 << 70, -(1 << 70)] {
            assert_eq!(
                unscaled(&super::super::encode::minimal_bytes(v)).unwrap(),
                v,
                "{v}"
            );
        }
        assert_eq!(float(f64::NAN), json!("NaN"));
        assert_eq!(float(f64::NEG_INFINITY), json!("-inf"));
    }
}
