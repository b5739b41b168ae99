//! `UUID` (uuid.md) as 16 bytes: read from JSON text, written as its
//! canonical text, ordered and grouped by its bytes, cast to text and to
//! bytes, read back from text and from 16 bytes (errors naming what is no
//! UUID, NULL for `SAFE_CAST`), carried through a `VARIANT`; a retraction
//! takes a row's results away.

mod common;

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use eddy_io::json::{parse, UpdateFormat};
use eddy_sql::{Pipeline, Program};

const PROGRAM: &str = "
CREATE TABLE t (id INT, u UUID, s VARCHAR, b VARBINARY);
CREATE VIEW texts AS SELECT id, CAST(u AS VARCHAR) AS text, CAST(u AS BINARY(2)) AS head,
  TO_HEX(CAST(u AS VARBINARY)) AS hex, SAFE_CAST(s AS UUID) AS parsed,
  SAFE_CAST(b AS UUID) AS of_bytes, CAST(CAST(u AS VARIANT) AS UUID) AS round_trip FROM t;
CREATE VIEW counts AS SELECT u, COUNT(*) AS n FROM t GROUP BY u;
CREATE VIEW least AS SELECT MIN(u) AS lo, MAX(u) AS hi FROM t;
";

const ROWS: &str = r#"{"id": 0, "u": "42b8fec7-c7a3-4531-9611-4bde80f9cb4c", "s": "hello ", "b": [1, 2, 3]}
{"id": 1, "u": "0B8FEC7CC7A3453196114BDE80F9CB4C", "s": "42b8fec7-c7a3-4531-9611-4bde80f9cb4c", "b": [66, 184, 254, 199, 199, 163, 69, 49, 150, 17, 75, 222, 128, 249, 203, 76]}
{"id": 2, "u": "42b8fec7-c7a3-4531-9611-4bde80f9cb4c", "s": null, "b": null}"#;

fn push(p: &mut Pipeline, weight: i64) {
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    assert_eq!(
        schema.field_with_name("u").unwrap().data_type(),
        &DataType::FixedSizeBinary(16)
    );
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
    let batch = eddy_io::variant::arrow::batch_as_text(&p.view_rows(view).unwrap()).unwrap();
    common::sorted_rows(&batch)
}

#[test]
fn uuids_are_bytes_written_as_their_text() {
    let mut p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    push(&mut p, 1);
    let u = "42b8fec7-c7a3-4531-9611-4bde80f9cb4c";
    let v = "0b8fec7c-c7a3-4531-9611-4bde80f9cb4c";
    assert_eq!(
        rows(&p, "texts"),
        vec![
            format!("0|{u}|42b8|42b8fec7c7a3453196114bde80f9cb4c|NULL|NULL|{u}"),
            format!("1|{v}|0b8f|0b8fec7cc7a3453196114bde80f9cb4c|{u}|{u}|{v}"),
            format!("2|{u}|42b8|42b8fec7c7a3453196114bde80f9cb4c|NULL|NULL|{u}"),
        ]
    );
    assert_eq!(rows(&p, "counts"), vec![format!("{v}|1"), format!("{u}|2")]);
    assert_eq!(rows(&p, "least"), vec![format!("{v}|{u}")]);
    push(&mut p, -1);
    for view in ["texts", "counts"] {
        assert!(rows(&p, view).is_empty(), "{view}");
    }
}

#[test]
fn what_is_no_uuid_is_refused_where_it_enters() {
    let program = Program::parse(PROGRAM).unwrap();
    let schema = Arc::clone(&program.table("t").unwrap().schema);
    let parsed = parse(
        r#"{"id": 3, "u": "hello"}"#,
        &schema,
        UpdateFormat::Raw,
        false,
    );
    assert_eq!(parsed.errors.len(), 1);
    assert!(
        parsed.errors[0]
            .reason
            .contains("Invalid UUID string 'hello'"),
        "{}",
        parsed.errors[0].reason
    );
    for (cast, message) in [
        ("CAST(s AS UUID)", "Invalid UUID string 'hello '"),
        (
            "CAST(b AS UUID)",
            "Need exactly 16 bytes in BINARY value to create an UUID",
        ),
    ] {
        let program = format!("{PROGRAM}CREATE VIEW bad AS SELECT {cast} AS x FROM t;");
        let mut p = Pipeline::new(Program::parse(&program).unwrap()).unwrap();
        let parsed = parse(
            r#"{"id": 0, "u": "42b8fec7-c7a3-4531-9611-4bde80f9cb4c", "s": "hello ", "b": [1, 2]}"#,
            &schema,
            UpdateFormat::Raw,
            false,
        );
        p.push("t", parsed.changes).unwrap();
        let err = p.step().unwrap_err().to_string();
        assert!(err.contains(message), "{cast}: {err}");
    }
    let err = match Program::parse(&format!(
        "{PROGRAM}CREATE VIEW bad AS SELECT CAST(u AS INT) AS x FROM t;"
    )) {
        Ok(_) => panic!("a UUID has no INT"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("Cast function cannot convert value of type UUID to type INT"),
        "{err}"
    );
}
