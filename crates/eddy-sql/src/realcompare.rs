//! A REAL compared with an exact number is compared as a REAL, as Feldera
//! (Calcite) types the comparison: `r = 1.1` holds for the REAL nearest
//! 1.1. DataFusion compares a REAL with a DECIMAL, an integer or a
//! fractional literal (a DECIMAL in Feldera's SQL) as DOUBLE, where the
//! REAL's value widened (1.10000002384…) equals no such literal. An
//! analyzer rule of the Feldera planning state, run after type coercion:
//! in `=`, `<>`, `<`, `<=`, `>`, `>=`, `IS [NOT] DISTINCT FROM`, `IN`
//! lists and `CASE r WHEN …`, a REAL widened to DOUBLE and compared with exact numbers (or
//! literals) compares unwidened, the other side cast to REAL. A REAL
//! compared with a DOUBLE column stays DOUBLE.
//!
//! Planning only: the comparisons it changes are stateless.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::expr::{Case, Cast, InList};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

/// The REAL under `e` when `e` widens one to DOUBLE.
fn widened_real(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    match e {
        Expr::Cast(Cast { expr, field })
            if field.data_type() == &DataType::Float64
                && expr.get_type(schema).ok()? == DataType::Float32 =>
        {
            Some(expr.as_ref().clone())
        }
        _ => None,
    }
}

/// `e` as a REAL, when it is an exact number widened to DOUBLE or a
/// DOUBLE literal.
fn as_real(e: &Expr, schema: &DFSchema) -> Option<Expr> {
    let exact = match e {
        Expr::Literal(v, _) if v.data_type() == DataType::Float64 => e.clone(),
        Expr::Cast(Cast { expr, field }) if field.data_type() == &DataType::Float64 => {
            let from = expr.get_type(schema).ok()?;
            if !(from.is_integer()
                || matches!(from, DataType::Decimal128(..) | DataType::Decimal256(..)))
            {
                return None;
            }
            expr.as_ref().clone()
        }
        _ => return None,
    };
    Some(Expr::Cast(Cast::new(Box::new(exact), DataType::Float32)))
}

fn comparison(op: Operator) -> bool {
    matches!(
        op,
        Operator::Eq
            | Operator::NotEq
            | Operator::Lt
            | Operator::LtEq
            | Operator::Gt
            | Operator::GtEq
            | Operator::IsDistinctFrom
            | Operator::IsNotDistinctFrom
    )
}

fn rewrite(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    match &e {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if comparison(*op) => {
            if let (Some(real), Some(other)) = (widened_real(left, schema), as_real(right, schema))
            {
                return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(real),
                    *op,
                    Box::new(other),
                ))));
            }
            if let (Some(other), Some(real)) = (as_real(left, schema), widened_real(right, schema))
            {
                return Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(
                    Box::new(other),
                    *op,
                    Box::new(real),
                ))));
            }
            Ok(Transformed::no(e))
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            let Some(real) = widened_real(expr, schema) else {
                return Ok(Transformed::no(e));
            };
            let Some(items) = list
                .iter()
                .map(|i| as_real(i, schema))
                .collect::<Option<Vec<_>>>()
            else {
                return Ok(Transformed::no(e));
            };
            Ok(Transformed::yes(Expr::InList(InList::new(
                Box::new(real),
                items,
                *negated,
            ))))
        }
        // `CASE r WHEN 1.5 THEN …` compares as `r = 1.5` does.
        Expr::Case(c) => {
            let Some(real) = c.expr.as_deref().and_then(|x| widened_real(x, schema)) else {
                return Ok(Transformed::no(e));
            };
            let Some(whens) = c
                .when_then_expr
                .iter()
                .map(|(w, t)| Some((Box::new(as_real(w, schema)?), t.clone())))
                .collect::<Option<Vec<_>>>()
            else {
                return Ok(Transformed::no(e));
            };
            Ok(Transformed::yes(Expr::Case(Case::new(
                Some(Box::new(real)),
                whens,
                c.else_expr.clone(),
            ))))
        }
        _ => Ok(Transformed::no(e)),
    }
}

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct RealComparisons;

impl AnalyzerRule for RealComparisons {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_exprs(plan, rewrite)
    }

    fn name(&self) -> &str {
        "eddy_real_comparisons"
    }
}
