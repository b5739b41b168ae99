//! Feldera's index of functions and SQL constructs, walked entry by entry:
//! `sql-tests/function-index.txt` gives each entry of the index a query
//! that uses it, which must plan and run a step over a row of every type,
//! unless the entry is listed as refused, with the reason, and then the
//! query must be refused. The
//! table must name every entry of Feldera's index (read from
//! `../shared/feldera-sql-tests/sql-reference/function-index.md` where
//! that checkout is beside the repository, as in CI).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

mod common;

use eddy_io::json::{parse, UpdateFormat};
use eddy_sql::{Pipeline, Program};

const FIXTURE: &str = "CREATE TYPE pair AS (x INT, y VARCHAR);
CREATE TABLE t (id INT, i INT, b BIGINT, d DECIMAL(10, 2), r REAL, f DOUBLE, s VARCHAR,
  bo BOOLEAN, bin VARBINARY, dt DATE, tm TIME, ts TIMESTAMP, a INT ARRAY, sa VARCHAR ARRAY,
  m MAP<VARCHAR, INT>, v VARIANT, w pair);
";

const ROW: &str = r#"{"id": 1, "i": 7, "b": -3, "d": 12.5, "r": 1.5, "f": 0.25, "s": "Hello, World", "bo": true, "bin": [1, 2, 3], "dt": "2024-05-04", "tm": "17:23:59", "ts": "2024-05-04 17:23:59", "a": [3, 1, 2], "sa": ["x", "y"], "m": {"a": 1, "b": 2}, "v": {"k": [1, 2], "n": 3, "s": "text"}, "w": {"x": 1, "y": "z"}}"#;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .parent()
        .unwrap()
}

/// One entry of the table.
struct Entry {
    name: String,
    probe: String,
    /// Why it is refused, for an entry Eddy does not have yet.
    refused: Option<String>,
}

fn table() -> Vec<Entry> {
    let text = std::fs::read_to_string(root().join("sql-tests/function-index.txt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut columns = l.split('\t');
            let (Some(name), Some(probe)) = (columns.next(), columns.next()) else {
                panic!("an entry, a tab and a query: {l:?}");
            };
            let refused = columns.next().map(|r| {
                r.strip_prefix("refused: ")
                    .filter(|why| !why.trim().is_empty())
                    .unwrap_or_else(|| panic!("a third column is `refused: <why>`: {l:?}"))
                    .to_string()
            });
            Entry {
                name: name.to_string(),
                probe: probe.to_string(),
                refused,
            }
        })
        .collect()
}

/// Plans the probe's program and runs a step over the row.
fn run(probe: &str) -> Result<(), String> {
    pipeline(probe).map(|_| ())
}

/// The rows of view `v` of the probe, after a step over the row.
fn values(query: &str) -> Vec<String> {
    let p = pipeline(query).unwrap_or_else(|e| panic!("{query}: {e}"));
    common::sorted_rows(&p.view_rows("v").unwrap())
}

fn pipeline(probe: &str) -> Result<Pipeline, String> {
    let program = if probe.starts_with("CREATE") {
        format!("{FIXTURE}{probe};")
    } else {
        format!("{FIXTURE}CREATE VIEW v AS {probe};")
    };
    let program = Program::parse(&program).map_err(|e| e.to_string())?;
    let mut p = Pipeline::new(program).map_err(|e| e.to_string())?;
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let parsed = parse(ROW, &schema, UpdateFormat::Raw, false);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    p.push("t", parsed.changes).map_err(|e| e.to_string())?;
    p.step().map_err(|e| e.to_string())?;
    Ok(p)
}

