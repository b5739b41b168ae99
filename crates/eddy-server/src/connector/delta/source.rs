//! `delta_table_input`: a table fed from a Delta Lake table, with
//! Feldera's modes: `snapshot` (the rows of one version, then the end of
//! input), `follow` (the changes committed after a version: the rows of
//! each file added, inserted, and of each file removed, deleted),
//! `snapshot_and_follow` (both, the backfill pattern) and `cdc` (the log
//! after a version as a log of changes, [`super::cdc`]). `version` (or
//! `start_version`) picks the version, or `datetime` the last one
//! committed at or before a time, the latest by default; `end_version`
//! ends following once a version at or past it is read. `filter` keeps
//! the rows of the snapshot and of the log for which it holds (a
//! condition over the table's columns, [`crate::connector::filter`], of
//! constants only, so a row is judged the same when its file is added and
//! when it is removed); `snapshot_filter` those of the snapshot (with
//! `filter`): a file of the snapshot removed later is retracted under the
//! same filters, files added after it under `filter` alone.
//!
//! The snapshot's files are read in path order; the log one commit after
//! another, its data actions in order (`add` and `remove` with
//! `dataChange`; a compaction's, without it, change no row and are
//! skipped). A file's rows are read as Parquet straight into Arrow (see
//! [`crate::connector::parquet`]), its partition values added as columns;
//! columns are matched to the table's by name and cast, a missing one is
//! NULL. With Delta's column mapping, a file's columns (and partition
//! values) carry physical names and field ids that stay when a column is
//! renamed: they are given the logical names of the schema the file was
//! read under ([`super::mapping`]).
//!
//! Exactly once (Feldera's connector is at least once): a checkpoint
//! records the version, how many of its files (or of the next commit's
//! data actions) are in the state, and the rows of the one being read; a
//! resumed pipeline goes on from there. A new version is looked for every
//! second. A table, file or store that cannot be read is an error in the
//! connector's status, tried again with backoff.
//!
//! A file with a deletion vector ([`super::deletion`]) gives its rows but
//! those the vector deletes, in the snapshot and in the log: a commit that
//! deletes rows this way removes the file (with its old vector) and adds
//! it again (with the new one), so the rows newly deleted are retracted.
//! Positions count the file's rows, deleted ones included, so a resumed
//! read skips to the same place.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use deltalake_core::kernel::DeletionVectorDescriptor;
use deltalake_core::logstore::object_store::path::Path as ObjectPath;
use deltalake_core::logstore::object_store::ObjectStoreExt;
use deltalake_core::logstore::LogStoreRef;
use deltalake_core::DeltaTable;
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use datafusion::arrow::datatypes::{Schema, SchemaRef};

use super::cdc::Events;
use super::mapping::ColumnMapping;
use super::{deletion, Location};
use crate::connector::blocking::block_on;
use crate::connector::filter::RowFilter;
use crate::connector::parquet::{changes, feed, Rows};
use crate::connector::rounds::{self, Failure, Round, Rounds};
use crate::connector::{
    position, wait_while_paused, CheckContext, ConnectorSpec, FileAccess, InputContext, InputRun,
    Transport,
};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;
use eddy_dbsp::ZSet;
use eddy_io::parquet::BATCH_ROWS;

/// How often a followed table is asked for new versions.
const POLL: Duration = Duration::from_secs(1);

/// What to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Snapshot,
    Follow,
    SnapshotAndFollow,
    Cdc,
}

/// `delta_table_input`'s configuration (Feldera's), with `object_store`'s
/// settings for an S3 table beside it.
#[derive(Debug, Clone, Deserialize)]
pub struct DeltaInput {
    uri: String,
    mode: Mode,
    #[serde(alias = "start_version")]
    version: Option<i64>,
    end_version: Option<i64>,
    datetime: Option<String>,
    // Refused when given: not supported yet.
    transaction_mode: Option<String>,
    timestamp_column: Option<String>,
    filter: Option<String>,
    snapshot_filter: Option<String>,
    cdc_delete_filter: Option<String>,
    cdc_order_by: Option<String>,
    // Parallelism and retry settings: files are read one after another and
    // a failed read is tried again until it succeeds.
    #[serde(rename = "num_parsers")]
    _num_parsers: Option<u64>,
    #[serde(rename = "max_retries")]
    _max_retries: Option<u64>,
    #[serde(rename = "max_concurrent_readers")]
    _max_concurrent_readers: Option<u64>,
    #[serde(rename = "skip_unused_columns")]
    _skip_unused_columns: Option<bool>,
    #[serde(flatten)]
    storage: BTreeMap<String, Value>,
}

