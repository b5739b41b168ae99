//! `delta_table_output` against Delta tables in a local folder and in a
//! real S3 server (moto's), read back by the test itself: a replay of the
//! table's JSON log (`add` and `remove` actions) and the Parquet files it
//! names, so the check does not go through the library that wrote them.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::moto::Moto;
use common::{scratch, wait_until, Server};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::Int64Type;
use datafusion::arrow::util::display::array_value_to_string;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{json, Value};

/// A log row: (ts, key, op, n, amount).
type LogRow = (i64, String, String, i64, String);

/// The rows of the table's live files, from its commits `commits` (JSON
/// lines each, in version order) and a reader of its files.
fn live_rows(commits: &[Vec<u8>], read: &dyn Fn(&str) -> Vec<u8>) -> Vec<LogRow> {
    let mut files = BTreeSet::new();
    for commit in commits {
        for line in commit.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let action: Value = serde_json::from_slice(line).unwrap();
            if let Some(p) = action["add"]["path"].as_str() {
                files.insert(p.to_string());
            }
            if let Some(p) = action["remove"]["path"].as_str() {
                files.remove(p);
            }
        }
    }
    let mut rows = Vec::new();
    for file in files {
        let bytes = bytes::Bytes::from(read(&file));
        let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            rows.extend(log_rows(&batch.unwrap()));
        }
    }
    rows.sort();
    rows
}

fn log_rows(batch: &RecordBatch) -> Vec<LogRow> {
    let col = |name: &str| batch.column_by_name(name).unwrap();
    let text = |name: &str, i: usize| array_value_to_string(col(name).as_ref(), i).unwrap();
    let (ts, n) = (
        col("__feldera_ts").as_primitive::<Int64Type>(),
        col("n").as_primitive::<Int64Type>(),
    );
    (0..batch.num_rows())
        .map(|i| {
            let amount = if col("amount").is_null(i) {
                "null".to_string()
            } else {
                text("amount", i)
            };
            (
                ts.value(i),
                text("city", i),
                text("__feldera_op", i),
                n.value(i),
                amount,
            )
        })
        .collect()
}

