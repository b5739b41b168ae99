//! `iceberg_input` against tables written by PyIceberg (PyPI, installed by
//! `scripts/test-tools.sh`; its SQL catalog in SQLite), on the local disk
//! and in moto's S3 server: the rows of a snapshot after appends, a
//! copy-on-write delete and a column rename; older snapshots by id and by
//! time; a filter; a checkpoint and a SIGKILL without a row doubled; and
//! the settings that are refused.

mod common;

use std::path::Path;
use std::process::Command;

use common::moto::Moto;
use common::{scratch, tool, wait_until, Server};
use serde_json::{json, Value};

/// Applies `ops` (see `common/iceberg.py`) to the table `ns.items` of the
/// catalog in `db`; each op's table state (metadata location, snapshot).
fn lake(db: &Path, warehouse: &str, s3: Option<&str>, ops: &[&str]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/iceberg.py");
    let out = Command::new(tool("EDDY_ICEBERG_PYTHON", "iceberg-venv/bin/python"))
        .arg(script)
        .arg(db)
        .arg(warehouse)
        .args(s3)
        .args(ops)
        .output()
        .expect("PyIceberg runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sql(name: &str, connector: Value) -> String {
    let c = json!([{"name": "lake", "transport": {"name": "iceberg_input", "config": connector}}]);
    // A quote in the SQL string literal is doubled.
    let c = c.to_string().replace('\'', "''");
    format!(
        "CREATE TABLE items (id BIGINT NOT NULL, {name} VARCHAR, amount DECIMAL(10, 2), ts TIMESTAMP, day DATE) \
         WITH ('materialized' = 'true', 'connectors' = '{c}');"
    )
}

/// The table's row count, sum of ids and of amounts, as text.
fn summary(s: &Server, pipeline: &str) -> String {
    let r = &s.query(
        pipeline,
        "SELECT COUNT(*) AS n, SUM(id) AS ids, CAST(SUM(amount) AS VARCHAR) AS amounts FROM items",
    )[0];
    format!(
        "{} {} {}",
        r["n"],
        r["ids"],
        r["amounts"].as_str().unwrap_or("null")
    )
}

/// The summary of rows `ranges` (id `i` has amount `i / 100`).
fn expected(ranges: &[std::ops::RangeInclusive<i64>]) -> String {
    let ids: Vec<i64> = ranges.iter().flat_map(|r| r.clone()).collect();
    let sum: i64 = ids.iter().sum();
    format!("{} {} {}.{:02}", ids.len(), sum, sum / 100, sum % 100)
}

fn ended(s: &Server, pipeline: &str) -> bool {
    let stats = s.ok("GET", &format!("/v0/pipelines/{pipeline}/stats"), None);
    assert_eq!(
        stats["inputs"][0]["metrics"]["num_transport_errors"], 0,
        "{stats}"
    );
    stats["inputs"][0]["metrics"]["end_of_input"] == true
}

/// A new user's flow on a local table: the current snapshot (a renamed
/// column by its new name, deleted rows gone), exactly once through a
/// checkpoint and a SIGKILL; an older snapshot by id (the column by its
/// name then) with a filter, and by time; refusals that say why.
#[test]
fn a_table_reads_an_iceberg_snapshot() {
    let dir = scratch("iceberg-in");
    let warehouse = format!("file://{}/files/lake", dir.display());
    std::fs::create_dir_all(dir.join("files/lake")).unwrap();
    let states = lake(
        &dir.join("catalog.db"),
        &warehouse,
        None,
        &[
            "create", "append", "1", "10000", "append", "10001", "20000", "delete", "500", "600",
            "append", "20001", "20005", "rename", "name", "label",
        ],
    );
    // The rename made no snapshot: the current one was written as `name`,
    // and is read by the current schema, as `label`.
    assert_eq!(states[5]["snapshot_id"], states[4]["snapshot_id"]);
    let now = &states[5];
    let current = sql(
        "label",
        json!({"mode": "snapshot", "metadata_location": now["metadata_location"]}),
    );
    let want = expected(&[1..=499, 601..=20005]);
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": current,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the snapshot", || {
            ended(&s, "p") && summary(&s, "p") == want
        });
        let row = &s.query(
            "p",
            "SELECT label, CAST(amount AS VARCHAR) AS amount, \
             ts = TIMESTAMP '2024-01-01 05:33:23' AS ts, day = DATE '2024-01-24' AS day \
             FROM items WHERE id = 20003",
        )[0];
        assert_eq!(
            row,
            &json!({"label": "n20003", "amount": "200.03", "ts": true, "day": true})
        );
        // Every file was written before the rename: the column has its
        // new name (matched by field id).
        let labelled = &s.query("p", "SELECT COUNT(label) AS n FROM items")[0];
        assert_eq!(labelled["n"], 19904);
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // SIGKILL: the server is dropped.
    }
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
    wait_until("nothing doubled", || ended(&s, "p"));
    assert_eq!(summary(&s, "p"), want);
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);

    // The second append's snapshot, before the rename: `name` then.
    let old = json!({
        "mode": "snapshot", "metadata_location": now["metadata_location"],
        "snapshot_id": states[2]["snapshot_id"], "snapshot_filter": "id > 15000 AND name LIKE 'n1%'",
    });
    s.deploy("old", &sql("name", old));
    s.ok("POST", "/v0/pipelines/old/start", None);
    wait_until("the old snapshot, filtered", || {
        ended(&s, "old") && summary(&s, "old") == expected(&[15001..=19999])
    });
    let first = json!({
        "mode": "snapshot", "metadata_location": now["metadata_location"], "datetime": states[1]["datetime"],
    });
    s.deploy("first", &sql("name", first));
    s.ok("POST", "/v0/pipelines/first/start", None);
    wait_until("the snapshot current at a time", || {
        ended(&s, "first") && summary(&s, "first") == expected(&[1..=10000])
    });

    let location = now["metadata_location"].clone();
    for (config, needle) in [
        (
            json!({"mode": "snapshot_and_follow", "metadata_location": location}),
            "need an Iceberg catalog",
        ),
        (
            json!({"mode": "snapshot", "metadata_location": "file:///etc/t/v1.metadata.json"}),
            "outside the folders",
        ),
        (
            json!({"mode": "snapshot", "catalog_type": "rest", "table_name": "ns.items", "rest.uri": "http://127.0.0.1:1"}),
            "not supported yet",
        ),
        (
            json!({"mode": "snapshot", "metadata_location": location, "snapshot_filter": "nope > 1"}),
            "snapshot_filter",
        ),
        (
            json!({"mode": "snapshot", "metadata_location": location, "s3.endpont": "x"}),
            "unknown field `s3.endpont`",
        ),
    ] {
        s.deploy_refused("bad", &sql("label", config), needle);
    }
}

