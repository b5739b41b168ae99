//! Feldera's string functions read a number, a BOOLEAN or a timestamp as
//! its text where they take a string (Feldera's own text: `TRUE`, a space
//! before the time); arrays are still refused, and PostgreSQL's rules
//! refuse such calls as DataFusion does. `CHAR` alone is `CHAR(1)`.

mod common;

use eddy_sql::{Pipeline, Program, Rules};

const PROGRAM: &str = "
CREATE VIEW s AS SELECT LOWER(TRUE) AS l,
  SUBSTRING(TIMESTAMP '2020-06-21 14:23:44' FROM 2 FOR 3) AS sub,
  TRIM(TRAILING '2' FROM 1232) AS tr, SPLIT_PART(CAST(12.50 AS DECIMAL(6, 2)), '.', 2) AS sp,
  POSITION('3' IN 1234) AS pos, ASCII(7) AS a, INITCAP(FALSE) AS i,
  CAST('xyz' AS CHAR) AS ch;
";

#[test]
fn scalars_are_read_as_their_text() {
    let mut p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("s").unwrap()),
        vec!["true|020|123|50|3|55|False|x"]
    );
}

#[test]
fn arrays_are_not_text_and_postgres_rules_refuse() {
    let err = match Program::parse("CREATE VIEW s AS SELECT LOWER(ARRAY['A']) AS l;") {
        Ok(_) => panic!("LOWER of an array is refused"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("Cannot apply 'LOWER'"), "{err}");
    assert!(
        Program::parse_with("CREATE VIEW s AS SELECT LOWER(TRUE) AS l;", Rules::Postgres).is_err()
    );
}

/// The reverse: numeric functions read the number a string holds (a
/// DECIMAL for those of exact numbers, a DOUBLE for the others), and a
/// string that holds none fails the step naming it.
#[test]
fn numeric_functions_read_a_strings_number() {
    let program = "CREATE TABLE t (a VARCHAR ARRAY);
      CREATE VIEW n AS SELECT ABS(a[1]) AS ab, CEIL(a[1]) AS ce, ROUND(a[2]) AS ro,
        CAST(POWER(a[2], 2) AS INT) AS po, CAST(SIN(a[3]) AS INT) AS si FROM t;";
    let mut p = Pipeline::new(Program::parse(program).unwrap()).unwrap();
    let schema = std::sync::Arc::clone(&p.program().table("t").unwrap().schema);
    let rows = r#"{"a": ["-0.14", "2.5", "0"]}"#;
    let parsed = eddy_io::json::parse(rows, &schema, eddy_io::json::UpdateFormat::Raw, false);
    p.push("t", parsed.changes).unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("n").unwrap()),
        vec!["0.1400000000000000000|0.0000000000000000000|3|6|0"]
    );
    let parsed = eddy_io::json::parse(
        r#"{"a": ["bye", "1", "1"]}"#,
        &schema,
        eddy_io::json::UpdateFormat::Raw,
        false,
    );
    p.push("t", parsed.changes).unwrap();
    let err = p.step().unwrap_err().to_string();
    assert!(err.contains("bye"), "{err}");
    assert!(Program::parse_with(
        "CREATE TABLE t (s VARCHAR); CREATE VIEW n AS SELECT ABS(s) AS a FROM t;",
        Rules::Postgres
    )
    .is_err());
}
