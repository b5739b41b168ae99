//! Lowering window functions: a window operator per `PARTITION BY`, or a
//! per-partition top-k when a filter bounds a ranking function.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::logical_expr::expr::NullTreatment;
use datafusion::logical_expr::expr::WindowFunction;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::ExprSchemable;
use datafusion::logical_expr::{
    Expr, LogicalPlan, Operator, WindowFrame, WindowFrameBound, WindowFrameUnits,
    WindowFunctionDefinition,
};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_planner::create_window_expr;
use eddy_dbsp::operator as op;
use eddy_dbsp::operator::Waterline;
use eddy_dbsp::NodeId;

use super::waterlines::collecting;
use super::{nullable_schema, unalias, unsupported, Lowerer};
use crate::error::{SqlError, SqlResult};

impl Lowerer<'_> {
    /// Window functions: one window operator per distinct `PARTITION BY`
    /// (each appends its functions' columns), then a map that puts the
    /// columns in the plan's order.
    pub(super) fn lower_window(
        &mut self,
        w: &datafusion::logical_expr::Window,
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        let mut node = self.lower(&w.input)?;
        let in_df = w.input.schema();
        let width = in_df.fields().len();
        let mut groups: Vec<(&[Expr], Vec<usize>)> = Vec::new();
        for (i, e) in w.window_expr.iter().enumerate() {
            let Expr::WindowFunction(f) = unalias(e) else {
                return Err(unsupported(format!("the window expression {e}")));
            };
            match groups.iter_mut().find(|g| g.0 == f.params.partition_by) {
                Some(g) => g.1.push(i),
                None => groups.push((&f.params.partition_by, vec![i])),
            }
        }
        let mut fields: Vec<Field> = self
            .schema(node)
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut position = vec![0; w.window_expr.len()];
        for (partition_by, members) in groups {
            let partition = self.physical_all(partition_by, in_df)?;
            let functions = members
                .iter()
                .map(|&i| {
                    let expr = create_window_expr(
                        &w.window_expr[i],
                        in_df,
                        &self.props,
                        &PhysicalPlanningContext::default(),
                    )?;
                    let extent = match unalias(&w.window_expr[i]) {
                        Expr::WindowFunction(f)
                            if crate::sessions::NAMES.contains(&f.fun.name()) =>
                        {
                            session_extent(f, in_df)?
                        }
                        Expr::WindowFunction(f) => extent(f, expr.get_window_frame()),
                        _ => op::Extent::Partition,
                    };
                    Ok((expr, extent))
                })
                .collect::<SqlResult<Vec<_>>>()?;
            for &i in &members {
                position[i] = fields.len();
                fields.push(schema.field(width + i).as_ref().clone());
            }
            let stage = Arc::new(Schema::new(fields.clone()));
            let input = self.schema(node);
            let (gc, mut bounds) =
                self.partition_waterlines(node, &partition, stage.fields().len());
            // Session windows forget their closed sessions below a
            // waterline on their time, and pass it on to their ends.
            let chain_gc = self.session_waterline(node, &functions);
            if let Some(time) = &chain_gc {
                for &i in &members {
                    if let Expr::WindowFunction(f) = unalias(&w.window_expr[i]) {
                        if f.fun.name() == crate::sessions::NAMES[1] {
                            bounds[position[i]] = Some(Arc::clone(time));
                        }
                    }
                }
            }
            let make = || {
                let window = op::Window::new(
                    Arc::clone(&input),
                    partition.clone(),
                    functions.clone(),
                    Arc::clone(&stage),
                )?;
                let window = match &chain_gc {
                    Some(w) => window.with_chain_waterline(Arc::clone(w)),
                    None => window,
                };
                Ok(collecting(window, &gc, op::Window::with_waterline))
            };
            node = self.add_keyed(make, &[node], Arc::clone(&stage))?;
            self.set_waterlines(node, bounds);
        }
        if position.iter().enumerate().all(|(i, &p)| p == width + i) {
            return Ok(node);
        }
        let mut exprs = self.columns(node, 0..width);
        let all = self.columns(node, 0..width + position.len());
        exprs.extend(position.iter().map(|&p| Arc::clone(&all[p])));
        self.map(node, exprs, schema)
    }

    /// The waterline of the time of a window whose functions are all
    /// sessions of one gap over one ascending time, when the time has one.
    /// No later change of the window reaches a session whose times are
    /// all a gap or more below it (the operator forgets them); and every
    /// session a later change reaches ends above it, since a session's
    /// end is its last time plus the gap: a row at or above the waterline
    /// joins only a session whose last time is less than a gap before it.
    /// So the waterline bounds the sessions' ends too.
    fn session_waterline(
        &self,
        node: NodeId,
        functions: &[(Arc<dyn WindowExpr>, op::Extent)],
    ) -> Option<Waterline> {
        let (first, op::Extent::Chain { gap }) = functions.first()? else {
            return None;
        };
        let one_gap = functions.iter().all(|(f, e)| {
            matches!(e, op::Extent::Chain { gap: g } if g == gap)
                && f.order_by() == first.order_by()
        });
        let order = first.order_by().first()?;
        if !one_gap || order.options.descending {
            return None;
        }
        self.derive_all(node, std::slice::from_ref(&order.expr))
            .into_iter()
            .next()
            .flatten()
    }

    /// A filter that bounds a ranking window function (`rn <= k`, `rn < k`,
    /// `rn = k`) lowers the window onto a per-partition top-k, which walks
    /// only the first k rows of a touched partition. The filter itself
    /// still applies on top (its other conditions, and `rn = k`).
    pub(super) fn rank_top_k(
        &mut self,
        f: &datafusion::logical_expr::Filter,
    ) -> SqlResult<Option<NodeId>> {
        // The optimizer may put a projection that prunes columns between
        // the filter and the window.
        let (w, projection) = match f.input.as_ref() {
            LogicalPlan::Window(w) => (w, None),
            LogicalPlan::Projection(p) => match p.input.as_ref() {
                LogicalPlan::Window(w) => (w, Some(p)),
                _ => return Ok(None),
            },
            _ => return Ok(None),
        };
        let [e] = w.window_expr.as_slice() else {
            return Ok(None);
        };
        let Expr::WindowFunction(wf) = unalias(e) else {
            return Ok(None);
        };
        let ranking = match wf.fun.name() {
            "row_number" => op::Ranking::RowNumber,
            "rank" => op::Ranking::Rank,
            "dense_rank" => op::Ranking::DenseRank,
            _ => return Ok(None),
        };
        if !wf.params.args.is_empty() || wf.params.filter.is_some() {
            return Ok(None);
        }
        let width = w.input.schema().fields().len();
        let (qualifier, field) = w.schema.qualified_field(width);
        let mut rank_column = datafusion::common::Column::new(qualifier.cloned(), field.name());
        if let Some(p) = projection {
            // The filter names the projection's output: the rank column
            // passed through as it is.
            let Some(i) = p.expr.iter().position(|e| match unalias(e) {
                Expr::Column(c) => *c == rank_column,
                _ => false,
            }) else {
                return Ok(None);
            };
            let (q, out) = p.schema.qualified_field(i);
            rank_column = datafusion::common::Column::new(q.cloned(), out.name());
        }
        let Some(limit) = split_conjunction(&f.predicate)
            .into_iter()
            .find_map(|c| rank_bound(c, &rank_column))
        else {
            return Ok(None);
        };
        let input = self.lower(&w.input)?;
        let in_df = w.input.schema();
        let partition = self.physical_all(&wf.params.partition_by, in_df)?;
        let order = self.physical_sort(&wf.params.order_by, in_df)?;
        let schema = nullable_schema(&w.schema);
        let in_schema = self.schema(input);
        let (gc, bounds) = self.partition_waterlines(input, &partition, schema.fields().len());
        let inserts_only = self.inserts_only(&w.input);
        // Dense ranks may fall when a row rises past another's value.
        let rising = !inserts_only
            && ranking != op::Ranking::DenseRank
            && self.rising(&w.input, &wf.params.partition_by, &wf.params.order_by);
        let make = || {
            let mut top = op::RankTopK::new(
                Arc::clone(&in_schema),
                partition.clone(),
                order.clone(),
                ranking,
                limit,
                Arc::clone(&schema),
            )?;
            if inserts_only {
                top = top.inserts_only();
            } else if rising {
                top = top.rising();
            }
            Ok(collecting(top, &gc, op::RankTopK::with_waterline))
        };
        let top = self.add_keyed(make, &[input], Arc::clone(&schema))?;
        self.set_waterlines(top, bounds);
        match projection {
            None => Ok(Some(top)),
            Some(p) => {
                let exprs = self.physical_all(&p.expr, &w.schema)?;
                Ok(Some(self.map(top, exprs, nullable_schema(&p.schema))?))
            }
        }
    }
}

