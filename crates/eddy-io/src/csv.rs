//! CSV: each record is a row to insert (or, with a weight, a change).
//!
//! A record is one line; fields are in column order, separated by commas,
//! and a field may be quoted (`"a, ""b"""`). A quoted field cannot hold a
//! line break (use JSON for multi-line text): a quote still open at the end
//! of its line is an error of that line, not the start of a field that
//! swallows the lines after it. A first record that equals the column names
//! is a header and is skipped. Each record is checked on its own, its shape
//! (quotes, field count) first and then its values against the column
//! types, so a bad record is rejected with its line and reason and the
//! others are kept.

use std::io::Cursor;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::csv::reader::Format;
use datafusion::arrow::csv::{ReaderBuilder, WriterBuilder};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;

use crate::{Parsed, RowError};

fn decode(schema: &SchemaRef, text: &str) -> Result<Option<RecordBatch>, String> {
    // The decoder allocates its batch up front: size it to the input, so that
    // decoding one line (to isolate a bad one) costs one line.
    let lines = text.bytes().filter(|&b| b == b'\n').count();
    // A VARIANT field is JSON text, read as text and parsed below.
    let read_as = crate::variant::arrow::text_schema(schema);
    let reader = ReaderBuilder::new(Arc::clone(&read_as))
        .with_format(Format::default().with_header(false))
        .with_batch_size(lines.clamp(1, 1 << 20))
        .build(Cursor::new(text.as_bytes()))
        .map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| e.to_string())?);
    }
    let batch = match batches.len() {
        0 => return Ok(None),
        1 => batches.pop().expect("one batch"),
        _ => datafusion::arrow::compute::concat_batches(&read_as, &batches)
            .map_err(|e| e.to_string())?,
    };
    if Arc::ptr_eq(&read_as, schema) {
        return Ok(Some(batch));
    }
    crate::variant::arrow::parse_text_columns(&batch, schema)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Checks the shape of one record: its quotes, and that it has `columns`