/// A table in S3 (moto), partitioned by day (a folder per partition),
/// written by PyIceberg through its S3 FileIO, read with Feldera's `s3.*`
/// settings.
#[test]
fn a_table_reads_an_iceberg_snapshot_from_s3() {
    let dir = scratch("iceberg-s3");
    let moto = Moto::start();
    moto.create_bucket("lake");
    let states = lake(
        &dir.join("catalog.db"),
        "s3://lake/wh",
        Some(&moto.url),
        &[
            "create_partitioned",
            "append",
            "1",
            "3000",
            "append",
            "3001",
            "5000",
            "delete",
            "1",
            "10",
        ],
    );
    let connector = json!({
        "mode": "snapshot", "metadata_location": states[3]["metadata_location"],
        "s3.endpoint": moto.url, "s3.region": "us-east-1",
        "s3.access-key-id": "eddy", "s3.secret-access-key": "eddy-secret",
    });
    let s = Server::start(&dir, None);
    s.deploy("p", &sql("name", connector));
    s.ok("POST", "/v0/pipelines/p/start", None);
    wait_until("the snapshot", || {
        ended(&s, "p") && summary(&s, "p") == expected(&[11..=5000])
    });
}

/// A migrated table's files carry no field ids: the table's name mapping
/// (PyIceberg's `add_files` writes one, and keeps a renamed column's old
/// name in it) matches their columns, so a column renamed since is read
/// under its new name rather than left NULL.
#[test]
fn files_without_field_ids_are_read_through_the_name_mapping() {
    let dir = scratch("iceberg-mapped");
    let warehouse = format!("file://{}/files/lake", dir.display());
    std::fs::create_dir_all(dir.join("files/lake")).unwrap();
    let states = lake(
        &dir.join("catalog.db"),
        &warehouse,
        None,
        &[
            "create",
            "add_files",
            "1",
            "100",
            "rename",
            "name",
            "label",
            "append",
            "101",
            "150",
        ],
    );
    let now = states.last().unwrap();
    let s = Server::start(&dir, None);
    s.deploy(
        "m",
        &sql(
            "label",
            json!({"mode": "snapshot", "metadata_location": now["metadata_location"]}),
        ),
    );
    s.ok("POST", "/v0/pipelines/m/start", None);
    // The end of input is reported when the rows are fed, not yet
    // stepped: the rows are waited for.
    wait_until("the snapshot", || {
        ended(&s, "m") && summary(&s, "m") == expected(&[1..=150])
    });
    assert_eq!(
        s.query("m", "SELECT COUNT(label) AS n, MIN(label) AS lo FROM items"),
        vec![json!({"n": 150, "lo": "n1"})]
    );
}

