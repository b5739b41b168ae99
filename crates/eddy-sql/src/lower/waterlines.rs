//! Waterlines through plans: which columns of a node's stream are bounded
//! from below for all later steps, derived from the columns with a
//! `LATENESS` (see `eddy_dbsp::operator::waterline`).
//!
//! | node | waterline of an output column |
//! |---|---|
//! | lateness | its own bound, or the input's |
//! | map (projection) | an expression that is monotone in one input column with a waterline (`c`, `c ± constant`, casts between numbers and times, `tumble_start`/`tumble_end`, `hop_start`/`hop_end` of a constant window, `date_trunc`, `date_bin`): the expression of that waterline; a `HOP` window's start or end: the earliest window a time at the waterline can be in |
//! | product with a constant (a cross join with `VALUES`) | the other side's |
//! | filter, negate, distinct | the input's |
//! | plus (UNION ALL) | the least of the inputs' |
//! | join | a key column: the least of both sides' bounds on that key |
//! | aggregate | a group column: its expression's waterline over the input |
//! | window, per-partition top-k | a partition column: the input's (a change re-emits only its own partition) |
//! | ASOF join (`>=`, `>`) with waterlines on both times | the left time: the lesser of both bounds |
//! | anything else (global top-k, NOW() filters, upserts) | none: they retract old rows |
//!
//! Operators use them to forget state: a join side's trace the keys below
//! the other side's bound (and, for a band condition such as
//! `b.ts BETWEEN a.ts AND a.expires`, the rows that no later row of the
//! other side can satisfy), an aggregate the groups below its group
//! column's bound, a window or top-k the partitions below theirs, an ASOF
//! join the rows no later change can reach, a distinct its rows below a
//! column's bound.

use std::cmp::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, RecordBatch};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal, TryCastExpr};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use eddy_dbsp::operator::Waterline;
use eddy_dbsp::NodeId;

use super::Lowerer;

/// Per column of a node, its waterline if it has one.
pub type Waterlines = Vec<Option<Waterline>>;

/// Functions that never decrease when their time argument grows (the other
/// arguments being constants).
/// (`hop_start` with a constant window number `k` is the `k`-th window
/// back from the latest, which moves forward with its time.)
const MONOTONE_FUNCTIONS: &[&str] = &[
    "tumble_start",
    "tumble_end",
    "hop_start",
    "hop_end",
    "date_trunc",
    "date_bin",
];

fn is_literal(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.is::<Literal>()
}

fn positive_literal(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.downcast_ref::<Literal>().is_some_and(|l| {
        let v = l.value();
        !v.is_null()
            && v.data_type().is_numeric()
            && v.partial_cmp(&ScalarValue::new_zero(&v.data_type()).unwrap_or(ScalarValue::Null))
                == Some(Ordering::Greater)
    })
}

/// Whether `expr` never decreases when its columns grow.
fn monotone(expr: &Arc<dyn PhysicalExpr>) -> bool {
    let any: &dyn PhysicalExpr = expr.as_ref();
    if any.is::<Column>() || any.is::<Literal>() {
        return true;
    }
    let ordered = |t: &datafusion::arrow::datatypes::DataType| t.is_numeric() || t.is_temporal();
    if let Some(c) = any.downcast_ref::<CastExpr>() {
        return ordered(c.cast_type()) && monotone(c.expr());
    }
    if let Some(c) = any.downcast_ref::<TryCastExpr>() {
        return ordered(c.cast_type()) && monotone(c.expr());
    }
    if let Some(b) = super::checked::binary(any) {
        return match b.op() {
            Operator::Plus => {
                (monotone(b.left()) && is_literal(b.right()))
                    || (is_literal(b.left()) && monotone(b.right()))
            }
            Operator::Minus => monotone(b.left()) && is_literal(b.right()),
            // Dividing or multiplying by a positive constant keeps order.
            Operator::Divide | Operator::Multiply => {
                monotone(b.left()) && positive_literal(b.right())
            }
            _ => false,
        };
    }
    if let Some(f) = any.downcast_ref::<ScalarFunctionExpr>() {
        let args = f.args();
        return MONOTONE_FUNCTIONS.contains(&f.name())
            && args.iter().filter(|a| !is_literal(a)).count() == 1
            && args.iter().all(monotone);
    }
    false
}

/// `expr` with each `hop_start(ts, slide, size, offset, k)` (and
/// `hop_end`) whose window number `k` is a column (a `HOP` table
/// function's windows, see [`crate::tvf`]) replaced by a lower bound that
/// depends on `ts` alone: that of the earliest window that can hold a time
/// at or after `ts`, `hop_start(ts - size, slide, size, offset, 0) +
/// slide`, the first window start after `ts - size`. Replacing a part of a
/// monotone expression by a lower bound of it gives a lower bound of the
/// whole.
fn hop_lower_bounds(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Arc<dyn PhysicalExpr> {
    let rewritten = Arc::clone(expr).transform_up(|e| {
        let Some(f) = e.downcast_ref::<ScalarFunctionExpr>() else {
            return Ok(Transformed::no(e));
        };
        let args = f.args();
        if !matches!(f.name(), "hop_start" | "hop_end")
            || args.len() != 5
            || !args[1..4].iter().all(is_literal)
            || is_literal(&args[4])
        {
            return Ok(Transformed::no(e));
        }
        let (ts, slide, size, offset) = (&args[0], &args[1], &args[2], &args[3]);
        // Integer times subtract and add integers of their own type.
        let ts_type = ts.data_type(schema)?;
        let like_ts = |length: &Arc<dyn PhysicalExpr>| -> Arc<dyn PhysicalExpr> {
            match length.downcast_ref::<Literal>() {
                Some(l) if ts_type.is_integer() && l.value().data_type().is_integer() => {
                    match l.value().cast_to(&ts_type) {
                        Ok(v) => Arc::new(Literal::new(v)),
                        Err(_) => Arc::clone(length),
                    }
                }
                _ => Arc::clone(length),
            }
        };
        let earlier: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
            Arc::clone(ts),
            Operator::Minus,
            like_ts(size),
        ));
        let first: Arc<dyn PhysicalExpr> = Arc::new(Literal::new(ScalarValue::Int64(Some(0))));
        let latest = Arc::clone(&e).with_new_children(vec![
            earlier,
            Arc::clone(slide),
            Arc::clone(size),
            Arc::clone(offset),
            first,
        ])?;
        let bound: Arc<dyn PhysicalExpr> =
            Arc::new(BinaryExpr::new(latest, Operator::Plus, like_ts(slide)));
        Ok(Transformed::yes(bound))
    });
    rewritten.map_or_else(|_| Arc::clone(expr), |t| t.data)
}

