//! The running `iceberg_input`: reads the table's current metadata file
//! (a fixed one, or the one its catalog names now), picks and pins the
//! starting snapshot and feeds its data files in path order; following
//! the table, it then feeds each later snapshot's changes, oldest first:
//! the rows of the data files it added, and the rows of those it removed
//! (a copy-on-write delete or overwrite) retracted. Every batch carries
//! the position after it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::catalog::{Catalog, Glue};
use super::manifest::{live_files, manifest_list, LiveFile};
use super::metadata::{Pick, Snapshot, TableMetadata};
use super::{Files, Settings};
use crate::connector::filter::RowFilter;
use crate::connector::parquet::{feed, Rows};
use crate::connector::rounds::{self, Failure, Round, Rounds};
use crate::connector::{position, CheckContext, ConnectorSpec, InputContext, InputRun, Transport};
use crate::runner::Feeder;
use crate::stats::EndpointStats;

/// How often a followed table's catalog is asked for a newer snapshot.
const POLL: Duration = Duration::from_secs(1);

/// What to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Snapshot,
    Follow,
    SnapshotAndFollow,
}

/// `iceberg_input`'s configuration (Feldera's), with the FileIO and
/// catalog settings (`s3.*`, `glue.*`, …) beside it.
#[derive(Debug, Clone, Deserialize)]
pub struct IcebergInput {
    mode: Mode,
    metadata_location: Option<String>,
    snapshot_id: Option<i64>,
    datetime: Option<String>,
    snapshot_filter: Option<String>,
    end_snapshot_id: Option<i64>,
    catalog_type: Option<String>,
    table_name: Option<String>,
    // Refused when given: not supported yet.
    timestamp_column: Option<String>,
    transaction_mode: Option<String>,
    // Parallelism and retry settings: files are read one after another
    // and a failed read is tried again until it succeeds.
    #[serde(rename = "num_parsers")]
    _num_parsers: Option<u64>,
    #[serde(rename = "max_retries")]
    _max_retries: Option<u64>,
    #[serde(flatten)]
    settings: BTreeMap<String, Value>,
}

/// Where the table is, as configured.
#[derive(Debug, Clone, PartialEq)]
enum Table {
    /// A metadata file.
    Fixed(String),
    /// A table of the Glue catalog (`namespace.table`).
    Glue(String),
}

/// What a configuration asks for, checked.
#[derive(Debug)]
struct Plan {
    pick: Pick,
    table: Table,
    settings: Settings,
}

impl IcebergInput {
    /// Checks what needs no read.
    fn plan(&self) -> Result<Plan, String> {
        let not_yet = |what: &str| Err(format!("{what} is not supported yet"));
        let settings = Settings::split(&self.settings)?;
        let table = match (self.catalog_type.as_deref(), &self.metadata_location) {
            (Some(_), Some(_)) => {
                return Err("give 'catalog_type' or 'metadata_location', not both".into())
            }
            (Some("glue"), None) => match &self.table_name {
                Some(name) => Table::Glue(name.clone()),
                None => return Err("'table_name' is required with 'catalog_type'".into()),
            },
            (Some("rest" | "s3tables"), None) => {
                return not_yet("the REST and S3 Tables catalogs (the Glue catalog is)")
            }
            (Some(other), None) => {
                return Err(format!(
                    "'catalog_type' {other:?} is not one of rest, glue, s3tables"
                ))
            }
            (None, Some(location)) => {
                if self.table_name.is_some() {
                    return Err("'table_name' goes with 'catalog_type'".into());
                }
                if self.mode != Mode::Snapshot {
                    return Err(
                        "'follow' and 'snapshot_and_follow' need an Iceberg catalog, which 'metadata_location' is not (it names a fixed set of snapshots): set 'catalog_type', or use mode 'snapshot'"
                            .into(),
                    );
                }
                Table::Fixed(location.clone())
            }
            (None, None) => return Err("'metadata_location' or 'catalog_type' is required".into()),
        };
        if !settings.glue.is_empty() && !matches!(table, Table::Glue(_)) {
            return Err("the 'glue.*' settings go with 'catalog_type' glue".into());
        }
        if self.end_snapshot_id.is_some() && self.mode == Mode::Snapshot {
            return Err("'end_snapshot_id' goes with a mode that follows the table".into());
        }
        if self.timestamp_column.is_some() {
            return not_yet("'timestamp_column'");
        }
        if self
            .transaction_mode
            .as_deref()
            .is_some_and(|m| m != "none")
        {
            return not_yet("a 'transaction_mode' but 'none'");
        }
        let pick = match (self.snapshot_id, &self.datetime) {
            (Some(_), Some(_)) => return Err("give 'snapshot_id' or 'datetime', not both".into()),
            (Some(id), None) => Pick::Id(id),
            (None, Some(t)) => chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| Pick::AsOf(t.timestamp_millis()))
                .map_err(|e| {
                    format!("'datetime' {t}: {e} (an RFC 3339 time, as 2024-12-09T16:09:53+00:00)")
                })?,
            (None, None) => Pick::Current,
        };
        Ok(Plan {
            pick,
            table,
            settings,
        })
    }

    fn filter(&self, schema: &SchemaRef) -> Result<Option<Arc<RowFilter>>, String> {
        (self.snapshot_filter.as_deref())
            .map(|sql| RowFilter::new("snapshot_filter", sql, schema).map(Arc::new))
            .transpose()
    }
}

