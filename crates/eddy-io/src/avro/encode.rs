//! A view's changes to Avro messages: one message per unit of weight, in
//! the configured schema or one made from the view's columns, with
//! Confluent's id prefix once the schema is registered.

use apache_avro::types::Value as Avro;
use apache_avro::Schema;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Date32Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, Int8Array,
};
use datafusion::arrow::datatypes::{DataType, Fields, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use eddy_dbsp::ZSet;

use super::{schema_of, AvroFormat, SchemaSource};

/// Writes a view's changes as Avro messages.
pub struct AvroEncoder {
    /// The writer's schema (the configured one, or one made from the
    /// view's columns) and its text.
    schema: Schema,
    text: String,
    /// Its id in the registry, once registered.
    id: Option<u32>,
    skip_schema_id: bool,
}

/// One message: its `op` header and its bytes.
pub type AvroMessage = (&'static str, Vec<u8>);

impl AvroEncoder {
    /// An encoder of a view with `columns`, in the configured schema or
    /// one made from the columns; its messages carry no schema id until
    /// the schema is [registered](Self::register).
    pub fn new(config: AvroFormat, columns: &Fields) -> Result<Self, String> {
        let (schema, text) = match config.schema {
            Some(s) => s,
            None => schema_of(columns)?,
        };
        Ok(Self {
            schema,
            text,
            id: None,
            skip_schema_id: config.skip_schema_id,
        })
    }

    /// Registers the schema in `registry` under `subject`; the messages
    /// written after carry its id.
    pub fn register(&mut self, registry: &dyn SchemaSource, subject: &str) -> Result<(), String> {
        self.id = Some(registry.register(subject, &self.text)?);
        Ok(())
    }

    /// The schema's JSON text.
    pub fn schema_text(&self) -> &str {
        &self.text
    }

    /// The messages of `changes`: a row of weight `w` is `|w|` messages,
    /// `insert` when `w` > 0, `delete` otherwise.
    pub fn encode(&self, changes: &ZSet) -> Result<Vec<AvroMessage>, String> {
        let batch = changes.batch();
        let mut out = Vec::new();
        for (row, &w) in changes.weights().iter().enumerate() {
            if w == 0 {
                continue;
            }
            let record = record_of(batch, row, &self.schema)?;
            let datum = apache_avro::to_avro_datum(&self.schema, record)
                .map_err(|e| format!("Avro encoding: {e}"))?;
            let mut message = Vec::with_capacity(datum.len() + 5);
            if let (Some(id), false) = (self.id, self.skip_schema_id) {
                message.push(0);
                message.extend_from_slice(&id.to_be_bytes());
            }
            message.extend_from_slice(&datum);
            let op = if w > 0 { "insert" } else { "delete" };
            for _ in 0..w.unsigned_abs() {
                out.push((op, message.clone()));
            }
        }
        Ok(out)
    }
}

/// Row `row` of `batch` as a record of the writer's `schema`, whose
/// fields are the batch's columns in order: a value of a union field is
/// put in the union's `null` branch or its other one, in whichever order
/// the schema lists them.
fn record_of(batch: &RecordBatch, row: usize, schema: &Schema) -> Result<Avro, String> {
    let Schema::Record(record) = schema else {
        return Err("the Avro schema of an output must be a record".into());
    };
    if record.fields.len() != batch.num_columns() {
        return Err(format!(
            "the Avro schema has {} fields, the view {} columns",
            record.fields.len(),
            batch.num_columns()
        ));
    }
    let fields = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .zip(&record.fields)
        .map(|((f, a), field)| {
            let v = value_of(a, row)?;
            let v = match &field.schema {
                Schema::Union(u) => {
                    let null = matches!(v, Avro::Null);
                    let i = u
                        .variants()
                        .iter()
                        .position(|s| matches!(s, Schema::Null) == null)
                        .ok_or_else(|| {
                            format!("column '{}': no branch of its Avro union fits", f.name())
                        })?;
                    Avro::Union(i as u32, Box::new(v))
                }
                _ => v,
            };
            Ok((field.name.clone(), v))
        })
        .collect::<Result<_, String>>()?;
    Ok(Avro::Record(fields))
}

fn value_of(a: &ArrayRef, row: usize) -> Result<Avro, String> {
    if a.is_null(row) {
        return Ok(Avro::Null);
    }
    macro_rules! prim {
        ($t:ty, $v:ident, $conv:expr) => {{
            let x = a.as_any().downcast_ref::<$t>().expect("type").value(row);
            Avro::$v($conv(x))
        }};
    }
    Ok(match a.data_type() {
        DataType::Boolean => prim!(BooleanArray, Boolean, |x| x),
        DataType::Int8 => prim!(Int8Array, Int, i32::from),
        DataType::Int16 => prim!(Int16Array, Int, i32::from),
        DataType::Int32 => prim!(Int32Array, Int, |x| x),
        DataType::Int64 => prim!(Int64Array, Long, |x| x),
        DataType::Float32 => prim!(Float32Array, Float, |x| x),
        DataType::Float64 => prim!(Float64Array, Double, |x| x),
        DataType::Utf8 => Avro::String(a.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => Avro::String(a.as_string::<i64>().value(row).to_string()),
        DataType::Utf8View => Avro::String(a.as_string_view().value(row).to_string()),
        DataType::Binary => Avro::Bytes(a.as_binary::<i32>().value(row).to_vec()),
        DataType::LargeBinary => Avro::String(
            crate::variant::codec::decode(a.as_binary::<i64>().value(row))
                .map(|v| crate::variant::json::to_json_lenient(&v))
                .map_err(|e| e.to_string())?,
        ),
        DataType::BinaryView => Avro::Bytes(a.as_binary_view().value(row).to_vec()),
        t if crate::uuid::is_uuid(t) => {
            Avro::String(crate::uuid::text(a.as_fixed_size_binary().value(row)))
        }
        DataType::Date32 => prim!(Date32Array, Date, |x| x),
        DataType::Time64(unit) => {
            let v = match unit {
                TimeUnit::Microsecond => a
                    .as_primitive::<datafusion::arrow::datatypes::Time64MicrosecondType>()
                    .value(row),
                _ => {
                    a.as_primitive::<datafusion::arrow::datatypes::Time64NanosecondType>()
                        .value(row)
                        / 1000
                }
            };
            Avro::TimeMicros(v)
        }
        DataType::Timestamp(unit, _) => {
            use datafusion::arrow::datatypes::*;
            let micros = match unit {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(row) * 1_000_000,
                TimeUnit::Millisecond => {
                    a.as_primitive::<TimestampMillisecondType>().value(row) * 1000
                }
                TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => {
                    a.as_primitive::<TimestampNanosecondType>().value(row) / 1000
                }
            };
            Avro::TimestampMicros(micros)
        }
        DataType::Decimal128(_, _) => {
            let v = a
                .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                .value(row);
            Avro::Decimal(apache_avro::Decimal::from(minimal_bytes(v)))
        }
        other => return Err(format!("{other} has no Avro encoding yet")),
    })
}

/// The shortest big-endian two's complement bytes of `v`.
pub(super) fn minimal_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_take_their_fewest_bytes() {
        assert_eq!(minimal_bytes(127), [127]);
        assert_eq!(minimal_bytes(128), [0, 128]);
        assert_eq!(minimal_bytes(-128), [128]);
    }
}
