//! Limits on the shape of SQL text, so that no program or query can exhaust
//! a thread's stack.
//!
//! sqlparser bounds its own recursion (parentheses, subqueries, prefix
//! operators), but it builds chains of infix operators (`a + b + c …`,
//! `x::INT::INT …`, `x IS NULL IS NULL …`) and of set operations
//! (`… UNION SELECT …`) in loops, so the tree it returns can be as deep as the
//! text is long. Every later pass walks that tree recursively: DataFusion's
//! planner and optimizer, Eddy's decorrelation and lowering, expression
//! evaluation, even dropping it. [`check_depth`] measures each statement
//! right after parsing, before anything else touches it, and refuses one that
//! nests deeper than [`MAX_DEPTH`] with the line and column where the deep
//! part starts. The measuring itself never goes deeper than the limit: it
//! stops at the first node past it.
//!
//! What is left is the parsed tree of a refused statement, which is dropped
//! recursively: a thread that parses untrusted text needs a stack that grows
//! with the text ([`stack_for_text`]); [`with_stack`] runs a closure on
//! such a thread.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, Query, SetExpr, Spanned, Visit, Visitor};
use datafusion::sql::sqlparser::tokenizer::Span;

use crate::error::{Location, SqlError, SqlResult};

/// How deeply a statement may nest: expressions inside expressions, queries
/// inside queries, set operations and joins in one query. SQLite's default
/// limit on expression depth is the same (`SQLITE_MAX_EXPR_DEPTH`).
pub const MAX_DEPTH: usize = 1000;

/// How deeply subqueries in expressions (scalar, `IN`, `EXISTS`) may nest.
/// DataFusion's plan checks visit a subquery once for every level above
/// it, so their time doubles with each level (measured: 20 levels take 5 s
/// and 40 run for minutes); ten levels cost a thousandfold at most.
pub const MAX_SUBQUERY_DEPTH: usize = 10;

/// Stack of a thread that plans, lowers or evaluates statements that passed
/// [`check_depth`] (measured: a statement at [`MAX_DEPTH`] needs a few MiB;
/// only the pages a thread touches are ever committed).
pub const SQL_STACK_BYTES: usize = 64 << 20;

/// Stack needed to parse `len` bytes of untrusted text and drop the tree of
/// a refused statement: about 100 bytes of stack a level, and a level can
/// take as little as two bytes of text (`+x`).
pub fn stack_for_text(len: usize) -> usize {
    SQL_STACK_BYTES.saturating_add(len.saturating_mul(64))
}

/// Runs `f` on a new thread with a stack of `stack_bytes` and returns its
/// result; a panic in `f` is resumed in the caller.
pub fn with_stack<T: Send>(stack_bytes: usize, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        let handle = std::thread::Builder::new()
            .name("eddy-sql".into())
            .stack_size(stack_bytes)
            .spawn_scoped(scope, f);
        match handle {
            Ok(h) => match h.join() {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            },
            // No thread could be made (out of memory or threads): the work
            // cannot be done safely, so it is not done.
            Err(e) => panic!("starting a SQL thread: {e}"),
        }
    })
}

/// Refuses a statement (or query) that nests deeper than [`MAX_DEPTH`].
pub fn check_depth<V: Visit + ?Sized>(statement: &V) -> SqlResult<()> {
    let mut meter = DepthMeter {
        depth: 0,
        subqueries: 0,
        last_seen: None,
    };
    match statement.visit(&mut meter) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break((location, too_deep)) => {
            let message = match too_deep {
                TooDeep::Statement => format!(
                    "the statement nests deeper than {MAX_DEPTH} levels (expressions, subqueries, \
                     set operations and joins count); split it into views or simpler expressions"
                ),
                TooDeep::Subqueries => format!(
                    "subqueries in expressions nest deeper than {MAX_SUBQUERY_DEPTH} levels; \
                     split the query into views"
                ),
            };
            Err(match location.or(meter.last_seen) {
                Some(l) => SqlError::at(message, l.line, l.column),
                None => SqlError::new(message),
            })
        }
    }
}

