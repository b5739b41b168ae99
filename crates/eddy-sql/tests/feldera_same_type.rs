//! Values that must share one type (comparisons.md, array.md, grammar.md):
//! `COALESCE`, `GREATEST`, `LEAST`, `ARRAY(…)` and `POSITION` over values
//! that cannot meet are refused with Feldera's words, as are set
//! operations whose columns cannot; a ROW beside ROWs named otherwise, a
//! NULL or a BINARY(n) beside a VARBINARY, a string column beside a
//! BOOLEAN one in `INTERSECT`, take a common type; `MAP(k, v, …)` pairs
//! its arguments; ARRAY_REMOVE of ROWs and the sorted set functions of
//! arrays give Feldera's answers; a MAP's key is read as the map's key
//! type; `EXISTS` in a select list has its answer.

mod common;

use std::sync::Arc;

use eddy_io::json::{parse, UpdateFormat};
use eddy_sql::{Pipeline, Program};

const TABLES: &str = "
CREATE TYPE user_def AS (i1 INT, v1 VARCHAR NULL);
CREATE TABLE t (id INT, str VARCHAR, booll BOOL, bin BINARY(3), vbin VARBINARY, uuidd UUID,
  arr VARCHAR ARRAY, mapp MAP<VARCHAR, INT>, roww ROW(i1 INT, v1 VARCHAR NULL) NULL,
  udt user_def, reall REAL);
";

const ROWS: &str = r#"{"id": 0, "str": "hello", "booll": true, "bin": [11, 22, 32], "vbin": [1], "uuidd": "42b8fec7-c7a3-4531-9611-4bde80f9cb4c", "arr": ["b", "a", null, "b"], "mapp": {"a": 12}, "roww": {"i1": 4, "v1": "cat"}, "udt": {"i1": 4, "v1": "cat"}, "reall": -57681.18}
{"id": 1, "str": null, "booll": null, "bin": null, "vbin": null, "uuidd": null, "arr": null, "mapp": null, "roww": null, "udt": {"i1": 5, "v1": "dog"}, "reall": -0.1234567}"#;

fn refused(view: &str) -> String {
    Program::parse(&format!("{TABLES}\nCREATE VIEW v AS {view};"))
        .map(|_| String::new())
        .unwrap_or_else(|e| e.to_string())
}

fn rows(view: &str) -> Vec<String> {
    let program = Program::parse(&format!("{TABLES}\nCREATE VIEW v AS {view};"))
        .unwrap_or_else(|e| panic!("{view}: {e}"));
    let mut p = Pipeline::new(program).unwrap();
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let parsed = parse(ROWS, &schema, UpdateFormat::Raw, false);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    p.push("t", parsed.changes).unwrap();
    p.step().unwrap();
    let batch = eddy_io::variant::arrow::batch_as_text(&p.view_rows("v").unwrap()).unwrap();
    common::sorted_rows(&batch)
}

