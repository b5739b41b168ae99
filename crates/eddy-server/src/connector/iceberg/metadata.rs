//! An Iceberg table's metadata file (the JSON a `metadata_location`
//! names, format versions 1 and 2): its snapshots, which one to read
//! (by id, by time, or the current one), and the field ids of the schema
//! it was written with, by which a data file's columns are matched
//! (Iceberg renames a column without rewriting its files); for files
//! written without field ids (a migrated table's), the table's name
//! mapping (`schema.name-mapping.default`) gives them.

use std::collections::HashMap;

use serde::Deserialize;

/// The parts of the metadata file a reader needs; the rest is ignored.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    format_version: u8,
    #[serde(default)]
    current_schema_id: Option<i32>,
    /// Format version 2's schemas.
    #[serde(default)]
    schemas: Vec<Schema>,
    /// Format version 1's one schema.
    #[serde(default)]
    schema: Option<Schema>,
    /// `-1` or absent for a table with no snapshot.
    #[serde(default)]
    current_snapshot_id: Option<i64>,
    #[serde(default)]
    snapshots: Vec<Snapshot>,
    /// When each snapshot became the current one.
    #[serde(default)]
    snapshot_log: Vec<LogEntry>,
    #[serde(default)]
    properties: HashMap<String, String>,
}

/// The table property that maps the column names of files without field
/// ids to field ids.
const NAME_MAPPING: &str = "schema.name-mapping.default";

/// A name mapping's field (its nested fields are not read: columns are
/// matched at the top level).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct MappedField {
    #[serde(default)]
    field_id: Option<i32>,
    names: Vec<String>,
}

/// A schema: its top-level fields.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Schema {
    #[serde(default)]
    schema_id: Option<i32>,
    fields: Vec<SchemaField>,
}

#[derive(Debug, Deserialize)]
struct SchemaField {
    id: i32,
    name: String,
}

/// A snapshot of the table.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    /// Its id.
    pub snapshot_id: i64,
    /// When it was committed (milliseconds since 1970, the writer's clock).
    pub timestamp_ms: i64,
    /// The manifest list (format version 2, and most writers of 1).
    #[serde(default)]
    pub manifest_list: Option<String>,
    /// The manifests themselves (format version 1 without a list).
    #[serde(default)]
    pub manifests: Option<Vec<String>>,
    #[serde(default)]
    schema_id: Option<i32>,
    /// The snapshot it was committed on (none for the first).
    #[serde(default)]
    pub parent_snapshot_id: Option<i64>,
    /// What the commit did (`append`, `overwrite`, `delete`, `replace`).
    #[serde(default)]
    summary: Option<Summary>,
}

#[derive(Debug, Clone, Deserialize)]
struct Summary {
    #[serde(default)]
    operation: Option<String>,
}

impl Snapshot {
    /// Whether the commit only rewrote files, its rows the same
    /// (compaction): Iceberg's `replace`.
    pub fn rewrites_only(&self) -> bool {
        self.summary
            .as_ref()
            .and_then(|s| s.operation.as_deref())
            .is_some_and(|o| o == "replace")
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "kebab-case")]
struct LogEntry {
    snapshot_id: i64,
    timestamp_ms: i64,
}

/// Which snapshot a reader wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The current one.
    Current,
    /// The one with this id.
    Id(i64),
    /// The one that was current at this time (milliseconds since 1970).
    AsOf(i64),
}

