//! Lowering recursion: `WITH RECURSIVE` and groups of mutually recursive
//! views (`DECLARE RECURSIVE VIEW`) become a fixed point over a nested
//! circuit (see `eddy_dbsp::operator::fixpoint`).
//!
//! While a recursion is lowered, the lowerer adds nodes to the nested
//! circuit. A subplan that reads no recursive relation is lowered into the
//! outer circuit as usual and *imported* (its changes enter the nested
//! circuit at iteration 0); a subplan that reads one may only use monotone
//! operators (projections, filters, joins whose negated or NULL-padded side
//! is not recursive, UNION, DISTINCT), whose stateful ones take their
//! nested forms. Each recursive relation reads its previous iteration
//! through a feedback input.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNode;
use datafusion::common::JoinType;
use datafusion::logical_expr::{Distinct, LogicalPlan};
use eddy_dbsp::operator as op;
use eddy_dbsp::{Circuit, InputHandle, NodeId};

use super::temporal::has_now;
use super::{cast_expr, unsupported, Exprs, Lowerer};
use crate::error::{SqlError, SqlResult};

/// The nested circuit being built for one recursion.
pub(super) struct Scope {
    /// The nested circuit.
    pub(super) inner: Circuit,
    /// The iteration context its nested operators share.
    pub(super) ctx: op::Iteration,
    /// Recursive relations: name to the feedback node that reads the
    /// previous iteration.
    names: HashMap<String, NodeId>,
    /// One feedback input per recursive relation, in declaration order.
    feedback: Vec<(SchemaRef, InputHandle)>,
    /// Outer nodes imported, with the inputs that receive their changes.
    imports: Vec<(NodeId, InputHandle)>,
    /// Outer node to its nested input.
    imported: HashMap<NodeId, NodeId>,
}

