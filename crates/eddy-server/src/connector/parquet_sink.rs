//! Parquet output: `file_output` with `"format": {"name": "parquet"}`
//! writes each step's change of a view as one Parquet file in the folder
//! `path` (see [`ParquetSink`]).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use eddy_dbsp::ZSet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::runner::{Sink, SinkStatus};

pub use eddy_io::parquet::WEIGHT_COLUMN;

/// How far a Parquet output has written: its files, numbered from 1.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetFiles {
    files: u64,
}

/// A view's changes as Parquet files: each step that changed the view
/// writes `NNNNNNNN.parquet` (numbered from 1) in the folder, holding the
/// changed rows with their weight in a last column `__weight` (1 for an
/// insert, -1 for a delete, more for duplicates). A file is written under a
/// temporary name, synced and renamed, so a reader of the folder (`SELECT *
/// FROM 'folder/*.parquet'` in DuckDB) only ever sees whole files, and
/// summing `__weight` per row gives the view's contents.
///
/// A fresh start removes the numbered files a previous run left; a
/// checkpoint records how many files it covers (`{"files": n}`), and a
/// resumed pipeline removes the later ones before the steps after the
/// checkpoint are replayed, so each change is in the folder once. Files of
/// other names are never touched.
pub struct ParquetSink {
    dir: PathBuf,
    files: u64,
}

/// The number of a file this sink writes (`{n:08}.parquet`: eight digits,
/// more past 99,999,999).
fn numbered(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".parquet")?;
    (stem.len() >= 8 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

impl ParquetSink {
    /// Opens (creating it if need be) the folder `dir`; resuming from a
    /// checkpoint, keeps the files it recorded, else none.
    pub fn open(dir: &Path, position: ParquetFiles) -> Result<Self, String> {
        let io = |e: std::io::Error| format!("'{}': {e}", dir.display());
        if !dir.exists() {
            std::fs::create_dir(dir).map_err(io)?;
        }
        if !dir.is_dir() {
            return Err(format!(
                "'{}' is not a folder: Parquet output writes one file per step into a folder",
                dir.display()
            ));
        }
        let files = position.files;
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let stale = numbered(name).is_some_and(|n| n > files)
                || (name.starts_with('.') && name.ends_with(".parquet.tmp"));
            if stale {
                std::fs::remove_file(entry.path()).map_err(io)?;
            }
        }
        for n in 1..=files {
            if !dir.join(format!("{n:08}.parquet")).exists() {
                return Err(format!(
                    "'{}' lacks {n:08}.parquet, which the checkpoint recorded",
                    dir.display()
                ));
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            files,
        })
    }

    fn write_file(&self, n: u64, changes: &ZSet) -> Result<u64, String> {
        let tmp = self.dir.join(format!(".{n:08}.parquet.tmp"));
        let io = |e: std::io::Error| format!("'{}': {e}", tmp.display());
        let file = File::create(&tmp).map_err(io)?;
        let mut file = eddy_io::parquet::write(changes, file)?;
        file.flush().and_then(|_| file.sync_all()).map_err(io)?;
        let bytes = file.metadata().map_err(io)?.len();
        std::fs::rename(&tmp, self.dir.join(format!("{n:08}.parquet"))).map_err(io)?;
        Ok(bytes)
    }
}

impl Sink for ParquetSink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        match self.write_file(self.files + 1, changes) {
            Ok(bytes) => {
                self.files += 1;
                SinkStatus::Written {
                    records: changes.len() as u64,
                    bytes,
                }
            }
            Err(e) => SinkStatus::Failed(e),
        }
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        // Each file was synced before its rename; the renames are made
        // durable by syncing the folder.
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("'{}': {e}", self.dir.display()))?;
        Ok(Some(
            serde_json::to_value(ParquetFiles { files: self.files }).map_err(|e| e.to_string())?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use serde_json::json;
    use std::sync::Arc;

    fn change(ids: &[i64], weights: Vec<i64>) -> ZSet {
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(ids.to_vec()))]).unwrap();
        ZSet::new(batch, weights)
    }

    fn read(path: &Path) -> Vec<(i64, i64)> {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
            .unwrap()
            .build()
            .unwrap();
        let mut out = Vec::new();
        for b in reader {
            let b = b.unwrap();
            let id = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let w = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            assert_eq!(b.schema().field(1).name(), WEIGHT_COLUMN);
            out.extend(id.values().iter().copied().zip(w.values().iter().copied()));
        }
        out
    }

    #[test]
    fn one_file_per_step_and_a_resume_removes_what_the_checkpoint_lacks() {
        let dir = std::env::temp_dir().join(format!("eddy-parquet-sink-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        let out = dir.join("v");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(out.join("notes.txt"), "kept").unwrap();
        let mut sink = ParquetSink::open(&out, ParquetFiles::default()).unwrap();
        assert!(matches!(
            sink.write(1, &change(&[1, 2], vec![1, 1])),
            SinkStatus::Written { records: 2, .. }
        ));
        let at = sink.checkpoint(Path::new("unused")).unwrap().unwrap();
        assert_eq!(at, json!({"files": 1}));
        let at: ParquetFiles = serde_json::from_value(at).unwrap();
        sink.write(2, &change(&[2, 3], vec![-1, 2]));
        assert_eq!(read(&out.join("00000002.parquet")), [(2, -1), (3, 2)]);
        // Resumed at the checkpoint: the second file goes, the first stays.
        let sink = ParquetSink::open(&out, at).unwrap();
        assert_eq!(sink.files, 1);
        assert!(!out.join("00000002.parquet").exists());
        assert_eq!(read(&out.join("00000001.parquet")), [(1, 1), (2, 1)]);
        // A fresh start removes every numbered file, and nothing else.
        ParquetSink::open(&out, ParquetFiles::default()).unwrap();
        assert!(!out.join("00000001.parquet").exists());
        assert!(out.join("notes.txt").exists());
        // A checkpoint whose files are gone is refused.
        assert!(ParquetSink::open(&out, at).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
