//! Fuzzing the change parsers as the server uses them: bodies in every
//! format, well-formed or not, cut into pieces at random, through the
//! `Chunker` and `parse_piece`. Every row is either accepted or rejected
//! with a line inside the body; nothing panics.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use eddy_fuzz::changes;
use eddy_fuzz::runner::fuzz;
use eddy_io::format::FormatConfig;
use eddy_server::input::{parse_piece, Chunker};
use eddy_server::stats::EndpointStats;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int8, true),
        Field::new("n", DataType::Int32, true),
        Field::new("f", DataType::Float64, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
    ]))
}

#[test]
fn change_input() {
    let schema = schema();
    fuzz(
        "change_input",
        |rng| changes::body(rng, &schema),
        |body| {
            let Ok(format) = FormatConfig::from_query(
                body.format,
                Some(body.update_format),
                Some(body.array),
                None,
            )
            .and_then(|f| f.text_input()) else {
                panic!("the generator's format is valid");
            };
            let stats = EndpointStats::new("fuzz", "t");
            let mut chunker = Chunker::new(&format);
            let mut accepted = 0;
            let mut errors = Vec::new();
            let mut take = |piece| {
                let (z, e) = parse_piece(&format, piece, &schema, &stats);
                assert_eq!(z.batch().schema().fields().len(), schema.fields().len());
                accepted += z.len();
                errors.extend(e);
            };
            let mut from = 0;
            for &cut in body.cuts.iter().chain(std::iter::once(&body.bytes.len())) {
                if let Some(p) = chunker.push(&body.bytes[from..cut]) {
                    take(p);
                }
                from = cut;
            }
            if let Some(p) = chunker.finish() {
                take(p);
            }
            let lines = body.bytes.split(|&b| b == b'\n').count();
            for e in &errors {
                // In a JSON array the position is the element's, from 1.
                assert!(
                    !format.line_oriented() || (1..=lines).contains(&e.line),
                    "error line {} outside 1..={lines}: {}",
                    e.line,
                    e.reason
                );
                assert!(!e.reason.is_empty());
            }
            if format.line_oriented() {
                // Each line is one change: accepted or rejected, never both
                // counted for more than it is.
                let rejected: BTreeSet<usize> = errors.iter().map(|e| e.line).collect();
                assert!(
                    accepted + rejected.len() <= lines,
                    "{accepted} accepted + {} rejected > {lines} lines",
                    rejected.len()
                );
            }
        },
    );
}