/// fields.
fn check_record(line: &str, columns: usize) -> Result<(), String> {
    let bytes = line.as_bytes();
    let mut fields = 1;
    let mut i = 0;
    while i <= bytes.len() {
        if bytes.get(i) == Some(&b'"') {
            // A quoted field: up to the closing quote ("" is a quote).
            let start = i;
            i += 1;
            loop {
                match bytes.get(i) {
                    None => {
                        return Err(format!(
                            "unterminated quoted field starting at column {} (a quoted field cannot span lines)",
                            start + 1
                        ))
                    }
                    Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            match bytes.get(i) {
                None => break,
                Some(b',') => {}
                Some(_) => {
                    return Err(format!(
                        "unexpected character after the closing quote at column {}",
                        i + 1
                    ))
                }
            }
        } else {
            while i < bytes.len() && bytes[i] != b',' {
                i += 1;
            }
            if i == bytes.len() {
                break;
            }
        }
        // At a comma: the next field starts after it.
        fields += 1;
        i += 1;
    }
    if fields != columns {
        return Err(format!("expected {columns} field(s), found {fields}"));
    }
    Ok(())
}

/// Parses CSV records into rows of `schema`, each with weight `weight`.
pub fn parse(text: &str, schema: &SchemaRef, weight: i64) -> Parsed {
    let header: Vec<String> = schema
        .fields()
        .iter()
        .map(|f| f.name().to_lowercase())
        .collect();
    let mut lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
        .collect();
    if let Some((_, first)) = lines.first() {
        let fields: Vec<String> = first
            .split(',')
            .map(|f| f.trim().trim_matches('"').to_lowercase())
            .collect();
        if fields == header {
            lines.remove(0);
        }
    }
    let mut errors = Vec::new();
    lines.retain(|(line, l)| match check_record(l, schema.fields().len()) {
        Ok(()) => true,
        Err(reason) => {
            errors.push(RowError {
                line: *line,
                reason,
            });
            false
        }
    });
    let body: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    let batch = match decode(schema, &body) {
        Ok(b) => b,
        Err(_) => {
            let mut good = String::new();
            for (line, l) in &lines {
                match decode(schema, &format!("{l}\n")) {
                    Ok(_) => {
                        good.push_str(l);
                        good.push('\n');
                    }
                    Err(reason) => errors.push(RowError {
                        line: *line,
                        // The decoder counts lines of what it was given: one.
                        reason: reason.replace(" at line 0", ""),
                    }),
                }
            }
            decode(schema, &good).unwrap_or_else(|reason| {
                errors.push(RowError { line: 0, reason });
                None
            })
        }
    };
    let changes = match batch {
        Some(b) => ZSet::with_weight(b, weight),
        None => ZSet::empty(schema),
    };
    errors.sort_by_key(|e| e.line);
    Parsed { changes, errors }
}

/// Encodes rows as CSV, with a header line when `header` is set.
pub fn encode(batch: &RecordBatch, header: bool) -> Result<String, String> {
    let batch = &crate::variant::arrow::batch_as_text(batch).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    {
        let mut w = WriterBuilder::new().with_header(header).build(&mut buf);
        w.write(batch).map_err(|e| e.to_string())?;
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn a_variant_field_is_json_text() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("v", DataType::LargeBinary, true),
        ]));
        let p = parse("1,\"{\"\"a\"\": [1, 2]}\"\n2,not json\n3,7\n", &schema, 1);
        assert_eq!(p.errors.len(), 1, "{:?}", p.errors);
        assert_eq!(p.errors[0].line, 2);
        let text = encode(p.changes.batch(), false).unwrap();
        assert_eq!(text, "1,\"{\"\"a\"\":[1,2]}\"\n3,7\n");
    }

    #[test]
    fn header_skipped_and_bad_record_reported() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("v", DataType::Utf8, true),
        ]));
        let p = parse("id,v\n1,a\nx,b\n3,c\n", &schema, 1);
        assert_eq!(p.changes.len(), 2);
        assert_eq!(p.errors.len(), 1);
        assert_eq!(p.errors[0].line, 3);
    }

    fn two_columns() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("v", DataType::Utf8, true),
        ]))
    }

    fn reasons(text: &str) -> (usize, Vec<(usize, String)>) {
        let p = parse(text, &two_columns(), 1);
        let errors = p.errors.into_iter().map(|e| (e.line, e.reason)).collect();
        (p.changes.len(), errors)
    }

    #[test]
    fn unterminated_quote_is_an_error_of_its_line() {
        let (accepted, errors) = reasons("1,\"unterminated\n2,ok\n");
        assert_eq!(accepted, 1);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].0, 1);
        assert!(
            errors[0].1.contains("unterminated quoted field"),
            "{errors:?}"
        );
    }

    #[test]
    fn quoted_fields_with_commas_and_quotes_are_accepted() {
        let p = parse("1,\"a, \"\"b\"\"\"\n2,\"\"\n", &two_columns(), 1);
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.changes.len(), 2);
        let v = p.changes.batch().column(1);
        let v = v
            .as_any()
            .downcast_ref::<datafusion::arrow::array::StringArray>()
            .unwrap();
        assert_eq!(v.value(0), "a, \"b\"");
    }

    #[test]
    fn malformed_records_are_rejected_with_reasons() {
        let text = "1,a\n2\n3,b,c\n4,\"x\"y\n99999999999,d\nz,e\n7,f\n";
        let (accepted, errors) = reasons(text);
        assert_eq!(accepted, 2);
        let lines: Vec<usize> = errors.iter().map(|e| e.0).collect();
        assert_eq!(lines, vec![2, 3, 4, 5, 6]);
        assert!(errors[0].1.contains("expected 2 field(s), found 1"));
        assert!(errors[1].1.contains("found 3"));
        assert!(errors[2].1.contains("after the closing quote"));
    }
}