impl Transport for DeltaInput {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        Location::read(&self.uri, &self.storage, cx.files)?;
        let not_yet = |what: &str| Err(format!("{what} is not supported yet"));
        if let Some(at) = &self.datetime {
            if self.version.is_some() {
                return Err("give 'version' or 'datetime', not both".into());
            }
            datetime(at)?;
        }
        if self
            .transaction_mode
            .as_deref()
            .is_some_and(|m| m != "none")
        {
            return not_yet("a 'transaction_mode' but 'none'");
        }
        if self.timestamp_column.is_some() {
            return not_yet("'timestamp_column'");
        }
        if self.mode != Mode::Cdc {
            for (name, given) in [
                ("cdc_delete_filter", &self.cdc_delete_filter),
                ("cdc_order_by", &self.cdc_order_by),
            ] {
                if given.is_some() {
                    return Err(format!("'{name}' goes with mode 'cdc'"));
                }
            }
        }
        match self.mode {
            _ if self.snapshot_filter.is_none() => {}
            Mode::Follow | Mode::Cdc => {
                return Err("'snapshot_filter' goes with a mode that reads a snapshot".into())
            }
            Mode::Snapshot | Mode::SnapshotAndFollow => {}
        }
        let schema = Arc::new(Schema::new(cx.columns.clone()));
        self.filters(&schema)?;
        self.events(&schema)?;
        if self.end_version.is_some() && self.mode == Mode::Snapshot {
            return Err("'end_version' goes with a mode that follows the log".into());
        }
        if self.version.is_some_and(|v| v < 0) || self.end_version.is_some_and(|v| v < 0) {
            return Err("versions are not negative".into());
        }
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let at: DeltaPosition = position(cx.position)?;
        let location = Location::read(&self.uri, &self.storage, cx.files)?;
        let schema = cx
            .feeder
            .schema(&spec.relation)
            .map_err(|e| e.to_string())?;
        let filters = self.filters(schema)?;
        let events = self.events(schema)?;
        let mut source = Source {
            filters,
            events,
            config: self.clone(),
            spec: spec.clone(),
            location,
            files: cx.files.clone(),
            feeder: Arc::clone(cx.feeder),
            stats: cx.stats,
            at,
            log: None,
            filtered_files: None,
            mapping: None,
        };
        Ok(Some(Box::new(move || source.run())))
    }
}

impl DeltaInput {
    /// The filters of the snapshot (`snapshot_filter` and `filter`, both
    /// holding) and of the log (`filter`), compiled over the table's
    /// columns.
    fn filters(&self, schema: &SchemaRef) -> Result<Filters, String> {
        let snapshot = match (&self.snapshot_filter, &self.filter) {
            (Some(s), Some(f)) => Some(format!("({s}) AND ({f})")),
            (s, f) => s.clone().or(f.clone()),
        };
        let compile = |what: &str, sql: &Option<String>| {
            sql.as_deref()
                .map(|sql| RowFilter::new(what, sql, schema).map(Arc::new))
                .transpose()
        };
        Ok(Filters {
            snapshot: compile("snapshot_filter", &snapshot)?,
            log: compile("filter", &self.filter)?,
        })
    }
}

impl DeltaInput {
    /// How a commit's rows become events, in mode `cdc`.
    fn events(&self, schema: &SchemaRef) -> Result<Option<Events>, String> {
        (self.mode == Mode::Cdc)
            .then(|| {
                Events::new(
                    schema,
                    self.cdc_delete_filter.as_deref(),
                    self.cdc_order_by.as_deref(),
                )
            })
            .transpose()
    }
}

/// The rows read, of the snapshot and of the log.
struct Filters {
    snapshot: Option<Arc<RowFilter>>,
    log: Option<Arc<RowFilter>>,
}

/// How far the state holds the Delta table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeltaPosition {
    /// The version: the snapshot being read, or the log read through.
    /// `None` before the first is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    version: Option<i64>,
    /// Reading the snapshot of `version` (else following the log).
    #[serde(default)]
    snapshot: bool,
    /// Files of the snapshot, or data actions of the commit after
    /// `version`, in the state.
    #[serde(default)]
    done: usize,
    /// Rows of the next file in the state (in mode `cdc`: events of the
    /// commit after `version`).
    #[serde(default)]
    rows: u64,
    /// The version whose snapshot was read with `snapshot_filter`, while
    /// the log after it is followed: a file of that snapshot removed later
    /// is retracted under the filter its rows were read with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    filtered_snapshot: Option<i64>,
}

