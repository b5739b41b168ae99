//! Statements that DataFusion 55 panics on instead of answering with an
//! error, refused before it sees them. Each entry was found by fuzzing
//! (`crates/eddy-fuzz`) and has a test here; the server would answer the
//! panic with a 500 all the same, but a clear error is better.
//!
//! * A scalar subquery that selects no column (`(SELECT FROM t)`): the
//!   planner indexes its first column while naming the expression.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{visit_expressions, Expr, SetExpr, Spanned, Visit};

use crate::error::{SqlError, SqlResult};

/// Refuses the statement shapes listed in the module documentation. Call
/// it on statements that passed [`crate::limits::check_depth`] (it walks
/// them recursively).
pub fn check_known_panics<V: Visit>(statement: &V) -> SqlResult<()> {
    let found = visit_expressions(statement, |e: &Expr| match e {
        Expr::Subquery(q) => match q.body.as_ref() {
            SetExpr::Select(s) if s.projection.is_empty() => ControlFlow::Break(e.span()),
            _ => ControlFlow::Continue(()),
        },
        _ => ControlFlow::Continue(()),
    });
    match found {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(span) => Err(SqlError::at(
            "a scalar subquery must select exactly one column, and this one selects none",
            span.start.line,
            span.start.column,
        )),
    }
}

#[cfg(test)]
mod tests {
    use crate::program::parse_statements;

    #[test]
    fn a_scalar_subquery_without_columns_is_an_error() {
        let err =
            parse_statements("SELECT a,\n (SELECT FROM t2 WHERE t2.c = t1.a) FROM t1").unwrap_err();
        assert!(err.message.contains("selects none"), "{err}");
        assert_eq!(err.location.map(|l| l.line), Some(2));
        assert!(parse_statements("SELECT a FROM t1 WHERE EXISTS (SELECT FROM t2)").is_ok());
        assert!(parse_statements("SELECT FROM t1").is_ok());
    }
}
