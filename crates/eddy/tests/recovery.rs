//! Recovery: pipelines that resume from checkpoints with their connectors'
//! positions, HTTP input kept by the journal, and outputs cut back to the
//! checkpoint, tested by killing a real `eddy serve` with SIGKILL.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{env_count, kill_after, scratch, wait_until, Server};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// A connectors list for a `WITH` clause.
fn conn(v: Value) -> String {
    v.to_string().replace('\'', "''")
}

/// The rows a JSON change file adds up to: row text → weight, zero
/// weights left out.
fn consolidated(path: &Path) -> BTreeMap<String, i64> {
    let mut rows: BTreeMap<String, i64> = BTreeMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        let (row, w) = match (v.get("insert"), v.get("delete")) {
            (Some(r), _) => (r, 1),
            (_, Some(r)) => (r, -1),
            _ => panic!("not a change: {line}"),
        };
        *rows.entry(row.to_string()).or_default() += w;
    }
    rows.retain(|_, w| *w != 0);
    rows
}

/// Fails, listing a few differences, unless the output adds up to `rows`.
fn assert_output(path: &Path, rows: &[Value]) {
    let got = consolidated(path);
    let expected: BTreeMap<String, i64> = rows.iter().map(|r| (r.to_string(), 1)).collect();
    let differences: Vec<String> = got
        .iter()
        .filter(|(r, w)| expected.get(*r) != Some(w))
        .map(|(r, w)| format!("{r} has weight {w}"))
        .chain(
            expected
                .keys()
                .filter(|r| !got.contains_key(*r))
                .map(|r| format!("{r} is missing")),
        )
        .collect();
    assert!(
        differences.is_empty(),
        "the output differs from the view in {} rows: {:?}",
        differences.len(),
        &differences[..differences.len().min(10)]
    );
}

fn wait_running(s: &Server, name: &str) {
    wait_until("the pipeline to be running", || {
        s.ok("GET", &format!("/v0/pipelines/{name}"), None)["deployment_status"] == "Running"
    });
}

