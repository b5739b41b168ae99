//! A running program: the circuit built from a [`Program`], the input
//! handles of its tables and the outputs of its views.
//!
//! Changes pushed into tables wait until [`Pipeline::step`]; a step consumes
//! everything buffered for all tables and produces every view's change for
//! exactly that input. The integrated contents of materialized views and
//! tables are kept, so that their current rows can be read at any time;
//! [`ViewsKept::All`] keeps every view's (for `eddy run` and the tests).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt32Array};
use datafusion::arrow::compute::{lexsort_to_indices, take_record_batch, SortColumn};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use eddy_dbsp::operator::{AppendOnly, Clock, EmitFinal, Integrate, LateColumn, Lateness, Upsert};
use eddy_dbsp::{Circuit, InputHandle, NodeId, OperatorState, Storage, ZSet};

use crate::catalog::ViewDef;
use crate::error::{SqlError, SqlResult};
use crate::lower::{inserts_only_plan, lateness_bound, nullable_schema, Lowerer, Waterlines};
use crate::program::Program;

mod bootstrap;
mod checkpoint;
mod unread;

pub use checkpoint::PendingCheckpoint;

pub use unread::UnreadColumns;

/// A view's ORDER BY without LIMIT: it orders the rows when they are read.
struct Presentation {
    /// The rows before the final projection (they may carry sort columns).
    core: NodeId,
    core_contents: Integrate,
    order: Vec<PhysicalSortExpr>,
    /// The final projection from core rows to view rows, if any.
    project: Option<Vec<Arc<dyn PhysicalExpr>>>,
}

struct ViewOutput {
    node: NodeId,
    /// The view's schema (its columns' names as declared).
    schema: SchemaRef,
    /// The integrated contents, when the view's rows are kept.
    contents: Option<Integrate>,
    presentation: Option<Presentation>,
}

/// A keyed table's rows, read when called (see [`Pipeline::keyed_rows`]):
/// they go to the sink in batches of at most
/// [`eddy_dbsp::operator::CONTENTS_CHUNK`] rows, and the read stops early
/// when the sink returns `false`. They may be read more than once (a
/// query that scans the table twice), from any thread.
pub type KeyedRows =
    Arc<dyn Fn(&mut dyn FnMut(RecordBatch) -> bool) -> SqlResult<()> + Send + Sync>;

/// A program compiled to a circuit, ready to take changes.
pub struct Pipeline {
    program: Program,
    circuit: Circuit,
    inputs: HashMap<String, InputHandle>,
    views: HashMap<String, ViewOutput>,
    /// Integrated contents of the tables declared `materialized`.
    tables: HashMap<String, (NodeId, Integrate)>,
    /// The upserts of the other tables with a primary key, whose state is
    /// the table's rows, for ad-hoc queries and for computing new views
    /// from after a program change (see [`crate::TableDef::keeps_rows`]).
    keyed: HashMap<String, NodeId>,
    /// The keyed tables restored from a checkpoint of an earlier build,
    /// whose upserts may miss unread columns: their rows are not read.
    partial: HashSet<String>,
    /// Late changes dropped, per table or view with a `LATENESS`.
    late: Vec<(String, Arc<AtomicU64>)>,
    /// Deletions refused, per table declared `append_only`.
    refused: Vec<(String, Arc<AtomicU64>)>,
    /// `NOW()`: the time the current step started.
    clock: Clock,
    /// Whether a view bounds a time by `NOW()`, so time passing changes it.
    uses_clock: bool,
    /// Where the operators' large state batches go, if anywhere.
    storage: Option<Arc<Storage>>,
    /// The nodes each table and view added to the circuit (a recursive
    /// group's members share theirs), for taking over state after a
    /// program change (see [`bootstrap`]).
    owned: HashMap<String, std::ops::Range<NodeId>>,
    /// After [`Pipeline::take_state`], the nodes to compute afresh in the
    /// next step.
    fresh: Option<Vec<bool>>,
    /// The views that the last restore computed again, because this build
    /// plans them otherwise than the one that wrote the checkpoint.
    recomputed: Vec<String>,
    /// Those of them whose rows then differed from the checkpoint's.
    differing: Vec<String>,
    /// The tables' columns that nothing reads, dropped on arrival.
    unread: Arc<UnreadColumns>,
}

