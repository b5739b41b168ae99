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
//! | RecursiveQuery (`WITH RECURSIVE`) | fixed point over a nested circuit (see `lower/recursive.rs`) |
//!
//! Expressions become DataFusion physical expressions, evaluated over whole
//! change batches. Waterlines (see `lower/waterlines.rs`) ride along with
//! the nodes and let aggregates, joins and distincts forget old state.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast, SortOptions};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::logical_plan::{FetchType, SkipType};
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::Operator;
use datafusion::logical_expr::{Expr, LogicalPlan, SortExpr};
use datafusion::physical_expr::aggregate::LoweredAggregateBuilder;
use datafusion::physical_expr::expressions::{binary, Column, Literal};
use datafusion::physical_expr::{create_physical_expr, PhysicalExpr, PhysicalSortExpr};
use eddy_dbsp::operator::aggregate::AggregateCall;
use eddy_dbsp::operator::{self as op};
use eddy_dbsp::{Circuit, NodeId, ZSet};

use crate::error::{SqlError, SqlResult};
use crate::pipeline::RowErrors;

mod argmax;
mod asof;
mod checked;
mod grouping_sets;
mod inserts;
mod join;
mod recursive;
mod temporal;
mod waterlines;
mod window;

pub use inserts::inserts_only_plan;
pub use waterlines::Waterlines;

use temporal::has_now;

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
    /// The nested circuit of the recursion being lowered, if any.
    scope: Option<recursive::Scope>,
    /// Waterlines of the outer circuit's nodes that have some.
    bounds: HashMap<NodeId, Waterlines>,
    /// The node of each subplan lowered so far, by its text (see
    /// [`shared_key`]): a subplan that occurs twice (a CTE read twice) is
    /// computed once.
    lowered: HashMap<String, NodeId>,
    /// The relations' nodes whose changes are insertions only, if known.
    inserts_only: Option<&'a HashSet<NodeId>>,
    /// What an expression that fails on a row does.
    row_errors: RowErrors,
}