impl Plan {
    fn catalog(&self) -> Result<Catalog, String> {
        Ok(match &self.table {
            Table::Fixed(location) => Catalog::Fixed(location.clone()),
            Table::Glue(name) => Catalog::Glue(Box::new(Glue::new(name, &self.settings.glue)?)),
        })
    }
}

impl Transport for IcebergInput {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        let plan = self.plan()?;
        let files = Files::new(cx.files.clone(), &plan.settings.s3)?;
        if let Table::Fixed(location) = &plan.table {
            files.check(location)?;
        }
        plan.catalog()?;
        self.filter(&Arc::new(Schema::new(cx.columns.clone())))?;
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let at: IcebergPosition = position(cx.position)?;
        let plan = self.plan()?;
        let schema = cx
            .feeder
            .schema(&spec.relation)
            .map_err(|e| e.to_string())?;
        let mut source = Source {
            catalog: plan.catalog()?,
            mode: self.mode,
            pick: plan.pick,
            end: self.end_snapshot_id,
            filter: self.filter(schema)?,
            files: Files::new(cx.files.clone(), &plan.settings.s3)?,
            manifests: HashMap::new(),
            spec: spec.clone(),
            feeder: Arc::clone(cx.feeder),
            stats: cx.stats,
            at,
        };
        Ok(Some(Box::new(move || source.run())))
    }
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// How far the state holds the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IcebergPosition {
    /// The snapshot being read (or read); `None` before one is chosen,
    /// or, once `complete`, when the table had none (a followed table is
    /// then read from its first snapshot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_id: Option<i64>,
    /// Its data files in the state, in the order they are read.
    #[serde(default)]
    done: usize,
    /// Rows of the next file in the state.
    #[serde(default)]
    rows: u64,
    /// The schema whose names the columns are read by, kept so that a
    /// resumed read names them as the read it resumes did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema_id: Option<i32>,
    /// The files are those the snapshot added and removed (following),
    /// not all of its own.
    #[serde(default, skip_serializing_if = "is_false")]
    changes: bool,
    /// The snapshot is wholly in the state.
    #[serde(default, skip_serializing_if = "is_false")]
    complete: bool,
}

impl IcebergPosition {
    /// This position with `done` files and `rows` rows of the next.
    fn at(self, done: usize, rows: u64) -> Self {
        Self { done, rows, ..self }
    }

    /// Whether the snapshot to start from has been chosen.
    fn started(&self) -> bool {
        self.snapshot_id.is_some() || self.complete
    }
}

/// A file to feed, and the weight of its rows (-1: it was removed).
type Change = (LiveFile, i64);

/// A running connector.
struct Source {
    catalog: Catalog,
    mode: Mode,
    pick: Pick,
    end: Option<i64>,
    filter: Option<Arc<RowFilter>>,
    files: Files,
    /// The live files of the manifests read last (manifests are never
    /// rewritten, and a snapshot shares most of its parent's).
    manifests: HashMap<String, Vec<LiveFile>>,
    spec: ConnectorSpec,
    feeder: Arc<Feeder>,
    stats: Arc<EndpointStats>,
    at: IcebergPosition,
}

impl Rounds for Source {
    fn round(&mut self) -> Result<Round, Failure> {
        self.read()
    }
}