/// A view's presentation order: the sort keys (over `core`'s rows), the plan
/// whose rows are kept (`core`), and the projection on top of it, if any.
struct Split<'a> {
    order: &'a [datafusion::logical_expr::SortExpr],
    core: &'a LogicalPlan,
    projection: Option<&'a LogicalPlan>,
}

/// Finds a top-level `ORDER BY`: without LIMIT it only orders the rows when
/// they are read; with LIMIT the top-k is in the circuit and the order is
/// still applied when reading.
fn split_presentation(plan: &LogicalPlan) -> Option<Split<'_>> {
    fn sorted(plan: &LogicalPlan) -> Option<(&[datafusion::logical_expr::SortExpr], &LogicalPlan)> {
        match plan {
            LogicalPlan::Sort(s) if s.fetch.is_none() => Some((&s.expr, s.input.as_ref())),
            LogicalPlan::Sort(s) => Some((&s.expr, plan)),
            LogicalPlan::Limit(l) => match l.input.as_ref() {
                LogicalPlan::Sort(s) => Some((&s.expr, plan)),
                _ => None,
            },
            _ => None,
        }
    }
    if let Some((order, core)) = sorted(plan) {
        return Some(Split {
            order,
            core,
            projection: None,
        });
    }
    if let LogicalPlan::Projection(p) = plan {
        if let Some((order, core)) = sorted(&p.input) {
            return Some(Split {
                order,
                core,
                projection: Some(plan),
            });
        }
    }
    None
}

/// How a pipeline's circuit is built.
#[derive(Clone, Default)]
pub struct PipelineOptions {
    /// Where the large batches of its state go (none: all in memory).
    pub storage: Option<Arc<Storage>>,
    /// Workers: each operator partitioned by a key (joins, grouped
    /// aggregates, DISTINCT, windows by partition, upserts) is split into
    /// this many shards evaluated in parallel (0 and 1 mean one).
    pub workers: usize,
    /// Which views keep their integrated contents for reading.
    pub views: ViewsKept,
    /// What an expression that fails on a row does.
    pub row_errors: RowErrors,
}

/// What an expression that fails on a row (a division by zero, an integer
/// overflow, a bad cast) does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RowErrors {
    /// The step fails, as in Feldera (and PostgreSQL, whose query fails):
    /// the pipeline reports the error and the step's input is not applied.
    #[default]
    Fail,
    /// The expression is NULL on that row and the step goes on; the rows
    /// are counted (`eddy_dbsp::row_errors`). The SQLite corpus runs so.
    Null,
}

/// What every view of a pipeline is lowered with.
#[derive(Clone)]
struct Setting {
    clock: Clock,
    row_errors: RowErrors,
}

/// Which views keep their integrated contents (their current rows, for
/// [`Pipeline::view_rows`], ad-hoc queries and the first step after a
/// program change). Keeping them costs an integration of every change
/// and memory as large as the view: a view whose changes are only sent
/// somewhere needs neither.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ViewsKept {
    /// Every view's (the default).
    #[default]
    All,
    /// Only those declared `CREATE MATERIALIZED VIEW` (as Feldera does).
    Materialized,
}

impl Pipeline {
    /// Builds the circuit of a program, in memory, with one worker.
    pub fn new(program: Program) -> SqlResult<Self> {
        Self::with_options(program, PipelineOptions::default())
    }

    /// Builds the circuit of a program as `options` say.
    pub fn with_options(program: Program, options: PipelineOptions) -> SqlResult<Self> {
        let Some(storage) = options.storage.clone() else {
            return Self::build(program, &options);
        };
        let mut pipeline = eddy_dbsp::storage::with_storage(Some(Arc::clone(&storage)), || {
            Self::build(program, &options)
        })?;
        pipeline.storage = Some(storage);
        Ok(pipeline)
    }