#[test]
fn values_that_cannot_meet_are_refused_in_feldera_words() {
    let same = "Parameters must be of the same type";
    for (view, needle) in [
        ("SELECT GREATEST(arr, MAP['a', 13]) FROM t", same),
        ("SELECT LEAST(mapp, ARRAY['apple']) FROM t", same),
        ("SELECT COALESCE(NULL, uuidd, X'0B1620') FROM t", same),
        (
            "SELECT LEAST_IGNORE_NULLS(NULL, uuidd, X'0B1620') FROM t",
            same,
        ),
        ("SELECT ARRAY(arr, uuidd) FROM t", same),
        ("SELECT POSITION('cat' IN roww) FROM t", same),
        (
            "SELECT GREATEST(str, FALSE) FROM t",
            "Cannot infer return type for GREATEST; operand types: [VARCHAR, BOOLEAN]",
        ),
        (
            "SELECT mapp FROM t UNION SELECT MAP(ARRAY['a'], ARRAY[id]) FROM t",
            "Type mismatch in column 1 of UNION",
        ),
        (
            "SELECT id, mapp FROM t INTERSECT SELECT id, arr FROM t",
            "Type mismatch in column 2 of INTERSECT",
        ),
        (
            "SELECT roww FROM t EXCEPT SELECT arr FROM t",
            "Type mismatch in column 1 of EXCEPT",
        ),
        (
            "SELECT MAX(str, str) FROM t",
            "Invalid number of arguments to function 'MAX'. Was expecting 1 arguments",
        ),
        (
            "SELECT ARRAY_JOIN(ARRAY[udt], ',') FROM t",
            "Cannot apply 'ARRAY_JOIN' to arguments of type",
        ),
        (
            "SELECT bin[2] FROM t",
            "Cannot apply indexing to arguments of type",
        ),
        (
            "SELECT roww || roww FROM t",
            "Cannot apply '||' to arguments of type '<ROW> || <ROW>'",
        ),
        (
            "SELECT mapp NOT IN (ARRAY['a']) FROM t",
            "Values passed to NOT IN operator must have compatible types",
        ),
        (
            "SELECT CASE mapp WHEN ARRAY['a'] THEN 0 END FROM t",
            "Cannot apply '=' to arguments of type '<MAP> = <ARRAY>'",
        ),
        (
            "SELECT GROUPING(arr[1]) FROM t GROUP BY arr",
            "Argument to GROUPING operator must be a grouped expression",
        ),
        (
            "SELECT * FROM (VALUES (1), (1, 2)) AS v(a)",
            "Values passed to VALUES operator must have compatible types",
        ),
    ] {
        let err = refused(view);
        assert!(err.contains(needle), "{view}: {err:?}");
    }
}

#[test]
fn values_that_can_meet_take_a_common_type() {
    assert_eq!(
        rows("SELECT id, COALESCE(NULL, vbin, X'0B1620') AS b, COALESCE(bin, X'0B') AS c FROM t"),
        vec!["0|01|0b1620", "1|0b1620|0b"]
    );
    assert_eq!(
        rows("SELECT id, COALESCE(NULL, roww, (9, 'cow')) AS r FROM t"),
        vec!["0|{i1: 4, v1: cat}", "1|{i1: 9, v1: cow}"]
    );
    // ARRAY[…] as ARRAY(…); a NULL array element takes the new one's type.
    assert_eq!(
        rows("SELECT id, ARRAY[id, str] AS a, ARRAY_INSERT(ARRAY[NULL], 1, id) AS n FROM t"),
        vec!["0|[0, hello]|[0, ]", "1|[1, ]|[1, ]"]
    );
    // A string beside numbers: every value is its text.
    assert_eq!(
        rows("SELECT id, COALESCE(NULL, str, -1) AS s, ARRAY(id, str, booll) AS a FROM t"),
        vec!["0|hello|[0, hello, TRUE]", "1|-1|[1, , ]"]
    );
    // The strings against the booleans' text: only NULL is in both.
    assert_eq!(
        rows("SELECT str FROM t INTERSECT ALL SELECT booll FROM t"),
        vec!["NULL"]
    );
    assert_eq!(
        rows("SELECT id, CASE reall WHEN -57681.18 THEN 0 WHEN -0.1234567 THEN 1 END AS r FROM t"),
        vec!["0|0", "1|1"]
    );
}

#[test]
fn map_pairs_its_arguments_whatever_their_types() {
    assert_eq!(
        rows("SELECT id, MAP('k', id, 'l', 2) AS m, CARDINALITY(MAP(ARRAY['a'], ARRAY[id])) AS n FROM t"),
        vec!["0|{k: 0, l: 2}|1", "1|{k: 1, l: 2}|1"]
    );
}

