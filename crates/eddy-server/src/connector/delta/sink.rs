//! `delta_table_output`: a view's changes appended to a Delta Lake table as
//! a change log, as Feldera's connector writes it: each row with
//! `__feldera_op` (`i` inserted, `d` deleted, or `u` for a key both deleted
//! and inserted in a step, when the connector names the view's index) and
//! `__feldera_ts` (microseconds since 1970, rising with every step), for a
//! `MERGE INTO` to fold into a table of current rows.
//!
//! Each step that changes the view is one Delta commit of new Parquet
//! files, carrying a transaction action (`txn`) with the connector's
//! application id (`eddy-<pipeline>-<connector>`) and the commit's number.
//! `mode` is Feldera's: `append` (create the table if missing), `truncate`
//! (empty it at a fresh start), `error_if_exists` (refuse an existing
//! table at a fresh start); a new table gets `checkpoint_interval`,
//! `log_retention_duration` and `enable_expired_log_cleanup` as its
//! properties.
//!
//! Exactly once (which Feldera's connector does not offer): a checkpoint
//! records the number of the last commit; a pipeline resumed from it first
//! removes the files of its later commits (found by their `txn` in the
//! log), which the replayed steps write again. A commit that fails waits in
//! an [`Outbox`] and is tried again; a retry first asks the table whether
//! the commit went through after all (its `txn`), so none is doubled.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};
use deltalake_core::kernel::engine::arrow_conversion::TryIntoKernel as _;
use deltalake_core::kernel::transaction::{CommitBuilder, CommitProperties, TableReference};
use deltalake_core::kernel::{Action, Remove, StructField, Transaction};
use deltalake_core::logstore::LogStoreRef;
use deltalake_core::operations::create::CreateBuilder;
use deltalake_core::protocol::{DeltaOperation, SaveMode};
use deltalake_core::writer::{DeltaWriter, RecordBatchWriter};
use deltalake_core::{DeltaTable, DeltaTableError};

use eddy_dbsp::ZSet;
use serde::Deserialize;
use serde_json::Value;

use super::{delta_fields, Location};
use crate::connector::blocking::block_on;
use crate::connector::changelog;
use crate::connector::outbox::Outbox;
use crate::connector::{CheckContext, ConnectorSpec, OutputContext, Transport};
use crate::runner::{Sink, SinkStatus};

/// The change log's columns.
const OP: &str = "__feldera_op";
const TS: &str = "__feldera_ts";

/// What to do with a table already there, at a fresh start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Append,
    Truncate,
    ErrorIfExists,
}

/// `delta_table_output`'s configuration (Feldera's): the connector's
/// settings, and `object_store`'s for an S3 table beside them.
#[derive(Debug, Clone, Deserialize)]
pub struct DeltaOutput {
    /// The table.
    uri: String,
    mode: Mode,
    /// Properties of a table the connector creates.
    checkpoint_interval: Option<u64>,
    log_retention_duration: Option<String>,
    enable_expired_log_cleanup: Option<bool>,
    // Retries are unbounded (the outbox) and a step is one writer.
    #[serde(rename = "max_retries")]
    _max_retries: Option<u64>,
    #[serde(rename = "threads")]
    _threads: Option<u64>,
    /// The object store's settings.
    #[serde(flatten)]
    storage: BTreeMap<String, Value>,
}

