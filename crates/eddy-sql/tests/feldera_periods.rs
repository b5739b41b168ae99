//! Period predicates (datetime.md): the reference's examples, periods
//! given by a start and an interval (negative too) or with their ends
//! swapped, TIME periods moving around the clock, NULL ends, and the
//! refusal of periods whose types differ.

mod common;

use std::sync::Arc;

use eddy_io::json::{parse, UpdateFormat};
use eddy_sql::{Pipeline, Program};

#[test]
fn the_references_examples_hold() {
    let program = "CREATE VIEW v AS SELECT
      (DATE '2020-06-24', DATE '2020-06-22') CONTAINS DATE '2020-06-21' AS c1,
      (DATE '2020-06-21', DATE '2020-06-25') CONTAINS (DATE '2020-06-22', DATE '2020-06-23') AS c2,
      (DATE '2020-06-21', DATE '2020-06-23') OVERLAPS (DATE '2020-06-22', DATE '2020-06-24') AS o,
      (DATE '2020-06-21', DATE '2020-06-23') EQUALS (DATE '2020-06-21', DATE '2020-06-23') AS e,
      (DATE '2020-06-21', DATE '2020-06-22') PRECEDES (DATE '2020-06-24', DATE '2020-06-25') AS p,
      (DATE '2020-06-21', DATE '2020-06-22') IMMEDIATELY PRECEDES (DATE '2020-06-22', DATE '2020-06-23') AS ip,
      (DATE '2020-06-24', DATE '2020-06-25') SUCCEEDS (DATE '2020-06-21', DATE '2020-06-22') AS s,
      (DATE '2020-06-24', DATE '2020-06-25') IMMEDIATELY SUCCEEDS (DATE '2020-06-23', DATE '2020-06-24') AS si;";
    let mut p = Pipeline::new(Program::parse(program).unwrap()).unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("v").unwrap()),
        vec!["false|true|true|true|true|true|true|true"]
    );
}

#[test]
fn periods_from_intervals_times_and_nulls() {
    let program = "CREATE TABLE t (id INT, d DATE, tm TIME, ts TIMESTAMP);
      CREATE VIEW v AS SELECT id,
        (d, INTERVAL '4' DAY) CONTAINS DATE '2020-06-23' AS plus,
        (d, INTERVAL '-4' DAY) CONTAINS DATE '2020-06-19' AS minus,
        (tm, INTERVAL '2' HOUR) CONTAINS TIME '00:30:00' AS around,
        (ts, ts + INTERVAL '1' HOUR) OVERLAPS (TIMESTAMP '2020-06-21 14:30:00', INTERVAL '1' MINUTE) AS o
      FROM t;";
    let mut p = Pipeline::new(Program::parse(program).unwrap()).unwrap();
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let rows = r#"{"id": 0, "d": "2020-06-21", "tm": "23:00:00", "ts": "2020-06-21 14:00:00"}
{"id": 1, "d": null, "tm": null, "ts": null}"#;
    let parsed = parse(rows, &schema, UpdateFormat::Raw, false);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    p.push("t", parsed.changes).unwrap();
    p.step().unwrap();
    // 23:00 + 2 hours is 01:00: the period runs from 01:00 to 23:00 (its
    // ends in either order), which holds 00:30 no more.
    assert_eq!(
        common::sorted_rows(&p.view_rows("v").unwrap()),
        vec!["0|true|true|false|true", "1|NULL|NULL|NULL|NULL"]
    );
}

#[test]
fn periods_of_other_types_are_refused() {
    for (view, needle) in [
        (
            "SELECT (DATE '2020-06-21', INTERVAL '1' DAY) PRECEDES \
             (TIMESTAMP '2020-06-21 14:00:00', INTERVAL '1' MINUTE) AS p",
            "Cannot apply 'PRECEDES' to arguments of type '(<DATE>, <INTERVAL",
        ),
        (
            "SELECT (INTERVAL '1' DAY, DATE '2020-06-25') SUCCEEDS \
             (INTERVAL '1' DAY, DATE '2020-06-25') AS s",
            "Cannot apply 'SUCCEEDS' to arguments of type",
        ),
        (
            "SELECT (DATE '2020-06-21') OVERLAPS (DATE '2020-06-21') AS o",
            "Cannot apply 'OVERLAPS' to arguments of type '<DATE> OVERLAPS <DATE>'",
        ),
    ] {
        let err = match Program::parse(&format!("CREATE VIEW v AS {view};")) {
            Ok(_) => panic!("{view} is refused"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(needle), "{view}: {err}");
    }
}