/// The waterline of `expr` over rows of `schema` whose columns have `input`.
pub fn derive(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    input: &[Option<Waterline>],
) -> Option<Waterline> {
    if let Some(c) = expr.downcast_ref::<Column>() {
        return input.get(c.index())?.clone();
    }
    let expr = &hop_lower_bounds(expr, schema);
    let columns = collect_columns(expr);
    let [column] = columns.iter().collect::<Vec<_>>()[..] else {
        return None;
    };
    let bound = input.get(column.index())?.clone()?;
    if !monotone(expr) {
        return None;
    }
    let index = column.index();
    let expr = Arc::clone(expr);
    let nullable = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    Some(Arc::new(move || {
        let value = bound()?;
        let columns = nullable
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i == index {
                    value.cast_to(f.data_type()).ok()?.to_array().ok()
                } else {
                    Some(new_null_array(f.data_type(), 1))
                }
            })
            .collect::<Option<Vec<_>>>()?;
        let batch = RecordBatch::try_new(Arc::clone(&nullable), columns).ok()?;
        let out = expr.evaluate(&batch).ok()?.into_array(1).ok()?;
        let out = ScalarValue::try_from_array(&out, 0).ok()?;
        (!out.is_null()).then_some(out)
    }))
}

/// The lesser of two waterlines (a bound on the union of two streams).
pub fn least(a: Waterline, b: Waterline) -> Waterline {
    Arc::new(move || {
        let (x, y) = (a()?, b()?);
        let y = y.cast_to(&x.data_type()).ok()?;
        match x.partial_cmp(&y)? {
            Ordering::Greater => Some(y),
            _ => Some(x),
        }
    })
}

/// The first bounded column of `bounds` with its waterline: the column a
/// stateful operator keyed by these columns collects its state by.
pub(super) fn first_bound(bounds: &[Option<Waterline>]) -> Option<(usize, Waterline)> {
    bounds
        .iter()
        .enumerate()
        .find_map(|(i, w)| Some((i, w.clone()?)))
}

/// `op`, set by `with` to collect its state by `gc`'s column and
/// waterline when there is one.
pub(super) fn collecting<O>(
    op: O,
    gc: &Option<(usize, Waterline)>,
    with: fn(O, usize, Waterline) -> O,
) -> O {
    match gc.clone() {
        Some((column, waterline)) => with(op, column, waterline),
        None => op,
    }
}

impl Lowerer<'_> {
    /// The waterlines of a node's columns (none inside a recursion).
    pub(super) fn waterlines(&self, node: NodeId) -> Waterlines {
        let width = self.schema(node).fields().len();
        match (&self.scope, self.bounds.get(&node)) {
            (None, Some(w)) => w.clone(),
            _ => vec![None; width],
        }
    }

    /// Records a node's waterlines (ignored inside a recursion).
    pub(super) fn set_waterlines(&mut self, node: NodeId, waterlines: Waterlines) {
        if self.scope.is_none() && waterlines.iter().any(Option::is_some) {
            self.bounds.insert(node, waterlines);
        }
    }

    /// For an operator partitioned by `partition` over `input`'s rows (a
    /// window, a per-partition top-k): the partition column to collect by,
    /// with its waterline, and the waterlines of its output, whose first
    /// columns are the input's (only partition columns keep theirs: a
    /// touched partition re-emits its old rows).
    pub(super) fn partition_waterlines(
        &self,
        input: NodeId,
        partition: &[Arc<dyn PhysicalExpr>],
        width: usize,
    ) -> (Option<(usize, Waterline)>, Waterlines) {
        let keys = self.derive_all(input, partition);
        let mut out = vec![None; width];
        for (expr, w) in partition.iter().zip(&keys) {
            if let (Some(c), Some(w)) = (expr.downcast_ref::<Column>(), w) {
                if c.index() < width {
                    out[c.index()] = Some(Arc::clone(w));
                }
            }
        }
        (first_bound(&keys), out)
    }

    /// Waterlines of `exprs` over a node's rows.
    pub(super) fn derive_all(&self, input: NodeId, exprs: &[Arc<dyn PhysicalExpr>]) -> Waterlines {
        let schema = self.schema(input);
        let bounds = self.waterlines(input);
        if bounds.iter().all(Option::is_none) {
            return vec![None; exprs.len()];
        }
        exprs.iter().map(|e| derive(e, &schema, &bounds)).collect()
    }
}
