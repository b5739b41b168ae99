//! JSON change formats, one change per line (or one JSON array of changes):
//!
//! * `insert_delete`: `{"insert": {...row...}}` or `{"delete": {...row...}}`;
//! * `raw`: a bare row object, inserted;
//! * `weighted`: `{"weight": w, "data": {...row...}}`;
//! * `debezium`: a Debezium change event, `{"before": row, "after": row,
//!   "op": "c" | "r" | "u" | "d"}`, bare (Kafka Connect's JSON converter
//!   without schemas) or under `"payload"` (with them). `c` and `r` insert
//!   `after`, `d` deletes `before`, `u` deletes `before` and inserts
//!   `after`; a `u` without `before` (a PostgreSQL table without `REPLICA
//!   IDENTITY FULL`) only inserts `after`, which replaces the old row in a
//!   table with a primary key. A tombstone (`null`, or a `null` payload)
//!   is no change. Other fields of the event (`source`, `ts_ms`, …) are
//!   ignored.
//!
//! Rows are objects keyed by column name (case-insensitive); missing columns
//! are NULL. Decoding into Arrow uses arrow-json, one row at a time only to
//! isolate bad rows: a row that does not fit is rejected alone.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::writer::{JsonArray, LineDelimited, WriterBuilder};
use datafusion::arrow::json::ReaderBuilder;
use eddy_dbsp::ZSet;
use serde_json::{Map, Value};

use crate::variant;
use crate::{Parsed, RowError};

/// How a JSON change is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpdateFormat {
    /// `{"insert": row}` / `{"delete": row}`.
    #[default]
    InsertDelete,
    /// A bare row, inserted.
    Raw,
    /// `{"weight": w, "data": row}`.
    Weighted,
    /// A Debezium change event (see the module's documentation).
    Debezium,
}

impl UpdateFormat {
    /// Its name, as written in a format's configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::InsertDelete => "insert_delete",
            Self::Raw => "raw",
            Self::Weighted => "weighted",
            Self::Debezium => "debezium",
        }
    }
}

impl std::str::FromStr for UpdateFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "insert_delete" => Ok(Self::InsertDelete),
            "raw" => Ok(Self::Raw),
            "weighted" => Ok(Self::Weighted),
            "debezium" => Ok(Self::Debezium),
            other => Err(format!(
                "unknown update format '{other}' (insert_delete, raw, weighted, debezium)"
            )),
        }
    }
}

/// The changes one JSON value stands for: one, or for a Debezium event
/// none, one or two.
fn changes_of(value: Value, format: UpdateFormat) -> Result<Vec<(Value, i64)>, String> {
    if format == UpdateFormat::Debezium {
        return debezium_changes(value);
    }
    change_of(value, format).map(|c| vec![c])
}

/// The changes of a Debezium event.
fn debezium_changes(value: Value) -> Result<Vec<(Value, i64)>, String> {
    let mut event = match value {
        Value::Null => return Ok(Vec::new()),
        Value::Object(mut m) => match m.remove("payload") {
            Some(Value::Object(p)) => p,
            Some(Value::Null) => return Ok(Vec::new()),
            Some(_) => return Err("\"payload\" must be an object".into()),
            None => m,
        },
        _ => return Err("expected a Debezium event (a JSON object)".into()),
    };
    let op = match event.get("op") {
        Some(Value::String(op)) => op.clone(),
        _ => return Err("a Debezium event needs \"op\"".into()),
    };
    let mut row = |field: &str| event.remove(field).filter(|v| !v.is_null());
    let (before, after) = (row("before"), row("after"));
    let needs = |row: Option<Value>, field: &str| {
        row.ok_or_else(|| format!("a Debezium '{op}' event needs \"{field}\""))
    };
    match op.as_str() {
        "c" | "r" => Ok(vec![(needs(after, "after")?, 1)]),
        "d" => Ok(vec![(needs(before, "before")?, -1)]),
        "u" => {
            let after = needs(after, "after")?;
            Ok(match before {
                Some(before) => vec![(before, -1), (after, 1)],
                None => vec![(after, 1)],
            })
        }
        "t" => Err("Debezium truncate events ('t') are not supported".into()),
        other => Err(format!("unknown Debezium op '{other}' (c, r, u, d)")),
    }
}

