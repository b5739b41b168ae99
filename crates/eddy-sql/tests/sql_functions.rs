//! SQL-bodied functions (`CREATE FUNCTION … AS <expression>`): inlined
//! where they are called, nested, cast to their declared types; functions
//! without a body are refused with their name.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

fn run(program: &str, view: &str) -> Vec<String> {
    let program = Program::parse(program).unwrap_or_else(|e| panic!("{e}"));
    let schema = Arc::clone(&program.tables[0].schema);
    let mut p = Pipeline::new(program).unwrap();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(vec!["a/bb/ccc", "x", "cc/c"])),
            Arc::new(Int64Array::from(vec![7, -3, 10])),
        ],
    )
    .unwrap();
    p.push("t", ZSet::with_weight(batch, 1)).unwrap();
    p.step().unwrap();
    common::sorted_rows(&p.view_rows(view).unwrap())
}

const TABLE: &str = "CREATE TABLE t (s VARCHAR, n BIGINT);\n";

#[test]
fn functions_are_inlined_with_their_types() {
    let program = format!(
        "{TABLE}
         CREATE FUNCTION count_char(s VARCHAR, c CHAR) RETURNS INT
           AS LENGTH(s) - LENGTH(REPLACE(s, c, ''));
         CREATE FUNCTION split_index(s VARCHAR, sep CHAR, idx INT) RETURNS VARCHAR
           AS SPLIT(s, CAST(sep AS VARCHAR))[idx + 1];
         CREATE FUNCTION twice_count(s VARCHAR) RETURNS BIGINT NOT NULL
           AS 2 * count_char(s, 'c');
         CREATE FUNCTION half(n BIGINT) RETURNS DOUBLE AS n / 2;
         CREATE VIEW v AS SELECT s, count_char(s, 'c') AS c, split_index(s, '/', 1) AS second,
           twice_count(s) AS t2, half(n) AS h FROM t;"
    );
    // half: the argument is a BIGINT, so n / 2 is integer division, then
    // the result is cast to DOUBLE.
    assert_eq!(
        run(&program, "v"),
        vec![
            "a/bb/ccc|3|bb|6|3.000000",
            "cc/c|3|c|6|5.000000",
            "x|0|NULL|0|-1.000000"
        ]
    );
}

#[test]
fn a_program_function_wins_over_a_builtin_spelling() {
    let program = format!(
        "{TABLE}
         CREATE FUNCTION mod(a BIGINT, b BIGINT) RETURNS BIGINT AS 42;
         CREATE VIEW v AS SELECT mod(n, 2) AS m FROM t;"
    );
    assert_eq!(run(&program, "v"), vec!["42", "42", "42"]);
}

#[test]
fn bad_functions_are_refused_with_their_names() {
    for (text, needle) in [
        (
            "CREATE FUNCTION re_extract(s VARCHAR, p VARCHAR, grp INTEGER) RETURNS VARCHAR;",
            "function 're_extract' has no SQL body",
        ),
        (
            "CREATE FUNCTION f(x INT) RETURNS INT AS x + 1;\nCREATE VIEW v AS SELECT f(n, 2) FROM t;",
            "function 'f' takes 1 arguments, not 2",
        ),
        (
            "CREATE FUNCTION f(x INT) RETURNS INT AS x;\nCREATE FUNCTION f(x INT) RETURNS INT AS x;",
            "function 'f' is already defined",
        ),
    ] {
        let e = Program::parse(&format!("{TABLE}{text}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(needle), "{text}: {e}");
        assert!(e.starts_with("2:") || e.starts_with("3:"), "located: {e}");
    }
    // OR REPLACE replaces.
    let program = format!(
        "{TABLE}CREATE FUNCTION f(x BIGINT) RETURNS BIGINT AS x;
         CREATE OR REPLACE FUNCTION f(x BIGINT) RETURNS BIGINT AS x * 10;
         CREATE VIEW v AS SELECT f(n) AS y FROM t;"
    );
    assert_eq!(run(&program, "v"), vec!["-30", "100", "70"]);
}