/// The text that identifies a deterministic subplan: its plan and schemas
/// printed, with the numbers DataFusion gives its common subexpressions
/// (`__common_expr_3`) left out, since two copies of one CTE get
/// different ones. `None` for a plan with a volatile expression (two
/// `random()` are two draws) and for a bare scan (nothing to share).
fn shared_key(plan: &LogicalPlan) -> Option<String> {
    if matches!(plan, LogicalPlan::TableScan(s) if s.filters.is_empty()) {
        return None;
    }
    let mut volatile = false;
    let _ = plan.apply_with_subqueries(|node| {
        volatile |= node.expressions().iter().any(Expr::is_volatile);
        Ok(if volatile {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Continue
        })
    });
    if volatile {
        return None;
    }
    let text = plan.display_indent_schema().to_string();
    let mut key = String::with_capacity(text.len());
    let mut rest = text.as_str();
    const MARK: &str = "__common_expr_";
    while let Some(at) = rest.find(MARK) {
        key.push_str(&rest[..at + MARK.len()]);
        rest = rest[at + MARK.len()..].trim_start_matches(|c: char| c.is_ascii_digit());
    }
    key.push_str(rest);
    Some(key)
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
            scope: None,
            bounds: HashMap::new(),
            lowered: HashMap::new(),
            inserts_only: None,
            row_errors: RowErrors::default(),
        }
    }

    /// Builds expressions whose failure on a row does what `row_errors`
    /// says.
    pub fn with_row_errors(mut self, row_errors: RowErrors) -> Self {
        self.row_errors = row_errors;
        self
    }

    /// `expr` with checked arithmetic and the pipeline's [`RowErrors`].
    fn prepared(
        &self,
        expr: Arc<dyn PhysicalExpr>,
        schema: &Schema,
    ) -> SqlResult<Arc<dyn PhysicalExpr>> {
        Ok(checked::prepare(expr, schema, self.row_errors)?)
    }

    /// Knows which relations' nodes change only by insertions (tables
    /// declared `append_only`, views over them; see [`inserts_only_plan`]).
    pub fn with_inserts_only(mut self, nodes: &'a HashSet<NodeId>) -> Self {
        self.inserts_only = Some(nodes);
        self
    }

    /// Whether every change of `plan` is an insertion (never inside a
    /// recursion, whose iterations retract).
    fn inserts_only(&self, plan: &LogicalPlan) -> bool {
        self.scope.is_none()
            && (self.inserts_only)
                .is_some_and(|nodes| inserts_only_plan(plan, self.relations, nodes))
    }

    /// Whether `plan`, ranked by `order` within `partition`, deletes a row
    /// only with a better ranked insertion (see [`inserts::rising_plan`]).
    fn rising(&self, plan: &LogicalPlan, partition: &[Expr], order: &[SortExpr]) -> bool {
        self.scope.is_none()
            && (self.inserts_only).is_some_and(|nodes| {
                inserts::rising_plan(plan, partition, order, self.relations, nodes)
            })
    }

    /// Starts from the waterlines of earlier nodes (tables, earlier views).
    pub fn with_waterlines(mut self, bounds: HashMap<NodeId, Waterlines>) -> Self {
        self.bounds = bounds;
        self
    }

    /// The waterlines of every node lowered so far, for later lowerers.
    pub fn take_waterlines(&mut self) -> HashMap<NodeId, Waterlines> {
        std::mem::take(&mut self.bounds)
    }

    /// The waterline of one column of a node, if it has one.
    pub fn waterline(&self, node: NodeId, column: usize) -> Option<op::Waterline> {
        self.waterlines(node).get(column).cloned().flatten()
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
        let physical = create_physical_expr(
            expr,
            schema,
            &self.props,
            &PhysicalPlanningContext::default(),
        )?;
        self.prepared(physical, schema.as_arrow())
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

    /// The circuit nodes go to: the recursion's nested one, if any.
    fn target(&mut self) -> &mut Circuit {
        match &mut self.scope {
            Some(scope) => &mut scope.inner,
            None => &mut *self.circuit,
        }
    }

    fn add(
        &mut self,
        op: impl op::Operator + 'static,
        inputs: &[NodeId],
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        Ok(self.target().add(op, inputs, schema)?)
    }

    /// Adds a keyed operator built by `make`: split over the circuit's
    /// workers when it is partitioned by a key (a nested circuit of a
    /// recursion has one worker).
    fn add_keyed<O: op::Operator + 'static>(
        &mut self,
        make: impl FnMut() -> SqlResult<O>,
        inputs: &[NodeId],
        schema: SchemaRef,
    ) -> SqlResult<NodeId> {
        self.target().add_keyed(make, inputs, schema)
    }

    fn schema(&self, node: NodeId) -> SchemaRef {
        match &self.scope {
            Some(scope) => Arc::clone(scope.inner.schema(node)),
            None => Arc::clone(self.circuit.schema(node)),
        }
    }

    /// Adds a map (projection) node, carrying waterlines through it.
    pub fn add_map(&mut self, input: NodeId, exprs: Exprs, schema: SchemaRef) -> SqlResult<NodeId> {
        self.map(input, exprs, schema)
    }

    fn map(&mut self, input: NodeId, exprs: Exprs, schema: SchemaRef) -> SqlResult<NodeId> {
        let bounds = self.derive_all(input, &exprs);
        let node = self.add(op::Map::new(exprs, Arc::clone(&schema)), &[input], schema)?;
        self.set_waterlines(node, bounds);
        Ok(node)
    }

    /// Columns `range` of a node, as expressions.
    fn columns(&self, node: NodeId, range: std::ops::Range<usize>) -> Exprs {
        let schema = self.schema(node);
        range
            .map(|i| Arc::new(Column::new(schema.field(i).name(), i)) as Arc<dyn PhysicalExpr>)
            .collect()
    }

    fn plus(&mut self, inputs: &[NodeId], schema: SchemaRef) -> SqlResult<NodeId> {
        let mut bounds: Option<Waterlines> = None;
        for &input in inputs {
            let next = self.waterlines(input);
            bounds = Some(match bounds {
                None => next,
                Some(b) => b
                    .into_iter()
                    .zip(next)
                    .map(|(a, b)| Some(waterlines::least(a?, b?)))
                    .collect(),
            });
        }
        let node = self.add(op::Plus::new(Arc::clone(&schema)), inputs, schema)?;
        self.set_waterlines(node, bounds.unwrap_or_default());
        Ok(node)
    }

    fn minus(&mut self, a: NodeId, b: NodeId) -> SqlResult<NodeId> {
        let schema = self.schema(b);
        let bounds = self.waterlines(b);
        let neg = self.add(op::Negate, &[b], schema)?;
        self.set_waterlines(neg, bounds);
        let schema = self.schema(a);
        self.plus(&[a, neg], schema)
    }

    fn distinct(&mut self, input: NodeId) -> SqlResult<NodeId> {
        let schema = self.schema(input);
        match &self.scope {
            Some(scope) => {
                let distinct = op::NestedDistinct::new(&schema, scope.ctx.clone())?;
                self.add(distinct, &[input], schema)
            }
            None => {
                let bounds = self.waterlines(input);
                let gc = waterlines::first_bound(&bounds);
                let make = || {
                    let distinct = op::Distinct::new(&schema)?;
                    Ok(waterlines::collecting(
                        distinct,
                        &gc,
                        op::Distinct::with_waterline,
                    ))
                };
                let node = self.add_keyed(make, &[input], Arc::clone(&schema))?;
                self.set_waterlines(node, bounds);
                Ok(node)
            }
        }
    }

    /// Lowers a plan and returns the node carrying its changes.
    pub fn lower(&mut self, plan: &LogicalPlan) -> SqlResult<NodeId> {
        let key = if self.scope.is_none() {
            shared_key(plan)
        } else {
            None
        };
        if let Some(&node) = key.as_ref().and_then(|k| self.lowered.get(k)) {
            return Ok(node);
        }
        let node = self.lower_new(plan)?;
        if let Some(key) = key {
            self.lowered.insert(key, node);
        }
        Ok(node)
    }

    fn lower_new(&mut self, plan: &LogicalPlan) -> SqlResult<NodeId> {
        if self.scope.is_some() {
            if !self.reads_recursion(plan) {
                return self.lower_imported(plan);
            }
            self.check_monotone(plan)?;
        }
        let schema = nullable_schema(plan.schema());
        match plan {
            LogicalPlan::TableScan(scan) => {
                let name = scan.table_name.table();
                let mut node = match self.recursive_node(name) {
                    Some(node) => node,
                    None => *self.relations.get(name).ok_or_else(|| {
                        SqlError::new(format!("table or view '{name}' not found"))
                    })?,
                };
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
                let top_k = match self.scope {
                    Some(_) => None,
                    None => self.rank_top_k(f)?,
                };
                let input = match top_k {
                    Some(top) => top,
                    None => self.lower(&f.input)?,
                };
                self.filter(input, &f.predicate, f.input.schema())
            }
            LogicalPlan::SubqueryAlias(a) => self.lower(&a.input),
            LogicalPlan::Join(j) => match argmax::rewrite(j)? {
                Some(top) => self.lower(&top),
                None => self.lower_join(j, schema),
            },
            LogicalPlan::Union(u) => {
                let inputs: Vec<NodeId> = u
                    .inputs
                    .iter()
                    .map(|i| self.lower(i))
                    .collect::<SqlResult<_>>()?;
                self.plus(&inputs, schema)
            }
            LogicalPlan::Aggregate(a) if self.scope.is_some() && a.aggr_expr.is_empty() => {
                // A grouping without aggregates is a DISTINCT of its keys.
                let input = self.lower(&a.input)?;
                let keys = self.physical_all(&a.group_expr, a.input.schema())?;
                let keys = self.map(input, keys, schema)?;
                self.distinct(keys)
            }
            LogicalPlan::Aggregate(a) => {
                let input = self.lower(&a.input)?;
                let in_df = a.input.schema();
                if let Some(union) = grouping_sets::expand(a)? {
                    return self.lower(&union);
                }
                if a.group_expr
                    .iter()
                    .any(|e| matches!(e, Expr::GroupingSet(_)))
                {
                    return Err(unsupported("GROUPING SETS mixed with other GROUP BY items"));
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
                        let schema = in_df.as_arrow();
                        let args = (lowered.aggregate.expressions().into_iter())
                            .map(|e| self.prepared(e, schema))
                            .collect::<SqlResult<Vec<_>>>()?;
                        let orders = (lowered.order_bys.iter())
                            .map(|o| Arc::clone(&o.expr))
                            .collect();
                        let function = match lowered.aggregate.with_new_expressions(args, orders) {
                            Some(f) => Arc::new(f),
                            None => lowered.aggregate,
                        };
                        let filter = match lowered.filter {
                            Some(f) => Some(self.prepared(f, schema)?),
                            None => None,
                        };
                        Ok(AggregateCall {
                            function,
                            filter,
                            order_by: lowered.order_bys,
                        })
                    })
                    .collect::<SqlResult<Vec<_>>>()?;
                let in_schema = self.schema(input);
                let keys = self.derive_all(input, &group_exprs);
                let gc = waterlines::first_bound(&keys);
                let inserts_only = self.inserts_only(&a.input);
                let make = || {
                    let mut agg = op::Aggregate::new(
                        Arc::clone(&in_schema),
                        group_exprs.clone(),
                        calls.clone(),
                        Arc::clone(&schema),
                    )?;
                    if inserts_only {
                        agg = agg.inserts_only();
                    }
                    Ok(waterlines::collecting(
                        agg,
                        &gc,
                        op::Aggregate::with_waterline,
                    ))
                };
                let node = self.add_keyed(make, &[input], Arc::clone(&schema))?;
                let mut bounds = keys;
                bounds.resize(schema.fields().len(), None);
                self.set_waterlines(node, bounds);
                Ok(node)
            }
            LogicalPlan::Unnest(u) => {
                let input = self.lower(&u.input)?;
                let columns = unnest_columns(u)?;
                self.add(
                    op::Unnest::new(columns, Arc::clone(&schema)),
                    &[input],
                    schema,
                )
            }
            LogicalPlan::Window(w) => self.lower_window(w, schema),
            LogicalPlan::RecursiveQuery(rq) => self.lower_recursive_query(rq, schema),
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
        let batch = eddy_dbsp::row::batch_with_rows(schema, arrays, rows.len())?;
        Ok(eddy_dbsp::maps::canonical_batch(batch)?)
    }
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

/// Where each output column of an unnest comes from: an element of an
/// array column, a field of a ROW column, or an input column repeated.
fn unnest_columns(u: &datafusion::logical_expr::Unnest) -> SqlResult<Vec<op::UnnestColumn>> {
    let mut fields_taken = HashMap::new();
    u.dependency_indices
        .iter()
        .map(|&i| {
            if let Some((_, list)) = u.list_type_columns.iter().find(|(c, _)| *c == i) {
                if list.depth != 1 {
                    return Err(unsupported("UNNEST of an array's nested arrays at once"));
                }
                Ok(op::UnnestColumn::Element(i))
            } else if u.struct_type_columns.contains(&i) {
                let field = fields_taken.entry(i).or_insert(0usize);
                *field += 1;
                Ok(op::UnnestColumn::Field {
                    column: i,
                    field: *field - 1,
                })
            } else {
                Ok(op::UnnestColumn::Repeat(i))
            }
        })
        .collect()
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