    fn build(program: Program, options: &PipelineOptions) -> SqlResult<Self> {
        let (workers, kept) = (options.workers, options.views);
        let mut circuit = Circuit::new().with_workers(workers);
        let mut relations: HashMap<String, NodeId> = HashMap::new();
        let mut inputs = HashMap::new();
        let mut tables = HashMap::new();
        let mut keyed = HashMap::new();
        let mut late = Vec::new();
        let mut refused = Vec::new();
        // The relations whose changes are insertions only (see
        // `Lowerer::with_inserts_only`).
        let mut inserts_only: HashSet<NodeId> = HashSet::new();
        let clock = Clock::new();
        let setting = Setting {
            clock: clock.clone(),
            row_errors: options.row_errors,
        };
        let mut uses_clock = false;
        let mut bounds: HashMap<NodeId, Waterlines> = HashMap::new();
        let mut owned = HashMap::new();
        for table in &program.tables {
            let first = circuit.len();
            let schema = nullable_schema(&datafusion::common::DFSchema::try_from(
                table.schema.as_ref().clone(),
            )?);
            let (mut node, handle) = circuit.add_input(Arc::clone(&schema))?;
            if table.append_only {
                let counter = Arc::new(AtomicU64::new(0));
                refused.push((table.name.clone(), Arc::clone(&counter)));
                node = circuit.add(AppendOnly::new(counter), &[node], Arc::clone(&schema))?;
            }
            node = add_lateness(
                &mut circuit,
                node,
                &table.name,
                (&table.lateness, !table.primary_key.is_empty()),
                &mut late,
                &mut bounds,
            )?;
            if !table.primary_key.is_empty() {
                // An upsert retracts a key's previous row whatever its
                // time: no waterline passes it.
                let make = || Upsert::new(Arc::clone(&schema), table.primary_key.clone());
                node = circuit.add_keyed(make, &[node], Arc::clone(&schema))?;
            } else if table.append_only {
                inserts_only.insert(node);
            }
            if table.materialized {
                tables.insert(
                    table.name.clone(),
                    (node, Integrate::new(Arc::clone(&schema))?),
                );
            } else if !table.primary_key.is_empty() {
                keyed.insert(table.name.clone(), node);
            }
            relations.insert(table.name.clone(), node);
            inputs.insert(table.name.clone(), handle);
            owned.insert(table.name.clone(), first..circuit.len());
        }
        let mut views = HashMap::new();
        // Views in program order, except that a view reading a recursive
        // group waits until the group (lowered at its last member) exists.
        let mut waiting: Vec<&ViewDef> = Vec::new();
        for (i, view) in program.views.iter().enumerate() {
            let mut first = circuit.len();
            let lowered: Vec<(&ViewDef, NodeId, Option<PresentationParts>)> = match view.recursive {
                Some(group) => {
                    let last = program.views[i + 1..]
                        .iter()
                        .all(|v| v.recursive != Some(group));
                    if !last {
                        continue;
                    }
                    let members: Vec<&ViewDef> = program
                        .views
                        .iter()
                        .filter(|v| v.recursive == Some(group))
                        .collect();
                    let group: Vec<(String, SchemaRef, &LogicalPlan)> = members
                        .iter()
                        .map(|v| (v.name.clone(), Arc::clone(&v.schema), &v.plan))
                        .collect();
                    let mut lowerer = Lowerer::new(&mut circuit, &relations)
                        .with_clock(clock.clone())
                        .with_row_errors(setting.row_errors)
                        .with_waterlines(std::mem::take(&mut bounds))
                        .with_inserts_only(&inserts_only);
                    let nodes = lowerer.lower_recursive_views(&group);
                    bounds = lowerer.take_waterlines();
                    let nodes = nodes.map_err(|e| match members.first() {
                        Some(first) => placed(e, first),
                        None => e,
                    })?;
                    uses_clock |= lowerer.uses_clock();
                    members
                        .into_iter()
                        .zip(nodes)
                        .map(|(v, n)| (v, n, None))
                        .collect()
                }
                None => {
                    waiting.push(view);
                    Vec::new()
                }
            };
            // Lower what is ready: the group just lowered, then every view
            // waiting whose relations exist, one at a time.
            let mut ready = lowered;
            loop {
                let members: Vec<String> = ready.iter().map(|(v, _, _)| v.name.clone()).collect();
                for (view, node, parts) in ready {
                    let node = add_lateness(
                        &mut circuit,
                        node,
                        &view.name,
                        (&view.lateness, false),
                        &mut late,
                        &mut bounds,
                    )?;
                    let node = emit_final(&mut circuit, node, view, &bounds)?;
                    // Lateness drops changes and `emit_final` delays them:
                    // neither makes a deletion.
                    if view.recursive.is_none()
                        && inserts_only_plan(&view.plan, &relations, &inserts_only)
                    {
                        inserts_only.insert(node);
                    }
                    let keep = view.materialized || kept == ViewsKept::All;
                    let presentation = match parts {
                        Some((core, order, project)) if keep => Some(Presentation {
                            core,
                            core_contents: Integrate::new(Arc::clone(circuit.schema(core)))?,
                            order,
                            project,
                        }),
                        _ => None,
                    };
                    let contents = match keep {
                        true => Some(Integrate::new(Arc::clone(&view.schema))?),
                        false => None,
                    };
                    relations.insert(view.name.clone(), node);
                    views.insert(
                        view.name.clone(),
                        ViewOutput {
                            node,
                            schema: Arc::clone(&view.schema),
                            contents,
                            presentation,
                        },
                    );
                }
                for name in members {
                    owned.insert(name, first..circuit.len());
                }
                first = circuit.len();
                let Some(p) = waiting.iter().position(|v| reads_all(v, &relations)) else {
                    break;
                };
                let view = waiting.remove(p);
                let (node, parts) = lower_view(
                    &mut circuit,
                    &relations,
                    &setting,
                    view,
                    &mut uses_clock,
                    &mut bounds,
                    &inserts_only,
                )
                .map_err(|e| placed(e, view))?;
                ready = vec![(view, node, parts)];
            }
        }
        if let Some(view) = waiting.first() {
            return Err(SqlError::new(format!(
                "view '{}' reads a relation that is never defined",
                view.name
            )));
        }
        let schemas = inputs
            .iter()
            .map(|(name, h): (&String, &InputHandle)| (name.clone(), Arc::clone(h.schema())))
            .collect();
        let unread = Arc::new(UnreadColumns::of(&program, &schemas));
        Ok(Self {
            program,
            circuit,
            inputs,
            views,
            tables,
            keyed,
            partial: HashSet::new(),
            late,
            refused,
            clock,
            uses_clock,
            storage: None,
            owned,
            fresh: None,
            recomputed: Vec::new(),
            differing: Vec::new(),
            unread,
        })
    }

