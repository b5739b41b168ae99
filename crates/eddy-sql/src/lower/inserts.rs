//! Which plans change only by insertions.
//!
//! A table declared `WITH ('append_only' = 'true')` (and without a primary
//! key, whose upserts retract) receives insertions only: the circuit
//! refuses the deletions sent to it. Filters, projections, inner joins,
//! `UNNEST` and `UNION ALL` of such inputs change only by insertions too: each output
//! change is a product or a copy of input changes of positive weight.
//! Operators that may retract what they emitted (aggregates, `DISTINCT`,
//! windows, outer and ASOF joins, anything bounded by `NOW()`) end the
//! property.
//!
//! Operators over an input known to change only by insertions may keep
//! less state: a top-k forgets the rows that fall past its limit, since
//! no later change can bring them back.
//!
//! The counts of groups over such an input only grow: a group's change
//! deletes its row and inserts it again with a higher count. Ranked by
//! that count, highest first, within partitions of the group's columns,
//! each deleted row comes with an inserted row ranked before it in its
//! partition ([`rising_plan`]), so a top-k may forget the rows past its
//! limit there too (see `RankTopK::rising`).

use std::collections::{HashMap, HashSet};

use datafusion::common::tree_node::TreeNode;
use datafusion::common::Column;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan, SortExpr};
use eddy_dbsp::NodeId;

use super::temporal::has_now;
use super::unalias;

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
        LogicalPlan::SubqueryAlias(_) | LogicalPlan::Union(_) | LogicalPlan::Unnest(_) => {
            inputs(plan)
        }
        // Without a limit, an order is presentation only.
        LogicalPlan::Sort(s) => s.fetch.is_none() && inputs(plan),
        // Constants are inserted once.
        LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => true,
        _ => false,
    }
}

/// Whether, in every change of `plan`, each deleted row comes with an
/// inserted row of the same partition (`partition`'s values) ranked before
/// it by `order`: the first `ORDER BY` is, highest first, a `COUNT` of a
/// group over an input that changes only by insertions, and the partition
/// reads only the group's columns. The count rises with every change of
/// its group when it is `COUNT(*)` (unfiltered, not `DISTINCT`), or when
/// it is the only aggregate (then the row changes only when it does).
pub fn rising_plan(
    plan: &LogicalPlan,
    partition: &[Expr],
    order: &[SortExpr],
    relations: &HashMap<String, NodeId>,
    inserts_only: &HashSet<NodeId>,
) -> bool {
    let Some(first) = order.first() else {
        return false;
    };
    let Expr::Column(count) = &first.expr else {
        return false;
    };
    let schema = plan.schema();
    let Ok(count) = schema.index_of_column(count) else {
        return false;
    };
    let mut keys = Vec::new();
    for c in partition.iter().flat_map(Expr::column_refs) {
        match schema.index_of_column(c) {
            Ok(i) => keys.push(i),
            Err(_) => return false,
        }
    }
    !first.asc && rises(plan, count, &keys, relations, inserts_only)
}

/// Whether column `count` of `plan` is a rising count of groups whose
/// columns include `keys` (see [`rising_plan`]), through aliases,
/// projections of plain columns, and filters that read only `keys` (or
/// say that the count is not NULL, which it never is).
fn rises(
    plan: &LogicalPlan,
    count: usize,
    keys: &[usize],
    relations: &HashMap<String, NodeId>,
    inserts_only: &HashSet<NodeId>,
) -> bool {
    match plan {
        LogicalPlan::SubqueryAlias(a) => rises(&a.input, count, keys, relations, inserts_only),
        LogicalPlan::Projection(p) => {
            let source = |i: usize| match unalias(&p.expr[i]) {
                Expr::Column(c) => p.input.schema().index_of_column(c).ok(),
                _ => None,
            };
            let keys: Option<Vec<usize>> = keys.iter().map(|&k| source(k)).collect();
            match (source(count), keys) {
                (Some(count), Some(keys)) => rises(&p.input, count, &keys, relations, inserts_only),
                _ => false,
            }
        }
        LogicalPlan::Filter(f) => {
            let schema = f.input.schema();
            let at = |c: &Column| schema.index_of_column(c).ok();
            let allowed = |e: &Expr| match e {
                Expr::IsNotNull(x) if matches!(x.as_ref(), Expr::Column(c) if at(c) == Some(count)) => {
                    true
                }
                _ => e
                    .column_refs()
                    .iter()
                    .all(|c| at(c).is_some_and(|i| keys.contains(&i))),
            };
            // A volatile condition (`random()`) might keep a deletion and
            // drop its insertion.
            !has_now(&f.predicate)
                && !has_subquery(&f.predicate)
                && !f.predicate.is_volatile()
                && split_conjunction(&f.predicate).into_iter().all(allowed)
                && rises(&f.input, count, keys, relations, inserts_only)
        }
        LogicalPlan::Aggregate(a) => {
            let groups = a.group_expr.len();
            if count < groups
                || keys.iter().any(|&k| k >= groups)
                || a.group_expr
                    .iter()
                    .any(|e| matches!(e, Expr::GroupingSet(_)))
            {
                return false;
            }
            let Some(Expr::AggregateFunction(f)) = a.aggr_expr.get(count - groups).map(unalias)
            else {
                return false;
            };
            let star = !f.params.distinct
                && f.params.filter.is_none()
                && matches!(f.params.args.as_slice(), [Expr::Literal(v, _)] if !v.is_null());
            f.func.name() == "count"
                && (star || a.aggr_expr.len() == 1)
                && inserts_only_plan(&a.input, relations, inserts_only)
        }
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