fn change_of(value: Value, format: UpdateFormat) -> Result<(Value, i64), String> {
    match format {
        UpdateFormat::Debezium => unreachable!("read by debezium_changes"),
        UpdateFormat::Raw => Ok((value, 1)),
        UpdateFormat::InsertDelete => match value {
            Value::Object(mut m) => {
                if let Some(row) = m.remove("insert") {
                    Ok((row, 1))
                } else if let Some(row) = m.remove("delete") {
                    Ok((row, -1))
                } else {
                    Err("expected {\"insert\": row} or {\"delete\": row}".into())
                }
            }
            _ => Err("expected a JSON object".into()),
        },
        UpdateFormat::Weighted => match value {
            Value::Object(mut m) => {
                let w = m
                    .get("weight")
                    .and_then(Value::as_i64)
                    .ok_or("missing integer \"weight\"")?;
                let row = m.remove("data").ok_or("missing \"data\"")?;
                Ok((row, w))
            }
            _ => Err("expected a JSON object".into()),
        },
    }
}

/// Lowercases keys that match no column exactly but match one ignoring
/// case, and refuses what the Arrow decoder would silently change.
/// The field metadata that holds a column's `DEFAULT`, as the JSON of its
/// value: a row that lacks the column gets it.
pub const DEFAULT_KEY: &str = "eddy.default";

/// The field metadata that holds, for a `NOT NULL` column outside a
/// table's primary key, the JSON of a value of its type: a delete that
/// gives only the key gets it (the table deletes by key, whatever the
/// other columns hold).
pub const PLACEHOLDER_KEY: &str = "eddy.placeholder";

/// Normalizes one row of a change: `deleting` when it deletes (its weight
/// is negative), which a table with a primary key does by key alone.
fn normalize_row(row: Value, schema: &SchemaRef, deleting: bool) -> Result<Value, String> {
    let Value::Object(m) = row else {
        return Err("a row must be a JSON object".into());
    };
    let mut out = Map::new();
    for (k, v) in m {
        let field = match schema.field_with_name(&k) {
            Ok(f) => f,
            Err(_) => match schema
                .fields()
                .iter()
                .find(|f| f.name().eq_ignore_ascii_case(&k))
            {
                Some(f) => f.as_ref(),
                None => return Err(format!("unknown column '{k}'")),
            },
        };
        check_integral(&v, field)?;
        let v = bytes_as_hex(v, field.data_type(), field.is_nullable())
            .map_err(|e| format!("column '{}': {e}", field.name()))?;
        out.insert(field.name().clone(), v);
    }
    for f in schema.fields() {
        let stand_in = match f.metadata().get(DEFAULT_KEY) {
            Some(default) => Some(default),
            None if deleting => f.metadata().get(PLACEHOLDER_KEY),
            None => None,
        };
        let Some(default) = stand_in else {
            continue;
        };
        if out.contains_key(f.name()) {
            continue;
        }
        let v = serde_json::from_str(default)
            .map_err(|e| format!("column '{}': its DEFAULT: {e}", f.name()))?;
        let v = bytes_as_hex(v, f.data_type(), f.is_nullable())
            .map_err(|e| format!("column '{}': its DEFAULT: {e}", f.name()))?;
        out.insert(f.name().clone(), v);
    }
    if let Some(f) = schema
        .fields()
        .iter()
        .find(|f| !f.is_nullable() && out.get(f.name()).is_none_or(Value::is_null))
    {
        return Err(format!("column '{}' cannot be NULL", f.name()));
    }
    Ok(Value::Object(out))
}