    /// Builds the circuit of a program whose state (every operator's
    /// traces and the contents kept for reading) writes its large batches
    /// to `storage` rather than keeping them in memory.
    pub fn with_storage(program: Program, storage: Arc<Storage>) -> SqlResult<Self> {
        Self::with_options(
            program,
            PipelineOptions {
                storage: Some(storage),
                workers: 1,
                views: ViewsKept::All,
                ..PipelineOptions::default()
            },
        )
    }

    /// The storage of the pipeline's state, if it has one.
    pub fn storage(&self) -> Option<&Arc<Storage>> {
        self.storage.as_ref()
    }

    /// The state entries the circuit's operators keep (rows, keys,
    /// groups), not counting the views' integrated contents.
    pub fn state_entries(&self) -> usize {
        self.circuit.state_entries()
    }

    /// The state of every operator that keeps some, then the contents kept
    /// for reading: each view's (`view contents`, with its ORDER BY core)
    /// and each materialized table's (`table contents`).
    pub fn operator_states(&self) -> Vec<OperatorState> {
        let mut states = self.circuit.operator_states();
        let mut add = |node: NodeId, operator: String, integrate: &Integrate| {
            let (entries, bytes, storage_bytes) = integrate.footprint();
            if entries > 0 {
                states.push(OperatorState {
                    node,
                    operator,
                    entries,
                    bytes,
                    storage_bytes,
                    shards: 1,
                });
            }
        };
        let mut views: Vec<(&String, &ViewOutput)> = self.views.iter().collect();
        views.sort_by_key(|(_, v)| v.node);
        for (name, v) in views {
            if let Some(contents) = &v.contents {
                add(v.node, format!("view contents: {name}"), contents);
            }
            if let Some(p) = &v.presentation {
                add(
                    p.core,
                    format!("view contents: {name} (ordered)"),
                    &p.core_contents,
                );
            }
        }
        let mut tables: Vec<(&String, &(NodeId, Integrate))> = self.tables.iter().collect();
        tables.sort_by_key(|(_, t)| t.0);
        for (name, (node, contents)) in tables {
            add(*node, format!("table contents: {name}"), contents);
        }
        states
    }