impl Source {
    fn run(&mut self) {
        let (feeder, stats) = (Arc::clone(&self.feeder), Arc::clone(&self.stats));
        rounds::run(self, &feeder, &stats, "iceberg_input", POLL);
    }

    /// Reads the table as its catalog has it now: the snapshot being read,
    /// from the position on, or the next one to follow.
    fn read(&mut self) -> Result<Round, Failure> {
        let location = self.catalog.metadata_location()?;
        let bytes = self.files.get(&location)?;
        let table = TableMetadata::parse(&bytes)
            .map_err(|e| Failure::Fatal(format!("'{location}': {e}")))?;
        if !self.at.started() {
            self.start(&table)?;
            if !self.record_position() {
                return Ok(Round::Stopped);
            }
        }
        if !self.at.complete && !self.finish(&table)? {
            return Ok(Round::Stopped);
        }
        if self.ends_here() {
            return Ok(Round::Ended);
        }
        let Some(after) = table.lineage(self.at.snapshot_id) else {
            return Err(Failure::Fatal(format!(
                "snapshot {}, the last read, is no longer in the table's history (rolled back, or expired): the changes since cannot be told",
                self.at.snapshot_id.unwrap_or_default()
            )));
        };
        if after.is_empty() {
            return Ok(Round::Idle);
        }
        // Every snapshot committed since, from this one metadata file.
        for next in after {
            self.at = IcebergPosition {
                snapshot_id: Some(next),
                schema_id: self.at.schema_id,
                changes: true,
                ..IcebergPosition::default()
            };
            if !self.finish(&table)? {
                return Ok(Round::Stopped);
            }
            if self.ends_here() {
                return Ok(Round::Ended);
            }
        }
        Ok(Round::Fed)
    }

    /// Reads the snapshot of the position (its rows or its changes) from
    /// where it is, then marks it complete in the state; false if the
    /// pipeline stopped first.
    fn finish(&mut self, table: &TableMetadata) -> Result<bool, Failure> {
        let id = self.at.snapshot_id.expect("a snapshot being read");
        let snapshot = table.by_id(id).cloned().ok_or_else(|| {
            Failure::Fatal(format!(
                "snapshot {id}, being read, is no longer kept by the table (expired)"
            ))
        })?;
        if !self.read_snapshot(table, &snapshot)? {
            return Ok(false);
        }
        self.at.complete = true;
        Ok(self.record_position())
    }

    /// Whether the input ends with what the state now holds: a snapshot
    /// read, or the end snapshot reached.
    fn ends_here(&self) -> bool {
        self.mode == Mode::Snapshot || (self.end.is_some() && self.at.snapshot_id == self.end)
    }

    /// Puts the position into the state (see
    /// [`crate::connector::record_position`]); false if the pipeline is stopping.
    fn record_position(&self) -> bool {
        let position = serde_json::to_value(self.at).expect("a position");
        crate::connector::record_position(&self.feeder, &self.spec, position)
    }

    /// Chooses and pins the starting snapshot, and the schema columns are
    /// named by.
    fn start(&mut self, table: &TableMetadata) -> Result<(), Failure> {
        let fatal = |e: String| Failure::Fatal(format!("the table: {e}"));
        let snapshot = table.snapshot(self.pick).map_err(fatal)?;
        // The current snapshot is read as the table is now (a column
        // renamed since it was written has its new name); an older one
        // as it was, as Iceberg's time travel reads it.
        let as_written = snapshot.filter(|_| self.pick != Pick::Current);
        self.at.schema_id = table.schema_id(as_written);
        self.at.snapshot_id = snapshot.map(|s| s.snapshot_id);
        // Following skips the starting snapshot's rows; an empty table
        // has none.
        self.at.complete = snapshot.is_none() || self.mode == Mode::Follow;
        if let Some(end) = self.end {
            let after = table.lineage(self.at.snapshot_id).unwrap_or_default();
            if !after.contains(&end) {
                return Err(Failure::Fatal(format!(
                    "'end_snapshot_id' {end} is not a snapshot committed after the starting one in the table's current history"
                )));
            }
        }
        Ok(())
    }

