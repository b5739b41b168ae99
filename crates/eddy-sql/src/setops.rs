//! `MINUS` is `EXCEPT` (grammar.md): `q1 MINUS [ALL | DISTINCT] q2` is
//! rewritten in the syntax tree before planning, which DataFusion refuses
//! to plan under the other name.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Query, SetExpr, SetOperator, VisitMut, VisitorMut};

/// Rewrites every `MINUS` of `query` and its subqueries into `EXCEPT`.
pub fn minus_as_except(query: &mut Query) {
    let _ = query.visit(&mut Minus);
}

struct Minus;

impl VisitorMut for Minus {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        except(&mut query.body);
        ControlFlow::Continue(())
    }
}

fn except(body: &mut SetExpr) {
    if let SetExpr::SetOperation {
        op, left, right, ..
    } = body
    {
        if *op == SetOperator::Minus {
            *op = SetOperator::Except;
        }
        except(left);
        except(right);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    #[test]
    fn minus_becomes_except_at_any_depth() {
        let sql = "SELECT a FROM t MINUS SELECT a FROM u MINUS ALL SELECT 1 \
                   UNION SELECT b FROM (SELECT b FROM v MINUS SELECT 2) AS w";
        let mut statements = Parser::parse_sql(&GenericDialect {}, sql).unwrap();
        let datafusion::sql::sqlparser::ast::Statement::Query(q) = &mut statements[0] else {
            panic!("a query");
        };
        minus_as_except(q);
        let text = q.to_string();
        assert!(!text.contains("MINUS"), "{text}");
        assert_eq!(text.matches("EXCEPT").count(), 3, "{text}");
    }
}
