//! Which plans change only by insertions.
//!
//! A table declared `WITH ('append_only' = 'true')` (and without a primary
//! key, whose upserts retract) receives insertions only: the circuit
//! refuses the deletions sent to it. Filters, projections, inner joins and
//! `UNION ALL` of such inputs change only by insertions too: each output
//! change is a product or a copy of input changes of positive weight.
//! Operators that may retract what they emitted (aggregates, `DISTINCT`,
//! windows, outer and ASOF joins, anything bounded by `NOW()`) end the
//! property.
//!
//! Operators over an input known to change only by insertions may keep
//! less state: a top-k forgets the rows that fall past its limit, since
//! no later change can bring them back.

use std::collections::{HashMap, HashSet};

use datafusion::common::tree_node::TreeNode;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan};
use eddy_dbsp::NodeId;

use super::temporal::has_now;

/// Whether every change of `plan` is an insertion (positive weight), given
/// the nodes of `relations` known to change only by insertions.
pub fn inserts_only_plan(
    plan: &LogicalPlan,
    relations: &HashMap<String, NodeId>,
    inserts_only: &HashSet<NodeId>,
) -> bool {
    let inputs = |plan: &LogicalPlan| {
        plan.inputs()
            .into_iter()
            .all(|i| inserts_only_plan(i, relations, inserts_only))
    };
    match plan {
        LogicalPlan::TableScan(scan) => {
            !scan.filters.iter().any(has_now)
                && relations
                    .get(scan.table_name.table())
                    .is_some_and(|node| inserts_only.contains(node))
        }
        LogicalPlan::Projection(p) => !p.expr.iter().any(has_now) && inputs(plan),
        LogicalPlan::Filter(f) => {
            !has_now(&f.predicate) && !has_subquery(&f.predicate) && inputs(plan)
        }
        // An ASOF join (its marker in the filter) retracts a match that a
        // closer right row replaces.
        LogicalPlan::Join(j) => {
            j.join_type == JoinType::Inner
                && !j.filter.as_ref().is_some_and(|f| has_now(f) || has_asof(f))
                && inputs(plan)
        }
        LogicalPlan::SubqueryAlias(_) | LogicalPlan::Union(_) => inputs(plan),
        // Without a limit, an order is presentation only.
        LogicalPlan::Sort(s) => s.fetch.is_none() && inputs(plan),
        // Constants are inserted once.
        LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => true,
        _ => false,
    }
}

fn has_asof(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(e, Expr::ScalarFunction(f) if f.func.name() == crate::asof::MARKER))
    })
    .unwrap_or(true)
}

fn has_subquery(expr: &Expr) -> bool {
    expr.exists(|e| {
        Ok(matches!(
            e,
            Expr::Exists(_) | Expr::InSubquery(_) | Expr::ScalarSubquery(_)
        ))
    })
    .unwrap_or(true)
}
