//! JSON change formats, one change per line (or one JSON array of changes):
//!
//! * `insert_delete`: `{"insert": {...row...}}` or `{"delete": {...row...}}`;
//! * `raw`: a bare row object, inserted;
//! * `weighted`: `{"weight": w, "data": {...row...}}`.
//!
//! Rows are objects keyed by column name (case-insensitive); missing columns
//! are NULL. Decoding into Arrow uses arrow-json, one row at a time only to
//! isolate bad rows: a row that does not fit is rejected alone.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, SchemaRef};
use datafusion::arrow::json::writer::{JsonArray, LineDelimited, WriterBuilder};
use datafusion::arrow::json::ReaderBuilder;
use eddy_dbsp::ZSet;
use serde_json::{Map, Value};

use crate::{Parsed, RowError};

/// How a JSON change is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateFormat {
    /// `{"insert": row}` / `{"delete": row}`.
    InsertDelete,
    /// A bare row, inserted.
    Raw,
    /// `{"weight": w, "data": row}`.
    Weighted,
}

impl std::str::FromStr for UpdateFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "insert_delete" => Ok(Self::InsertDelete),
            "raw" => Ok(Self::Raw),
            "weighted" => Ok(Self::Weighted),
            other => Err(format!(
                "unknown update format '{other}' (insert_delete, raw, weighted)"
            )),
        }
    }
}

fn change_of(value: Value, format: UpdateFormat) -> Result<(Value, i64), String> {
    match format {
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
fn normalize_row(row: Value, schema: &SchemaRef) -> Result<Value, String> {
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
        out.insert(field.name().clone(), v);
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
    let mut decoder = ReaderBuilder::new(schema.clone())
        .build_decoder()
        .map_err(|e| e.to_string())?;
    decoder.serialize(rows).map_err(|e| e.to_string())?;
    match decoder.flush().map_err(|e| e.to_string())? {
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
        match change_of(item, format).and_then(|(row, w)| Ok((normalize_row(row, schema)?, w))) {
            Ok((row, w)) => {
                rows.push(row);
                weights.push(w);
                lines.push(line);
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
    let rows = encode_rows(changes.batch())?;
    let mut out = Vec::new();
    for (row, &w) in rows.into_iter().zip(changes.weights()) {
        let op = if w > 0 { "insert" } else { "delete" };
        for _ in 0..w.unsigned_abs() {
            let mut m = Map::new();
            m.insert(op.to_string(), row.clone());
            out.push(Value::Object(m));
        }
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

    #[test]
    fn weighted_array() {
        let text = "[{\"weight\": 3, \"data\": {\"id\": 7}}]";
        let p = parse(text, &schema(), UpdateFormat::Weighted, true);
        assert_eq!(p.changes.weights(), &[3]);
        assert!(p.errors.is_empty());
    }
}
