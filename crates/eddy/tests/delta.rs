//! `delta_table_output` against Delta tables in a local folder and in a
//! real S3 server (moto's), read back by the test itself: a replay of the
//! table's JSON log (`add` and `remove` actions) and the Parquet files it
//! names, so the check does not go through the library that wrote them.
//! `delta_table_input` reads tables the test writes with delta-rs, and
//! deletion vectors written by Delta's kernel into commits as Spark writes
//! them.

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

/// The `add` actions of version `version` of the table at `table`.
fn added(table: &Path, version: u64) -> Vec<Value> {
    let commit = std::fs::read(table.join(format!("_delta_log/{version:020}.json"))).unwrap();
    commit
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            serde_json::from_slice::<Value>(l)
                .unwrap()
                .get("add")
                .cloned()
        })
        .collect()
}

/// A Delta table the test writes with delta-rs: `id BIGINT`, `name`, and
/// the partition column `part`.
struct Lake {
    table: deltalake_core::DeltaTable,
    rt: tokio::runtime::Runtime,
}

impl Lake {
    fn create(path: &Path) -> Self {
        use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel as _;
        use deltalake_core::kernel::StructField;
        std::fs::create_dir_all(path).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let url = url::Url::from_directory_path(path).unwrap();
        let fields: Vec<StructField> = Self::schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().try_into_kernel().unwrap())
            .collect();
        let create = deltalake_core::operations::create::CreateBuilder::new()
            .with_location(url.as_str())
            .with_columns(fields)
            .with_partition_columns(["part"]);
        let table = rt
            .block_on(std::future::IntoFuture::into_future(create))
            .unwrap();
        Self { table, rt }
    }

    fn schema() -> std::sync::Arc<datafusion::arrow::datatypes::Schema> {
        use datafusion::arrow::datatypes::{DataType, Field, Schema};
        std::sync::Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("part", DataType::Utf8, true),
        ]))
    }

    /// Appends rows `ids` of partition `part` as one commit.
    fn append(&mut self, ids: std::ops::RangeInclusive<i64>, part: &str) {
        let names: Vec<String> = ids.clone().map(|i| format!("n{i}")).collect();
        let rows: Vec<(i64, &str, &str)> = ids
            .zip(&names)
            .map(|(i, n)| (i, n.as_str(), part))
            .collect();
        self.append_rows(&rows);
    }

    /// Appends `(id, name, part)` rows as one commit (a file for each
    /// partition).
    fn append_rows(&mut self, rows: &[(i64, &str, &str)]) {
        use datafusion::arrow::array::{Int64Array, StringArray};
        use deltalake_core::writer::{DeltaWriter, RecordBatchWriter};
        let batch = RecordBatch::try_new(
            Self::schema(),
            vec![
                std::sync::Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
                std::sync::Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
            ],
        )
        .unwrap();
        let table = &mut self.table;
        self.rt.block_on(async {
            let mut writer = RecordBatchWriter::for_table(table).unwrap();
            writer.write(batch).await.unwrap();
            writer.flush_and_commit(table).await.unwrap();
        });
    }

    /// Removes the files version `version` added, as one commit, without
    /// their partition values (`extendedFileMetadata` false).
    fn remove_version(&mut self, path: &Path, version: u64) {
        use deltalake_core::kernel::transaction::{CommitBuilder, TableReference};
        use deltalake_core::kernel::{Action, Remove};
        use deltalake_core::protocol::DeltaOperation;
        let removes: Vec<Action> = added(path, version)
            .into_iter()
            .map(|add| {
                Action::Remove(Remove {
                    path: add["path"].as_str().unwrap().to_string(),
                    data_change: true,
                    deletion_timestamp: Some(0),
                    extended_file_metadata: None,
                    // Left out, as a remove may (the reader finds them).
                    partition_values: None,
                    size: add["size"].as_i64(),
                    tags: None,
                    deletion_vector: None,
                    base_row_id: None,
                    default_row_commit_version: None,
                })
            })
            .collect();
        let table = &mut self.table;
        self.rt.block_on(async {
            let snapshot = table.snapshot().unwrap();
            let done = CommitBuilder::default()
                .with_actions(removes)
                .build(
                    Some(snapshot as &dyn TableReference),
                    table.log_store(),
                    DeltaOperation::Delete { predicate: None },
                )
                .await
                .unwrap();
            table.load_version(done.version()).await.unwrap();
        });
    }
}