    /// Every node of the circuit, with its costs so far and the table or
    /// view whose definition built it.
    pub fn dataflow(&self) -> Vec<(eddy_dbsp::NodeInfo, Option<String>)> {
        let mut owners: Vec<(&String, &std::ops::Range<NodeId>)> = self.owned.iter().collect();
        owners.sort_by_key(|(_, r)| r.start);
        self.circuit
            .nodes()
            .into_iter()
            .map(|n| {
                let owner = owners
                    .iter()
                    .find(|(_, r)| r.contains(&n.id))
                    .map(|(name, _)| (*name).clone());
                (n, owner)
            })
            .collect()
    }

    /// The program this pipeline runs.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// The circuit, for inspection.
    pub fn circuit(&self) -> &Circuit {
        &self.circuit
    }

    /// The input handle of a table. Changes pushed through it keep the
    /// columns nothing reads; [`Pipeline::push`] drops them.
    pub fn input(&self, table: &str) -> Option<&InputHandle> {
        self.inputs.get(table)
    }

    /// The tables' columns that nothing reads: [`Pipeline::push`] drops
    /// them, and so may whoever holds changes before pushing them.
    pub fn unread_columns(&self) -> &Arc<UnreadColumns> {
        &self.unread
    }

    /// Buffers a change of a table until the next step (without the
    /// columns nothing reads).
    pub fn push(&self, table: &str, change: ZSet) -> SqlResult<()> {
        let handle = self
            .inputs
            .get(table)
            .ok_or_else(|| SqlError::new(format!("table '{table}' not found")))?;
        // A VARIANT's bytes must be one's (see eddy_io::variant).
        for (c, f) in change
            .batch()
            .columns()
            .iter()
            .zip(change.batch().schema().fields())
        {
            if eddy_io::variant::holds_variant(f.data_type()) {
                eddy_io::variant::arrow::check(c.as_ref())
                    .map_err(|e| SqlError::new(format!("column '{}': {e}", f.name())))?;
            }
        }
        // MAPs enter in their canonical form (entries sorted by key).
        let (batch, weights) = change.into_parts();
        let change = ZSet::new(eddy_dbsp::maps::canonical_batch(batch)?, weights);
        handle.push(self.unread.drop_from(table, change)?)?;
        Ok(())
    }