fn append(path: &Path, from: i64, to: i64) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    let text: String = (from..to).map(|i| format!("{i},{}\n", i % 5)).collect();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn connectors_resume_from_their_checkpointed_positions_after_a_kill() {
    let dir = scratch("resume-connectors");
    let input = dir.join("in.csv");
    let output = dir.join("out.json");
    append(&input, 0, 1000);
    let sql = format!(
        "CREATE TABLE events (id BIGINT, k BIGINT) WITH ('connectors' = '{}');
         CREATE TABLE gen (id BIGINT, r BIGINT) WITH ('connectors' = '{}');
         CREATE MATERIALIZED VIEW counts WITH ('connectors' = '{}') AS
           SELECT k, COUNT(*) AS n, SUM(id) AS s FROM events GROUP BY k;
         CREATE MATERIALIZED VIEW g AS
           SELECT COUNT(*) AS n, COUNT(DISTINCT id) AS d, SUM(id) AS s, SUM(r) AS rs FROM gen;",
        conn(
            json!([{"name": "src", "transport": {"name": "file_input", "config": {"path": input, "follow": true}}, "format": {"name": "csv"}}])
        ),
        conn(
            json!([{"name": "gen", "transport": {"name": "datagen", "config": {"seed": 7, "plan": [{"limit": 3000, "rate": 1500, "fields": {"r": {"strategy": "uniform", "range": [0, 1000000]}}}]}}}])
        ),
        conn(
            json!([{"name": "out", "transport": {"name": "file_output", "config": {"path": output}}, "format": {"name": "json"}}])
        ),
    );
    let flags = ["--file-dir", dir.to_str().unwrap()];
    let data = dir.join("data");
    let mut s = Server::start_with(&data, None, &flags);
    let body = json!({
        "program_code": sql,
        "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
    });
    s.ok("PUT", "/v0/pipelines/c", Some(&body.to_string()));
    s.ok("POST", "/v0/pipelines/c/start", None);
    let events = |s: &Server| {
        s.query("c", "SELECT SUM(n) AS n FROM counts")
            .first()
            .map(|r| r["n"].clone())
    };
    wait_until("the first lines", || events(&s) == Some(json!(1000)));
    s.ok("POST", "/v0/pipelines/c/checkpoint", None);
    append(&input, 1000, 2000);
    wait_until("the appended lines", || events(&s) == Some(json!(2000)));
    // Killed while the generator is halfway: the lines after the
    // checkpoint are read again, the generated rows after it generated
    // again, and the output file is cut back to the checkpoint.
    drop(s);
    append(&input, 2000, 2500);
    s = Server::start_with(&data, None, &flags);
    // The pipeline was running: the new server starts it by itself.
    wait_running(&s, "c");
    let p = s.ok("GET", "/v0/pipelines/c", None);
    assert_eq!(p["checkpoint_resumed"], 1, "{p}");
    wait_until("every line", || events(&s) == Some(json!(2500)));
    wait_until("every generated row", || {
        s.query("c", "SELECT n FROM g")
            .first()
            .map(|r| r["n"].clone())
            == Some(json!(3000))
    });
    let g = &s.query("c", "SELECT n, d, s, rs FROM g")[0];
    assert_eq!(g["d"], 3000, "{g}");
    assert_eq!(g["s"], (0..3000).sum::<i64>(), "{g}");
    let counts = s.query("c", "SELECT k, n, s FROM counts ORDER BY k");
    let expected: Vec<Value> = (0..5)
        .map(|k| {
            let ids = (0..2500i64).filter(|i| i % 5 == k);
            json!({"k": k, "n": ids.clone().count(), "s": ids.sum::<i64>()})
        })
        .collect();
    assert_eq!(counts, expected);
    // The output file holds each change once: cut back to the checkpoint,
    // then the replayed steps' changes, it adds up to the view.
    assert_output(&output, &counts);
    // A run without the kill generates the same rows.
    let rs = g["rs"].clone();
    s.ok("POST", "/v0/pipelines/c/stop?force=true", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/c", None)["deployment_status"] == "Stopped"
    });
    s.ok("POST", "/v0/pipelines/c/clear", None);
    std::fs::write(&input, "").unwrap();
    s.ok("POST", "/v0/pipelines/c/start", None);
    wait_until("a second generation", || {
        s.query("c", "SELECT n FROM g")
            .first()
            .map(|r| r["n"].clone())
            == Some(json!(3000))
    });
    assert_eq!(s.query("c", "SELECT rs FROM g")[0]["rs"], rs);
}

/// One request, without panicking when the server is gone.
fn try_request(url: &str, method: &str, path: &str, body: Option<&str>) -> Option<(u16, String)> {
    let r = ureq::request(method, &format!("{url}{path}")).timeout(Duration::from_secs(10));
    let result = match body {
        Some(b) => r.send_string(b),
        None => r.call(),
    };
    match result {
        Ok(resp) => Some((resp.status(), resp.into_string().unwrap_or_default())),
        Err(ureq::Error::Status(status, resp)) => {
            Some((status, resp.into_string().unwrap_or_default()))
        }
        Err(_) => None,
    }
}

/// Newline-delimited inserts of batch `b` of the chaos test: ids
/// `b * 20 .. b * 20 + 20`.
fn chaos_batch(b: i64) -> String {
    (b * 20..b * 20 + 20)
        .map(|id| json!({"insert": {"id": id, "k": id % 7}}).to_string() + "\n")
        .collect()
}