/// Binary values as Feldera writes them, arrays of bytes (`[12, 22, 32]`),
/// and UUIDs (their text) become the hexadecimal text that the Arrow
/// decoder reads, at any depth (in structures, arrays and map values).
/// Hexadecimal text is kept for binary values.
///
/// A `VARIANT` (`LargeBinary`) takes any JSON value, which becomes the
/// hexadecimal text of its variant's bytes; a JSON `null` is SQL's NULL
/// where the place is nullable and the `VARIANT` null where it is not.
fn bytes_as_hex(v: Value, data_type: &DataType, nullable: bool) -> Result<Value, String> {
    Ok(match (v, data_type) {
        (Value::Null, DataType::LargeBinary) if nullable => Value::Null,
        (v, DataType::LargeBinary) => {
            let bytes = variant::codec::encode(&variant::json::from_json(&v));
            Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect())
        }
        // A UUID is its text (hyphenated or not); the decoder reads hex.
        (Value::String(text), t) if crate::uuid::is_uuid(t) => match crate::uuid::parse(&text) {
            Some(bytes) => Value::String(bytes.iter().map(|b| format!("{b:02x}")).collect()),
            None => return Err(crate::uuid::invalid(&text)),
        },
        (Value::Array(items), DataType::Binary | DataType::BinaryView) => {
            let mut hex = String::with_capacity(items.len() * 2);
            for item in &items {
                match item.as_u64() {
                    Some(b) if b <= 255 => hex.push_str(&format!("{b:02x}")),
                    _ => {
                        return Err(format!(
                            "a binary value is an array of bytes (0 to 255), not {item}"
                        ))
                    }
                }
            }
            Value::String(hex)
        }
        (Value::Array(items), DataType::List(f) | DataType::LargeList(f)) => Value::Array(
            items
                .into_iter()
                .map(|i| bytes_as_hex(i, f.data_type(), f.is_nullable()))
                .collect::<Result<_, _>>()?,
        ),
        // A ROW may be written as the array of its fields' values.
        (Value::Array(items), DataType::Struct(fields)) if items.len() == fields.len() => {
            let m = fields.iter().map(|f| f.name().clone()).zip(items).collect();
            bytes_as_hex(Value::Object(m), data_type, nullable)?
        }
        (Value::Object(m), DataType::Struct(fields)) => {
            let mut out = Map::new();
            for (k, v) in m {
                let v = match fields.iter().find(|f| f.name().eq_ignore_ascii_case(&k)) {
                    Some(f) => bytes_as_hex(v, f.data_type(), f.is_nullable())?,
                    None => v,
                };
                out.insert(k, v);
            }
            Value::Object(out)
        }
        (Value::Object(m), DataType::Map(entries, _)) => {
            let (key, value) = match entries.data_type() {
                DataType::Struct(kv) if kv.len() == 2 => (kv[0].clone(), kv[1].clone()),
                _ => return Ok(Value::Object(m)),
            };
            if key.data_type() == &DataType::LargeBinary {
                // A JSON object's keys are strings; a VARIANT key holds
                // the string.
                let mut out = Map::new();
                for (k, v) in m {
                    let k = bytes_as_hex(Value::String(k), key.data_type(), false)?;
                    let k = k.as_str().unwrap_or_default().to_string();
                    out.insert(k, bytes_as_hex(v, value.data_type(), value.is_nullable())?);
                }
                return Ok(Value::Object(out));
            }
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(k, bytes_as_hex(v, value.data_type(), value.is_nullable())?);
            }
            Value::Object(out)
        }
        (v, _) => v,
    })
}

/// The Arrow decoder truncates `1.5` into an integer column: refuse it.
fn check_integral(v: &Value, field: &Field) -> Result<(), String> {
    if !field.data_type().is_integer() {
        return Ok(());
    }
    let fraction = match v {
        Value::Number(n) if n.as_i64().is_none() && n.as_u64().is_none() => {
            n.as_f64().is_some_and(|f| f.fract() != 0.0)
        }
        Value::String(s) => s.trim().parse::<f64>().is_ok_and(|f| f.fract() != 0.0),
        _ => false,
    };
    if fraction {
        return Err(format!(
            "column '{}' holds integers ({}), not {v}",
            field.name(),
            field.data_type()
        ));
    }
    Ok(())
}

fn decode_rows(schema: &SchemaRef, rows: &[Value]) -> Result<RecordBatch, String> {
    let why = |e: ArrowError| crate::types::row_error_in_sql_terms(&e.to_string());
    let mut decoder = ReaderBuilder::new(schema.clone())
        .build_decoder()
        .map_err(why)?;
    decoder.serialize(rows).map_err(why)?;
    match decoder.flush().map_err(why)? {
        Some(b) => Ok(b),
        None => Ok(RecordBatch::new_empty(schema.clone())),
    }
}

