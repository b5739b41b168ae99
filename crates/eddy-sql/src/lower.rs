//! Lowering: DataFusion logical plans onto `eddy-dbsp` circuits.
//!
//! Each logical node becomes one or more incremental operators:
//!
//! | logical node | circuit |
//! |---|---|
//! | TableScan | the table's input (or an earlier view's output), then map/filter for pushed-down projection and filters |
//! | Projection | map |
//! | Filter | filter |
//! | Join (inner) | join on the equi keys, then filter for the rest of the condition |
//! | Join (left/right/full) | inner join plus the unmatched rows padded with NULLs: `L − semi(L)` |
//! | Join with the ASOF marker (inner or left) | ASOF join |
//! | Join (semi/anti/mark) | `semi(L) = L ⋈ distinct(matched L rows)`, `anti(L) = L − semi(L)` |
//! | Aggregate | aggregate (DISTINCT is an aggregate without aggregate calls) |
//! | Union | plus |
//! | Window | window, one per `PARTITION BY`, then map to reorder columns |
//! | Filter with `NOW()` bounds on a time | filter for the rest, then temporal filter |
//! | Filter `rn <= k` on Window (ROW_NUMBER, RANK, DENSE_RANK) | per-partition top-k, then the filter |
//! | Sort with fetch, Limit | top-k |
//! | Values, EmptyRelation | constant |
//!
//! Expressions become DataFusion physical expressions, evaluated over whole
//! change batches.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast, SortOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, JoinType, NullEquality, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::logical_plan::{FetchType, SkipType};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::Operator;
use datafusion::logical_expr::{Expr, LogicalPlan, SortExpr};
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
use datafusion::physical_expr::expressions::{binary, is_null, Column, Literal};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_planner::create_window_expr;
use eddy_dbsp::operator::aggregate::AggregateCall;
use eddy_dbsp::operator::join::JoinSide;
use eddy_dbsp::operator::{self as op};
use eddy_dbsp::{Circuit, NodeId, ZSet};

use crate::error::{SqlError, SqlResult};

/// Physical expressions bound to an input schema.
type Exprs = Vec<Arc<dyn PhysicalExpr>>;

/// The arrow schema of a logical schema, every column nullable.
pub fn nullable_schema(schema: &DFSchema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), f.data_type().clone(), true))
        .collect();
    Arc::new(Schema::new(fields))
}

/// Lowers logical plans into one circuit.
pub struct Lowerer<'a> {
    circuit: &'a mut Circuit,
    relations: &'a HashMap<String, NodeId>,
    props: ExecutionProps,
    clock: op::Clock,
    uses_clock: bool,
}

fn unsupported(what: impl std::fmt::Display) -> SqlError {
    SqlError::new(format!("not supported yet: {what}"))
}

impl<'a> Lowerer<'a> {
    /// A lowerer adding nodes to `circuit`; `relations` maps table and view
    /// names to the nodes that carry their changes.
    pub fn new(circuit: &'a mut Circuit, relations: &'a HashMap<String, NodeId>) -> Self {
        Self {
            circuit,
            relations,
            props: ExecutionProps::new(),
            clock: op::Clock::new(),
            uses_clock: false,
        }
    }

