//! End-to-end tests of `eddy serve`: the real binary on a free loopback
//! port, driven over HTTP.

mod common;

use common::{collect_changes, encode, scratch, wait_until, Server};
use serde_json::{json, Value};

const PROGRAM: &str = "
CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, customer VARCHAR, amount INT)
    WITH ('materialized' = 'true');
CREATE MATERIALIZED VIEW totals AS
    SELECT customer, COUNT(*) AS n, SUM(amount) AS total FROM orders GROUP BY customer;
CREATE MATERIALIZED VIEW big AS SELECT id, amount FROM orders WHERE amount > 100;
";

fn sorted(mut rows: Vec<Value>) -> Vec<Value> {
    rows.sort_by_key(|r| r.to_string());
    rows
}

#[test]
fn deploy_ingest_stream_and_query() {
    let dir = scratch("flow");
    let s = Server::start(&dir, None);
    assert_eq!(s.ok("GET", "/healthz", None)["status"], "healthy");
    s.deploy("shop", PROGRAM);
    let d = s.ok("GET", "/v0/pipelines/shop", None);
    assert_eq!(d["program_status"], "Success");
    assert_eq!(d["deployment_status"], "Stopped");
    assert_eq!(d["program_info"]["schema"]["inputs"][0]["name"], "orders");
    s.ok("POST", "/v0/pipelines/shop/start", None);
    assert_eq!(
        s.ok("GET", "/v0/pipelines/shop?selector=status", None)["deployment_status"],
        "Running"
    );
    let stream = s.egress("shop", "totals", "format=json");

    // Every input format.
    s.ingest(
        "shop",
        "orders",
        "format=json&update_format=insert_delete",
        "{\"insert\": {\"id\": 1, \"customer\": \"ann\", \"amount\": 50}}\n{\"insert\": {\"id\": 2, \"customer\": \"bob\", \"amount\": 200}}\n",
    );
    s.ingest(
        "shop",
        "ORDERS",
        "format=csv",
        "id,customer,amount\n3,ann,70\n",
    );
    s.ingest(
        "shop",
        "orders",
        "format=json&update_format=raw&array=true",
        r#"[{"id": 4, "customer": "cy", "amount": 5}]"#,
    );
    s.ingest(
        "shop",
        "orders",
        "format=json&update_format=weighted",
        r#"{"weight": -1, "data": {"id": 4, "customer": "cy", "amount": 5}}"#,
    );
    // An upsert by primary key replaces the old row.
    s.ingest(
        "shop",
        "orders",
        "format=json&update_format=insert_delete",
        r#"{"insert": {"id": 1, "customer": "ann", "amount": 150}}"#,
    );

    let totals = sorted(s.query("shop", "SELECT * FROM totals"));
    assert_eq!(
        totals,
        vec![
            json!({"customer": "ann", "n": 2, "total": 220}),
            json!({"customer": "bob", "n": 1, "total": 200}),
        ]
    );
    let big = sorted(s.query("shop", "SELECT id FROM big ORDER BY id"));
    assert_eq!(big, vec![json!({"id": 1}), json!({"id": 2})]);
    let joined = s.query(
        "shop",
        "SELECT o.id, t.n FROM orders o JOIN totals t ON o.customer = t.customer WHERE o.id = 3",
    );
    assert_eq!(joined, vec![json!({"id": 3, "n": 2})]);

    // The stream saw every step's change, in order: ann 1/50, bob, ann
    // 2/120 (−1/50), cy (+ then −), ann 2/220 (−2/120).
    let changes = collect_changes(&stream, 8);
    assert_eq!(
        changes[0],
        json!({"insert": {"customer": "ann", "n": 1, "total": 50}})
    );
    assert!(changes.contains(&json!({"delete": {"customer": "ann", "n": 2, "total": 120}})));
    assert_eq!(
        changes.last().unwrap(),
        &json!({"insert": {"customer": "ann", "n": 2, "total": 220}})
    );

    // A snapshot stream starts with the current contents.
    let snap = s.egress("shop", "totals", "format=json&send_snapshot=true");
    let first = collect_changes(&snap, 2);
    assert_eq!(
        sorted(first),
        vec![
            json!({"insert": {"customer": "ann", "n": 2, "total": 220}}),
            json!({"insert": {"customer": "bob", "n": 1, "total": 200}}),
        ]
    );

    // Query formats.
    let (st, text) = s.send(
        "GET",
        "/v0/pipelines/shop/query?sql=SELECT+customer+FROM+totals+ORDER+BY+customer&format=text",
        None,
    );
    assert_eq!(st, 200);
    assert!(text.contains("| ann      |"), "{text}");
    let (st, csv) = s.send(
        "GET",
        "/v0/pipelines/shop/query?sql=SELECT+customer,n+FROM+totals+ORDER+BY+customer&format=csv",
        None,
    );
    assert_eq!((st, csv.as_str()), (200, "customer,n\nann,2\nbob,1\n"));
    for (format, magic) in [
        ("arrow_ipc", &[0xFFu8, 0xFF, 0xFF, 0xFF][..]),
        ("parquet", b"PAR1"),
    ] {
        let resp = ureq::get(&format!(
            "{}/v0/pipelines/shop/query?sql=SELECT+*+FROM+totals&format={format}",
            s.url
        ))
        .call()
        .unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes).unwrap();
        assert!(
            bytes.starts_with(magic),
            "{format}: {:?}",
            &bytes[..8.min(bytes.len())]
        );
    }
    // A wrong query is a 400 with DataFusion's message.
    let (st, body) = s.send(
        "GET",
        "/v0/pipelines/shop/query?sql=SELECT+nope+FROM+totals",
        None,
    );
    assert_eq!(st, 400);
    assert!(body.contains("nope"), "{body}");

    // A body far larger than one piece streams through whole, with bad rows
    // reported by their line in the whole body.
    let mut big = String::new();
    for i in 0..200_000 {
        big.push_str(&format!("{},z{},{}\n", 1000 + i, i % 7, i % 90));
    }
    big.push_str("oops,z,1\n");
    let (st, text) = s.send(
        "POST",
        "/v0/pipelines/shop/ingress/orders?format=csv",
        Some(&big),
    );
    assert_eq!(st, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["details"]["accepted"], 200_000);
    assert_eq!(e["details"]["errors"][0]["line"], 200_001);
    s.wait_token("shop", e["details"]["token"].as_str().unwrap());
    assert_eq!(
        s.query(
            "shop",
            "SELECT COUNT(*) AS c, SUM(amount) AS a FROM orders WHERE id >= 1000"
        ),
        vec![json!({"c": 200_000, "a": (0..200_000).map(|i| i % 90).sum::<i64>()})]
    );
    s.ingest(
        "shop",
        "orders",
        "format=json&update_format=insert_delete",
        &(0..200_000)
            .map(|i| format!("{{\"delete\": {{\"id\": {}}}}}\n", 1000 + i))
            .collect::<String>(),
    );

    // Stats and metrics count the input.
    let stats = s.ok("GET", "/v0/pipelines/shop/stats", None);
    let global = &stats["global_metrics"];
    assert_eq!(global["total_processed_records"], 400_006);
    assert!(global["steps"].as_u64().unwrap() >= 5);
    // Real figures, not placeholders: the bytes the ingress took (the
    // large CSV body alone is over 2 MB), the worker's CPU time, this
    // run's own id.
    assert!(
        global["total_input_bytes"].as_u64().unwrap() > 2_000_000,
        "{global}"
    );
    assert!(global["cpu_msecs"].as_u64().unwrap() > 0, "{global}");
    let incarnation = global["incarnation_uuid"].as_str().unwrap();
    assert_ne!(incarnation, "00000000-0000-0000-0000-000000000000");
    assert_eq!(&incarnation[14..15], "4", "a version 4 UUID: {incarnation}");
    for placeholder in [
        "total_processed_bytes",
        "buffered_input_bytes",
        "storage_mb_secs",
    ] {
        assert!(global.get(placeholder).is_none(), "{placeholder}: {global}");
    }
    let (_, metrics) = s.send("GET", "/v0/pipelines/shop/metrics", None);
    assert!(
        metrics.contains("eddy_processed_records_total{pipeline=\"shop\"} 400006"),
        "{metrics}"
    );
    // The process's memory is not one pipeline's.
    assert!(
        metrics.lines().any(|l| l.starts_with("eddy_rss_bytes{} ")),
        "{metrics}"
    );

    s.ok("POST", "/v0/pipelines/shop/stop?force=true", None);
    assert_eq!(
        s.ok("GET", "/v0/pipelines/shop", None)["deployment_status"],
        "Stopped"
    );
    // The stream ends when the pipeline stops.
    wait_until("egress stream end", || {
        matches!(
            stream.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        )
    });
    s.ok("DELETE", "/v0/pipelines/shop", None);
    assert_eq!(s.send("GET", "/v0/pipelines/shop", None).0, 404);
}