/// Deletes rows of a Delta table's file as Spark does with deletion
/// vectors enabled: the vector (Delta's kernel frames it) in a file beside
/// the data, and a commit, written by hand as Spark writes one, that
/// removes the file with its old vector and adds it with the new one.
struct Deletions {
    table: std::path::PathBuf,
    /// The file's `add` action as first committed.
    add: Value,
    /// Its vector now.
    vector: Option<Value>,
}

impl Deletions {
    /// The one file `version` of the table at `table` added. Commits are
    /// made after the table's last; delta-rs does not write the table
    /// after them (its writer does not take the `deletionVectors`
    /// feature).
    fn of(table: &Path, version: u64) -> Self {
        let adds = added(table, version);
        assert_eq!(adds.len(), 1, "one file");
        Self {
            table: table.to_path_buf(),
            add: adds[0].clone(),
            vector: None,
        }
    }

    /// Commits the next version: the file's rows `rows` (indexes from 0)
    /// deleted, in a vector stored relative to the table (`u`, a z85 UUID)
    /// or at an absolute path (`p`).
    fn delete(&mut self, rows: &[u64], relative: bool) {
        use delta_kernel::actions::deletion_vector_writer::{
            KernelDeletionVector, StreamingDeletionVectorWriter,
        };
        let version = 1 + std::fs::read_dir(self.table.join("_delta_log"))
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".json")?.parse::<u64>().ok()
            })
            .max()
            .unwrap();
        let uuid = [version as u8; 16];
        let name = {
            let h: String = uuid.iter().map(|b| format!("{b:02x}")).collect();
            format!(
                "deletion_vector_{}-{}-{}-{}-{}.bin",
                &h[0..8],
                &h[8..12],
                &h[12..16],
                &h[16..20],
                &h[20..]
            )
        };
        let mut bytes = Vec::new();
        let mut writer = StreamingDeletionVectorWriter::new(&mut bytes);
        let mut dv = KernelDeletionVector::new();
        dv.add_deleted_row_indexes(rows.iter().copied());
        let written = writer.write_deletion_vector(dv).unwrap();
        writer.finalize().unwrap();
        let (storage, at) = if relative {
            std::fs::write(self.table.join(&name), &bytes).unwrap();
            ("u", z85::encode(uuid))
        } else {
            let file = self.table.join("vectors").join(&name);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, &bytes).unwrap();
            ("p", url::Url::from_file_path(&file).unwrap().to_string())
        };
        let vector = json!({
            "storageType": storage, "pathOrInlineDv": at, "offset": written.offset,
            "sizeInBytes": written.size_in_bytes, "cardinality": written.cardinality,
        });
        let mut remove = json!({
            "path": self.add["path"], "dataChange": true, "deletionTimestamp": 0,
            "extendedFileMetadata": true, "partitionValues": self.add["partitionValues"],
            "size": self.add["size"],
        });
        if let Some(old) = &self.vector {
            remove["deletionVector"] = old.clone();
        }
        let mut add = self.add.clone();
        add["deletionVector"] = vector.clone();
        add["dataChange"] = json!(true);
        let mut lines = vec![json!({"commitInfo": {"operation": "DELETE", "timestamp": 0}})];
        if self.vector.is_none() {
            lines.push(json!({"protocol": {
                "minReaderVersion": 3, "minWriterVersion": 7,
                "readerFeatures": ["deletionVectors"], "writerFeatures": ["deletionVectors"],
            }}));
        }
        lines.push(json!({ "remove": remove }));
        lines.push(json!({ "add": add }));
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let log = self.table.join(format!("_delta_log/{version:020}.json"));
        std::fs::write(log, text).unwrap();
        self.vector = Some(vector);
    }
}

/// The rows of Eddy's `items`, `id,name,part`.
fn items(s: &Server, pipeline: &str) -> Vec<String> {
    s.query(pipeline, "SELECT id, name, part FROM items ORDER BY id")
        .iter()
        .map(|r| {
            format!(
                "{},{},{}",
                r["id"],
                r["name"].as_str().unwrap(),
                r["part"].as_str().unwrap()
            )
        })
        .collect()
}

fn expected(ranges: &[(std::ops::RangeInclusive<i64>, &str)]) -> Vec<String> {
    let mut rows: Vec<(i64, String)> = ranges
        .iter()
        .flat_map(|(r, p)| r.clone().map(move |i| (i, format!("{i},n{i},{p}"))))
        .collect();
    rows.sort();
    rows.into_iter().map(|(_, r)| r).collect()
}