    /// Runs one step: all buffered changes in, every view's change out.
    /// `NOW()` is the wall clock when the step starts (never going back).
    pub fn step(&mut self) -> SqlResult<()> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i64)
            .unwrap_or(0);
        self.step_at(nanos)
    }

    /// Runs one step with `NOW()` at `nanos` since the epoch (or at the
    /// last step's time, if that was later).
    pub fn step_at(&mut self, nanos: i64) -> SqlResult<()> {
        self.clock.advance(nanos);
        match self.fresh.take() {
            Some(fresh) => self.step_bootstrap(&fresh)?,
            None => self.circuit.step()?,
        }
        self.integrate_outputs()
    }

    /// Adds the last step's changes of tables and views to the contents
    /// kept for reading.
    fn integrate_outputs(&mut self) -> SqlResult<()> {
        for (node, contents) in self.tables.values_mut() {
            if let Some(change) = self.circuit.output(*node) {
                contents.add(change)?;
            }
        }
        for view in self.views.values_mut() {
            let Some(contents) = &mut view.contents else {
                continue;
            };
            if let Some(change) = self.circuit.output(view.node) {
                if !change.is_empty() {
                    contents.add(&change.clone().with_schema(&view.schema)?)?;
                }
            }
            if let Some(p) = &mut view.presentation {
                if let Some(change) = self.circuit.output(p.core) {
                    p.core_contents.add(change)?;
                }
            }
        }
        Ok(())
    }

    /// The change of a view in the last step.
    pub fn view_change(&self, view: &str) -> SqlResult<ZSet> {
        let v = self.view_output(view)?;
        let change = self
            .circuit
            .output(v.node)
            .cloned()
            .unwrap_or_else(|| ZSet::empty(&v.schema));
        Ok(change.with_schema(&v.schema)?)
    }

    /// Whether a view's current rows are kept (it is materialized, or the
    /// pipeline keeps every view's): `false` for a view not found.
    pub fn keeps_view(&self, view: &str) -> bool {
        self.views.get(view).is_some_and(|v| v.contents.is_some())
    }

    /// The current contents of a view, consolidated, in row order. An
    /// error for a view whose rows are not kept.
    pub fn view_contents(&self, view: &str) -> SqlResult<ZSet> {
        Ok(self.view_kept(view)?.contents()?)
    }

    /// The current rows of a view as a plain batch (each row repeated by its
    /// multiplicity), in the view's ORDER BY when it has one, else in row order.
    pub fn view_rows(&self, view: &str) -> SqlResult<RecordBatch> {
        let contents = self.view_kept(view)?;
        let v = self.view_output(view)?;
        let Some(p) = &v.presentation else {
            return Ok(contents.contents()?.expand()?);
        };
        let core = p.core_contents.contents()?.expand()?;
        let n = core.num_rows();
        let sorted = if n > 1 && !p.order.is_empty() {
            let columns = p
                .order
                .iter()
                .map(|s| {
                    Ok(SortColumn {
                        values: s.expr.evaluate(&core)?.into_array(n)?,
                        options: Some(s.options),
                    })
                })
                .collect::<SqlResult<Vec<_>>>()?;
            let idx: UInt32Array = lexsort_to_indices(&columns, None)?;
            take_record_batch(&core, &idx)?
        } else {
            core
        };
        match &p.project {
            None => Ok(ZSet::with_weight(sorted, 1)
                .with_schema(&v.schema)?
                .into_parts()
                .0),
            Some(exprs) => {
                let z = ZSet::with_weight(sorted, 1);
                let columns = eddy_dbsp::operator::map::evaluate(exprs, &z)?;
                Ok(eddy_dbsp::row::batch_with_rows(
                    &v.schema,
                    columns,
                    z.len(),
                )?)
            }
        }
    }

    /// The current rows of a table with a primary key that is not declared
    /// materialized, to read later (on another thread, while the pipeline
    /// steps on) from its upsert's state as it is now, and their schema;
    /// `None` for other tables. For one restored from a checkpoint whose
    /// upsert may miss columns, the read is an error that says so (see
    /// [`crate::TableDef::keeps_rows`]).
    pub fn keyed_rows(&self, table: &str) -> Option<(SchemaRef, KeyedRows)> {
        let node = *self.keyed.get(table)?;
        let schema = Arc::clone(self.circuit.schema(node));
        if self.partial.contains(table) {
            let message = format!(
                "table '{table}' was restored from a checkpoint of an earlier Eddy, whose state \
                 does not hold the table's whole rows: clear the pipeline's storage to read them"
            );
            return Some((
                schema,
                Arc::new(move |_| Err(SqlError::new(message.clone()))),
            ));
        }
        let read = self.circuit.contents(node)?;
        Some((
            schema,
            Arc::new(move |sink| {
                let mut failed = None;
                read(&mut |rows| {
                    // An upsert's rows have weight 1: no copy to repeat them.
                    let batch = match rows.weights().iter().all(|&w| w == 1) {
                        true => Ok(rows.batch().clone()),
                        false => rows.expand(),
                    };
                    match batch {
                        Ok(batch) => sink(batch),
                        Err(e) => {
                            failed = Some(e);
                            false
                        }
                    }
                })?;
                match failed {
                    Some(e) => Err(e.into()),
                    None => Ok(()),
                }
            }),
        ))
    }

    /// The current rows of a table declared `WITH ('materialized' = 'true')`
    /// (each row repeated by its multiplicity); `None` for other tables.
    pub fn table_rows(&self, table: &str) -> SqlResult<Option<RecordBatch>> {
        if !self.inputs.contains_key(table) {
            return Err(SqlError::new(format!("table '{table}' not found")));
        }
        match self.tables.get(table) {
            Some((_, contents)) => Ok(Some(contents.contents()?.expand()?)),
            None => Ok(None),
        }
    }

    /// Whether time passing changes some view (it bounds a time by
    /// `NOW()`): such a pipeline should step on a clock even without input.
    pub fn uses_clock(&self) -> bool {
        self.uses_clock
    }

    /// The changes dropped as late so far, per table or view that declares
    /// a `LATENESS`, in program order.
    pub fn late_records(&self) -> Vec<(String, Arc<AtomicU64>)> {
        self.late.clone()
    }

    /// The deletions refused so far, per table declared `append_only`, in
    /// program order.
    pub fn refused_deletions(&self) -> Vec<(String, Arc<AtomicU64>)> {
        self.refused.clone()
    }

    /// The names of the views, in program order.
    pub fn view_names(&self) -> Vec<String> {
        self.program.views.iter().map(|v| v.name.clone()).collect()
    }

    fn view_output(&self, view: &str) -> SqlResult<&ViewOutput> {
        self.views
            .get(view)
            .ok_or_else(|| SqlError::new(format!("view '{view}' not found")))
    }

    /// A view's kept contents; an error that says why when they are not.
    fn view_kept(&self, view: &str) -> SqlResult<&Integrate> {
        self.view_output(view)?.contents.as_ref().ok_or_else(|| {
            SqlError::new(format!(
                "view '{view}' is not materialized, so its rows are not kept: declare it CREATE MATERIALIZED VIEW to read them"
            ))
        })
    }
}

