//! End-to-end tests of the `eddy` binary: `check` and `run` on programs and
//! change files written to a temporary folder.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::Scratch;

fn eddy(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_eddy"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("eddy runs")
}

fn scratch(name: &str, files: &[(&str, &str)]) -> Scratch {
    let dir = common::scratch(&format!("cli-{name}"));
    for (f, text) in files {
        std::fs::write(dir.join(f), text).unwrap();
    }
    dir
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const SHOP: &str = "
-- a shop
CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR, city VARCHAR);
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer BIGINT, amount BIGINT);
CREATE VIEW revenue AS
  SELECT c.city, COUNT(*) AS n, SUM(o.amount) AS total
  FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.city;
/* customers without orders */
CREATE VIEW idle AS SELECT c.name FROM customers c LEFT JOIN orders o ON o.customer = c.id WHERE o.id IS NULL;
CREATE VIEW top2 AS SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 2;
";

#[test]
fn check_summarizes_a_program() {
    let dir = scratch("check-ok", &[("shop.sql", SHOP)]);
    let out = eddy(&["check", "shop.sql"], &dir);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("2 tables, 3 views"), "{text}");
    assert!(
        text.contains(
            "table customers (id BIGINT NOT NULL, name VARCHAR, city VARCHAR) primary key (id)"
        ),
        "{text}"
    );
    assert!(
        text.contains("view revenue (city VARCHAR, n BIGINT"),
        "{text}"
    );
}

#[test]
fn check_points_at_line_and_column() {
    let dir = scratch(
        "check-bad",
        &[
            (
                "unknown_column.sql",
                "CREATE TABLE t (a INT);\n\nCREATE VIEW v AS\n  SELECT b FROM t;\n",
            ),
            (
                "syntax.sql",
                "CREATE TABLE t (a INT);\nCREATE VIEW v AS SELECT a FROM t WHERE;\n",
            ),
            (
                "unknown_table.sql",
                "CREATE TABLE t (a INT);\nCREATE VIEW v AS SELECT a FROM nope;\n",
            ),
        ],
    );
    for (file, at) in [
        ("unknown_column.sql", ":4:10\n"),
        ("syntax.sql", ":2:39\n"),
        ("unknown_table.sql", ":2:32\n"),
    ] {
        let out = eddy(&["check", file], &dir);
        assert_eq!(out.status.code(), Some(1), "{file}");
        assert!(
            stderr(&out).contains(&format!("--> {file}{at}")),
            "{file}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn check_shows_every_independent_error_under_its_line() {
    let program = "CREATE TABLE orders (id BIGINT, amount DECIMAL(20, 2), at TIMESTAMP);\n\
                   CREATE VIEW late AS SELECT id, amount + at AS x FROM orders;\n\
                   CREATE VIEW by_day AS SELECT * FROM late;\n\
                   CREATE VIEW big AS SELECT id FROM orders WHERE amont > 10;\n";
    let dir = scratch("check-all", &[("shop.sql", program)]);
    let out = eddy(&["check", "shop.sql"], &dir);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    // The refused `+`, underlined; `by_day` reads the view that failed and
    // says nothing more; the misspelt column in `big` is its own error.
    let expected =
        "error: Cannot apply '+' to arguments of type '<DECIMAL(20, 2)> + <TIMESTAMP>'\n\
                    \x20--> shop.sql:2:32\n\
                    \x20 |\n\
                    2 | CREATE VIEW late AS SELECT id, amount + at AS x FROM orders;\n\
                    \x20 |                                ^^^^^^^^^^^\n";
    assert!(err.contains(expected), "{err}");
    assert!(err.contains("error: Column 'amont' not found"), "{err}");
    assert!(err.contains("--> shop.sql:4:48\n"), "{err}");
    assert!(err.contains("\n2 errors"), "{err}");
    assert!(!err.contains("late' not found"), "{err}");
    assert!(
        !err.contains("Decimal128") && !err.contains("Timestamp("),
        "{err}"
    );
}

#[test]
fn run_applies_upserts_deletes_and_reports_bad_rows() {
    let dir = scratch(
        "run",
        &[
            ("shop.sql", SHOP),
            ("customers.csv", "id,name,city\n1,Ada,London\n2,Linus,Helsinki\n3,Grace,NYC\n"),
            (
                "orders1.json",
                "{\"insert\": {\"id\": 10, \"customer\": 1, \"amount\": 5}}\n\
                 {\"insert\": {\"id\": 11, \"customer\": 2, \"amount\": 7}}\n\
                 {\"insert\": {\"id\": 12, \"customer\": 1, \"amount\": 1}}\n\
                 not json\n\
                 {\"insert\": {\"id\": \"x\"}}\n",
            ),
            // Order 10 deleted by key; order 11 replaced (upsert).
            ("orders2.json", "{\"delete\": {\"id\": 10}}\n{\"insert\": {\"id\": 11, \"customer\": 1, \"amount\": 9}}\n"),
        ],
    );
    let args = [
        "run",
        "shop.sql",
        "--format",
        "csv",
        "--input",
        "customers=customers.csv",
        "--input",
        "orders=orders1.json",
        "--input",
        "orders=orders2.json",
    ];
    let out = eddy(&args, &dir);
    // The views are printed; the status says rows were left out.
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "# revenue\ncity,n,total\nLondon,2,10\n# idle\nname\nGrace\nLinus\n# top2\nid,amount\n11,9\n12,1\n"
    );
    let err = stderr(&out);
    assert!(err.contains("orders1.json:line 4:"), "{err}");
    assert!(err.contains("orders1.json:line 5:"), "{err}");
    assert!(err.contains("2 rows rejected"), "{err}");
    // Every row taken: success.
    let good = eddy(
        &[
            "run",
            "shop.sql",
            "--input",
            "customers=customers.csv",
            "--input",
            "orders=orders2.json",
        ],
        &dir,
    );
    assert!(good.status.success(), "{}", stderr(&good));
    assert!(!stderr(&good).contains("rejected"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_prints_each_steps_changes() {
    let dir = scratch(
        "changes",
        &[
            ("p.sql", "CREATE TABLE t (k INT, v INT);\nCREATE VIEW s AS SELECT k, SUM(v) AS total FROM t GROUP BY k;\n"),
            ("a.csv", "1,10\n1,5\n2,7\n"),
            ("b.json", "{\"delete\": {\"k\": 1, \"v\": 5}}\n"),
        ],
    );
    let out = eddy(
        &[
            "run",
            "p.sql",
            "--changes",
            "--format",
            "json",
            "--input",
            "t=a.csv",
            "--input",
            "t=b.json",
        ],
        &dir,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = stdout(&out);
    let lines: Vec<&str> = printed.lines().map(str::trim).collect();
    let text = lines.join("\n");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        text.contains("{\"step\":1,\"view\":\"s\",\"change\":{\"insert\":{\"k\":1,\"total\":15}}}"),
        "{text}"
    );
    assert!(
        text.contains("{\"step\":1,\"view\":\"s\",\"change\":{\"insert\":{\"k\":2,\"total\":7}}}"),
        "{text}"
    );
    assert!(
        text.contains("{\"step\":2,\"view\":\"s\",\"change\":{\"delete\":{\"k\":1,\"total\":15}}}"),
        "{text}"
    );
    assert!(
        text.contains("{\"step\":2,\"view\":\"s\",\"change\":{\"insert\":{\"k\":1,\"total\":10}}}"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
