//! Lowering ASOF joins: a join that carries the marker of
//! [`crate::asof`] becomes the ASOF join operator.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DFSchema, JoinType, ScalarValue};
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::Expr;
use eddy_dbsp::operator as op;
use eddy_dbsp::NodeId;

use super::{aligned_keys, cast_expr, unsupported, Exprs, Lowerer};
use crate::error::{SqlError, SqlResult};

impl Lowerer<'_> {
    /// An ASOF join: a join whose condition holds the marker that
    /// [`crate::asof`] puts there.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn asof_join(
        &mut self,
        j: &datafusion::logical_expr::Join,
        filter: &Expr,
        l: NodeId,
        r: NodeId,
        lkeys: &Exprs,
        rkeys: &Exprs,
        schema: &SchemaRef,
    ) -> SqlResult<Option<NodeId>> {
        let conjuncts = split_conjunction(filter);
        let Some(marker) = conjuncts.iter().find_map(|c| match c {
            Expr::ScalarFunction(f) if f.func.name() == crate::asof::MARKER => Some(f),
            _ => None,
        }) else {
            return Ok(None);
        };
        // The optimizer moves WHERE conditions on an inner join's result
        // into its condition; for an ASOF join they apply after matching.
        let rest: Vec<Expr> = conjuncts
            .iter()
            .filter(
                |c| !matches!(c, Expr::ScalarFunction(f) if f.func.name() == crate::asof::MARKER),
            )
            .map(|c| (*c).clone())
            .collect();
        if !rest.is_empty() && j.join_type != JoinType::Inner {
            return Err(SqlError::new(
                "ASOF JOIN condition must be a conjunction of equality comparisons",
            ));
        }
        let [a, b, Expr::Literal(ScalarValue::Utf8(Some(op)), _)] = marker.args.as_slice() else {
            return Err(SqlError::new("malformed ASOF join condition"));
        };
        let (lsch, rsch) = (j.left.schema(), j.right.schema());
        let on = |e: &Expr, s: &DFSchema| e.column_refs().iter().all(|c| s.has_column(c));
        let (lt, rt, op) = if on(a, lsch) && on(b, rsch) {
            (a, b, op.as_str())
        } else if on(b, lsch) && on(a, rsch) {
            let flipped = match op.as_str() {
                ">=" => "<=",
                ">" => "<",
                "<=" => ">=",
                _ => ">",
            };
            (b, a, flipped)
        } else {
            return Err(SqlError::new(
                "an ASOF join's MATCH_CONDITION compares a time of each side",
            ));
        };
        let matching = match op {
            ">=" => op::AsofMatch::AtOrBefore,
            ">" => op::AsofMatch::Before,
            "<=" => op::AsofMatch::AtOrAfter,
            _ => op::AsofMatch::After,
        };
        let left_outer = match j.join_type {
            JoinType::Inner => false,
            JoinType::Left => true,
            other => return Err(unsupported(format!("a {other} ASOF join"))),
        };
        let (ls, rs) = (self.schema(l), self.schema(r));
        let (key_types, rkeys) = aligned_keys(&ls, lkeys, &rs, rkeys)?;
        let l_time = self.physical(lt, lsch)?;
        let l_time_column = l_time
            .downcast_ref::<datafusion::physical_expr::expressions::Column>()
            .map(|c| c.index());
        let time_type = l_time.data_type(&ls)?;
        let r_time = cast_expr(self.physical(rt, rsch)?, &rs, &time_type)?;
        let bound = match (
            &self.derive_all(l, std::slice::from_ref(&l_time))[0],
            &self.derive_all(r, std::slice::from_ref(&r_time))[0],
        ) {
            (Some(lw), Some(rw)) => Some(super::waterlines::least(Arc::clone(lw), Arc::clone(rw))),
            _ => None,
        };
        let make = || {
            let join = op::AsofJoin::new(
                Arc::clone(&ls),
                Arc::clone(&rs),
                op::AsofSide {
                    keys: lkeys.clone(),
                    time: Arc::clone(&l_time),
                },
                op::AsofSide {
                    keys: rkeys.clone(),
                    time: Arc::clone(&r_time),
                },
                &key_types,
                &time_type,
                matching,
                left_outer,
                Arc::clone(schema),
            )?;
            Ok(match &bound {
                Some(bound) => join.with_waterline(Arc::clone(bound)),
                None => join,
            })
        };
        let node = self.add_keyed(make, &[l, r], Arc::clone(schema))?;
        // With `>=`/`>`, a left row below both waterlines keeps its match
        // for ever and is never re-emitted: the left time bounds the output.
        let mut bounds = vec![None; schema.fields().len()];
        if let Some(bound) = &bound {
            let latest = matches!(matching, op::AsofMatch::AtOrBefore | op::AsofMatch::Before);
            if let (true, Some(c)) = (latest, l_time_column) {
                bounds[c] = Some(Arc::clone(bound));
            }
        }
        self.set_waterlines(node, bounds.clone());
        match conjunction(rest) {
            None => Ok(Some(node)),
            Some(after) => {
                let both = lsch.join(rsch)?;
                let predicate = self.physical(&after, &both)?;
                let node = self.add(op::Filter::new(predicate), &[node], Arc::clone(schema))?;
                self.set_waterlines(node, bounds);
                Ok(Some(node))
            }
        }
    }
}
