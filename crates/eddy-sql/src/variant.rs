//! `VARIANT` in SQL (json.md): its functions, its indexing, and its casts.
//!
//! The type is planned as Arrow `LargeBinary` (see `eddy_io::variant`,
//! which holds the value model and its conversions). Here:
//!
//! * `TYPEOF(v)`, `PARSE_JSON(s)`, `TO_JSON(v)`, `VARIANTNULL()`,
//!   `JSON_OBJECT_KEYS(v)`, `JSON_KEYS(v)`, `JSON_EACH_<type>(v)`,
//!   `VARIANT_MERGE(a, b)`, and the body of a program's bodiless
//!   `jsonstring_as_<type>(s)` (JSON text parsed straight into a
//!   user-defined type, fields matched in any case);
//! * `v[i]`, `v['key']`, `v.field` and `v."field"` ([`Indexing`], an
//!   expression planner tried before DataFusion's): the element or entry
//!   as a `VARIANT`, NULL where there is none;
//! * casts to and from `VARIANT`, at any depth (a `VARIANT ARRAY` cast to
//!   `INT ARRAY`, a ROW of variants), are made by [`crate::rowcast`]'s
//!   function, which calls `eddy_io::variant::arrow` where a `VARIANT`
//!   meets another type.
//!
//! Stateless functions: their incremental rule is that of the projection
//! or filter holding them.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, StringArray};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, TimeUnit};
use datafusion::common::{plan_err, Column, DFSchema, Result, ScalarValue, TableReference};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawFieldAccessExpr};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, GetFieldAccess, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use eddy_io::variant::arrow::{decode_all, from_variants_any_case, value_at};
use eddy_io::variant::codec::encode;
use eddy_io::variant::json::{parse, to_json};
use eddy_io::variant::{is_variant, Variant, DATA_TYPE};

/// The name of the indexing function `v[key]` is planned as.
pub const INDEX: &str = "eddy_variant_index";

/// `eddy_jsonstring_as(text, NULL::T)`: the body of a program's
/// `jsonstring_as_<type>` function (see [`crate::functions`]).
pub const JSONSTRING_AS: &str = "eddy_jsonstring_as";

/// The functions of this module, to register.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        Kind::TypeOf,
        Kind::ParseJson,
        Kind::ToJson,
        Kind::Null,
        Kind::Index,
        Kind::ObjectKeys,
        Kind::Merge,
        Kind::Keys,
        Kind::JsonstringAs,
        Kind::Each(Each::Bigint),
        Kind::Each(Each::String),
        Kind::Each(Each::Boolean),
        Kind::Each(Each::Date),
        Kind::Each(Each::Time),
        Kind::Each(Each::Timestamp),
    ]
    .into_iter()
    .map(|kind| Arc::new(ScalarUDF::new_from_impl(VariantFn::new(kind))))
    .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    TypeOf,
    ParseJson,
    ToJson,
    Null,
    Index,
    ObjectKeys,
    Merge,
    Keys,
    JsonstringAs,
    Each(Each),
}

/// The `JSON_EACH_<type>` functions, by the type they extract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Each {
    Bigint,
    String,
    Boolean,
    Date,
    Time,
    Timestamp,
}

impl Each {
    fn data_type(self) -> DataType {
        match self {
            Each::Bigint => DataType::Int64,
            Each::String => DataType::Utf8,
            Each::Boolean => DataType::Boolean,
            Each::Date => DataType::Date32,
            Each::Time => DataType::Time64(TimeUnit::Nanosecond),
            Each::Timestamp => DataType::Timestamp(TimeUnit::Nanosecond, None),
        }
    }

