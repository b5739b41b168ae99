//! Hostile requests against the real `eddy serve`: each gets a clear error,
//! no file outside the data directory is created or read, and the server
//! and its running pipelines stay up and keep their contents.

mod common;

use common::{encode, scratch, Server};
use serde_json::{json, Value};

const PROGRAM: &str = "
CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, s VARCHAR) WITH ('materialized' = 'true');
CREATE MATERIALIZED VIEW v AS SELECT s, COUNT(*) AS n FROM t GROUP BY s;
";

/// A server with one running pipeline `p` holding two rows.
fn server_with_pipeline(name: &str, flags: &[&str]) -> Server {
    let dir = scratch(name);
    let s = Server::start_with(&dir.join("data"), None, flags).owning(dir);
    s.deploy("p", PROGRAM);
    s.ok("POST", "/v0/pipelines/p/start", None);
    s.ingest("p", "t", "format=csv", "1,a\n2,a\n");
    s
}

/// The server answers, and pipeline `p` kept its rows and takes input.
fn assert_alive(s: &Server, rows_before: i64) {
    assert_eq!(s.ok("GET", "/healthz", None)["status"], "healthy");
    let n = |s: &Server| {
        s.query("p", "SELECT COUNT(*) AS c FROM t")[0]["c"]
            .as_i64()
            .unwrap()
    };
    assert_eq!(n(s), rows_before);
    let id = 1000 + rows_before;
    s.ingest("p", "t", "format=csv", &format!("{id},b\n"));
    assert_eq!(n(s), rows_before + 1);
}