/// A data action of a commit: a file whose rows are inserted (`add`) or
/// deleted (`remove`).
#[derive(Debug, Clone, PartialEq)]
struct DataFile {
    /// Where it is, under the table (the log's path, decoded).
    path: ObjectPath,
    weight: i64,
    /// Its partition values; `None` when the action leaves them out (a
    /// `remove` may), to be found in the table's snapshot.
    partition_values: Option<Vec<(String, Option<String>)>>,
    /// The rows of the file deleted since it was written.
    deletion_vector: Option<DeletionVectorDescriptor>,
    /// A removed file whose rows were read with `snapshot_filter` (a file
    /// of the snapshot).
    read_filtered: bool,
}

/// What a commit does to the rows: its data actions, in order, and
/// whether it changes the schema (a `metaData` action).
struct Commit {
    files: Vec<DataFile>,
    changes_schema: bool,
}

impl Commit {
    /// Reads a commit (its JSON lines).
    fn read(bytes: &[u8]) -> Result<Self, String> {
        let mut out = Vec::new();
        let mut changes_schema = false;
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let action: Value =
                serde_json::from_slice(line).map_err(|e| format!("a log entry: {e}"))?;
            changes_schema |= action.get("metaData").is_some();
            let (a, weight) = match (action.get("add"), action.get("remove")) {
                (Some(a), _) => (a, 1),
                (_, Some(r)) => (r, -1),
                _ => continue,
            };
            if a.get("dataChange").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            let raw = a
                .get("path")
                .and_then(Value::as_str)
                .ok_or("a file action without a path")?;
            let path = ObjectPath::from_url_path(raw).map_err(|e| format!("'{raw}': {e}"))?;
            let partition_values = match a.get("partitionValues") {
                Some(Value::Object(m)) => Some(
                    m.iter()
                        .map(|(k, v)| (k.clone(), v.as_str().map(str::to_string)))
                        .collect(),
                ),
                _ => None,
            };
            out.push(DataFile {
                path,
                weight,
                partition_values,
                read_filtered: false,
                deletion_vector: match a.get("deletionVector") {
                    None | Some(Value::Null) => None,
                    Some(dv) => Some(
                        serde_json::from_value(dv.clone())
                            .map_err(|e| format!("'{raw}''s deletion vector: {e}"))?,
                    ),
                },
            });
        }
        Ok(Self {
            files: out,
            changes_schema,
        })
    }
}

/// A running connector.
struct Source {
    config: DeltaInput,
    filters: Filters,
    /// Mode `cdc`'s events.
    events: Option<Events>,
    spec: ConnectorSpec,
    location: Location,
    files: FileAccess,
    feeder: Arc<Feeder>,
    stats: Arc<EndpointStats>,
    at: DeltaPosition,
    log: Option<LogStoreRef>,
    /// The files of [`DeltaPosition::filtered_snapshot`] not removed
    /// since (by path), once a removal needs them.
    filtered_files: Option<HashSet<ObjectPath>>,
    /// The column mapping of the schema the files being read were written
    /// with (`None` inside: the table has none), once read.
    mapping: Option<Option<ColumnMapping>>,
}

impl Rounds for Source {
    fn round(&mut self) -> Result<Round, Failure> {
        self.read()
    }
}

impl Source {
    fn run(&mut self) {
        let (feeder, stats) = (Arc::clone(&self.feeder), Arc::clone(&self.stats));
        rounds::run(self, &feeder, &stats, "delta_table_input", POLL);
    }

    fn log_store(&mut self) -> Result<LogStoreRef, Failure> {
        if let Some(l) = &self.log {
            return Ok(l.clone());
        }
        let l = self
            .location
            .log_store(&self.files)
            .map_err(Failure::Retry)?;
        self.log = Some(l.clone());
        Ok(l)
    }

