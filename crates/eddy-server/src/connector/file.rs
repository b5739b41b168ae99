//! `file_input` and `file_output`: a table fed from a file (read once, or
//! followed as it grows, with `"follow": true`), and a view's changes
//! appended to a file, one step after another.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use eddy_dbsp::ZSet;
use serde_json::Value;

use super::{feed_stream, ConnectorSpec, FileAccess};
use crate::format::OutputFormat;
use crate::runner::{Feeder, Sink, SinkStatus};
use crate::stats::EndpointStats;

/// A file feeding a table.
pub struct FileSource {
    file: File,
    follow: bool,
}

impl FileSource {
    /// Opens the file named by `"path"`, which must be one `files` allows.
    pub fn open(spec: &ConnectorSpec, files: &FileAccess) -> Result<Self, String> {
        let path = files.resolve(spec.required("path")?)?;
        let file = File::open(&path).map_err(|e| format!("opening '{}': {e}", path.display()))?;
        let follow = spec
            .config
            .get("follow")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        Ok(Self { file, follow })
    }

    /// Reads the file into the pipeline (and, when following, whatever is
    /// appended later, until the pipeline stops).
    pub fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        if feed_stream(spec, self.file, feeder, stats, self.follow) && !self.follow {
            stats.end_of_input.store(true, Ordering::Relaxed);
        }
    }
}

/// A file receiving a view's changes.
pub struct FileSink {
    out: BufWriter<File>,
    format: OutputFormat,
}

impl FileSink {
    /// Creates (or truncates) the file at `path` (already checked).
    pub fn open(path: &Path, format: OutputFormat) -> Result<Self, String> {
        let file = File::create(path).map_err(|e| format!("creating '{}': {e}", path.display()))?;
        Ok(Self {
            out: BufWriter::new(file),
            format,
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
            Ok(()) => SinkStatus::Written {
                records: changes.len() as u64,
                bytes: text.len() as u64,
            },
            Err(e) => SinkStatus::Failed(e.to_string()),
        }
    }

    fn flush(&mut self) {
        let _ = self.out.flush();
    }
}
