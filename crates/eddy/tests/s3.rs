//! Object storage connectors against a real S3 server: moto's (PyPI,
//! installed by `scripts/test-tools.sh` under ~/.cache/eddy), started on a
//! free loopback port and stopped with the test. The tests drive it over
//! S3's REST API as any client would (moto does not check signatures).

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::moto::Moto;
use common::{scratch, wait_until, Server};
use serde_json::{json, Value};

fn config(base: &Value, more: Value) -> Value {
    let mut c = base.clone();
    for (k, v) in more.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// Orders `ids`, one `insert_delete` JSON line each.
fn orders(ids: std::ops::RangeInclusive<i64>) -> Vec<u8> {
    ids.map(|id| format!("{}\n", json!({"insert": {"id": id, "amount": id * 10}})))
        .collect::<String>()
        .into_bytes()
}

/// The rows of a view written as JSON change objects: each row with the
/// sum of its weights, those summing to zero left out.
fn rows_of(moto: &Moto, bucket: &str, prefix: &str) -> BTreeMap<String, i64> {
    let mut rows: BTreeMap<String, i64> = BTreeMap::new();
    for key in moto.list(bucket, prefix) {
        let text = String::from_utf8(moto.get(bucket, &key)).unwrap();
        for line in text.lines() {
            let change: Value = serde_json::from_str(line).unwrap();
            let (row, w) = match (change.get("insert"), change.get("delete")) {
                (Some(r), _) => (r, 1),
                (_, Some(r)) => (r, -1),
                _ => panic!("not a change: {line}"),
            };
            *rows.entry(row.to_string()).or_default() += w;
        }
    }
    rows.retain(|_, w| *w != 0);
    rows
}

fn totals(s: &Server) -> Value {
    s.query("o", "SELECT n, total FROM totals")
        .into_iter()
        .next()
        .unwrap_or(Value::Null)
}

/// A new user's flow: a bucket of JSON objects feeds a table (a bad line
/// among them reported with its place), a view's changes leave as objects,
/// new objects are followed, and the server is killed (SIGKILL) and
/// restarted over and over while objects keep coming: the view ends with
/// every order once, and the output objects sum to exactly the view.
#[test]
fn objects_in_and_out_exactly_once_through_kills() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    moto.put("lake", "in/0001.json", &orders(1..=3));
    let mut second = orders(4..=5);
    second.extend_from_slice(b"{\"insert\": {\"id\": \"four\"}}\n");
    moto.put("lake", "in/0002.json", &second);
    moto.put("lake", "elsewhere/0001.json", &orders(100..=101));

    let bucket = moto.bucket("lake");
    let input = json!([{"name": "in", "transport": {"name": "s3_input", "config":
        config(&bucket, json!({"prefix": "in/", "follow": true, "poll_interval_secs": 1}))},
        "format": {"name": "json"}}]);
    let output = json!([{"name": "out", "transport": {"name": "s3_output", "config":
        config(&bucket, json!({"prefix": "out/totals/"}))},
        "format": {"name": "json"}}]);
    let sql = format!(
        "CREATE TABLE orders (id BIGINT NOT NULL PRIMARY KEY, amount BIGINT) WITH ('connectors' = '{input}');
         CREATE MATERIALIZED VIEW totals WITH ('connectors' = '{output}') AS
           SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders;"
    );
    let dir = scratch("s3");
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 1}},
        });
        s.ok("PUT", "/v0/pipelines/o", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/o/start", None);
        wait_until("the first objects", || {
            totals(&s) == json!({"n": 5, "total": 150})
        });
        let stats = s.ok("GET", "/v0/pipelines/o/stats", None);
        let input = &stats["inputs"][0];
        assert_eq!(input["metrics"]["num_parse_errors"], 1, "{stats}");
        let error = input["last_error"].as_str().unwrap_or_default();
        assert!(error.contains("'in/0002.json' line 3"), "{error}");
        moto.put("lake", "in/0003.json", &orders(6..=8));
        wait_until("a new object", || {
            totals(&s) == json!({"n": 8, "total": 360})
        });
    }
    // Killed (the server above is dropped), objects keep coming: each
    // restart resumes from its checkpoint and goes on.
    let mut next = 9;
    for round in 0..5u64 {
        moto.put(
            "lake",
            &format!("in/{:04}.json", 4 + round),
            &orders(next..=next + 2),
        );
        next += 3;
        let s = Server::start(&dir, None);
        let n = next - 1;
        wait_until("the objects so far", || {
            totals(&s) == json!({"n": n, "total": (1..=n).sum::<i64>() * 10})
        });
        std::thread::sleep(Duration::from_millis(300 * round));
    }
    let s = Server::start(&dir, None);
    let n = next - 1;
    let expected = json!({"n": n, "total": (1..=n).sum::<i64>() * 10});
    wait_until("every object", || totals(&s) == expected);
    s.ok("POST", "/v0/pipelines/o/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/o", None)["deployment_status"] == "Stopped"
    });
    let got = rows_of(&moto, "lake", "out/totals/");
    assert_eq!(got, BTreeMap::from([(expected.to_string(), 1)]));
    let keys = moto.list("lake", "out/totals/");
    let numbered: Vec<String> = (1..=keys.len())
        .map(|i| format!("out/totals/{i:08}.json"))
        .collect();
    assert_eq!(keys, numbered, "one object per step, numbered without gaps");
}