/// Which limit a statement passed.
enum TooDeep {
    Statement,
    Subqueries,
}

/// Counts the nesting on the path from the statement to the node visited.
struct DepthMeter {
    depth: usize,
    /// Subqueries in expressions on the path.
    subqueries: usize,
    /// Where the last identifier or literal seen starts: a location to fall
    /// back on when the deep node's own start cannot be found cheaply.
    last_seen: Option<Location>,
}

fn is_subquery(expr: &Expr) -> bool {
    matches!(
        expr,
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. }
    )
}

impl Visitor for DepthMeter {
    type Break = (Option<Location>, TooDeep);

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Self::Break> {
        self.depth += 1;
        // The visitor would descend a chain of set operations before any
        // other hook runs: measure it here, without recursion.
        let (spine, at) = set_expr_depth(&query.body);
        if self.depth + spine > MAX_DEPTH {
            return ControlFlow::Break((at, TooDeep::Statement));
        }
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _query: &Query) -> ControlFlow<Self::Break> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Self::Break> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return ControlFlow::Break((expr_start(expr), TooDeep::Statement));
        }
        if is_subquery(expr) {
            self.subqueries += 1;
            if self.subqueries > MAX_SUBQUERY_DEPTH {
                return ControlFlow::Break((self.last_seen, TooDeep::Subqueries));
            }
        }
        if let Some(l) = leaf_location(expr) {
            self.last_seen = Some(l);
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &Expr) -> ControlFlow<Self::Break> {
        self.depth -= 1;
        if is_subquery(expr) {
            self.subqueries -= 1;
        }
        ControlFlow::Continue(())
    }
}

fn location(span: Span) -> Option<Location> {
    (span.start.line > 0).then_some(Location {
        line: span.start.line,
        column: span.start.column,
    })
}

/// The depth of a query body's set operations and joins (each join in a
/// FROM clause nests the plan one level deeper), and where the body starts.
/// Iterative: the chain may be as long as the text.
fn set_expr_depth(body: &SetExpr) -> (usize, Option<Location>) {
    let mut deepest = 0;
    let mut start = None;
    let mut stack = vec![(body, 1usize)];
    while let Some((node, depth)) = stack.pop() {
        deepest = deepest.max(depth);
        match node {
            SetExpr::SetOperation { left, right, .. } => {
                stack.push((right, depth + 1));
                stack.push((left, depth + 1));
            }
            SetExpr::Select(select) => {
                let joins: usize = select.from.iter().map(|t| 1 + t.joins.len()).sum();
                deepest = deepest.max(depth + joins);
                if start.is_none() {
                    start = location(select.select_token.0.span);
                }
            }
            // Nested queries are measured when the visitor reaches them.
            _ => {}
        }
    }
    (deepest, start)
}

/// Where an expression starts, found by walking down its first operands
/// without recursion; `None` when that leads to a node whose location would
/// take a recursive walk to find.
fn expr_start(mut expr: &Expr) -> Option<Location> {
    loop {
        expr = match expr {
            Expr::BinaryOp { left, .. } | Expr::AnyOp { left, .. } | Expr::AllOp { left, .. } => {
                left
            }
            Expr::UnaryOp { expr, .. }
            | Expr::Nested(expr)
            | Expr::Cast { expr, .. }
            | Expr::IsNull(expr)
            | Expr::IsNotNull(expr)
            | Expr::IsTrue(expr)
            | Expr::IsNotTrue(expr)
            | Expr::IsFalse(expr)
            | Expr::IsNotFalse(expr)
            | Expr::IsUnknown(expr)
            | Expr::IsNotUnknown(expr)
            | Expr::IsDistinctFrom(expr, _)
            | Expr::IsNotDistinctFrom(expr, _)
            | Expr::InList { expr, .. }
            | Expr::InSubquery { expr, .. }
            | Expr::Between { expr, .. }
            | Expr::Like { expr, .. }
            | Expr::ILike { expr, .. }
            | Expr::SimilarTo { expr, .. }
            | Expr::Collate { expr, .. } => expr,
            Expr::AtTimeZone { timestamp, .. } => timestamp,
            Expr::CompoundFieldAccess { root, .. } => root,
            other => return leaf_location(other),
        }
    }
}

