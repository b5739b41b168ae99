//! Feldera's interval types (datetime.md, casts.md), through a local view
//! as Feldera's programs use them: a difference qualified by its units
//! keeps its type into the next view, where it is written as Feldera
//! writes that type, counted in its last unit, combined with intervals of
//! other types (the sum has the span of both), scaled by a number, added
//! to a DATE (whole days), a TIME (wrapping) and a TIMESTAMP, and read
//! back from its text; then a retraction takes a row's results away.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch, TimestampNanosecondArray};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

const PROGRAM: &str = "
CREATE TABLE t (id INT, a TIMESTAMP, b TIMESTAMP);
CREATE LOCAL VIEW d AS SELECT id, (a - b) YEAR TO MONTH AS ym, (a - b) DAY TO MINUTE AS dm,
  (a - b) HOUR TO SECOND AS hs, (a - b) SECOND AS s, (a - b) DAY AS dd FROM t;
CREATE VIEW text AS SELECT id, CAST(ym AS VARCHAR) AS ym, CAST(dm AS VARCHAR) AS dm,
  CAST(-hs AS VARCHAR) AS hs, CAST(s AS VARCHAR) AS s, CAST(dd AS BIGINT) AS days FROM d;
CREATE VIEW sums AS SELECT id, CAST(dm + INTERVAL '1 01' DAY TO HOUR AS VARCHAR) AS dm,
  CAST(ym - INTERVAL '1' YEAR AS VARCHAR) AS ym, CAST(s * 2.5 AS VARCHAR) AS s2,
  CAST(ym / 2 AS VARCHAR) AS ym2 FROM d;
CREATE VIEW moved AS SELECT d.id, CAST(a AS DATE) - dd AS day, CAST(a AS TIME) + s AS tm,
  a - CAST(CAST(dm AS VARCHAR) AS INTERVAL DAY TO MINUTE) AS ts FROM d JOIN t ON d.id = t.id;
CREATE VIEW literals AS SELECT CAST(INTERVAL '20-07' YEAR TO MONTH AS VARCHAR) AS ym,
  CAST(INTERVAL '-1 2:03:04.5' DAY TO SECOND AS VARCHAR) AS ds,
  CAST(INTERVAL '10.6' SECONDS AS INTEGER) AS secs;
";

fn ts(text: &str) -> i64 {
    datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text).unwrap()
}

fn push(p: &mut Pipeline, rows: &[(i32, &str, &str)], weight: i64) {
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| ts(r.1)),
            )),
            Arc::new(TimestampNanosecondArray::from_iter_values(
                rows.iter().map(|r| ts(r.2)),
            )),
        ],
    )
    .unwrap();
    p.push("t", ZSet::with_weight(batch, weight)).unwrap();
    p.step().unwrap();
}

fn rows(p: &Pipeline, view: &str) -> Vec<String> {
    common::sorted_rows(&p.view_rows(view).unwrap())
}

const ROWS: &[(i32, &str, &str)] = &[
    (1, "2019-12-05 08:27:00", "2014-11-05 12:45:00"),
    (2, "2020-06-21 14:00:00", "2023-02-26 18:00:00"),
];

#[test]
fn intervals_keep_feldera_s_types_through_views() {
    let mut p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    push(&mut p, ROWS, 1);
    assert_eq!(
        rows(&p, "text"),
        vec![
            "1|+5-00|+1855 19:42|-44539:42:00.000000|+160342920.000000|1855",
            "2|-2-08|-980 04:00|+23524:00:00.000000|-84686400.000000|-980",
        ]
    );
    assert_eq!(
        rows(&p, "sums"),
        vec![
            "1|+1856 20:42|+4-00|+400857300.000000|+2-06",
            "2|-979 03:00|-3-08|-211716000.000000|-1-04",
        ]
    );
    assert_eq!(
        rows(&p, "moved"),
        vec![
            "1|2014-11-06|04:09:00|2014-11-05T12:45:00",
            "2|2023-02-26|10:00:00|2023-02-26T18:00:00",
        ]
    );
    assert_eq!(rows(&p, "literals"), vec!["+20-07|-1 02:03:04.500000|10"]);
    push(&mut p, &ROWS[..1], -1);
    assert_eq!(
        rows(&p, "text"),
        vec!["2|-2-08|-980 04:00|+23524:00:00.000000|-84686400.000000|-980"]
    );
}

#[test]
fn a_malformed_interval_text_is_an_error() {
    let program = "CREATE TABLE t (id INT, a TIMESTAMP, b TIMESTAMP);
        CREATE VIEW v AS SELECT CAST('1 25' AS INTERVAL DAY TO HOUR) AS x;";
    // Refused when planned (a constant) or when the step computes it.
    let err = match Program::parse(program) {
        Err(e) => e.to_string(),
        Ok(program) => {
            let mut p = Pipeline::new(program).unwrap();
            p.step().unwrap_err().to_string()
        }
    };
    assert!(
        err.contains("'1 25' is not an interval of type INTERVAL DAY TO HOUR"),
        "{err}"
    );
}