/// Parses JSON changes for rows of `schema`.
pub fn parse(text: &str, schema: &SchemaRef, format: UpdateFormat, array: bool) -> Parsed {
    let mut errors = Vec::new();
    let mut items: Vec<(usize, Value)> = Vec::new();
    if array {
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Array(vs)) => {
                items.extend(vs.into_iter().enumerate().map(|(i, v)| (i + 1, v)))
            }
            Ok(_) => errors.push(RowError {
                line: 1,
                reason: "expected a JSON array".into(),
            }),
            Err(e) => errors.push(RowError {
                line: e.line(),
                reason: e.to_string(),
            }),
        }
    } else {
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(line) {
                Ok(v) => items.push((i + 1, v)),
                Err(e) => errors.push(RowError {
                    line: i + 1,
                    reason: e.to_string(),
                }),
            }
        }
    }
    let mut rows = Vec::with_capacity(items.len());
    let mut weights = Vec::with_capacity(items.len());
    let mut lines = Vec::with_capacity(items.len());
    for (line, item) in items {
        let changes = changes_of(item, format).and_then(|changes| {
            (changes.into_iter())
                .map(|(row, w)| Ok((normalize_row(row, schema, w < 0)?, w)))
                .collect::<Result<Vec<_>, String>>()
        });
        match changes {
            Ok(changes) => {
                for (row, w) in changes {
                    rows.push(row);
                    weights.push(w);
                    lines.push(line);
                }
            }
            Err(reason) => errors.push(RowError { line, reason }),
        }
    }
    // Fast path: the whole batch decodes; else isolate the bad rows.
    let changes = match decode_rows(schema, &rows) {
        Ok(batch) => ZSet::new(batch, weights),
        Err(_) => {
            let mut good = Vec::new();
            let mut good_w = Vec::new();
            for ((row, w), line) in rows.into_iter().zip(weights).zip(lines) {
                match decode_rows(schema, std::slice::from_ref(&row)) {
                    Ok(_) => {
                        good.push(row);
                        good_w.push(w);
                    }
                    Err(reason) => errors.push(RowError { line, reason }),
                }
            }
            match decode_rows(schema, &good) {
                Ok(batch) => ZSet::new(batch, good_w),
                Err(reason) => {
                    errors.push(RowError { line: 0, reason });
                    ZSet::empty(schema)
                }
            }
        }
    };
    errors.sort_by_key(|e| e.line);
    Parsed { changes, errors }
}

/// Encodes rows as JSON objects, one per line.
pub fn encode_rows(batch: &RecordBatch) -> Result<Vec<Value>, String> {
    let batch = &variant::arrow::batch_as_text(batch).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    {
        let mut w = WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, LineDelimited>(&mut buf);
        w.write(batch).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
    }
    String::from_utf8_lossy(&buf)
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| e.to_string()))
        .collect()
}

