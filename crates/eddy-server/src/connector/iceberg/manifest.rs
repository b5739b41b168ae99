//! An Iceberg snapshot's files: its manifest list names manifests (Avro
//! files), whose entries name the data files. A live entry (added or
//! existing, not deleted) is a file of the snapshot. Data manifests and
//! delete manifests (merge-on-read position and equality deletes) are
//! told apart, so that a snapshot with live deletes is refused rather
//! than read with rows that were deleted.

use apache_avro::types::Value;

/// A manifest the list names.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Where it is.
    pub path: String,
    /// Whether it lists delete files (else data files).
    pub deletes: bool,
}

/// A file a manifest lists as live in the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveFile {
    /// Where it is.
    pub path: String,
    /// `PARQUET`, `AVRO` or `ORC`.
    pub format: String,
    /// A delete file (position or equality deletes), not data.
    pub deletes: bool,
    /// Its rows, as the manifest counts them.
    pub rows: i64,
}

/// The Avro records of a file (a manifest list or a manifest). The Avro
/// reader can panic on a malformed block (a Snappy block shorter than its
/// checksum): that is an error of the file, not of the server.
fn records(bytes: &[u8]) -> Result<Vec<Vec<(String, Value)>>, String> {
    std::panic::catch_unwind(|| read_records(bytes))
        .unwrap_or_else(|_| Err("a malformed Avro file".to_string()))
}

fn read_records(bytes: &[u8]) -> Result<Vec<Vec<(String, Value)>>, String> {
    let reader = apache_avro::Reader::new(bytes).map_err(|e| e.to_string())?;
    reader
        .map(|v| match v.map_err(|e| e.to_string())? {
            Value::Record(fields) => Ok(fields),
            other => Err(format!("a record, not {other:?}")),
        })
        .collect()
}

/// A record's field, unwrapped from an optional union; `None` when it is
/// absent or null.
fn field<'a>(record: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
    let mut v = &record.iter().find(|(n, _)| n == name)?.1;
    while let Value::Union(_, inner) = v {
        v = inner;
    }
    (!matches!(v, Value::Null)).then_some(v)
}

fn int(record: &[(String, Value)], name: &str) -> Result<Option<i64>, String> {
    match field(record, name) {
        None => Ok(None),
        Some(Value::Int(i)) => Ok(Some(i64::from(*i))),
        Some(Value::Long(i)) => Ok(Some(*i)),
        Some(other) => Err(format!("'{name}' is {other:?}, not a number")),
    }
}

fn string(record: &[(String, Value)], name: &str) -> Result<String, String> {
    match field(record, name) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(format!("'{name}' is {other:?}, not a string")),
        None => Err(format!("'{name}' is missing")),
    }
}

/// The manifests of a manifest list.
pub fn manifest_list(bytes: &[u8]) -> Result<Vec<Manifest>, String> {
    records(bytes)?
        .iter()
        .map(|r| {
            Ok(Manifest {
                path: string(r, "manifest_path")?,
                // Format version 1 has only data manifests.
                deletes: int(r, "content")?.unwrap_or(0) != 0,
            })
        })
        .collect()
}

/// The live files of a manifest.
pub fn live_files(bytes: &[u8]) -> Result<Vec<LiveFile>, String> {
    let mut out = Vec::new();
    for entry in records(bytes)? {
        // 0 existing, 1 added, 2 deleted.
        let status = int(&entry, "status")?.ok_or("'status' is missing")?;
        if status == 2 {
            continue;
        }
        let Some(Value::Record(file)) = field(&entry, "data_file") else {
            return Err("'data_file' is missing".into());
        };
        out.push(LiveFile {
            path: string(file, "file_path")?,
            format: string(file, "file_format")?.to_ascii_uppercase(),
            deletes: int(file, "content")?.unwrap_or(0) != 0,
            rows: int(file, "record_count")?.unwrap_or(0),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::{Schema, Writer};

    fn write(schema: &str, rows: Vec<Value>) -> Vec<u8> {
        let schema = Schema::parse_str(schema).unwrap();
        let mut w = Writer::new(&schema, Vec::new());
        for r in rows {
            w.append(r).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn rec(fields: Vec<(&str, Value)>) -> Value {
        Value::Record(
            fields
                .into_iter()
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
        )
    }

    #[test]
    fn manifests_and_their_live_files_read() {
        let list = write(
            r#"{"type": "record", "name": "manifest_file", "fields": [
                {"name": "manifest_path", "type": "string"},
                {"name": "content", "type": "int"}]}"#,
            vec![
                rec(vec![
                    ("manifest_path", Value::String("s3://b/m0.avro".into())),
                    ("content", Value::Int(0)),
                ]),
                rec(vec![
                    ("manifest_path", Value::String("s3://b/m1.avro".into())),
                    ("content", Value::Int(1)),
                ]),
            ],
        );
        let manifests = manifest_list(&list).unwrap();
        assert_eq!(manifests.len(), 2);
        assert_eq!(
            (manifests[0].path.as_str(), manifests[0].deletes),
            ("s3://b/m0.avro", false)
        );
        assert!(manifests[1].deletes);

        let schema = r#"{"type": "record", "name": "manifest_entry", "fields": [
            {"name": "status", "type": "int"},
            {"name": "snapshot_id", "type": ["null", "long"]},
            {"name": "data_file", "type": {"type": "record", "name": "r2", "fields": [
                {"name": "content", "type": "int"},
                {"name": "file_path", "type": "string"},
                {"name": "file_format", "type": "string"},
                {"name": "record_count", "type": "long"}]}}]}"#;
        let entry = |status, path: &str| {
            rec(vec![
                ("status", Value::Int(status)),
                ("snapshot_id", Value::Union(1, Box::new(Value::Long(7)))),
                (
                    "data_file",
                    rec(vec![
                        ("content", Value::Int(0)),
                        ("file_path", Value::String(path.into())),
                        ("file_format", Value::String("PARQUET".into())),
                        ("record_count", Value::Long(3)),
                    ]),
                ),
            ])
        };
        let manifest = write(schema, vec![entry(1, "a"), entry(2, "gone"), entry(0, "b")]);
        let files = live_files(&manifest).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a", "b"]);
        assert_eq!((files[0].rows, files[0].deletes), (3, false));
        assert!(live_files(b"not avro").is_err());
    }
}