/// A new user's flow with `delta_table_input` in `snapshot_and_follow`:
/// the table's rows (partition values included), then appends and a
/// removed file as they are committed, a checkpoint, a commit, a SIGKILL, a
/// commit while the server is down and a restart: nothing lost or doubled.
/// A `snapshot` of an older version reads that version and ends.
#[test]
fn a_table_follows_a_delta_table() {
    let dir = scratch("delta-in");
    let path = dir.join("files/tables/items");
    let mut lake = Lake::create(&path);
    lake.append(1..=1000, "a");
    lake.append(1001..=1500, "b");
    let connector = |config: Value| json!([{"name": "lake", "transport": {"name": "delta_table_input", "config": config}}]);
    let follow = connector(json!({"uri": "tables/items", "mode": "snapshot_and_follow"}));
    let sql = |c: &Value| {
        // A quote in the SQL string literal is doubled.
        let c = c.to_string().replace('\'', "''");
        format!(
            "CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR, part VARCHAR) \
             WITH ('materialized' = 'true', 'connectors' = '{c}');"
        )
    };
    let mut want = vec![(1..=1000, "a"), (1001..=1500, "b")];
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql(&follow),
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the snapshot", || items(&s, "p") == expected(&want));
        lake.append(2001..=2100, "a");
        want.push((2001..=2100, "a"));
        wait_until("an append", || items(&s, "p") == expected(&want));
        lake.remove_version(&path, 2);
        want.remove(1);
        wait_until("a removed file", || items(&s, "p") == expected(&want));
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // Following from the latest version, checkpointed before any row
        // comes: the version it chose is in the checkpoint, so what is
        // committed after it is read after a restart, not skipped.
        let changes = json!({
            "program_code": sql(&connector(json!({"uri": "tables/items", "mode": "follow"}))),
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/f", Some(&changes.to_string()));
        s.ok("POST", "/v0/pipelines/f/start", None);
        s.wait_start_recorded("f");
        s.ok("POST", "/v0/pipelines/f/checkpoint", None);
        lake.append(3001..=3010, "c");
        want.push((3001..=3010, "c"));
        wait_until("after the checkpoint", || {
            items(&s, "p") == expected(&want) && items(&s, "f") == expected(&[(3001..=3010, "c")])
        });
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        assert_eq!(
            stats["inputs"][0]["metrics"]["num_transport_errors"], 0,
            "{stats}"
        );
        // SIGKILL: the server is dropped.
    }
    lake.append(4001..=4005, "d");
    want.push((4001..=4005, "d"));
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
    wait_until("nothing lost or doubled", || {
        items(&s, "p") == expected(&want)
    });
    wait_until("the followed changes since its start", || {
        s.ok("GET", "/v0/pipelines/f", None)["deployment_status"] == "Running"
            && items(&s, "f") == expected(&[(3001..=3010, "c"), (4001..=4005, "d")])
    });
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
    s.ok("POST", "/v0/pipelines/f/stop?force=true", None);

    let snapshot = connector(
        json!({"uri": "tables/items", "mode": "snapshot", "version": 2, "filter": "id <= 1200 AND part IN ('a', 'b')"}),
    );
    s.deploy("old", &sql(&snapshot));
    s.ok("POST", "/v0/pipelines/old/start", None);
    wait_until("version 2, filtered, and the end of input", || {
        let stats = s.ok("GET", "/v0/pipelines/old/stats", None);
        stats["inputs"][0]["metrics"]["end_of_input"] == true
            && items(&s, "old") == expected(&[(1..=1000, "a"), (1001..=1200, "b")])
    });
    let stats = s.ok("GET", "/v0/pipelines/old/stats", None);
    assert_eq!(
        stats["inputs"][0]["metrics"]["total_records"], 1200,
        "the rows fed are counted, not those the filter left out: {stats}"
    );

    // `datetime`: the version committed last at or before a time (by the
    // time its log entry was written): version k written on day k of 2024.
    let day = std::time::Duration::from_secs(86_400);
    let new_year = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_704_067_200);
    for entry in std::fs::read_dir(path.join("_delta_log")).unwrap() {
        let entry = entry.unwrap().path();
        let Some(version) = entry
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let file = std::fs::File::options().write(true).open(&entry).unwrap();
        file.set_modified(new_year + day * version).unwrap();
    }
    let as_of = connector(
        json!({"uri": "tables/items", "mode": "snapshot", "datetime": "2024-01-03T12:00:00+00:00"}),
    );
    s.deploy("asof", &sql(&as_of));
    s.ok("POST", "/v0/pipelines/asof/start", None);
    wait_until("version 2, as of January 3rd", || {
        items(&s, "asof") == expected(&[(1..=1000, "a"), (1001..=1500, "b")])
    });
    let both = connector(
        json!({"uri": "tables/items", "mode": "snapshot", "version": 1,
        "datetime": "2024-01-03T12:00:00+00:00"}),
    );
    s.deploy_refused("both", &sql(&both), "not both");
    let bad = connector(json!({"uri": "tables/items", "mode": "snapshot", "datetime": "Jan 3"}));
    s.deploy_refused("bad", &sql(&bad), "RFC 3339");
}