    /// Gives `NOW()` bounds this clock.
    pub fn with_clock(mut self, clock: op::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Whether a lowered plan reads the clock (a `NOW()` bound).
    pub fn uses_clock(&self) -> bool {
        self.uses_clock
    }

    /// A physical expression for `expr` over rows of `schema`.
    pub fn physical(&self, expr: &Expr, schema: &DFSchema) -> SqlResult<Arc<dyn PhysicalExpr>> {
        if has_now(expr) {
            return Err(unsupported(
                "NOW() outside a WHERE condition that bounds a time (ts >= NOW() - INTERVAL …)",
            ));
        }
        Ok(create_physical_expr(
            expr,
            schema,
            &self.props,
            &PhysicalPlanningContext::default(),
        )?)
    }

    fn physical_all(&self, exprs: &[Expr], schema: &DFSchema) -> SqlResult<Exprs> {
        exprs.iter().map(|e| self.physical(e, schema)).collect()
    }

    /// Physical sort expressions over rows of `schema`.
    pub fn physical_sort(
        &self,
        exprs: &[SortExpr],
        schema: &DFSchema,
    ) -> SqlResult<Vec<PhysicalSortExpr>> {
        exprs
            .iter()
            .map(|s| {
                Ok(PhysicalSortExpr {
                    expr: self.physical(&s.expr, schema)?,
                    options: SortOptions {
                        descending: !s.asc,
                        nulls_first: s.nulls_first,
                    },
                })
            })
            .collect()
    }

    fn add(
        &mut self,
        op: impl op::Operator + 'static,
        inputs: &[NodeId],
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        Ok(self.circuit.add(op, inputs, schema)?)
    }

    /// Adds an operator node to the circuit.
    pub fn add_node(
        &mut self,
        op: impl op::Operator + 'static,
        inputs: &[NodeId],
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        self.add(op, inputs, schema)
    }

    fn schema(&self, node: NodeId) -> SchemaRef {
        Arc::clone(self.circuit.schema(node))
    }

    fn map(&mut self, input: NodeId, exprs: Exprs, schema: SchemaRef) -> SqlResult<NodeId> {
        self.add(op::Map::new(exprs, Arc::clone(&schema)), &[input], schema)
    }

    /// Columns `range` of a node, as expressions.
    fn columns(&self, node: NodeId, range: std::ops::Range<usize>) -> Exprs {
        let schema = self.schema(node);
        range
            .map(|i| Arc::new(Column::new(schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
            .collect()
    }

    fn plus(&mut self, inputs: &[NodeId], schema: SchemaRef) -> SqlResult<NodeId> {
        self.add(op::Plus::new(Arc::clone(&schema)), inputs, schema)
    }

    fn minus(&mut self, a: NodeId, b: NodeId) -> SqlResult<NodeId> {
        let schema = self.schema(b);
        let neg = self.add(op::Negate, &[b], schema)?;
        let schema = self.schema(a);
        self.plus(&[a, neg], schema)
    }

    fn distinct(&mut self, input: NodeId) -> SqlResult<NodeId> {
        let schema = self.schema(input);
        self.add(op::Distinct::new(&schema)?, &[input], schema)
    }

    /// An inner join of two nodes on key expressions; output is left columns then right columns.
    fn join(
        &mut self,
        l: NodeId,
        r: NodeId,
        lkeys: Exprs,
        rkeys: Exprs,
        nulls_equal: bool,
    ) -> SqlResult<NodeId> {
        let (ls, rs) = (self.schema(l), self.schema(r));
        let (key_types, rkeys) = aligned_keys(&ls, &lkeys, &rs, &rkeys)?;
        let fields: Vec<Field> = ls
            .fields()
            .iter()
            .chain(rs.fields().iter())
            .map(|f| f.as_ref().clone())
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let join = op::Join::new(
            JoinSide::new(&ls, lkeys)?,
            JoinSide::new(&rs, rkeys)?,
            &key_types,
            nulls_equal,
            Arc::clone(&schema),
        )?;
        self.add(join, &[l, r], schema)
    }

    /// `semi(L)`: the rows of `l` whose `lkeys` occur in the set `set` (on `skeys`).
    fn semi(
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
    fn matched(
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
    fn pad(
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

    fn with_mark(&mut self, input: NodeId, mark: bool, schema: SchemaRef) -> SqlResult<NodeId> {
        let width = self.schema(input).fields().len();
        let mut exprs = self.columns(input, 0..width);
        exprs.push(Arc::new(Literal::new(ScalarValue::Boolean(Some(mark)))));
        self.map(input, exprs, schema)
    }

    fn lower_join(
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

    /// An ASOF join: a join whose condition holds the marker that
    /// [`crate::asof`] puts there.
    #[allow(clippy::too_many_arguments)]
    fn asof_join(
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
            return Err(unsupported(
                "a LEFT ASOF join whose ON holds more than equalities of keys",
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
        let time_type = l_time.data_type(&ls)?;
        let r_time = cast_expr(self.physical(rt, rsch)?, &rs, &time_type)?;
        let join = op::AsofJoin::new(
            ls,
            rs,
            op::AsofSide {
                keys: lkeys.clone(),
                time: l_time,
            },
            op::AsofSide {
                keys: rkeys,
                time: r_time,
            },
            &key_types,
            &time_type,
            matching,
            left_outer,
            Arc::clone(schema),
        )?;
        let node = self.add(join, &[l, r], Arc::clone(schema))?;
        match conjunction(rest) {
            None => Ok(Some(node)),
            Some(after) => {
                let both = lsch.join(rsch)?;
                let predicate = self.physical(&after, &both)?;
                Ok(Some(self.add(
                    op::Filter::new(predicate),
                    &[node],
                    Arc::clone(schema),
                )?))
            }
        }
    }

    /// `NOT IN` semantics on top of a plain anti join: when the subquery has
    /// a NULL key no row survives, and a row with a NULL key survives only
    /// when the subquery is empty.
    fn null_aware(
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
    fn inner_filtered(
        &mut self,
        l: NodeId,
        r: NodeId,
        lkeys: Exprs,
        rkeys: Exprs,
        nulls_equal: bool,
        j: &datafusion::logical_expr::Join,
    ) -> SqlResult<NodeId> {
        let joined = self.join(l, r, lkeys, rkeys, nulls_equal)?;
        match &j.filter {
            None => Ok(joined),
            Some(f) => {
                let both = j.left.schema().join(j.right.schema())?;
                let predicate = self.physical(f, &both)?;
                let schema = self.schema(joined);
                self.add(op::Filter::new(predicate), &[joined], schema)
            }
        }
    }

    /// Lowers a plan and returns the node carrying its changes.
    pub fn lower(&mut self, plan: &LogicalPlan) -> SqlResult<NodeId> {
        let schema = nullable_schema(plan.schema());
        match plan {
            LogicalPlan::TableScan(scan) => {
                let name = scan.table_name.table();
                let mut node = *self
                    .relations
                    .get(name)
                    .ok_or_else(|| SqlError::new(format!("table or view '{name}' not found")))?;
                let source_schema = DFSchema::try_from_qualified_schema(
                    scan.table_name.clone(),
                    &scan.source.schema(),
                )?;
                for f in &scan.filters {
                    node = self.filter(node, f, &source_schema)?;
                }
                if let Some(projection) = &scan.projection {
                    let src = self.schema(node);
                    let exprs: Exprs = projection
                        .iter()
                        .map(|&i| {
                            Arc::new(Column::new(src.field(i).name(), i)) as Arc<dyn PhysicalExpr>
                        })
                        .collect();
                    node = self.map(node, exprs, schema)?;
                }
                Ok(node)
            }
            LogicalPlan::Projection(p) => {
                let input = self.lower(&p.input)?;
                let exprs = self.physical_all(&p.expr, p.input.schema())?;
                self.map(input, exprs, schema)
            }
            LogicalPlan::Filter(f) => {
                let input = match self.rank_top_k(f)? {
                    Some(top) => top,
                    None => self.lower(&f.input)?,
                };
                self.filter(input, &f.predicate, f.input.schema())
            }
            LogicalPlan::SubqueryAlias(a) => self.lower(&a.input),
            LogicalPlan::Join(j) => self.lower_join(j, schema),
            LogicalPlan::Union(u) => {
                let inputs: Vec<NodeId> = u
                    .inputs
                    .iter()
                    .map(|i| self.lower(i))
                    .collect::<SqlResult<_>>()?;
                self.plus(&inputs, schema)
            }
            LogicalPlan::Aggregate(a) => {
                let input = self.lower(&a.input)?;
                let in_df = a.input.schema();
                if a.group_expr
                    .iter()
                    .any(|e| matches!(e, Expr::GroupingSet(_)))
                {
                    return Err(unsupported("GROUPING SETS, CUBE and ROLLUP"));
                }
                let group_exprs = self.physical_all(&a.group_expr, in_df)?;
                let calls = a
                    .aggr_expr
                    .iter()
                    .map(|e| {
                        let name = match e {
                            Expr::Alias(a) => a.name.clone(),
                            _ => e.schema_name().to_string(),
                        };
                        let planning = PhysicalPlanningContext::default();
                        let lowered = LoweredAggregateBuilder::new(
                            e,
                            in_df,
                            in_df.as_arrow(),
                            &self.props,
                            &planning,
                        )
                        .with_name(name)
                        .build()?;
                        Ok(AggregateCall {
                            function: lowered.aggregate,
                            filter: lowered.filter,
                            order_by: lowered.order_bys,
                        })
                    })
                    .collect::<SqlResult<Vec<_>>>()?;
                let in_schema = self.schema(input);
                let agg = op::Aggregate::new(in_schema, group_exprs, calls, Arc::clone(&schema))?;
                self.add(agg, &[input], schema)
            }
            LogicalPlan::Window(w) => self.lower_window(w, schema),
            LogicalPlan::Extension(e) if e.node.name() == crate::asof::FENCE => {
                self.lower(e.node.inputs()[0])
            }
            LogicalPlan::Distinct(datafusion::logical_expr::Distinct::All(input)) => {
                let input = self.lower(input)?;
                self.distinct(input)
            }
            LogicalPlan::Sort(s) => {
                let input = self.lower(&s.input)?;
                match s.fetch {
                    // Without a limit, order means nothing to a relation.
                    None => Ok(input),
                    Some(fetch) => {
                        let order = self.physical_sort(&s.expr, s.input.schema())?;
                        self.add(
                            op::TopK::new(Arc::clone(&schema), order, 0, Some(fetch))?,
                            &[input],
                            schema,
                        )
                    }
                }
            }
            LogicalPlan::Limit(limit) => {
                let skip = match limit.get_skip_type()? {
                    SkipType::Literal(n) => n,
                    SkipType::UnsupportedExpr => {
                        return Err(unsupported("OFFSET that is not a constant"))
                    }
                };
                let fetch = match limit.get_fetch_type()? {
                    FetchType::Literal(n) => n,
                    FetchType::UnsupportedExpr => {
                        return Err(unsupported("LIMIT that is not a constant"))
                    }
                };
                let (input, order) = match limit.input.as_ref() {
                    LogicalPlan::Sort(s) => (
                        self.lower(&s.input)?,
                        self.physical_sort(&s.expr, s.input.schema())?,
                    ),
                    other => {
                        let node = self.lower(other)?;
                        let width = self.schema(node).fields().len();
                        let order = self
                            .columns(node, 0..width)
                            .into_iter()
                            .map(|expr| PhysicalSortExpr {
                                expr,
                                options: SortOptions::default(),
                            })
                            .collect();
                        (node, order)
                    }
                };
                self.add(
                    op::TopK::new(Arc::clone(&schema), order, skip, fetch)?,
                    &[input],
                    schema,
                )
            }
            LogicalPlan::Values(v) => {
                let batch = self.values(&v.values, &schema)?;
                self.add(op::Constant::new(ZSet::with_weight(batch, 1)), &[], schema)
            }
            LogicalPlan::EmptyRelation(e) => {
                let rows = usize::from(e.produce_one_row);
                let columns = schema
                    .fields()
                    .iter()
                    .map(|f| new_null_array(f.data_type(), rows))
                    .collect();
                let batch = eddy_dbsp::row::batch_with_rows(&schema, columns, rows)?;
                self.add(op::Constant::new(ZSet::with_weight(batch, 1)), &[], schema)
            }
            other => Err(unsupported(format!("the plan node {}", other.display()))),
        }
    }

    /// A filter; its conditions that bound a time by `NOW()` become a
    /// temporal filter after the others.
    fn filter(&mut self, input: NodeId, predicate: &Expr, schema: &DFSchema) -> SqlResult<NodeId> {
        let (temporal, plain): (Vec<&Expr>, Vec<&Expr>) = split_conjunction(predicate)
            .into_iter()
            .partition(|c| has_now(c));
        let mut node = input;
        if let Some(plain) = conjunction(plain.into_iter().cloned()) {
            let predicate = self.physical(&plain, schema)?;
            let s = self.schema(node);
            node = self.add(op::Filter::new(predicate), &[node], s)?;
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

    /// Window functions: one window operator per distinct `PARTITION BY`
    /// (each appends its functions' columns), then a map that puts the
    /// columns in the plan's order.
    fn lower_window(
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
                    Ok(create_window_expr(
                        &w.window_expr[i],
                        in_df,
                        &self.props,
                        &PhysicalPlanningContext::default(),
                    )?)
                })
                .collect::<SqlResult<Vec<_>>>()?;
            for &i in &members {
                position[i] = fields.len();
                fields.push(schema.field(width + i).as_ref().clone());
            }
            let stage = Arc::new(Schema::new(fields.clone()));
            let input = self.schema(node);
            let window = op::Window::new(input, partition, functions, Arc::clone(&stage))?;
            node = self.add(window, &[node], stage)?;
        }
        if position.iter().enumerate().all(|(i, &p)| p == width + i) {
            return Ok(node);
        }
        let mut exprs = self.columns(node, 0..width);
        let all = self.columns(node, 0..width + position.len());
        exprs.extend(position.iter().map(|&p| Arc::clone(&all[p])));
        self.map(node, exprs, schema)
    }

    /// A filter that bounds a ranking window function (`rn <= k`, `rn < k`,
    /// `rn = k`) lowers the window onto a per-partition top-k, which walks
    /// only the first k rows of a touched partition. The filter itself
    /// still applies on top (its other conditions, and `rn = k`).
    fn rank_top_k(&mut self, f: &datafusion::logical_expr::Filter) -> SqlResult<Option<NodeId>> {
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
        let top = op::RankTopK::new(
            in_schema,
            partition,
            order,
            ranking,
            limit,
            Arc::clone(&schema),
        )?;
        let top = self.add(top, &[input], schema)?;
        match projection {
            None => Ok(Some(top)),
            Some(p) => {
                let exprs = self.physical_all(&p.expr, &w.schema)?;
                Ok(Some(self.map(top, exprs, nullable_schema(&p.schema))?))
            }
        }
    }

    /// Evaluates constant rows into a batch of `schema`.
    pub fn values(&self, rows: &[Vec<Expr>], schema: &SchemaRef) -> SqlResult<RecordBatch> {
        let empty = DFSchema::empty();
        let one = RecordBatch::try_new_with_options(
            Arc::new(Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let mut columns: Vec<Vec<ScalarValue>> =
            vec![Vec::with_capacity(rows.len()); schema.fields().len()];
        for row in rows {
            if row.len() != columns.len() {
                return Err(SqlError::new(format!(
                    "a row has {} values, expected {}",
                    row.len(),
                    columns.len()
                )));
            }
            for (j, e) in row.iter().enumerate() {
                let value = self.physical(e, &empty)?.evaluate(&one)?.into_array(1)?;
                columns[j].push(ScalarValue::try_from_array(&value, 0)?);
            }
        }
        let arrays = columns
            .into_iter()
            .zip(schema.fields())
            .map(|(vals, f)| {
                let array = if vals.is_empty() {
                    new_null_array(f.data_type(), 0)
                } else {
                    ScalarValue::iter_to_array(vals)?
                };
                Ok(if array.data_type() == f.data_type() {
                    array
                } else {
                    cast(&array, f.data_type())?
                })
            })
            .collect::<SqlResult<Vec<ArrayRef>>>()?;
        Ok(eddy_dbsp::row::batch_with_rows(schema, arrays, rows.len())?)
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

/// `column − amount` of a lateness, over rows of `schema`: the waterline a
/// row's value sets.
pub fn lateness_bound(
    schema: &SchemaRef,
    lateness: &crate::catalog::Lateness,
) -> SqlResult<Arc<dyn PhysicalExpr>> {
    let field = schema.field(lateness.column);
    let column = Arc::new(Column::new(field.name(), lateness.column));
    let amount = Arc::new(Literal::new(lateness.amount.clone()));
    let bound = binary(column, Operator::Minus, amount, schema)?;
    bound.data_type(schema)?;
    Ok(bound)
}

/// Whether `expr` is a call of Eddy's `NOW()`.
fn is_now(expr: &Expr) -> bool {
    matches!(expr, Expr::ScalarFunction(f) if f.func.name() == crate::functions::NOW)
}

/// Whether `expr` calls `NOW()` anywhere.
fn has_now(expr: &Expr) -> bool {
    expr.exists(|e| Ok(is_now(e))).unwrap_or(false)
}

/// `expr` without its aliases.
fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(a) => unalias(&a.expr),
        other => other,
    }
}

/// The schema of the columns that `keys` compute over rows of `input`.
fn key_schema(keys: &Exprs, input: &SchemaRef) -> SqlResult<SchemaRef> {
    let fields = keys
        .iter()
        .enumerate()
        .map(|(i, e)| Ok(Field::new(format!("k{i}"), e.data_type(input)?, true)))
        .collect::<SqlResult<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

/// The types of the left keys, and the right keys cast to them, so that
/// both sides encode a key the same way.
fn aligned_keys(
    ls: &SchemaRef,
    lkeys: &Exprs,
    rs: &SchemaRef,
    rkeys: &Exprs,
) -> SqlResult<(Vec<DataType>, Exprs)> {
    let key_types: Vec<DataType> = lkeys
        .iter()
        .map(|e| e.data_type(ls))
        .collect::<datafusion::error::Result<_>>()?;
    let rkeys = rkeys
        .iter()
        .zip(&key_types)
        .map(|(e, t)| cast_expr(Arc::clone(e), rs, t))
        .collect::<SqlResult<Exprs>>()?;
    Ok((key_types, rkeys))
}

/// `expr`, cast to `to` when its type over `schema` differs.
fn cast_expr(
    expr: Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    to: &DataType,
) -> SqlResult<Arc<dyn PhysicalExpr>> {
    if &expr.data_type(schema)? == to {
        return Ok(expr);
    }
    Ok(datafusion::physical_expr::expressions::cast(
        expr,
        schema,
        to.clone(),
    )?)
}