/// Drops the late changes of a relation whose columns declare a lateness.
/// What a view's ORDER BY keeps: the core node, the order, the projection.
type PresentationParts = (
    NodeId,
    Vec<PhysicalSortExpr>,
    Option<Vec<Arc<dyn PhysicalExpr>>>,
);

/// Whether every relation a view scans has been lowered.
fn reads_all(view: &ViewDef, relations: &HashMap<String, NodeId>) -> bool {
    crate::program::scanned(&view.plan)
        .iter()
        .all(|name| relations.contains_key(name))
}

/// Lowers one view that is not recursive; its ORDER BY without LIMIT
/// becomes presentation parts.
fn lower_view(
    circuit: &mut Circuit,
    relations: &HashMap<String, NodeId>,
    setting: &Setting,
    view: &ViewDef,
    uses_clock: &mut bool,
    bounds: &mut HashMap<NodeId, Waterlines>,
    inserts_only: &HashSet<NodeId>,
) -> SqlResult<(NodeId, Option<PresentationParts>)> {
    let mut lowerer = Lowerer::new(circuit, relations)
        .with_clock(setting.clock.clone())
        .with_row_errors(setting.row_errors)
        .with_waterlines(std::mem::take(bounds))
        .with_inserts_only(inserts_only);
    let lowered = lower_view_with(&mut lowerer, view);
    *bounds = lowerer.take_waterlines();
    *uses_clock |= lowerer.uses_clock();
    lowered
}