/// Mode `cdc`: a Delta table as a log of changes to a table with a
/// primary key, `part = 'd'` marking deletions and `name` ordering them
/// within a commit (against the order of its files, either way); a commit
/// that rewrites a file with a deletion vector brings no event (removed
/// rows are not retracted, and the rows kept are not applied again); a
/// kill and a restart lose and double nothing; `end_version` ends it.
#[test]
fn a_table_follows_a_delta_change_log() {
    let dir = scratch("delta-cdc");
    let path = dir.join("files/tables/items");
    let mut lake = Lake::create(&path);
    lake.append_rows(&[(1, "a1", "i"), (2, "a2", "i"), (3, "a3", "i")]);
    let config = json!({"uri": "tables/items", "mode": "cdc", "version": 0, "end_version": 3,
        "cdc_delete_filter": "part = 'd'", "cdc_order_by": "name"});
    let connector =
        json!([{"name": "lake", "transport": {"name": "delta_table_input", "config": config}}]);
    // A quote in the SQL string literal is doubled.
    let connector = connector.to_string().replace('\'', "''");
    let sql = format!(
        "CREATE TABLE items (id BIGINT NOT NULL PRIMARY KEY, name VARCHAR, part VARCHAR) \
         WITH ('materialized' = 'true', 'connectors' = '{connector}');"
    );
    let rows = |s: &Server| -> Vec<String> {
        s.query("p", "SELECT id, name FROM items ORDER BY id")
            .iter()
            .map(|r| format!("{}:{}", r["id"], r["name"].as_str().unwrap()))
            .collect()
    };
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the first commit's insertions", || {
            rows(&s) == ["1:a1", "2:a2", "3:a3"]
        });
        // By name: delete 2, delete 4 (absent), insert 4, insert 6,
        // delete 6. Either order of the two files gives another table.
        lake.append_rows(&[
            (2, "b1", "d"),
            (4, "b2", "d"),
            (4, "b3", "i"),
            (6, "b4", "i"),
            (6, "b5", "d"),
        ]);
        wait_until("the second commit's events in order", || {
            rows(&s) == ["1:a1", "3:a3", "4:b3"]
        });
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // SIGKILL: the server is dropped.
    }
    // Version 3 hides row 0 of version 1's file (id 1) with a deletion
    // vector: its rows are removed and added again, less id 1.
    Deletions::of(&path, 1).delete(&[0], true);
    let s = Server::start(&dir, None);
    wait_until("the end of the log", || {
        let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
        stats["inputs"][0]["metrics"]["end_of_input"] == true
    });
    assert_eq!(rows(&s), ["1:a1", "3:a3", "4:b3"]);
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(
        stats["inputs"][0]["metrics"]["num_transport_errors"], 0,
        "{stats}"
    );

    let refused = |config: Value, why: &str| {
        let c =
            json!([{"name": "lake", "transport": {"name": "delta_table_input", "config": config}}]);
        let c = c.to_string().replace('\'', "''");
        s.deploy_refused(
            "r",
            &format!("CREATE TABLE items (id BIGINT, name VARCHAR, part VARCHAR) WITH ('connectors' = '{c}');"),
            why,
        );
    };
    refused(
        json!({"uri": "tables/items", "mode": "follow", "cdc_order_by": "name"}),
        "goes with mode 'cdc'",
    );
    refused(
        json!({"uri": "tables/items", "mode": "cdc", "cdc_order_by": "nmae"}),
        "cdc_order_by",
    );
    refused(
        json!({"uri": "tables/items", "mode": "cdc", "cdc_delete_filter": "name"}),
        "BOOLEAN",
    );
    refused(
        json!({"uri": "tables/items", "mode": "cdc", "cdc_order_by": "name; DROP TABLE items"}),
        "cdc_order_by",
    );
}

