//! Arrow arrays and variants: any column cast to `VARIANT`
//! ([`to_variants`]), a `VARIANT` column cast to any type
//! ([`from_variants`]), and `VARIANT`s shown as their JSON text
//! ([`as_text`]).
//!
//! A cast to `VARIANT` keeps each value's SQL type: a ROW becomes a map
//! from its field names to its values (json.md), a NULL the variant of SQL
//! NULL. A cast from `VARIANT` gives the value where its runtime type is
//! the target's or converts naturally to it (numbers to numbers, text to
//! text, bytes to bytes, a timestamp to a timestamp), and NULL otherwise,
//! never an error; arrays, maps and ROWs are cast element by element, a
//! ROW taking each field from the map entry of its name.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, LargeBinaryArray, ListArray, MapArray, RecordBatch, StringArray,
    StructArray,
};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{
    DataType, Field, Fields, Float16Type, Float32Type, Float64Type, Int16Type, Int32Type,
    Int64Type, Int8Type, Schema, SchemaRef, TimeUnit, UInt16Type, UInt32Type, UInt64Type,
    UInt8Type,
};
use datafusion::common::ScalarValue;

use super::codec::{decode, encode};
use super::json::{parse, to_json_lenient};
use super::{holds_variant, is_variant, Variant, VariantError};

/// Each row of `a` as a variant (a NULL as the variant of SQL NULL).
pub fn to_variants(a: &dyn Array) -> Result<LargeBinaryArray, VariantError> {
    let mut out = Vec::with_capacity(a.len());
    for row in 0..a.len() {
        out.push(encode(&value_at(a, row)?));
    }
    Ok(LargeBinaryArray::from_iter_values(out))
}

