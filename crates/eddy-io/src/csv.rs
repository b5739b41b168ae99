//! CSV: each record is a row to insert (or, with a weight, a change).
//!
//! Fields are in column order. A first record that equals the column names
//! is a header and is skipped. Each record is checked on its own, so a bad
//! record is rejected with its line and reason and the others are kept.

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
    let reader = ReaderBuilder::new(Arc::clone(schema))
        .with_format(Format::default().with_header(false))
        .with_batch_size(lines.clamp(1, 1 << 20))
        .build(Cursor::new(text.as_bytes()))
        .map_err(|e| e.to_string())?;
    let mut batches = Vec::new();
    for b in reader {
        batches.push(b.map_err(|e| e.to_string())?);
    }
    match batches.len() {
        0 => Ok(None),
        1 => Ok(batches.pop()),
        _ => datafusion::arrow::compute::concat_batches(schema, &batches)
            .map(Some)
            .map_err(|e| e.to_string()),
    }
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
                        reason,
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
    Parsed { changes, errors }
}

/// Encodes rows as CSV, with a header line when `header` is set.
pub fn encode(batch: &RecordBatch, header: bool) -> Result<String, String> {
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
}