/// A Delta table whose rows are deleted by deletion vectors, as Spark and
/// Databricks delete by default: the snapshot leaves the deleted rows out,
/// a later commit deleting more retracts those only, and a kill and a
/// restart with another deletion committed while the server is down lose
/// and double nothing. A vector that does not match its file stops the
/// connector with an error, never feeding deleted rows.
#[test]
fn deletion_vectors_leave_deleted_rows_out() {
    let dir = scratch("delta-dv");
    let path = dir.join("files/tables/items");
    let mut lake = Lake::create(&path);
    lake.append(1..=10, "a");
    let mut deletions = Deletions::of(&path, 1);
    // Rows 1 and 4 of the file: ids 2 and 5.
    deletions.delete(&[1, 4], true);
    let ids = |gone: &[i64]| {
        let live: Vec<(std::ops::RangeInclusive<i64>, &str)> = (1..=10)
            .filter(|i| !gone.contains(i))
            .map(|i| (i..=i, "a"))
            .collect();
        expected(&live)
    };
    let connector = json!([{"name": "lake", "transport": {"name": "delta_table_input",
        "config": {"uri": "tables/items", "mode": "snapshot_and_follow"}}}]);
    let sql = format!(
        "CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR, part VARCHAR) \
         WITH ('materialized' = 'true', 'connectors' = '{connector}');"
    );
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the snapshot without deleted rows", || {
            items(&s, "p") == ids(&[2, 5])
        });
        deletions.delete(&[1, 4, 7], false);
        wait_until("a row deleted later", || items(&s, "p") == ids(&[2, 5, 8]));
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // SIGKILL: the server is dropped.
    }
    deletions.delete(&[0, 1, 4, 7], true);
    let s = Server::start(&dir, None);
    wait_until("nothing lost or doubled", || {
        items(&s, "p") == ids(&[1, 2, 5, 8])
    });
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(
        stats["inputs"][0]["metrics"]["num_transport_errors"], 0,
        "{stats}"
    );

    // A vector whose size is not the one its file holds.
    let vectors: Vec<_> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    for v in &vectors {
        let mut bytes = std::fs::read(v).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(v, bytes).unwrap();
    }
    s.ok("POST", "/v0/pipelines/p/stop?force=true", None);
    let snapshot = json!([{"name": "lake", "transport": {"name": "delta_table_input",
        "config": {"uri": "tables/items", "mode": "snapshot"}}}]);
    s.deploy(
        "damaged",
        &format!(
            "CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR, part VARCHAR) \
             WITH ('materialized' = 'true', 'connectors' = '{snapshot}');"
        ),
    );
    s.ok("POST", "/v0/pipelines/damaged/start", None);
    wait_until("the damaged vector reported", || {
        let stats = s.ok("GET", "/v0/pipelines/damaged/stats", None);
        stats["inputs"][0]["metrics"]["num_transport_errors"] != 0
            && stats["inputs"][0]["fatal_error"]
                .as_str()
                .is_some_and(|e| e.contains("deletion vector"))
    });
    assert!(
        items(&s, "damaged").is_empty(),
        "no row of a file whose vector is damaged"
    );
}

/// The files of a folder, recursively, as paths relative to it: data
/// files before the log's, as a writer uploads them.
fn files_under(root: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort_by_key(|p| (p.starts_with("_delta_log"), p.clone()));
    out
}