impl TableMetadata {
    /// Reads a metadata file.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let m: Self = serde_json::from_slice(bytes).map_err(|e| format!("its metadata: {e}"))?;
        if !(1..=2).contains(&m.format_version) {
            return Err(format!(
                "format version {} is not read (1 and 2 are)",
                m.format_version
            ));
        }
        Ok(m)
    }

    /// The snapshot `pick` names; `None` for a table without snapshots
    /// (nothing to read).
    pub fn snapshot(&self, pick: Pick) -> Result<Option<&Snapshot>, String> {
        let by_id = |id: i64| self.by_id(id);
        match pick {
            Pick::Current => match self.current_snapshot_id.filter(|&id| id != -1) {
                None => Ok(None),
                Some(id) => by_id(id)
                    .map(Some)
                    .ok_or_else(|| format!("its current snapshot {id} is not among its snapshots")),
            },
            Pick::Id(id) => by_id(id)
                .map(Some)
                .ok_or_else(|| format!("it has no snapshot {id}")),
            Pick::AsOf(ms) => {
                // The log says which snapshot was current when; without
                // one, the last committed by then.
                // (The last entry at or before the time, over the whole log,
                // as Iceberg's own readers take it.)
                let id = if self.snapshot_log.is_empty() {
                    (self.snapshots.iter())
                        .filter(|s| s.timestamp_ms <= ms)
                        .max_by_key(|s| s.timestamp_ms)
                        .map(|s| s.snapshot_id)
                } else {
                    (self.snapshot_log.iter())
                        .rfind(|e| e.timestamp_ms <= ms)
                        .map(|e| e.snapshot_id)
                };
                let id = id.ok_or("it had no snapshot at that time")?;
                by_id(id).map(Some).ok_or_else(|| {
                    format!(
                        "snapshot {id}, current at that time, has expired (it is no longer kept)"
                    )
                })
            }
        }
    }

    /// The snapshot with this id, if the table still keeps it.
    pub fn by_id(&self, id: i64) -> Option<&Snapshot> {
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The snapshots committed after `after` (from the table's first
    /// when `None`) up to the current one, oldest first, by following the
    /// current snapshot's parents back. `None` when `after` is not among
    /// them: the table's history was rewritten (rolled back, or its
    /// snapshots expired) since.
    pub fn lineage(&self, after: Option<i64>) -> Option<Vec<i64>> {
        let parents: HashMap<i64, Option<i64>> = (self.snapshots.iter())
            .map(|s| (s.snapshot_id, s.parent_snapshot_id))
            .collect();
        let mut out = Vec::new();
        let mut at = self.current_snapshot_id.filter(|&id| id != -1);
        while at != after {
            let id = at?;
            // A cycle (a damaged file) is not a history.
            if out.len() == parents.len() {
                return None;
            }
            out.push(id);
            // A parent that is no longer kept ends the walk.
            at = *parents.get(&id)?;
        }
        out.reverse();
        Some(out)
    }

    /// The schema `snapshot` was written with, or the current schema
    /// (without a snapshot, or one that does not say).
    pub fn schema_id(&self, snapshot: Option<&Snapshot>) -> Option<i32> {
        snapshot
            .and_then(|s| s.schema_id)
            .or(self.current_schema_id)
    }

    /// The names of the columns by field id, of the schema `wanted` (see
    /// [`Self::schema_id`]).
    pub fn field_ids(&self, wanted: Option<i32>) -> Result<HashMap<i32, String>, String> {
        let schema = match (&self.schema, wanted) {
            (_, Some(id)) => self
                .schemas
                .iter()
                .chain(self.schema.iter())
                .find(|s| s.schema_id.unwrap_or(0) == id),
            (Some(s), None) => Some(s),
            (None, None) => self.schemas.first(),
        }
        .ok_or_else(|| match wanted {
            Some(id) => format!("its schema {id} is missing"),
            None => "its schema is missing".to_string(),
        })?;
        Ok(schema
            .fields
            .iter()
            .map(|f| (f.id, f.name.clone()))
            .collect())
    }

    /// The field id of each column name the table's name mapping knows
    /// (every name a column had), for files without field ids; empty
    /// without a mapping.
    pub fn name_mapping(&self) -> Result<HashMap<String, i32>, String> {
        let Some(text) = self.properties.get(NAME_MAPPING) else {
            return Ok(HashMap::new());
        };
        let fields: Vec<MappedField> = serde_json::from_str(text)
            .map_err(|e| format!("its name mapping ('{NAME_MAPPING}'): {e}"))?;
        Ok(fields
            .into_iter()
            .filter_map(|f| Some((f.field_id?, f.names)))
            .flat_map(|(id, names)| names.into_iter().map(move |n| (n, id)))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V2: &str = r#"{
        "format-version": 2, "location": "s3://b/t", "current-schema-id": 1,
        "schemas": [
            {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": true}]},
            {"type": "struct", "schema-id": 1, "fields": [{"id": 1, "name": "key", "type": "long", "required": true},
                                                        {"id": 2, "name": "v", "type": "string", "required": false}]}
        ],
        "current-snapshot-id": 3608678204003030003,
        "snapshots": [
            {"snapshot-id": 10, "timestamp-ms": 1000, "manifest-list": "s3://b/t/l1.avro", "schema-id": 0},
            {"snapshot-id": 3608678204003030003, "parent-snapshot-id": 10, "timestamp-ms": 2000, "manifest-list": "s3://b/t/l2.avro", "schema-id": 1,
             "summary": {"operation": "replace", "added-data-files": "1"}}
        ],
        "snapshot-log": [{"snapshot-id": 10, "timestamp-ms": 1000}, {"snapshot-id": 3608678204003030003, "timestamp-ms": 2000}]
    }"#;

    #[test]
    fn names_map_to_field_ids() {
        let mut m = TableMetadata::parse(V2.as_bytes()).unwrap();
        assert!(m.name_mapping().unwrap().is_empty());
        m.properties.insert(
            NAME_MAPPING.into(),
            r#"[{"field-id": 1, "names": ["id", "key"]}, {"field-id": 2, "names": ["v"], "fields": []}, {"names": ["gone"]}]"#.into(),
        );
        let map = m.name_mapping().unwrap();
        assert_eq!((map["id"], map["key"], map["v"]), (1, 1, 2));
        assert_eq!(map.len(), 3);
        m.properties.insert(NAME_MAPPING.into(), "{".into());
        assert!(m.name_mapping().unwrap_err().contains("name mapping"));
    }

    #[test]
    fn snapshots_are_picked_by_id_time_or_as_current() {
        let m = TableMetadata::parse(V2.as_bytes()).unwrap();
        let current = m.snapshot(Pick::Current).unwrap().unwrap();
        // Ids beyond 2^53 are read exactly.
        assert_eq!(current.snapshot_id, 3608678204003030003);
        assert_eq!(
            m.snapshot(Pick::Id(10)).unwrap().unwrap().timestamp_ms,
            1000
        );
        assert!(m
            .snapshot(Pick::Id(11))
            .unwrap_err()
            .contains("no snapshot 11"));
        assert_eq!(
            m.snapshot(Pick::AsOf(1500)).unwrap().unwrap().snapshot_id,
            10
        );
        assert_eq!(
            m.snapshot(Pick::AsOf(2000)).unwrap().unwrap().snapshot_id,
            3608678204003030003
        );
        assert!(m.snapshot(Pick::AsOf(999)).is_err());
        // Columns are named as the snapshot's schema names them.
        let old = m
            .field_ids(m.schema_id(m.snapshot(Pick::Id(10)).unwrap()))
            .unwrap();
        assert_eq!(old.get(&1).map(String::as_str), Some("id"));
        let new = m.field_ids(m.schema_id(Some(current))).unwrap();
        assert_eq!(new.get(&1).map(String::as_str), Some("key"));
        assert_eq!(new.len(), 2);
    }

    #[test]
    fn lineage_follows_parents_back_from_the_current_snapshot() {
        let m = TableMetadata::parse(V2.as_bytes()).unwrap();
        let current = 3608678204003030003;
        assert_eq!(m.lineage(None), Some(vec![10, current]));
        assert_eq!(m.lineage(Some(10)), Some(vec![current]));
        assert_eq!(m.lineage(Some(current)), Some(vec![]));
        // Not an ancestor: the history was rewritten.
        assert_eq!(m.lineage(Some(11)), None);
        // Parents in a cycle end the walk.
        let mut looped = TableMetadata::parse(V2.as_bytes()).unwrap();
        looped.snapshots[0].parent_snapshot_id = Some(current);
        assert_eq!(looped.lineage(Some(11)), None);
        assert!(m.by_id(current).unwrap().rewrites_only());
        assert!(!m.by_id(10).unwrap().rewrites_only());
    }

    #[test]
    fn empty_and_version_one_tables_read() {
        let v1 = r#"{"format-version": 1, "schema": {"type": "struct", "fields": [{"id": 1, "name": "a", "type": "int", "required": false}]},
                     "current-snapshot-id": -1, "snapshots": []}"#;
        let m = TableMetadata::parse(v1.as_bytes()).unwrap();
        assert!(m.snapshot(Pick::Current).unwrap().is_none());
        assert_eq!(m.lineage(None), Some(vec![]));
        assert_eq!(m.lineage(Some(1)), None);
        assert_eq!(
            m.field_ids(m.schema_id(None)).unwrap().get(&1).unwrap(),
            "a"
        );
        assert!(TableMetadata::parse(br#"{"format-version": 3}"#)
            .unwrap_err()
            .contains("format version 3"));
        assert!(TableMetadata::parse(b"[]").is_err());
    }
}
