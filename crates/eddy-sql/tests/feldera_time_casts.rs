//! Feldera's `TIMESTAMP WITH TIME ZONE` and its casts (datetime.md,
//! casts.md), from JSON rows through a view: the column is an instant in
//! UTC (Arrow's timestamp with the zone `+00:00`), written with its zone;
//! a number cast to a timestamp counts milliseconds (kept to whole
//! seconds, cut toward zero, as Feldera answers) and a timestamp cast to
//! a number gives its milliseconds; a TIME becomes that time of
//! 1970-01-01; a DECIMAL is TRUE where not zero; `BINARY(n)` pads with
//! zero bytes and cuts, and `BINARY` alone is `BINARY(1)`. A retraction
//! takes the row's results away. Casts that can never succeed, and
//! windows whose sizes do not fit their time column, are refused when the
//! program is planned, in Feldera's words.

mod common;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use eddy_io::json::{parse, UpdateFormat};
use eddy_sql::{Pipeline, Program};

const PROGRAM: &str = "
CREATE TABLE t (id INT, i INT, d DECIMAL(6, 2), r REAL, ts TIMESTAMP,
  tz TIMESTAMP WITH TIME ZONE, tm TIME, s VARCHAR);
CREATE VIEW to_time AS SELECT id, CAST(i AS TIMESTAMP) AS i_ts, CAST(d AS TIMESTAMP) AS d_ts,
  CAST(r AS TIMESTAMP WITH TIME ZONE) AS r_tz, CAST(tm AS TIMESTAMP) AS tm_ts FROM t;
CREATE VIEW to_number AS SELECT id, CAST(ts AS BIGINT) AS ts_ms, CAST(tz AS DECIMAL(20, 0)) AS tz_ms,
  SAFE_CAST(ts AS INT) AS too_big, CAST(d AS BOOLEAN) AS d_bool FROM t;
CREATE VIEW texts AS SELECT id, CAST(tz AS VARCHAR) AS tz_text, CAST(tz AS TIMESTAMP) AS naive,
  tz FROM t;
CREATE VIEW widths AS SELECT id, CAST(s AS BINARY) AS one, CAST(s AS BINARY(4)) AS four,
  CAST(i AS BINARY(2)) AS int_bytes FROM t;
";

const ROWS: &str = r#"{"id": 0, "i": -12, "d": -1111.52, "r": -57681.18, "ts": "2020-06-21 14:23:44.123654", "tz": "2020-06-21T14:23:44.123654Z", "tm": "14:23:44.456", "s": "hello"}
{"id": 1, "i": 1500, "d": 0, "r": 2500.5, "ts": "1969-12-31 23:59:58.5", "tz": "2020-06-21T16:23:44+02:00", "tm": "00:00:01", "s": "hi"}"#;

fn push(p: &mut Pipeline, weight: i64) {
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let parsed = parse(ROWS, &schema, UpdateFormat::Raw, false);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    let changes = match weight {
        1 => parsed.changes,
        _ => parsed.changes.negate(),
    };
    p.push("t", changes).unwrap();
    p.step().unwrap();
}

fn rows(p: &Pipeline, view: &str) -> Vec<String> {
    common::sorted_rows(&p.view_rows(view).unwrap())
}

#[test]
fn a_time_zone_column_is_an_instant_in_utc() {
    let p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    let schema = &p.program().table("t").unwrap().schema;
    assert_eq!(
        schema.field_with_name("tz").unwrap().data_type(),
        &DataType::Timestamp(TimeUnit::Nanosecond, Some("+00:00".into()))
    );
    assert_eq!(
        schema.field_with_name("ts").unwrap().data_type(),
        &DataType::Timestamp(TimeUnit::Nanosecond, None)
    );
}