    /// Feeds the snapshot (its rows, or its changes), from the position
    /// on; false if the pipeline stopped first.
    fn read_snapshot(
        &mut self,
        table: &TableMetadata,
        snapshot: &Snapshot,
    ) -> Result<bool, Failure> {
        let fatal = |e: String| Failure::Fatal(format!("the table: {e}"));
        let ids = table.field_ids(self.at.schema_id).map_err(fatal)?;
        let mapping = table.name_mapping().map_err(fatal)?;
        let what = format!("snapshot {}", snapshot.snapshot_id);
        let mut used = HashSet::new();
        let files = if self.at.changes {
            self.changes(table, snapshot, &what, &mut used)?
        } else {
            let mut files = self.live_files(snapshot, &what, &mut used)?;
            files.sort_by(|a, b| a.path.cmp(&b.path));
            files.into_iter().map(|f| (f, 1)).collect()
        };
        self.manifests.retain(|path, _| used.contains(path));
        self.read_files(&files, (&ids, &mapping), &what)
    }

    /// The files a followed snapshot removed (their rows retracted) and
    /// added, each in path order. A `replace` (compaction) changes no row:
    /// nothing is read.
    fn changes(
        &mut self,
        table: &TableMetadata,
        snapshot: &Snapshot,
        what: &str,
        used: &mut HashSet<String>,
    ) -> Result<Vec<Change>, Failure> {
        if snapshot.rewrites_only() {
            return Ok(Vec::new());
        }
        let now = self.live_files(snapshot, what, used)?;
        let before = match snapshot.parent_snapshot_id {
            None => Vec::new(),
            Some(p) => {
                let parent = table.by_id(p).cloned().ok_or_else(|| {
                    Failure::Fatal(format!(
                        "{what}: its parent {p} is no longer kept (expired): its changes cannot be told"
                    ))
                })?;
                self.live_files(&parent, &format!("snapshot {p}"), used)?
            }
        };
        let paths = |files: &[LiveFile]| -> BTreeSet<String> {
            files.iter().map(|f| f.path.clone()).collect()
        };
        let (was, is) = (paths(&before), paths(&now));
        let mut out: Vec<Change> = (before.into_iter())
            .filter(|f| !is.contains(&f.path))
            .map(|f| (f, -1))
            .collect();
        out.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        let mut added: Vec<Change> = (now.into_iter())
            .filter(|f| !was.contains(&f.path))
            .map(|f| (f, 1))
            .collect();
        added.sort_by(|a, b| a.0.path.cmp(&b.0.path));
        out.extend(added);
        Ok(out)
    }

    /// The data files of a snapshot; an error for good if it has live
    /// delete files or data not in Parquet. Manifests read before are
    /// not read again; `used` gathers those this snapshot names.
    fn live_files(
        &mut self,
        snapshot: &Snapshot,
        what: &str,
        used: &mut HashSet<String>,
    ) -> Result<Vec<LiveFile>, Failure> {
        let fatal = |e: String| Failure::Fatal(format!("{what}: {e}"));
        let manifests = match (&snapshot.manifest_list, &snapshot.manifests) {
            (Some(list), _) => {
                let bytes = self.files.get(list)?;
                manifest_list(&bytes).map_err(|e| fatal(format!("manifest list '{list}': {e}")))?
            }
            (None, Some(paths)) => paths
                .iter()
                .map(|p| super::manifest::Manifest {
                    path: p.clone(),
                    deletes: false,
                })
                .collect(),
            (None, None) => return Err(fatal("it names no manifests".into())),
        };
        let mut out = Vec::new();
        for m in manifests {
            if !self.manifests.contains_key(&m.path) {
                let bytes = self.files.get(&m.path)?;
                let files =
                    live_files(&bytes).map_err(|e| fatal(format!("manifest '{}': {e}", m.path)))?;
                self.manifests.insert(m.path.clone(), files);
            }
            used.insert(m.path.clone());
            for f in &self.manifests[&m.path] {
                if m.deletes || f.deletes {
                    return Err(fatal(format!(
                        "'{}' is a merge-on-read delete file, which is not read yet (write the table copy-on-write)",
                        f.path
                    )));
                }
                if f.format != "PARQUET" {
                    return Err(fatal(format!(
                        "'{}' is {}: only Parquet data files are read",
                        f.path, f.format
                    )));
                }
                out.push(f.clone());
            }
        }
        Ok(out)
    }

