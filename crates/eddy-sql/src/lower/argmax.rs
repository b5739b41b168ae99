//! The argmax join: the rows of a relation whose value is the largest of
//! their group,
//!
//! ```sql
//! SELECT … FROM l JOIN (SELECT k, MAX(x) AS m FROM l GROUP BY k) g
//!   ON l.k = g.k WHERE l.x >= g.m
//! ```
//!
//! which the optimizer turns into a semi-join of `l` with its own grouped
//! maximum (Nexmark's q5 is one), or keeps as an inner join when the
//! group's columns are selected too. Joined as written, it keeps both sides of
//! the join and the maximum's groups in state, and a change to one row of a
//! group makes the join look again at every row of the group. It is the
//! same as `RANK() OVER (PARTITION BY k ORDER BY x DESC) = 1` among the rows
//! whose `x` and keys are not NULL (ties all rank first; NULLs never equal
//! the maximum, nor match a key), so it is rewritten into that and lowered
//! onto the per-partition top-k, which walks only the top of a touched
//! group.
//!
//! Incremental rule: that of the rank top-k (and of the filter before it).
//! The rewrite applies only when both sides are provably the same rows:
//! after peeling aliases and column-only projections, the left input and
//! the maximum's input are the same plan (compared as lowering compares
//! shared subplans), the maximum groups by exactly the join's keys, and it
//! takes the maximum of the very column the condition compares.

use datafusion::common::{Column, JoinType, NullEquality};
use datafusion::functions_window::expr_fn::rank;
use datafusion::logical_expr::{
    lit, BinaryExpr, Expr, ExprFunctionExt, LogicalPlan, LogicalPlanBuilder, Operator,
};

use super::{shared_key, unalias};
use crate::error::SqlResult;

/// The name of the rank column the rewrite adds (and projects away).
const RANK: &str = "__eddy_argmax_rank";

/// Where column `col` of `plan` comes from, through aliases and projections
/// of plain columns: the first other plan, and the column's index there.
fn trace<'a>(mut plan: &'a LogicalPlan, col: &Column) -> Option<(&'a LogicalPlan, usize)> {
    let mut index = plan.schema().index_of_column(col).ok()?;
    loop {
        match plan {
            LogicalPlan::SubqueryAlias(a) => plan = &a.input,
            LogicalPlan::Projection(p) => {
                let Expr::Column(c) = unalias(&p.expr[index]) else {
                    return Some((plan, index));
                };
                index = p.input.schema().index_of_column(c).ok()?;
                plan = &p.input;
            }
            _ => return Some((plan, index)),
        }
    }
}

fn column(e: &Expr) -> Option<&Column> {
    match unalias(e) {
        Expr::Column(c) => Some(c),
        _ => None,
    }
}

/// The join's condition as (the rows' compared column, the maximum's
/// column), when it says `rows >= maximum` (or `=`).
fn condition<'a>(
    rows: &LogicalPlan,
    maximum: &LogicalPlan,
    filter: &'a Expr,
) -> Option<(&'a Column, &'a Column)> {
    let Expr::BinaryExpr(BinaryExpr { left, op, right }) = filter else {
        return None;
    };
    let (a, b) = (column(left)?, column(right)?);
    let in_rows = |c: &Column| rows.schema().has_column(c);
    let in_max = |c: &Column| maximum.schema().has_column(c) && !in_rows(c);
    match op {
        Operator::GtEq | Operator::Eq if in_rows(a) && in_max(b) => Some((a, b)),
        Operator::LtEq | Operator::Eq if in_max(a) && in_rows(b) => Some((b, a)),
        _ => None,
    }
}

/// Column `at` of `plan`, as a column of the table when `plan` is a scan
/// (whose projection may differ between two scans of one table).
fn table_column(plan: &LogicalPlan, at: usize) -> usize {
    match plan {
        LogicalPlan::TableScan(s) => s.projection.as_ref().map_or(at, |p| p[at]),
        _ => at,
    }
}

/// Whether two plans give the same rows: scans of one table (no
/// pushed-down filter or limit; their columns compared by
/// [`table_column`]), or plans that lowering would share.
fn same_rows(a: &LogicalPlan, b: &LogicalPlan) -> bool {
    match (a, b) {
        (LogicalPlan::TableScan(x), LogicalPlan::TableScan(y)) => {
            x.table_name == y.table_name
                && x.filters.is_empty()
                && y.filters.is_empty()
                && x.fetch.is_none()
                && y.fetch.is_none()
        }
        _ => matches!((shared_key(a), shared_key(b)), (Some(x), Some(y)) if x == y),
    }
}

/// The top-k plan that computes join `j`, when it is an argmax join: a
/// semi-join that keeps the rows of one side (the left of a left semi-join,
/// the right of a right one) matched by the other side's grouped maximum.
pub(super) fn rewrite(j: &datafusion::logical_expr::Join) -> SqlResult<Option<LogicalPlan>> {
    let forward = || j.on.iter().map(|(l, r)| (l, r)).collect::<Vec<_>>();
    let backward = || j.on.iter().map(|(l, r)| (r, l)).collect::<Vec<_>>();
    match j.join_type {
        JoinType::LeftSemi => rewrite_sides(j, &j.left, &j.right, forward()),
        JoinType::RightSemi => rewrite_sides(j, &j.right, &j.left, backward()),
        // In an inner join either side may be the maximum.
        JoinType::Inner => match rewrite_sides(j, &j.left, &j.right, forward())? {
            Some(plan) => Ok(Some(plan)),
            None => rewrite_sides(j, &j.right, &j.left, backward()),
        },
        _ => Ok(None),
    }
}

