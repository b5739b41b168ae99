//! General decorrelation of the subqueries that DataFusion's optimizer leaves
//! in place.
//!
//! DataFusion turns correlated `EXISTS`/`IN` into semi and anti joins and
//! decorrelates scalar subqueries whose correlation is an equality, but it
//! leaves others as they are, for instance a scalar subquery correlated by a
//! non-equality: `SELECT a, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b)
//! FROM t1`. Such a subquery is rewritten here into ordinary relational
//! operators, which the circuit then maintains incrementally:
//!
//! 1. `D` = the distinct values of the outer columns the subquery reads;
//! 2. the subquery is evaluated for every row of `D` at once: `D` is crossed
//!    into the subquery's uncorrelated part, outer references become `D`'s
//!    columns, and every aggregate above groups by `D`'s columns too;
//! 3. the result is left-joined back on the outer columns (NULL equal to
//!    NULL), and an outer row without a match takes the subquery's value on
//!    empty input (`COUNT` is 0, other aggregates NULL).
//!
//! `EXISTS` that DataFusion leaves (inside a projection, say) becomes the
//! same left join, tested for a match.

use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, NullEquality, ScalarValue};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::{
    col, lit, when, Expr, JoinType, LogicalPlan, LogicalPlanBuilder, Subquery,
};

use crate::error::{SqlError, SqlResult};
use crate::session;

/// Unique suffixes for the names this rewrite introduces.
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn unsupported(what: &str) -> SqlError {
    SqlError::new(format!("not supported yet: {what}"))
}

