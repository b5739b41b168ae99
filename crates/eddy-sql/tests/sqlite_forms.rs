//! Forms SQLite accepts that DataFusion's parser or planner alone would
//! refuse: an empty `IN ()` list, select lists whose items share a name,
//! and subqueries in `FROM` without an alias.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

/// Runs `view` over `t(a, b)` = (1, 10), (2, 20): its column names and its
/// rows.
fn run(view: &str) -> (Vec<String>, Vec<String>) {
    let text = format!("CREATE TABLE t (a BIGINT, b BIGINT);\nCREATE VIEW v AS {view};");
    let program = Program::parse(&text).unwrap_or_else(|e| panic!("{view}: {e}"));
    let schema = Arc::clone(&program.tables[0].schema);
    let mut p = Pipeline::new(program).unwrap();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![1, 2])),
            Arc::new(Int64Array::from(vec![10, 20])),
        ],
    )
    .unwrap();
    p.push("t", ZSet::with_weight(batch, 1)).unwrap();
    p.step().unwrap();
    let rows = p.view_rows("v").unwrap();
    let names = rows
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    (names, common::sorted_rows(&rows))
}

#[test]
fn an_empty_in_list_holds_nothing() {
    assert!(run("SELECT a FROM t WHERE a IN ()").1.is_empty());
    assert_eq!(run("SELECT a FROM t WHERE a NOT IN ()").1.len(), 2);
}

#[test]
fn repeated_names_are_told_apart_as_sqlite_does() {
    let (names, rows) = run("SELECT a, a, t.a, a + 1, a + 1 FROM t");
    assert_eq!(names, ["a", "a:1", "a:2", "a + 1", "a + 1:1"]);
    assert_eq!(rows.len(), 2);
    // A query that plans as written keeps DataFusion's names.
    assert_eq!(run("SELECT a, b FROM t").0, ["a", "b"]);
}

#[test]
fn a_subquery_without_an_alias_does_not_clash() {
    let (_, rows) = run("SELECT t.a, b FROM t, (SELECT a FROM t) WHERE t.a = 1");
    assert_eq!(rows.len(), 2, "{rows:?}");
}