/// A bucket that is not there is an error of the connector, retried until
/// it appears; Parquet objects written by one pipeline are read by another.
#[test]
fn a_missing_bucket_is_retried_and_parquet_objects_round_trip() {
    let moto = Moto::start();
    let bucket = moto.bucket("late");
    let dir = scratch("s3-parquet");
    let s = Server::start(&dir, None);
    let input = json!([{"transport": {"name": "s3_input", "config":
        config(&bucket, json!({"prefix": "copy/", "follow": true, "poll_interval_secs": 1}))},
        "format": {"name": "parquet"}}]);
    s.deploy(
        "reader",
        &format!(
            "CREATE TABLE people (id BIGINT NOT NULL, name VARCHAR) WITH ('materialized' = 'true', 'connectors' = '{input}');"
        ),
    );
    s.ok("POST", "/v0/pipelines/reader/start", None);
    wait_until("the missing bucket reported", || {
        let stats = s.ok("GET", "/v0/pipelines/reader/stats", None);
        stats["inputs"][0]["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("late"))
    });
    moto.create_bucket("late");
    let output = json!([{"transport": {"name": "s3_output", "config":
        config(&bucket, json!({"prefix": "copy/"}))},
        "format": {"name": "parquet"}}]);
    s.deploy(
        "writer",
        &format!(
            "CREATE TABLE src (id BIGINT NOT NULL, name VARCHAR);
             CREATE VIEW copy WITH ('connectors' = '{output}') AS SELECT * FROM src;"
        ),
    );
    s.ok("POST", "/v0/pipelines/writer/start", None);
    s.ingest(
        "writer",
        "src",
        "format=json",
        "{\"insert\": {\"id\": 1, \"name\": \"ann\"}}\n{\"insert\": {\"id\": 2, \"name\": null}}",
    );
    wait_until("the first object", || moto.list("late", "copy/").len() == 1);
    s.ingest(
        "writer",
        "src",
        "format=json",
        "{\"insert\": {\"id\": 3, \"name\": \"cy\"}}",
    );
    wait_until("the rows read back", || {
        s.query("reader", "SELECT id, name FROM people ORDER BY id")
            == vec![
                json!({"id": 1, "name": "ann"}),
                json!({"id": 2, "name": null}),
                json!({"id": 3, "name": "cy"}),
            ]
    });
    assert_eq!(
        moto.list("late", "copy/"),
        ["copy/00000001.parquet", "copy/00000002.parquet"]
    );
    for p in ["reader", "writer"] {
        s.ok("POST", &format!("/v0/pipelines/{p}/stop?force=true"), None);
    }
}