    /// Reads what there is: the snapshot, then the commits after it.
    fn read(&mut self) -> Result<Round, Failure> {
        let log = self.log_store()?;
        if self.at.version.is_none() {
            let version = match (self.config.version, &self.config.datetime) {
                (Some(v), _) => v,
                (None, Some(at)) => version_at(&log, datetime(at).map_err(Failure::Fatal)?)?,
                (None, None) => latest(&log)?,
            };
            let snapshot = matches!(self.config.mode, Mode::Snapshot | Mode::SnapshotAndFollow);
            self.at = DeltaPosition {
                version: Some(version),
                snapshot,
                ..DeltaPosition::default()
            };
            let position = serde_json::to_value(self.at).expect("a position");
            if !crate::connector::record_position(&self.feeder, &self.spec, position) {
                return Ok(Round::Stopped);
            }
        }
        let version = self.at.version.expect("chosen");
        if self.at.snapshot {
            if !self.read_snapshot(&log, version)? {
                return Ok(Round::Stopped);
            }
            if self.config.mode == Mode::Snapshot {
                return Ok(Round::Ended);
            }
            self.at = DeltaPosition {
                version: Some(version),
                filtered_snapshot: self.config.snapshot_filter.as_ref().map(|_| version),
                ..DeltaPosition::default()
            };
        }
        loop {
            let version = self.at.version.expect("chosen");
            if self.config.end_version.is_some_and(|end| version >= end) {
                return Ok(Round::Ended);
            }
            let next = version + 1;
            let l = log.clone();
            let entry = block_on(async move { l.read_commit_entry(next as _).await })
                .map_err(|e| Failure::Retry(format!("reading version {next}'s log entry: {e}")))?;
            let Some(bytes) = entry else {
                // No such version yet, unless a later one is there (the
                // entry was cleaned up, and its changes cannot be read).
                let l = log.clone();
                let newest = block_on(async move { l.get_latest_version(version as _).await })
                    .map_err(|e| Failure::Retry(format!("listing the table's log: {e}")))?;
                if newest as i64 > next {
                    return Err(Failure::Fatal(format!(
                        "version {next}'s log entry is gone (log cleanup): its changes cannot be read"
                    )));
                }
                return Ok(Round::Idle);
            };
            let Commit {
                mut files,
                changes_schema,
            } = Commit::read(&bytes).map_err(|e| Failure::Fatal(format!("version {next}: {e}")))?;
            if files.iter().any(|f| f.partition_values.is_none()) {
                find_partitions(&log, version, &mut files)?;
            }
            // A commit that changes the schema (a column renamed, added or
            // dropped) is read with its own.
            if self.mapping.is_none() || changes_schema {
                let at = if changes_schema { next } else { version };
                self.mapping = Some(
                    table_at(&log, at)
                        .map_err(|e| Failure::Retry(format!("reading version {at}: {e}")))?
                        .mapping,
                );
            }
            if let Some(Some(m)) = &self.mapping {
                m.name_partitions(files.iter_mut().filter_map(|f| f.partition_values.as_mut()));
            }
            self.mark_filtered(&log, version, &mut files)?;
            let filtered_snapshot = self.at.filtered_snapshot;
            if self.events.is_some() {
                if !self.read_events(&log, &files, version, &format!("version {next}"))? {
                    return Ok(Round::Stopped);
                }
            } else if !self.read_files(
                &log,
                &files,
                |done, rows| DeltaPosition {
                    version: Some(version),
                    snapshot: false,
                    done,
                    rows,
                    filtered_snapshot,
                },
                &format!("version {next}"),
            )? {
                return Ok(Round::Stopped);
            }
            if let Some(live) = &mut self.filtered_files {
                for f in files.iter().filter(|f| f.weight < 0) {
                    live.remove(&f.path);
                }
            }
            self.at = DeltaPosition {
                version: Some(next),
                filtered_snapshot,
                ..DeltaPosition::default()
            };
        }
    }

