//! Feldera's order of NULLs: NULL is the smallest value, so an ascending
//! order puts NULLs first and a descending one puts them last (PostgreSQL,
//! and DataFusion, take NULL as the largest). Under
//! [`Rules::Feldera`](crate::Rules) every ordering that does not say
//! `NULLS FIRST` or `NULLS LAST` is given Feldera's before planning: a
//! query's `ORDER BY` (with `LIMIT`, a top-k), window specifications
//! (inline and named, so `ROW_NUMBER() OVER (ORDER BY x DESC)` ranks NULLs
//! last), and the orderings inside aggregate calls.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, FunctionArgumentClause, FunctionArguments, NamedWindowExpr, OrderByExpr, OrderByKind,
    Query, Select, VisitMut, VisitorMut, WindowType,
};

/// Gives every ordering in `query` without an explicit NULL order
/// Feldera's (NULL smallest).
pub fn nulls_smallest(query: &mut Query) {
    let _ = query.visit(&mut NullsSmallest);
}

fn order(list: &mut [OrderByExpr]) {
    for o in list {
        if o.options.nulls_first.is_none() {
            // Ascending (the default) puts the smallest, NULL, first.
            o.options.nulls_first = Some(o.options.asc.unwrap_or(true));
        }
    }
}

struct NullsSmallest;

impl VisitorMut for NullsSmallest {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Some(by) = &mut query.order_by {
            if let OrderByKind::Expressions(list) = &mut by.kind {
                order(list);
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<()> {
        for window in &mut select.named_window {
            if let NamedWindowExpr::WindowSpec(spec) = &mut window.1 {
                order(&mut spec.order_by);
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = expr {
            if let Some(WindowType::WindowSpec(spec)) = &mut f.over {
                order(&mut spec.order_by);
            }
            order(&mut f.within_group);
            if let FunctionArguments::List(list) = &mut f.args {
                for clause in &mut list.clauses {
                    if let FunctionArgumentClause::OrderBy(by) = clause {
                        order(by);
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialect::EddyDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    fn rewritten(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&EddyDialect, sql).unwrap();
        let datafusion::sql::sqlparser::ast::Statement::Query(q) = &mut statements[0] else {
            panic!("a query")
        };
        nulls_smallest(q);
        q.to_string()
    }

    #[test]
    fn orderings_without_a_null_order_get_feldera_s() {
        let q = rewritten(
            "SELECT ROW_NUMBER() OVER (ORDER BY x DESC), ARRAY_AGG(y ORDER BY y) \
             FROM t WINDOW w AS (ORDER BY z) ORDER BY x, y DESC LIMIT 2",
        );
        assert!(q.contains("OVER (ORDER BY x DESC NULLS LAST)"), "{q}");
        assert!(q.contains("ARRAY_AGG(y ORDER BY y NULLS FIRST)"), "{q}");
        assert!(q.contains("w AS (ORDER BY z NULLS FIRST)"), "{q}");
        assert!(
            q.contains("ORDER BY x NULLS FIRST, y DESC NULLS LAST"),
            "{q}"
        );
    }

    #[test]
    fn an_explicit_null_order_is_kept() {
        let q = rewritten("SELECT x FROM t ORDER BY x DESC NULLS FIRST, y ASC NULLS LAST");
        assert!(
            q.contains("ORDER BY x DESC NULLS FIRST, y ASC NULLS LAST"),
            "{q}"
        );
    }
}
