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
        let message = signature_in_sql_words(&e.strip_backtrace());
        Self { message, location }
    }
}

/// DataFusion's refusal of a call's argument types, in Feldera's words and
/// SQL's type names: `No function matches the given name and argument
/// types 'avg(Boolean)'. … Candidate functions: avg(Float64)` becomes
/// `Cannot apply 'AVG' to arguments of type 'AVG(<BOOLEAN>)'. Supported
/// form(s): 'AVG(<DOUBLE>)'`. Other messages are kept.
fn signature_in_sql_words(message: &str) -> String {
    const NO_MATCH: &str = "No function matches the given name and argument types '";
    if let Some(at) = message.find(NO_MATCH) {
        let rest = &message[at + NO_MATCH.len()..];
        if let Some((call, candidates)) = rest.split_once("'.") {
            if let Some((name, args)) = call.split_once('(') {
                let args = args.strip_suffix(')').unwrap_or(args);
                let name = name.to_uppercase();
                let types = |list: &str| {
                    top_level(list)
                        .iter()
                        .map(|t| format!("<{}>", sql_type_name(t)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let forms: Vec<String> = candidates
                    .lines()
                    .map(str::trim)
                    .filter_map(|l| l.split_once('('))
                    .map(|(_, a)| format!("'{name}({})'", types(a.strip_suffix(')').unwrap_or(a))))
                    .collect();
                return format!(
                    "Cannot apply '{name}' to arguments of type '{name}({})'. Supported form(s): {}",
                    types(args),
                    forms.join(", ")
                );
            }
        }
    }
    const NO_SIGNATURE: &str = "Function '";
    if let Some(at) = message.find(NO_SIGNATURE) {
        let rest = &message[at + NO_SIGNATURE.len()..];
        if let Some((name, why)) = rest.split_once("' failed to match any signature, errors: ") {
            return format!(
                "Cannot apply '{}' to arguments of these types: {why}",
                name.to_uppercase()
            );
        }
    }
    message.to_string()
}

/// The items of a comma-separated list of types, split where no
/// parentheses or quotes enclose the comma.
fn top_level(list: &str) -> Vec<&str> {
    let (mut depth, mut quoted, mut start, mut out) = (0i32, false, 0, Vec::new());
    for (i, c) in list.char_indices() {
        match c {
            '"' => quoted = !quoted,
            '(' | '<' | '[' if !quoted => depth += 1,
            ')' | '>' | ']' if !quoted => depth -= 1,
            ',' if depth == 0 && !quoted => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !list[start..].trim().is_empty() {
        out.push(list[start..].trim());
    }
    out
}

/// The SQL name of a type DataFusion prints in Arrow's words.
pub fn sql_type_name(arrow: &str) -> String {
    let head = arrow.split(['(', '<']).next().unwrap_or(arrow).trim();
    let name = match head {
        "Boolean" => "BOOLEAN",
        "Int8" => "TINYINT",
        "Int16" => "SMALLINT",
        "Int32" => "INTEGER",
        "Int64" => "BIGINT",
        "UInt8" => "TINYINT UNSIGNED",
        "UInt16" => "SMALLINT UNSIGNED",
        "UInt32" => "INTEGER UNSIGNED",
        "UInt64" => "BIGINT UNSIGNED",
        "Float16" | "Float32" => "REAL",
        "Float64" => "DOUBLE",
        "Utf8" | "LargeUtf8" | "Utf8View" => "VARCHAR",
        "Binary" | "LargeBinary" | "BinaryView" | "FixedSizeBinary" => "VARBINARY",
        "Date32" | "Date64" => "DATE",
        "Time32" | "Time64" => "TIME",
        "Timestamp" => "TIMESTAMP",
        "Interval" | "Duration" => "INTERVAL",
        "List" | "LargeList" | "FixedSizeList" | "ListView" => "ARRAY",
        "Struct" => "ROW",
        "Map" => "MAP",
        "Null" => "NULL",
        "Decimal32" | "Decimal64" | "Decimal128" | "Decimal256" => {
            return arrow.replacen(head, "DECIMAL", 1);
        }
        _ => return arrow.to_string(),
    };
    name.to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_signature_is_said_in_sql_words() {
        let df = "Error during planning: No function matches the given name and argument types \
                  'avg(Boolean)'. You might need to add explicit type casts.\n\tCandidate \
                  functions:\n\tavg(Float64)";
        assert_eq!(
            signature_in_sql_words(df),
            "Cannot apply 'AVG' to arguments of type 'AVG(<BOOLEAN>)'. \
             Supported form(s): 'AVG(<DOUBLE>)'"
        );
        let two = "No function matches the given name and argument types \
                   'f(Struct(\"a\": Int32, \"b\": Utf8), Decimal128(6, 2))'. x\n\tCandidate \
                   functions:\n\tf(Int32)";
        assert!(
            signature_in_sql_words(two).contains("'F(<ROW>, <DECIMAL(6, 2)>)'"),
            "{}",
            signature_in_sql_words(two)
        );
        assert_eq!(
            signature_in_sql_words("table 't' not found"),
            "table 't' not found"
        );
    }
}