#[test]
fn every_entry_is_implemented_or_refused_with_its_reason() {
    let mut wrong = Vec::new();
    for e in table() {
        match (&e.refused, run(&e.probe)) {
            (None, Err(err)) => wrong.push(format!("{}: {}: {err}", e.name, e.probe)),
            (Some(_), Ok(())) => wrong.push(format!(
                "{} is listed as refused but runs: drop its refusal",
                e.name
            )),
            _ => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_table_names_every_entry_of_feldera_s_index() {
    let listed: BTreeSet<String> = table().into_iter().map(|e| e.name).collect();
    let index = root().join("../shared/feldera-sql-tests/sql-reference/function-index.md");
    let Ok(text) = std::fs::read_to_string(&index) else {
        eprintln!(
            "{} is not beside the repository: only the table is checked",
            index.display()
        );
        return;
    };
    let entries: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("* `"))
        .filter_map(|l| {
            let (name, rest) = l.split_once('`')?;
            let aggregate = rest.trim_start().starts_with("(aggregate)");
            Some(match aggregate {
                true => format!("{name} (aggregate)"),
                false => name.to_string(),
            })
        })
        .collect();
    let missing: Vec<&String> = entries.difference(&listed).collect();
    let extra: Vec<&String> = listed.difference(&entries).collect();
    assert!(
        missing.is_empty(),
        "entries of the index missing from the table: {missing:?}"
    );
    assert!(
        extra.is_empty(),
        "entries of the table not in the index: {extra:?}"
    );
    assert!(
        entries.len() > 250,
        "the index has {} entries",
        entries.len()
    );
}

#[test]
fn the_functions_written_for_the_index_give_the_reference_s_answers() {
    assert_eq!(
        values(
            "SELECT FLOOR(d) AS a, CEIL(d) AS b, CEIL(f) AS c, FLOOR(ts TO DAY) AS e, \
             CEIL(ts TO HOUR) AS g FROM t"
        ),
        vec!["12.00|13.00|1.000000|2024-05-04T00:00:00|2024-05-04T18:00:00"]
    );
    assert_eq!(
        values(
            "SELECT ARRAY(i, NULL, 2) AS a, a[SAFE_OFFSET(0)] AS b, a[SAFE_OFFSET(3)] AS c, \
             ELEMENT(ARRAY[i]) AS e, ELEMENT(CAST(ARRAY[] AS INT ARRAY)) AS g, \
             SEQUENCE(5, 7) AS h, SEQUENCE(7, 5) AS k FROM t"
        ),
        vec!["[7, , 2]|3|NULL|7|NULL|[5, 6, 7]|[]"]
    );
    assert_eq!(
        values(
            "SELECT DATE_PART(YEAR, dt) AS a, DIV_NULL(i, 0) AS b, DIV_NULL(i, 2) AS c, \
             FINITE_OR_NULL(f / 0e0) AS e, FINITE_OR_NULL(f) AS g, \
             INITCAP_SPACES('hi THOMAS-SON') AS h, XXHASH('abc', 2) AS k, \
             XXHASH(x'010203', 2) AS l, BROUND(d, 0) AS m, BROUND(CAST(13.5 AS DECIMAL(4, 1)), 0) AS o \
             FROM t"
        ),
        vec!["2024|NULL|3|NULL|0.250000|Hi Thomas-son|6026019377950218999|2397937360598948438|12.00|14.0"]
    );
    assert_eq!(
        values(
            "SELECT MAKE_TIMESTAMP(2020, 1, 1, 10, 0, 0.5) AS a, \
             MAKE_TIMESTAMP(2020, 13, 1, 10, 0, 0) AS b, \
             CONVERT_TIMEZONE('America/New_York', 'America/Los_Angeles', \
               TIMESTAMP '2008-03-05 12:25:29') AS c, \
             CONVERT_TIMEZONE('Nowhere', 'UTC', ts) AS e FROM t"
        ),
        vec!["2020-01-01T10:00:00.500|NULL|2008-03-05T09:25:29|NULL"]
    );
    assert_eq!(
        values("SELECT i, GROUPING_ID(i) AS g FROM t GROUP BY ROLLUP(i)"),
        vec!["7|0", "NULL|1"]
    );
    let err = run("SELECT ELEMENT(a) AS x FROM t").unwrap_err();
    assert!(err.contains("ELEMENT of an array of 3 elements"), "{err}");
}

#[test]
fn column_defaults_fill_rows_that_lack_them() {
    let program = Program::parse(
        "CREATE TABLE d (k INT, z INT DEFAULT 5, w VARCHAR DEFAULT 'x' || 'y', \
           u UUID DEFAULT CAST('42b8fec7-c7a3-4531-9611-4bde80f9cb4c' AS UUID), n INT DEFAULT NULL,
           ts TIMESTAMP DEFAULT TIMESTAMP '2024-05-04 10:00:00');
         CREATE VIEW v AS SELECT k, z, w, CAST(u AS VARCHAR) AS u, n, ts FROM d;",
    )
    .unwrap();
    let mut p = Pipeline::new(program).unwrap();
    let schema = Arc::clone(&p.program().table("d").unwrap().schema);
    let rows = r#"{"k": 1}
{"k": 2, "z": 7, "w": null}"#;
    let parsed = parse(rows, &schema, UpdateFormat::Raw, false);
    assert!(parsed.errors.is_empty(), "{:?}", parsed.errors);
    p.push("d", parsed.changes).unwrap();
    p.step().unwrap();
    let u = "42b8fec7-c7a3-4531-9611-4bde80f9cb4c";
    assert_eq!(
        common::sorted_rows(&p.view_rows("v").unwrap()),
        vec![
            format!("1|5|xy|{u}|NULL|2024-05-04T10:00:00"),
            format!("2|7|NULL|{u}|NULL|2024-05-04T10:00:00"),
        ]
    );
    let err = match Program::parse("CREATE TABLE e (i INT DEFAULT CAST(i AS INTEGER));") {
        Ok(_) => panic!("a DEFAULT reads no column"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("Column 'i' not found in any table"), "{err}");
}