/// The commits of a local table, in version order.
fn local_commits(table: &Path) -> Vec<Vec<u8>> {
    let mut names: Vec<_> = std::fs::read_dir(table.join("_delta_log"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().to_string())
                .filter(|n| n.ends_with(".json"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|n| std::fs::read(table.join("_delta_log").join(n)).unwrap())
        .collect()
}

/// The view's rows, `city,n,amount`.
fn view(s: &Server) -> Vec<String> {
    s.query("p", "SELECT city, n, amount FROM totals ORDER BY city")
        .iter()
        .map(|r| {
            let amount = match &r["amount"] {
                Value::Null => "null".to_string(),
                v => format!(
                    "{:.2}",
                    v.as_f64()
                        .unwrap_or_else(|| v.as_str().unwrap().parse().unwrap())
                ),
            };
            format!("{},{},{}", r["city"].as_str().unwrap(), r["n"], amount)
        })
        .collect()
}

/// The view an indexed change log folds to, checking that each change
/// follows from those before it (per key: `i` when absent, `u` and `d`
/// when present).
fn fold_by_key(log: &[LogRow]) -> Vec<String> {
    let mut rows: BTreeMap<String, String> = BTreeMap::new();
    for (_, city, op, n, amount) in log {
        let present = rows.contains_key(city);
        let ok = match op.as_str() {
            "i" => !present,
            "u" | "d" => present,
            _ => false,
        };
        assert!(ok, "'{op}' of '{city}' does not follow: {log:?}");
        if op == "d" {
            rows.remove(city);
        } else {
            rows.insert(city.clone(), format!("{city},{n},{amount}"));
        }
    }
    rows.into_values().collect()
}

/// The view a change log without a key folds to: each row's inserts less
/// its deletes, never below zero.
fn fold_rows(log: &[LogRow]) -> Vec<String> {
    let mut counts: BTreeMap<String, i64> = BTreeMap::new();
    for (_, city, op, n, amount) in log {
        let c = counts.entry(format!("{city},{n},{amount}")).or_default();
        *c += if op == "d" { -1 } else { 1 };
        assert!(
            *c >= 0 && *c <= 1,
            "'{city},{n},{amount}' counted {c}: {log:?}"
        );
    }
    counts
        .into_iter()
        .filter(|(_, c)| *c > 0)
        .map(|(r, _)| r)
        .collect()
}

/// A view kept as change logs in two Delta tables, one local with the
/// view's key (`u` for updates), one in S3 without: through updates, a
/// checkpoint, a step after it, a SIGKILL and a restart, each log folds to
/// the view, and the step replayed after the restart is in it once.
#[test]
fn a_view_is_kept_as_delta_change_logs() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    let dir = scratch("delta-out");
    let local = json!({"name": "local", "index": "totals_key", "transport": {"name": "delta_table_output",
        "config": {"uri": "tables/totals", "mode": "truncate"}}});
    let s3 = json!({"name": "s3", "transport": {"name": "delta_table_output", "config": {
        "uri": "s3://lake/totals", "mode": "append", "aws_endpoint": moto.url,
        "aws_access_key_id": "eddy", "aws_secret_access_key": "eddy-secret",
        "aws_region": "us-east-1", "aws_allow_http": "true"}}});
    let connectors = json!([local, s3]);
    let sql = format!(
        "CREATE TABLE sales (id BIGINT NOT NULL PRIMARY KEY, city VARCHAR NOT NULL, amount DECIMAL(10, 2), at TIMESTAMP);
         CREATE MATERIALIZED VIEW totals WITH ('connectors' = '{connectors}') AS
           SELECT city, COUNT(*) AS n, SUM(amount) AS amount, MAX(at) AS last_at FROM sales GROUP BY city;
         CREATE INDEX totals_key ON totals(city);"
    );
    let table = dir.join("files/tables/totals");
    let read_local = |f: &str| std::fs::read(table.join(f)).unwrap();
    let s3_commits = || {
        moto.list("lake", "totals/_delta_log/")
            .into_iter()
            .filter(|k| k.ends_with(".json"))
            .map(|k| moto.get("lake", &k))
            .collect::<Vec<_>>()
    };
    let read_s3 = |f: &str| moto.get("lake", &format!("totals/{f}"));
    let both_hold = |s: &Server| {
        let v = view(s);
        fold_by_key(&live_rows(&local_commits(&table), &read_local)) == v
            && fold_rows(&live_rows(&s3_commits(), &read_s3)) == v
    };
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            // Only the checkpoint asked for: the step after it is replayed.
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        s.ingest(
            "p",
            "sales",
            "format=json",
            r#"{"insert": {"id": 1, "city": "Oslo", "amount": 10.50, "at": "2026-01-02 03:04:05"}}
{"insert": {"id": 2, "city": "Oslo", "amount": 2, "at": "2026-01-03 00:00:00"}}
{"insert": {"id": 3, "city": "Lima", "amount": null, "at": null}}"#,
        );
        wait_until("the first step in both tables", || {
            view(&s).len() == 2 && both_hold(&s)
        });
        s.ingest(
            "p",
            "sales",
            "format=json",
            r#"{"delete": {"id": 2, "city": "Oslo", "amount": 2, "at": "2026-01-03 00:00:00"}}
{"delete": {"id": 3, "city": "Lima", "amount": null, "at": null}}
{"insert": {"id": 4, "city": "Pune", "amount": 7, "at": "2026-02-01 00:00:00"}}"#,
        );
        wait_until("the update", || {
            view(&s) == ["Oslo,1,10.50", "Pune,1,7.00"] && both_hold(&s)
        });
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        s.ingest(
            "p",
            "sales",
            "format=json",
            r#"{"insert": {"id": 5, "city": "Kyiv", "amount": 1, "at": null}}
{"insert": {"id": 6, "city": "Oslo", "amount": 1, "at": null}}"#,
        );
        wait_until("the step after the checkpoint", || {
            view(&s).len() == 3 && both_hold(&s)
        });
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        for o in stats["outputs"].as_array().unwrap() {
            assert_eq!(o["metrics"]["num_transport_errors"], 0, "{stats}");
        }
        // SIGKILL: the server is dropped.
    }
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
    s.ingest(
        "p",
        "sales",
        "format=json",
        r#"{"insert": {"id": 7, "city": "Lima", "amount": 5, "at": null}}"#,
    );
    wait_until("after the restart", || {
        view(&s) == ["Kyiv,1,1.00", "Lima,1,5.00", "Oslo,2,11.50", "Pune,1,7.00"] && both_hold(&s)
    });
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
}

/// Settings are checked when the program is: an unknown one by name, a
/// local table outside the allowed folders, a column the log writes.
#[test]
fn delta_settings_are_checked() {
    let dir = scratch("delta-refused");
    let s = Server::start(&dir, None);
    let program = |config: Value, column: &str| {
        let c = json!([{"transport": {"name": "delta_table_output", "config": config}}]);
        format!("CREATE TABLE t (x INT); CREATE VIEW v WITH ('connectors' = '{c}') AS SELECT x AS {column} FROM t;")
    };
    s.deploy_refused(
        "r",
        &program(
            json!({"uri": "s3://b/t", "mode": "append", "aws_endpont": "http://x"}),
            "x",
        ),
        "aws_endpont",
    );
    s.deploy_refused(
        "r",
        &program(json!({"uri": "/etc/t", "mode": "append"}), "x"),
        "/etc/t",
    );
    s.deploy_refused(
        "r",
        &program(json!({"uri": "t", "mode": "append"}), "__feldera_op"),
        "__feldera_op",
    );
    s.deploy_refused("r", &program(json!({"uri": "t"}), "x"), "mode");
}
