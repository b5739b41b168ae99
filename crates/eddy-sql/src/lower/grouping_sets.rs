//! `GROUP BY GROUPING SETS (…)`, `ROLLUP (…)` and `CUBE (…)` as the union
//! of one plain aggregate per grouping set.
//!
//! DataFusion plans such a query as one aggregate over every grouping
//! expression plus `__grouping_id` (a bit per expression, set where the
//! expression is not grouped, first expression highest; repeated sets are
//! told apart by an ordinal above those bits), and resolves `GROUPING(…)`
//! against that id. Here each set becomes an ordinary aggregate grouped by
//! its own expressions, projected onto that schema (the expressions it
//! does not group are NULL, the id a constant), and the branches are
//! united. Each branch is maintained incrementally as any aggregate is, and
//! a union is linear, so the whole is too.

use std::sync::Arc;

use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{
    cast, Aggregate, Expr, GroupingSet, LogicalPlan, Projection, Union,
};

use crate::error::{SqlError, SqlResult};

/// The grouping sets of `group`, a single `GROUPING SETS`, `ROLLUP` or
/// `CUBE`.
fn sets(group: &GroupingSet) -> SqlResult<Vec<Vec<Expr>>> {
    Ok(match group {
        GroupingSet::GroupingSets(sets) => sets.clone(),
        GroupingSet::Rollup(exprs) => (0..=exprs.len()).map(|i| exprs[..i].to_vec()).collect(),
        GroupingSet::Cube(exprs) => {
            if exprs.len() > 12 {
                return Err(SqlError::new(format!(
                    "CUBE of {} expressions makes more than 4096 grouping sets",
                    exprs.len()
                )));
            }
            (0..1usize << exprs.len())
                .map(|mask| {
                    (0..exprs.len())
                        .filter(|j| mask & (1 << (exprs.len() - 1 - j)) != 0)
                        .map(|j| exprs[j].clone())
                        .collect()
                })
                .collect()
        }
    })
}

/// The union that computes `a`, an aggregate grouped by grouping sets;
/// `None` when it has none.
pub fn expand(a: &Aggregate) -> SqlResult<Option<LogicalPlan>> {
    let [Expr::GroupingSet(group)] = a.group_expr.as_slice() else {
        return Ok(None);
    };
    let distinct: Vec<Expr> = group.distinct_expr().into_iter().cloned().collect();
    let n = distinct.len();
    let sets = sets(group)?;
    let named = |e: Expr, j: usize| {
        let (q, f) = a.schema.qualified_field(j);
        e.alias_qualified(q.cloned(), f.name())
    };
    let mut branches = Vec::with_capacity(sets.len());
    for (k, set) in sets.iter().enumerate() {
        let ordinal = sets[..k]
            .iter()
            .filter(|s| s.len() == set.len() && s.iter().all(|e| set.contains(e)))
            .count() as u64;
        // An aggregate needs a key or a call: without calls, a hidden
        // COUNT(*) stands in (the grand total of no calls is still a row).
        let calls = if a.aggr_expr.is_empty() {
            vec![datafusion::functions_aggregate::count::count_all()]
        } else {
            a.aggr_expr.clone()
        };
        let branch = LogicalPlan::Aggregate(Aggregate::try_new(
            Arc::clone(&a.input),
            set.clone(),
            calls,
        )?);
        let schema = Arc::clone(branch.schema());
        let at = |i: usize| Expr::Column(Column::from(schema.qualified_field(i)));
        let mut exprs = Vec::with_capacity(a.schema.fields().len());
        let mut id = 0u64;
        for (j, e) in distinct.iter().enumerate() {
            let grouped = set.iter().position(|s| s == e);
            id = (id << 1) | u64::from(grouped.is_none());
            let value = match grouped {
                Some(i) => at(i),
                None => Expr::Literal(ScalarValue::try_from(a.schema.field(j).data_type())?, None),
            };
            exprs.push(named(value, j));
        }
        let id = id | (ordinal << n);
        exprs.push(named(
            cast(
                Expr::Literal(ScalarValue::UInt64(Some(id)), None),
                a.schema.field(n).data_type().clone(),
            ),
            n,
        ));
        for i in 0..a.aggr_expr.len() {
            exprs.push(named(at(set.len() + i), n + 1 + i));
        }
        branches.push(Arc::new(LogicalPlan::Projection(Projection::try_new(
            exprs,
            Arc::new(branch),
        )?)));
    }
    Ok(Some(match branches.len() {
        1 => Arc::unwrap_or_clone(branches.remove(0)),
        _ => LogicalPlan::Union(Union::try_new_with_loose_types(branches)?),
    }))
}
