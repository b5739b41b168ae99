//! `file_input` and `file_output`: a table fed from a file (read once, or
//! followed as it grows, with `"follow": true`; a Parquet file is read by
//! `parquet.rs`), and a view's changes appended to a file, one step after
//! another.
//!
//! Checkpoints: an input records the byte offset (and line) its state
//! holds, and a resumed one seeks there. An output records its length once
//! synced; a resumed one cuts the file back to that length, so the steps
//! after the checkpoint, which the pipeline replays, are written once.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use eddy_dbsp::ZSet;
use serde_json::{json, Value};

use super::{feed_stream, ConnectorSpec, FileAccess, StreamPosition};
use crate::format::OutputFormat;
use crate::runner::{Feeder, Sink, SinkStatus};
use crate::stats::EndpointStats;

/// A file feeding a table.
pub struct FileSource {
    file: File,
    follow: bool,
    start: StreamPosition,
    /// A Parquet file's position: the rows a checkpoint holds.
    parquet: Option<Option<Value>>,
}

impl FileSource {
    /// Opens the file named by `"path"`, which must be one `files` allows,
    /// at `position` (from a checkpoint) or its start.
    pub fn open(
        spec: &ConnectorSpec,
        files: &FileAccess,
        position: Option<&Value>,
    ) -> Result<Self, String> {
        let path = files.resolve(spec.required("path")?)?;
        let io = |e: std::io::Error| format!("opening '{}': {e}", path.display());
        let mut file = File::open(&path).map_err(io)?;
        if super::parquet::wanted(spec) {
            return Ok(Self {
                file,
                follow: false,
                start: StreamPosition::from_value(None),
                parquet: Some(position.cloned()),
            });
        }
        let start = StreamPosition::from_value(position);
        let len = file.metadata().map_err(io)?.len();
        if start.offset > len {
            return Err(format!(
                "'{}' has {len} bytes, fewer than the {} the checkpoint had read: it was replaced",
                path.display(),
                start.offset
            ));
        }
        file.seek(SeekFrom::Start(start.offset)).map_err(io)?;
        let follow = spec
            .config
            .get("follow")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Self {
            file,
            follow,
            start,
            parquet: None,
        })
    }

    /// Reads the file into the pipeline (and, when following, whatever is
    /// appended later, until the pipeline stops).
    pub fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        if let Some(position) = self.parquet {
            if super::parquet::feed(spec, self.file, feeder, stats, position.as_ref()) {
                stats.end_of_input.store(true, Ordering::Relaxed);
            }
            return;
        }
        if feed_stream(spec, self.file, feeder, stats, self.follow, self.start) && !self.follow {
            stats.end_of_input.store(true, Ordering::Relaxed);
        }
    }
}

/// A file receiving a view's changes.
pub struct FileSink {
    out: BufWriter<File>,
    format: OutputFormat,
    /// Bytes in the file.
    len: u64,
}

impl FileSink {
    /// Creates (or truncates) the file at `path` (already checked), or,
    /// resuming from a checkpoint, cuts it back to the length `position`
    /// recorded and appends from there.
    pub fn open(
        path: &Path,
        format: OutputFormat,
        position: Option<&Value>,
    ) -> Result<Self, String> {
        let io = |e: std::io::Error| format!("opening '{}': {e}", path.display());
        let len = position
            .and_then(|p| p.get("bytes"))
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        if file.metadata().map_err(io)?.len() < len {
            return Err(format!(
                "'{}' is shorter than the {len} bytes the checkpoint recorded",
                path.display()
            ));
        }
        file.set_len(len).map_err(io)?;
        file.seek(SeekFrom::Start(len)).map_err(io)?;
        Ok(Self {
            out: BufWriter::new(file),
            format,
            len,
        })
    }
}

impl Sink for FileSink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        let text = match self.format.encode(changes) {
            Ok(t) => t,
            Err(e) => return SinkStatus::Failed(e),
        };
        match self
            .out
            .write_all(text.as_bytes())
            .and_then(|_| self.out.flush())
        {
            Ok(()) => {
                self.len += text.len() as u64;
                SinkStatus::Written {
                    records: changes.len() as u64,
                    bytes: text.len() as u64,
                }
            }
            Err(e) => SinkStatus::Failed(e.to_string()),
        }
    }

    fn flush(&mut self) {
        let _ = self.out.flush();
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        self.out
            .flush()
            .and_then(|_| self.out.get_ref().sync_data())
            .map_err(|e| e.to_string())?;
        Ok(Some(json!({"bytes": self.len})))
    }
}