impl Transport for DeltaOutput {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        Location::read(&self.uri, &self.storage, cx.files)?;
        delta_fields(cx.columns)?;
        if let Some(c) = [OP, TS].into_iter().find(|c| cx.columns.find(c).is_some()) {
            return Err(format!(
                "the view has a column '{c}', which the change log writes"
            ));
        }
        if let Some(d) = &self.log_retention_duration {
            let parts: Vec<&str> = d.split_whitespace().collect();
            let ok = matches!(parts.as_slice(), ["interval", n, _unit] if n.parse::<u64>().is_ok());
            if !ok {
                return Err(format!(
                    "'log_retention_duration': '{d}' is not \"interval <N> <unit>\""
                ));
            }
        }
        Ok(())
    }

    fn open_output(
        &self,
        spec: &ConnectorSpec,
        cx: OutputContext<'_>,
    ) -> Result<Box<dyn Sink>, String> {
        let location = Location::read(&self.uri, &self.storage, cx.files)?;
        let log_store = location.log_store(cx.files)?;
        let fields = delta_fields(cx.columns)?;
        let mut columns: Vec<Field> = fields.iter().map(|f| f.as_ref().clone()).collect();
        columns.push(Field::new(OP, DataType::Utf8, false));
        columns.push(Field::new(TS, DataType::Int64, false));
        let app_id = format!("eddy-{}-{}", cx.pipeline, spec.name);
        // A resumed pipeline keeps the table (whatever the mode); exactly
        // once, it also cuts it back to the checkpoint's commit.
        let resumed = cx.resume.map(|(_, p)| {
            p.get("commits")
                .and_then(Value::as_i64)
                .filter(|_| cx.exactly_once)
        });
        let key = match &spec.index {
            Some(index) => Some(
                index
                    .columns
                    .iter()
                    .map(|k| {
                        cx.columns
                            .find(k)
                            .map(|(i, _)| i)
                            .ok_or(format!("no column '{k}'"))
                    })
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        let open = Open {
            log_store,
            columns,
            mode: self.mode,
            properties: self.properties(),
            app_id: app_id.clone(),
            resumed,
        };
        let (table, commits) = block_on(open.run())?;
        let writer = RecordBatchWriter::for_table(&table).map_err(|e| e.to_string())?;
        let schema = writer.arrow_schema();
        Ok(Box::new(DeltaSink {
            state: Some(State { table, writer }),
            schema,
            app_id,
            key,
            commits,
            last_ts: 0,
            unsure: None,
            outbox: Outbox::default(),
            left_out: None,
        }))
    }
}

impl DeltaOutput {
    /// The properties of a table the connector creates.
    fn properties(&self) -> HashMap<String, Option<String>> {
        let mut p = HashMap::new();
        let interval = self.checkpoint_interval.unwrap_or(10);
        p.insert(
            "delta.checkpointInterval".into(),
            Some(interval.to_string()),
        );
        if let Some(d) = &self.log_retention_duration {
            p.insert("delta.logRetentionDuration".into(), Some(d.clone()));
        }
        if let Some(c) = self.enable_expired_log_cleanup {
            p.insert("delta.enableExpiredLogCleanup".into(), Some(c.to_string()));
        }
        p
    }
}

/// Opening a table: what it needs.
struct Open {
    log_store: LogStoreRef,
    columns: Vec<Field>,
    mode: Mode,
    properties: HashMap<String, Option<String>>,
    app_id: String,
    /// Resumed from a checkpoint: its commit number when exactly once.
    resumed: Option<Option<i64>>,
}

impl Open {
    /// The table, made or emptied as the mode says (or cut back to the
    /// checkpoint), and the number of the connector's last commit.
    async fn run(self) -> Result<(DeltaTable, i64), String> {
        let err = |e: DeltaTableError| e.to_string();
        let mut table = DeltaTable::new(self.log_store.clone());
        // Asked first: loading a table that is not there logs an error.
        let exists = self
            .log_store
            .is_delta_table_location()
            .await
            .map_err(|e| format!("reading the Delta table: {e}"))?;
        if exists {
            table
                .load()
                .await
                .map_err(|e| format!("reading the Delta table: {e}"))?;
        }
        let create = |mode: SaveMode| {
            let fields: Result<Vec<StructField>, _> = self
                .columns
                .iter()
                .map(|f| {
                    let kernel: Result<StructField, _> = f.try_into_kernel();
                    kernel.map_err(|e| format!("column '{}': {e}", f.name()))
                })
                .collect();
            fields.map(|f| {
                CreateBuilder::new()
                    .with_log_store(self.log_store.clone())
                    .with_columns(f)
                    .with_configuration(self.properties.clone())
                    .with_save_mode(mode)
            })
        };
        if let Some(keep) = self.resumed {
            if !exists {
                let table = create(SaveMode::ErrorIfExists)?.await.map_err(err)?;
                return Ok((table, keep.unwrap_or(0)));
            }
            let Some(keep) = keep else {
                let commits = last_commit(&table, &self.app_id).await?.unwrap_or(0);
                return Ok((table, commits));
            };
            cut_back(&mut table, &self.app_id, keep).await?;
            return Ok((table, keep));
        }
        let table = match (exists, self.mode) {
            (false, _) => create(SaveMode::ErrorIfExists)?.await.map_err(err)?,
            (true, Mode::ErrorIfExists) => {
                return Err("the Delta table exists (mode 'error_if_exists')".into())
            }
            (true, Mode::Truncate) => create(SaveMode::Overwrite)?.await.map_err(err)?,
            (true, Mode::Append) => table,
        };
        let commits = last_commit(&table, &self.app_id).await?.unwrap_or(0);
        Ok((table, commits))
    }
}

/// The number of the connector's last commit in the table, if any.
async fn last_commit(table: &DeltaTable, app_id: &str) -> Result<Option<i64>, String> {
    table
        .snapshot()
        .map_err(|e| e.to_string())?
        .transaction_version(table.log_store().as_ref(), app_id)
        .await
        .map_err(|e| e.to_string())
}

/// Removes the files the connector committed after its commit `keep`.
async fn cut_back(table: &mut DeltaTable, app_id: &str, keep: i64) -> Result<(), String> {
    let after = last_commit(table, app_id).await?;
    if after.is_none_or(|n| n <= keep) {
        return Ok(());
    }
    let log = table.log_store();
    let latest = table.version().unwrap_or(0);
    let now = now_micros() / 1000;
    let mut removes = Vec::new();
    for version in (0..=latest).rev() {
        let Some(bytes) = log
            .read_commit_entry(version)
            .await
            .map_err(|e| e.to_string())?
        else {
            // Cleaned up: commits past the checkpoint may be behind it.
            return Err(format!(
                "version {version}'s log entry is gone (log cleanup), so the commits after the checkpoint cannot all be found and removed"
            ));
        };
        let mut ours: Option<i64> = None;
        let mut adds = Vec::new();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let action: Value = serde_json::from_slice(line).map_err(|e| e.to_string())?;
            if let Some(txn) = action.get("txn") {
                if txn.get("appId").and_then(Value::as_str) == Some(app_id) {
                    ours = txn.get("version").and_then(Value::as_i64);
                }
            }
            if let Some(add) = action.get("add") {
                adds.push(add.clone());
            }
        }
        match ours {
            Some(n) if n > keep => {
                for add in adds {
                    let Some(path) = add["path"].as_str() else {
                        return Err(format!("version {version}: a file added without a path"));
                    };
                    removes.push(Action::Remove(Remove {
                        path: path.to_string(),
                        data_change: true,
                        deletion_timestamp: Some(now),
                        extended_file_metadata: Some(true),
                        partition_values: serde_json::from_value(add["partitionValues"].clone())
                            .ok(),
                        size: add["size"].as_i64(),
                        tags: None,
                        deletion_vector: None,
                        base_row_id: None,
                        default_row_commit_version: None,
                    }));
                }
            }
            Some(_) => break,
            None => {}
        }
    }
    tracing::info!(
        app_id,
        keep,
        files = removes.len(),
        "delta_table_output: removing the commits after the checkpoint"
    );
    removes.push(Action::Txn(Transaction::new(app_id, keep)));
    let snapshot = table.snapshot().map_err(|e| e.to_string())?;
    let done = CommitBuilder::from(CommitProperties::default())
        .with_actions(removes)
        .build(
            Some(snapshot as &dyn TableReference),
            table.log_store(),
            DeltaOperation::Delete { predicate: None },
        )
        .await
        .map_err(|e| e.to_string())?;
    table
        .load_version(done.version())
        .await
        .map_err(|e| e.to_string())
}

fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The table and its writer, moved into each asynchronous call.
struct State {
    table: DeltaTable,
    writer: RecordBatchWriter,
}

/// One step's rows, and the number its commit takes.
struct Commit {
    batch: RecordBatch,
    number: i64,
}

/// A view's changes appended to a Delta table.
struct DeltaSink {
    state: Option<State>,
    /// The table's columns, as written.
    schema: SchemaRef,
    app_id: String,
    /// The key's columns, by position, when the connector names an index.
    key: Option<Vec<usize>>,
    /// The number of the last commit made (or waiting).
    commits: i64,
    last_ts: i64,
    /// A commit whose attempt failed: it may have gone through.
    unsure: Option<i64>,
    outbox: Outbox<Commit>,
    /// Why the step being written left rows out (a key that is not
    /// unique), to report once the others are written.
    left_out: Option<String>,
}

impl DeltaSink {
    /// A step's change as change log rows ([`changelog::entries`]).
    fn rows(&mut self, changes: &ZSet) -> Result<RecordBatch, String> {
        let batch = changes.batch();
        let entries = changelog::entries(changes, self.key.as_deref())?;
        self.left_out = entries.duplicates_error();
        let picked: Vec<(u32, &'static str)> = entries
            .entries
            .into_iter()
            .map(|(i, op)| (i as u32, op.letter()))
            .collect();
        let indices = UInt32Array::from_iter_values(picked.iter().map(|(i, _)| *i));
        self.last_ts = now_micros().max(self.last_ts + 1);
        let n = picked.len();
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for field in self.schema.fields() {
            let column: ArrayRef = match field.name().as_str() {
                OP => Arc::new(StringArray::from_iter_values(
                    picked.iter().map(|(_, op)| *op),
                )),
                TS => Arc::new(Int64Array::from_value(self.last_ts, n)),
                name => {
                    let (i, _) = batch.schema().column_with_name(name).ok_or_else(|| {
                        format!("the Delta table has a column '{name}' the view lacks")
                    })?;
                    let taken = take(batch.column(i).as_ref(), &indices, None)
                        .map_err(|e| e.to_string())?;
                    cast(&taken, field.data_type()).map_err(|e| format!("column '{name}': {e}"))?
                }
            };
            columns.push(column);
        }
        RecordBatch::try_new(Arc::clone(&self.schema), columns).map_err(|e| e.to_string())
    }
}

/// Writes and commits one step, taking the state to the connectors'
/// runtime and back.
fn sender<'a>(
    state: &'a mut Option<State>,
    app_id: &'a str,
    unsure: &'a mut Option<i64>,
) -> impl FnMut(&Commit) -> Result<(), String> + 'a {
    move |commit| {
        let Some(mut s) = state.take() else {
            return Err("the Delta table is not open".into());
        };
        let (batch, number, app, check) = (
            commit.batch.clone(),
            commit.number,
            app_id.to_string(),
            *unsure == Some(commit.number),
        );
        let (s, result) = block_on(async move {
            let result = async {
                if check {
                    s.table.update_state().await.map_err(|e| e.to_string())?;
                    if last_commit(&s.table, &app)
                        .await?
                        .is_some_and(|n| n >= number)
                    {
                        return Ok(());
                    }
                }
                s.writer.write(batch).await.map_err(|e| e.to_string())?;
                let adds = s.writer.flush().await.map_err(|e| e.to_string())?;
                let actions: Vec<Action> = adds
                    .into_iter()
                    .map(Action::Add)
                    .chain([Action::Txn(Transaction::new(&app, number))])
                    .collect();
                let snapshot = s.table.snapshot().map_err(|e| e.to_string())?;
                let done = CommitBuilder::from(CommitProperties::default())
                    .with_actions(actions)
                    .build(
                        Some(snapshot as &dyn TableReference),
                        s.table.log_store(),
                        DeltaOperation::Write {
                            mode: SaveMode::Append,
                            partition_by: None,
                            predicate: None,
                        },
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                s.table
                    .load_version(done.version())
                    .await
                    .map_err(|e| e.to_string())
            }
            .await;
            (s, result)
        });
        *state = Some(s);
        match &result {
            Ok(()) => *unsure = None,
            Err(_) => *unsure = Some(number),
        }
        result.map_err(|e| format!("writing to the Delta table: {e}"))
    }
}

