//! Lowering joins: the inner join on equi-keys with a residual filter,
//! and outer, semi, anti and mark joins built from it
//! (`unmatched(L) = L − semi(L)`, `semi(L) = L ⋈ distinct(π_L(inner))`).

use std::sync::Arc;

use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNode;
use datafusion::common::{DFSchema, JoinType, NullEquality, ScalarValue};
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Expr, LogicalPlan, Operator, Volatility};
use datafusion::physical_expr::expressions::{binary, is_null, Literal};
use datafusion::physical_expr::PhysicalExpr;
use eddy_dbsp::operator as op;
use eddy_dbsp::operator::join::JoinSide;
use eddy_dbsp::NodeId;

use super::{aligned_keys, key_schema, Exprs, Lowerer};

/// The rows of a join: the left side's columns, then the right side's.
fn side_by_side(left: &SchemaRef, right: &SchemaRef) -> SchemaRef {
    let fields: Vec<Field> = left
        .fields()
        .iter()
        .chain(right.fields().iter())
        .map(|f| f.as_ref().clone())
        .collect();
    Arc::new(Schema::new(fields))
}

/// Whether a plan is a constant relation: `VALUES` or a row without
/// `FROM`, renamed or projected by expressions that always give the same
/// answer.
fn constant_plan(plan: &LogicalPlan) -> bool {
    let immutable = |e: &Expr| {
        !e.exists(|e| {
            Ok(matches!(e, Expr::ScalarFunction(f)
                if f.func.signature().volatility != Volatility::Immutable))
        })
        .unwrap_or(true)
    };
    match plan {
        LogicalPlan::Values(_) | LogicalPlan::EmptyRelation(_) => true,
        LogicalPlan::SubqueryAlias(a) => constant_plan(&a.input),
        LogicalPlan::Projection(p) => p.expr.iter().all(immutable) && constant_plan(&p.input),
        _ => false,
    }
}

/// Row columns of each join side, with the waterline below which a row of
/// that side can match no later row of the other.
#[derive(Default)]
struct Band {
    left: Vec<(usize, op::Waterline)>,
    right: Vec<(usize, op::Waterline)>,
}
use crate::error::SqlResult;

