//! Ad-hoc query text, checked before DataFusion plans it: parsed as
//! DataFusion parses it (with its own `COPY`, `CREATE EXTERNAL TABLE` and
//! `EXPLAIN` forms), measured for depth ([`limits::check_depth`]), and
//! allowed only when it reads: queries, `EXPLAIN` of a query, `SHOW
//! TABLES`, `SHOW COLUMNS` and `DESCRIBE`.
//!
//! This is the first of two guards; the server also plans the text under
//! DataFusion's `SQLOptions` with DDL, DML and statements disallowed.

use datafusion::error::DataFusionError;
use datafusion::sql::parser::{CopyToSource, DFParserBuilder, Statement as DFStatement};
use datafusion::sql::sqlparser::ast::{SetExpr, Statement};
use datafusion::sql::sqlparser::parser::ParserError;

use crate::error::{SqlError, SqlResult};
use crate::program::{nesting_error, parser_error, RECURSION_LIMIT};
use crate::{guard, limits};

/// What ad-hoc queries may be, for messages.
pub const READ_ONLY: &str = "ad-hoc queries are read-only (SELECT, EXPLAIN, SHOW, DESCRIBE)";

/// Checks ad-hoc query text; see the module documentation.
pub fn check_query_text(sql: &str) -> SqlResult<()> {
    let statements = DFParserBuilder::new(sql)
        .with_recursion_limit(RECURSION_LIMIT)
        .build()
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| match e.find_root() {
            DataFusionError::SQL(pe, _) if **pe == ParserError::RecursionLimitExceeded => {
                nesting_error(sql)
            }
            // sqlparser's own words (`sql parser error: … at Line: 1,
            // Column: 1`), not DataFusion's debug print of them.
            DataFusionError::SQL(pe, _) => parser_error(&pe.to_string()),
            other => parser_error(&other.to_string()),
        })?;
    for statement in &statements {
        check_statement(statement)?;
    }
    Ok(())
}

/// A query's failure to plan or run in SQL's words, placed at what it
/// names in `sql` when DataFusion gave no place ([`crate::locate`]).
pub fn query_error(e: &DataFusionError, sql: &str) -> SqlError {
    let mut error = SqlError::from(e);
    let statement = DFParserBuilder::new(sql)
        .with_recursion_limit(RECURSION_LIMIT)
        .build()
        .and_then(|mut p| p.parse_statements())
        .ok()
        .and_then(|mut s| s.pop_front());
    if let Some(DFStatement::Statement(s)) = &statement {
        error.message = crate::locate::as_written(&error.message, s);
    }
    if error.location.is_some() {
        return error;
    }
    let place = match &statement {
        Some(DFStatement::Statement(s)) => crate::locate::place(&error.message, s),
        Some(DFStatement::Explain(explain)) => match explain.statement.as_ref() {
            DFStatement::Statement(s) => crate::locate::place(&error.message, s),
            _ => None,
        },
        _ => None,
    };
    match place {
        Some(span) => error.or_in(span),
        None => error,
    }
}

fn refused(what: String) -> SqlError {
    SqlError::new(format!("{READ_ONLY}: `{what}` is not allowed"))
}

/// The first words of a statement: its kind, as SQL writes it.
fn kind(text: String) -> String {
    text.split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

fn check_statement(statement: &DFStatement) -> SqlResult<()> {
    match statement {
        DFStatement::Statement(s) => {
            limits::check_depth(s.as_ref())?;
            guard::check_known_panics(s.as_ref())?;
            check_sql_statement(s)
        }
        DFStatement::Explain(explain) => check_statement(&explain.statement),
        DFStatement::CopyTo(copy) => {
            if let CopyToSource::Query(q) = &copy.source {
                limits::check_depth(q.as_ref())?;
                guard::check_known_panics(q.as_ref())?;
            }
            Err(refused(kind(statement.to_string())))
        }
        DFStatement::CreateExternalTable(_) => Err(refused("CREATE EXTERNAL TABLE".into())),
        DFStatement::Reset(_) => Err(refused("RESET".into())),
    }
}

fn check_sql_statement(statement: &Statement) -> SqlResult<()> {
    match statement {
        Statement::Query(q) => match q.body.as_ref() {
            SetExpr::Insert(s) | SetExpr::Update(s) | SetExpr::Delete(s) | SetExpr::Merge(s) => {
                Err(refused(kind(s.to_string())))
            }
            _ => Ok(()),
        },
        Statement::Explain { statement, .. } => check_sql_statement(statement),
        Statement::ExplainTable { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. } => Ok(()),
        other => Err(refused(kind(other.to_string()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{stack_for_text, with_stack};

    fn refused_kind(sql: &str) -> String {
        let e = check_query_text(sql).unwrap_err();
        assert!(e.message.starts_with(READ_ONLY), "{e}");
        e.message
    }

    #[test]
    fn reads_are_allowed() {
        for sql in [
            "SELECT 1",
            "WITH a AS (SELECT 1) SELECT * FROM a",
            "VALUES (1), (2)",
            "SELECT 1 UNION SELECT 2",
            "EXPLAIN SELECT 1",
            "EXPLAIN ANALYZE SELECT 1",
            "EXPLAIN FORMAT tree SELECT 1",
            "SHOW TABLES",
            "SHOW COLUMNS FROM t",
            "DESCRIBE t",
        ] {
            check_query_text(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
    }

    #[test]
    fn everything_else_is_refused_by_kind() {
        assert!(refused_kind("COPY t TO '/x' STORED AS CSV").contains("`COPY t TO`"));
        assert!(refused_kind("COPY (SELECT 1) TO '/x'").contains("COPY"));
        assert!(refused_kind("EXPLAIN COPY (SELECT 1) TO '/x'").contains("COPY"));
        assert!(
            refused_kind("CREATE EXTERNAL TABLE p STORED AS CSV LOCATION '/etc/passwd'")
                .contains("CREATE EXTERNAL TABLE")
        );
        assert!(refused_kind("SELECT 1; INSERT INTO t VALUES (1)").contains("INSERT INTO t"));
        assert!(refused_kind("EXPLAIN DELETE FROM t").contains("DELETE FROM t"));
        assert!(
            refused_kind("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a").contains("INSERT")
        );
        for sql in [
            "CREATE TABLE x AS SELECT 1",
            "CREATE VIEW x AS SELECT 1",
            "DROP TABLE t",
            "UPDATE t SET a = 1",
            "SET x = 1",
            "RESET x",
            "PREPARE q AS SELECT 1",
            "BEGIN TRANSACTION",
            "CREATE SCHEMA s",
            "CREATE FUNCTION f() RETURNS INT RETURN 1",
            "SHOW ALL",
        ] {
            refused_kind(sql);
        }
    }

    #[test]
    fn deep_and_malformed_text_is_refused() {
        let deep = format!("EXPLAIN COPY (SELECT {}x) TO 'x'", "x+".repeat(3000));
        let err = with_stack(stack_for_text(deep.len()), || {
            check_query_text(&deep).unwrap_err()
        });
        assert!(err.message.contains("deeper than"), "{err}");
        let parens = format!("SELECT {}1{}", "(".repeat(300), ")".repeat(300));
        let err = check_query_text(&parens).unwrap_err();
        assert!(err.message.contains("256 levels"), "{err}");
        assert_eq!(err.location.map(|l| (l.line, l.column)), Some((1, 8 + 299)));
        let err = check_query_text("SELECT 1 + * FROM t").unwrap_err();
        assert!(err.location.is_some(), "{err}");
    }
}