/// The subqueries of an expression that DataFusion leaves to execution:
/// scalar subqueries (correlated or not), `IN (subquery)` and `EXISTS`
/// (correlated or not: `SELECT EXISTS (SELECT 1 FROM t)` has no other
/// plan).
fn correlated_subqueries(expr: &Expr) -> Vec<Expr> {
    let mut found = Vec::new();
    let _ = expr.apply(|e| {
        match e {
            Expr::ScalarSubquery(_) | Expr::InSubquery(_) => {
                if !found.contains(e) {
                    found.push(e.clone());
                }
                return Ok(TreeNodeRecursion::Jump);
            }
            Expr::Exists(_) => {
                if !found.contains(e) {
                    found.push(e.clone());
                }
                return Ok(TreeNodeRecursion::Jump);
            }
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

fn plan_has_correlated_subquery(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        for e in node.expressions() {
            if !correlated_subqueries(&e).is_empty() {
                found = true;
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// Rewrites the correlated subqueries that remain after DataFusion's
/// optimizer into joins and aggregates, then optimizes the result again.
pub fn decorrelate(plan: LogicalPlan) -> SqlResult<LogicalPlan> {
    if !plan_has_correlated_subquery(&plan) {
        return Ok(plan);
    }
    let rewritten = rewrite(plan)?;
    Ok(session::state().optimize(&rewritten)?)
}

fn rewrite(plan: LogicalPlan) -> SqlResult<LogicalPlan> {
    let out = plan.transform_up(|node| {
        let rewritten = match &node {
            LogicalPlan::Projection(p)
                if p.expr.iter().any(|e| !correlated_subqueries(e).is_empty()) =>
            {
                let input = p.input.as_ref().clone();
                let (input, exprs) = replace_subqueries(input, p.expr.clone()).map_err(to_df)?;
                let exprs: Vec<Expr> = exprs
                    .into_iter()
                    .zip(&p.expr)
                    .map(|(new, old)| keep_name(new, old))
                    .collect::<datafusion::error::Result<_>>()?;
                Some(LogicalPlanBuilder::from(input).project(exprs)?.build()?)
            }
            LogicalPlan::Filter(f) if !correlated_subqueries(&f.predicate).is_empty() => {
                let original: Vec<Expr> = f
                    .input
                    .schema()
                    .columns()
                    .into_iter()
                    .map(Expr::Column)
                    .collect();
                let input = f.input.as_ref().clone();
                let (input, mut exprs) =
                    replace_subqueries(input, vec![f.predicate.clone()]).map_err(to_df)?;
                Some(
                    LogicalPlanBuilder::from(input)
                        .filter(exprs.remove(0))?
                        .project(original)?
                        .build()?,
                )
            }
            _ => None,
        };
        Ok(match rewritten {
            Some(plan) => Transformed::yes(plan),
            None => Transformed::no(node),
        })
    })?;
    Ok(out.data)
}

fn to_df(e: SqlError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Plan(e.message)
}

/// Keeps the output name of a projection expression after rewriting it.
fn keep_name(new: Expr, old: &Expr) -> datafusion::error::Result<Expr> {
    if &new == old {
        return Ok(new);
    }
    let name = old.schema_name().to_string();
    Ok(match (old, new) {
        (Expr::Alias(a), Expr::Alias(mut b)) => {
            b.name = a.name.clone();
            Expr::Alias(b)
        }
        (_, new) => new.alias(name),
    })
}

/// Joins every correlated subquery of `exprs` into `input` and replaces it
/// by a reference to the joined result.
fn replace_subqueries(
    mut input: LogicalPlan,
    mut exprs: Vec<Expr>,
) -> SqlResult<(LogicalPlan, Vec<Expr>)> {
    let mut subqueries = Vec::new();
    for e in &exprs {
        for sq in correlated_subqueries(e) {
            if !subqueries.contains(&sq) {
                subqueries.push(sq);
            }
        }
    }
    for sq in subqueries {
        let (joined, replacement) = join_subquery(input, &sq)?;
        input = joined;
        exprs = exprs
            .into_iter()
            .map(|e| {
                e.transform(|x| {
                    Ok(if x == sq {
                        Transformed::yes(replacement.clone())
                    } else {
                        Transformed::no(x)
                    })
                })
                .map(|t| t.data)
            })
            .collect::<datafusion::error::Result<_>>()?;
    }
    Ok((input, exprs))
}

/// The outer columns a subquery reads, in first-seen order.
fn outer_columns(plan: &LogicalPlan) -> Vec<Column> {
    let mut cols: Vec<Column> = Vec::new();
    let _ = plan.apply(|node| {
        for e in node.expressions() {
            let _ = e.apply(|x| {
                if let Expr::OuterReferenceColumn(_, c) = x {
                    if !cols.contains(c) {
                        cols.push(c.clone());
                    }
                }
                Ok(TreeNodeRecursion::Continue)
            });
        }
        Ok(TreeNodeRecursion::Continue)
    });
    cols
}

fn has_outer_refs(plan: &LogicalPlan) -> bool {
    !outer_columns(plan).is_empty()
}

/// The names of `D`'s columns.
struct Domain {
    outer: Vec<Column>,
    names: Vec<String>,
    plan: LogicalPlan,
}

impl Domain {
    fn columns(&self) -> Vec<Expr> {
        self.names
            .iter()
            .map(|n| col(Column::from_name(n)))
            .collect()
    }

    fn replace_outer(&self, expr: Expr) -> SqlResult<Expr> {
        Ok(expr
            .transform(|e| {
                if let Expr::OuterReferenceColumn(_, c) = &e {
                    if let Some(i) = self.outer.iter().position(|o| o == c) {
                        return Ok(Transformed::yes(col(Column::from_name(&self.names[i]))));
                    }
                }
                Ok(Transformed::no(e))
            })?
            .data)
    }
}

fn join_subquery(input: LogicalPlan, sq: &Expr) -> SqlResult<(LogicalPlan, Expr)> {
    if let Expr::InSubquery(in_sq) = sq {
        return join_in_subquery(input, in_sq);
    }
    let (subquery, exists) = match sq {
        Expr::ScalarSubquery(s) => (s, None),
        Expr::Exists(e) => (&e.subquery, Some(e.negated)),
        _ => return Err(unsupported("this subquery")),
    };
    let Subquery {
        subquery: sub_plan, ..
    } = subquery;
    // Subqueries inside the subquery first.
    let sub_plan = rewrite(sub_plan.as_ref().clone())?;
    let outer = outer_columns(&sub_plan);
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    if outer.is_empty() {
        return join_uncorrelated(input, &sub_plan, exists, k);
    }
    let names: Vec<String> = (0..outer.len()).map(|i| format!("__d{k}_{i}")).collect();
    let d_exprs: Vec<Expr> = outer
        .iter()
        .zip(&names)
        .map(|(c, n)| Expr::Column(c.clone()).alias(n))
        .collect();
    let d_plan = LogicalPlanBuilder::from(input.clone())
        .project(d_exprs)?
        .distinct()?
        .build()?;
    let domain = Domain {
        outer: outer.clone(),
        names: names.clone(),
        plan: d_plan,
    };
    let applied = apply(&sub_plan, &domain)?;

    let alias = format!("__sq{k}");
    let right = result_side(applied, exists, domain.columns(), &alias)?;
    let right_keys: Vec<Column> = names
        .iter()
        .map(|n| Column::new(Some(alias.as_str()), n))
        .collect();
    let joined = LogicalPlanBuilder::from(input)
        .join_detailed(
            right,
            JoinType::Left,
            (outer, right_keys),
            None,
            NullEquality::NullEqualsNull,
        )?
        .build()?;
    let replacement = replacement(&alias, exists, &sub_plan)?;
    Ok((joined, replacement))
}

/// Left-joins every row of `right` to every row of `left` (an outer cross
/// join: a left row survives with NULLs when `right` is empty).
fn left_join_all(
    left: LogicalPlanBuilder,
    right: LogicalPlan,
) -> datafusion::error::Result<LogicalPlanBuilder> {
    left.join_detailed(
        right,
        JoinType::Left,
        (Vec::<Column>::new(), Vec::<Column>::new()),
        Some(lit(true)),
        NullEquality::NullEqualsNothing,
    )
}

/// An uncorrelated subquery: its result is left-joined to every row.
fn join_uncorrelated(
    input: LogicalPlan,
    sub_plan: &LogicalPlan,
    exists: Option<bool>,
    k: usize,
) -> SqlResult<(LogicalPlan, Expr)> {
    let alias = format!("__sq{k}");
    let right = result_side(sub_plan.clone(), exists, vec![], &alias)?;
    let joined = left_join_all(LogicalPlanBuilder::from(input), right)?.build()?;
    Ok((joined, replacement(&alias, exists, sub_plan)?))
}

/// A subquery's result as the right side of a join, under `alias`: its
/// first column as `__value` (not for EXISTS, whose rows are made
/// distinct), the `carried` columns, and `__present`, always true.
fn result_side(
    plan: LogicalPlan,
    exists: Option<bool>,
    carried: Vec<Expr>,
    alias: &str,
) -> SqlResult<LogicalPlan> {
    let mut exprs: Vec<Expr> = Vec::new();
    if exists.is_none() {
        let first = plan
            .schema()
            .columns()
            .into_iter()
            .next()
            .ok_or_else(|| unsupported("an empty subquery"))?;
        exprs.push(Expr::Column(first).alias("__value"));
    }
    exprs.extend(carried);
    exprs.push(lit(true).alias("__present"));
    let mut right = LogicalPlanBuilder::from(plan).project(exprs)?;
    if exists.is_some() {
        right = right.distinct()?;
    }
    Ok(right.alias(alias)?.build()?)
}

/// What replaces the subquery once its result is left-joined under
/// `alias`: EXISTS tests for a match; a scalar subquery reads `__value`, or
/// its value on empty input where nothing matched.
fn replacement(alias: &str, exists: Option<bool>, sub_plan: &LogicalPlan) -> SqlResult<Expr> {
    let present = col(Column::new(Some(alias), "__present"));
    Ok(match exists {
        Some(false) => present.is_not_null(),
        Some(true) => present.is_null(),
        None => {
            let value = col(Column::new(Some(alias), "__value"));
            match empty_value(sub_plan) {
                Some(empty) => when(present.is_null(), empty).otherwise(value)?,
                None => value,
            }
        }
    })
}

/// `x [NOT] IN (subquery)` for an uncorrelated subquery, with SQL's
/// three-valued result: TRUE when some value equals `x`; otherwise NULL when
/// the subquery is not empty and `x` or some value is NULL; otherwise FALSE.
/// The input is left-joined with the distinct values (`x = value`) and with
/// one row of counts (values, NULL values).
fn join_in_subquery(
    input: LogicalPlan,
    in_sq: &datafusion::logical_expr::expr::InSubquery,
) -> SqlResult<(LogicalPlan, Expr)> {
    let sub_plan = rewrite(in_sq.subquery.subquery.as_ref().clone())?;
    if has_outer_refs(&sub_plan) {
        return Err(unsupported("a correlated IN (subquery) here"));
    }
    let k = NEXT.fetch_add(1, Ordering::Relaxed);
    let value = sub_plan
        .schema()
        .columns()
        .into_iter()
        .next()
        .ok_or_else(|| unsupported("an empty subquery"))?;
    let (vals, stats) = (format!("__in{k}"), format!("__ins{k}"));
    let distinct = LogicalPlanBuilder::from(sub_plan.clone())
        .project(vec![
            Expr::Column(value.clone()).alias("__v"),
            lit(true).alias("__present"),
        ])?
        .distinct()?
        .alias(vals.as_str())?
        .build()?;
    let is_null_value =
        when(Expr::Column(value.clone()).is_null(), lit(1i64)).otherwise(lit(0i64))?;
    let counts = LogicalPlanBuilder::from(sub_plan)
        .aggregate(
            Vec::<Expr>::new(),
            vec![
                datafusion::functions_aggregate::expr_fn::count(lit(1i64)).alias("__n"),
                datafusion::functions_aggregate::expr_fn::sum(is_null_value).alias("__nn"),
            ],
        )?
        .alias(stats.as_str())?
        .build()?;
    let x = in_sq.expr.as_ref().clone();
    let v = col(Column::new(Some(vals.as_str()), "__v"));
    let matches =
        LogicalPlanBuilder::from(input).join_on(distinct, JoinType::Left, vec![x.clone().eq(v)])?;
    let joined = left_join_all(matches, counts)?.build()?;
    let matched = col(Column::new(Some(vals.as_str()), "__present")).is_not_null();
    let n = col(Column::new(Some(stats.as_str()), "__n"));
    let nn = col(Column::new(Some(stats.as_str()), "__nn"));
    let result = when(matched, lit(true))
        .when(n.clone().is_null().or(n.eq(lit(0i64))), lit(false))
        .when(
            x.is_null().or(nn.gt(lit(0i64))),
            lit(ScalarValue::Boolean(None)),
        )
        .otherwise(lit(false))?;
    Ok((
        joined,
        if in_sq.negated {
            Expr::Not(Box::new(result))
        } else {
            result
        },
    ))
}

/// The plan evaluated for every row of `D`: its columns, then `D`'s columns.
fn apply(plan: &LogicalPlan, d: &Domain) -> SqlResult<LogicalPlan> {
    if !has_outer_refs(plan) {
        return Ok(LogicalPlanBuilder::from(plan.clone())
            .cross_join(d.plan.clone())?
            .build()?);
    }
    let plan = match plan {
        LogicalPlan::Filter(f) => {
            let input = apply(&f.input, d)?;
            LogicalPlanBuilder::from(input)
                .filter(d.replace_outer(f.predicate.clone())?)?
                .build()?
        }
        LogicalPlan::Projection(p) => {
            let input = apply(&p.input, d)?;
            let mut exprs: Vec<Expr> = p
                .expr
                .iter()
                .map(|e| keep_name(d.replace_outer(e.clone())?, e).map_err(SqlError::from))
                .collect::<SqlResult<_>>()?;
            exprs.extend(d.columns());
            LogicalPlanBuilder::from(input).project(exprs)?.build()?
        }
        LogicalPlan::Aggregate(a) => {
            let input = apply(&a.input, d)?;
            let mut group: Vec<Expr> = a
                .group_expr
                .iter()
                .map(|e| d.replace_outer(e.clone()))
                .collect::<SqlResult<_>>()?;
            let n_group = group.len();
            group.extend(d.columns());
            let aggs: Vec<Expr> = a
                .aggr_expr
                .iter()
                .map(|e| d.replace_outer(e.clone()))
                .collect::<SqlResult<_>>()?;
            let n_aggs = aggs.len();
            let agg = LogicalPlanBuilder::from(input)
                .aggregate(group, aggs)?
                .build()?;
            // Reorder to: group columns, aggregates, then D's columns.
            let cols = agg.schema().columns();
            let n_d = d.names.len();
            let mut order: Vec<Expr> = cols[..n_group].iter().cloned().map(Expr::Column).collect();
            order.extend(
                cols[n_group + n_d..n_group + n_d + n_aggs]
                    .iter()
                    .cloned()
                    .map(Expr::Column),
            );
            order.extend(
                cols[n_group..n_group + n_d]
                    .iter()
                    .cloned()
                    .map(Expr::Column),
            );
            LogicalPlanBuilder::from(agg).project(order)?.build()?
        }
        LogicalPlan::SubqueryAlias(a) => {
            let input = apply(&a.input, d)?;
            LogicalPlanBuilder::from(input)
                .alias(a.alias.clone())?
                .build()?
        }
        LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input)) => {
            let input = apply(input, d)?;
            LogicalPlanBuilder::from(input).distinct()?.build()?
        }
        LogicalPlan::Sort(s) if s.fetch.is_none() => apply(&s.input, d)?,
        LogicalPlan::TableScan(scan) => {
            // Filters pushed into the scan: scan everything, filter above.
            let mut bare = scan.clone();
            let filters = std::mem::take(&mut bare.filters);
            bare.projection = None;
            bare.projected_schema =
                std::sync::Arc::new(datafusion::common::DFSchema::try_from_qualified_schema(
                    scan.table_name.clone(),
                    &scan.source.schema(),
                )?);
            let mut b = LogicalPlanBuilder::from(LogicalPlan::TableScan(bare))
                .cross_join(d.plan.clone())?;
            for f in filters {
                b = b.filter(d.replace_outer(f)?)?;
            }
            b.build()?
        }
        other => {
            return Err(unsupported(&format!(
                "a correlated subquery over {}",
                other
                    .display()
                    .to_string()
                    .split(':')
                    .next()
                    .unwrap_or("this plan")
            )))
        }
    };
    Ok(plan)
}

/// The value of a scalar subquery on empty input, when it is not NULL:
/// an aggregate without GROUP BY still yields one row (`COUNT` = 0).
fn empty_value(plan: &LogicalPlan) -> Option<Expr> {
    match plan {
        LogicalPlan::SubqueryAlias(a) => empty_value(&a.input),
        LogicalPlan::Aggregate(a) if a.group_expr.is_empty() => {
            a.aggr_expr.first().map(aggregate_on_empty)
        }
        LogicalPlan::Projection(p) => {
            let LogicalPlan::Aggregate(a) = strip_alias(&p.input) else {
                return None;
            };
            if !a.group_expr.is_empty() {
                return None;
            }
            let columns = a.schema.columns();
            let first = p.expr.first()?.clone();
            let replaced = first
                .transform(|e| {
                    if let Expr::Column(c) = &e {
                        if let Some(i) = columns.iter().position(|x| x == c) {
                            if let Some(agg) = a.aggr_expr.get(i) {
                                return Ok(Transformed::yes(aggregate_on_empty(agg)));
                            }
                        }
                    }
                    Ok(Transformed::no(e))
                })
                .ok()?
                .data;
            Some(unalias(replaced))
        }
        _ => None,
    }
}

fn strip_alias(plan: &LogicalPlan) -> &LogicalPlan {
    match plan {
        LogicalPlan::SubqueryAlias(a) => strip_alias(&a.input),
        other => other,
    }
}

fn unalias(e: Expr) -> Expr {
    match e {
        Expr::Alias(a) => unalias(*a.expr),
        other => other,
    }
}

/// An aggregate's result on no rows: 0 for COUNT, NULL otherwise.
fn aggregate_on_empty(agg: &Expr) -> Expr {
    match agg {
        Expr::Alias(a) => aggregate_on_empty(&a.expr),
        Expr::AggregateFunction(AggregateFunction { func, .. })
            if func.name().eq_ignore_ascii_case("count") =>
        {
            lit(ScalarValue::Int64(Some(0)))
        }
        _ => lit(ScalarValue::Null),
    }
}
