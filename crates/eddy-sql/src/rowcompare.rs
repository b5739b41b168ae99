//! Feldera's rule for ROW values (comparisons.md, "Comparing ROW values"):
//! `=`, `<>` and `!=` between ROWs are refused, and so is every form that
//! asks for their equality: a join `ON l.p = r.p`, `NATURAL JOIN` or
//! `USING` on ROW columns, `r IN (…)`, `r IN (SELECT …)`, `CASE r WHEN v`,
//! `NULLIF(r, v)`. Under three-valued logic a ROW with a NULL field is not
//! equal to itself, which silently drops rows; `IS [NOT] DISTINCT FROM`
//! (or `<=>`) says what is meant and stays legal, as do the ordering
//! comparisons and what groups rather than compares (`GROUP BY`,
//! `DISTINCT`, `UNION`, …).
//!
//! An analyzer rule of the Feldera planning state, run after type coercion
//! so that every operand's type is known (user-defined types are ROWs
//! too). PostgreSQL's rules (the SQLite corpus) compare ROWs field by
//! field and do not have it.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{plan_err, DFSchema, Result};
use datafusion::logical_expr::expr::{InList, InSubquery};
use datafusion::logical_expr::{BinaryExpr, Case, Expr, ExprSchemable, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct RefuseRowEquality;

impl AnalyzerRule for RefuseRowEquality {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        check(&plan)?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "eddy_refuse_row_equality"
    }
}

fn is_row(e: &Expr, schema: &DFSchema) -> bool {
    matches!(e.get_type(schema), Ok(DataType::Struct(_)))
}

fn refused(op: &str) -> Result<()> {
    plan_err!(
        "Row values cannot be compared using '{op}'; use IS NOT DISTINCT FROM (or <=>) for \
         '=' and IS DISTINCT FROM for '<>'"
    )
}

/// Refuses the equality tests of ROW values in `plan` and its subqueries.
pub fn check(plan: &LogicalPlan) -> Result<()> {
    let mut found = Ok(());
    plan.apply_with_subqueries(|node| {
        let mut schema = DFSchema::empty();
        for input in node.inputs() {
            schema.merge(input.schema());
        }
        if let LogicalPlan::Join(j) = node {
            if j.on.iter().any(|(l, _)| is_row(l, j.left.schema())) {
                found = refused("=");
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        node.apply_expressions(|e| {
            e.apply(|x| {
                let problem = match x {
                    Expr::BinaryExpr(BinaryExpr { left, op, .. })
                        if matches!(op, Operator::Eq | Operator::NotEq)
                            && is_row(left, &schema) =>
                    {
                        refused(if *op == Operator::Eq { "=" } else { "<>" })
                    }
                    Expr::InList(InList { expr, .. })
                    | Expr::InSubquery(InSubquery { expr, .. })
                        if is_row(expr, &schema) =>
                    {
                        refused("=")
                    }
                    Expr::Case(Case {
                        expr: Some(base), ..
                    }) if is_row(base, &schema) => refused("="),
                    Expr::ScalarFunction(f)
                        if f.name() == "nullif"
                            && f.args.first().is_some_and(|a| is_row(a, &schema)) =>
                    {
                        plan_err!(
                            "'NULLIF' compares row values for equality; write CASE WHEN r IS \
                             NOT DISTINCT FROM v THEN NULL ELSE r END"
                        )
                    }
                    _ => Ok(()),
                };
                if problem.is_err() {
                    found = problem;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })?;
        Ok(if found.is_err() {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    })?;
    found
}
