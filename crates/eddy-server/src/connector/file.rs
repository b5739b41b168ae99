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
use eddy_io::format::{FormatKind, InputFormat, OutputFormat};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{
    feed_stream, position, CheckContext, ConnectorSpec, FileAccess, InputContext, InputRun,
    OutputContext, Stream, StreamEnd, StreamPosition, Transport,
};
use crate::runner::{Feeder, Sink, SinkStatus};
use crate::stats::EndpointStats;

/// `file_input`'s configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileInput {
    /// The file, inside the folders file connectors may use.
    pub path: String,
    /// Go on reading as the file grows, until the pipeline stops.
    #[serde(default)]
    pub follow: bool,
}

impl Transport for FileInput {
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        cx.files.check(&self.path)?;
        if spec.format_kind() == Some(FormatKind::Parquet) {
            if self.follow {
                return Err("a Parquet file cannot be followed (its index is at its end)".into());
            }
        } else if self.follow && !spec.input_format()?.line_oriented() {
            return Err("a followed input must be line-oriented (not a JSON array)".into());
        }
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let source = FileSource::open(self, spec, cx.files, cx.position)?;
        cx.run(spec, move |spec, feeder, stats| {
            source.run(spec, feeder, stats)
        })
    }
}

/// A file feeding a table.
struct FileSource {
    file: File,
    follow: bool,
    read: Read,
}

/// How the file is read, from where.
enum Read {
    Text(InputFormat, StreamPosition),
    Parquet(super::parquet::ParquetPosition),
}

impl FileSource {
    /// Opens the file and seeks to `position` (from a checkpoint).
    fn open(
        config: &FileInput,
        spec: &ConnectorSpec,
        files: &FileAccess,
        position: Option<&Value>,
    ) -> Result<Self, String> {
        let path = files.resolve(&config.path)?;
        let io = |e: std::io::Error| format!("opening '{}': {e}", path.display());
        let mut file = File::open(&path).map_err(io)?;
        if spec.format_kind() == Some(FormatKind::Parquet) {
            return Ok(Self {
                file,
                follow: false,
                read: Read::Parquet(super::position(position)?),
            });
        }
        let start: StreamPosition = super::position(position)?;
        let len = file.metadata().map_err(io)?.len();
        if start.offset > len {
            return Err(format!(
                "'{}' has {len} bytes, fewer than the {} the checkpoint had read: it was replaced",
                path.display(),
                start.offset
            ));
        }
        file.seek(SeekFrom::Start(start.offset)).map_err(io)?;
        Ok(Self {
            file,
            follow: config.follow,
            read: Read::Text(spec.input_format()?, start),
        })
    }

    /// Reads the file into the pipeline.
    fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let done = match self.read {
            Read::Parquet(position) => super::parquet::feed(
                spec,
                self.file,
                feeder,
                stats,
                super::parquet::Rows::inserted(
                    position.rows,
                    &super::parquet::ParquetPosition::at,
                    None,
                ),
            )
            // A file that cannot be read is reported; the input ends.
            .unwrap_or_else(|e| {
                stats.error(e.error);
                true
            }),
            Read::Text(format, start) => {
                feed_stream(
                    spec,
                    self.file,
                    feeder,
                    stats,
                    Stream {
                        format,
                        follow: self.follow,
                        start,
                        position_of: &StreamPosition::to_value,
                        place: None,
                    },
                ) == StreamEnd::Read
                    && !self.follow
            }
        };
        if done {
            stats.end_of_input.store(true, Ordering::Relaxed);
        }
    }
}

/// `file_output`'s configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOutput {
    /// The file (a folder for Parquet), inside the folders file connectors
    /// may use.
    pub path: String,
}

impl Transport for FileOutput {
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        cx.files.check(&self.path)?;
        if spec.format_kind() != Some(FormatKind::Parquet) {
            spec.output_format()?;
        }
        Ok(())
    }

    fn open_output(
        &self,
        spec: &ConnectorSpec,
        cx: OutputContext<'_>,
    ) -> Result<Box<dyn super::Sink>, String> {
        let path = cx.files.resolve(&self.path)?;
        let resume = cx.resume.map(|(_, p)| p);
        if spec.format_kind() == Some(FormatKind::Parquet) {
            return Ok(Box::new(super::parquet_sink::ParquetSink::open(
                &path,
                position(resume)?,
            )?));
        }
        Ok(Box::new(FileSink::open(
            &path,
            spec.output_format()?,
            position(resume)?,
        )?))
    }
}

/// A file output's position: the bytes written and synced.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePosition {
    bytes: u64,
}

/// A view's changes appended to a file.
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
    pub fn open(path: &Path, format: OutputFormat, position: FilePosition) -> Result<Self, String> {
        let io = |e: std::io::Error| format!("opening '{}': {e}", path.display());
        let len = position.bytes;
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
        Ok(Some(
            serde_json::to_value(FilePosition { bytes: self.len }).map_err(|e| e.to_string())?,
        ))
    }
}
