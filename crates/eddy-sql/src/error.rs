//! Errors for people: what went wrong and where in the program text.

use std::fmt;

use datafusion::sql::sqlparser::tokenizer::Span;

use crate::wording::{in_sql_words, innermost, signature_in_sql_words};
pub use crate::wording::{operators_as_written, respelled};

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
    /// Where what it names ends (exclusive), when known.
    pub end: Option<Location>,
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
            end: None,
        }
    }

    /// An error at a location.
    pub fn at(message: impl Into<String>, line: u64, column: u64) -> Self {
        Self {
            message: message.into(),
            location: Some(Location { line, column }),
            end: None,
        }
    }

    /// Sets the location unless one is already known.
    pub fn or_at(mut self, location: Location) -> Self {
        if self.location.is_none() {
            self.location = Some(location);
        }
        self
    }

    /// Places the error at `span` (start, and end when it has one) unless
    /// it is placed already.
    pub fn or_in(self, span: Span) -> Self {
        self.or_between(
            (span.start.line, span.start.column),
            (span.end.line, span.end.column),
        )
    }

    /// Places the error from `start` to `end` (line, column) unless it is
    /// placed already.
    fn or_between(mut self, start: (u64, u64), end: (u64, u64)) -> Self {
        if self.location.is_none() && start.0 > 0 {
            self.location = Some(Location {
                line: start.0,
                column: start.1,
            });
            self.end = (end > start).then_some(Location {
                line: end.0,
                column: end.1,
            });
        }
        self
    }

    /// The error as a compiler prints it: the message, then the line of
    /// `text` it points at with a caret under what it names.
    ///
    /// ```text
    /// error: Column 'amt' not found in table 'orders'
    ///  --> 2:25
    ///   |
    /// 2 | CREATE VIEW v AS SELECT amt FROM orders;
    ///   |                         ^^^
    /// ```
    pub fn snippet(&self, text: &str) -> String {
        self.snippet_in(text, "")
    }

    /// [`SqlError::snippet`], the place prefixed with the name of the file
    /// `text` came from (`--> views.sql:2:25`) unless `file` is empty.
    pub fn snippet_in(&self, text: &str, file: &str) -> String {
        let mut out = format!("error: {}", self.message);
        let Some(at) = self.location else {
            return out;
        };
        let Some(line) = text.lines().nth(at.line.saturating_sub(1) as usize) else {
            return out;
        };
        let number = at.line.to_string();
        let pad = " ".repeat(number.len());
        // Columns count characters; tabs keep their width under the line.
        let before: String = line
            .chars()
            .take(at.column.saturating_sub(1) as usize)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        let width = match self.end {
            Some(end) if end.line == at.line && end.column > at.column => {
                (end.column - at.column) as usize
            }
            Some(end) if end.line > at.line => line
                .chars()
                .count()
                .saturating_sub(before.chars().count())
                .max(1),
            _ => 1,
        };
        out.push_str(&format!(
            "\n{pad}--> {file}{}{}:{}\n{pad} |\n{number} | {line}\n{pad} | {before}{}",
            if file.is_empty() { "" } else { ":" },
            at.line,
            at.column,
            "^".repeat(width)
        ));
        out
    }
}

impl From<datafusion::error::DataFusionError> for SqlError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        Self::from(&e)
    }
}

impl From<&datafusion::error::DataFusionError> for SqlError {
    fn from(e: &datafusion::error::DataFusionError) -> Self {
        let message = in_sql_words(&signature_in_sql_words(&innermost(&e.strip_backtrace())));
        let error = Self::new(message);
        match e.diagnostic().and_then(|d| d.span) {
            Some(s) => error.or_between((s.start.line, s.start.column), (s.end.line, s.end.column)),
            None => error,
        }
    }
}

pub use eddy_io::types::sql_type_name;

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