fn lower_view_with(
    lowerer: &mut Lowerer<'_>,
    view: &ViewDef,
) -> SqlResult<(NodeId, Option<PresentationParts>)> {
    let lowered = match split_presentation(&view.plan) {
        None => (lowerer.lower(&view.plan)?, None),
        Some(Split {
            order,
            core: core_plan,
            projection,
        }) => {
            let core = lowerer.lower(core_plan)?;
            let order = lowerer.physical_sort(order, core_plan.schema())?;
            let (node, project) = match projection {
                Some(LogicalPlan::Projection(p)) => {
                    let exprs: Vec<Arc<dyn PhysicalExpr>> = p
                        .expr
                        .iter()
                        .map(|e| lowerer.physical(e, core_plan.schema()))
                        .collect::<SqlResult<_>>()?;
                    let schema = nullable_schema(p.schema.as_ref());
                    let node = lowerer.add_map(core, exprs.clone(), schema)?;
                    (node, Some(exprs))
                }
                _ => (core, None),
            };
            (node, Some((core, order, project)))
        }
    };
    Ok(lowered)
}

fn add_lateness(
    circuit: &mut Circuit,
    node: NodeId,
    relation: &str,
    (lateness, keyed): (&[crate::catalog::Lateness], bool),
    late: &mut Vec<(String, Arc<AtomicU64>)>,
    bounds: &mut HashMap<NodeId, Waterlines>,
) -> SqlResult<NodeId> {
    if lateness.is_empty() {
        return Ok(node);
    }
    let schema = Arc::clone(circuit.schema(node));
    let columns = lateness
        .iter()
        .map(|l| {
            Ok(LateColumn {
                column: l.column,
                bound: lateness_bound(&schema, l)?,
            })
        })
        .collect::<SqlResult<Vec<_>>>()?;
    let counter = Arc::new(AtomicU64::new(0));
    late.push((relation.to_string(), Arc::clone(&counter)));
    // Before a primary key's upsert only insertions can be late: a
    // deletion names a key (its other columns may be placeholders).
    let op = if keyed {
        Lateness::for_keyed_table(columns, counter)
    } else {
        Lateness::new(columns, counter)
    };
    // The lateness's own bounds, over the input's (a filter keeps them).
    let mut waterlines = bounds
        .get(&node)
        .cloned()
        .unwrap_or_else(|| vec![None; schema.fields().len()]);
    for (k, l) in lateness.iter().enumerate() {
        waterlines[l.column] = Some(op.waterline(k));
    }
    let late_node = circuit.add(op, &[node], schema)?;
    bounds.insert(late_node, waterlines);
    Ok(late_node)
}

/// `WITH ('emit_final' = 'column')`: the view emits a row only once its
/// column is below the column's waterline, when it can no longer change.
fn emit_final(
    circuit: &mut Circuit,
    node: NodeId,
    view: &ViewDef,
    bounds: &HashMap<NodeId, Waterlines>,
) -> SqlResult<NodeId> {
    let Some((_, column)) = view
        .options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("emit_final"))
    else {
        return Ok(node);
    };
    let schema = Arc::clone(circuit.schema(node));
    let index = schema
        .fields()
        .iter()
        .position(|f| f.name().eq_ignore_ascii_case(column))
        .ok_or_else(|| {
            SqlError::new(format!(
                "emit_final names '{column}', which is no column of view '{}'",
                view.name
            ))
        })?;
    let waterline = bounds
        .get(&node)
        .and_then(|w| w.get(index).cloned().flatten())
        .ok_or_else(|| {
            SqlError::new(format!(
                "emit_final: column '{column}' of view '{}' has no waterline (it must be a \
                 column with LATENESS, or a monotone function of one, such as a window \
                 start, carried through projections, filters, GROUP BY and joins on it)",
                view.name
            ))
        })?;
    let op = EmitFinal::new(&schema, index, waterline)?;
    Ok(circuit.add(op, &[node], schema)?)
}

/// An error found while lowering `view`, placed at its `CREATE VIEW` when
/// it has no place of its own.
fn placed(e: SqlError, view: &ViewDef) -> SqlError {
    match view.at {
        Some(at) => e.or_at(at),
        None => e,
    }
}
