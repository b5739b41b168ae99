//! The running `iceberg_input`: reads the metadata file, picks and pins
//! the snapshot, lists its live files from the manifests and feeds the
//! data files in path order, each batch carrying the position after it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::datatypes::{Schema, SchemaRef};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::manifest::{live_files, manifest_list, LiveFile};
use super::metadata::{Pick, TableMetadata};
use super::Files;
use crate::connector::filter::RowFilter;
use crate::connector::parquet::{feed, Rows};
use crate::connector::rounds::{self, Failure, Round, Rounds};
use crate::connector::{position, CheckContext, ConnectorSpec, InputContext, InputRun, Transport};
use crate::runner::Feeder;
use crate::stats::EndpointStats;

/// What to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Snapshot,
    Follow,
    SnapshotAndFollow,
}

/// `iceberg_input`'s configuration (Feldera's), with the FileIO and
/// catalog settings (`s3.*`, `rest.*`, …) beside it.
#[derive(Debug, Clone, Deserialize)]
pub struct IcebergInput {
    mode: Mode,
    metadata_location: Option<String>,
    snapshot_id: Option<i64>,
    datetime: Option<String>,
    snapshot_filter: Option<String>,
    // Refused when given: not supported yet.
    end_snapshot_id: Option<i64>,
    catalog_type: Option<String>,
    table_name: Option<String>,
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

impl IcebergInput {
    /// Checks what needs no read; the snapshot to pick.
    fn pick(&self) -> Result<Pick, String> {
        let not_yet = |what: &str| Err(format!("{what} is not supported yet"));
        if self.catalog_type.is_some() || self.table_name.is_some() {
            return not_yet(
                "an Iceberg catalog ('catalog_type', 'table_name'; give 'metadata_location')",
            );
        }
        if self.mode != Mode::Snapshot {
            return Err(
                "'follow' and 'snapshot_and_follow' need an Iceberg catalog, which 'metadata_location' is not (it names a fixed set of snapshots): use mode 'snapshot'"
                    .into(),
            );
        }
        if self.end_snapshot_id.is_some() {
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
        if self.metadata_location.is_none() {
            return Err("'metadata_location' is required".into());
        }
        match (self.snapshot_id, &self.datetime) {
            (Some(_), Some(_)) => Err("give 'snapshot_id' or 'datetime', not both".into()),
            (Some(id), None) => Ok(Pick::Id(id)),
            (None, Some(t)) => chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| Pick::AsOf(t.timestamp_millis()))
                .map_err(|e| {
                    format!("'datetime' {t}: {e} (an RFC 3339 time, as 2024-12-09T16:09:53+00:00)")
                }),
            (None, None) => Ok(Pick::Current),
        }
    }

    fn filter(&self, schema: &SchemaRef) -> Result<Option<Arc<RowFilter>>, String> {
        (self.snapshot_filter.as_deref())
            .map(|sql| RowFilter::new("snapshot_filter", sql, schema).map(Arc::new))
            .transpose()
    }
}

impl Transport for IcebergInput {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        self.pick()?;
        let files = Files::new(cx.files.clone(), &self.settings)?;
        files.check(self.metadata_location.as_deref().unwrap_or_default())?;
        self.filter(&Arc::new(Schema::new(cx.columns.clone())))?;
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let at: IcebergPosition = position(cx.position)?;
        let pick = self.pick()?;
        let schema = cx
            .feeder
            .schema(&spec.relation)
            .map_err(|e| e.to_string())?;
        let mut source = Source {
            metadata_location: self.metadata_location.clone().unwrap_or_default(),
            pick,
            filter: self.filter(schema)?,
            files: Files::new(cx.files.clone(), &self.settings)?,
            spec: spec.clone(),
            feeder: Arc::clone(cx.feeder),
            stats: cx.stats,
            at,
        };
        Ok(Some(Box::new(move || source.run())))
    }
}

/// How far the state holds the table's snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IcebergPosition {
    /// The snapshot read; `None` before it is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    snapshot_id: Option<i64>,
    /// Its data files in the state, in path order.
    #[serde(default)]
    done: usize,
    /// Rows of the next file in the state.
    #[serde(default)]
    rows: u64,
    /// The schema whose names the columns are read by, kept so that a
    /// resumed read names them as the read it resumes did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    schema_id: Option<i32>,
}

impl IcebergPosition {
    /// This position with `done` files and `rows` rows of the next.
    fn at(self, done: usize, rows: u64) -> Self {
        Self { done, rows, ..self }
    }
}