/// The variant of row `row` of `a`.
pub fn value_at(a: &dyn Array, row: usize) -> Result<Variant, VariantError> {
    if a.is_null(row) {
        return Ok(Variant::SqlNull);
    }
    let ns = |v: i64, per_unit: i64| v.checked_mul(per_unit);
    Ok(match a.data_type() {
        DataType::Null => Variant::SqlNull,
        DataType::Boolean => Variant::Boolean(a.as_boolean().value(row)),
        DataType::Int8 => Variant::TinyInt(a.as_primitive::<Int8Type>().value(row)),
        DataType::Int16 => Variant::SmallInt(a.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => Variant::Int(a.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => Variant::BigInt(a.as_primitive::<Int64Type>().value(row)),
        DataType::UInt8 => Variant::UTinyInt(a.as_primitive::<UInt8Type>().value(row)),
        DataType::UInt16 => Variant::USmallInt(a.as_primitive::<UInt16Type>().value(row)),
        DataType::UInt32 => Variant::UInt(a.as_primitive::<UInt32Type>().value(row)),
        DataType::UInt64 => Variant::UBigInt(a.as_primitive::<UInt64Type>().value(row)),
        DataType::Float16 => Variant::Real(a.as_primitive::<Float16Type>().value(row).to_f32()),
        DataType::Float32 => Variant::Real(a.as_primitive::<Float32Type>().value(row)),
        DataType::Float64 => Variant::Double(a.as_primitive::<Float64Type>().value(row)),
        DataType::Decimal128(p, s) => Variant::Decimal {
            value: a
                .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                .value(row),
            precision: *p,
            scale: *s,
        },
        DataType::Utf8 => Variant::Varchar(a.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => Variant::Varchar(a.as_string::<i64>().value(row).to_string()),
        DataType::Utf8View => Variant::Varchar(a.as_string_view().value(row).to_string()),
        DataType::Binary => Variant::Varbinary(a.as_binary::<i32>().value(row).to_vec()),
        DataType::BinaryView => Variant::Varbinary(a.as_binary_view().value(row).to_vec()),
        // A UUID is a VARCHAR variant holding its text (as before UUIDs
        // were bytes); it casts back from that text.
        t if crate::uuid::is_uuid(t) => {
            Variant::Varchar(crate::uuid::text(a.as_fixed_size_binary().value(row)))
        }
        DataType::FixedSizeBinary(_) => {
            Variant::Varbinary(a.as_fixed_size_binary().value(row).to_vec())
        }
        DataType::LargeBinary => decode(a.as_binary::<i64>().value(row))?,
        DataType::Date32 => Variant::Date(
            a.as_primitive::<datafusion::arrow::datatypes::Date32Type>()
                .value(row),
        ),
        DataType::Time32(_) | DataType::Time64(_) | DataType::Timestamp(..) => {
            let (v, per) = match a.data_type() {
                DataType::Time32(TimeUnit::Second) => (
                    i64::from(
                        a.as_primitive::<datafusion::arrow::datatypes::Time32SecondType>()
                            .value(row),
                    ),
                    1_000_000_000,
                ),
                DataType::Time32(_) => (
                    i64::from(
                        a.as_primitive::<datafusion::arrow::datatypes::Time32MillisecondType>()
                            .value(row),
                    ),
                    1_000_000,
                ),
                DataType::Time64(TimeUnit::Microsecond) => (
                    a.as_primitive::<datafusion::arrow::datatypes::Time64MicrosecondType>()
                        .value(row),
                    1_000,
                ),
                DataType::Time64(_) => (
                    a.as_primitive::<datafusion::arrow::datatypes::Time64NanosecondType>()
                        .value(row),
                    1,
                ),
                DataType::Timestamp(unit, _) => {
                    let s = ScalarValue::try_from_array(a, row)
                        .map_err(|e| VariantError(e.to_string()))?;
                    let v = match s {
                        ScalarValue::TimestampSecond(Some(v), _)
                        | ScalarValue::TimestampMillisecond(Some(v), _)
                        | ScalarValue::TimestampMicrosecond(Some(v), _)
                        | ScalarValue::TimestampNanosecond(Some(v), _) => v,
                        _ => return Ok(Variant::SqlNull),
                    };
                    let per = match unit {
                        TimeUnit::Second => 1_000_000_000,
                        TimeUnit::Millisecond => 1_000_000,
                        TimeUnit::Microsecond => 1_000,
                        TimeUnit::Nanosecond => 1,
                    };
                    (v, per)
                }
                _ => unreachable!("matched above"),
            };
            let v = ns(v, per).ok_or_else(|| VariantError("time out of range".into()))?;
            match a.data_type() {
                DataType::Timestamp(_, Some(_)) => Variant::TimestampTz(v),
                DataType::Timestamp(_, None) => Variant::Timestamp(v),
                _ => Variant::Time(v),
            }
        }
        DataType::List(_) => items(&a.as_list::<i32>().value(row))?,
        DataType::LargeList(_) => items(&a.as_list::<i64>().value(row))?,
        DataType::FixedSizeList(..) => items(&a.as_fixed_size_list().value(row))?,
        DataType::Map(..) => {
            let entries = a.as_map().value(row);
            let (keys, values) = (entries.column(0), entries.column(1));
            let mut out = Vec::with_capacity(entries.len());
            for i in 0..entries.len() {
                out.push((value_at(keys, i)?, value_at(values, i)?));
            }
            Variant::map(out)
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let mut out = Vec::with_capacity(fields.len());
            for (f, c) in fields.iter().zip(s.columns()) {
                out.push((Variant::Varchar(f.name().clone()), value_at(c, row)?));
            }
            Variant::map(out)
        }
        other => {
            return Err(VariantError(format!(
                "a value of type {other} cannot be cast to VARIANT"
            )))
        }
    })
}

fn items(a: &ArrayRef) -> Result<Variant, VariantError> {
    Ok(Variant::Array(
        (0..a.len())
            .map(|i| value_at(a, i))
            .collect::<Result<_, _>>()?,
    ))
}

/// The variants of a `VARIANT` column (`None` for NULL).
pub fn decode_all(a: &dyn Array) -> Result<Vec<Option<Variant>>, VariantError> {
    let b = a.as_binary::<i64>();
    b.iter().map(|v| v.map(decode).transpose()).collect()
}

/// `values` cast to `to` (see the module's rules); a variant that does
/// not fit is NULL.
pub fn from_variants(values: &[Option<Variant>], to: &DataType) -> Result<ArrayRef, VariantError> {
    cast_variants(values, to, false)
}

/// Like [`from_variants`], but a ROW's field takes the map entry whose key
/// is its name in any case (Feldera's `jsonstring_as_<type>` functions).
pub fn from_variants_any_case(
    values: &[Option<Variant>],
    to: &DataType,
) -> Result<ArrayRef, VariantError> {
    cast_variants(values, to, true)
}

fn cast_variants(
    values: &[Option<Variant>],
    to: &DataType,
    any_case: bool,
) -> Result<ArrayRef, VariantError> {
    let fail = |e: datafusion::arrow::error::ArrowError| VariantError(e.to_string());
    Ok(match to {
        DataType::LargeBinary => Arc::new(LargeBinaryArray::from_iter(values.iter().map(
            |v| match v {
                None | Some(Variant::SqlNull) => None,
                Some(v) => Some(encode(v)),
            },
        ))),
        DataType::List(item) => {
            let mut children = Vec::new();
            let mut lengths = Vec::with_capacity(values.len());
            let mut valid = Vec::with_capacity(values.len());
            for v in values {
                match v {
                    Some(Variant::Array(xs)) => {
                        children.extend(xs.iter().cloned().map(Some));
                        lengths.push(xs.len());
                        valid.push(true);
                    }
                    _ => {
                        lengths.push(0);
                        valid.push(false);
                    }
                }
            }
            let child = cast_variants(&children, item.data_type(), any_case)?;
            Arc::new(
                ListArray::try_new(
                    Arc::clone(item),
                    OffsetBuffer::from_lengths(lengths),
                    child,
                    Some(NullBuffer::from(valid)),
                )
                .map_err(fail)?,
            )
        }
        DataType::Struct(fields) => {
            let mut columns: Vec<Vec<Option<Variant>>> = vec![Vec::new(); fields.len()];
            let mut valid = Vec::with_capacity(values.len());
            for v in values {
                let entries = match v {
                    Some(Variant::Map(entries)) => Some(entries),
                    _ => None,
                };
                valid.push(entries.is_some());
                for (f, column) in fields.iter().zip(columns.iter_mut()) {
                    column.push(entries.and_then(|es| {
                        es.iter()
                            .find(|(k, _)| match k {
                                Variant::Varchar(s) if any_case => s.eq_ignore_ascii_case(f.name()),
                                Variant::Varchar(s) => s == f.name(),
                                _ => false,
                            })
                            .map(|(_, v)| v.clone())
                    }));
                }
            }
            let arrays = fields
                .iter()
                .zip(&columns)
                .map(|(f, c)| cast_variants(c, f.data_type(), any_case))
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(
                StructArray::try_new(fields.clone(), arrays, Some(NullBuffer::from(valid)))
                    .map_err(fail)?,
            )
        }
        DataType::Map(entries_field, sorted) => {
            let DataType::Struct(kv) = entries_field.data_type() else {
                return Err(VariantError(format!("a map of {to}")));
            };
            let (mut keys, mut vals) = (Vec::new(), Vec::new());
            let mut lengths = Vec::with_capacity(values.len());
            let mut valid = Vec::with_capacity(values.len());
            for v in values {
                let Some(Variant::Map(entries)) = v else {
                    lengths.push(0);
                    valid.push(false);
                    continue;
                };
                // An entry whose key does not fit the key type is left out:
                // a map's keys are never NULL.
                let cast = cast_variants(
                    &entries
                        .iter()
                        .map(|(k, _)| Some(k.clone()))
                        .collect::<Vec<_>>(),
                    kv[0].data_type(),
                    any_case,
                )?;
                let mut n = 0;
                for (i, (k, value)) in entries.iter().enumerate() {
                    if cast.is_valid(i) {
                        keys.push(Some(k.clone()));
                        vals.push(Some(value.clone()));
                        n += 1;
                    }
                }
                lengths.push(n);
                valid.push(true);
            }
            let entries = StructArray::try_new(
                kv.clone(),
                vec![
                    cast_variants(&keys, kv[0].data_type(), any_case)?,
                    cast_variants(&vals, kv[1].data_type(), any_case)?,
                ],
                None,
            )
            .map_err(fail)?;
            Arc::new(
                MapArray::try_new(
                    Arc::clone(entries_field),
                    OffsetBuffer::from_lengths(lengths),
                    entries,
                    Some(NullBuffer::from(valid)),
                    *sorted,
                )
                .map_err(fail)?,
            )
        }
        _ => {
            let null = ScalarValue::try_from(to).map_err(|e| VariantError(e.to_string()))?;
            let scalars = values.iter().map(|v| {
                v.as_ref()
                    .and_then(|v| scalar_as(v, to))
                    .unwrap_or_else(|| null.clone())
            });
            ScalarValue::iter_to_array(scalars).map_err(|e| VariantError(e.to_string()))?
        }
    })
}

/// A scalar variant as a value of `to`, where its type converts naturally.
fn scalar_as(v: &Variant, to: &DataType) -> Option<ScalarValue> {
    if crate::uuid::is_uuid(to) {
        return match v {
            Variant::Varchar(s) => crate::uuid::parse(s)
                .map(|b| ScalarValue::FixedSizeBinary(crate::uuid::BYTES, Some(b.to_vec()))),
            _ => None,
        };
    }
    let natural = match v {
        Variant::Boolean(b) => ScalarValue::Boolean(Some(*b)),
        Variant::TinyInt(x) => ScalarValue::Int8(Some(*x)),
        Variant::SmallInt(x) => ScalarValue::Int16(Some(*x)),
        Variant::Int(x) => ScalarValue::Int32(Some(*x)),
        Variant::BigInt(x) => ScalarValue::Int64(Some(*x)),
        Variant::UTinyInt(x) => ScalarValue::UInt8(Some(*x)),
        Variant::USmallInt(x) => ScalarValue::UInt16(Some(*x)),
        Variant::UInt(x) => ScalarValue::UInt32(Some(*x)),
        Variant::UBigInt(x) => ScalarValue::UInt64(Some(*x)),
        Variant::Real(x) => ScalarValue::Float32(Some(*x)),
        Variant::Double(x) => ScalarValue::Float64(Some(*x)),
        Variant::Decimal {
            value,
            precision,
            scale,
        } => ScalarValue::Decimal128(Some(*value), *precision, *scale),
        Variant::Varchar(s) => ScalarValue::Utf8(Some(s.clone())),
        Variant::Varbinary(b) => ScalarValue::Binary(Some(b.clone())),
        Variant::Date(d) => ScalarValue::Date32(Some(*d)),
        Variant::Time(t) => ScalarValue::Time64Nanosecond(Some(*t)),
        Variant::Timestamp(t) => ScalarValue::TimestampNanosecond(Some(*t), None),
        Variant::TimestampTz(t) => {
            ScalarValue::TimestampNanosecond(Some(*t), Some(Arc::from("+00:00")))
        }
        Variant::SqlNull | Variant::Null | Variant::Array(_) | Variant::Map(_) => return None,
    };
    let from = natural.data_type();
    let text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    let bytes = |t: &DataType| {
        matches!(
            t,
            DataType::Binary | DataType::BinaryView | DataType::FixedSizeBinary(_)
        )
    };
    let natural_conversion = (from.is_numeric() && to.is_numeric())
        || (text(&from) && text(to))
        || (bytes(&from) && bytes(to))
        || (from == DataType::Boolean && *to == DataType::Boolean)
        || (from == DataType::Date32 && matches!(to, DataType::Date32 | DataType::Date64))
        || (matches!(from, DataType::Time64(_))
            && matches!(to, DataType::Time32(_) | DataType::Time64(_)))
        || (matches!(from, DataType::Timestamp(..)) && matches!(to, DataType::Timestamp(..)));
    if !natural_conversion {
        return None;
    }
    natural.cast_to(to).ok().filter(|s| !s.is_null())
}

/// Whether values of `t` are shown as text: a `VARIANT` (its JSON) or a
/// `UUID` (its canonical text), at any depth.
pub fn shown_as_text(t: &DataType) -> bool {
    holds_variant(t) || crate::uuid::holds_uuid(t)
}

/// The type `t` is shown as: each `VARIANT` and `UUID` in it becomes text.
pub fn text_type(t: &DataType) -> DataType {
    match t {
        DataType::LargeBinary => DataType::Utf8,
        t if crate::uuid::is_uuid(t) => DataType::Utf8,
        DataType::List(f) => DataType::List(text_field(f)),
        DataType::Struct(fields) => {
            DataType::Struct(fields.iter().map(text_field).collect::<Fields>())
        }
        DataType::Map(f, sorted) => DataType::Map(text_field(f), *sorted),
        other => other.clone(),
    }
}

fn text_field(f: &Arc<Field>) -> Arc<Field> {
    Arc::new(f.as_ref().clone().with_data_type(text_type(f.data_type())))
}

/// `a` with each `VARIANT` in it replaced by its JSON text and each
/// `UUID` by its canonical text; `a` itself when it holds neither.
pub fn as_text(a: &ArrayRef) -> Result<ArrayRef, VariantError> {
    let fail = |e: datafusion::arrow::error::ArrowError| VariantError(e.to_string());
    if !shown_as_text(a.data_type()) {
        return Ok(Arc::clone(a));
    }
    Ok(match a.data_type() {
        t if crate::uuid::is_uuid(t) => crate::uuid::texts(a.as_ref()),
        DataType::LargeBinary => {
            let texts = decode_all(a.as_ref())?;
            Arc::new(StringArray::from_iter(
                texts.iter().map(|v| v.as_ref().map(to_json_lenient)),
            ))
        }
        DataType::List(f) => {
            let l = a.as_list::<i32>();
            Arc::new(
                ListArray::try_new(
                    text_field(f),
                    l.offsets().clone(),
                    as_text(l.values())?,
                    l.nulls().cloned(),
                )
                .map_err(fail)?,
            )
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(as_text)
                .collect::<Result<Vec<_>, _>>()?;
            Arc::new(
                StructArray::try_new(
                    fields.iter().map(text_field).collect::<Fields>(),
                    columns,
                    s.nulls().cloned(),
                )
                .map_err(fail)?,
            )
        }
        DataType::Map(f, sorted) => {
            let m = a.as_map();
            let entries: ArrayRef = Arc::new(m.entries().clone());
            let entries = as_text(&entries)?;
            Arc::new(
                MapArray::try_new(
                    text_field(f),
                    m.offsets().clone(),
                    entries.as_struct().clone(),
                    m.nulls().cloned(),
                    *sorted,
                )
                .map_err(fail)?,
            )
        }
        other => {
            return Err(VariantError(format!(
                "showing a VARIANT inside {other} is not supported"
            )))
        }
    })
}

/// `batch` with each `VARIANT` in it shown as JSON text and each `UUID` as
/// its text (see [`as_text`]).
pub fn batch_as_text(batch: &RecordBatch) -> Result<RecordBatch, VariantError> {
    let schema = batch.schema();
    if !schema.fields().iter().any(|f| shown_as_text(f.data_type())) {
        return Ok(batch.clone());
    }
    let columns = batch
        .columns()
        .iter()
        .map(as_text)
        .collect::<Result<Vec<_>, _>>()?;
    let fields = schema.fields().iter().map(text_field).collect::<Fields>();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| VariantError(e.to_string()))
}

/// Checks that every `VARIANT` in `a` (at any depth) is a variant's
/// encoding: bytes from outside (a Parquet or Arrow file's binary column
/// read into a `VARIANT` one) are refused where they enter, not met by a
/// later step.
pub fn check(a: &dyn Array) -> Result<(), VariantError> {
    match a.data_type() {
        DataType::LargeBinary => decode_all(a).map(|_| ()),
        DataType::List(_) => check(a.as_list::<i32>().values().as_ref()),
        DataType::LargeList(_) => check(a.as_list::<i64>().values().as_ref()),
        DataType::FixedSizeList(..) => check(a.as_fixed_size_list().values().as_ref()),
        DataType::Struct(_) => a
            .as_struct()
            .columns()
            .iter()
            .try_for_each(|c| check(c.as_ref())),
        DataType::Map(..) => {
            let entries = a.as_map().entries();
            entries.columns().iter().try_for_each(|c| check(c.as_ref()))
        }
        _ => Ok(()),
    }
}

/// Whether a top-level column of type `t` is read as text.
fn read_as_text(t: &DataType) -> bool {
    is_variant(t) || crate::uuid::is_uuid(t)
}

/// `schema` with its top-level `VARIANT` columns read as text (the JSON of
/// their values), and its `UUID` columns (their canonical text); `schema`
/// itself when it has none.
pub fn text_schema(schema: &SchemaRef) -> SchemaRef {
    if !schema.fields().iter().any(|f| read_as_text(f.data_type())) {
        return Arc::clone(schema);
    }
    let fields = schema
        .fields()
        .iter()
        .map(|f| match read_as_text(f.data_type()) {
            true => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8)),
            false => Arc::clone(f),
        })
        .collect::<Fields>();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// A batch read with [`text_schema`] as `schema`'s: each `VARIANT`
/// column's JSON text parsed (text that is not JSON is an error), each
/// `UUID` column's text read (text that is no UUID is an error).
pub fn parse_text_columns(
    batch: &RecordBatch,
    schema: &SchemaRef,
) -> Result<RecordBatch, VariantError> {
    let mut columns = Vec::with_capacity(batch.num_columns());
    for (c, f) in batch.columns().iter().zip(schema.fields()) {
        if crate::uuid::is_uuid(f.data_type()) {
            let uuids = crate::uuid::from_texts(c.as_ref(), false)
                .map_err(|e| VariantError(format!("column '{}': {e}", f.name())))?;
            columns.push(uuids);
            continue;
        }
        if !is_variant(f.data_type()) {
            columns.push(Arc::clone(c));
            continue;
        }
        let mut out = Vec::with_capacity(c.len());
        for text in c.as_string::<i32>() {
            out.push(match text {
                None => None,
                Some(t) => Some(encode(&parse(t).ok_or_else(|| {
                    VariantError(format!("column '{}' is not JSON: {t}", f.name()))
                })?)),
            });
        }
        columns.push(Arc::new(LargeBinaryArray::from_iter(out)));
    }
    RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| VariantError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int8Array};

    #[test]
    fn values_keep_their_types_and_cast_back() {
        let a: ArrayRef = Arc::new(Int8Array::from(vec![Some(20), None]));
        let v = to_variants(a.as_ref()).unwrap();
        let values = decode_all(&v).unwrap();
        assert_eq!(
            values,
            vec![Some(Variant::TinyInt(20)), Some(Variant::SqlNull)]
        );
        let back = from_variants(&values, &DataType::Int32).unwrap();
        assert_eq!(
            back.as_primitive::<Int32Type>(),
            &Int32Array::from(vec![Some(20), None])
        );
        // Text does not convert to a number.
        let text = from_variants(&[Some(Variant::Varchar("1".into()))], &DataType::Int32).unwrap();
        assert!(text.is_null(0));
        // An overflow is NULL, not an error.
        let big = from_variants(&[Some(Variant::BigInt(1000))], &DataType::Int8).unwrap();
        assert!(big.is_null(0));
    }

    #[test]
    fn a_row_is_a_map_of_its_fields_and_a_map_casts_to_a_row() {
        let fields = Fields::from(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
        ]);
        let row = StructArray::new(
            fields.clone(),
            vec![
                Arc::new(Int32Array::from(vec![2])),
                Arc::new(StringArray::from(vec!["a"])),
            ],
            None,
        );
        let v = value_at(&row, 0).unwrap();
        assert_eq!(
            super::super::json::to_json(&v).unwrap(),
            r#"{"i":2,"s":"a"}"#
        );
        let parsed = super::super::json::parse(r#"{"i": 2, "x": 1}"#).unwrap();
        let back = from_variants(&[Some(parsed)], &DataType::Struct(fields)).unwrap();
        let s = back.as_struct();
        assert_eq!(s.column(0).as_primitive::<Int32Type>().value(0), 2);
        assert!(s.column(1).is_null(0));
    }

    #[test]
    fn variants_are_shown_as_json_text_at_any_depth() {
        let v: ArrayRef = Arc::new(LargeBinaryArray::from_iter(vec![
            Some(encode(&Variant::Varchar("hi".into()))),
            None,
        ]));
        let list: ArrayRef = Arc::new(ListArray::new(
            Arc::new(Field::new("item", DataType::LargeBinary, true)),
            OffsetBuffer::from_lengths([2]),
            v,
            None,
        ));
        let shown = as_text(&list).unwrap();
        let items = shown.as_list::<i32>().value(0);
        let items = items.as_string::<i32>();
        assert_eq!(items.value(0), r#""hi""#);
        assert!(items.is_null(1));
    }
}
