//! The PostgreSQL door (`eddy serve --pg-bind`) driven by real clients:
//! Debian's `psql` (the simple query protocol and its catalog queries) and
//! `psycopg` from PyPI (the extended protocol, with parameters):
//! `tests/python/pg_flow.py`.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{free_port, scratch, system_tool, tool, Server};

const PROGRAM: &str = "
CREATE TABLE t (
    id BIGINT NOT NULL PRIMARY KEY,
    n INT,
    x DOUBLE,
    s VARCHAR,
    b BOOLEAN,
    d DATE,
    ts TIMESTAMP,
    amount DECIMAL(10, 2)
) WITH ('materialized' = 'true');
CREATE TABLE plain (k INT, v VARCHAR);
CREATE TABLE events (k INT) WITH ('append_only' = 'true', 'materialized' = 'true');
CREATE MATERIALIZED VIEW v AS SELECT id, n, x, s, b, d, ts, amount FROM t;
CREATE MATERIALIZED VIEW totals AS SELECT COUNT(*) AS cnt, SUM(n) AS total FROM t;
CREATE VIEW unkept AS SELECT id FROM t;
";

/// A server with the PostgreSQL door and pipeline `p` running.
struct Door {
    server: Server,
    port: u16,
    key: Option<String>,
}

impl Door {
    fn start(name: &str, key: Option<&str>) -> Self {
        let dir = scratch(name);
        let port = free_port();
        let bind = format!("127.0.0.1:{port}");
        let server = Server::start_with(&dir, key, &["--pg-bind", &bind]).owning(dir);
        server.deploy("p", PROGRAM);
        server.ok("POST", "/v0/pipelines/p/start", None);
        Self {
            server,
            port,
            key: key.map(str::to_string),
        }
    }

    /// Runs `script` in one `psql` session on `database`, continuing after
    /// errors, with errors in verbose form (SQLSTATE included); returns
    /// (success, stdout, stderr).
    fn psql_on(
        &self,
        database: &str,
        password: Option<&str>,
        script: &str,
    ) -> (bool, String, String) {
        let mut cmd = Command::new(psql());
        cmd.args([
            "-X",
            "-A",
            "-F",
            "|",
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "eddy",
            "-d",
            database,
            "-v",
            "VERBOSITY=verbose",
        ])
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGSSLMODE", "disable")
        .env_remove("PGPASSWORD");
        if let Some(p) = password {
            cmd.env("PGPASSWORD", p);
        } else {
            cmd.arg("-w");
        }
        let out = cmd
            .arg("-f")
            .arg("-")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(script.as_bytes())?;
                child.wait_with_output()
            })
            .expect("psql runs");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn psql(&self, script: &str) -> (String, String) {
        let (_, out, err) = self.psql_on("p", self.key.as_deref(), script);
        (out, err)
    }
}

/// Debian's `psql`: `EDDY_PSQL`, or on the PATH.
fn psql() -> PathBuf {
    system_tool("EDDY_PSQL", "psql")
}

const ROWS: &str = "
INSERT INTO t VALUES
    (1, 10, 1.5, 'ann', true, '2024-01-02', '2024-01-02 03:04:05', 12.34),
    (2, 20, -2.25, 'bob', false, '2023-12-31', '2023-12-31 23:59:59.5', 0.5);
INSERT INTO t (id) VALUES (3);
";

