//! Functions that PostgreSQL defines with another meaning than Feldera's
//! reference, and the order of NULLs, under each rule set and kept as the
//! input changes: under Feldera's rules `CONCAT`, `GREATEST` and `LEAST`
//! are NULL when an argument is, `REGEXP_REPLACE` replaces every match,
//! `LOG(x, base)` takes the base second, `ARRAY_POSITION` is 0 when absent,
//! `ARRAY_PREPEND` takes the array first, and NULL is the smallest value in
//! an ordering; under PostgreSQL's rules each keeps PostgreSQL's meaning.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch, StringArray};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program, Rules};

const PROGRAM: &str = "
CREATE TABLE t (id INT, s VARCHAR, x INT, y INT);
CREATE VIEW f AS SELECT id, CONCAT(s, '!') AS c, GREATEST(x, y) AS g, LEAST(x, y) AS l,
  REGEXP_REPLACE(s, '[ae]', '_') AS r, ARRAY_POSITION(ARRAY[1, 3], x) AS ap FROM t;
CREATE VIEW k AS SELECT LOG(100.0, 10.0) AS lg, ARRAY_PREPEND(ARRAY[1], 2) AS pre;
CREATE VIEW top2 AS SELECT id FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY y DESC) AS rn FROM t)
  WHERE rn <= 2;
CREATE VIEW first AS SELECT id FROM t ORDER BY y LIMIT 1;
";

/// A row of `t`: id, s, x, y.
type Row = (i32, Option<&'static str>, Option<i32>, Option<i32>);

/// A pipeline over `rows` (id, s, x, y), pushed in one step.
fn pipeline(rules: Rules, rows: &[Row]) -> Pipeline {
    let program = if rules == Rules::Feldera {
        // PostgreSQL's ARRAY_PREPEND takes the element first.
        PROGRAM.to_string()
    } else {
        PROGRAM.replace("ARRAY_PREPEND(ARRAY[1], 2)", "ARRAY_PREPEND(2, ARRAY[1])")
    };
    let mut p = Pipeline::new(Program::parse_with(&program, rules).unwrap()).unwrap();
    push(&mut p, rows, 1);
    p
}

fn push(p: &mut Pipeline, rows: &[Row], weight: i64) {
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.2))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.3))),
        ],
    )
    .unwrap();
    p.push("t", ZSet::with_weight(batch, weight)).unwrap();
    p.step().unwrap();
}

const ROWS: &[Row] = &[
    (1, Some("base"), Some(5), None),
    (2, Some("tree"), Some(3), Some(7)),
    (3, None, Some(9), Some(1)),
];

fn rows(p: &Pipeline, view: &str) -> Vec<String> {
    common::sorted_rows(&p.view_rows(view).unwrap())
}

#[test]
fn feldera_s_meaning() {
    let mut p = pipeline(Rules::Feldera, ROWS);
    assert_eq!(
        rows(&p, "f"),
        vec![
            "1|base!|NULL|NULL|b_s_|0",
            "2|tree!|7|3|tr__|2",
            "3|NULL|9|1|NULL|0",
        ]
    );
    assert_eq!(rows(&p, "k"), vec!["2.000000|[2, 1]"]);
    // NULL is the smallest: last when descending, first when ascending.
    assert_eq!(rows(&p, "top2"), vec!["2", "3"]);
    assert_eq!(rows(&p, "first"), vec!["1"]);
    // The row with the NULL goes: the orderings move on.
    push(&mut p, &ROWS[..1], -1);
    assert_eq!(rows(&p, "top2"), vec!["2", "3"]);
    assert_eq!(rows(&p, "first"), vec!["3"]);
}

#[test]
fn postgres_s_meaning() {
    let mut p = pipeline(Rules::Postgres, ROWS);
    assert_eq!(
        rows(&p, "f"),
        vec![
            "1|base!|5|5|b_se|NULL",
            "2|tree!|7|3|tr_e|2",
            "3|!|9|1|NULL|NULL",
        ]
    );
    assert_eq!(rows(&p, "k"), vec!["0.500000|[2, 1]"]);
    assert_eq!(rows(&p, "top2"), vec!["1", "2"]);
    assert_eq!(rows(&p, "first"), vec!["3"]);
    push(&mut p, &ROWS[..1], -1);
    assert_eq!(rows(&p, "top2"), vec!["2", "3"]);
    assert_eq!(rows(&p, "first"), vec!["3"]);
}