/// A running connector.
struct Source {
    metadata_location: String,
    pick: Pick,
    filter: Option<Arc<RowFilter>>,
    files: Files,
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
        // A snapshot ends the input: there is no poll.
        rounds::run(
            self,
            &feeder,
            &stats,
            "iceberg_input",
            Duration::from_secs(1),
        );
    }

    /// Reads the snapshot, from the position on.
    fn read(&mut self) -> Result<Round, Failure> {
        let bytes = self.files.get(&self.metadata_location.clone())?;
        let table = TableMetadata::parse(&bytes)
            .map_err(|e| Failure::Fatal(format!("'{}': {e}", self.metadata_location)))?;
        // A resumed read reads the snapshot it began.
        let pick = self.at.snapshot_id.map_or(self.pick, Pick::Id);
        let snapshot = table
            .snapshot(pick)
            .map_err(|e| Failure::Fatal(format!("the table: {e}")))?
            .cloned();
        let Some(snapshot) = snapshot else {
            // No snapshot: an empty table.
            return Ok(Round::Ended);
        };
        if self.at.snapshot_id.is_none() {
            // The current snapshot is read as the table is now (a column
            // renamed since it was written has its new name); an older one
            // as it was, as Iceberg's time travel reads it.
            let as_written = (self.pick != Pick::Current).then_some(&snapshot);
            self.at.snapshot_id = Some(snapshot.snapshot_id);
            self.at.schema_id = table.schema_id(as_written);
        }
        let ids = table
            .field_ids(self.at.schema_id)
            .map_err(|e| Failure::Fatal(format!("the table: {e}")))?;
        let mapping = table
            .name_mapping()
            .map_err(|e| Failure::Fatal(format!("the table: {e}")))?;
        let what = format!("snapshot {}", snapshot.snapshot_id);
        let mut files = self.live_files(&snapshot, &what)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if !self.read_files(&files, (&ids, &mapping), &what)? {
            return Ok(Round::Stopped);
        }
        Ok(Round::Ended)
    }

    /// The data files of a snapshot; an error for good if it has live
    /// delete files or data not in Parquet.
    fn live_files(
        &mut self,
        snapshot: &super::metadata::Snapshot,
        what: &str,
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
            let bytes = self.files.get(&m.path)?;
            let files =
                live_files(&bytes).map_err(|e| fatal(format!("manifest '{}': {e}", m.path)))?;
            for f in files {
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
                out.push(f);
            }
        }
        Ok(out)
    }

    /// Feeds `files` from the position on; false if the pipeline stopped
    /// first.
    fn read_files(
        &mut self,
        files: &[LiveFile],
        (ids, mapping): (&HashMap<i32, String>, &HashMap<String, i32>),
        what: &str,
    ) -> Result<bool, Failure> {
        if self.at.done > files.len() {
            return Err(Failure::Fatal(format!(
                "{what} has {} data files, and the checkpoint holds {}: it is not the table read before",
                files.len(),
                self.at.done
            )));
        }
        for (i, file) in files.iter().enumerate().skip(self.at.done) {
            let bytes = self.files.get(&file.path)?;
            let at = self.at;
            let position_of = |rows: u64| serde_json::to_value(at.at(i, rows)).expect("a position");
            let how = Rows {
                skip: self.at.rows,
                weight: 1,
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

    #[test]
    fn configurations_pick_a_snapshot_or_say_what_is_missing() {
        let base = serde_json::json!({"mode": "snapshot", "metadata_location": "file:///w/m.json"});
        assert_eq!(config(base.clone()).pick().unwrap(), Pick::Current);
        let mut c = base.clone();
        c["snapshot_id"] = 3325185130458326470i64.into();
        assert_eq!(
            config(c.clone()).pick().unwrap(),
            Pick::Id(3325185130458326470)
        );
        c["datetime"] = "2024-12-09T16:09:53+00:00".into();
        assert!(config(c).pick().unwrap_err().contains("not both"));
        let mut c = base.clone();
        c["datetime"] = "2024-12-09T16:09:53+01:00".into();
        assert_eq!(config(c).pick().unwrap(), Pick::AsOf(1733756993000));
        let mut c = base.clone();
        c["mode"] = "follow".into();
        assert!(config(c)
            .pick()
            .unwrap_err()
            .contains("need an Iceberg catalog"));
        let c =
            serde_json::json!({"mode": "snapshot", "catalog_type": "rest", "table_name": "a.b"});
        assert!(config(c).pick().unwrap_err().contains("not supported yet"));
        let c = serde_json::json!({"mode": "snapshot"});
        assert!(config(c)
            .pick()
            .unwrap_err()
            .contains("'metadata_location' is required"));
    }

    #[test]
    fn positions_read_back() {
        let p = IcebergPosition {
            snapshot_id: Some(-5),
            done: 2,
            rows: 10,
            schema_id: Some(1),
        };
        let v = serde_json::to_value(p).unwrap();
        assert_eq!(serde_json::from_value::<IcebergPosition>(v).unwrap(), p);
    }
}