    /// The value of `v` this function extracts, if it does: values of
    /// the type (integers that fit, for `BIGINT`; never text), and for
    /// the date and time types also text that parses as one.
    fn pick(self, v: &Variant) -> Option<ScalarValue> {
        let to = self.data_type();
        let natural = match (self, v) {
            (Each::Bigint, _) => {
                let n = v.as_integer().or_else(|| match v {
                    Variant::Decimal { value, scale, .. } if *scale >= 0 => {
                        let unit = 10i128.checked_pow(u32::from(scale.unsigned_abs()))?;
                        (value % unit == 0).then(|| value / unit)
                    }
                    Variant::Double(f) if f.fract() == 0.0 => Some(*f as i128),
                    Variant::Real(f) if f.fract() == 0.0 => Some(*f as i128),
                    _ => None,
                })?;
                return i64::try_from(n).ok().map(|n| ScalarValue::Int64(Some(n)));
            }
            (Each::String, Variant::Varchar(s)) => return Some(ScalarValue::Utf8(Some(s.clone()))),
            (Each::Boolean, Variant::Boolean(b)) => return Some(ScalarValue::Boolean(Some(*b))),
            (Each::Date, Variant::Date(d)) => ScalarValue::Date32(Some(*d)),
            (Each::Time, Variant::Time(t)) => ScalarValue::Time64Nanosecond(Some(*t)),
            (Each::Timestamp, Variant::Timestamp(t)) => {
                ScalarValue::TimestampNanosecond(Some(*t), None)
            }
            (Each::Date | Each::Time | Each::Timestamp, Variant::Varchar(s)) => {
                ScalarValue::Utf8(Some(s.clone()))
            }
            _ => return None,
        };
        natural.cast_to(&to).ok().filter(|s| !s.is_null())
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct VariantFn {
    kind: Kind,
    signature: Signature,
}

impl VariantFn {
    fn new(kind: Kind) -> Self {
        let v = Volatility::Immutable;
        let signature = match kind {
            Kind::TypeOf | Kind::ToJson | Kind::ObjectKeys | Kind::Keys | Kind::Each(_) => {
                Signature::exact(vec![DATA_TYPE], v)
            }
            Kind::JsonstringAs => Signature::any(2, v),
            Kind::ParseJson => Signature::any(1, v),
            Kind::Null => Signature::nullary(v),
            Kind::Index => Signature::any(2, v),
            Kind::Merge => Signature::exact(vec![DATA_TYPE, DATA_TYPE], v),
        };
        Self { kind, signature }
    }
}

impl ScalarUDFImpl for VariantFn {
    fn name(&self) -> &str {
        match self.kind {
            Kind::TypeOf => "typeof",
            Kind::ParseJson => "parse_json",
            Kind::ToJson => "to_json",
            Kind::Null => "variantnull",
            Kind::Index => INDEX,
            Kind::ObjectKeys => "json_object_keys",
            Kind::Merge => "variant_merge",
            Kind::Keys => "json_keys",
            Kind::JsonstringAs => JSONSTRING_AS,
            Kind::Each(Each::Bigint) => "json_each_bigint",
            Kind::Each(Each::String) => "json_each_string",
            Kind::Each(Each::Boolean) => "json_each_boolean",
            Kind::Each(Each::Date) => "json_each_date",
            Kind::Each(Each::Time) => "json_each_time",
            Kind::Each(Each::Timestamp) => "json_each_timestamp",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::TypeOf | Kind::ToJson => DataType::Utf8,
            Kind::ObjectKeys | Kind::Keys => {
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
            }
            Kind::JsonstringAs => args[1].clone(),
            Kind::Each(each) => map_of(each.data_type()),
            Kind::ParseJson | Kind::Null | Kind::Index | Kind::Merge => DATA_TYPE,
        })
    }

    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        if self.kind != Kind::Index {
            return Ok(format!(
                "{}({})",
                self.name(),
                args.iter()
                    .map(|a| a.schema_name().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        // `v[key]`, named as DataFusion names a map's or a ROW's.
        let key = match &args[1] {
            Expr::Literal(ScalarValue::Utf8(Some(s)), _) => s.clone(),
            other => other.schema_name().to_string(),
        };
        Ok(format!("{}[{key}]", args[0].schema_name()))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let fail = |e: eddy_io::variant::VariantError| {
            datafusion::error::DataFusionError::Execution(e.to_string())
        };
        let variants = |a: &ArrayRef| decode_all(a.as_ref()).map_err(fail);
        let out: ArrayRef = match self.kind {
            Kind::TypeOf => Arc::new(StringArray::from_iter_values(
                variants(&arrays[0])?
                    .iter()
                    .map(|v| v.as_ref().map_or("NULL", Variant::type_name)),
            )),
            Kind::ToJson => Arc::new(StringArray::from_iter(
                variants(&arrays[0])?
                    .iter()
                    .map(|v| v.as_ref().and_then(to_json)),
            )),
            Kind::ParseJson => {
                let text = cast(&arrays[0], &DataType::Utf8)?;
                encoded(
                    text.as_string::<i32>()
                        .iter()
                        .map(|t| t.and_then(parse))
                        .collect(),
                )
            }
            Kind::Null => encoded(vec![Some(Variant::Null); n]),
            Kind::Index => {
                let (values, keys) = (variants(&arrays[0])?, &arrays[1]);
                let mut out = Vec::with_capacity(n);
                for (row, v) in values.iter().enumerate() {
                    let found = match v {
                        Some(v) if keys.is_valid(row) => {
                            let key = value_at(keys.as_ref(), row).map_err(fail)?;
                            v.index(&key).cloned()
                        }
                        _ => None,
                    };
                    out.push(found.filter(|f| *f != Variant::SqlNull));
                }
                encoded(out)
            }
            Kind::ObjectKeys => object_keys(&variants(&arrays[0])?)?,
            Kind::Keys => {
                let paths = variants(&arrays[0])?
                    .iter()
                    .map(|v| v.as_ref().map(keys))
                    .collect::<Vec<_>>();
                string_lists(&paths)?
            }
            Kind::JsonstringAs => {
                let text = cast(&arrays[0], &DataType::Utf8)?;
                let parsed: Vec<Option<Variant>> = text
                    .as_string::<i32>()
                    .iter()
                    .map(|t| t.and_then(parse))
                    .collect();
                from_variants_any_case(&parsed, arrays[1].data_type()).map_err(fail)?
            }
            Kind::Each(each) => json_each(each, &variants(&arrays[0])?)?,
            Kind::Merge => {
                let (a, b) = (variants(&arrays[0])?, variants(&arrays[1])?);
                encoded(
                    a.into_iter()
                        .zip(b)
                        .map(|(a, b)| Some(merge(a?, b?)))
                        .collect(),
                )
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

fn encoded(values: Vec<Option<Variant>>) -> ArrayRef {
    Arc::new(datafusion::arrow::array::LargeBinaryArray::from_iter(
        values.iter().map(|v| v.as_ref().map(encode)),
    ))
}

/// `JSON_OBJECT_KEYS`: the string keys of an object, sorted; an empty
/// array for any other variant.
fn object_keys(values: &[Option<Variant>]) -> Result<ArrayRef> {
    let keys = values
        .iter()
        .map(|v| {
            v.as_ref().map(|v| match v {
                // Entries are sorted by key, and string keys by their text.
                Variant::Map(entries) => entries
                    .iter()
                    .filter_map(|(k, _)| match k {
                        Variant::Varchar(s) => Some(s.clone()),
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            })
        })
        .collect::<Vec<_>>();
    string_lists(&keys)
}

/// An array of strings per row (NULL for `None`).
fn string_lists(rows: &[Option<Vec<String>>]) -> Result<ArrayRef> {
    let lengths = rows.iter().map(|r| r.as_ref().map_or(0, Vec::len));
    let valid: Vec<bool> = rows.iter().map(Option::is_some).collect();
    let offsets = OffsetBuffer::from_lengths(lengths);
    let items: Vec<&String> = rows.iter().flatten().flatten().collect();
    let items = StringArray::from_iter_values(items);
    Ok(Arc::new(ListArray::try_new(
        Arc::new(Field::new("item", DataType::Utf8, true)),
        offsets,
        Arc::new(items),
        Some(NullBuffer::from(valid)),
    )?))
}

/// `JSON_KEYS`: the dot-joined paths of the keys of every object nested
/// in objects (not in arrays), deduplicated and sorted; a key that is not
/// a plain name is double-quoted, with `"` and `\` escaped.
fn keys(v: &Variant) -> Vec<String> {
    fn walk(v: &Variant, prefix: &str, out: &mut Vec<String>) {
        let Variant::Map(entries) = v else { return };
        for (k, value) in entries {
            let Variant::Varchar(k) = k else { continue };
            let path = format!("{prefix}{}", path_part(k));
            walk(value, &format!("{path}."), out);
            out.push(path);
        }
    }
    let mut out = Vec::new();
    walk(v, "", &mut out);
    out.sort();
    out.dedup();
    out
}

fn path_part(k: &str) -> String {
    let plain = !k.is_empty()
        && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !k.starts_with(|c: char| c.is_ascii_digit());
    if plain {
        return k.to_string();
    }
    let escaped = k.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// The type of `JSON_EACH_<type>`: a map from text to the type.
fn map_of(value: DataType) -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "entries",
            DataType::Struct(
                vec![
                    Field::new("key", DataType::Utf8, false),
                    Field::new("value", value, true),
                ]
                .into(),
            ),
            false,
        )),
        false,
    )
}

/// `JSON_EACH_<type>`: the fields of an object whose values `each` picks.
fn json_each(each: Each, values: &[Option<Variant>]) -> Result<ArrayRef> {
    let mut keys = Vec::new();
    let mut picked = Vec::new();
    let mut lengths = Vec::with_capacity(values.len());
    for v in values {
        let before = keys.len();
        if let Some(Variant::Map(entries)) = v {
            for (k, value) in entries {
                if let (Variant::Varchar(k), Some(s)) = (k, each.pick(value)) {
                    keys.push(k.clone());
                    picked.push(s);
                }
            }
        }
        lengths.push(keys.len() - before);
    }
    let DataType::Map(entries_field, _) = map_of(each.data_type()) else {
        unreachable!("map_of gives a map")
    };
    let DataType::Struct(kv) = entries_field.data_type() else {
        unreachable!("a map's entries are a struct")
    };
    let values_array = if picked.is_empty() {
        datafusion::arrow::array::new_empty_array(&each.data_type())
    } else {
        ScalarValue::iter_to_array(picked)?
    };
    let entries = datafusion::arrow::array::StructArray::try_new(
        kv.clone(),
        vec![Arc::new(StringArray::from_iter_values(keys)), values_array],
        None,
    )?;
    let valid: Vec<bool> = values.iter().map(Option::is_some).collect();
    Ok(Arc::new(datafusion::arrow::array::MapArray::try_new(
        Arc::clone(&entries_field),
        OffsetBuffer::from_lengths(lengths),
        entries,
        Some(NullBuffer::from(valid)),
        false,
    )?))
}

/// `VARIANT_MERGE(a, b)`: objects merged field by field, recursively;
/// anywhere else `b` wins (a JSON null in `b` replaces, it does not
/// remove).
fn merge(a: Variant, b: Variant) -> Variant {
    match (a, b) {
        (Variant::Map(left), Variant::Map(right)) => {
            let mut out = left;
            for (k, v) in right {
                match out.iter().position(|(key, _)| *key == k) {
                    Some(i) => {
                        let old = std::mem::replace(&mut out[i].1, Variant::Null);
                        out[i].1 = merge(old, v);
                    }
                    None => out.push((k, v)),
                }
            }
            Variant::map(out)
        }
        (_, b) => b,
    }
}

/// `v[key]` as a call of the indexing function.
fn index(v: Expr, key: Expr) -> Expr {
    let f = functions()
        .into_iter()
        .find(|f| f.name() == INDEX)
        .expect("the indexing function is defined");
    Expr::ScalarFunction(ScalarFunction::new_udf(f, vec![v, key]))
}

/// Plans `v[key]`, `v.field` and `t.v.field` where `v` is a `VARIANT`, and
/// `row[i]`; a MAP's key is read as the map's key type; every other access
/// is left to DataFusion's planners.
#[derive(Debug)]
pub struct Indexing;

impl ExprPlanner for Indexing {
    fn plan_field_access(
        &self,
        expr: RawFieldAccessExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawFieldAccessExpr>> {
        let Ok(base) = expr.expr.get_type(schema) else {
            return Ok(PlannerResult::Original(expr));
        };
        if let (DataType::Struct(fields), GetFieldAccess::ListIndex { key }) =
            (&base, &expr.field_access)
        {
            // `row[i]`: the i-th field of a ROW, counted from 1.
            if let Expr::Literal(k, _) = key.as_ref() {
                if let Some(i) = k.cast_to(&DataType::Int64).ok().and_then(|i| match i {
                    ScalarValue::Int64(Some(i)) => usize::try_from(i).ok(),
                    _ => None,
                }) {
                    return match i.checked_sub(1).and_then(|i| fields.get(i)) {
                        Some(f) => Ok(PlannerResult::Planned(
                            datafusion::functions::core::expr_fn::get_field(
                                expr.expr,
                                f.name().as_str(),
                            ),
                        )),
                        None => plan_err!(
                            "ROW index {i} is out of range: the ROW has {} fields",
                            fields.len()
                        ),
                    };
                }
            }
        }
        // `m[k]` of a MAP: the key is read as the map's key type
        // (DataFusion compares it with the keys as it is, and fails at run
        // time for an INT map indexed by a BIGINT literal); a key that
        // cannot be one (`m['a']`, `m[3000000000]`) finds nothing.
        if let (DataType::Map(entries, _), GetFieldAccess::ListIndex { key }) =
            (&base, &expr.field_access)
        {
            if let DataType::Struct(kv) = entries.data_type() {
                let want = kv.first().map(|f| f.data_type().clone());
                let have = key.get_type(schema).ok();
                if let (Some(want), Some(have)) = (want, have) {
                    if want != have && have != DataType::Null && !is_variant(&want) {
                        // A key that is no key of that type finds nothing.
                        let key = Expr::TryCast(datafusion::logical_expr::expr::TryCast::new(
                            key.clone(),
                            want,
                        ));
                        return Ok(PlannerResult::Original(RawFieldAccessExpr {
                            expr: expr.expr,
                            field_access: GetFieldAccess::ListIndex { key: Box::new(key) },
                        }));
                    }
                }
            }
        }
        if !is_variant(&base) {
            return Ok(PlannerResult::Original(expr));
        }
        let key = match &expr.field_access {
            GetFieldAccess::NamedStructField { name } => Expr::Literal(name.clone(), None),
            GetFieldAccess::ListIndex { key } => key.as_ref().clone(),
            GetFieldAccess::ListRange { .. } => {
                return plan_err!("a VARIANT cannot be sliced: cast it to an ARRAY first")
            }
        };
        Ok(PlannerResult::Planned(index(expr.expr, key)))
    }

    fn plan_compound_identifier(
        &self,
        field: &Field,
        qualifier: Option<&TableReference>,
        nested_names: &[String],
    ) -> Result<PlannerResult<Vec<Expr>>> {
        if !is_variant(field.data_type()) {
            return Ok(PlannerResult::Original(vec![]));
        }
        let mut e = Expr::Column(Column::new(qualifier.cloned(), field.name()));
        for name in nested_names {
            e = index(
                e,
                Expr::Literal(ScalarValue::Utf8(Some(name.clone())), None),
            );
        }
        Ok(PlannerResult::Planned(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(text: &str) -> Variant {
        parse(text).unwrap()
    }

    #[test]
    fn merge_follows_json_merge_patch_but_keeps_nulls() {
        let m = merge(
            obj(r#"{"a": {"x": 1, "y": 2}, "b": 1}"#),
            obj(r#"{"a": {"x": 9, "z": 3}, "c": 4, "b": null}"#),
        );
        assert_eq!(
            to_json(&m).unwrap(),
            r#"{"a":{"x":9,"y":2,"z":3},"b":null,"c":4}"#
        );
        let arrays = merge(obj(r#"{"t": [1, 2]}"#), obj(r#"{"t": [3]}"#));
        assert_eq!(to_json(&arrays).unwrap(), r#"{"t":[3]}"#);
    }

    #[test]
    fn object_keys_are_sorted_and_other_values_have_none() {
        let keys = object_keys(&[
            Some(obj(r#"{"b": 1, "a": {"c": 2}, "d": null}"#)),
            Some(obj("[1]")),
            None,
        ])
        .unwrap();
        let l = keys.as_list::<i32>();
        let first = l.value(0);
        let first: Vec<_> = first.as_string::<i32>().iter().flatten().collect();
        assert_eq!(first, vec!["a", "b", "d"]);
        assert_eq!(l.value(1).len(), 0);
        assert!(l.is_null(2));
    }
}