impl Lowerer<'_> {
    /// Whether `plan` reads a recursive relation of the current scope.
    pub(super) fn reads_recursion(&self, plan: &LogicalPlan) -> bool {
        let Some(scope) = &self.scope else {
            return false;
        };
        plan.exists(|p| {
            Ok(matches!(p, LogicalPlan::TableScan(scan)
                if scope.names.contains_key(scan.table_name.table())))
        })
        .unwrap_or(true)
    }

    /// The feedback node of a recursive relation of the current scope.
    pub(super) fn recursive_node(&self, name: &str) -> Option<NodeId> {
        self.scope.as_ref()?.names.get(name).copied()
    }

    /// Refuses, inside a recursion, a plan node through which a recursive
    /// relation would flow non-monotonically (or that has no nested form).
    pub(super) fn check_monotone(&self, plan: &LogicalPlan) -> SqlResult<()> {
        let refuse = |what: &str| {
            Err(unsupported(format!(
                "{what} over a recursive relation: recursion may only go through \
                 projections, filters, inner joins, semi-joins, UNION and DISTINCT \
                 (non-monotone recursion is refused)"
            )))
        };
        match plan {
            LogicalPlan::TableScan(_)
            | LogicalPlan::Projection(_)
            | LogicalPlan::SubqueryAlias(_)
            | LogicalPlan::Union(_)
            | LogicalPlan::Unnest(_)
            | LogicalPlan::Distinct(Distinct::All(_)) => Ok(()),
            LogicalPlan::Sort(s) if s.fetch.is_none() => Ok(()),
            LogicalPlan::Filter(f) if has_now(&f.predicate) => refuse("a NOW() condition"),
            LogicalPlan::Filter(_) => Ok(()),
            LogicalPlan::Join(j) => {
                let (left, right) = (
                    self.reads_recursion(&j.left),
                    self.reads_recursion(&j.right),
                );
                let negated = match j.join_type {
                    JoinType::Inner => false,
                    JoinType::Left
                    | JoinType::LeftSemi
                    | JoinType::LeftAnti
                    | JoinType::LeftMark => right,
                    JoinType::Right
                    | JoinType::RightSemi
                    | JoinType::RightAnti
                    | JoinType::RightMark => left,
                    JoinType::Full => true,
                };
                if negated {
                    refuse(&format!(
                        "a {} join whose negated or NULL-padded side reads the recursion",
                        j.join_type
                    ))
                } else {
                    Ok(())
                }
            }
            // DISTINCT and UNION are planned as a grouping without aggregates.
            LogicalPlan::Aggregate(a) if a.aggr_expr.is_empty() => Ok(()),
            LogicalPlan::Aggregate(_) => refuse("an aggregate (GROUP BY)"),
            LogicalPlan::Window(_) => refuse("a window function"),
            LogicalPlan::Sort(_) | LogicalPlan::Limit(_) => refuse("LIMIT"),
            LogicalPlan::RecursiveQuery(_) => refuse("a nested WITH RECURSIVE"),
            other => refuse(&format!("the plan node {}", other.display())),
        }
    }

    /// Starts lowering a recursion over `relations` (name and schema each).
    pub(super) fn begin_recursion(&mut self, relations: &[(String, SchemaRef)]) -> SqlResult<()> {
        if self.scope.is_some() {
            return Err(unsupported("a recursion inside a recursion"));
        }
        let mut inner = Circuit::new();
        let mut names = HashMap::new();
        let mut feedback = Vec::new();
        for (name, schema) in relations {
            let (node, handle) = inner.add_input(Arc::clone(schema))?;
            names.insert(name.clone(), node);
            feedback.push((Arc::clone(schema), handle));
        }
        self.scope = Some(Scope {
            inner,
            ctx: op::Iteration::new(),
            names,
            feedback,
            imports: Vec::new(),
            imported: HashMap::new(),
        });
        Ok(())
    }

    /// Lowers a plan that reads no recursive relation into the outer
    /// circuit and imports it into the nested one.
    pub(super) fn lower_imported(&mut self, plan: &LogicalPlan) -> SqlResult<NodeId> {
        let scope = self.scope.take();
        let outer = self.lower(plan);
        self.scope = scope;
        self.import_node(outer?)
    }

    /// `node`'s rows with the columns cast to `schema`'s types.
    pub(super) fn conform(&mut self, node: NodeId, schema: &SchemaRef) -> SqlResult<NodeId> {
        let have = self.schema(node);
        if have.fields().len() != schema.fields().len() {
            return Err(SqlError::new(format!(
                "a recursive relation has {} columns but its definition gives {}",
                schema.fields().len(),
                have.fields().len()
            )));
        }
        if have
            .fields()
            .iter()
            .zip(schema.fields())
            .all(|(a, b)| a.data_type() == b.data_type())
        {
            return Ok(node);
        }
        let exprs = self
            .columns(node, 0..have.fields().len())
            .into_iter()
            .zip(schema.fields())
            .map(|(c, f)| cast_expr(c, &have, f.data_type()))
            .collect::<SqlResult<Exprs>>()?;
        self.map(node, exprs, Arc::clone(schema))
    }

    /// Ends the recursion: `next[k]` is relation `k`'s value at an
    /// iteration, from the previous iteration's values. Returns the outer
    /// nodes carrying each relation's changes.
    pub(super) fn end_recursion(&mut self, next: Vec<NodeId>) -> SqlResult<Vec<NodeId>> {
        let feedback_schemas: Vec<SchemaRef> = self
            .scope
            .as_ref()
            .expect("inside a recursion")
            .feedback
            .iter()
            .map(|(s, _)| Arc::clone(s))
            .collect();
        let next = next
            .into_iter()
            .zip(&feedback_schemas)
            .map(|(n, s)| self.conform(n, s))
            .collect::<SqlResult<Vec<_>>>()?;
        let scope = self.scope.take().expect("inside a recursion");
        let outer_inputs: Vec<NodeId> = scope.imports.iter().map(|(n, _)| *n).collect();
        let feedback = scope
            .feedback
            .into_iter()
            .zip(&next)
            .map(|((_, handle), &node)| (handle, node))
            .collect();
        let fixpoint = op::Fixpoint::new(
            scope.inner,
            scope.ctx,
            scope.imports.into_iter().map(|(_, h)| h).collect(),
            feedback,
        );
        let outputs: Vec<op::FixpointOutput> =
            (0..next.len()).map(|k| fixpoint.output(k)).collect();
        let empty = Arc::new(datafusion::arrow::datatypes::Schema::empty());
        let fp = self.add(fixpoint, &outer_inputs, empty)?;
        outputs
            .into_iter()
            .zip(feedback_schemas)
            .map(|(out, schema)| self.add(out, &[fp], schema))
            .collect()
    }

    /// `WITH RECURSIVE name AS (static UNION [ALL] recursive)`: the least
    /// fixed point of `R = static + recursive(R)`, deduplicated for UNION.
    pub(super) fn lower_recursive_query(
        &mut self,
        rq: &datafusion::logical_expr::RecursiveQuery,
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        if self.scope.is_some() {
            return Err(unsupported("WITH RECURSIVE inside a recursive view"));
        }
        let stat = self.lower(&rq.static_term)?;
        let stat = self.conform(stat, &schema)?;
        self.begin_recursion(&[(rq.name.clone(), Arc::clone(&schema))])?;
        let outcome = (|| {
            if nonlinear(&rq.recursive_term, &rq.name) {
                // Standard SQL allows linear recursion only; engines that
                // accept more read the last iteration's new rows at each
                // reference, which is no fixed point. Mutually recursive
                // views compute the least fixed point of any monotone query.
                return Err(unsupported(format!(
                    "WITH RECURSIVE whose recursive term joins '{}' with itself \
                     (standard SQL allows linear recursion; DECLARE RECURSIVE VIEW allows more)",
                    rq.name
                )));
            }
            let body = self.lower(&rq.recursive_term)?;
            let body = self.conform(body, &schema)?;
            let stat = self.import_node(stat)?;
            let mut next = self.plus(&[stat, body], Arc::clone(&schema))?;
            if rq.is_distinct {
                next = self.distinct(next)?;
            }
            Ok(next)
        })();
        match outcome {
            Ok(next) => Ok(self.end_recursion(vec![next])?[0]),
            Err(e) => {
                self.scope = None;
                Err(e)
            }
        }
    }

    /// Lowers a group of mutually recursive views, each `(name, schema,
    /// plan)`, as one fixed point; every view is a set (DISTINCT), as in
    /// Feldera. Returns the node carrying each view's changes.
    pub fn lower_recursive_views(
        &mut self,
        views: &[(String, SchemaRef, &LogicalPlan)],
    ) -> SqlResult<Vec<NodeId>> {
        let relations: Vec<(String, SchemaRef)> = views
            .iter()
            .map(|(n, s, _)| (n.clone(), Arc::clone(s)))
            .collect();
        self.begin_recursion(&relations)?;
        let outcome = views
            .iter()
            .map(|(name, schema, plan)| {
                let node = self.lower(plan).map_err(|mut e| {
                    e.message = format!("recursive view '{name}': {}", e.message);
                    e
                })?;
                let node = self.conform(node, schema)?;
                self.distinct(node)
            })
            .collect::<SqlResult<Vec<_>>>();
        match outcome {
            Ok(next) => self.end_recursion(next),
            Err(e) => {
                self.scope = None;
                Err(e)
            }
        }
    }

    /// An outer node imported into the current scope.
    fn import_node(&mut self, outer: NodeId) -> SqlResult<NodeId> {
        let scope = self.scope.as_mut().expect("inside a recursion");
        if let Some(&node) = scope.imported.get(&outer) {
            return Ok(node);
        }
        let (node, handle) = scope
            .inner
            .add_input(Arc::clone(self.circuit.schema(outer)))?;
        scope.imports.push((outer, handle));
        scope.imported.insert(outer, node);
        Ok(node)
    }
}

/// Whether a plan scans `name`.
fn reads(plan: &LogicalPlan, name: &str) -> bool {
    plan.exists(|p| Ok(matches!(p, LogicalPlan::TableScan(s) if s.table_name.table() == name)))
        .unwrap_or(true)
}

/// Whether a plan joins `name` with itself (recursion that is not linear).
fn nonlinear(plan: &LogicalPlan, name: &str) -> bool {
    plan.exists(|p| {
        Ok(matches!(p, LogicalPlan::Join(j) if reads(&j.left, name) && reads(&j.right, name)))
    })
    .unwrap_or(true)
}