    /// Marks the files a commit after `version` removes that were read
    /// with `snapshot_filter`: those of the filtered snapshot not removed
    /// since. The set is made once (after a restart, from the snapshot's
    /// files less those the commits up to `version` removed).
    fn mark_filtered(
        &mut self,
        log: &LogStoreRef,
        version: i64,
        files: &mut [DataFile],
    ) -> Result<(), Failure> {
        let Some(snapshot) = self.at.filtered_snapshot else {
            return Ok(());
        };
        if files.iter().all(|f| f.weight > 0) {
            return Ok(());
        }
        if self.filtered_files.is_none() {
            let mut live: HashSet<ObjectPath> = table_at(log, snapshot)
                .map_err(|e| Failure::Retry(format!("reading version {snapshot}: {e}")))?
                .files
                .into_iter()
                .map(|f| f.path)
                .collect();
            for v in snapshot + 1..=version {
                let l = log.clone();
                let entry = block_on(async move { l.read_commit_entry(v as _).await })
                    .map_err(|e| Failure::Retry(format!("reading version {v}'s log entry: {e}")))?
                    .ok_or_else(|| {
                        Failure::Fatal(format!(
                            "version {v}'s log entry is gone (log cleanup): the rows of the snapshot of version {snapshot} it removed cannot be told apart"
                        ))
                    })?;
                let commit = Commit::read(&entry)
                    .map_err(|e| Failure::Fatal(format!("version {v}: {e}")))?;
                for f in commit.files.iter().filter(|f| f.weight < 0) {
                    live.remove(&f.path);
                }
            }
            self.filtered_files = Some(live);
        }
        let live = self.filtered_files.as_ref().expect("made above");
        for f in files.iter_mut().filter(|f| f.weight < 0) {
            f.read_filtered = live.contains(&f.path);
        }
        Ok(())
    }

    /// Reads the files of `version`'s snapshot, in path order; false if
    /// the pipeline stopped first.
    fn read_snapshot(&mut self, log: &LogStoreRef, version: i64) -> Result<bool, Failure> {
        let TableAt { mut files, mapping } = table_at(log, version)
            .map_err(|e| Failure::Retry(format!("reading version {version}: {e}")))?;
        files.sort_by(|a, b| a.path.as_ref().cmp(b.path.as_ref()));
        if let Some(m) = &mapping {
            m.name_partitions(files.iter_mut().filter_map(|f| f.partition_values.as_mut()));
        }
        self.mapping = Some(mapping);
        self.read_files(
            log,
            &files,
            |done, rows| DeltaPosition {
                version: Some(version),
                snapshot: true,
                done,
                rows,
                filtered_snapshot: None,
            },
            &format!("version {version}'s snapshot"),
        )
    }

    /// Feeds `files` from the position's on; false if the pipeline
    /// stopped first.
    fn read_files(
        &mut self,
        log: &LogStoreRef,
        files: &[DataFile],
        position: impl Fn(usize, u64) -> DeltaPosition,
        what: &str,
    ) -> Result<bool, Failure> {
        let snapshot = position(0, 0).snapshot;
        for (i, file) in files.iter().enumerate().skip(self.at.done) {
            let filter = if snapshot || file.read_filtered {
                self.filters.snapshot.clone()
            } else {
                self.filters.log.clone()
            };
            let (bytes, deleted) = self.fetch(log, file, what)?;
            let is_deleted = deleted.as_ref().map(|d| move |row: u64| d.contains(row));
            let position_of =
                |rows: u64| serde_json::to_value(position(i, rows)).expect("a position");
            let how = Rows {
                skip: self.at.rows,
                position_of: &position_of,
                filter: filter.as_deref(),
                deleted: is_deleted.as_ref().map(|d| d as &dyn Fn(u64) -> bool),
                ..self.rows_of(file)
            };
            // A file that cannot be read is read again (from the
            // position): going on would lose its rows.
            match feed(&self.spec, bytes, &self.feeder, &self.stats, how) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    self.at = position(i, e.rows);
                    return Err(Failure::Retry(e.error));
                }
            }
            self.at = position(i + 1, 0);
        }
        Ok(true)
    }
}

impl Source {
    /// How `file`'s rows are read, from its start, by what the file and
    /// the table say: its weight and partition values, the column mapping.
    fn rows_of<'a>(&'a self, file: &'a DataFile) -> Rows<'a> {
        let mapping = self.mapping.as_ref().and_then(Option::as_ref);
        Rows {
            skip: 0,
            weight: file.weight,
            constants: file.partition_values.as_deref().unwrap_or_default(),
            position_of: &|_| Value::Null,
            place: Some(file.path.as_ref()),
            field_ids: mapping.map(|m| &m.ids),
            name_mapping: mapping.map(|m| &m.physical),
            filter: None,
            deleted: None,
        }
    }