/// `iceberg_input` through moto's Glue catalog, its files in moto's S3,
/// with `extra` settings.
fn glue_connector(moto: &Moto, table: &str, extra: Value) -> Value {
    let mut c = json!({
        "catalog_type": "glue", "table_name": table,
        "glue.endpoint": moto.url, "glue.region": "us-east-1",
        "glue.access-key-id": "eddy", "glue.secret-access-key": "eddy-secret",
        "s3.endpoint": moto.url, "s3.region": "us-east-1",
        "s3.access-key-id": "eddy", "s3.secret-access-key": "eddy-secret",
    });
    for (k, v) in extra.as_object().unwrap() {
        c[k] = v.clone();
    }
    c
}

/// A new user's flow with a catalog: a table in S3 registered in AWS
/// Glue (both moto's), written by PyIceberg, followed: its snapshot, then
/// appends, a copy-on-write delete and an overwrite as they are
/// committed; exactly once through a checkpoint, a SIGKILL and commits
/// made while the server is down, for the snapshot and its changes and
/// for the changes alone from the current snapshot. `follow` from an
/// older snapshot up to
/// `end_snapshot_id` reads only the changes between, then ends; a
/// missing table is an error in the status, retried; an end that is not
/// in the table's history stops the connector.
#[test]
fn a_table_follows_an_iceberg_table_through_its_glue_catalog() {
    let dir = scratch("iceberg-glue");
    let moto = Moto::start();
    moto.create_bucket("lake");
    let run = |ops: &[&str]| lake(Path::new("glue"), "s3://lake/wh", Some(&moto.url), ops);
    let states = run(&["create", "append", "1", "1000", "append", "1001", "2000"]);
    let config = json!({
        "program_code": sql("name", glue_connector(&moto, "ns.items", json!({"mode": "snapshot_and_follow"}))),
        "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
    });
    {
        let s = Server::start(&dir, None);
        s.ok("PUT", "/v0/pipelines/p", Some(&config.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the snapshot", || summary(&s, "p") == expected(&[1..=2000]));
        run(&["append", "2001", "2500"]);
        wait_until("an append followed", || {
            summary(&s, "p") == expected(&[1..=2500])
        });
        // Copy-on-write: the files holding rows 1..=100 are removed and
        // rewritten without them.
        run(&["delete", "1", "100"]);
        wait_until("a delete followed", || {
            summary(&s, "p") == expected(&[101..=2500])
        });
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        assert_eq!(
            stats["inputs"][0]["metrics"]["num_transport_errors"], 0,
            "{stats}"
        );
        assert_eq!(stats["inputs"][0]["metrics"]["end_of_input"], false);
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // Following from the current snapshot, checkpointed before any
        // row comes: the start it chose is in the checkpoint, so what is
        // committed after it is read after a restart, not skipped.
        let follow = json!({
            "program_code": sql("name", glue_connector(&moto, "ns.items", json!({"mode": "follow"}))),
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/f", Some(&follow.to_string()));
        s.ok("POST", "/v0/pipelines/f/start", None);
        s.wait_start_recorded("f");
        s.ok("POST", "/v0/pipelines/f/checkpoint", None);
        assert_eq!(summary(&s, "f"), "0 null null");
        run(&["append", "2501", "2600"]);
        wait_until("an append after the checkpoints", || {
            summary(&s, "p") == expected(&[101..=2600])
                && summary(&s, "f") == expected(&[2501..=2600])
        });
        // SIGKILL: the server is dropped; commits while it is down.
    }
    run(&["append", "2601", "3000", "delete", "2900", "3000"]);
    let s = Server::start(&dir, None);
    wait_until("caught up, nothing lost or doubled", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
            && summary(&s, "p") == expected(&[101..=2899])
    });
    wait_until("the followed changes since its start", || {
        s.ok("GET", "/v0/pipelines/f", None)["deployment_status"] == "Running"
            && summary(&s, "f") == expected(&[2501..=2899])
    });
    // An overwrite removes files from before its start, whose rows it
    // never had: it stops here.
    s.ok("POST", "/v0/pipelines/f/stop?force=true", None);
    run(&["overwrite", "5000", "5099"]);
    wait_until("an overwrite followed", || {
        summary(&s, "p") == expected(&[5000..=5099])
    });
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);

    // From the first append's snapshot to the second's: its rows only.
    let between = glue_connector(
        &moto,
        "ns.items",
        json!({"mode": "follow", "snapshot_id": states[1]["snapshot_id"], "end_snapshot_id": states[2]["snapshot_id"]}),
    );
    s.deploy("between", &sql("name", between));
    s.ok("POST", "/v0/pipelines/between/start", None);
    wait_until("the changes up to the end, then the end", || {
        ended(&s, "between") && summary(&s, "between") == expected(&[1001..=2000])
    });

    let missing = glue_connector(&moto, "ns.nothing", json!({"mode": "snapshot"}));
    s.deploy("missing", &sql("name", missing));
    s.ok("POST", "/v0/pipelines/missing/start", None);
    wait_until("the missing table reported", || {
        let stats = s.ok("GET", "/v0/pipelines/missing/stats", None);
        stats["inputs"][0]["metrics"]["num_transport_errors"] != 0
            && stats["inputs"][0]["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("EntityNotFoundException"))
            && stats["inputs"][0]["fatal_error"].is_null()
    });

    let never = glue_connector(
        &moto,
        "ns.items",
        json!({"mode": "follow", "end_snapshot_id": states[1]["snapshot_id"]}),
    );
    s.deploy("never", &sql("name", never));
    s.ok("POST", "/v0/pipelines/never/start", None);
    wait_until("an end before the start refused", || {
        let stats = s.ok("GET", "/v0/pipelines/never/stats", None);
        stats["inputs"][0]["fatal_error"]
            .as_str()
            .is_some_and(|e| e.contains("'end_snapshot_id'"))
    });
    assert_eq!(summary(&s, "never"), "0 null null");
}