    /// Feeds `files` from the position on; false if the pipeline stopped
    /// first.
    fn read_files(
        &mut self,
        files: &[Change],
        (ids, mapping): (&HashMap<i32, String>, &HashMap<String, i32>),
        what: &str,
    ) -> Result<bool, Failure> {
        if self.at.done > files.len() {
            return Err(Failure::Fatal(format!(
                "{what} has {} data files to read, and the checkpoint holds {}: it is not the table read before",
                files.len(),
                self.at.done
            )));
        }
        for (i, (file, weight)) in files.iter().enumerate().skip(self.at.done) {
            let bytes = self.files.get(&file.path)?;
            let at = self.at;
            let position_of = |rows: u64| serde_json::to_value(at.at(i, rows)).expect("a position");
            let how = Rows {
                skip: self.at.rows,
                weight: *weight,
                constants: &[],
                position_of: &position_of,
                place: Some(&file.path),
                field_ids: Some(ids),
                name_mapping: Some(mapping),
                filter: self.filter.as_deref(),
                deleted: None,
            };
            // A file that cannot be read is read again (from the
            // position): going on would lose its rows.
            match feed(&self.spec, bytes, &self.feeder, &self.stats, how) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(e) => {
                    self.at = self.at.at(i, e.rows);
                    return Err(Failure::Retry(e.error));
                }
            }
            self.at = self.at.at(i + 1, 0);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(v: serde_json::Value) -> IcebergInput {
        serde_json::from_value(v).unwrap()
    }

    fn pick(v: serde_json::Value) -> Result<Pick, String> {
        config(v).plan().map(|p| p.pick)
    }

    #[test]
    fn configurations_pick_a_snapshot_or_say_what_is_missing() {
        let base = serde_json::json!({"mode": "snapshot", "metadata_location": "file:///w/m.json"});
        assert_eq!(pick(base.clone()).unwrap(), Pick::Current);
        let mut c = base.clone();
        c["snapshot_id"] = 3325185130458326470i64.into();
        assert_eq!(pick(c.clone()).unwrap(), Pick::Id(3325185130458326470));
        c["datetime"] = "2024-12-09T16:09:53+00:00".into();
        assert!(pick(c).unwrap_err().contains("not both"));
        let mut c = base.clone();
        c["datetime"] = "2024-12-09T16:09:53+01:00".into();
        assert_eq!(pick(c).unwrap(), Pick::AsOf(1733756993000));
        let mut c = base.clone();
        c["mode"] = "follow".into();
        assert!(pick(c).unwrap_err().contains("need an Iceberg catalog"));
        let c =
            serde_json::json!({"mode": "snapshot", "catalog_type": "rest", "table_name": "a.b"});
        assert!(pick(c).unwrap_err().contains("not supported yet"));
        let c = serde_json::json!({"mode": "snapshot"});
        assert!(pick(c)
            .unwrap_err()
            .contains("'metadata_location' or 'catalog_type' is required"));
        let glue = serde_json::json!({"mode": "follow", "catalog_type": "glue", "table_name": "a.b",
            "glue.region": "us-east-1", "end_snapshot_id": 7});
        let plan = config(glue.clone()).plan().unwrap();
        assert_eq!(plan.table, Table::Glue("a.b".into()));
        let mut c = glue.clone();
        c["metadata_location"] = "file:///w/m.json".into();
        assert!(pick(c).unwrap_err().contains("not both"));
        let mut c = glue.clone();
        c["mode"] = "snapshot".into();
        assert!(pick(c).unwrap_err().contains("'end_snapshot_id' goes with"));
        let mut c = base.clone();
        c["glue.region"] = "us-east-1".into();
        assert!(pick(c).unwrap_err().contains("go with 'catalog_type' glue"));
        let mut c = glue;
        c["catalog_type"] = "hive".into();
        assert!(pick(c).unwrap_err().contains("not one of"));
    }

    #[test]
    fn positions_read_back() {
        let p = IcebergPosition {
            snapshot_id: Some(-5),
            done: 2,
            rows: 10,
            schema_id: Some(1),
            changes: true,
            complete: false,
        };
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(serde_json::from_value::<IcebergPosition>(v).unwrap(), p);
        // A snapshot read's position, as checkpoints before following
        // wrote it, still reads.
        let old = serde_json::json!({"snapshot_id": 9, "done": 1, "rows": 0, "schema_id": 0});
        let p: IcebergPosition = serde_json::from_value(old).unwrap();
        assert!(!p.changes && !p.complete && p.started());
        assert!(!IcebergPosition::default().started());
    }
}