fn query_status(s: &Server, sql: &str) -> (u16, Value) {
    let (status, text) = s.send(
        "GET",
        &format!("/v0/pipelines/p/query?format=json&sql={}", encode(sql)),
        None,
    );
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

fn put_status(s: &Server, name: &str, body: &str) -> (u16, Value) {
    let (status, text) = s.send("PUT", &format!("/v0/pipelines/{name}"), Some(body));
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// PUTs a definition that must be refused with `status` and a message
/// holding `needle`; returns the answer.
fn put_refused(s: &Server, body: &str, status: u16, needle: &str) -> Value {
    let (got, reply) = put_status(s, "refused", body);
    assert_eq!(got, status, "{reply}");
    let message = reply["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "expected '{needle}': {reply}");
    reply
}

fn program_body(sql: &str) -> String {
    json!({ "program_code": sql }).to_string()
}

#[test]
fn ad_hoc_queries_are_read_only_and_reach_no_file() {
    let dir = scratch("hostile-files");
    let s = server_with_pipeline("hostile-readonly", &[]);
    let target = dir.join("copied.csv");
    let refused = [
        (format!("COPY (SELECT 1) TO '{}'", target.display()), "COPY"),
        (
            format!("COPY t TO '{}' STORED AS CSV", target.display()),
            "COPY t TO",
        ),
        (
            "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'".into(),
            "CREATE EXTERNAL TABLE",
        ),
        (
            "CREATE EXTERNAL TABLE p STORED AS CSV LOCATION 'file:///etc/'".into(),
            "CREATE EXTERNAL TABLE",
        ),
        ("CREATE TABLE x AS SELECT 1".into(), "CREATE TABLE x"),
        ("CREATE VIEW x AS SELECT 1".into(), "CREATE VIEW x"),
        ("DROP TABLE t".into(), "DROP TABLE t"),
        ("DROP VIEW v".into(), "DROP VIEW v"),
        ("INSERT INTO t VALUES (9, 'x')".into(), "INSERT INTO t"),
        ("DELETE FROM t".into(), "DELETE FROM t"),
        ("UPDATE t SET s = 'x'".into(), "UPDATE t SET"),
        ("SET datafusion.execution.batch_size = 1".into(), "SET"),
        ("PREPARE q AS SELECT 1".into(), "PREPARE q"),
        ("BEGIN TRANSACTION".into(), "BEGIN"),
        ("CREATE SCHEMA evil".into(), "CREATE SCHEMA"),
        ("SELECT 1; DROP TABLE t".into(), "DROP TABLE t"),
        (
            format!("EXPLAIN COPY (SELECT 1) TO '{}'", target.display()),
            "COPY",
        ),
    ];
    for (sql, kind) in &refused {
        let (status, body) = query_status(&s, sql);
        assert_eq!(status, 400, "{sql}: {body}");
        let message = body["message"].as_str().unwrap_or_default();
        assert!(message.contains("read-only"), "{sql}: {message}");
        assert!(message.contains(kind), "{sql}: {message}");
    }
    // Tables named by a path are not files here.
    for sql in [
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'file:///etc/passwd'",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_parquet('/etc/passwd')",
    ] {
        let (status, body) = query_status(&s, sql);
        assert_eq!(status, 400, "{sql}: {body}");
        assert!(!body.to_string().contains("root:"), "{sql}: {body}");
    }
    assert!(!target.exists(), "a query created {}", target.display());
    // What is allowed still works.
    assert_eq!(
        s.query("p", "SELECT s, n FROM v"),
        vec![json!({"s": "a", "n": 2})]
    );
    assert_eq!(
        s.query(
            "p",
            "WITH w AS (SELECT n FROM v) SELECT SUM(n) AS total FROM w"
        ),
        vec![json!({"total": 2})]
    );
    for sql in [
        "EXPLAIN SELECT * FROM v",
        "SHOW TABLES",
        "SHOW COLUMNS FROM v",
        "DESCRIBE v",
    ] {
        let (status, body) = query_status(&s, sql);
        assert_eq!(status, 200, "{sql}: {body}");
    }
    assert_alive(&s, 2);
}

fn chain(terms: usize) -> String {
    let mut e = String::from("x");
    for _ in 1..terms {
        e.push_str("+x");
    }
    e
}

#[test]
fn deep_sql_is_refused_with_its_location_and_the_server_stays_up() {
    let s = server_with_pipeline("hostile-deep", &[]);
    // A view of 2,000 terms (which used to overflow a stack and abort).
    let sql = format!(
        "CREATE TABLE a (x INT);\nCREATE VIEW b AS SELECT\n  {} AS y FROM a;",
        chain(2000)
    );
    let m = s.deploy_refused("deep", &sql, "deeper than 1000");
    assert_eq!(m["start_line_number"], 3, "{m}");
    assert_eq!(m["start_column"], 3, "{m}");
    // Far deeper still, and other shapes of depth.
    let mut union = String::from("SELECT x FROM a");
    for _ in 0..20_000 {
        union.push_str(" UNION ALL SELECT x FROM a");
    }
    let parens = format!("{}x{}", "(".repeat(5_000), ")".repeat(5_000));
    let nots = format!("{}x > 0", "NOT ".repeat(5_000));
    let casts = format!("x{}", "::BIGINT".repeat(5_000));
    let mut joins = String::from("SELECT a0.x FROM a a0");
    for i in 1..1500 {
        joins.push_str(&format!(" JOIN a a{i} ON a{i}.x = a0.x"));
    }
    for view in [
        format!("SELECT {} AS y FROM a", chain(200_000)),
        union,
        format!("SELECT {parens} AS y FROM a"),
        format!("SELECT x FROM a WHERE {nots}"),
        format!("SELECT {casts} AS y FROM a"),
        joins,
        format!(
            "SELECT (SELECT {} FROM a) AS y",
            "(SELECT ".repeat(400) + "1" + &")".repeat(400)
        ),
    ] {
        let sql = format!("CREATE TABLE a (x INT);\nCREATE VIEW b AS {view};");
        let m = s.deploy_refused("deep", &sql, "");
        assert!(
            m["start_line_number"].as_u64().unwrap() > 0,
            "{}: {m}",
            &view[..60]
        );
    }
    // The same in ad-hoc queries.
    let (status, body) = query_status(&s, &format!("SELECT {}", chain(5000).replace('x', "1")));
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("deeper than 1000"),
        "{body}"
    );
    let (status, _) = query_status(
        &s,
        &format!("SELECT {}1{}", "(".repeat(3000), ")".repeat(3000)),
    );
    assert_eq!(status, 400);
    // A program just under the limit checks, runs and answers.
    let sql = format!("CREATE TABLE a (x INT) WITH ('materialized' = 'true');\nCREATE MATERIALIZED VIEW b AS SELECT {} AS y FROM a;", chain(990));
    s.deploy("edge", &sql);
    s.ok("POST", "/v0/pipelines/edge/start", None);
    s.ingest("edge", "a", "format=csv", "2\n");
    assert_eq!(s.query("edge", "SELECT y FROM b"), vec![json!({"y": 1980})]);
    assert_eq!(
        s.query("edge", &format!("SELECT {} AS y FROM a", chain(900))),
        vec![json!({"y": 1800})]
    );
    assert_alive(&s, 2);
}

#[test]
fn deep_json_in_definitions_is_refused() {
    let s = server_with_pipeline("hostile-json", &[]);
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    // In the request body itself.
    let body = format!(
        "{{\"program_code\": \"CREATE TABLE a (x INT);\", \"runtime_config\": {{\"x\": {deep}}}}}"
    );
    put_refused(&s, &body, 400, "recursion limit");
    // In a connector configuration inside the program.
    let sql = format!(
        "CREATE TABLE a (x INT) WITH ('connectors' = '[{{\"transport\": {{\"name\": \"datagen\", \"config\": {deep}}}}}]');"
    );
    s.deploy_refused("refused", &sql, "recursion limit");
    assert_alive(&s, 2);
}

#[test]
fn connectors_stay_inside_the_data_directory() {
    let s = server_with_pipeline("hostile-connectors", &[]);
    let conn = |transport: &str, config: Value| {
        json!([{"transport": {"name": transport, "config": config}}])
            .to_string()
            .replace('\'', "''")
    };
    let tables = [
        conn("file_input", json!({"path": "/etc/passwd"})),
        conn("file_input", json!({"path": "../pipelines/p.json"})),
        conn(
            "kafka_input",
            json!({"bootstrap.servers": "127.0.0.1:1", "topic": "x", "plugin.library.paths": "/tmp/evil.so"}),
        ),
        conn(
            "kafka_input",
            json!({"bootstrap.servers": "127.0.0.1:1", "topic": "x", "sasl.kerberos.kinit.cmd": "touch /tmp/x"}),
        ),
        conn(
            "kafka_input",
            json!({"bootstrap.servers": "127.0.0.1:1", "topic": "x", "ssl.key.location": "/etc/shadow"}),
        ),
    ];
    for c in &tables {
        let sql = format!("CREATE TABLE a (x INT) WITH ('connectors' = '{c}');");
        s.deploy_refused("refused", &sql, "");
    }
    let out = conn("file_output", json!({"path": "/tmp/eddy-hostile-out.json"}));
    let sql = format!(
        "CREATE TABLE a (x INT);\nCREATE VIEW b WITH ('connectors' = '{out}') AS SELECT x FROM a;"
    );
    s.deploy_refused("refused", &sql, "outside the folders");
    assert!(!std::path::Path::new("/tmp/eddy-hostile-out.json").exists());
    assert_alive(&s, 2);
}

#[test]
fn malformed_csv_rows_are_reported_and_the_rest_applied() {
    let s = server_with_pipeline("hostile-csv", &[]);
    let body = "3,\"unterminated\n4,ok\n5\n6,a,b\n7,\"x\"y\nseven,c\n8,\"fine, quoted\"\n";
    let (status, text) = s.send("POST", "/v0/pipelines/p/ingress/t?format=csv", Some(body));
    assert_eq!(status, 400, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    let errors = reply["details"]["errors"].as_array().unwrap();
    let lines: Vec<i64> = errors.iter().map(|e| e["line"].as_i64().unwrap()).collect();
    assert_eq!(lines, vec![1, 3, 4, 5, 6], "{reply}");
    assert!(errors[0]["reason"]
        .as_str()
        .unwrap()
        .contains("unterminated"));
    assert_eq!(reply["details"]["accepted"], 2);
    s.wait_token("p", reply["details"]["token"].as_str().unwrap());
    let rows = s.query("p", "SELECT id, s FROM t WHERE id > 2 ORDER BY id");
    assert_eq!(
        rows,
        vec![
            json!({"id": 4, "s": "ok"}),
            json!({"id": 8, "s": "fine, quoted"})
        ]
    );
    // Invalid UTF-8 and values of the wrong type, in CSV and JSON.
    let (status, text) = s.send(
        "POST",
        "/v0/pipelines/p/ingress/t?format=json&update_format=raw",
        Some("{\"id\": \"nine\", \"s\": \"x\"}\n{\"id\": 10, \"s\": [1]}\n{\"id\": 11, \"s\": \"ok\"}\n{\"id\": 1.5}\n"),
    );
    assert_eq!(status, 400, "{text}");
    let reply: Value = serde_json::from_str(&text).unwrap();
    let lines: Vec<i64> = reply["details"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_i64().unwrap())
        .collect();
    assert_eq!(lines, vec![1, 2, 4], "{reply}");
    s.wait_token("p", reply["details"]["token"].as_str().unwrap());
    // A body with no line end is not gathered without bound.
    let endless = "9".repeat((16 << 20) + 1000);
    let (status, text) = s.send(
        "POST",
        "/v0/pipelines/p/ingress/t?format=csv",
        Some(&endless),
    );
    assert_eq!(status, 413, "{}", &text[..text.len().min(300)]);
    assert!(text.contains("longer than"), "{text}");
    assert_alive(&s, 5);
}

#[test]
fn limits_of_a_shared_server() {
    let s = server_with_pipeline(
        "hostile-limits",
        &[
            "--max-program-bytes",
            "2000",
            "--max-body-bytes",
            "4000",
            "--max-pipelines",
            "2",
            "--max-egress-streams",
            "1",
        ],
    );
    // Program text and request body sizes.
    let big = format!("CREATE TABLE a (x INT);\n-- {}\n", "x".repeat(2500));
    put_refused(&s, &program_body(&big), 413, "--max-program-bytes");
    let huge = json!({"program_code": "CREATE TABLE a (x INT);", "description": "d".repeat(5000)});
    let body = put_refused(&s, &huge.to_string(), 413, "--max-body-bytes");
    assert_eq!(body["error_code"], "PayloadTooLarge");
    // Pipelines on the server.
    s.deploy("second", "CREATE TABLE a (x INT);");
    let body = put_refused(
        &s,
        &program_body("CREATE TABLE a (x INT);"),
        400,
        "--max-pipelines",
    );
    assert_eq!(body["error_code"], "TooManyPipelines");
    // Egress streams per pipeline: a second is refused while the first is
    // open, and allowed once it is closed.
    let first = s.egress("p", "v", "format=json");
    assert!(first.recv().is_ok());
    let (status, text) = s.send("POST", "/v0/pipelines/p/egress/v?format=json", None);
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("TooManyStreams"));
    drop(first);
    // The closed stream is noticed once the server writes to it: each step
    // writes a marker.
    let url = format!("{}/v0/pipelines/p/egress/v?format=json", s.url);
    common::wait_until("the first stream's slot to free", || {
        s.ingest("p", "t", "format=csv", "50,z\n");
        s.ingest(
            "p",
            "t",
            "format=json&update_format=insert_delete",
            "{\"delete\": {\"id\": 50}}",
        );
        match ureq::post(&url)
            .timeout(std::time::Duration::from_secs(5))
            .call()
        {
            Ok(r) => r.status() == 200,
            Err(ureq::Error::Status(429, _)) => false,
            Err(e) => panic!("egress: {e}"),
        }
    });
    assert_alive(&s, 2);
}

#[test]
fn ad_hoc_queries_have_time_and_memory_limits() {
    let s = server_with_pipeline(
        "hostile-query-limits",
        &["--query-timeout-secs", "2", "--query-memory-mb", "32"],
    );
    let (status, body) = query_status(&s, "SELECT COUNT(*) FROM generate_series(1, 100000000000)");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error_code"], "QueryTimeout", "{body}");
    let (status, body) = query_status(
        &s,
        "SELECT value FROM generate_series(1, 50000000) ORDER BY value DESC",
    );
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error_code"], "QueryOutOfMemory", "{body}");
    let (status, body) = query_status(&s, "SELECT value FROM generate_series(1, 20000000)");
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error_code"], "QueryOutOfMemory", "{body}");
    // 24 MB as Arrow arrays, but about 50 MB as JSON and more as a text
    // table: the written answer is bounded too.
    let sql = "SELECT value, value * 2 AS twice FROM generate_series(1, 1500000)";
    for format in ["json", "text"] {
        let (status, text) = s.send(
            "GET",
            &format!("/v0/pipelines/p/query?format={format}&sql={}", encode(sql)),
            None,
        );
        assert_eq!(status, 400, "{format}: {text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(body["error_code"], "QueryOutOfMemory", "{body}");
    }
    // A small query still runs.
    assert_eq!(
        s.query("p", "SELECT COUNT(*) AS c FROM generate_series(1, 1000)"),
        vec![json!({"c": 1000})]
    );
    assert_alive(&s, 2);
}

#[test]
fn answers_and_definitions_of_the_wrong_shape_are_client_errors() {
    let s = server_with_pipeline("hostile-shapes", &[]);
    let q = |format: &str, sql: &str| {
        s.send(
            "GET",
            &format!("/v0/pipelines/p/query?format={format}&sql={}", encode(sql)),
            None,
        )
    };
    // Values a format cannot hold are the request's problem, not a 500.
    let (status, text) = q("csv", "SELECT [1, 2, 3] AS l");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("cannot be written as csv"), "{text}");
    let (status, text) = q("parquet", "SELECT INTERVAL '1 day' AS i");
    assert_eq!(status, 400, "{text}");
    // A huge value is cut in a text table (which takes time that grows
    // faster than the value), and carried whole by the other formats.
    let (status, text) = q("text", "SELECT repeat('x', 10000000) AS big");
    assert_eq!(status, 200);
    assert!(
        text.contains("… (9995904 more characters)"),
        "{}",
        &text[..200]
    );
    let (status, text) = q("csv", "SELECT repeat('x', 1000000) AS big");
    assert_eq!(status, 200);
    assert_eq!(text.len(), "big\n".len() + 1_000_000 + 1);
    // One call of a function cannot make gigabytes, in queries or views.
    let (status, text) = q("json", "SELECT repeat('x', 2000000000) AS big");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("one call may make at most 64 MiB"), "{text}");
    let (status, text) = q("json", "SELECT (SELECT FROM t) AS nothing");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("selects none"), "{text}");
    s.deploy(
        "amp",
        "CREATE TABLE a (s VARCHAR, n BIGINT) WITH ('materialized' = 'true');
         CREATE MATERIALIZED VIEW b AS SELECT n, repeat(s, n) AS r FROM a;",
    );
    s.ok("POST", "/v0/pipelines/amp/start", None);
    s.ingest("amp", "a", "format=csv", "xy,3\n");
    assert_eq!(
        s.query("amp", "SELECT n, r FROM b ORDER BY n"),
        vec![json!({"n": 3, "r": "xyxyxy"})]
    );
    // A row whose call would make gigabytes fails its step (as any row
    // whose expression fails does): the pipeline reports it, and the
    // server and the other pipelines go on.
    s.ok(
        "POST",
        "/v0/pipelines/amp/ingress/a?format=csv",
        Some("xy,2000000000\n"),
    );
    common::wait_until("the pipeline to fail", || {
        s.ok("GET", "/v0/pipelines/amp", None)["deployment_error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("one call may make at most 64 MiB"))
    });
    s.ok("POST", "/v0/pipelines/amp/stop?force=true", None);
    // Settings that are not objects.
    for field in ["runtime_config", "program_config"] {
        let body = json!({"program_code": "CREATE TABLE a (x INT);", field: 170455}).to_string();
        put_refused(&s, &body, 400, "must be a JSON object");
    }
    let body =
        json!({"program_code": "CREATE TABLE a (x INT);", "runtime_config": {"workers": "four"}});
    put_refused(&s, &body.to_string(), 400, "whole number");
    assert_alive(&s, 2);
}