/// Encodes a batch as one JSON array of row objects.
pub fn encode_array(batch: &RecordBatch) -> Result<String, String> {
    let batch = &variant::arrow::batch_as_text(batch).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    {
        let mut w = WriterBuilder::new()
            .with_explicit_nulls(true)
            .build::<_, JsonArray>(&mut buf);
        w.write(batch).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Encodes a change as `{"insert": row}` / `{"delete": row}` lines, a row
/// with weight `w` appearing `|w|` times.
pub fn encode_changes(changes: &ZSet) -> Result<Vec<Value>, String> {
    encode_changes_as(changes, UpdateFormat::InsertDelete)
}

/// Encodes a change in an update format: `insert_delete` and `debezium`
/// (`{"before": null, "after": row, "op": "c"}` /
/// `{"before": row, "after": null, "op": "d"}`) write a row of weight `w`
/// `|w|` times, `weighted` once with its weight. `raw` cannot say
/// "delete" and is refused.
pub fn encode_changes_as(changes: &ZSet, format: UpdateFormat) -> Result<Vec<Value>, String> {
    let rows = encode_rows(changes.batch())?;
    let mut out = Vec::new();
    for (row, &w) in rows.into_iter().zip(changes.weights()) {
        let one = match format {
            UpdateFormat::InsertDelete => {
                let op = if w > 0 { "insert" } else { "delete" };
                Value::Object(Map::from_iter([(op.to_string(), row)]))
            }
            UpdateFormat::Debezium if w > 0 => {
                serde_json::json!({"before": null, "after": row, "op": "c"})
            }
            UpdateFormat::Debezium => {
                serde_json::json!({"before": row, "after": null, "op": "d"})
            }
            UpdateFormat::Weighted => {
                out.push(serde_json::json!({"weight": w, "data": row}));
                continue;
            }
            UpdateFormat::Raw => {
                return Err("update format 'raw' cannot write deletions".into());
            }
        };
        out.extend(std::iter::repeat_n(one, w.unsigned_abs() as usize));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Schema};
    use std::sync::Arc;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]))
    }

    /// Rows keep the schema's column order, as every SQL tool prints them
    /// (not sorted by name), in rows and in changes.
    #[test]
    fn rows_keep_the_column_order() {
        use datafusion::arrow::array::{Int64Array, StringArray};
        let schema = Arc::new(Schema::new(vec![
            Field::new("zeta", DataType::Int64, false),
            Field::new("alpha", DataType::Utf8, true),
            Field::new("mid", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(vec![1])),
                Arc::new(StringArray::from(vec![Some("a")])),
                Arc::new(Int64Array::from(vec![None])),
            ],
        )
        .unwrap();
        let rows = encode_rows(&batch).unwrap();
        assert_eq!(rows[0].to_string(), r#"{"zeta":1,"alpha":"a","mid":null}"#);
        let changes = encode_changes(&ZSet::new(batch, vec![-1])).unwrap();
        assert_eq!(
            changes[0].to_string(),
            r#"{"delete":{"zeta":1,"alpha":"a","mid":null}}"#
        );
    }

    #[test]
    fn insert_delete_with_a_bad_row() {
        let text = "{\"insert\": {\"id\": 1, \"name\": \"a\"}}\n{\"delete\": {\"ID\": 2}}\n{\"insert\": {\"id\": \"x\"}}\nnot json\n";
        let p = parse(text, &schema(), UpdateFormat::InsertDelete, false);
        assert_eq!(p.changes.len(), 2);
        assert_eq!(p.changes.weights(), &[1, -1]);
        assert_eq!(
            p.errors.iter().map(|e| e.line).collect::<Vec<_>>(),
            vec![3, 4]
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_rejected() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
        ]));
        let bad = [
            r#"{"i": "x"}"#,
            r#"{"i": 1.5}"#,
            r#"{"i": 3000000000}"#,
            r#"{"i": true}"#,
            r#"{"i": [1]}"#,
            r#"{"i": {"a": 1}}"#,
            r#"{"s": [1, 2]}"#,
            r#"{"s": {"a": 1}}"#,
            r#"{"b": "yes"}"#,
            r#"{"b": 1}"#,
        ];
        let mut text = String::from("{\"i\": 1, \"s\": \"a\", \"b\": true}\n");
        for b in bad {
            text.push_str(b);
            text.push('\n');
        }
        let p = parse(&text, &schema, UpdateFormat::Raw, false);
        let lines: Vec<usize> = p.errors.iter().map(|e| e.line).collect();
        assert_eq!(
            lines,
            (2..=bad.len() + 1).collect::<Vec<_>>(),
            "{:?}",
            p.errors
        );
        assert_eq!(p.changes.len(), 1);
    }

    /// Debezium events, bare and under a payload: creates and snapshot
    /// reads insert, deletes delete, updates do both (or only insert when
    /// the event has no `before`), tombstones are nothing, and what is
    /// malformed is a rejected line.
    #[test]
    fn debezium_events() {
        let text = [
            r#"{"before": null, "after": {"id": 1, "name": "a"}, "op": "c", "ts_ms": 1}"#,
            r#"{"schema": {}, "payload": {"before": null, "after": {"id": 2}, "op": "r"}}"#,
            r#"{"payload": {"before": {"id": 1, "name": "a"}, "after": {"id": 1, "name": "b"}, "op": "u"}}"#,
            r#"{"before": null, "after": {"id": 3}, "op": "u"}"#,
            r#"{"before": {"id": 2}, "after": null, "op": "d"}"#,
            "null",
            r#"{"schema": {}, "payload": null}"#,
            r#"{"before": null, "after": null, "op": "d"}"#,
            r#"{"op": "t"}"#,
            r#"{"after": {"id": 4}}"#,
            r#"{"before": null, "after": {"id": "x"}, "op": "c"}"#,
        ]
        .join("\n");
        let p = parse(&text, &schema(), UpdateFormat::Debezium, false);
        assert_eq!(p.changes.weights(), &[1, 1, -1, 1, 1, -1]);
        let rows = encode_rows(p.changes.batch()).unwrap();
        let ids: Vec<i64> = rows.iter().map(|r| r["id"].as_i64().unwrap()).collect();
        assert_eq!(ids, vec![1, 2, 1, 1, 3, 2]);
        assert_eq!(rows[3]["name"], "b");
        let lines: Vec<usize> = p.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![8, 9, 10, 11], "{:?}", p.errors);
        assert!(
            p.errors[0].reason.contains("needs \"before\""),
            "{:?}",
            p.errors
        );
    }

    /// A change written in each update format reads back as the same
    /// change.
    #[test]
    fn changes_round_trip_through_every_writable_format() {
        let text = "{\"insert\": {\"id\": 1, \"name\": \"a\"}}\n{\"delete\": {\"id\": 2}}\n";
        let change = parse(text, &schema(), UpdateFormat::InsertDelete, false).changes;
        for format in [
            UpdateFormat::InsertDelete,
            UpdateFormat::Weighted,
            UpdateFormat::Debezium,
        ] {
            let lines: Vec<String> = encode_changes_as(&change, format)
                .unwrap()
                .iter()
                .map(Value::to_string)
                .collect();
            let back = parse(&lines.join("\n"), &schema(), format, false);
            assert!(back.errors.is_empty(), "{format:?}: {:?}", back.errors);
            assert_eq!(
                encode_changes(&back.changes).unwrap(),
                encode_changes(&change).unwrap(),
                "{format:?}"
            );
        }
        assert!(encode_changes_as(&change, UpdateFormat::Raw).is_err());
    }

    /// A delete by key alone: a `NOT NULL` column outside the key takes
    /// its placeholder (the table deletes by key); an insert still needs
    /// it, and the key is needed either way.
    #[test]
    fn a_delete_gives_the_key_and_the_rest_stands_in() {
        let placeholder = [(PLACEHOLDER_KEY.to_string(), "0".to_string())].into();
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("n", DataType::Int64, false).with_metadata(placeholder),
        ]));
        let text =
            "{\"delete\": {\"id\": 2}}\n{\"insert\": {\"id\": 3}}\n{\"delete\": {\"n\": 4}}\n";
        let p = parse(text, &schema, UpdateFormat::InsertDelete, false);
        let lines: Vec<usize> = p.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![2, 3], "{:?}", p.errors);
        assert!(
            p.errors[0].reason.contains("'n' cannot be NULL"),
            "{:?}",
            p.errors
        );
        assert_eq!(
            encode_changes(&p.changes).unwrap(),
            vec![serde_json::json!({"delete": {"id": 2, "n": 0}})]
        );
    }

    #[test]
    fn a_variant_column_takes_any_json_and_is_written_as_its_json_text() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("v", DataType::LargeBinary, true),
            Field::new("w", DataType::LargeBinary, false),
            Field::new(
                "r",
                DataType::Struct(vec![Field::new("a", DataType::LargeBinary, false)].into()),
                true,
            ),
        ]));
        let text = concat!(
            r#"{"id": 1, "v": {"b": [1, -2.5], "a": "x"}, "w": null, "r": [null]}"#,
            "\n",
            r#"{"id": 2, "v": null, "w": true, "r": {"a": 3}}"#,
            "\n"
        );
        let p = parse(text, &schema, UpdateFormat::Raw, false);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let rows = encode_rows(p.changes.batch()).unwrap();
        // Keys sorted; a JSON null is SQL's NULL in a nullable place and
        // the VARIANT null in a NOT NULL one; a ROW given as an array.
        assert_eq!(
            rows[0],
            serde_json::json!({"id": 1, "v": r#"{"a":"x","b":[1,-2.5]}"#, "w": "null", "r": {"a": "null"}})
        );
        assert_eq!(
            rows[1],
            serde_json::json!({"id": 2, "v": null, "w": "true", "r": {"a": "3"}})
        );
    }

    #[test]
    fn weighted_array() {
        let text = "[{\"weight\": 3, \"data\": {\"id\": 7}}]";
        let p = parse(text, &schema(), UpdateFormat::Weighted, true);
        assert_eq!(p.changes.weights(), &[3]);
        assert!(p.errors.is_empty());
    }
}
