//! `eddy-io`: turning bytes into weighted batches (Z-sets) and back.
//!
//! Parsers never stop at a bad row: each rejected row is reported with its
//! position and the reason, and every other row is kept.

pub mod csv;
pub mod json;

/// A row that could not be parsed or does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// 1-based line (or record) number in the input.
    pub line: usize,
    /// Why the row was rejected.
    pub reason: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// The outcome of parsing: the accepted rows and the rejected ones.
#[derive(Debug)]
pub struct Parsed {
    /// Accepted rows with their weights.
    pub changes: eddy_dbsp::ZSet,
    /// Rejected rows.
    pub errors: Vec<RowError>,
}
