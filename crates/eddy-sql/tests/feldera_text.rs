//! Feldera's rules for values as text and for REAL comparisons, kept as
//! the input changes: a BOOLEAN cast to a string (written, or inserted by
//! `CONCAT`) is `TRUE`/`FALSE`, a TIMESTAMP has a space before its time, a
//! binary string is hex digits; a REAL compared with an exact number is
//! compared as a REAL. PostgreSQL's rules keep Arrow's text and compare as
//! DOUBLE.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{BinaryArray, BooleanArray, Float32Array, RecordBatch};
use datafusion::arrow::array::{Int32Array, TimestampMicrosecondArray};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program, Rules};

const PROGRAM: &str = "
CREATE TABLE t (id INT, b BOOLEAN, ts TIMESTAMP, bin VARBINARY, r REAL);
CREATE VIEW text AS SELECT id, CAST(b AS VARCHAR) AS b, CONCAT(b, '!') AS cb,
  CAST(ts AS VARCHAR) AS ts, CAST(bin AS VARCHAR) AS bin FROM t;
CREATE VIEW cmp AS SELECT id, r = 1.1 AS eq, r <= 1.1 AS le, r IN (1.1, 2) AS inl,
  r IS NOT DISTINCT FROM 1.1 AS nd FROM t;
";

fn pipeline(rules: Rules) -> Pipeline {
    pipeline_and_rows(rules).0
}

/// The pipeline after a step over two rows, and the rows.
fn pipeline_and_rows(rules: Rules) -> (Pipeline, RecordBatch) {
    let mut p = Pipeline::new(Program::parse_with(PROGRAM, rules).unwrap()).unwrap();
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let ts = TimestampMicrosecondArray::from(vec![1_592_749_424_123_654, 1_592_749_424_000_000]);
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(Int32Array::from(vec![1, 2])),
            Arc::new(BooleanArray::from(vec![true, false])),
            datafusion::arrow::compute::cast(&ts, schema.field(2).data_type()).unwrap(),
            Arc::new(BinaryArray::from(vec![&[11u8, 22, 32][..], &[0u8][..]])),
            Arc::new(Float32Array::from(vec![1.1, 2.5])),
        ],
    )
    .unwrap();
    p.push("t", ZSet::with_weight(batch.clone(), 1)).unwrap();
    p.step().unwrap();
    (p, batch)
}

#[test]
fn feldera_writes_booleans_timestamps_and_bytes_its_way() {
    let p = pipeline(Rules::Feldera);
    assert_eq!(
        common::sorted_rows(&p.view_rows("text").unwrap()),
        vec![
            "1|TRUE|TRUE!|2020-06-21 14:23:44.123654|0b1620",
            "2|FALSE|FALSE!|2020-06-21 14:23:44|00",
        ]
    );
}

#[test]
fn feldera_compares_a_real_with_exact_numbers_as_a_real() {
    let (mut p, rows) = pipeline_and_rows(Rules::Feldera);
    assert_eq!(
        common::sorted_rows(&p.view_rows("cmp").unwrap()),
        vec!["1|true|true|true|true", "2|false|false|false|false"]
    );
    // A deleted row leaves the view.
    p.push("t", ZSet::with_weight(rows.slice(0, 1), -1))
        .unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("cmp").unwrap()),
        vec!["2|false|false|false|false"]
    );
}

#[test]
fn postgres_keeps_arrow_text_and_compares_as_double() {
    let p = pipeline(Rules::Postgres);
    assert_eq!(
        common::sorted_rows(&p.view_rows("text").unwrap()),
        vec![
            "1|true|true!|2020-06-21T14:23:44.123654|\u{b}\u{16} ",
            "2|false|false!|2020-06-21T14:23:44|\u{0}",
        ]
    );
    assert_eq!(
        common::sorted_rows(&p.view_rows("cmp").unwrap()),
        vec!["1|false|false|false|false", "2|false|false|false|false"]
    );
}
