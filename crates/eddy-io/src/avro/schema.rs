//! Avro schemas: the checks that keep a hostile schema from taking the
//! process down, and the schema a view's columns are written in.

use std::collections::HashMap;

use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::Schema;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use serde_json::{json, Value};

/// Refuses schemas that would let one message take the process down or
/// hold it: a type that contains itself (decoding recurses once per level,
/// and a message of a few bytes per level would exhaust the stack),
/// decimals wider than SQL's 38 digits (their text is as long as their
/// scale), and arrays of types that take no bytes (a count alone would
/// make millions of values out of nothing).
pub fn check_schema(schema: &Schema) -> Result<(), String> {
    let resolved = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
    let names = resolved.get_names();
    let mut open = Vec::new();
    check_node(schema, names, &mut open)
}

pub(super) fn lookup<'a>(
    schema: &'a Schema,
    names: &HashMap<Name, &'a Schema>,
) -> Result<&'a Schema, String> {
    match schema {
        Schema::Ref { name } => names
            .get(name)
            .copied()
            .ok_or_else(|| format!("unknown Avro type {name}")),
        s => Ok(s),
    }
}

fn check_node<'a>(
    schema: &'a Schema,
    names: &HashMap<Name, &'a Schema>,
    open: &mut Vec<&'a Name>,
) -> Result<(), String> {
    match schema {
        Schema::Ref { name } => {
            if open.contains(&name) {
                return Err(format!(
                    "Avro type {name} contains itself: recursive schemas are not read"
                ));
            }
            open.push(name);
            let r = check_node(lookup(schema, names)?, names, open);
            open.pop();
            r
        }
        Schema::Record(r) => {
            open.push(&r.name);
            let result = r
                .fields
                .iter()
                .try_for_each(|f| check_node(&f.schema, names, open));
            open.pop();
            result
        }
        Schema::Union(u) => u
            .variants()
            .iter()
            .try_for_each(|v| check_node(v, names, open)),
        Schema::Array(a) => {
            if zero_width(&a.items, names, 0) {
                return Err("an Avro array of a type that takes no bytes is not read".into());
            }
            check_node(&a.items, names, open)
        }
        Schema::Map(m) => check_node(&m.types, names, open),
        Schema::Decimal(d) if d.precision > 38 || d.scale > 38 => Err(format!(
            "an Avro decimal of precision {} and scale {} is wider than SQL's 38 digits",
            d.precision, d.scale
        )),
        _ => Ok(()),
    }
}

/// Whether a value of `schema` can take no bytes at all.
fn zero_width(schema: &Schema, names: &HashMap<Name, &Schema>, depth: usize) -> bool {
    if depth > 64 {
        return false;
    }
    match lookup(schema, names) {
        Ok(Schema::Null) => true,
        Ok(Schema::Record(r)) => r
            .fields
            .iter()
            .all(|f| zero_width(&f.schema, names, depth + 1)),
        Ok(Schema::Fixed(f)) => f.size == 0,
        Ok(Schema::Enum(e)) => e.symbols.len() <= 1,
        _ => false,
    }
}

/// The Avro record schema of a view's columns, parsed and as JSON text.
pub fn schema_of(fields: &Fields) -> Result<(Schema, String), String> {
    let columns = fields
        .iter()
        .map(|f| {
            let t = avro_type(f)?;
            let t = if f.is_nullable() {
                json!(["null", t])
            } else {
                t
            };
            Ok(json!({"name": f.name(), "type": t}))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let schema = json!({"type": "record", "name": "eddy_row", "fields": columns});
    let parsed = Schema::parse(&schema).map_err(|e| format!("the view's Avro schema: {e}"))?;
    Ok((parsed, schema.to_string()))
}

fn avro_type(f: &Field) -> Result<Value, String> {
    Ok(match f.data_type() {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => json!("string"),
        // A VARIANT is written as its JSON text.
        DataType::LargeBinary => json!("string"),
        // A UUID is written as its canonical text.
        t if crate::uuid::is_uuid(t) => json!("string"),
        DataType::Binary | DataType::BinaryView => json!("bytes"),
        DataType::Date32 => json!({"type": "int", "logicalType": "date"}),
        DataType::Time64(_) => json!({"type": "long", "logicalType": "time-micros"}),
        DataType::Timestamp(_, _) => json!({"type": "long", "logicalType": "timestamp-micros"}),
        DataType::Decimal128(p, s) if *s >= 0 => {
            json!({"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s})
        }
        other => {
            return Err(format!(
                "column '{}' of type {other} has no Avro encoding yet",
                f.name()
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemas_that_could_take_the_process_down_are_refused() {
        let refused = [
            r#"{"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}"#,
            r#"{"type": "bytes", "logicalType": "decimal", "precision": 1000, "scale": 900}"#,
            r#"{"type": "array", "items": "null"}"#,
            r#"{"type": "array", "items": {"type": "record", "name": "E", "fields": []}}"#,
        ];
        for text in refused {
            let schema = Schema::parse_str(text).unwrap();
            assert!(check_schema(&schema).is_err(), "{text}");
        }
        let fine = r#"{"type": "record", "name": "R", "fields": [
            {"name": "a", "type": {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}},
            {"name": "b", "type": ["null", "P"]},
            {"name": "c", "type": {"type": "array", "items": "P"}}]}"#;
        check_schema(&Schema::parse_str(fine).unwrap()).unwrap();
    }
}