/// The location of an expression whose span is cheap to find.
fn leaf_location(expr: &Expr) -> Option<Location> {
    match expr {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) | Expr::Value(_) => location(expr.span()),
        Expr::Function(f) => location(f.name.span()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::parse_statements;

    fn chain(n: usize) -> String {
        let mut sql = String::from("SELECT\n  x");
        for _ in 0..n {
            sql.push_str("+x");
        }
        sql.push_str(" FROM t");
        sql
    }

    #[test]
    fn expressions_at_the_limit_pass() {
        // The select item is one level; the chain of n additions n more.
        assert!(parse_statements(&chain(MAX_DEPTH - 2)).is_ok());
    }

    #[test]
    fn deeper_expressions_are_refused_with_their_location() {
        let text = chain(200_000);
        let err = with_stack(stack_for_text(text.len()), || {
            parse_statements(&text).unwrap_err()
        });
        assert!(err.message.contains("deeper than 1000"), "{err}");
        let l = err.location.expect("located");
        assert_eq!((l.line, l.column), (2, 3));
    }

    #[test]
    fn long_set_operation_chains_are_refused() {
        let mut text = String::from("SELECT 1");
        for _ in 0..50_000 {
            text.push_str(" UNION ALL SELECT 1");
        }
        let err = with_stack(stack_for_text(text.len()), || {
            parse_statements(&text).unwrap_err()
        });
        assert!(err.message.contains("deeper than"), "{err}");
        assert_eq!(err.location.map(|l| (l.line, l.column)), Some((1, 1)));
    }

    #[test]
    fn many_joins_are_refused() {
        let mut text = String::from("SELECT 1 FROM t0");
        for i in 1..=MAX_DEPTH {
            text.push_str(&format!(" JOIN t{i} ON true"));
        }
        assert!(parse_statements(&text).is_err());
    }

    #[test]
    fn deep_casts_and_predicates_are_refused() {
        for piece in ["::INT", " IS NULL", " AT TIME ZONE 'UTC'"] {
            let text = format!("SELECT x{} FROM t", piece.repeat(5_000));
            let err = with_stack(stack_for_text(text.len()), || {
                parse_statements(&text).unwrap_err()
            });
            assert!(err.message.contains("deeper than"), "{piece}: {err}");
        }
    }

    #[test]
    fn nested_subqueries_are_limited() {
        let nest = |n: usize| {
            format!(
                "SELECT x FROM t ORDER BY {}x{}",
                "(SELECT ".repeat(n),
                ")".repeat(n)
            )
        };
        assert!(parse_statements(&nest(MAX_SUBQUERY_DEPTH)).is_ok());
        let err = parse_statements(&nest(MAX_SUBQUERY_DEPTH + 1)).unwrap_err();
        assert!(
            err.message
                .contains("subqueries in expressions nest deeper than 10"),
            "{err}"
        );
        // Derived tables are not subqueries in expressions.
        let derived = format!(
            "SELECT * FROM {}t{}",
            "(SELECT * FROM ".repeat(30),
            ") AS d".repeat(30)
        );
        assert!(parse_statements(&derived).is_ok());
    }

    #[test]
    fn panics_cross_the_stack_thread() {
        let r = std::panic::catch_unwind(|| with_stack(1 << 20, || panic!("boom")));
        assert!(r.is_err());
    }
}