/// Which rows the value of window function `f` depends on, around its row
/// (`frame`: the frame its physical expression evaluates). Anything not
/// known to be narrower depends on the whole partition, which is never
/// wrong, only slower.
fn extent(f: &WindowFunction, frame: &WindowFrame) -> op::Extent {
    let whole = op::Extent::Partition;
    if f.params.order_by.is_empty() {
        return whole;
    }
    match &f.fun {
        WindowFunctionDefinition::AggregateUDF(_) => frame_extent(frame),
        WindowFunctionDefinition::WindowUDF(u) => match u.name() {
            "row_number" | "rank" if f.params.args.is_empty() => op::Extent::Rank { dense: false },
            "dense_rank" if f.params.args.is_empty() => op::Extent::Rank { dense: true },
            "first_value" | "last_value" | "nth_value" => frame_extent(frame),
            name @ ("lag" | "lead") => {
                if f.params.null_treatment == Some(NullTreatment::IgnoreNulls) {
                    return whole;
                }
                let offset = match f.params.args.get(1).map(unalias) {
                    None => 1,
                    Some(Expr::Literal(v, _)) => match v.cast_to(&DataType::Int64) {
                        Ok(ScalarValue::Int64(Some(n))) => n,
                        _ => return whole,
                    },
                    Some(_) => return whole,
                };
                // LAG n reads n rows back; LEAD n (or LAG −n) ahead.
                let back = (name == "lag") == (offset >= 0);
                let n = Some(offset.unsigned_abs());
                if back {
                    op::Extent::Rows {
                        preceding: n,
                        following: Some(0),
                    }
                } else {
                    op::Extent::Rows {
                        preceding: Some(0),
                        following: n,
                    }
                }
            }
            _ => whole,
        },
    }
}