#[test]
fn errors_are_reported_and_never_stop_the_pipeline() {
    let dir = scratch("errors");
    let s = Server::start(&dir, None);
    // A bad program is stored as Feldera stores one that fails to compile:
    // `SqlError` with the line and column, and it cannot start.
    let body = json!({"name": "bad", "program_code": "CREATE TABLE t (x INT);\nCREATE VIEW v AS SELECT y FROM t;"}).to_string();
    let (st, text) = s.send("PUT", "/v0/pipelines/bad", Some(&body));
    assert_eq!(st, 201, "{text}");
    let m = s.deploy_refused(
        "bad",
        "CREATE TABLE t (x INT);\nCREATE VIEW v AS SELECT y FROM t;",
        "y",
    );
    assert_eq!(m["start_line_number"], 2, "{m}");
    assert!(m["start_column"].as_u64().unwrap() > 0, "{m}");
    let (_, text) = s.send("POST", "/v0/pipelines/bad/start", None);
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["details"]["line"], 2, "{e}");
    // Fixed, it checks and starts.
    let fixed =
        json!({"program_code": "CREATE TABLE t (x INT);\nCREATE VIEW v AS SELECT x FROM t;"})
            .to_string();
    let d = s.ok("PATCH", "/v0/pipelines/bad", Some(&fixed));
    assert_eq!(d["program_status"], "Success", "{d}");
    s.ok("POST", "/v0/pipelines/bad/start", None);
    s.ok("POST", "/v0/pipelines/bad/stop?force=true", None);
    // Bad bodies and names.
    assert_eq!(s.send("PUT", "/v0/pipelines/x", Some("{not json")).0, 400);
    assert_eq!(
        s.send(
            "PUT",
            "/v0/pipelines/a%20b",
            Some(&json!({"program_code": ""}).to_string())
        )
        .0,
        400
    );
    assert_eq!(s.send("POST", "/v0/pipelines/nope/start", None).0, 404);

    s.deploy("p", "CREATE TABLE t (x INT NOT NULL, s VARCHAR) WITH ('materialized' = 'true');\nCREATE MATERIALIZED VIEW v AS SELECT x * 2 AS y FROM t;");
    // Ingress into a stopped pipeline is refused.
    assert_eq!(s.send("POST", "/v0/pipelines/p/ingress/t", Some("")).0, 400);
    s.ok("POST", "/v0/pipelines/p/start", None);
    assert_eq!(
        s.send("POST", "/v0/pipelines/p/ingress/nope", Some("")).0,
        404
    );
    assert_eq!(s.send("POST", "/v0/pipelines/p/egress/nope", None).0, 404);
    assert_eq!(
        s.send("POST", "/v0/pipelines/p/ingress/t?format=avro", Some(""))
            .0,
        400
    );
    // Bad rows are listed with their line; the good ones are applied.
    let input = "{\"insert\": {\"x\": 1}}\n{\"insert\": {\"x\": \"one\"}}\nnot json\n{\"insert\": {\"x\": null}}\n{\"insert\": {\"x\": 5, \"zz\": 1}}\n{\"insert\": {\"x\": 2, \"s\": \"ok\"}}\n";
    let (st, text) = s.send("POST", "/v0/pipelines/p/ingress/t?format=json", Some(input));
    assert_eq!(st, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["error_code"], "ParseErrors");
    assert_eq!(e["details"]["accepted"], 2);
    assert_eq!(e["details"]["rejected"], 4);
    let lines: Vec<u64> = e["details"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, vec![2, 3, 4, 5]);
    s.wait_token("p", e["details"]["token"].as_str().unwrap());
    let rows = sorted(s.query("p", "SELECT y FROM v"));
    assert_eq!(rows, vec![json!({"y": 2}), json!({"y": 4})]);
    // CSV rows that do not fit.
    let (st, text) = s.send(
        "POST",
        "/v0/pipelines/p/ingress/t?format=csv",
        Some("7,a\nx,b\n8,c\n"),
    );
    assert_eq!(st, 400, "{text}");
    let e: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(e["details"]["errors"][0]["line"], 2);
    s.wait_token("p", e["details"]["token"].as_str().unwrap());
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    let input = &stats["inputs"][0]["metrics"];
    assert_eq!(input["num_parse_errors"], 5);
    assert_eq!(input["total_records"], 4);
    assert_eq!(
        s.query("p", "SELECT COUNT(*) AS c FROM t"),
        vec![json!({"c": 4})]
    );
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
    // Changing a stopped pipeline's program.
    s.ok(
        "PATCH",
        "/v0/pipelines/p",
        Some(&json!({"description": "d"}).to_string()),
    );
    assert_eq!(s.ok("GET", "/v0/pipelines/p", None)["description"], "d");
}

#[test]
fn pause_resume_stop_and_restart_keep_definitions() {
    let dir = scratch("lifecycle");
    let mut s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE t (x INT);\nCREATE MATERIALIZED VIEW v AS SELECT SUM(x) AS s FROM t;\n\
         CREATE VIEW unkept AS SELECT x FROM t;",
    );
    s.ok("POST", "/v0/pipelines/p/start?initial=paused", None);
    assert_eq!(
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"],
        "Paused"
    );
    let v = s.ok(
        "POST",
        "/v0/pipelines/p/ingress/t?format=csv",
        Some("1\n2\n"),
    );
    let token = v["token"].as_str().unwrap().to_string();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let status = s.ok(
        "GET",
        &format!("/v0/pipelines/p/completion_status?token={token}"),
        None,
    );
    assert_eq!(
        status["status"], "inprogress",
        "a paused pipeline takes no steps"
    );
    s.ok("POST", "/v0/pipelines/p/resume", None);
    s.wait_token("p", &token);
    assert_eq!(s.query("p", "SELECT s FROM v"), vec![json!({"s": 3})]);
    // A table that is not materialized cannot be queried, and the answer
    // says why.
    let (st, text) = s.send("GET", "/v0/pipelines/p/query?sql=SELECT+*+FROM+t", None);
    assert_eq!(st, 400, "{text}");
    assert!(text.contains("table 't' is not materialized"), "{text}");
    // Nor can a view that is not materialized: its rows are not kept, so
    // neither a query nor an egress stream's snapshot can read them.
    let (st, text) = s.send(
        "GET",
        "/v0/pipelines/p/query?sql=SELECT+*+FROM+unkept",
        None,
    );
    assert_eq!(st, 400, "{text}");
    assert!(text.contains("view 'unkept' is not materialized"), "{text}");
    let (st, text) = s.send(
        "POST",
        "/v0/pipelines/p/egress/unkept?format=json&send_snapshot=true",
        None,
    );
    assert_eq!(st, 400, "{text}");
    assert!(text.contains("view 'unkept' is not materialized"), "{text}");
    s.ok("POST", "/v0/pipelines/p/pause", None);
    s.ok("POST", "/v0/pipelines/p/start", None);
    assert_eq!(
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"],
        "Running"
    );
    // A pipeline cannot be changed or deleted while running.
    assert_eq!(s.send("DELETE", "/v0/pipelines/p", None).0, 400);
    // A graceful stop processes what was accepted.
    s.ok("POST", "/v0/pipelines/p/ingress/t?format=csv", Some("10\n"));
    s.ok("POST", "/v0/pipelines/p/stop", None);
    // ... and checkpoints the state.
    assert_eq!(
        s.ok("GET", "/v0/pipelines/p", None)["storage_status"],
        "InUse"
    );
    assert_eq!(s.terminate().code(), Some(0));

    // Definitions survive a restart, and so does the state checkpointed
    // at the stop.
    let s = Server::start(&dir, None);
    let list = s.ok("GET", "/v0/pipelines", None);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["name"], "p");
    assert_eq!(list[0]["deployment_status"], "Stopped");
    assert_eq!(list[0]["storage_status"], "InUse");
    s.ok("POST", "/v0/pipelines/p/start", None);
    s.ingest("p", "t", "format=csv", "5\n");
    assert_eq!(s.query("p", "SELECT s FROM v"), vec![json!({"s": 18})]);
    // Cleared, it starts from nothing.
    stop_and_wait(&s, "p", "?force=true");
    s.ok("POST", "/v0/pipelines/p/clear", None);
    s.ok("POST", "/v0/pipelines/p/start", None);
    s.ingest("p", "t", "format=csv", "5\n");
    assert_eq!(s.query("p", "SELECT s FROM v"), vec![json!({"s": 5})]);
}

