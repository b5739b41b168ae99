//! `NULLIF(a, b)` has the type of `a`, as in PostgreSQL ("the result has
//! the same type as the first argument"; SQLite agrees, its values keep
//! their type). DataFusion gives it the common type of both arguments, so
//! `NULLIF(-19, AVG(x)) / 66` would divide a float and answer -18.99…
//! instead of 0. [`first_argument_type`] casts every `nullif` whose first
//! argument has another type than its second back to the first's type,
//! before the analyzer coerces the arguments: the comparison still happens
//! in the common type, only the answer changes type, and a cast of an
//! unchanged first argument is exact.

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result};
use datafusion::logical_expr::{cast, Expr, ExprSchemable, LogicalPlan};

/// Gives every `nullif` of `plan` (subqueries included) its first
/// argument's type.
pub fn first_argument_type(plan: LogicalPlan) -> Result<LogicalPlan> {
    // Once a node changed type, every node visited after it (the plan is
    // visited bottom up) recomputes its schema from its inputs'.
    let mut changed_below = false;
    plan.transform_up_with_subqueries(|node| {
        let mut schema = DFSchema::empty();
        for input in node.inputs() {
            schema.merge(input.schema());
        }
        let changed = node.map_expressions(|e| {
            e.transform_up(|e| match e {
                Expr::ScalarFunction(f) if f.name() == "nullif" && f.args.len() == 2 => {
                    let (Ok(first), Ok(second)) =
                        (f.args[0].get_type(&schema), f.args[1].get_type(&schema))
                    else {
                        return Ok(Transformed::no(Expr::ScalarFunction(f)));
                    };
                    if first == second || first.is_null() {
                        return Ok(Transformed::no(Expr::ScalarFunction(f)));
                    }
                    Ok(Transformed::yes(cast(Expr::ScalarFunction(f), first)))
                }
                other => Ok(Transformed::no(other)),
            })
        })?;
        changed_below |= changed.transformed;
        if changed_below {
            changed.map_data(|p| p.recompute_schema())
        } else {
            Ok(changed)
        }
    })
    .map(|t| t.data)
}