/// `delta_table_input` on S3 (moto's server): a table written with
/// delta-rs, copied to a bucket as it is, read in `snapshot_and_follow`;
/// a later commit that deletes rows with a deletion vector (its vector
/// uploaded before its log entry) is followed.
#[test]
fn a_delta_table_in_s3_is_read_and_followed() {
    let moto = Moto::start();
    moto.create_bucket("lake");
    let dir = scratch("delta-s3-in");
    let local = dir.join("work/items");
    let mut lake = Lake::create(&local);
    lake.append(1..=100, "a");
    lake.append(101..=150, "b");
    let upload = || {
        for file in files_under(&local) {
            let key = format!("items/{}", file.to_str().unwrap());
            moto.put("lake", &key, &std::fs::read(local.join(&file)).unwrap());
        }
    };
    upload();
    let connector = json!([{"name": "lake", "transport": {"name": "delta_table_input", "config": {
        "uri": "s3://lake/items", "mode": "snapshot_and_follow", "aws_endpoint": moto.url,
        "aws_access_key_id": "eddy", "aws_secret_access_key": "eddy-secret",
        "aws_region": "us-east-1", "aws_allow_http": "true"}}}]);
    let sql = format!(
        "CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR, part VARCHAR) \
         WITH ('materialized' = 'true', 'connectors' = '{connector}');"
    );
    let s = Server::start(&dir, None);
    s.deploy("p", &sql);
    s.ok("POST", "/v0/pipelines/p/start", None);
    wait_until("the snapshot from S3", || {
        items(&s, "p") == expected(&[(1..=100, "a"), (101..=150, "b")])
    });
    // Rows 0 and 1 of version 1's file: ids 1 and 2.
    Deletions::of(&local, 1).delete(&[0, 1], true);
    upload();
    wait_until("the deletion followed", || {
        items(&s, "p") == expected(&[(3..=100, "a"), (101..=150, "b")])
    });
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(stats["inputs"][0]["fatal_error"], Value::Null, "{stats}");
}

/// `snapshot_filter` with `snapshot_and_follow`: the snapshot keeps the
/// rows it holds for; a file of the snapshot removed later retracts those
/// rows only (never rows it left out), before and after a restart, while
/// files added after the snapshot come and go whole.
#[test]
fn a_filtered_snapshot_is_followed() {
    let dir = scratch("delta-snapshot-filter");
    let path = dir.join("files/tables/items");
    let mut lake = Lake::create(&path);
    lake.append(1..=10, "a");
    lake.append(11..=20, "b");
    let connector = json!([{"name": "lake", "transport": {"name": "delta_table_input", "config": {
        "uri": "tables/items", "mode": "snapshot_and_follow", "snapshot_filter": "id % 2 = 0"}}}]);
    let sql = format!(
        "CREATE TABLE items (id BIGINT NOT NULL, name VARCHAR, part VARCHAR) \
         WITH ('materialized' = 'true', 'connectors' = '{connector}');"
    );
    let ids = |s: &Server| -> Vec<i64> {
        s.query("p", "SELECT id FROM items ORDER BY id")
            .iter()
            .map(|r| r["id"].as_i64().unwrap())
            .collect()
    };
    let evens = |r: std::ops::RangeInclusive<i64>| r.filter(|i| i % 2 == 0).collect::<Vec<_>>();
    {
        let s = Server::start(&dir, None);
        let body = json!({
            "program_code": sql,
            "runtime_config": {"fault_tolerance": {"model": "exactly_once", "checkpoint_interval_secs": 3600}},
        });
        s.ok("PUT", "/v0/pipelines/p", Some(&body.to_string()));
        s.ok("POST", "/v0/pipelines/p/start", None);
        wait_until("the filtered snapshot", || ids(&s) == evens(1..=20));
        // Version 1's file leaves: its even rows go, its odd ones were
        // never there.
        lake.remove_version(&path, 1);
        wait_until("a snapshot file removed", || ids(&s) == evens(11..=20));
        lake.append(21..=22, "c");
        wait_until("a file added after the snapshot, whole", || {
            ids(&s) == [12, 14, 16, 18, 20, 21, 22]
        });
        s.ok("POST", "/v0/pipelines/p/checkpoint", None);
        // SIGKILL: the server is dropped.
    }
    let s = Server::start(&dir, None);
    wait_until("running again", || {
        s.ok("GET", "/v0/pipelines/p", None)["deployment_status"] == "Running"
    });
    // After the restart the snapshot's files are told apart again.
    lake.remove_version(&path, 2);
    wait_until("the other snapshot file removed", || ids(&s) == [21, 22]);
    lake.remove_version(&path, 4);
    wait_until("the later file removed, whole", || ids(&s).is_empty());
    let stats = s.ok("GET", "/v0/pipelines/p/stats", None);
    assert_eq!(
        stats["inputs"][0]["metrics"]["num_transport_errors"], 0,
        "{stats}"
    );
    // A table with a negative count would show rows never inserted.
    assert_eq!(
        s.query("p", "SELECT COUNT(*) AS n FROM items"),
        vec![json!({"n": 0})]
    );
}