#[test]
fn api_key_guards_every_endpoint_but_health() {
    let dir = scratch("auth");
    let s = Server::start(&dir, Some("sekret"));
    let plain = |method: &str, path: &str| match ureq::request(method, &format!("{}{path}", s.url))
        .call()
    {
        Ok(r) => r.status(),
        Err(ureq::Error::Status(c, _)) => c,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(plain("GET", "/healthz"), 200);
    assert_eq!(plain("GET", "/v0/pipelines"), 401);
    assert_eq!(plain("POST", "/v0/pipelines/p/start"), 401);
    let wrong = ureq::get(&format!("{}/v0/pipelines", s.url))
        .set("Authorization", "Bearer sekreT")
        .call();
    assert!(matches!(wrong, Err(ureq::Error::Status(401, _))));
    assert_eq!(s.ok("GET", "/v0/pipelines", None), json!([]));
}

#[test]
fn file_and_datagen_connectors() {
    let dir = scratch("connectors");
    // The input is read from the data directory's files/ folder (a
    // relative path), the output written to a folder allowed by --file-dir.
    let input = dir.join("data/files/in.csv");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    let output = dir.join("out.json");
    std::fs::write(&input, "1,a\n2,b\n").unwrap();
    let conn = |v: Value| v.to_string().replace('\'', "''");
    let sql = format!(
        "CREATE TABLE f (id INT, name VARCHAR) WITH ('connectors' = '{}');
         CREATE TABLE g (k BIGINT, w VARCHAR, z INT) WITH ('connectors' = '{}');
         CREATE VIEW names WITH ('connectors' = '{}') AS SELECT name FROM f;
         CREATE MATERIALIZED VIEW gs AS SELECT COUNT(*) AS n, COUNT(DISTINCT k) AS keys, MIN(z) AS lo, MAX(z) AS hi FROM g;",
        conn(json!([{"transport": {"name": "file_input", "config": {"path": "in.csv", "follow": true}}, "format": {"name": "csv"}}])),
        conn(json!([{"transport": {"name": "datagen", "config": {"plan": [{"limit": 500, "fields": {"w": {"values": ["x", "y"]}, "z": {"strategy": "uniform", "range": [10, 20]}}}]}}}])),
        conn(json!([{"transport": {"name": "file_output", "config": {"path": output}}, "format": {"name": "json"}}])),
    );
    let s = Server::start_with(
        &dir.join("data"),
        None,
        &["--file-dir", dir.to_str().unwrap()],
    );
    s.deploy("c", &sql);
    s.ok("POST", "/v0/pipelines/c/start", None);
    let read = || std::fs::read_to_string(&output).unwrap_or_default();
    wait_until("first file rows", || read().lines().count() == 2);
    // A followed file: appended lines arrive.
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .unwrap();
    f.write_all(b"3,c\n").unwrap();
    wait_until("appended row", || read().lines().count() == 3);
    let lines: Vec<Value> = read()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.contains(&json!({"insert": {"name": "c"}})));
    wait_until("datagen", || {
        s.query("c", "SELECT n FROM gs") == vec![json!({"n": 500})]
    });
    let g = &s.query("c", "SELECT keys, lo, hi FROM gs")[0];
    assert_eq!(g["keys"], 500);
    assert!(g["lo"].as_i64().unwrap() >= 10 && g["hi"].as_i64().unwrap() < 20);
    let stats = s.ok("GET", "/v0/pipelines/c/stats", None);
    let inputs = stats["inputs"].as_array().unwrap();
    let gen = inputs
        .iter()
        .find(|i| i["endpoint_name"] == "g.datagen-0")
        .unwrap();
    assert_eq!(gen["metrics"]["end_of_input"], true);
    // A bad connector is refused at definition time.
    let bad = "CREATE TABLE t (x INT) WITH ('connectors' = '[{\"transport\": {\"name\": \"file_output\", \"config\": {\"path\": \"/tmp/x\"}}}]');";
    s.deploy_refused("bad", bad, "cannot be used on a table");
}

/// Feldera's `raw` format: an HTTP body as one VARBINARY row, bytes and
/// all; each line of a file as a row of a named VARCHAR column, the
/// table's other column NULL; a line that is not UTF-8 rejected with its
/// line, the others kept; tables it does not fit refused at definition.
#[test]
fn raw_input_takes_bytes_as_they_arrive() {
    let dir = scratch("raw");
    let input = dir.join("files/lines.txt");
    std::fs::create_dir_all(input.parent().unwrap()).unwrap();
    std::fs::write(&input, b"first\n\nthird \xff\xfe\nfourth, \"quoted\"\nlast").unwrap();
    let conn = |v: Value| v.to_string().replace('\'', "''");
    let sql = format!(
        "CREATE TABLE blobs (data VARBINARY NOT NULL);
         CREATE MATERIALIZED VIEW hex AS SELECT TO_HEX(data) AS h, OCTET_LENGTH(data) AS n FROM blobs;
         CREATE TABLE texts (t VARCHAR) WITH ('materialized' = 'true');
         CREATE TABLE lines (id INT, line VARCHAR) WITH ('materialized' = 'true', 'connectors' = '{}');",
        conn(json!([{"transport": {"name": "file_input", "config": {"path": "lines.txt"}},
            "format": {"name": "raw", "config": {"mode": "lines", "column_name": "line"}}}])),
    );
    let s = Server::start(&dir, None);
    s.deploy("r", &sql);
    s.ok("POST", "/v0/pipelines/r/start", None);
    let (status, text) = s.send_bytes(
        "POST",
        "/v0/pipelines/r/ingress/blobs?format=raw",
        b"\x00\x01\xff\n{\"not\": \"json\"}\n",
    );
    assert_eq!(status, 200, "{text}");
    let (status, text) = s.send_bytes(
        "POST",
        "/v0/pipelines/r/ingress/texts?format=raw&mode=lines",
        b"hello\nworld\n",
    );
    assert_eq!(status, 200, "{text}");
    wait_until("the rows", || {
        s.query("r", "SELECT COUNT(*) AS n FROM lines") == vec![json!({"n": 4})]
            && s.query("r", "SELECT COUNT(*) AS n FROM texts") == vec![json!({"n": 2})]
    });
    assert_eq!(
        s.query("r", "SELECT h, n FROM hex"),
        vec![json!({"h": "0001ff0a7b226e6f74223a20226a736f6e227d0a", "n": 20})]
    );
    assert_eq!(
        sorted(s.query("r", "SELECT id, line FROM lines")),
        sorted(vec![
            json!({"id": null, "line": "first"}),
            json!({"id": null, "line": ""}),
            json!({"id": null, "line": "fourth, \"quoted\""}),
            json!({"id": null, "line": "last"}),
        ])
    );
    assert_eq!(
        sorted(s.query("r", "SELECT t FROM texts")),
        vec![json!({"t": "hello"}), json!({"t": "world"})]
    );
    let stats = s.ok("GET", "/v0/pipelines/r/stats", None);
    let file = stats["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["config"]["stream"] == "lines")
        .unwrap()
        .clone();
    assert_eq!(file["metrics"]["num_parse_errors"], 1, "{file}");
    let error = file["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("line 3") && error.contains("UTF-8"),
        "{file}"
    );
    // A body for a table it does not fit, and a mode that is no mode.
    let (status, text) = s.send_bytes("POST", "/v0/pipelines/r/ingress/lines?format=raw", b"x");
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("column_name"), "{text}");
    let (status, text) = s.send_bytes(
        "POST",
        "/v0/pipelines/r/ingress/texts?format=raw&mode=words",
        b"x",
    );
    assert_eq!(status, 400, "{text}");

    let refused = |table: &str, config: Value, why: &str| {
        let c = conn(
            json!([{"transport": {"name": "file_input", "config": {"path": "lines.txt"}},
            "format": {"name": "raw", "config": config}}]),
        );
        s.deploy_refused(
            "bad",
            &format!("CREATE TABLE t ({table}) WITH ('connectors' = '{c}');"),
            why,
        );
    };
    refused("a VARCHAR, b VARCHAR", json!({}), "column_name");
    refused(
        "a VARCHAR, b INT NOT NULL",
        json!({"column_name": "a"}),
        "NOT NULL",
    );
    refused("n INT", json!({}), "VARCHAR or VARBINARY");
    refused("a VARCHAR", json!({"mode": "words"}), "mode");
    let out = conn(
        json!([{"transport": {"name": "file_output", "config": {"path": "o.txt"}},
        "format": {"name": "raw"}}]),
    );
    s.deploy_refused(
        "bad",
        &format!("CREATE TABLE t (a VARCHAR); CREATE VIEW v WITH ('connectors' = '{out}') AS SELECT a FROM t;"),
        "raw",
    );
}

#[test]
fn sigterm_finishes_the_step_and_flushes_outputs() {
    let dir = scratch("sigterm");
    let output = dir.join("out.csv");
    let conn = json!([{"transport": {"name": "file_output", "config": {"path": output}}, "format": {"name": "csv"}}]).to_string();
    let mut s = Server::start_with(
        &dir.join("data"),
        None,
        &["--file-dir", dir.to_str().unwrap()],
    );
    s.deploy("p", &format!("CREATE TABLE t (x INT);\nCREATE VIEW v WITH ('connectors' = '{conn}') AS SELECT x + 1 AS y FROM t;"));
    s.ok("POST", "/v0/pipelines/p/start", None);
    s.ingest("p", "t", "format=csv", "1\n2\n");
    let status = s.terminate();
    assert!(status.success(), "{status:?}");
    let mut lines: Vec<String> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    assert_eq!(lines, vec!["2,1", "3,1"]);
}

