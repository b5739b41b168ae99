//! `file_input` and `file_output`: a table fed from a file (read once, or
//! followed as it grows, with `"follow": true`), and a view's changes
//! appended to a file, one step after another.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::sync::atomic::Ordering;
use std::time::Duration;

use eddy_dbsp::ZSet;
use serde_json::Value;

use super::{feed_piece, feed_stream, ConnectorSpec};
use crate::format::{InputFormat, OutputFormat};
use crate::input::Chunker;
use crate::runner::{Feeder, Sink, SinkStatus};
use crate::stats::EndpointStats;

/// A file feeding a table.
pub struct FileSource {
    file: File,
    follow: bool,
}

impl FileSource {
    /// Opens the file named by `"path"`.
    pub fn open(spec: &ConnectorSpec) -> Result<Self, String> {
        let path = spec.required("path")?;
        let file = File::open(path).map_err(|e| format!("opening '{path}': {e}"))?;
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
        if !self.follow {
            if feed_stream(spec, self.file, feeder, stats) {
                stats.end_of_input.store(true, Ordering::Relaxed);
            }
            return;
        }
        let format = match InputFormat::from_config(spec.format.as_ref()) {
            Ok(f) if f.line_oriented() => f,
            Ok(_) => {
                stats.error("a followed file must be line-oriented (not a JSON array)");
                return;
            }
            Err(e) => {
                stats.error(e);
                return;
            }
        };
        let mut file = self.file;
        let mut chunker = Chunker::new(&format);
        let mut buf = vec![0u8; 64 * 1024];
        while !feeder.is_stopping() {
            match file.read(&mut buf) {
                Ok(0) => {
                    if let Some(piece) = chunker.take_lines() {
                        if !feed_piece(spec, &format, piece, feeder, stats, None) {
                            return;
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(n) => {
                    if let Some(piece) = chunker.push(&buf[..n]) {
                        if !feed_piece(spec, &format, piece, feeder, stats, None) {
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    stats.error(e.to_string());
                    std::thread::sleep(Duration::from_millis(500));
                }
            }
        }
    }
}

/// A file receiving a view's changes.
pub struct FileSink {
    out: BufWriter<File>,
    format: OutputFormat,
}

impl FileSink {
    /// Creates (or truncates) the file.
    pub fn open(path: &str, format: OutputFormat) -> Result<Self, String> {
        let file = File::create(path).map_err(|e| format!("creating '{path}': {e}"))?;
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
