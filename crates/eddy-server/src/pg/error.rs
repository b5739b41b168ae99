//! Errors of the PostgreSQL door as PostgreSQL error responses: every
//! failure carries a SQLSTATE code, and none ends the connection (only a
//! failed login does).

use pgwire::error::{ErrorInfo, PgWireError};

use crate::query::QueryError;

/// An `ERROR` response with `code` (a SQLSTATE) and `message`.
pub fn user_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "ERROR".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// A `FATAL` response: the connection ends after it (failed logins).
pub fn fatal(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new(
        "FATAL".to_owned(),
        code.to_owned(),
        message.into(),
    )))
}

/// SQLSTATE codes used by the door.
pub mod code {
    /// `syntax_error`.
    pub const SYNTAX: &str = "42601";
    /// `feature_not_supported`.
    pub const NOT_SUPPORTED: &str = "0A000";
    /// `read_only_sql_transaction`: DDL and other writes.
    pub const READ_ONLY: &str = "25006";
    /// `undefined_table`.
    pub const UNDEFINED_TABLE: &str = "42P01";
    /// `undefined_column`.
    pub const UNDEFINED_COLUMN: &str = "42703";
    /// `undefined_function`.
    pub const UNDEFINED_FUNCTION: &str = "42883";
    /// `datatype_mismatch`.
    pub const DATATYPE_MISMATCH: &str = "42804";
    /// `invalid_text_representation`.
    pub const INVALID_TEXT: &str = "22P02";
    /// `division_by_zero`.
    pub const DIVISION_BY_ZERO: &str = "22012";
    /// `not_null_violation`.
    pub const NOT_NULL: &str = "23502";
    /// `syntax_error_or_access_rule_violation`: other planning errors.
    pub const PLAN: &str = "42000";
    /// `query_canceled`: the time limit.
    pub const CANCELED: &str = "57014";
    /// `out_of_memory`.
    pub const OUT_OF_MEMORY: &str = "53200";
    /// `internal_error`.
    pub const INTERNAL: &str = "XX000";
    /// `invalid_catalog_name`: no such pipeline.
    pub const UNKNOWN_DATABASE: &str = "3D000";
    /// `invalid_password`.
    pub const INVALID_PASSWORD: &str = "28P01";
    /// `object_not_in_prerequisite_state`: the pipeline is not running.
    pub const NOT_RUNNING: &str = "55000";
    /// `undefined_object`: an unknown setting.
    pub const UNDEFINED_OBJECT: &str = "42704";
    /// `invalid_parameter_value`.
    pub const INVALID_PARAMETER: &str = "22023";
}

/// The SQLSTATE of a query's failure, from the kind of error and, for
/// planning errors (which DataFusion reports as text), its message.
pub fn query_error(e: QueryError) -> PgWireError {
    match e {
        QueryError::Invalid(m) => user_error(classify(&m), m),
        QueryError::Timeout(_) => user_error(code::CANCELED, e.to_string()),
        QueryError::Memory(m) => user_error(code::OUT_OF_MEMORY, m),
        QueryError::Internal(m) => user_error(code::INTERNAL, m),
    }
}

/// [`query_error`] for a query whose text is `sql`: a message placed in it
/// (`2:8: …`, as the REST API says it) becomes PostgreSQL's cursor
/// position, a character index into the text, which psql shows as a caret
/// under the line.
pub fn query_error_in(e: QueryError, sql: &str) -> PgWireError {
    let QueryError::Invalid(m) = e else {
        return query_error(e);
    };
    let placed = m.split_once(": ").and_then(|(at, rest)| {
        let (line, column) = at.split_once(':')?;
        let (line, column): (usize, usize) = (line.parse().ok()?, column.parse().ok()?);
        let start: usize = sql
            .split_inclusive('\n')
            .take(line.checked_sub(1)?)
            .map(|l| l.chars().count())
            .sum();
        Some((start + column, rest))
    });
    match placed {
        Some((position, rest)) => {
            let mut info = ErrorInfo::new(
                "ERROR".to_owned(),
                classify(rest).to_owned(),
                rest.to_owned(),
            );
            info.position = Some(position.to_string());
            PgWireError::UserError(Box::new(info))
        }
        None => query_error(QueryError::Invalid(m)),
    }
}

/// The SQLSTATE of a planning error's message.
pub fn classify(m: &str) -> &'static str {
    let has = |s: &str| m.contains(s);
    if m.starts_with(eddy_sql::adhoc::READ_ONLY) || has("are read-only") {
        if has("`COPY") {
            code::NOT_SUPPORTED
        } else {
            code::READ_ONLY
        }
    } else if has("ParserError")
        || has("sql parser error")
        || m.starts_with(eddy_sql::program::PARSING)
        || has("Expected:")
        || has("syntax error")
    {
        code::SYNTAX
    } else if has("No field named") || (has("column") || has("Column '")) && has("not found") {
        code::UNDEFINED_COLUMN
    } else if (has("table '") || has("table \"") || has("Object '")) && has("not found") {
        code::UNDEFINED_TABLE
    } else if has("Invalid function") || has("function") && has("not found") {
        code::UNDEFINED_FUNCTION
    } else if has("Divide by zero") || has("division by zero") {
        code::DIVISION_BY_ZERO
    } else if has("Cast error") || has("Cannot cast") || has("is not a ") {
        code::INVALID_TEXT
    } else if has("not supported") || has("Unsupported") || has("not implemented") {
        code::NOT_SUPPORTED
    } else {
        code::PLAN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_get_their_sqlstate() {
        let read_only = format!(
            "{}: `CREATE TABLE x` is not allowed",
            eddy_sql::adhoc::READ_ONLY
        );
        assert_eq!(classify(&read_only), code::READ_ONLY);
        let copy = format!("{}: `COPY t TO` is not allowed", eddy_sql::adhoc::READ_ONLY);
        assert_eq!(classify(&copy), code::NOT_SUPPORTED);
        assert_eq!(
            classify("Error during planning: table 'datafusion.public.nope' not found"),
            code::UNDEFINED_TABLE
        );
        assert_eq!(
            classify("Schema error: No field named zzz. Valid fields are t.a."),
            code::UNDEFINED_COLUMN
        );
        assert_eq!(
            classify("Column 'zzz' not found in table 't'"),
            code::UNDEFINED_COLUMN
        );
        assert_eq!(
            classify("SQL error: ParserError(\"Expected: an expression, found: EOF\")"),
            code::SYNTAX
        );
        assert_eq!(
            classify("Arrow error: Divide by zero error"),
            code::DIVISION_BY_ZERO
        );
        assert_eq!(classify("something else"), code::PLAN);
    }
}