#[test]
fn psql_inserts_and_reads_views_with_postgresql_types() {
    let door = Door::start("pg-types", None);
    let (out, err) = door.psql(&format!(
        "{ROWS}
SELECT * FROM v ORDER BY id;
SELECT cnt, total FROM totals;
SELECT pg_typeof_check FROM (SELECT 1 AS pg_typeof_check) q;
"
    ));
    assert!(err.is_empty(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "INSERT 0 2",
            "INSERT 0 1",
            "id|n|x|s|b|d|ts|amount",
            "1|10|1.5|ann|t|2024-01-02|2024-01-02 03:04:05.000000|12.34",
            "2|20|-2.25|bob|f|2023-12-31|2023-12-31 23:59:59.500000|0.50",
            "3|||||||",
            "(3 rows)",
            "cnt|total",
            "3|30",
            "(1 row)",
            "pg_typeof_check",
            "1",
            "(1 row)",
        ],
        "{out}"
    );
    // The row description's types, as psql's \gdesc reads them.
    let (out, err) = door.psql("SELECT * FROM v \\gdesc\n");
    assert!(err.is_empty(), "{err}");
    for expected in [
        "id|bigint",
        "n|integer",
        "x|double precision",
        "s|character varying",
        "b|boolean",
        "d|date",
        "ts|timestamp without time zone",
        "amount|numeric(10,2)",
    ] {
        assert!(out.lines().any(|l| l == expected), "{expected} in\n{out}");
    }
}

#[test]
fn psql_deletes_by_key_and_reports_row_counts() {
    let door = Door::start("pg-delete", None);
    let (out, err) = door.psql(&format!(
        "{ROWS}
DELETE FROM t WHERE id = 2;
DELETE FROM t WHERE id = 42;
SELECT id FROM v ORDER BY id;
SELECT cnt FROM totals;
BEGIN;
INSERT INTO t (id, n) VALUES (7, 70);
INSERT INTO t (id, n) VALUES (8, 80);
COMMIT;
BEGIN;
INSERT INTO t (id, n) VALUES (9, 90);
ROLLBACK;
SELECT id, n FROM t WHERE id >= 7 ORDER BY id;
INSERT INTO plain VALUES (1, 'x');
"
    ));
    assert!(err.is_empty(), "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            "INSERT 0 2",
            "INSERT 0 1",
            "DELETE 1",
            "DELETE 0",
            "id",
            "1",
            "3",
            "(2 rows)",
            "cnt",
            "2",
            "(1 row)",
            "BEGIN",
            "INSERT 0 1",
            "INSERT 0 1",
            "COMMIT",
            "BEGIN",
            "INSERT 0 1",
            "ROLLBACK",
            "id|n",
            "7|70",
            "8|80",
            "(2 rows)",
            "INSERT 0 1",
        ],
        "{out}"
    );
    // The same rows through the REST API's /query.
    let rows = door.server.query("p", "SELECT COUNT(*) AS c FROM t");
    assert_eq!(rows[0]["c"], 4);
}

#[test]
fn bad_statements_get_sqlstates_and_the_connection_goes_on() {
    let door = Door::start("pg-errors", None);
    let (out, err) = door.psql(
        "SELEC 1;
SELECT 1 AS one;
CREATE TABLE x (a INT);
SELECT 2 AS two;
COPY t TO '/tmp/eddy-pg-copy';
SELECT 3 AS three;
SELECT * FROM read_csv('/etc/passwd');
SELECT * FROM nope;
SELECT * FROM unkept;
SELECT zzz FROM t;
DROP VIEW v;
DELETE FROM plain WHERE k = 1;
INSERT INTO t (n) VALUES (1);
DELETE FROM events WHERE k = 1;
SELECT 4 AS four;
",
    );
    for code in ["42601", "25006", "0A000", "42P01", "42703", "23502"] {
        assert!(
            err.contains(&format!("ERROR:  {code}:")),
            "{code} in\n{err}"
        );
    }
    // A view that is not materialized has no rows to read, and says so.
    assert!(
        err.contains("view 'unkept' is not materialized: declare it CREATE MATERIALIZED VIEW"),
        "{err}"
    );
    // An append-only table refuses a DELETE, with the reason.
    assert!(
        err.contains("table \"events\" is declared append_only: it refuses deletions"),
        "{err}"
    );
    assert!(!std::path::Path::new("/tmp/eddy-pg-copy").exists());
    for answer in ["one\n1", "two\n2", "three\n3", "four\n4"] {
        assert!(out.contains(answer), "{answer} in\n{out}");
    }
    // A file-reading table function is refused, not read.
    assert!(!out.contains("root:"), "{out}");
}