#[test]
fn http_input_and_file_output_survive_a_hundred_kills() {
    let dir = scratch("chaos-http");
    let output = dir.join("out.json");
    let data = dir.join("data");
    let flags = ["--file-dir", dir.to_str().unwrap()];
    let sql = format!(
        "CREATE TABLE t (id BIGINT NOT NULL PRIMARY KEY, k BIGINT);
         CREATE MATERIALIZED VIEW v WITH ('connectors' = '{}') AS
           SELECT k, COUNT(*) AS n, SUM(id) AS s FROM t GROUP BY k;",
        conn(
            json!([{"name": "out", "transport": {"name": "file_output", "config": {"path": output}}, "format": {"name": "json"}}])
        ),
    );
    {
        let s = Server::start_with(&data, None, &flags);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 1}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
    }
    let seed: u64 = std::env::var("EDDY_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let ingress = "/v0/pipelines/p/ingress/t?format=json&update_format=insert_delete";
    // Batches below `acked` were acknowledged (200): they must all be in
    // the output at the end. Batch `acked` may or may not have been taken
    // when the server died: it is sent again (inserts under a primary key
    // are idempotent), as a client would.
    let mut acked: i64 = 0;
    let mut kills = 0;
    let started = Instant::now();
    // The long form: EDDY_CHAOS_KILLS=1000 (docs/server.md, "The fault suite").
    let wanted = env_count("EDDY_CHAOS_KILLS", 100);
    while kills < wanted {
        let s = Server::start_with(&data, None, &flags);
        let killer = kill_after(&s, Duration::from_millis(rng.gen_range(10..300)));
        loop {
            match try_request(&s.url, "POST", ingress, Some(&chaos_batch(acked))) {
                Some((200, _)) => acked += 1,
                Some((status, text)) => panic!("batch {acked}: {status} {text}"),
                None => break,
            }
            if acked % 7 == 0 {
                let _ = try_request(&s.url, "POST", "/v0/pipelines/p/checkpoint", None);
            }
        }
        killer.join().unwrap();
        drop(s);
        kills += 1;
    }
    // A last server takes the rest and is stopped gracefully.
    let s = Server::start_with(&data, None, &flags);
    wait_running(&s, "p");
    for _ in 0..5 {
        let v = s.ok("POST", ingress, Some(&chaos_batch(acked)));
        acked += 1;
        s.wait_token("p", v["token"].as_str().unwrap());
    }
    let total = acked * 20;
    let expected: Vec<Value> = (0..7)
        .map(|k| {
            let ids = (0..total).filter(|i| i % 7 == k);
            json!({"k": k, "n": ids.clone().count(), "s": ids.sum::<i64>()})
        })
        .collect();
    let view = s.query("p", "SELECT k, n, s FROM v ORDER BY k");
    assert_eq!(view, expected, "after {kills} kills, {acked} batches");
    s.ok("POST", "/v0/pipelines/p/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Stopped"
    });
    // Nothing lost, nothing twice: the output adds up to the batch answer.
    assert_output(&output, &expected);
    eprintln!(
        "{kills} kills, {acked} batches of 20 rows, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// View `a`'s rows, computed from table `t`: `a` is not materialized (its
/// changes only go to its file), so its own rows are not kept.
const A_ROWS: &str = "SELECT k, SUM(x) AS s FROM t GROUP BY k ORDER BY k";

#[test]
fn a_changed_program_keeps_what_did_not_change() {
    let dir = scratch("bootstrap");
    let data = dir.join("data");
    let (out_a, out_c) = (dir.join("a.json"), dir.join("c.json"));
    let flags = ["--file-dir", dir.to_str().unwrap()];
    let file = |path: &Path| {
        conn(
            json!([{"name": path.file_stem().unwrap().to_str().unwrap(), "transport": {"name": "file_output", "config": {"path": path}}, "format": {"name": "json"}}]),
        )
    };
    let tables = "CREATE TABLE t (k BIGINT, x BIGINT) WITH ('materialized' = 'true');
                  CREATE TABLE u (k BIGINT, y BIGINT) WITH ('materialized' = 'true');";
    let view_a = format!(
        "CREATE VIEW a WITH ('connectors' = '{}') AS SELECT k, SUM(x) AS s FROM t GROUP BY k;",
        file(&out_a)
    );
    let v1 = format!(
        "{tables}\n{view_a}\nCREATE MATERIALIZED VIEW b AS SELECT t.k, COUNT(*) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k;"
    );
    let s = Server::start_with(&data, None, &flags);
    s.deploy("p", &v1);
    s.ok("POST", "/v0/pipelines/p/start", None);
    let params = "format=json&update_format=insert_delete";
    let rows = |col: &str, from: i64, to: i64| -> String {
        (from..to)
            .map(|i| json!({"insert": {"k": i % 3, col: i}}).to_string() + "\n")
            .collect()
    };
    s.ingest("p", "t", params, &rows("x", 0, 30));
    s.ingest("p", "u", params, &rows("y", 100, 106));
    s.ok("POST", "/v0/pipelines/p/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Stopped"
    });
    // b changes, c is new, a and the tables stay.
    let v2 = format!(
        "{tables}\n{view_a}\nCREATE MATERIALIZED VIEW b AS SELECT t.k, SUM(y) AS n FROM t JOIN u ON t.k = u.k GROUP BY t.k;
         CREATE MATERIALIZED VIEW c WITH ('connectors' = '{}') AS SELECT k, MAX(x) AS m FROM t GROUP BY k;",
        file(&out_c)
    );
    s.deploy("p", &v2);
    // By default a changed program waits for approval, stopped, saying
    // what it will keep and what it will compute.
    s.ok("POST", "/v0/pipelines/p/start", None);
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert_eq!(p["deployment_status"], "Stopped", "{p}");
    assert_eq!(p["deployment_runtime_status"], "AwaitingApproval", "{p}");
    let details = &p["deployment_runtime_status_details"];
    assert_eq!(details["views"]["unchanged"], json!(["a"]), "{details}");
    assert_eq!(details["views"]["modified"], json!(["b"]), "{details}");
    assert_eq!(details["views"]["added"], json!(["c"]), "{details}");
    assert_eq!(
        details["tables"]["unchanged"],
        json!(["t", "u"]),
        "{details}"
    );
    let (status, text) = s.send(
        "POST",
        "/v0/pipelines/p/start?bootstrap_policy=reject",
        None,
    );
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("views modified: b"), "{text}");
    s.ok("POST", "/v0/pipelines/p/approve", None);
    wait_running(&s, "p");
    let a_rows = s.query("p", A_ROWS);
    let expect = |f: &dyn Fn(i64) -> Value| -> Vec<Value> { (0..3).map(f).collect() };
    let xs = |k: i64, to: i64| (0..to).filter(move |i| i % 3 == k);
    assert_eq!(
        a_rows,
        expect(&|k| json!({"k": k, "s": xs(k, 30).sum::<i64>()}))
    );
    assert_eq!(
        s.query("p", "SELECT k, n FROM b ORDER BY k"),
        expect(&|k| {
            let ys: i64 = (100..106).filter(|i| i % 3 == k).sum();
            json!({"k": k, "n": ys * xs(k, 30).count() as i64})
        })
    );
    let c_rows = s.query("p", "SELECT k, m FROM c ORDER BY k");
    assert_eq!(
        c_rows,
        expect(&|k| json!({"k": k, "m": xs(k, 30).max().unwrap()}))
    );
    // a's output was not sent again; c's received the view whole.
    assert_output(&out_a, &a_rows);
    assert_output(&out_c, &c_rows);
    // And the state goes on incrementally.
    s.ingest("p", "t", params, &rows("x", 30, 60));
    let a_rows = s.query("p", A_ROWS);
    assert_eq!(
        a_rows,
        expect(&|k| json!({"k": k, "s": xs(k, 60).sum::<i64>()}))
    );
    assert_output(&out_a, &a_rows);
    assert_output(&out_c, &s.query("p", "SELECT k, m FROM c ORDER BY k"));
    // A changed table starts empty, and what reads it is computed again.
    s.ok("POST", "/v0/pipelines/p/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Stopped"
    });
    s.deploy("p", &v2.replace("y BIGINT", "y INT"));
    s.ok("POST", "/v0/pipelines/p/start?bootstrap_policy=allow", None);
    wait_running(&s, "p");
    let p = s.ok("GET", "/v0/pipelines/p", None);
    assert_eq!(
        p["deployment_runtime_status_details"]["tables"]["modified"],
        json!(["u"]),
        "{p}"
    );
    assert_eq!(
        s.query("p", "SELECT COUNT(*) AS n FROM u"),
        vec![json!({"n": 0})]
    );
    assert_eq!(s.query("p", "SELECT k FROM b"), Vec::<Value>::new());
    assert_eq!(
        s.query("p", "SELECT SUM(x) AS s FROM t"),
        vec![json!({"s": (0..60).sum::<i64>()})]
    );
    // A change to connectors (or comments) alone resumes the same state,
    // without asking.
    s.ok("POST", "/v0/pipelines/p/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Stopped"
    });
    s.deploy(
        "p",
        &format!("-- the same\n{}", v2.replace("y BIGINT", "y INT")),
    );
    s.ok("POST", "/v0/pipelines/p/start", None);
    wait_running(&s, "p");
    assert_eq!(
        s.query("p", "SELECT SUM(x) AS s FROM t"),
        vec![json!({"s": (0..60).sum::<i64>()})]
    );
    assert_output(&out_a, &s.query("p", A_ROWS));
    // A view over a table that is not materialized, with a LATENESS,
    // keeps its state operator by operator; a new view over the kept view
    // is computed from its contents.
    let w = "CREATE TABLE w (x BIGINT, ts BIGINT NOT NULL LATENESS 100);
             CREATE MATERIALIZED VIEW vw AS SELECT SUM(x) AS s, COUNT(*) AS n FROM w;";
    s.deploy("q", w);
    s.ok("POST", "/v0/pipelines/q/start", None);
    s.ingest("q", "w", "format=csv", "1,1\n2,2\n");
    s.ok("POST", "/v0/pipelines/q/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/q", None)["deployment_status"] == "Stopped"
    });
    s.deploy(
        "q",
        &format!("{w} CREATE MATERIALIZED VIEW twice AS SELECT s * 2 AS d FROM vw;"),
    );
    s.ok("POST", "/v0/pipelines/q/start?bootstrap_policy=allow", None);
    wait_running(&s, "q");
    assert_eq!(s.query("q", "SELECT d FROM twice"), vec![json!({"d": 6})]);
    s.ingest("q", "w", "format=csv", "4,3\n");
    assert_eq!(
        s.query("q", "SELECT s, n FROM vw"),
        vec![json!({"s": 7, "n": 3})]
    );
    assert_eq!(s.query("q", "SELECT d FROM twice"), vec![json!({"d": 14})]);
    // A new view over that table has no contents to start from.
    s.ok("POST", "/v0/pipelines/q/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/q", None)["deployment_status"] == "Stopped"
    });
    s.deploy(
        "q",
        &format!("{w} CREATE MATERIALIZED VIEW twice AS SELECT s * 2 AS d FROM vw; CREATE MATERIALIZED VIEW c AS SELECT COUNT(*) AS n FROM w;"),
    );
    let (status, text) = s.send("POST", "/v0/pipelines/q/start?bootstrap_policy=allow", None);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not materialized"), "{text}");
    // A table with a primary key is materialized without saying so (its
    // upsert keeps its rows): it can be queried, and a view added over it
    // is computed from them.
    let keyed = "CREATE TABLE kv (k BIGINT PRIMARY KEY, v BIGINT);
                 CREATE MATERIALIZED VIEW total AS SELECT SUM(v) AS s FROM kv;";
    s.deploy("r", keyed);
    s.ok("POST", "/v0/pipelines/r/start", None);
    s.ingest("r", "kv", "format=csv", "1,10\n2,20\n3,30\n");
    s.ingest("r", "kv", "format=csv", "2,5\n");
    assert_eq!(
        s.query("r", "SELECT k, v FROM kv ORDER BY k"),
        vec![
            json!({"k": 1, "v": 10}),
            json!({"k": 2, "v": 5}),
            json!({"k": 3, "v": 30})
        ]
    );
    // A query that does not name it does not read it.
    assert_eq!(s.query("r", "SELECT s FROM total"), vec![json!({"s": 45})]);
    s.ok("POST", "/v0/pipelines/r/stop", None);
    wait_until("stopped", || {
        s.ok("GET", "/v0/pipelines/r", None)["deployment_status"] == "Stopped"
    });
    s.deploy(
        "r",
        &format!("{keyed} CREATE MATERIALIZED VIEW big AS SELECT k FROM kv WHERE v > 7;"),
    );
    s.ok("POST", "/v0/pipelines/r/start?bootstrap_policy=allow", None);
    wait_running(&s, "r");
    assert_eq!(
        s.query("r", "SELECT k FROM big ORDER BY k"),
        vec![json!({"k": 1}), json!({"k": 3})]
    );
    assert_eq!(s.query("r", "SELECT s FROM total"), vec![json!({"s": 45})]);
    s.ingest("r", "kv", "format=csv", "1,1\n");
    assert_eq!(s.query("r", "SELECT k FROM big"), vec![json!({"k": 3})]);
    assert_eq!(s.query("r", "SELECT s FROM total"), vec![json!({"s": 36})]);
}