/// A session function's extent: the chain of its time, when the time is
/// the one `ORDER BY` column (otherwise the partition). The gap must be a
/// constant that counts in the time's ticks, as [`crate::sessions`]
/// counts it: the view is refused otherwise, rather than failing on its
/// first rows.
fn session_extent(f: &WindowFunction, schema: &DFSchema) -> SqlResult<op::Extent> {
    let name = f.fun.name();
    let (Some(time), Some(gap)) = (f.params.args.first(), f.params.args.get(1)) else {
        return Err(SqlError::new(format!("{name}() takes (time, gap)")));
    };
    let Expr::Literal(gap, _) = unalias(gap) else {
        return Err(SqlError::new(format!(
            "{name}() takes its gap as a constant, not {gap}"
        )));
    };
    let time_type = time.get_type(schema)?;
    let gap = crate::sessions::gap_ticks(gap, &time_type)?;
    match f.params.order_by.as_slice() {
        [order] if unalias(&order.expr) == unalias(time) => Ok(op::Extent::Chain { gap }),
        _ => Ok(op::Extent::Partition),
    }
}

/// The extent of a frame: how far before and after its row it reaches.
/// A side that does not pass the row (`n FOLLOWING` as the start) counts
/// as the row itself.
fn frame_extent(frame: &WindowFrame) -> op::Extent {
    let rows = |b: &WindowFrameBound, before: bool| match b {
        WindowFrameBound::Preceding(v) if before => count(v),
        WindowFrameBound::Following(v) if !before => count(v),
        _ => Some(Some(0)),
    };
    let range = |b: &WindowFrameBound, before: bool| match b {
        WindowFrameBound::Preceding(v) | WindowFrameBound::Following(v)
            if before == matches!(b, WindowFrameBound::Preceding(_)) =>
        {
            if v.is_null() {
                op::RangeOffset::Unbounded
            } else {
                op::RangeOffset::By(v.clone())
            }
        }
        _ => op::RangeOffset::Current,
    };
    match frame.units {
        WindowFrameUnits::Rows => match (
            rows(&frame.start_bound, true),
            rows(&frame.end_bound, false),
        ) {
            (Some(preceding), Some(following)) => op::Extent::Rows {
                preceding,
                following,
            },
            _ => op::Extent::Partition,
        },
        WindowFrameUnits::Range => op::Extent::Range {
            preceding: range(&frame.start_bound, true),
            following: range(&frame.end_bound, false),
        },
        WindowFrameUnits::Groups => op::Extent::Partition,
    }
}

/// A `ROWS` offset: `Some(None)` when unbounded, `None` when unreadable.
fn count(v: &ScalarValue) -> Option<Option<u64>> {
    if v.is_null() {
        return Some(None);
    }
    match v.cast_to(&DataType::UInt64) {
        Ok(ScalarValue::UInt64(Some(n))) => Some(Some(n)),
        _ => None,
    }
}

/// The largest number that `condition` lets through when it bounds
/// `column` from above by a constant (`column <= 3`, `2 > column`, …).
fn rank_bound(condition: &Expr, column: &datafusion::common::Column) -> Option<u64> {
    let Expr::BinaryExpr(b) = condition else {
        return None;
    };
    let (op, value) = match (b.left.as_ref(), b.right.as_ref()) {
        (Expr::Column(c), Expr::Literal(v, _)) if c == column => (b.op, v),
        (Expr::Literal(v, _), Expr::Column(c)) if c == column => (b.op.swap()?, v),
        _ => return None,
    };
    let value = match value.cast_to(&DataType::Int64).ok()? {
        ScalarValue::Int64(Some(v)) => v,
        _ => return None,
    };
    let bound = match op {
        Operator::LtEq | Operator::Eq => value,
        Operator::Lt => value.saturating_sub(1),
        _ => return None,
    };
    Some(bound.max(0) as u64)
}
