//! Errors for people: what went wrong and where in the program text.

use std::fmt;

/// A position in program text, 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Location {
    /// Line, counting from 1.
    pub line: u64,
    /// Column, counting from 1.
    pub column: u64,
}

/// An error in a SQL program or in the data fed to it.
#[derive(Debug, Clone, thiserror::Error)]
pub struct SqlError {
    /// What went wrong.
    pub message: String,
    /// Where, when known.
    pub location: Option<Location>,
}

impl fmt::Display for SqlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.location {
            Some(l) => write!(f, "{}:{}: {}", l.line, l.column, self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl SqlError {
    /// An error without a location.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            location: None,
        }
    }

    /// An error at a location.
    pub fn at(message: impl Into<String>, line: u64, column: u64) -> Self {
        Self {
            message: message.into(),
            location: Some(Location { line, column }),
        }
    }

    /// Sets the location unless one is already known.
    pub fn or_at(mut self, location: Location) -> Self {
        if self.location.is_none() {
            self.location = Some(location);
        }
        self
    }
}

impl From<datafusion::error::DataFusionError> for SqlError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        let location = e.diagnostic().and_then(|d| d.span).map(|s| Location {
            line: s.start.line,
            column: s.start.column,
        });
        let message = e.strip_backtrace();
        Self { message, location }
    }
}

impl From<eddy_dbsp::Error> for SqlError {
    fn from(e: eddy_dbsp::Error) -> Self {
        Self::new(e.to_string())
    }
}

impl From<datafusion::arrow::error::ArrowError> for SqlError {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Self::new(e.to_string())
    }
}

/// Result type of this crate.
pub type SqlResult<T> = Result<T, SqlError>;