    /// A data file's bytes and the rows its deletion vector deletes.
    fn fetch(
        &self,
        log: &LogStoreRef,
        file: &DataFile,
        what: &str,
    ) -> Result<(bytes::Bytes, Option<roaring::RoaringTreemap>), Failure> {
        let deleted = match &file.deletion_vector {
            Some(dv) => Some(
                deletion::read(dv, &self.location.url, log.object_store(None))
                    .map_err(|f| f.map(|e| format!("{what}: '{}': {e}", file.path)))?,
            ),
            None => None,
        };
        let store = log.object_store(None);
        let path = file.path.clone();
        let bytes =
            block_on(async move { store.get(&path).await?.bytes().await }).map_err(|e| {
                let gone = matches!(
                    e,
                    deltalake_core::logstore::object_store::Error::NotFound { .. }
                );
                let message = format!("{what}: reading '{}': {e}", file.path);
                // A removed file that was vacuumed cannot be retracted.
                if gone && file.weight < 0 {
                    Failure::Fatal(message)
                } else {
                    Failure::Retry(message)
                }
            })?;
        Ok((bytes, deleted))
    }

    /// Mode `cdc`: feeds the events of the commit after `version` (its
    /// `files`), from the position's on; false if the pipeline stopped
    /// first. The position counts the commit's events fed.
    fn read_events(
        &mut self,
        log: &LogStoreRef,
        files: &[DataFile],
        version: i64,
        what: &str,
    ) -> Result<bool, Failure> {
        let Ok(schema) = self.feeder.schema(&self.spec.relation).cloned() else {
            return Ok(false);
        };
        let mut parts = Vec::new();
        for file in files {
            let (bytes, deleted) = self.fetch(log, file, what)?;
            let is_deleted = deleted.as_ref().map(|d| move |row: u64| d.contains(row));
            let how = Rows {
                filter: self.filters.log.as_deref(),
                deleted: is_deleted.as_ref().map(|d| d as &dyn Fn(u64) -> bool),
                ..self.rows_of(file)
            };
            changes(bytes, &schema, &self.stats, how, |c, _| {
                parts.push(c);
                true
            })
            .map_err(|e| Failure::Retry(e.error))?;
        }
        let fatal = |e: &dyn std::fmt::Display| Failure::Fatal(format!("{what}: {e}"));
        let mut rows = ZSet::concat(&schema, &parts).map_err(|e| fatal(&e))?;
        // The rows written less those taken away: only what is new.
        if files.iter().any(|f| f.weight < 0) {
            let net = rows.consolidate().map_err(|e| fatal(&e))?;
            let added: Vec<u32> = (0..net.len() as u32)
                .filter(|&i| net.weights()[i as usize] > 0)
                .collect();
            rows = net.take(&added).map_err(|e| fatal(&e))?;
        }
        let rows = rows.expand().map_err(|e| fatal(&e))?;
        let events = self.events.as_ref().expect("mode cdc");
        let (events, deletes) = events.order(rows).map_err(|e| fatal(&e))?;
        let mut at = self.at.rows as usize;
        while at < events.num_rows() {
            if !wait_while_paused(&self.feeder) {
                return Ok(false);
            }
            // A run of insertions or of deletions, at most a batch.
            let delete = deletes.value(at);
            let mut end = at + 1;
            while end < events.num_rows() && end - at < BATCH_ROWS && deletes.value(end) == delete {
                end += 1;
            }
            let run = events.slice(at, end - at);
            let weight = if delete { -1 } else { 1 };
            self.stats
                .records
                .fetch_add((end - at) as u64, std::sync::atomic::Ordering::Relaxed);
            let position = DeltaPosition {
                version: Some(version),
                rows: end as u64,
                ..DeltaPosition::default()
            };
            let origin = Origin::at(
                &self.spec.name,
                serde_json::to_value(position).expect("a position"),
            );
            if self
                .feeder
                .feed_blocking(&self.spec.relation, ZSet::with_weight(run, weight), origin)
                .is_err()
            {
                return Ok(false);
            }
            self.at = position;
            at = end;
        }
        Ok(true)
    }
}

/// A version of the table: its files, and its column mapping.
struct TableAt {
    files: Vec<DataFile>,
    mapping: Option<ColumnMapping>,
}

/// The files and the column mapping of `version`, from one load.
fn table_at(log: &LogStoreRef, version: i64) -> Result<TableAt, String> {
    let l = log.clone();
    block_on(async move {
        let mut table = DeltaTable::new(l.clone());
        table.load_version(version as _).await?;
        let snapshot = table.snapshot()?;
        let mapping = ColumnMapping::of(&snapshot.schema());
        let views: Vec<_> = snapshot
            .snapshot()
            .file_views(&l, None)
            .try_collect()
            .await?;
        let files = views
            .into_iter()
            .map(|f| DataFile {
                path: f.object_store_path(),
                weight: 1,
                partition_values: Some(f.partition_values_map().into_iter().collect()),
                deletion_vector: f.deletion_vector_descriptor(),
                read_filtered: false,
            })
            .collect();
        Ok::<_, deltalake_core::DeltaTableError>(TableAt { files, mapping })
    })
    .map_err(|e| e.to_string())
}