#[test]
fn casts_between_numbers_times_and_bytes_are_feldera_s() {
    let mut p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    push(&mut p, 1);
    assert_eq!(
        rows(&p, "to_time"),
        vec![
            "0|1970-01-01T00:00:00|1969-12-31T23:59:59|1969-12-31T23:59:03Z|1970-01-01T14:23:44.456",
            "1|1970-01-01T00:00:01|1970-01-01T00:00:00|1970-01-01T00:00:02Z|1970-01-01T00:00:01",
        ]
    );
    assert_eq!(
        rows(&p, "to_number"),
        vec![
            "0|1592749424123|1592749424123|NULL|true",
            "1|-1500|1592749424000|-1500|false",
        ]
    );
    assert_eq!(
        rows(&p, "texts"),
        vec![
            "0|2020-06-21 14:23:44.123654 +00:00|2020-06-21T14:23:44.123654|2020-06-21T14:23:44.123654Z",
            "1|2020-06-21 14:23:44 +00:00|2020-06-21T14:23:44|2020-06-21T14:23:44Z",
        ]
    );
    assert_eq!(
        rows(&p, "widths"),
        vec!["0|68|68656c6c|f4ff", "1|68|68690000|dc05"]
    );
    push(&mut p, -1);
    for view in ["to_time", "to_number", "texts", "widths"] {
        assert!(rows(&p, view).is_empty(), "{view}");
    }
}

fn refusal(view: &str) -> String {
    let program = format!(
        "CREATE TYPE pair AS (i1 INT, v1 VARCHAR);
         CREATE TABLE u (i INT, s VARCHAR, m MAP<VARCHAR, INT>, r ROW(i1 INT, v1 VARCHAR),
           ts TIMESTAMP);
         {view}"
    );
    match Program::parse(&program) {
        Ok(_) => panic!("{view} is refused when the program is planned"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn casts_that_can_never_succeed_are_refused_when_planned() {
    for (view, message) in [
        (
            "CREATE VIEW v AS SELECT CAST(m AS pair) AS x FROM u;",
            "Cast function cannot convert value of type MAP<VARCHAR, INT> to type ROW(INT, VARCHAR)",
        ),
        (
            "CREATE VIEW v AS SELECT SAFE_CAST(i AS ROW(a INT, b VARCHAR)) AS x FROM u;",
            "Cast function cannot convert value of type INT to type ROW(INT, VARCHAR)",
        ),
        (
            "CREATE VIEW v AS SELECT CAST(s AS VARCHAR ARRAY) AS x FROM u;",
            "Cast cannot be used to convert VARCHAR to VARCHAR ARRAY",
        ),
        (
            "CREATE VIEW v AS SELECT SAFE_CAST(m AS MAP<VARCHAR, INT ARRAY>) AS x FROM u;",
            "Cast function cannot convert value of type MAP<VARCHAR, INT> to type MAP<VARCHAR, INT ARRAY>",
        ),
        (
            "CREATE VIEW v AS SELECT SAFE_CAST(r AS ROW(a INT, b DOUBLE)) AS x FROM u;",
            "SAFE_CAST cannot be used to convert ROW(INT, VARCHAR) to ROW(INT, DOUBLE)",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(i), INTERVAL '1' MINUTE));",
            "Cannot apply 'TUMBLE' to arguments of type",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM TABLE(HOP(TABLE u, DESCRIPTOR(i), INTERVAL '1' MINUTE, \
             INTERVAL '2' MINUTE));",
            "Cannot apply 'HOP' to arguments of type",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(ts), INTERVAL '1' MONTH));",
            "cannot be counted in months",
        ),
    ] {
        let err = refusal(view);
        assert!(err.contains(message), "{view}: {err}");
    }
    // What can succeed is planned: a ROW cast by position, a SAFE_CAST of
    // an array's elements, a window over a TIMESTAMP.
    for view in [
        "CREATE VIEW v AS SELECT CAST(r AS pair) AS x, SAFE_CAST(m AS MAP<VARCHAR, VARCHAR>) AS y FROM u;",
        "CREATE VIEW v AS SELECT * FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(ts), INTERVAL '1' MINUTE));",
        "CREATE VIEW v AS SELECT * FROM TABLE(TUMBLE(TABLE u, DESCRIPTOR(i), 10));",
    ] {
        let program = format!(
            "CREATE TYPE pair AS (i1 INT, v1 VARCHAR);
             CREATE TABLE u (i INT, s VARCHAR, m MAP<VARCHAR, INT>, r ROW(i1 INT, v1 VARCHAR),
               ts TIMESTAMP);
             {view}"
        );
        if let Err(e) = Program::parse(&program) {
            panic!("{view}: {e}");
        }
    }
}
