//! Arrow answers as PostgreSQL rows: each Arrow type has one PostgreSQL
//! type in the row description, and every value is written in the text or
//! binary format the client asked for, as that type.
//!
//! Types without a PostgreSQL counterpart here (lists, structs, maps,
//! intervals) are described as `text` and written as Arrow displays them,
//! so a query never fails for the shape of its answer.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveTime, Utc};
use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{
    DataType, Date32Type, Decimal128Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Schema, Time64MicrosecondType, TimeUnit, TimestampMicrosecondType, UInt64Type,
};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use pgwire::api::portal::Format;
use pgwire::api::results::{DataRowEncoder, FieldInfo};
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;
use rust_decimal::Decimal;

use super::error::user_error;

/// The PostgreSQL type that describes values of an Arrow type.
pub fn pg_type(t: &DataType) -> Type {
    match t {
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 | DataType::Decimal128(_, _) => Type::NUMERIC,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Type::VARCHAR,
        // A VARIANT (see eddy_io::variant): its JSON text.
        DataType::LargeBinary => Type::JSON,
        DataType::Binary | DataType::BinaryView => Type::BYTEA,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Time32(_) | DataType::Time64(_) => Type::TIME,
        _ => Type::TEXT,
    }
}

/// The `atttypmod` of an Arrow type: precision and scale of a decimal.
pub fn type_modifier(t: &DataType) -> i32 {
    match t {
        DataType::Decimal128(p, s) => ((i32::from(*p) << 16) | i32::from(*s as u8)) + 4,
        _ => -1,
    }
}

/// The row description of an answer, each column in the format `format`
/// gives it.
pub fn fields(schema: &Schema, format: &Format) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(
                f.name().clone(),
                None,
                None,
                pg_type(f.data_type()),
                format.format_for(i),
            )
            .with_type_modifier(type_modifier(f.data_type()))
        })
        .collect()
}

/// Writes `batches` as data rows described by `fields`.
pub fn rows(batches: &[RecordBatch], fields: &Arc<Vec<FieldInfo>>) -> PgWireResult<Vec<DataRow>> {
    let mut out = Vec::new();
    let mut encoder = DataRowEncoder::new(Arc::clone(fields));
    for batch in batches {
        let columns: Vec<Column> = batch
            .columns()
            .iter()
            .map(Column::new)
            .collect::<PgWireResult<_>>()?;
        for row in 0..batch.num_rows() {
            for column in &columns {
                column.encode(row, &mut encoder)?;
            }
            out.push(encoder.take_row());
        }
    }
    Ok(out)
}

/// A column ready to be written: integers of narrow types widened, dates
/// and times in microseconds, everything else as it came or as text.
enum Column {
    Plain(ArrayRef),
    Text(ArrayRef),
}

impl Column {
    fn new(array: &ArrayRef) -> PgWireResult<Self> {
        let cast = |to: DataType| {
            cast_with_options(array, &to, &CastOptions::default())
                .map_err(|e| user_error("XX000", format!("encoding a column: {e}")))
        };
        Ok(match array.data_type() {
            DataType::Int8 | DataType::UInt8 => Self::Plain(cast(DataType::Int16)?),
            DataType::UInt16 => Self::Plain(cast(DataType::Int32)?),
            DataType::UInt32 => Self::Plain(cast(DataType::Int64)?),
            DataType::Float16 => Self::Plain(cast(DataType::Float32)?),
            DataType::LargeUtf8 | DataType::Utf8View => Self::Plain(cast(DataType::Utf8)?),
            DataType::BinaryView => Self::Plain(cast(DataType::Binary)?),
            // A VARIANT is its JSON text, a UUID its canonical text.
            t if eddy_io::variant::arrow::shown_as_text(t) => {
                let text = eddy_io::variant::arrow::as_text(array)
                    .map_err(|e| user_error("XX000", format!("encoding a column: {e}")))?;
                match t {
                    DataType::LargeBinary => Self::Plain(text),
                    _ => Self::Text(text),
                }
            }
            DataType::Date64 => Self::Plain(cast(DataType::Date32)?),
            DataType::Timestamp(unit, tz) if *unit != TimeUnit::Microsecond => Self::Plain(cast(
                DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
            )?),
            DataType::Time32(_) | DataType::Time64(TimeUnit::Nanosecond) => {
                Self::Plain(cast(DataType::Time64(TimeUnit::Microsecond))?)
            }
            t if pg_type(t) == Type::TEXT => Self::Text(Arc::clone(array)),
            _ => Self::Plain(Arc::clone(array)),
        })
    }