/// Gives the files whose action left their partition values out (a
/// `remove` may) those they have in `version`'s snapshot, where they are
/// live.
fn find_partitions(log: &LogStoreRef, version: i64, files: &mut [DataFile]) -> Result<(), Failure> {
    let live = table_at(log, version)
        .map_err(|e| Failure::Retry(format!("reading version {version}: {e}")))?
        .files;
    for file in files.iter_mut().filter(|f| f.partition_values.is_none()) {
        let found = live.iter().find(|l| l.path == file.path).ok_or_else(|| {
            Failure::Fatal(format!(
                "'{}', removed after version {version}, is not in it: its partition values are not known",
                file.path
            ))
        })?;
        file.partition_values = found.partition_values.clone();
    }
    Ok(())
}

/// `datetime`'s time (RFC 3339, as Feldera takes it).
fn datetime(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.to_utc())
        .map_err(|e| {
            format!("'datetime': '{text}' is not an RFC 3339 time (2024-12-09T16:09:53+00:00): {e}")
        })
}

/// The table's version as of `at`: the last committed at or before it
/// (by the time its log entry was written, as delta-rs finds it).
fn version_at(log: &LogStoreRef, at: chrono::DateTime<chrono::Utc>) -> Result<i64, Failure> {
    let l = log.clone();
    block_on(async move {
        let mut table = DeltaTable::new(l);
        table.load_with_datetime(at).await?;
        Ok::<_, deltalake_core::DeltaTableError>(table.version().unwrap_or(0) as i64)
    })
    .map_err(|e| Failure::Retry(format!("finding the table's version as of {at}: {e}")))
}

/// The table's latest version.
fn latest(log: &LogStoreRef) -> Result<i64, Failure> {
    let l = log.clone();
    block_on(async move {
        let mut table = DeltaTable::new(l);
        table.load().await?;
        Ok::<_, deltalake_core::DeltaTableError>(table.version().unwrap_or(0) as i64)
    })
    .map_err(|e| Failure::Retry(format!("reading the Delta table: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_give_their_data_files_in_order() {
        let commit = br#"{"commitInfo": {"operation": "WRITE"}}
{"add": {"path": "a%20b.parquet", "partitionValues": {"p": "1", "q": null}, "dataChange": true, "size": 5}}
{"remove": {"path": "old.parquet", "dataChange": true}}
{"add": {"path": "compacted.parquet", "dataChange": false}}
{"add": {"path": "dv.parquet", "dataChange": true, "deletionVector": {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4, "sizeInBytes": 40, "cardinality": 6}}}
"#;
        let files = Commit::read(commit).unwrap().files;
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].path.as_ref(), "a b.parquet");
        assert_eq!(
            files[0].partition_values,
            Some(vec![
                ("p".to_string(), Some("1".to_string())),
                ("q".to_string(), None)
            ])
        );
        assert_eq!(
            (files[1].path.as_ref(), files[1].weight),
            ("old.parquet", -1)
        );
        assert_eq!(files[1].partition_values, None);
        let dv = files[2].deletion_vector.as_ref().unwrap();
        assert_eq!(
            (dv.offset, dv.size_in_bytes, dv.cardinality),
            (Some(4), 40, 6)
        );
        assert!(files[0].deletion_vector.is_none());
        assert!(Commit::read(b"{\"add\": {}}").is_err());
        assert!(
            Commit::read(br#"{"add": {"path": "p", "deletionVector": {"storageType": "x"}}}"#)
                .is_err()
        );
        assert!(Commit::read(b"not json").is_err());
    }

    #[test]
    fn positions_read_back() {
        let p = DeltaPosition {
            version: Some(3),
            snapshot: true,
            done: 2,
            rows: 10,
            filtered_snapshot: Some(2),
        };
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(serde_json::from_value::<DeltaPosition>(v).unwrap(), p);
        assert_eq!(
            position::<DeltaPosition>(Some(&serde_json::json!({}))).unwrap(),
            DeltaPosition::default()
        );
    }
}
