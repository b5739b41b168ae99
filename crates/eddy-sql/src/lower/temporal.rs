//! Lowering filters: conditions that bound a time by `NOW()` become a
//! temporal filter after a plain filter for the others.

use std::sync::Arc;

use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::DFSchema;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{Expr, Operator};
use datafusion::physical_expr::create_physical_expr;
use eddy_dbsp::operator as op;
use eddy_dbsp::NodeId;

use super::{unsupported, Lowerer};
use crate::error::SqlResult;

impl Lowerer<'_> {
    /// A filter; its conditions that bound a time by `NOW()` become a
    /// temporal filter after the others.
    pub(super) fn filter(
        &mut self,
        input: NodeId,
        predicate: &Expr,
        schema: &DFSchema,
    ) -> SqlResult<NodeId> {
        let (temporal, plain): (Vec<&Expr>, Vec<&Expr>) = split_conjunction(predicate)
            .into_iter()
            .partition(|c| has_now(c));
        let mut node = input;
        if let Some(plain) = conjunction(plain.into_iter().cloned()) {
            let predicate = self.physical(&plain, schema)?;
            let s = self.schema(node);
            let bounds = self.waterlines(node);
            node = self.add(op::Filter::new(predicate), &[node], s)?;
            self.set_waterlines(node, bounds);
        }
        if temporal.is_empty() {
            return Ok(node);
        }
        let mut time: Option<&Expr> = None;
        let (mut lower, mut upper) = (None, None);
        let now_schema = DFSchema::try_from(op::Clock::schema().as_ref().clone())?;
        for c in temporal {
            let refused = || {
                unsupported(format!(
                    "the NOW() condition `{c}`: write it as time >= NOW() - interval or time <= NOW() + interval"
                ))
            };
            let Expr::BinaryExpr(b) = c else {
                return Err(refused());
            };
            let (e, op, bound) = match (has_now(&b.left), has_now(&b.right)) {
                (false, true) => (b.left.as_ref(), b.op, b.right.as_ref()),
                (true, false) => (
                    b.right.as_ref(),
                    b.op.swap().ok_or_else(refused)?,
                    b.left.as_ref(),
                ),
                _ => return Err(refused()),
            };
            if time.is_some_and(|t| t != e) {
                return Err(unsupported("NOW() conditions on two different times"));
            }
            time = Some(e);
            let value = bound
                .clone()
                .transform(|x| {
                    Ok(if is_now(&x) {
                        Transformed::yes(Expr::Column(datafusion::common::Column::from_name("now")))
                    } else {
                        Transformed::no(x)
                    })
                })?
                .data;
            let value = create_physical_expr(
                &value,
                &now_schema,
                &self.props,
                &PhysicalPlanningContext::default(),
            )?;
            let slot = match op {
                Operator::Gt | Operator::GtEq => &mut lower,
                Operator::Lt | Operator::LtEq => &mut upper,
                _ => return Err(refused()),
            };
            if slot.is_some() {
                return Err(unsupported("two NOW() bounds on the same side of a time"));
            }
            *slot = Some(op::Bound {
                value,
                inclusive: matches!(op, Operator::GtEq | Operator::LtEq),
            });
        }
        let time = self.physical(time.expect("a temporal condition"), schema)?;
        let s = self.schema(node);
        let filter =
            op::TemporalFilter::new(Arc::clone(&s), time, lower, upper, self.clock.clone())?;
        self.uses_clock = true;
        self.add(filter, &[node], s)
    }
}

/// Whether `expr` is a call of Eddy's `NOW()`.
fn is_now(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.func.name() == crate::functions::NOW)
}

/// Whether `expr` calls `NOW()` anywhere.
pub(super) fn has_now(expr: &Expr) -> bool {
    expr.exists(|e| Ok(is_now(e))).unwrap_or(false)
}