impl Sink for DeltaSink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        let batch = match self.rows(changes) {
            Ok(b) => b,
            Err(e) => return SinkStatus::Failed(e),
        };
        if batch.num_rows() == 0 {
            return SinkStatus::Written {
                records: 0,
                bytes: 0,
            };
        }
        self.commits += 1;
        let (records, bytes) = (
            batch.num_rows() as u64,
            batch.get_array_memory_size() as u64,
        );
        let commit = Commit {
            batch,
            number: self.commits,
        };
        let send = sender(&mut self.state, &self.app_id, &mut self.unsure);
        match (
            self.outbox.write(commit, records, bytes, send),
            self.left_out.take(),
        ) {
            (SinkStatus::Written { .. }, Some(e)) => SinkStatus::Failed(e),
            (status, _) => status,
        }
    }

    fn retry(&mut self) -> Option<SinkStatus> {
        let send = sender(&mut self.state, &self.app_id, &mut self.unsure);
        self.outbox.retry(send)
    }

    fn flush(&mut self) {
        let send = sender(&mut self.state, &self.app_id, &mut self.unsure);
        if let Err(e) = self.outbox.send_all(send) {
            tracing::warn!(error = %e, "delta_table_output: steps not written at shutdown; a recovery from the last checkpoint writes them");
        }
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        let send = sender(&mut self.state, &self.app_id, &mut self.unsure);
        self.outbox.send_all(send)?;
        Ok(Some(serde_json::json!({ "commits": self.commits })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_beside_the_stores() {
        let c: DeltaOutput = serde_json::from_value(serde_json::json!({
            "uri": "s3://b/t", "mode": "append", "aws_endpoint": "http://x", "threads": 2
        }))
        .unwrap();
        assert_eq!(c.mode, Mode::Append);
        assert_eq!(c.storage.len(), 1);
        assert!(serde_json::from_value::<DeltaOutput>(serde_json::json!({"uri": "t"})).is_err());
        assert!(serde_json::from_value::<DeltaOutput>(
            serde_json::json!({"uri": "t", "mode": "upsert"})
        )
        .is_err());
    }
}
