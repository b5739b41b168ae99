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

/// Parses a piece and hands it to the pipeline; false once the pipeline
/// is stopping. Rejected rows are counted and logged.
pub fn feed_piece(
    spec: &ConnectorSpec,
    format: &InputFormat,
    piece: Piece,
    feeder: &Feeder,
    stats: &EndpointStats,
    origin: Origin,
) -> bool {
    let Ok(schema) = feeder.schema(&spec.relation) else {
        return false;
    };
    let (changes, errors) = parse_piece(format, piece, schema, stats);
    for e in errors.iter().take(10) {
        tracing::warn!(connector = %spec.name, "rejected input: {e}");
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
    fn to_value(self) -> Value {
        serde_json::to_value(self).expect("two numbers")
    }
}

/// Reads a byte stream in `format` (line-oriented when `follow`),
/// positioned at `start`, into the pipeline, in pieces of whole lines: to
/// its end, or with `follow`, on past it (waiting for more) until the
/// pipeline stops. Each piece carries the position
/// after it. Returns false if the pipeline stopped first.
pub fn feed_stream(
    spec: &ConnectorSpec,
    mut reader: impl std::io::Read,
    feeder: &Feeder,
    stats: &EndpointStats,
    format: InputFormat,
    follow: bool,
    start: StreamPosition,
) -> bool {
    let mut chunker = Chunker::new(&format).at_line(start.line);
    let mut read = start.offset;
    // The position just after the piece cut last.
    let after = |chunker: &Chunker, read: u64| {
        let position = StreamPosition {
            offset: read - chunker.pending() as u64,
            line: chunker.next_line(),
        };
        Origin::at(&spec.name, position.to_value())
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if feeder.is_stopping() {
            return false;
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
                    return true;
                }
                piece
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => None,
            Err(e) if follow => {
                stats.error(e.to_string());
                std::thread::sleep(Duration::from_millis(500));
                None
            }
            Err(e) => {
                stats.error(e.to_string());
                break;
            }
        };
        if let Some(piece) = piece {
            let origin = after(&chunker, read);
            if !feed_piece(spec, &format, piece, feeder, stats, origin) {
                return false;
            }
        }
    }
    if let Some(piece) = chunker.finish() {
        let origin = after(&chunker, read);
        if !feed_piece(spec, &format, piece, feeder, stats, origin) {
            return false;
        }
    }
    true
}