/// [`rewrite`] with the sides decided: `rows` is matched by `maximum`'s
/// grouped maximum on `on` (pairs of a `rows` key and a `maximum` key).
fn rewrite_sides(
    j: &datafusion::logical_expr::Join,
    rows: &LogicalPlan,
    maximum: &LogicalPlan,
    mut on: Vec<(&Expr, &Expr)>,
) -> SqlResult<Option<LogicalPlan>> {
    // The comparison with the maximum: the join's filter, or, when the
    // query says `=` in ON, one of the join's key pairs.
    let (x, max) = match &j.filter {
        Some(f) => match condition(rows, maximum, f) {
            Some(c) => c,
            None => return Ok(None),
        },
        // Under `IS NOT DISTINCT FROM` a NULL value would equal a NULL
        // maximum, which the top-k (NULLs never first) does not match.
        None if j.null_equality == NullEquality::NullEqualsNull => return Ok(None),
        None => {
            let is_max = |e: &Expr| {
                column(e).and_then(|c| trace(maximum, c)).is_some_and(
                    |(p, at)| matches!(p, LogicalPlan::Aggregate(a) if at == a.group_expr.len()),
                )
            };
            let Some(i) = on.iter().position(|(_, r)| is_max(r)) else {
                return Ok(None);
            };
            let (l, r) = on.remove(i);
            match (column(l), column(r)) {
                (Some(l), Some(r)) => (l, r),
                _ => return Ok(None),
            }
        }
    };
    if on.is_empty() {
        return Ok(None);
    }
    // The maximum's side: a grouped MAX, seen through aliases and
    // projections.
    let Some((LogicalPlan::Aggregate(agg), max_at)) = trace(maximum, max) else {
        return Ok(None);
    };
    let groups = agg.group_expr.len();
    let [aggregate] = agg.aggr_expr.as_slice() else {
        return Ok(None);
    };
    let Expr::AggregateFunction(f) = unalias(aggregate) else {
        return Ok(None);
    };
    if max_at != groups
        || f.func.name() != "max"
        || f.params.distinct
        || f.params.filter.is_some()
        || groups != on.len()
    {
        return Ok(None);
    }
    let [arg] = f.params.args.as_slice() else {
        return Ok(None);
    };
    let Some(arg) = column(arg) else {
        return Ok(None);
    };
    let Some((right_base, arg_at)) = trace(&agg.input, arg) else {
        return Ok(None);
    };
    let Some((left_base, x_at)) = trace(rows, x) else {
        return Ok(None);
    };
    if table_column(left_base, x_at) != table_column(right_base, arg_at) {
        return Ok(None);
    }
    // Each join key: the same column of the base on both sides, and the
    // right's keys are exactly the maximum's groups.
    let mut covered = vec![false; groups];
    // The `rows` key column of each group of the maximum.
    let mut group_key: Vec<Option<Column>> = vec![None; groups];
    let mut keys = Vec::with_capacity(on.len());
    for (l, r) in on {
        let (Some(l), Some(r)) = (column(l), column(r)) else {
            return Ok(None);
        };
        let Some((LogicalPlan::Aggregate(a), group)) = trace(maximum, r) else {
            return Ok(None);
        };
        if !std::ptr::eq(a, agg) || group >= groups {
            return Ok(None);
        }
        let Some(g) = column(&agg.group_expr[group]) else {
            return Ok(None);
        };
        let (Some((rb, r_at)), Some((lb, l_at))) = (trace(&agg.input, g), trace(rows, l)) else {
            return Ok(None);
        };
        if table_column(rb, r_at) != table_column(lb, l_at)
            || !std::ptr::eq(rb, right_base)
            || !std::ptr::eq(lb, left_base)
        {
            return Ok(None);
        }
        covered[group] = true;
        group_key[group] = Some(l.clone());
        keys.push(Expr::Column(l.clone()));
    }
    if covered.contains(&false) {
        return Ok(None);
    }
    if !same_rows(left_base, right_base) {
        return Ok(None);
    }
    // The join's output: in a semi-join the rows' columns; in an inner join
    // also the maximum side's, each a group key (equal to the rows' key it
    // was joined on) or the maximum (equal to x in every row kept).
    let mut columns = Vec::new();
    for i in 0..j.schema.fields().len() {
        let (qualifier, field) = j.schema.qualified_field(i);
        let c = Column::new(qualifier.cloned(), field.name());
        if rows.schema().has_column(&c) {
            columns.push(Expr::Column(c));
            continue;
        }
        let Some((LogicalPlan::Aggregate(a), at)) = trace(maximum, &c) else {
            return Ok(None);
        };
        if !std::ptr::eq(a, agg) {
            return Ok(None);
        }
        let source = if at == groups {
            x.clone()
        } else {
            match &group_key[at] {
                Some(k) => k.clone(),
                None => return Ok(None),
            }
        };
        columns.push(Expr::Column(source).alias_qualified(qualifier.cloned(), field.name()));
    }
    let x = Expr::Column(x.clone());
    let mut present = x.clone().is_not_null();
    if j.null_equality == NullEquality::NullEqualsNothing {
        for k in &keys {
            present = present.and(k.clone().is_not_null());
        }
    }
    let ranked = rank()
        .partition_by(keys)
        .order_by(vec![x.sort(false, false)])
        .build()?
        .alias(RANK);
    let plan = LogicalPlanBuilder::from(rows.clone())
        .filter(present)?
        .window(vec![ranked])?
        .filter(Expr::Column(Column::from_name(RANK)).eq(lit(1u64)))?
        .project(columns)?
        .build()?;
    Ok(Some(plan))
}
