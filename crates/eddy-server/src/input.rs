//! From a byte stream to changes: bytes are gathered into pieces that end at
//! a line end (so each piece parses alone and memory stays bounded however
//! long the stream is), each piece is parsed, and rejected rows are counted
//! and reported with their line in the whole stream.

use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use eddy_io::RowError;
use std::sync::atomic::Ordering;

use crate::stats::EndpointStats;
use eddy_io::format::InputFormat;

/// Bytes gathered before a piece is cut at the last line end.
const PIECE_BYTES: usize = 1 << 20;

/// Longest line of line-oriented input: a stream without line ends would
/// otherwise be gathered whole.
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// A piece of input: whole lines.
pub struct Piece {
    /// The text (lines that were not UTF-8 are left empty and reported);
    /// empty when the format takes bytes.
    pub text: String,
    /// The bytes, for a format that takes them (raw).
    pub raw: Option<Vec<u8>>,
    /// The stream line of its first line, counting from 1.
    pub first_line: usize,
    /// Bytes of input it covers.
    pub bytes: usize,
    /// Lines rejected before parsing (not UTF-8).
    pub errors: Vec<RowError>,
}

/// Cuts a byte stream into pieces of whole lines.
pub struct Chunker {
    pending: Vec<u8>,
    next_line: usize,
    line_oriented: bool,
    /// Pieces keep their bytes (not made text).
    bytes: bool,
}

impl Chunker {
    /// A chunker for `format`; formats that are not line-oriented (a JSON
    /// array) are gathered whole.
    pub fn new(format: &InputFormat) -> Self {
        Self {
            pending: Vec::new(),
            next_line: 1,
            line_oriented: format.line_oriented(),
            bytes: format.takes_bytes(),
        }
    }

    /// A chunker whose first line is line `line` of the stream (a stream
    /// read on from a position).
    pub fn at_line(mut self, line: usize) -> Self {
        self.next_line = line.max(1);
        self
    }

    /// The stream line of the next line to be cut.
    pub fn next_line(&self) -> usize {
        self.next_line
    }

    /// Adds bytes without cutting (an input that cuts pieces only where
    /// its own units end, such as Kafka messages).
    pub fn gather(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Bytes gathered and not yet cut.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Whether the line being gathered is longer than [`MAX_LINE_BYTES`]:
    /// the input should be refused rather than gathered further.
    pub fn line_too_long(&self) -> bool {
        self.line_oriented && self.pending.len() > MAX_LINE_BYTES
    }

    /// Adds bytes; returns a piece once enough whole lines have gathered.
    pub fn push(&mut self, bytes: &[u8]) -> Option<Piece> {
        self.pending.extend_from_slice(bytes);
        if !self.line_oriented || self.pending.len() < PIECE_BYTES {
            return None;
        }
        let end = self.pending.iter().rposition(|&b| b == b'\n')? + 1;
        let rest = self.pending.split_off(end);
        let whole = std::mem::replace(&mut self.pending, rest);
        Some(self.piece(whole))
    }

    /// Cuts the whole lines gathered so far, keeping a partial last line
    /// (for inputs that wait for more, like a followed file).
    pub fn take_lines(&mut self) -> Option<Piece> {
        let end = self.pending.iter().rposition(|&b| b == b'\n')? + 1;
        let rest = self.pending.split_off(end);
        let whole = std::mem::replace(&mut self.pending, rest);
        Some(self.piece(whole))
    }

    /// The rest of the stream, when it has ended.
    pub fn finish(&mut self) -> Option<Piece> {
        if self.pending.is_empty() {
            return None;
        }
        let whole = std::mem::take(&mut self.pending);
        Some(self.piece(whole))
    }

    fn piece(&mut self, bytes: Vec<u8>) -> Piece {
        let first_line = self.next_line;
        let n = bytes.len();
        if self.bytes {
            self.next_line += bytes.iter().filter(|&&b| b == b'\n').count();
            return Piece {
                text: String::new(),
                raw: Some(bytes),
                first_line,
                bytes: n,
                errors: Vec::new(),
            };
        }
        let mut errors = Vec::new();
        let text = match String::from_utf8(bytes) {
            Ok(t) => t,
            Err(e) => {
                let bytes = e.into_bytes();
                let mut text = String::with_capacity(bytes.len());
                for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
                    if i > 0 {
                        text.push('\n');
                    }
                    match std::str::from_utf8(line) {
                        Ok(l) => text.push_str(l),
                        Err(_) => errors.push(RowError {
                            line: first_line + i,
                            reason: "not valid UTF-8".into(),
                        }),
                    }
                }
                text
            }
        };
        self.next_line += text.matches('\n').count();
        Piece {
            text,
            raw: None,
            first_line,
            bytes: n,
            errors,
        }
    }
}

/// Parses a piece for a table with `schema`, counting records, bytes and
/// rejected rows on `endpoint`; errors carry stream line numbers.
pub fn parse_piece(
    format: &InputFormat,
    piece: Piece,
    schema: &SchemaRef,
    endpoint: &EndpointStats,
) -> (ZSet, Vec<RowError>) {
    let parsed = match &piece.raw {
        Some(bytes) => format.parse_bytes(bytes, schema),
        None => format.parse(&piece.text, schema),
    };
    let mut errors = piece.errors;
    let offset = if format.line_oriented() {
        piece.first_line - 1
    } else {
        0
    };
    errors.extend(parsed.errors.into_iter().map(|e| RowError {
        line: e.line + offset,
        reason: e.reason,
    }));
    endpoint
        .records
        .fetch_add(parsed.changes.len() as u64, Ordering::Relaxed);
    endpoint
        .bytes
        .fetch_add(piece.bytes as u64, Ordering::Relaxed);
    if let Some(e) = errors.last() {
        endpoint.rejected(errors.len() as u64, &e.to_string());
    }
    (parsed.changes, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    #[test]
    fn a_line_without_end_is_too_long_past_the_limit() {
        let mut c = Chunker::new(&InputFormat::Csv);
        let block = vec![b'x'; 1 << 20];
        for _ in 0..16 {
            assert!(c.push(&block).is_none());
            assert!(!c.line_too_long());
        }
        c.push(b"x");
        assert!(c.line_too_long());
        // With line ends, pieces are cut and nothing piles up.
        let mut c = Chunker::new(&InputFormat::Csv);
        let mut lines = vec![b'1'; 1 << 20];
        lines.push(b'\n');
        for _ in 0..20 {
            let _ = c.push(&lines);
            assert!(!c.line_too_long());
        }
    }

    #[test]
    fn pieces_keep_stream_line_numbers() {
        let format = InputFormat::Csv;
        let schema: SchemaRef = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let stats = EndpointStats::new("e", "t");
        let mut c = Chunker::new(&format);
        assert!(c.push(b"1\n2\nzz\n4").is_none());
        let p = c.take_lines().unwrap();
        assert_eq!(p.first_line, 1);
        let (z, errors) = parse_piece(&format, p, &schema, &stats);
        assert_eq!(z.len(), 2);
        assert_eq!(errors[0].line, 3);
        c.push(b"\nbad\xff\n6\n");
        let p = c.finish().unwrap();
        assert_eq!(p.first_line, 4);
        let (z, errors) = parse_piece(&format, p, &schema, &stats);
        assert_eq!(z.len(), 2);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].line, 5);
        assert_eq!(errors[0].reason, "not valid UTF-8");
        assert_eq!(stats.parse_errors.load(Ordering::Relaxed), 2);
    }
}