impl Lowerer<'_> {
    /// An inner join of two nodes on key expressions; output is left columns then right columns.
    pub(super) fn join(
        &mut self,
        l: NodeId,
        r: NodeId,
        lkeys: Exprs,
        rkeys: Exprs,
        nulls_equal: bool,
    ) -> SqlResult<NodeId> {
        self.join_with(l, r, lkeys, rkeys, nulls_equal, Band::default())
    }

    /// [`join`](Self::join), whose traces also forget the rows that a band
    /// condition puts out of reach of later rows of the other side.
    fn join_with(
        &mut self,
        l: NodeId,
        r: NodeId,
        lkeys: Exprs,
        rkeys: Exprs,
        nulls_equal: bool,
        band: Band,
    ) -> SqlResult<NodeId> {
        let (ls, rs) = (self.schema(l), self.schema(r));
        let (key_types, rkeys) = aligned_keys(&ls, &lkeys, &rs, &rkeys)?;
        let schema = side_by_side(&ls, &rs);
        // Each trace forgets the keys below the other side's bound on them;
        // a key column of the output is bounded by the lesser of both.
        let lkey_bounds = self.derive_all(l, &lkeys);
        let rkey_bounds = self.derive_all(r, &rkeys);
        let mut bounds = vec![None; schema.fields().len()];
        let column = |e: &Arc<dyn PhysicalExpr>| {
            e.downcast_ref::<datafusion::physical_expr::expressions::Column>()
                .map(|c| c.index())
        };
        for j in 0..lkeys.len() {
            let (Some(lw), Some(rw)) = (&lkey_bounds[j], &rkey_bounds[j]) else {
                continue;
            };
            let both = super::waterlines::least(Arc::clone(lw), Arc::clone(rw));
            if let Some(i) = column(&lkeys[j]) {
                bounds[i] = Some(Arc::clone(&both));
            }
            if let Some(i) = column(&rkeys[j]) {
                bounds[ls.fields().len() + i] = Some(both);
            }
        }
        let (left_gc, right_gc) = (
            super::waterlines::first_bound(&rkey_bounds),
            super::waterlines::first_bound(&lkey_bounds),
        );
        if let Some(scope) = &self.scope {
            let (left, right) = (JoinSide::new(&ls, lkeys)?, JoinSide::new(&rs, rkeys)?);
            let ctx = scope.ctx.clone();
            let join = op::NestedJoin::new(
                left,
                right,
                &key_types,
                nulls_equal,
                Arc::clone(&schema),
                ctx,
            )?;
            return self.add(join, &[l, r], schema);
        }
        let make = || {
            let (left, right) = (
                JoinSide::new(&ls, lkeys.clone())?,
                JoinSide::new(&rs, rkeys.clone())?,
            );
            Ok(
                op::Join::new(left, right, &key_types, nulls_equal, Arc::clone(&schema))?
                    .with_waterlines(left_gc.clone(), right_gc.clone())
                    .with_row_waterlines(band.left.clone(), band.right.clone()),
            )
        };
        let node = self.add_keyed(make, &[l, r], Arc::clone(&schema))?;
        self.set_waterlines(node, bounds);
        Ok(node)
    }

    /// `semi(L)`: the rows of `l` whose `lkeys` occur in the set `set` (on `skeys`).
    pub(super) fn semi(
        &mut self,
        l: NodeId,
        lkeys: Exprs,
        set: NodeId,
        skeys: Exprs,
        nulls_equal: bool,
    ) -> SqlResult<NodeId> {
        let width = self.schema(l).fields().len();
        let joined = self.join(l, set, lkeys, skeys, nulls_equal)?;
        let cols = self.columns(joined, 0..width);
        let schema = self.schema(l);
        self.map(joined, cols, schema)
    }

    /// The rows of `side` (columns `range` of the inner join `inner`) that
    /// matched at least once.
    pub(super) fn matched(
        &mut self,
        side: NodeId,
        inner: NodeId,
        range: std::ops::Range<usize>,
    ) -> SqlResult<NodeId> {
        let width = range.len();
        let cols = self.columns(inner, range);
        let schema = self.schema(side);
        let projected = self.map(inner, cols, schema)?;
        let set = self.distinct(projected)?;
        let all_side = self.columns(side, 0..width);
        let all_set = self.columns(set, 0..width);
        self.semi(side, all_side, set, all_set, true)
    }

    /// Rows of `side` padded with NULL columns to the full join width.
    pub(super) fn pad(
        &mut self,
        side: NodeId,
        nulls_before: &[Field],
        nulls_after: &[Field],
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        let width = self.schema(side).fields().len();
        let nulls = |fields: &[Field]| -> SqlResult<Exprs> {
            fields
                .iter()
                .map(|f| {
                    Ok(
                        Arc::new(Literal::new(ScalarValue::try_from(f.data_type())?))
                            as Arc<dyn PhysicalExpr>,
                    )
                })
                .collect()
        };
        let mut exprs = nulls(nulls_before)?;
        exprs.extend(self.columns(side, 0..width));
        exprs.extend(nulls(nulls_after)?);
        self.map(side, exprs, schema)
    }

    pub(super) fn with_mark(
        &mut self,
        input: NodeId,
        mark: bool,
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        let width = self.schema(input).fields().len();
        let mut exprs = self.columns(input, 0..width);
        exprs.push(Arc::new(Literal::new(ScalarValue::Boolean(Some(mark)))));
        self.map(input, exprs, schema)
    }

    pub(super) fn lower_join(
        &mut self,
        j: &datafusion::logical_expr::Join,
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        let l = self.lower(&j.left)?;
        let r = self.lower(&j.right)?;
        let (lsch, rsch) = (j.left.schema(), j.right.schema());
        let lkeys: Exprs =
            j.on.iter()
                .map(|(a, _)| self.physical(a, lsch))
                .collect::<SqlResult<_>>()?;
        let rkeys: Exprs =
            j.on.iter()
                .map(|(_, b)| self.physical(b, rsch))
                .collect::<SqlResult<_>>()?;
        if let Some(filter) = &j.filter {
            if let Some(node) = self.asof_join(j, filter, l, r, &lkeys, &rkeys, &schema)? {
                return Ok(node);
            }
        }
        if j.on.is_empty() && j.join_type == JoinType::Inner && self.scope.is_none() {
            let constant = if constant_plan(&j.right) {
                Some(1)
            } else if constant_plan(&j.left) {
                Some(0)
            } else {
                None
            };
            if let Some(side) = constant {
                let product = self.constant_product(l, r, side)?;
                return self.residual(product, j);
            }
        }
        let nulls_equal = j.null_equality == NullEquality::NullEqualsNull;
        let (lw, rw) = (lsch.fields().len(), rsch.fields().len());
        let lfields: Vec<Field> = self
            .schema(l)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let rfields: Vec<Field> = self
            .schema(r)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();

        // Semi and anti joins without a residual condition join with the
        // distinct keys of the other side instead of the full join.
        let plain_semi = j.filter.is_none() && !j.on.is_empty();
        let semi_of = |this: &mut Self, left_side: bool| -> SqlResult<NodeId> {
            let (keep, keep_keys, other, other_keys) = if left_side {
                (l, lkeys.clone(), r, rkeys.clone())
            } else {
                (r, rkeys.clone(), l, lkeys.clone())
            };
            if plain_semi {
                let key_schema = key_schema(&other_keys, &this.schema(other))?;
                let keys = this.map(other, other_keys.clone(), key_schema)?;
                let set = this.distinct(keys)?;
                let set_cols = this.columns(set, 0..other_keys.len());
                this.semi(keep, keep_keys, set, set_cols, nulls_equal)
            } else {
                let inner =
                    this.inner_filtered(l, r, lkeys.clone(), rkeys.clone(), nulls_equal, j)?;
                let range = if left_side { 0..lw } else { lw..lw + rw };
                this.matched(keep, inner, range)
            }
        };

        match j.join_type {
            JoinType::Inner => {
                self.inner_filtered(l, r, lkeys.clone(), rkeys.clone(), nulls_equal, j)
            }
            JoinType::Left | JoinType::Right | JoinType::Full => {
                let inner =
                    self.inner_filtered(l, r, lkeys.clone(), rkeys.clone(), nulls_equal, j)?;
                let mut parts = vec![inner];
                if matches!(j.join_type, JoinType::Left | JoinType::Full) {
                    let semi = self.matched(l, inner, 0..lw)?;
                    let unmatched = self.minus(l, semi)?;
                    parts.push(self.pad(unmatched, &[], &rfields, Arc::clone(&schema))?);
                }
                if matches!(j.join_type, JoinType::Right | JoinType::Full) {
                    let semi = self.matched(r, inner, lw..lw + rw)?;
                    let unmatched = self.minus(r, semi)?;
                    parts.push(self.pad(unmatched, &lfields, &[], Arc::clone(&schema))?);
                }
                self.plus(&parts, schema)
            }
            JoinType::LeftSemi => semi_of(self, true),
            JoinType::RightSemi => semi_of(self, false),
            JoinType::LeftAnti => {
                let semi = semi_of(self, true)?;
                let anti = self.minus(l, semi)?;
                if j.null_aware && !j.on.is_empty() {
                    self.null_aware(anti, &lkeys, r, &rkeys)
                } else {
                    Ok(anti)
                }
            }
            JoinType::RightAnti => {
                let semi = semi_of(self, false)?;
                self.minus(r, semi)
            }
            JoinType::LeftMark | JoinType::RightMark => {
                let left_side = j.join_type == JoinType::LeftMark;
                let keep = if left_side { l } else { r };
                let semi = semi_of(self, left_side)?;
                let anti = self.minus(keep, semi)?;
                let yes = self.with_mark(semi, true, Arc::clone(&schema))?;
                let no = self.with_mark(anti, false, Arc::clone(&schema))?;
                self.plus(&[yes, no], schema)
            }
        }
    }

    /// `NOT IN` semantics on top of a plain anti join: when the subquery has
    /// a NULL key no row survives, and a row with a NULL key survives only
    /// when the subquery is empty.
    pub(super) fn null_aware(
        &mut self,
        anti: NodeId,
        lkeys: &Exprs,
        r: NodeId,
        rkeys: &Exprs,
    ) -> SqlResult<NodeId> {
        let empty_schema = Arc::new(Schema::empty());
        let width = self.schema(anti).fields().len();
        let any_null = |keys: &Exprs, schema: &SchemaRef| -> SqlResult<Arc<dyn PhysicalExpr>> {
            let mut pred: Option<Arc<dyn PhysicalExpr>> = None;
            for k in keys {
                let n = is_null(Arc::clone(k))?;
                pred = Some(match pred {
                    None => n,
                    Some(p) => binary(p, Operator::Or, n, schema)?,
                });
            }
            Ok(pred.expect("at least one key"))
        };
        // Indicators: the subquery is non-empty; the subquery has a NULL key.
        let r_schema = self.schema(r);
        let r_rows = self.map(r, vec![], Arc::clone(&empty_schema))?;
        let nonempty = self.distinct(r_rows)?;
        let r_nulls = self.add(
            op::Filter::new(any_null(rkeys, &r_schema)?),
            &[r],
            Arc::clone(&r_schema),
        )?;
        let r_nulls = self.map(r_nulls, vec![], Arc::clone(&empty_schema))?;
        let has_null = self.distinct(r_nulls)?;

        let a_schema = self.schema(anti);
        let null_rows = self.add(
            op::Filter::new(any_null(lkeys, &a_schema)?),
            &[anti],
            Arc::clone(&a_schema),
        )?;
        let other_rows = self.minus(anti, null_rows)?;
        let kill_null = self.join(null_rows, nonempty, vec![], vec![], false)?;
        let kill_null_cols = self.columns(kill_null, 0..width);
        let kill_null = self.map(kill_null, kill_null_cols, Arc::clone(&a_schema))?;
        let kill_other = self.join(other_rows, has_null, vec![], vec![], false)?;
        let kill_other_cols = self.columns(kill_other, 0..width);
        let kill_other = self.map(kill_other, kill_other_cols, Arc::clone(&a_schema))?;
        let survivors = self.minus(anti, kill_null)?;
        self.minus(survivors, kill_other)
    }

    /// The inner join of a logical join, with its residual filter applied.
    pub(super) fn inner_filtered(
        &mut self,
        l: NodeId,
        r: NodeId,
        lkeys: Exprs,
        rkeys: Exprs,
        nulls_equal: bool,
        j: &datafusion::logical_expr::Join,
    ) -> SqlResult<NodeId> {
        let band = match &j.filter {
            Some(f) => self.band(l, r, f, j)?,
            None => Band::default(),
        };
        let joined = self.join_with(l, r, lkeys, rkeys, nulls_equal, band)?;
        self.residual(joined, j)
    }

    /// `l × r` where input `constant` (0 for `l`, 1 for `r`) is a constant
    /// relation: no trace of the other side is kept, and its columns keep
    /// their waterlines, since the constant never changes again.
    fn constant_product(&mut self, l: NodeId, r: NodeId, constant: usize) -> SqlResult<NodeId> {
        let (ls, rs) = (self.schema(l), self.schema(r));
        let schema = side_by_side(&ls, &rs);
        let constant_schema = if constant == 0 { &ls } else { &rs };
        let product = op::ConstantProduct::new(Arc::clone(&schema), constant, constant_schema)?;
        let node = self.add(product, &[l, r], schema)?;
        let (mut lb, mut rb) = (self.waterlines(l), self.waterlines(r));
        match constant {
            0 => lb.iter_mut().for_each(|w| *w = None),
            _ => rb.iter_mut().for_each(|w| *w = None),
        }
        lb.extend(rb);
        self.set_waterlines(node, lb);
        Ok(node)
    }

    /// A join's output with its residual filter (the condition beyond the
    /// equi-keys) applied; the filter keeps the join's waterlines.
    fn residual(
        &mut self,
        joined: NodeId,
        j: &datafusion::logical_expr::Join,
    ) -> SqlResult<NodeId> {
        match &j.filter {
            None => Ok(joined),
            Some(f) => {
                let both = j.left.schema().join(j.right.schema())?;
                let predicate = self.physical(f, &both)?;
                let schema = self.schema(joined);
                let bounds = self.waterlines(joined);
                let node = self.add(op::Filter::new(predicate), &[joined], schema)?;
                self.set_waterlines(node, bounds);
                Ok(node)
            }
        }
    }

    /// The rows of each side that a join condition comparing a column of
    /// one side with a column of the other, or with a monotone expression
    /// of one column of the other, puts out of reach: with `l.a >= r.b`,
    /// later right rows have `b` at or above `b`'s waterline, so left rows
    /// whose `a` is below it can never match again (and symmetrically);
    /// with `l.a >= r.b - INTERVAL '10' SECOND`, below that waterline less
    /// ten seconds. `BETWEEN` is two such comparisons.
    fn band(
        &self,
        l: NodeId,
        r: NodeId,
        filter: &Expr,
        j: &datafusion::logical_expr::Join,
    ) -> SqlResult<Band> {
        let both = j.left.schema().join(j.right.schema())?;
        let width = j.left.schema().fields().len();
        let mut band = Band::default();
        for c in split_conjunction(filter) {
            let pairs: Vec<(&Expr, &Expr)> = match c {
                Expr::BinaryExpr(b) => match b.op {
                    Operator::Gt | Operator::GtEq => vec![(&*b.left, &*b.right)],
                    Operator::Lt | Operator::LtEq => vec![(&*b.right, &*b.left)],
                    _ => vec![],
                },
                Expr::Between(b) if !b.negated => {
                    vec![(&*b.expr, &*b.low), (&*b.high, &*b.expr)]
                }
                _ => vec![],
            };
            for (big, small) in pairs {
                let Expr::Column(bc) = big else {
                    continue;
                };
                let Ok(bi) = both.index_of_column(bc) else {
                    continue;
                };
                // `small` reads columns of the other side only.
                let Some(read) = small
                    .column_refs()
                    .into_iter()
                    .map(|c| both.index_of_column(c).ok())
                    .collect::<Option<Vec<usize>>>()
                else {
                    continue;
                };
                let other_side = |i: &usize| (*i < width) != (bi < width);
                if read.is_empty() || !read.iter().all(other_side) {
                    continue;
                }
                if bi < width {
                    if let Some(w) = self.lower_bound(r, j.right.schema(), small) {
                        band.left.push((bi, w));
                    }
                } else if let Some(w) = self.lower_bound(l, j.left.schema(), small) {
                    band.right.push((bi - width, w));
                }
            }
        }
        Ok(band)
    }

    /// A waterline under `expr`'s value in every later row of `node`
    /// (whose plan schema is `schema`), when `expr` is monotone in one
    /// column that has a waterline.
    fn lower_bound(&self, node: NodeId, schema: &DFSchema, expr: &Expr) -> Option<op::Waterline> {
        let physical = self.physical(expr, schema).ok()?;
        self.derive_all(node, &[physical]).pop().flatten()
    }
}