/// A table with Delta's column mapping (mode `name`), written as Spark
/// writes one: files name their columns by physical names (`col-a`, …;
/// the later file with Parquet field ids too), partition values are keyed
/// by them, and a rename changes only the schema. The table is read by
/// its logical names, before and after the rename, and followed.
#[test]
fn column_mapped_tables_are_read_by_logical_names() {
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let dir = scratch("delta-mapped");
    let table = dir.join("files/tables/mapped");
    std::fs::create_dir_all(table.join("_delta_log")).unwrap();
    std::fs::create_dir_all(table.join("col-c=x")).unwrap();
    let field = |name: &str, t: &str, id: u32, physical: &str| {
        json!({"name": name, "type": t, "nullable": name != "id", "metadata": {
            "delta.columnMapping.id": id, "delta.columnMapping.physicalName": physical}})
    };
    let metadata = |second: &str| {
        let schema = json!({"type": "struct", "fields": [
            field("id", "long", 1, "col-a"), field(second, "string", 2, "col-b"),
            field("part", "string", 3, "col-c")]});
        json!({"metaData": {"id": "6d9c54a3-8d6f-4c1a-9d43-6b2e3c0e5a11",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": schema.to_string(), "partitionColumns": ["part"],
            "configuration": {"delta.columnMapping.mode": "name", "delta.columnMapping.maxColumnId": "3"},
            "createdTime": 0}})
    };
    let commit = |version: u64, actions: &[Value]| {
        let text: String = actions.iter().map(|a| format!("{a}\n")).collect();
        std::fs::write(table.join(format!("_delta_log/{version:020}.json")), text).unwrap();
    };
    // A data file of rows `ids`, its columns by physical names.
    let file = |name: &str, ids: std::ops::RangeInclusive<i64>, field_ids: bool| -> Value {
        let with_id = |f: Field, id: &str| {
            if field_ids {
                f.with_metadata([("PARQUET:field_id".to_string(), id.to_string())].into())
            } else {
                f
            }
        };
        let schema = std::sync::Arc::new(Schema::new(vec![
            with_id(Field::new("col-a", DataType::Int64, false), "1"),
            with_id(Field::new("col-b", DataType::Utf8, true), "2"),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                std::sync::Arc::new(Int64Array::from_iter_values(ids.clone())),
                std::sync::Arc::new(StringArray::from_iter_values(ids.map(|i| format!("v{i}")))),
            ],
        )
        .unwrap();
        let path = format!("col-c=x/{name}");
        let out = std::fs::File::create(table.join(&path)).unwrap();
        let mut w = parquet::arrow::ArrowWriter::try_new(out, schema, None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        let size = std::fs::metadata(table.join(&path)).unwrap().len();
        json!({"add": {"path": path, "partitionValues": {"col-c": "x"}, "size": size,
            "modificationTime": 0, "dataChange": true}})
    };
    commit(
        0,
        &[
            json!({"protocol": {"minReaderVersion": 2, "minWriterVersion": 5}}),
            metadata("name"),
        ],
    );
    commit(1, &[file("f1.parquet", 1..=3, false)]);
    // The rename: the schema only.
    commit(2, &[metadata("label")]);
    let connector = json!([{"name": "lake", "transport": {"name": "delta_table_input", "config": {
        "uri": "tables/mapped", "mode": "snapshot_and_follow"}}}]);
    let sql = format!(
        "CREATE TABLE items (id BIGINT NOT NULL, label VARCHAR, part VARCHAR) \
         WITH ('materialized' = 'true', 'connectors' = '{connector}');"
    );
    let rows = |s: &Server| -> Vec<String> {
        s.query("p", "SELECT id, label, part FROM items ORDER BY id")
            .iter()
            .map(|r| format!("{},{},{}", r["id"], r["label"], r["part"]))
            .collect()
    };
    let s = Server::start(&dir, None);
    s.deploy("p", &sql);
    s.ok("POST", "/v0/pipelines/p/start", None);
    wait_until("the snapshot by logical names", || {
        rows(&s) == ["1,\"v1\",\"x\"", "2,\"v2\",\"x\"", "3,\"v3\",\"x\""]
    });
    commit(3, &[file("f2.parquet", 4..=5, true)]);
    wait_until("a file with field ids followed", || rows(&s).len() == 5);
    assert_eq!(rows(&s)[4], "5,\"v5\",\"x\"");
}