#[test]
fn late_records_are_dropped_and_counted_in_stats_and_metrics() {
    let dir = scratch("lateness");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE bid (ts TIMESTAMP(3) NOT NULL LATENESS INTERVAL 4 SECONDS, price BIGINT);\n\
         CREATE MATERIALIZED VIEW w AS SELECT window_start, COUNT(*) AS n, MAX(price) AS hi\n\
           FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    let rows = |r: &[(&str, i64)]| {
        r.iter()
            .map(|(ts, p)| json!({"insert": {"ts": ts, "price": p}}).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let params = "format=json&update_format=insert_delete";
    s.ingest("p", "bid", params, &rows(&[("2024-01-01 10:00:12", 5)]));
    // 10:00:07 is more than 4 s behind 10:00:12: late. 10:00:09 is not.
    s.ingest(
        "p",
        "bid",
        params,
        &rows(&[("2024-01-01 10:00:07", 100), ("2024-01-01 10:00:09", 7)]),
    );
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(stats["late_records"]["bid"], 1, "{stats}");
    assert_eq!(stats["global_metrics"]["late_records"], 1, "{stats}");
    let (_, metrics) = s.send("GET", "/v0/pipelines/p/metrics", None);
    assert!(
        metrics.contains("eddy_late_records_total{pipeline=\"p\",relation=\"bid\"} 1"),
        "{metrics}"
    );
    let got = sorted(s.query("p", "SELECT n, hi FROM w"));
    assert_eq!(
        got,
        vec![json!({"n": 1, "hi": 5}), json!({"n": 1, "hi": 7})]
    );
}

/// A table declared `append_only` refuses deletions: they are counted in
/// `/stats` and the metrics, and the views (a top-k that keeps only its
/// first rows) see the insertions only.
#[test]
fn deletions_sent_to_an_append_only_table_are_refused_and_counted() {
    let dir = scratch("append-only");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE bid (auction BIGINT, price BIGINT) WITH ('append_only' = 'true');\n\
         CREATE MATERIALIZED VIEW top AS SELECT auction, price FROM (\n\
           SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS n FROM bid\n\
         ) WHERE n <= 2;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    let change = |op: &str, a: i64, p: i64| json!({op: {"auction": a, "price": p}}).to_string();
    s.ingest(
        "p",
        "bid",
        params,
        &[
            change("insert", 1, 5),
            change("insert", 1, 9),
            change("insert", 2, 3),
        ]
        .join("\n"),
    );
    // The deletion of the highest bid is refused; 7 enters the first two.
    s.ingest(
        "p",
        "bid",
        params,
        &[change("delete", 1, 9), change("insert", 1, 7)].join("\n"),
    );
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(stats["refused_deletions"]["bid"], 1, "{stats}");
    assert_eq!(stats["global_metrics"]["refused_deletions"], 1, "{stats}");
    let (_, metrics) = s.send("GET", "/v0/pipelines/p/metrics", None);
    assert!(
        metrics.contains("eddy_refused_deletions_total{pipeline=\"p\",relation=\"bid\"} 1"),
        "{metrics}"
    );
    let got = sorted(s.query("p", "SELECT auction, price FROM top"));
    assert_eq!(
        got,
        vec![
            json!({"auction": 1, "price": 7}),
            json!({"auction": 1, "price": 9}),
            json!({"auction": 2, "price": 3}),
        ]
    );
}

/// A table with a primary key deletes by key: a delete may give the key
/// alone, even when other columns are `NOT NULL` (Feldera's rule); an
/// insert still needs them, and a delete still needs the key.
#[test]
fn a_keyed_table_deletes_by_the_key_alone() {
    let dir = scratch("delete-by-key");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE item (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR NOT NULL, \
           price DECIMAL(10, 2) NOT NULL, at TIMESTAMP NOT NULL, tags VARCHAR ARRAY NOT NULL);\n\
         CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS n, SUM(price) AS total FROM item;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    let row = |id: i64| {
        json!({"insert": {"id": id, "name": format!("n{id}"), "price": 1.5, "at": "2024-01-01 00:00:00", "tags": ["a"]}}).to_string()
    };
    s.ingest("p", "item", params, &[row(1), row(2), row(3)].join("\n"));
    s.ingest("p", "item", params, r#"{"delete": {"id": 2}}"#);
    assert_eq!(
        s.query("p", "SELECT n, CAST(total AS VARCHAR) AS total FROM n"),
        vec![json!({"n": 2, "total": "3.00"})]
    );
    let (status, body) = s.send(
        "POST",
        "/v0/pipelines/p/ingress/item?format=json&update_format=insert_delete",
        Some("{\"insert\": {\"id\": 4}}\n{\"delete\": {\"name\": \"n1\"}}"),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("cannot be NULL"), "{body}");
    assert_eq!(s.query("p", "SELECT n FROM n"), vec![json!({"n": 2})]);
}

/// On a table with a primary key and a LATENESS on another column, a
/// delete that gives the key alone is never late: it retracts the key's
/// row, and its time (a placeholder) says nothing; an insertion below the
/// waterline still is late, and the deletion does not move the waterline.
#[test]
fn a_delete_by_key_is_never_late() {
    let dir = scratch("delete-by-key-late");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE ev (id BIGINT NOT NULL PRIMARY KEY, \
           at TIMESTAMP NOT NULL LATENESS INTERVAL 1 MINUTE, v BIGINT NOT NULL);\n\
         CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS n, SUM(v) AS total FROM ev;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    let row = |id: i64, at: &str| json!({"insert": {"id": id, "at": at, "v": id}}).to_string();
    s.ingest(
        "p",
        "ev",
        params,
        &[row(1, "2024-01-01 10:00:00"), row(2, "2024-01-01 10:05:00")].join("\n"),
    );
    s.ingest("p", "ev", params, r#"{"delete": {"id": 1}}"#);
    assert_eq!(
        s.query("p", "SELECT n, total FROM n"),
        vec![json!({"n": 1, "total": 2})]
    );
    // Below 10:04, the waterline: dropped and counted.
    s.ingest("p", "ev", params, &row(3, "2024-01-01 09:00:00"));
    // Within the lateness of 10:05.
    s.ingest("p", "ev", params, &row(4, "2024-01-01 10:04:30"));
    assert_eq!(
        s.query("p", "SELECT n, total FROM n"),
        vec![json!({"n": 2, "total": 6})]
    );
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(stats["global_metrics"]["late_records"], 1, "{stats}");
    assert_eq!(stats["late_records"]["ev"], 1, "{stats}");
}

/// `/stats` and the metrics report the state each operator keeps (and the
/// contents kept for each view), and the total is their sum.
#[test]
fn stats_report_the_state_of_each_operator() {
    let dir = scratch("state");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE bid (ts BIGINT NOT NULL LATENESS 10, auction BIGINT, price BIGINT);\n\
         CREATE MATERIALIZED VIEW w AS SELECT window_start, MAX(price) AS hi\n\
           FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), 10)) GROUP BY window_start;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    let batch = |from: i64| {
        (from..from + 100)
            .map(|t| json!({"insert": {"ts": t, "auction": t % 7, "price": t}}).to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    s.ingest("p", "bid", params, &batch(0));
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    let operators = stats["operators"].as_array().expect("operators").clone();
    let aggregate = operators
        .iter()
        .find(|o| o["operator"] == "aggregate")
        .unwrap_or_else(|| panic!("no aggregate in {stats}"));
    // MAX keeps the rows of each group: the 100 rows inserted.
    assert!(aggregate["entries"].as_u64().unwrap() >= 100, "{stats}");
    assert!(aggregate["memory_bytes"].as_u64().unwrap() > 0, "{stats}");
    assert!(
        operators
            .iter()
            .any(|o| o["operator"] == "view contents: w"),
        "{stats}"
    );
    let total = stats["global_metrics"]["state_memory_bytes"]
        .as_u64()
        .unwrap();
    let sum: u64 = operators
        .iter()
        .map(|o| o["memory_bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(total, sum, "{stats}");
    let (_, metrics) = s.send("GET", "/v0/pipelines/p/metrics", None);
    assert!(
        metrics.contains(&format!(
            "eddy_state_memory_bytes{{pipeline=\"p\"}} {total}"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("eddy_operator_state_memory_bytes{pipeline=\"p\",node="),
        "{metrics}"
    );
}

/// With storage whose threshold is 0, every merged state batch goes to a
/// file under the pipeline's storage folder: the views stay exactly right,
/// `/stats` and the metrics count the bytes on disk per operator, stopping
/// removes the files and `clear` the folder.
#[test]
fn state_batches_spill_to_the_pipelines_storage_folder() {
    let dir = scratch("spill");
    let s = Server::start(&dir, None);
    let body = json!({
        "name": "p",
        "program_code": "CREATE TABLE a (k BIGINT, x BIGINT);\n\
                         CREATE TABLE b (k BIGINT, y BIGINT);\n\
                         CREATE MATERIALIZED VIEW j AS SELECT a.k, COUNT(*) AS n, SUM(x + y) AS s FROM a JOIN b ON a.k = b.k GROUP BY a.k;",
        "runtime_config": {"storage": {"min_storage_bytes": 0, "cache_mib": 1}, "max_rss_mb": 100000},
    })
    .to_string();
    s.ok("PUT", "/v0/pipelines/p", Some(&body));
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    for round in 0..8i64 {
        let rows = |col: &str| {
            (0..50)
                .map(|i| json!({"insert": {"k": i % 10, col: round * 100 + i}}).to_string())
                .collect::<Vec<_>>()
                .join("\n")
        };
        s.ingest("p", "a", params, &rows("x"));
        s.ingest("p", "b", params, &rows("y"));
    }
    // 400 rows per side, 40 per key on each side: 1,600 pairs per key.
    let rows = s.query("p", "SELECT k, n, s FROM j ORDER BY k");
    assert_eq!(rows.len(), 10, "{rows:?}");
    for r in &rows {
        let k = r["k"].as_i64().unwrap();
        let side: i64 = (0..8)
            .flat_map(|round| (0..50).map(move |i| round * 100 + i))
            .filter(|v| v % 100 % 10 == k)
            .sum();
        assert_eq!(r["n"], 1600, "{r}");
        assert_eq!(r["s"].as_i64().unwrap(), 2 * 40 * side, "{r}");
    }
    let folder = dir.join("pipelines").join("p.storage");
    let files = || {
        std::fs::read_dir(&folder)
            .map(|d| {
                d.filter(|e| {
                    e.as_ref()
                        .unwrap()
                        .path()
                        .extension()
                        .is_some_and(|x| x == "batch")
                })
                .count()
            })
            .unwrap_or(0)
    };
    assert!(files() > 0, "no batch files in {}", folder.display());
    let mut filler = 1000;
    wait_until("stats that count the storage", || {
        // The operators are measured after a step, at most so often: step
        // on rows that join nothing until a measure sees the files.
        filler += 1;
        s.ingest(
            "p",
            "a",
            params,
            &json!({"insert": {"k": filler, "x": 0}}).to_string(),
        );
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        let on_disk = stats["global_metrics"]["storage_bytes"].as_u64().unwrap();
        let per_operator: u64 = stats["operators"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["storage_bytes"].as_u64().unwrap())
            .sum();
        on_disk > 0 && per_operator > 0 && per_operator <= on_disk
    });
    // The join's lookups read the files through a block cache of the size
    // asked for.
    let global = &s.ok("GET", "/v0/pipelines/p/stats", None)["global_metrics"];
    assert_eq!(global["storage_cache_capacity_bytes"], 1 << 20, "{global}");
    let cached = global["storage_cache_bytes"].as_u64().unwrap();
    assert!(cached > 0 && cached <= 1 << 20, "{global}");
    assert!(
        global["storage_cache_misses"].as_u64().unwrap() > 0,
        "{global}"
    );
    let (_, metrics) = s.send("GET", "/v0/pipelines/p/metrics", None);
    for metric in ["eddy_storage_bytes", "eddy_storage_cache_hits_total"] {
        assert!(
            metrics.contains(&format!("{metric}{{pipeline=\"p\"}} ")),
            "{metrics}"
        );
    }
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
    wait_until("the batch files to go", || files() == 0);
    s.ok("POST", "/v0/pipelines/p/clear", None);
    assert!(!folder.exists());
    // Storage off: no folder at all.
    let body = json!({"runtime_config": {"storage": false}}).to_string();
    s.ok("PATCH", "/v0/pipelines/p", Some(&body));
    s.ok("POST", "/v0/pipelines/p/start", None);
    s.ingest(
        "p",
        "a",
        params,
        &json!({"insert": {"k": 1, "x": 1}}).to_string(),
    );
    assert!(!folder.exists());
    let (status, _) = s.send(
        "PATCH",
        "/v0/pipelines/p",
        Some(&json!({"runtime_config": {"storage": 3}}).to_string()),
    );
    assert_eq!(status, 400);
}

#[test]
fn views_bounded_by_now_change_as_time_passes_without_input() {
    let dir = scratch("now");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE ev (ts TIMESTAMP(3), v BIGINT);\n\
         CREATE MATERIALIZED VIEW recent AS SELECT v FROM ev WHERE ts >= NOW() - INTERVAL '2' SECOND;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    // The current time, as the server's clock reads it: milliseconds.
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let body = [(now_ms + 500, 1), (now_ms - 60_000, 2)]
        .iter()
        .map(|(ts, v)| json!({"insert": {"ts": ts, "v": v}}).to_string())
        .collect::<Vec<_>>()
        .join("\n");
    s.ingest("p", "ev", "format=json&update_format=insert_delete", &body);
    // The old row is outside at once; the new one leaves about two seconds
    // later, with no input in between.
    assert_eq!(s.query("p", "SELECT v FROM recent"), vec![json!({"v": 1})]);
    wait_until("the row to age out of the view", || {
        s.query("p", "SELECT v FROM recent").is_empty()
    });
}

/// Stops a pipeline (`query`: "" or "?force=true") and waits until it has.
fn stop_and_wait(s: &Server, name: &str, query: &str) {
    s.ok("POST", &format!("/v0/pipelines/{name}/stop{query}"), None);
    wait_until("stopped", || {
        s.ok("GET", &format!("/v0/pipelines/{name}"), None)["deployment_status"] == "Stopped"
    });
}

/// Checkpoints: `POST /checkpoint` and a graceful stop write one; `start`
/// resumes from the latest, also after the server is killed; `clear`
/// forgets it.
#[test]
fn a_pipeline_resumes_from_its_last_checkpoint() {
    let dir = scratch("checkpoint");
    let mut s = Server::start(&dir, None);
    let body = json!({
        "name": "p",
        "program_code": "CREATE TABLE t (k BIGINT, x BIGINT) WITH ('materialized' = 'true');\n\
                         CREATE MATERIALIZED VIEW v AS SELECT k, COUNT(DISTINCT x) AS d, SUM(x) AS s FROM t GROUP BY k;",
        "runtime_config": {"storage": {"min_storage_bytes": 0}},
    })
    .to_string();
    s.ok("PUT", "/v0/pipelines/p", Some(&body));
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    let mut rows: Vec<(i64, i64)> = Vec::new();
    let feed = |s: &Server, rows: &mut Vec<(i64, i64)>, from: i64| {
        let batch: Vec<(i64, i64)> = (from..from + 30).map(|i| (i % 4, i)).collect();
        let text: Vec<String> = batch
            .iter()
            .map(|(k, x)| json!({"insert": {"k": k, "x": x}}).to_string())
            .collect();
        s.ingest("p", "t", params, &text.join("\n"));
        rows.extend(batch);
    };
    let expected = |rows: &[(i64, i64)]| -> Vec<Value> {
        (0..4)
            .filter(|k| rows.iter().any(|r| r.0 == *k))
            .map(|k| {
                let xs: Vec<i64> = rows.iter().filter(|r| r.0 == k).map(|r| r.1).collect();
                json!({"k": k, "d": xs.len(), "s": xs.iter().sum::<i64>()})
            })
            .collect()
    };
    let view = |s: &Server| s.query("p", "SELECT k, d, s FROM v ORDER BY k");
    feed(&s, &mut rows, 0);
    let n = s.ok("POST", "/v0/pipelines/p/checkpoint", None)["checkpoint_sequence_number"]
        .as_u64()
        .unwrap();
    assert_eq!(n, 1);
    let status = s.ok("GET", "/v0/pipelines/p/checkpoint_status", None);
    assert_eq!(status, json!({"success": 1, "failure": null}));
    feed(&s, &mut rows, 100);
    // A graceful stop writes checkpoint 2; start resumes from it.
    stop_and_wait(&s, "p", "");
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert_eq!(p["storage_status"], "InUse", "{p}");
    s.ok("POST", "/v0/pipelines/p/start", None);
    assert_eq!(
        s.ok("GET", "/v0/pipelines/p", None)["checkpoint_resumed"],
        2
    );
    assert_eq!(view(&s), expected(&rows));
    assert_eq!(
        s.query("p", "SELECT COUNT(*) AS n FROM t"),
        vec![json!({"n": 60})]
    );
    // The resumed state is incremental state: new input builds on it.
    feed(&s, &mut rows, 200);
    assert_eq!(view(&s), expected(&rows));
    s.ok("POST", "/v0/pipelines/p/checkpoint", None);
    // Killed (SIGKILL): what came after checkpoint 3 is lost, the rest is
    // resumed by the next server.
    let kept = rows.clone();
    feed(&s, &mut rows, 300);
    drop(s);
    s = Server::start(&dir, None);
    // It was running: the new server started it again, from checkpoint 3.
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert_eq!(p["storage_status"], "InUse", "{p}");
    assert_eq!(p["deployment_status"], "Running", "{p}");
    assert_eq!(
        s.ok("GET", "/v0/pipelines/p", None)["checkpoint_resumed"],
        3
    );
    assert_eq!(view(&s), expected(&kept));
    // Clear forgets the state.
    stop_and_wait(&s, "p", "?force=true");
    s.ok("POST", "/v0/pipelines/p/clear", None);
    assert_eq!(
        s.ok("GET", "/v0/pipelines/p", None)["storage_status"],
        "Cleared"
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    assert_eq!(view(&s), Vec::<Value>::new());
    // Without storage there is nothing to checkpoint into.
    stop_and_wait(&s, "p", "?force=true");
    let off = json!({"runtime_config": {"storage": false}}).to_string();
    s.ok("PATCH", "/v0/pipelines/p", Some(&off));
    s.ok("POST", "/v0/pipelines/p/start", None);
    let (status, _) = s.send("POST", "/v0/pipelines/p/checkpoint", None);
    assert_eq!(status, 400);
}

/// `runtime_config.workers` splits each keyed operator's state over that
/// many shards: the answers are those of one worker, the stats say so, and
/// a checkpoint resumes with the same number or re-split over another.
#[test]
fn a_pipeline_runs_on_several_workers() {
    let dir = scratch("workers");
    let s = Server::start(&dir, None);
    let program = "CREATE TABLE t (k BIGINT, x BIGINT);\n\
                   CREATE TABLE u (k BIGINT PRIMARY KEY, name VARCHAR);\n\
                   CREATE MATERIALIZED VIEW g AS SELECT k, COUNT(DISTINCT x) AS d, SUM(x) AS s FROM t GROUP BY k;\n\
                   CREATE MATERIALIZED VIEW j AS SELECT u.name, t.x FROM t JOIN u ON t.k = u.k;";
    let body = |workers: u64| {
        json!({
            "name": "w",
            "program_code": program,
            "runtime_config": {"workers": workers, "storage": {"min_storage_bytes": 0}},
        })
        .to_string()
    };
    let (status, text) = s.send("PUT", "/v0/pipelines/w", Some(&body(1000)));
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("at most 64 workers"), "{text}");
    s.ok("PUT", "/v0/pipelines/w", Some(&body(3)));
    s.ok("POST", "/v0/pipelines/w/start", None);
    let params = "format=json&update_format=insert_delete";
    let names: Vec<String> = (0..20)
        .map(|k| json!({"insert": {"k": k, "name": format!("n{k}")}}).to_string())
        .collect();
    s.ingest("w", "u", params, &names.join("\n"));
    let rows: Vec<(i64, i64)> = (0..500).map(|i| (i % 20, i % 37)).collect();
    let text: Vec<String> = rows
        .iter()
        .map(|(k, x)| json!({"insert": {"k": k, "x": x}}).to_string())
        .collect();
    s.ingest("w", "t", params, &text.join("\n"));
    // Renaming key 3 retracts its old name from the join.
    let rename = json!({"insert": {"k": 3, "name": "three"}}).to_string();
    s.ingest("w", "u", params, &rename);
    // The views' rows (j's grouped by name) over the rows of t.
    let expected_g = |rows: &[(i64, i64)]| -> Vec<Value> {
        (0..23)
            .filter_map(|k| {
                let xs: Vec<i64> = rows.iter().filter(|r| r.0 == k).map(|r| r.1).collect();
                let distinct: std::collections::BTreeSet<i64> = xs.iter().copied().collect();
                (!xs.is_empty())
                    .then(|| json!({"k": k, "d": distinct.len(), "s": xs.iter().sum::<i64>()}))
            })
            .collect()
    };
    let expected_j = |rows: &[(i64, i64)]| -> Vec<Value> {
        let mut by_name: Vec<(String, i64, i64)> = (0..20)
            .filter_map(|k| {
                let name = match k {
                    3 => "three".to_string(),
                    k => format!("n{k}"),
                };
                let xs: Vec<i64> = rows.iter().filter(|r| r.0 == k).map(|r| r.1).collect();
                (!xs.is_empty()).then(|| (name, xs.len() as i64, xs.iter().sum()))
            })
            .collect();
        by_name.sort();
        by_name
            .into_iter()
            .map(|(name, n, s)| json!({"name": name, "n": n, "s": s}))
            .collect()
    };
    let j = |s: &Server| {
        s.query(
            "w",
            "SELECT name, COUNT(*) AS n, SUM(x) AS s FROM j GROUP BY name ORDER BY name",
        )
    };
    let g = |s: &Server| s.query("w", "SELECT k, d, s FROM g ORDER BY k");
    // A table with a primary key is queried from its upsert's state (split
    // over the workers), without being declared materialized.
    let names: Vec<Value> = (0..20)
        .map(|k| match k {
            3 => json!({"k": 3, "name": "three"}),
            k => json!({"k": k, "name": format!("n{k}")}),
        })
        .collect();
    let u = |s: &Server| s.query("w", "SELECT k, name FROM u ORDER BY k");
    assert_eq!(g(&s), expected_g(&rows));
    assert_eq!(u(&s), names);
    assert_eq!(j(&s), expected_j(&rows));
    // Stopped (a checkpoint), started again: the same state, three ways.
    stop_and_wait(&s, "w", "");
    s.ok("POST", "/v0/pipelines/w/start", None);
    assert_eq!(g(&s), expected_g(&rows));
    // The first step of a run measures the state: the keyed operators
    // are split three ways (a row inserted and deleted makes a step).
    let noop = [
        json!({"insert": {"k": 1, "x": 1}}).to_string(),
        json!({"delete": {"k": 1, "x": 1}}).to_string(),
    ];
    s.ingest("w", "t", params, &noop.join("\n"));
    let stats = s.ok("GET", "/v0/pipelines/w/stats", None);
    let shards: Vec<(String, u64)> = stats["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["operator"].as_str().unwrap().to_string(),
                o["shards"].as_u64().unwrap(),
            )
        })
        .collect();
    for op in ["upsert", "join", "aggregate"] {
        assert!(shards.contains(&(op.to_string(), 3)), "{op}: {shards:?}");
    }
    assert_eq!(g(&s), expected_g(&rows));
    stop_and_wait(&s, "w", "");
    // Another number of workers re-splits that state (4, then 1): the
    // views are as they were, and later changes update them as one
    // worker would.
    let mut rows = rows;
    for (round, workers) in [4u64, 1].into_iter().enumerate() {
        let more =
            json!({"runtime_config": {"workers": workers, "storage": {"min_storage_bytes": 0}}});
        s.ok("PATCH", "/v0/pipelines/w", Some(&more.to_string()));
        s.ok("POST", "/v0/pipelines/w/start", None);
        assert_eq!(g(&s), expected_g(&rows), "{workers} workers");
        // Delete a few of the rows, insert others.
        let gone: Vec<(i64, i64)> = rows.drain(..40).collect();
        let new: Vec<(i64, i64)> = (0..60)
            .map(|i| ((i * 7 + round as i64) % 23, i % 11))
            .collect();
        let text: Vec<String> = gone
            .iter()
            .map(|(k, x)| json!({"delete": {"k": k, "x": x}}).to_string())
            .chain(
                new.iter()
                    .map(|(k, x)| json!({"insert": {"k": k, "x": x}}).to_string()),
            )
            .collect();
        s.ingest("w", "t", params, &text.join("\n"));
        rows.extend(new);
        assert_eq!(g(&s), expected_g(&rows), "{workers} workers, after changes");
        assert_eq!(j(&s), expected_j(&rows), "{workers} workers");
        assert_eq!(u(&s), names, "{workers} workers");
        let stats = s.ok("GET", "/v0/pipelines/w/stats", None);
        let shards: Vec<&Value> = stats["operators"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|o| ["upsert", "join", "aggregate"].contains(&o["operator"].as_str().unwrap()))
            .map(|o| &o["shards"])
            .collect();
        assert!(
            shards.len() >= 3 && shards.iter().all(|&n| n == workers),
            "{shards:?}"
        );
        stop_and_wait(&s, "w", "");
    }
    // Cleared, it starts afresh.
    s.ok("POST", "/v0/pipelines/w/clear", None);
    s.ok("POST", "/v0/pipelines/w/start", None);
    assert_eq!(g(&s), Vec::<Value>::new());
}

/// `eddy health` (the container's probe) answers 0 for a running server,
/// API key or not, and 1 where nothing listens.
#[test]
fn health_probe() {
    let dir = scratch("health");
    let s = Server::start(&dir, Some("secret"));
    let probe = |url: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_eddy"))
            .args(["health", "--url", url, "--timeout-secs", "5"])
            .output()
            .unwrap()
    };
    let up = probe(&s.url);
    assert!(up.status.success(), "{up:?}");
    assert!(String::from_utf8_lossy(&up.stdout).contains("healthy"));
    let down = probe(&format!("http://127.0.0.1:{}", common::free_port()));
    assert_eq!(down.status.code(), Some(1), "{down:?}");
}

/// JSON answers keep the view's column order (not sorted by name): ad-hoc
/// queries and egress alike.
#[test]
fn json_keeps_column_order() {
    let dir = scratch("order");
    let s = Server::start(&dir, None);
    s.deploy(
        "o",
        "CREATE TABLE t (zeta INT, alpha VARCHAR, mid INT) WITH ('materialized' = 'true');
         CREATE MATERIALIZED VIEW v AS SELECT zeta, alpha, mid FROM t;",
    );
    s.ok("POST", "/v0/pipelines/o/start", None);
    let rx = s.egress("o", "v", "format=json");
    s.ingest(
        "o",
        "t",
        "format=json",
        r#"{"insert": {"mid": 3, "alpha": "a", "zeta": 1}}"#,
    );
    let (status, text) = s.send(
        "GET",
        &format!(
            "/v0/pipelines/o/query?format=json&sql={}",
            common::encode("SELECT * FROM v")
        ),
        None,
    );
    assert_eq!(status, 200, "{text}");
    assert_eq!(text.trim(), r#"{"zeta":1,"alpha":"a","mid":3}"#);
    let change = collect_changes(&rx, 1);
    assert_eq!(
        change[0].to_string(),
        r#"{"insert":{"zeta":1,"alpha":"a","mid":3}}"#
    );
}

/// Parquet round trip: a view's contents leave as a Parquet file (an
/// ad-hoc query with `format=parquet`) and feed another pipeline's table
/// through `file_input` with the `parquet` format, columns matched by name
/// and cast to the table's types; a stop and start resumes after the rows
/// read; a file that is not Parquet is an error of its connector.
#[test]
fn parquet_files_feed_tables() {
    let dir = scratch("parquet");
    let s = Server::start(&dir.join("data"), None);
    s.deploy(
        "src",
        "CREATE TABLE t (id BIGINT, name VARCHAR, score DOUBLE) WITH ('materialized' = 'true');",
    );
    s.ok("POST", "/v0/pipelines/src/start", None);
    let rows: Vec<String> = (0..20_000)
        .map(|i| {
            json!({"insert": {"id": i, "name": format!("n{}", i % 7), "score": i as f64 / 4.0}})
                .to_string()
        })
        .collect();
    s.ingest("src", "t", "format=json", &rows.join("\n"));
    let resp = ureq::get(&format!(
        "{}/v0/pipelines/src/query?sql={}&format=parquet",
        s.url,
        encode("SELECT name AS \"NAME\", id, score FROM t")
    ))
    .call()
    .unwrap();
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut resp.into_reader(), &mut bytes).unwrap();
    let files = dir.join("data/files");
    std::fs::create_dir_all(&files).unwrap();
    std::fs::write(files.join("t.parquet"), &bytes).unwrap();
    std::fs::write(files.join("not.parquet"), b"id,name\n1,a\n").unwrap();

    let conn = |path: &str| {
        json!([{"transport": {"name": "file_input", "config": {"path": path}}, "format": {"name": "parquet"}}])
            .to_string()
    };
    s.deploy(
        "dst",
        &format!(
            "CREATE TABLE u (id INT NOT NULL, name VARCHAR, score DECIMAL(10, 2), missing VARCHAR)
               WITH ('materialized' = 'true', 'connectors' = '{}');
             CREATE TABLE bad (id INT) WITH ('connectors' = '{}');
             CREATE MATERIALIZED VIEW per_name AS
               SELECT name, COUNT(*) AS n, SUM(score) AS total, COUNT(missing) AS m FROM u GROUP BY name;",
            conn("t.parquet"),
            conn("not.parquet"),
        ),
    );
    s.ok("POST", "/v0/pipelines/dst/start", None);
    let expected: Vec<Value> = (0..7)
        .map(|k| {
            let ids = (0..20_000i64).filter(|i| i % 7 == k);
            let total: f64 = ids.clone().map(|i| i as f64 / 4.0).sum();
            json!({"name": format!("n{k}"), "n": ids.count(), "total": format!("{total:.2}"), "m": 0})
        })
        .collect();
    let per_name = || {
        s.query(
            "dst",
            "SELECT name, n, CAST(total AS VARCHAR) AS total, m FROM per_name ORDER BY name",
        )
    };
    wait_until("the Parquet rows", || per_name() == expected);
    let stats = s.ok("GET", "/v0/pipelines/dst/stats", None);
    let input = |name: &str| {
        stats["inputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["endpoint_name"].as_str().unwrap().starts_with(name))
            .unwrap()
            .clone()
    };
    assert_eq!(input("u.")["metrics"]["total_records"], 20_000, "{stats}");
    let bad = input("bad.");
    assert!(
        bad["metrics"]["num_transport_errors"].as_u64().unwrap() > 0,
        "{bad}"
    );
    // Stopped and started again, the input resumes after the rows its
    // checkpoint holds: nothing is read twice.
    s.ok("POST", "/v0/pipelines/dst/stop", None);
    s.ok("POST", "/v0/pipelines/dst/start", None);
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(per_name(), expected);
    s.ok("POST", "/v0/pipelines/dst/stop?force=true", None);
    s.ok("POST", "/v0/pipelines/src/stop?force=true", None);
}

/// Parquet out and back in: a view's changes leave through `file_output`
/// with the `parquet` format, one file per step in a folder with each
/// row's weight in `__weight`; a stop and start keeps the files and adds no
/// duplicate; the files feed another pipeline's table through
/// `file_input`, where summing `__weight` gives back the view's contents.
#[test]
fn a_view_leaves_as_parquet_files_that_feed_a_table_back() {
    let dir = scratch("parquet-out");
    let s = Server::start(&dir.join("data"), None);
    let out = json!([{"transport": {"name": "file_output", "config": {"path": "v_parquet"}},
                      "format": {"name": "parquet"}}]);
    s.deploy(
        "out",
        &format!(
            "CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, amount DECIMAL(10, 2), d DATE);
             CREATE MATERIALIZED VIEW v WITH ('connectors' = '{out}') AS
               SELECT id, name, amount, d FROM t WHERE amount > 0;"
        ),
    );
    std::fs::create_dir_all(dir.join("data/files")).unwrap();
    s.ok("POST", "/v0/pipelines/out/start", None);
    let step = |body: &str| {
        let answer = s.ingest("out", "t", "format=json", body);
        s.wait_token("out", answer["token"].as_str().unwrap());
    };
    step(
        r#"{"insert": {"id": 1, "name": "ann", "amount": 12.5, "d": "2024-01-02"}}
{"insert": {"id": 2, "name": "bob", "amount": 3, "d": null}}
{"insert": {"id": 3, "name": "cy", "amount": -1, "d": "2024-02-03"}}"#,
    );
    // An update (1's amount) and a delete (2).
    step(
        r#"{"insert": {"id": 1, "name": "ann", "amount": 7.25, "d": "2024-01-02"}}
{"delete": {"id": 2}}"#,
    );
    let folder = dir.join("data/files/v_parquet");
    let names = || {
        let mut n: Vec<String> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(), ["00000001.parquet", "00000002.parquet"]);
    // Stopped (a checkpoint) and started again: the files stay, none is
    // written twice, and the next step adds the third.
    s.ok("POST", "/v0/pipelines/out/stop", None);
    s.ok("POST", "/v0/pipelines/out/start", None);
    step(r#"{"insert": {"id": 4, "name": "dee", "amount": 1, "d": "2025-05-05"}}"#);
    assert_eq!(
        names(),
        ["00000001.parquet", "00000002.parquet", "00000003.parquet"]
    );

    let conn = |n: u32| {
        json!({"transport": {"name": "file_input",
                              "config": {"path": format!("v_parquet/{n:08}.parquet")}},
               "format": {"name": "parquet"}})
    };
    let back = json!([conn(1), conn(2), conn(3)]);
    s.deploy(
        "back",
        &format!(
            "CREATE TABLE changes (id BIGINT, name VARCHAR, amount DECIMAL(10, 2), d DATE, __weight BIGINT)
               WITH ('connectors' = '{back}');
             CREATE MATERIALIZED VIEW contents AS
               SELECT id, name, CAST(amount AS VARCHAR) AS amount, CAST(d AS VARCHAR) AS d
               FROM changes GROUP BY id, name, amount, d HAVING SUM(__weight) = 1;"
        ),
    );
    s.ok("POST", "/v0/pipelines/back/start", None);
    let expected = vec![
        json!({"id": 1, "name": "ann", "amount": "7.25", "d": "2024-01-02"}),
        json!({"id": 4, "name": "dee", "amount": "1.00", "d": "2025-05-05"}),
    ];
    wait_until("the Parquet changes to add up", || {
        s.query("back", "SELECT * FROM contents ORDER BY id") == expected
    });
    assert_eq!(
        s.query(
            "out",
            "SELECT id, name, CAST(amount AS VARCHAR) AS amount, CAST(d AS VARCHAR) AS d FROM v ORDER BY id"
        ),
        expected
    );
    s.ok("POST", "/v0/pipelines/back/stop?force=true", None);
    s.ok("POST", "/v0/pipelines/out/stop?force=true", None);
}

/// An egress stream without backpressure drops what a client that does not
/// read cannot take, counts it, and then says so: the next line the client
/// gets is `{"dropped":true}`, before the changes that follow.
#[test]
fn an_egress_stream_without_backpressure_says_when_it_dropped_chunks() {
    use std::io::{Read, Write};
    let dir = scratch("egress-drop");
    let s = Server::start(&dir, None).owning(dir);
    s.deploy(
        "p",
        "CREATE TABLE t (id BIGINT, s VARCHAR); CREATE VIEW v AS SELECT id, s FROM t;",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    // A client that opens the stream and reads nothing for now.
    let address = s.url.strip_prefix("http://").unwrap();
    let mut socket = std::net::TcpStream::connect(address).unwrap();
    write!(
        socket,
        "POST /v0/pipelines/p/egress/v?format=json&backpressure=false HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let egress = |s: &Server| {
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        stats["outputs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| {
                o["endpoint_name"]
                    .as_str()
                    .unwrap()
                    .starts_with("api-egress")
            })
            .map(|o| o["metrics"]["dropped_records"].as_u64().unwrap())
    };
    wait_until("the stream to open", || egress(&s).is_some());
    // Steps of about 1 MB each until the stream's buffer and the socket's
    // are full and chunks are dropped.
    let filler = "x".repeat(500);
    let mut id = 0;
    while egress(&s) == Some(0) {
        assert!(id < 400_000, "nothing was dropped");
        let body: Vec<String> = (0..2000)
            .map(|_| {
                id += 1;
                json!({"insert": {"id": id, "s": filler}}).to_string()
            })
            .collect();
        s.ingest("p", "t", "format=json", &body.join("\n"));
    }
    // The client reads again; the next step's change comes after the notice.
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let mut reader = socket.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut buf = vec![0; 1 << 16];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let find = |seen: &[u8], what: &[u8]| seen.windows(what.len()).position(|w| w == what);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut sent_last = false;
    loop {
        while let Ok(bytes) = rx.recv_timeout(std::time::Duration::from_millis(200)) {
            seen.extend(bytes);
        }
        if !sent_last {
            s.ingest(
                "p",
                "t",
                "format=json",
                r#"{"insert": {"id": -1, "s": "last"}}"#,
            );
            sent_last = true;
            continue;
        }
        if let (Some(notice), Some(last)) = (
            find(&seen, b"{\"dropped\":true}"),
            find(&seen, b"\"s\":\"last\""),
        ) {
            assert!(notice < last, "the notice comes before the next change");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no dropped notice followed by the last change in {} bytes",
            seen.len()
        );
    }
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
}

#[test]
fn a_failing_step_fails_the_pipeline_visibly_and_applies_nothing() {
    let dir = scratch("failing-step");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE t (x TINYINT, y TINYINT);\n\
         CREATE MATERIALIZED VIEW total AS SELECT COUNT(*) AS n FROM t;\n\
         CREATE MATERIALIZED VIEW sums AS SELECT x + y AS s FROM t;\n\
         CREATE MATERIALIZED VIEW constant AS VALUES (1), (2);",
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    // The first step is taken at start: the constant view is filled
    // without input.
    wait_until("the constant view", || {
        s.query("p", "SELECT * FROM constant").len() == 2
    });
    let stream = s.egress("p", "sums", "format=json");
    s.ingest("p", "t", "format=csv", "1,2\n3,4\n");
    assert_eq!(s.query("p", "SELECT n FROM total"), vec![json!({"n": 2})]);
    let mut first = collect_changes(&stream, 2);
    first.sort_by_key(|c| c["insert"]["s"].as_i64());
    assert_eq!(
        first,
        vec![json!({"insert": {"s": 3}}), json!({"insert": {"s": 7}})]
    );
    // 120 + 100 overflows a TINYINT: the step fails, as in Feldera.
    let v = s.ok(
        "POST",
        "/v0/pipelines/p/ingress/t?format=csv",
        Some("120,100\n5,6\n"),
    );
    let token = v["token"].as_str().unwrap().to_string();
    wait_until("the pipeline to fail", || {
        !s.ok("GET", "/v0/pipelines/p", None)["deployment_error"].is_null()
    });
    let d = s.ok("GET", "/v0/pipelines/p", None);
    let error = d["deployment_error"]["message"].as_str().unwrap();
    assert!(
        error.contains("'120 + 100' causes overflow for type TINYINT"),
        "{d}"
    );
    // Its input is never reported processed, and nothing of the step
    // (not even the row 5 + 6 that did not fail) reached the stream.
    let (status, text) = s.send(
        "GET",
        &format!("/v0/pipelines/p/completion_status?token={token}"),
        None,
    );
    assert!(!text.contains("\"complete\""), "{status} {text}");
    let later: Vec<Value> = stream.try_iter().collect();
    assert!(
        later.iter().all(|c| !c.to_string().contains("11")),
        "{later:?}"
    );
    // The server-wide metrics say it failed.
    let (_, metrics) = s.send("GET", "/v0/metrics", None);
    assert!(
        metrics.contains("eddy_pipeline_status{pipeline=\"p\",status=\"Failed\"} 1\n")
            && metrics.contains("eddy_pipeline_status{pipeline=\"p\",status=\"Running\"} 0\n"),
        "{metrics}"
    );
}

/// `GET /circuit`: every node of a running pipeline's circuit, what it
/// reads, the table or view it belongs to, and what it has cost: the rows
/// that went through it, the time it took and the state it keeps.
#[test]
fn the_circuit_shows_each_node_its_owner_and_its_costs() {
    let dir = scratch("circuit");
    let s = Server::start(&dir, None);
    s.deploy(
        "p",
        "CREATE TABLE orders (id BIGINT, customer VARCHAR, amount BIGINT);\n\
         CREATE MATERIALIZED VIEW totals AS SELECT customer, SUM(amount) AS total\n\
           FROM orders GROUP BY customer;\n\
         CREATE VIEW big AS SELECT id FROM orders WHERE amount > 50;",
    );
    let (status, _) = s.send("GET", "/v0/pipelines/p/circuit", None);
    assert_eq!(status, 400, "a stopped pipeline has no circuit");
    s.ok("POST", "/v0/pipelines/p/start", None);
    let rows: Vec<String> = (0..100)
        .map(|i| {
            json!({"insert": {"id": i, "customer": format!("c{}", i % 10), "amount": i}})
                .to_string()
        })
        .collect();
    s.ingest(
        "p",
        "orders",
        "format=json&update_format=insert_delete",
        &rows.join("\n"),
    );
    let mut circuit = Value::Null;
    wait_until("the circuit measured after the rows", || {
        circuit = s.ok("GET", "/v0/pipelines/p/circuit", None);
        circuit["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["operator"] == "input" && n["rows_out"] == 100)
    });
    let nodes = circuit["nodes"].as_array().unwrap();
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n["id"], i, "{circuit}");
        // A node reads only earlier ones.
        assert!(
            n["inputs"]
                .as_array()
                .unwrap()
                .iter()
                .all(|j| j.as_u64().unwrap() < i as u64),
            "{circuit}"
        );
    }
    let input = nodes.iter().find(|n| n["operator"] == "input").unwrap();
    assert_eq!(input["relation"], "orders", "{circuit}");
    let aggregate = nodes
        .iter()
        .find(|n| n["operator"] == "aggregate")
        .unwrap_or_else(|| panic!("no aggregate in {circuit}"));
    assert_eq!(aggregate["relation"], "totals", "{circuit}");
    assert_eq!(aggregate["rows_in"], 100, "{circuit}");
    // Ten groups (more rows out if the rows came in several steps).
    assert!(aggregate["rows_out"].as_u64().unwrap() >= 10, "{circuit}");
    assert!(aggregate["evaluations"].as_u64().unwrap() >= 1, "{circuit}");
    assert!(aggregate["memory_bytes"].as_u64().unwrap() > 0, "{circuit}");
    // The filter of `big` passed the 49 rows over 50.
    let filter = nodes
        .iter()
        .find(|n| n["relation"] == "big" && n["rows_in"] == 100 && n["rows_out"] == 49);
    assert!(filter.is_some(), "{circuit}");
    // Time was spent, and is counted.
    let micros: u64 = nodes
        .iter()
        .map(|n| n["time_micros"].as_u64().unwrap())
        .sum();
    assert!(micros > 0, "{circuit}");
    assert!(circuit["steps"].as_u64().unwrap() >= 1, "{circuit}");
}