    fn encode(&self, row: usize, e: &mut DataRowEncoder) -> PgWireResult<()> {
        let a = match self {
            Self::Text(a) => {
                let value = if a.is_null(row) {
                    None
                } else {
                    let f = ArrayFormatter::try_new(a.as_ref(), &FormatOptions::default())
                        .map_err(|e| user_error("XX000", e.to_string()))?;
                    Some(f.value(row).to_string())
                };
                return e.encode_field(&value);
            }
            Self::Plain(a) => a,
        };
        let valid = a.is_valid(row);
        macro_rules! prim {
            ($t:ty) => {
                e.encode_field(&valid.then(|| a.as_primitive::<$t>().value(row)))
            };
        }
        match a.data_type() {
            DataType::Boolean => e.encode_field(&valid.then(|| a.as_boolean().value(row))),
            DataType::Int16 => prim!(Int16Type),
            DataType::Int32 => prim!(Int32Type),
            DataType::Int64 => prim!(Int64Type),
            DataType::Float32 => prim!(Float32Type),
            DataType::Float64 => prim!(Float64Type),
            DataType::UInt64 => e.encode_field(
                &valid.then(|| Decimal::from(a.as_primitive::<UInt64Type>().value(row))),
            ),
            DataType::Decimal128(_, scale) => {
                let value = if valid {
                    let v = a.as_primitive::<Decimal128Type>().value(row);
                    let scale = u32::try_from(*scale).unwrap_or(0);
                    Some(Decimal::try_from_i128_with_scale(v, scale).map_err(|_| {
                        user_error(
                            "22003",
                            format!("the decimal value {v}e-{scale} has more digits than the wire encoding holds (28)"),
                        )
                    })?)
                } else {
                    None
                };
                e.encode_field(&value)
            }
            DataType::Utf8 => e.encode_field(&valid.then(|| a.as_string::<i32>().value(row))),
            DataType::Binary => e.encode_field(&valid.then(|| a.as_binary::<i32>().value(row))),
            DataType::Date32 => {
                let v = valid
                    .then(|| a.as_primitive::<Date32Type>().value(row))
                    .map(|d| {
                        NaiveDate::from_num_days_from_ce_opt(d + 719_163)
                            .ok_or_else(|| user_error("22008", format!("date {d} out of range")))
                    })
                    .transpose()?;
                e.encode_field(&v)
            }
            DataType::Timestamp(_, tz) => {
                let micros = valid.then(|| a.as_primitive::<TimestampMicrosecondType>().value(row));
                let t = micros
                    .map(|m| {
                        DateTime::<Utc>::from_timestamp_micros(m).ok_or_else(|| {
                            user_error("22008", format!("timestamp {m} µs out of range"))
                        })
                    })
                    .transpose()?;
                if tz.is_some() {
                    e.encode_field(&t)
                } else {
                    e.encode_field(&t.map(|t| t.naive_utc()))
                }
            }
            DataType::Time64(_) => {
                let v = valid
                    .then(|| a.as_primitive::<Time64MicrosecondType>().value(row))
                    .map(|us| {
                        let secs = u32::try_from(us.div_euclid(1_000_000)).unwrap_or(0);
                        let nanos = u32::try_from(us.rem_euclid(1_000_000) * 1000).unwrap_or(0);
                        NaiveTime::from_num_seconds_from_midnight_opt(secs, nanos).ok_or_else(
                            || user_error("22008", format!("time {us} µs out of range")),
                        )
                    })
                    .transpose()?;
                e.encode_field(&v)
            }
            other => Err(user_error(
                "XX000",
                format!("no PostgreSQL encoding for {other}"),
            )),
        }
    }
}