#[test]
fn array_functions_over_rows_and_sets() {
    assert_eq!(
        rows(
            "SELECT id, ARRAY_CONTAINS(ARRAY[udt], (4, 'cat')) AS c, \
             ARRAY_REMOVE(ARRAY[udt, udt], (4, 'cat')) AS r FROM t"
        ),
        vec!["0|true|[]", "1|false|[{i1: 5, v1: dog}, {i1: 5, v1: dog}]"]
    );
    // ARRAY_INSERT pads past the end and counts negative positions from
    // the back; a ROW is read by position.
    assert_eq!(
        rows(
            "SELECT ARRAY_INSERT(arr, 6, 'x') AS a, ARRAY_INSERT(arr, -1, 'y') AS b, \
             ARRAY_INSERT(ARRAY[udt], 2, (7, 'cow')) AS c FROM t WHERE id = 0"
        ),
        vec!["[b, a, , b, , x]|[b, a, , b, y]|[{i1: 4, v1: cat}, {i1: 7, v1: cow}]"]
    );
    // Sorted ascending, NULL first, without duplicates.
    assert_eq!(
        rows(
            "SELECT ARRAY_EXCEPT(arr, ARRAY['z']) AS e, ARRAY_UNION(arr, ARRAY['c']) AS u, \
             ARRAY_INTERSECT(arr, ARRAY['b', 'a']) AS i FROM t WHERE id = 0"
        ),
        vec!["[, a, b]|[, a, b, c]|[a, b]"]
    );
}

#[test]
fn map_keys_take_the_maps_key_type_and_exists_answers_anywhere() {
    let program = format!(
        "{TABLES}\nCREATE TABLE m (im MAP<INT, VARCHAR>);\n\
         CREATE VIEW v AS SELECT im[1] AS one, im[2] AS two FROM m;\n\
         CREATE VIEW e AS SELECT EXISTS (SELECT 1 FROM m) AS any_m, \
         NOT EXISTS (SELECT 1 FROM t) AS no_t;"
    );
    let mut p = Pipeline::new(Program::parse(&program).unwrap()).unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("e").unwrap()),
        vec!["false|true"]
    );
    let schema = Arc::clone(&p.program().table("m").unwrap().schema);
    let parsed = parse(
        r#"{"im": {"1": "a", "3": "c"}}"#,
        &schema,
        UpdateFormat::Raw,
        false,
    );
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    p.push("m", parsed.changes).unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("v").unwrap()),
        vec!["a|NULL"]
    );
    assert_eq!(
        common::sorted_rows(&p.view_rows("e").unwrap()),
        vec!["true|true"]
    );
}

#[test]
fn postgres_rules_and_names_keep_their_meaning() {
    use eddy_sql::Rules;
    // Under PostgreSQL's rules COALESCE of a number and a string is a
    // number, as DataFusion plans it.
    let program = format!("{TABLES}\nCREATE VIEW v AS SELECT COALESCE(id, '0') + 1 AS n FROM t;");
    Program::parse_with(&program, Rules::Postgres).unwrap();
    // A period predicate's word after anything but a parenthesized
    // period is a name.
    for view in [
        "SELECT id equals FROM t",
        "SELECT 1 contains UNION ALL SELECT 2",
        "SELECT (id) precedes, str FROM t",
    ] {
        Program::parse(&format!("{TABLES}\nCREATE VIEW v AS {view};"))
            .unwrap_or_else(|e| panic!("{view}: {e}"));
    }
}

#[test]
fn an_insertion_too_far_fails_the_step() {
    let program = format!(
        "{TABLES}\nCREATE VIEW v AS SELECT ARRAY_INSERT(arr, 2000000000, 'x') AS a FROM t;"
    );
    let mut p = Pipeline::new(Program::parse(&program).unwrap()).unwrap();
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    p.push("t", parse(ROWS, &schema, UpdateFormat::Raw, false).changes)
        .unwrap();
    let err = p.step().unwrap_err().to_string();
    assert!(err.contains("too large for 'ARRAY_INSERT'"), "{err}");
}