#[test]
fn psql_lists_tables_and_views_with_their_columns() {
    let door = Door::start("pg-catalog", None);
    let (out, err) = door.psql("\\dt\n\\dv\n\\d v\n\\d\n");
    assert!(err.is_empty(), "{err}");
    for expected in [
        "public|t|table|eddy",
        "public|plain|table|eddy",
        "public|v|view|eddy",
        "public|totals|view|eddy",
        "id|bigint|||",
        "s|character varying|||",
        "amount|numeric(10,2)|||",
        "ts|timestamp without time zone|||",
    ] {
        assert!(out.lines().any(|l| l == expected), "{expected} in\n{out}");
    }
    // A view that is not materialized has no rows to read: not listed.
    assert!(!out.contains("unkept"), "{out}");
    // information_schema, as a BI tool's schema browser reads it: the
    // relations a query can read (materialized tables and views).
    let (out, err) = door.psql(
        "SELECT table_name, table_type FROM information_schema.tables \
         WHERE table_schema = 'public' ORDER BY table_name;\n\
         SELECT column_name, data_type FROM information_schema.columns \
         WHERE table_name = 'totals' ORDER BY ordinal_position;\n",
    );
    assert!(err.is_empty(), "{err}");
    for expected in [
        "totals|BASE TABLE",
        "t|BASE TABLE",
        "v|BASE TABLE",
        "cnt|Int64",
    ] {
        assert!(out.lines().any(|l| l == expected), "{expected} in\n{out}");
    }
}

#[test]
fn logins_need_a_known_pipeline_and_the_api_key() {
    let door = Door::start("pg-auth", Some("s3cret"));
    let (ok, out, err) = door.psql_on("p", Some("s3cret"), "SELECT 1 AS one;\n");
    assert!(ok && out.contains("one\n1"), "{out}{err}");
    let (ok, _, err) = door.psql_on("p", Some("wrong"), "SELECT 1;\n");
    assert!(
        !ok && err.contains("password authentication failed"),
        "{err}"
    );
    let (ok, _, err) = door.psql_on("p", None, "SELECT 1;\n");
    assert!(!ok && err.contains("password"), "{err}");
    let (ok, _, err) = door.psql_on("nope", Some("s3cret"), "SELECT 1;\n");
    assert!(
        !ok && err.contains("database \"nope\" does not exist"),
        "{err}"
    );
    // The server is fine after refused logins.
    let (ok, out, _) = door.psql_on("p", Some("s3cret"), "SELECT 2 AS two;\n");
    assert!(ok && out.contains("two\n2"), "{out}");
}

#[test]
fn without_a_key_any_client_of_a_known_pipeline_gets_in() {
    let door = Door::start("pg-nokey", None);
    let (ok, out, err) = door.psql_on("p", None, "SELECT 1 AS one;\n");
    assert!(ok && out.contains("one\n1"), "{out}{err}");
    let (ok, _, err) = door.psql_on("other", None, "SELECT 1;\n");
    assert!(
        !ok && err.contains("database \"other\" does not exist"),
        "{err}"
    );
}

fn psycopg_flow(key: Option<&str>) {
    let python = tool("EDDY_PG_PYTHON", "pg-venv/bin/python");
    let door = Door::start(&format!("pg-psycopg-{}", key.is_some()), key);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/pg_flow.py");
    let out = Command::new(python)
        .arg(script)
        .arg(door.port.to_string())
        .arg(key.unwrap_or(""))
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("pg flow: OK"),
        "status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
}

#[test]
fn psycopg_uses_the_extended_protocol_with_parameters() {
    psycopg_flow(None);
}

#[test]
fn psycopg_with_an_api_key() {
    psycopg_flow(Some("k3y"));
}
