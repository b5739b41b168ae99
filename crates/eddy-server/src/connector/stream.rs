//! Byte streams into tables: a stream (a file, an HTTP body) is cut into
//! pieces of whole lines, each parsed in the connector's format and fed
//! with the position after it, so that a checkpoint records where the
//! stream resumes.

use std::time::Duration;

use eddy_io::format::InputFormat;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ConnectorSpec;
use crate::input::{parse_piece, Chunker, Piece};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// Waits while the pipeline is paused; false once it is stopping.
pub fn wait_while_paused(feeder: &Feeder) -> bool {
    while feeder.is_paused() {
        if feeder.is_stopping() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !feeder.is_stopping()
}

/// Sleeps `d` unless the pipeline stops first; false once it is stopping.
pub fn sleep_unless_stopping(feeder: &Feeder, d: Duration) -> bool {
    let until = std::time::Instant::now() + d;
    while std::time::Instant::now() < until {
        if feeder.is_stopping() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50).min(d));
    }
    !feeder.is_stopping()
}

/// Parses a piece and hands it to the pipeline; false once the pipeline
/// is stopping. Rejected rows are counted and logged (with the `place`
/// they are in, when the connector reads several streams).
pub fn feed_piece(
    spec: &ConnectorSpec,
    format: &InputFormat,
    piece: Piece,
    feeder: &Feeder,
    stats: &EndpointStats,
    origin: Origin,
    place: Option<&str>,
) -> bool {
    let Ok(schema) = feeder.schema(&spec.relation) else {
        return false;
    };
    let (changes, errors) = parse_piece(format, piece, schema, stats);
    let at = |e: &eddy_io::RowError| match place {
        Some(p) => format!("'{p}' {e}"),
        None => e.to_string(),
    };
    for e in errors.iter().take(10) {
        tracing::warn!(connector = %spec.name, "rejected input: {}", at(e));
    }
    if let (Some(_), Some(e)) = (place, errors.last()) {
        *stats.last_error.lock().unwrap() = Some(at(e));
    }
    if !wait_while_paused(feeder) {
        return false;
    }
    feeder
        .feed_blocking(&spec.relation, changes, origin)
        .is_ok()
}

/// How far a byte stream input has read: the byte offset of the next
/// piece and the stream line it starts on. Recorded as
/// `{"offset": n, "line": l}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StreamPosition {
    /// Bytes of the stream before the next piece.
    pub offset: u64,
    /// The stream line of the next piece, counting from 1.
    pub line: usize,
}

impl Default for StreamPosition {
    /// The stream's start.
    fn default() -> Self {
        Self { offset: 0, line: 1 }
    }
}

impl StreamPosition {
    /// The position as a checkpoint records it.
    pub fn to_value(self) -> Value {
        serde_json::to_value(self).expect("two numbers")
    }
}

/// A stream to read: its format, whether to follow it past its end, where
/// to start, how a position is recorded, and the name of the stream in
/// error reports (an object's key; `None` when the connector names it).
pub struct Stream<'a> {
    /// The format of its bytes (line-oriented when followed).
    pub format: InputFormat,
    /// Go on reading past the end, until the pipeline stops.
    pub follow: bool,
    /// Where the reader is positioned.
    pub start: StreamPosition,
    /// The position as a checkpoint records it.
    pub position_of: &'a dyn Fn(StreamPosition) -> Value,
    /// What a rejected row's line is of.
    pub place: Option<&'a str>,
}

/// How reading a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// Read to its end, all of it fed.
    Read,
    /// A read failed (reported): what was fed is whole lines only.
    Failed,
    /// A line is longer than a piece may be (reported): the stream cannot
    /// go on past it.
    Refused,
    /// The pipeline is stopping.
    Stopped,
}

/// Reads a byte stream into the pipeline, in pieces of whole lines: to its
/// end, or when followed, on past it (waiting for more) until the pipeline
/// stops. Each piece carries the position after it.
pub fn feed_stream(
    spec: &ConnectorSpec,
    mut reader: impl std::io::Read,
    feeder: &Feeder,
    stats: &EndpointStats,
    stream: Stream<'_>,
) -> StreamEnd {
    let Stream {
        format,
        follow,
        start,
        position_of,
        place,
    } = stream;
    let mut chunker = Chunker::new(&format).at_line(start.line);
    let mut read = start.offset;
    // The position just after the piece cut last.
    let after = |chunker: &Chunker, read: u64| {
        let position = StreamPosition {
            offset: read - chunker.pending() as u64,
            line: chunker.next_line(),
        };
        Origin::at(&spec.name, position_of(position))
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if feeder.is_stopping() {
            return StreamEnd::Stopped;
        }
        let piece = match reader.read(&mut buf) {
            Ok(0) if follow => {
                std::thread::sleep(Duration::from_millis(100));
                chunker.take_lines()
            }
            Ok(0) => break,
            Ok(n) => {
                read += n as u64;
                let piece = chunker.push(&buf[..n]);
                if chunker.line_too_long() {
                    stats.error(format!(
                        "a line is longer than {} bytes: the input stops here",
                        crate::input::MAX_LINE_BYTES
                    ));
                    return StreamEnd::Refused;
                }
                piece
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => None,
            Err(e) if follow => {
                stats.error(e.to_string());
                std::thread::sleep(Duration::from_millis(500));
                None
            }
            // What was read of an unfinished line is not fed: the stream
            // failed, it did not end.
            Err(e) => {
                stats.error(e.to_string());
                return StreamEnd::Failed;
            }
        };
        if let Some(piece) = piece {
            let origin = after(&chunker, read);
            if !feed_piece(spec, &format, piece, feeder, stats, origin, place) {
                return StreamEnd::Stopped;
            }
        }
    }
    if let Some(piece) = chunker.finish() {
        let origin = after(&chunker, read);
        if !feed_piece(spec, &format, piece, feeder, stats, origin, place) {
            return StreamEnd::Stopped;
        }
    }
    StreamEnd::Read
}
