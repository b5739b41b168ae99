//! Grouped aggregation (`GROUP BY` with any DataFusion aggregate function).
//!
//! Incremental rule (non-linear): the integrated input is kept in a trace
//! indexed by the group key, and the last output row of every group is
//! remembered. A change touches some groups; only those are recomputed, from
//! their rows in the trace, and the output change is `−old + new` for each
//! touched group whose result changed. Work is proportional to the sizes of
//! the touched groups, not to the input. An aggregate without `GROUP BY` has
//! exactly one group, which exists (with the aggregates' empty-input results,
//! such as `COUNT(*) = 0`) even when the input is empty.
//!
//! When every aggregate is `COUNT`, integer `SUM` or `AVG`, or a `MIN`,
//! `MAX` or `COUNT(DISTINCT …)` (of anything but floating point), with or
//! without `FILTER`, the operator keeps running sums and ordered values per
//! group instead of the group's rows ([`linear`](super::linear)), and a
//! change costs O(changed rows), times O(log n) for the ordered values.
//! That path remembers no outputs either: the step's rows are grouped
//! first, and a touched group's output before the step is computed from
//! its state before its rows are added.
//! Otherwise aggregates are evaluated with DataFusion accumulators (so every DataFusion
//! aggregate function, `DISTINCT` and `FILTER (WHERE …)` included, works);
//! order-sensitive aggregates see the group's rows sorted by their `ORDER BY`.
//! An argument, filter or ordering expression that fails on a row (a
//! division by zero) is NULL there, as in [`map`](super::map).
//!
//! With a waterline on a group column, groups below it are forgotten (see
//! [`waterline`](super::waterline)): a windowed aggregate over an unbounded
//! stream keeps only its open windows.
//!
//! The remembered outputs (of the general path) and the running sums are kept in
//! [`StateMap`]s, which move them to traces on disk with storage.

use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::array::{new_empty_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast, lexsort_to_indices, take_record_batch, SortColumn};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use super::linear::{
    add_values, arguments, linear_calls, restore_values, retain_values, save_values, value_column,
    values_size, GroupSums, LinearCall, Value,
};
use super::map::evaluate_one;
use super::state_map::StateMap;
use super::waterline::{Collector, Waterline};
use super::{encode_keys, key_rows, Groups, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{filter_rows, EncodedRows, RowCodec};
use crate::{Error, Result, Trace, ZSet};

/// One aggregate of an [`Aggregate`] operator.
#[derive(Clone)]
pub struct AggregateCall {
    /// The aggregate function with its arguments, bound to the input schema.
    pub function: Arc<AggregateFunctionExpr>,
    /// `FILTER (WHERE …)`, bound to the input schema.
    pub filter: Option<Arc<dyn PhysicalExpr>>,
    /// `ORDER BY` inside the aggregate call, bound to the input schema.
    pub order_by: Vec<PhysicalSortExpr>,
}

/// Incremental `GROUP BY`.
pub struct Aggregate {
    group_exprs: Vec<Arc<dyn PhysicalExpr>>,
    calls: Vec<AggregateCall>,
    input_schema: SchemaRef,
    schema: SchemaRef,
    key_codec: RowCodec,
    row_codec: RowCodec,
    out_codec: RowCodec,
    trace: Trace,
    outputs: StateMap<Vec<u8>>,
    /// When every call is linear: running sums per group instead of rows.
    linear: Option<Vec<LinearCall>>,
    sums: StateMap<GroupSums>,
    /// Whether a step has been evaluated (for an aggregate without
    /// `GROUP BY`: whether its single group has been emitted).
    started: bool,
    /// Forgets the groups whose key column is below a waterline.
    gc: Option<Collector>,
}

impl Aggregate {
    /// Groups rows of `input_schema` by `group_exprs` and computes `calls`
    /// per group; output rows (group columns, then one column per call) have `schema`.
    pub fn new(
        input_schema: SchemaRef,
        group_exprs: Vec<Arc<dyn PhysicalExpr>>,
        calls: Vec<AggregateCall>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let key_types: Vec<DataType> = group_exprs
            .iter()
            .map(|e| e.data_type(&input_schema))
            .collect::<datafusion::error::Result<_>>()?;
        let linear = linear_calls(&calls, &input_schema, false);
        Ok(Self {
            linear,
            sums: StateMap::new(),
            key_codec: RowCodec::new(&key_types)?,
            row_codec: RowCodec::for_schema(&input_schema)?,
            out_codec: RowCodec::for_schema(&schema)?,
            group_exprs,
            calls,
            input_schema,
            schema,
            trace: Trace::new(),
            outputs: StateMap::new(),
            started: false,
            gc: None,
        })
    }

    /// For an input whose changes are all insertions: `MIN` and `MAX` keep
    /// each group's best value only (see [`linear`](super::linear)), so
    /// that more aggregates take the linear path. A deletion is then an
    /// error.
    pub fn inserts_only(mut self) -> Self {
        if let Some(linear) = linear_calls(&self.calls, &self.input_schema, true) {
            self.linear = Some(linear);
        }
        self
    }

    /// Forgets the groups whose group column `column` is below `waterline`
    /// (no later change can reach them): their rows or sums and their
    /// remembered outputs.
    pub fn with_waterline(mut self, column: usize, waterline: Waterline) -> Self {
        self.gc = Some(Collector::new(column, waterline));
        self
    }

    fn collect(&mut self, updates: usize) -> Result<()> {
        let Some((gc, bound)) = Collector::due_in(&mut self.gc, updates) else {
            return Ok(());
        };
        // The linear path remembers no outputs: its groups are its sums'.
        let dead = match self.linear {
            Some(_) => gc.dead(&self.key_codec, &self.sums, &bound)?,
            None => gc.dead(&self.key_codec, &self.outputs, &bound)?,
        };
        if let Some(dead) = dead {
            self.outputs.retain(|k| !dead.contains(k));
            self.sums.retain(|k| !dead.contains(k));
            match &mut self.linear {
                Some(calls) => retain_values(calls, |k| !dead.contains(k)),
                None => {
                    self.trace.retain_keys(|k| !dead.contains(k));
                }
            }
        }
        gc.collected(self.outputs.len().max(self.sums.len()));
        Ok(())
    }

    fn is_global(&self) -> bool {
        self.group_exprs.is_empty()
    }

    fn compute(&self, call: &AggregateCall, batch: &RecordBatch) -> Result<ScalarValue> {
        let mut batch = batch.clone();
        if let Some(filter) = &call.filter {
            let mask = evaluate_one(filter, &batch)?;
            let mask = mask
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| Error::Circuit("aggregate FILTER is not boolean".into()))?;
            batch = filter_rows(&batch, mask)?;
        }
        if !call.order_by.is_empty() && batch.num_rows() > 1 {
            let columns = call
                .order_by
                .iter()
                .map(|s| {
                    Ok(SortColumn {
                        values: evaluate_one(&s.expr, &batch)?,
                        options: Some(s.options),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let idx = lexsort_to_indices(&columns, None)?;
            batch = take_record_batch(&batch, &idx)?;
        }
        let n = batch.num_rows();
        let args: Vec<ArrayRef> = call
            .function
            .expressions()
            .iter()
            .map(|e| evaluate_one(e, &batch))
            .collect::<Result<_>>()?;
        let mut acc = call.function.create_accumulator()?;
        if n > 0 {
            acc.update_batch(&args)?;
        }
        Ok(acc.evaluate()?)
    }

    /// Output rows (weight 1): the groups of `keys`, with `values[j]` the
    /// column of call `j`'s values.
    fn output_rows(&self, keys: &[&[u8]], values: Vec<ArrayRef>) -> Result<ZSet> {
        let mut columns = self.key_codec.decode(keys.iter().copied())?;
        if self.group_exprs.is_empty() {
            columns.clear();
        }
        for (j, array) in values.into_iter().enumerate() {
            let field = self.schema.field(self.group_exprs.len() + j);
            let array = if array.data_type() == field.data_type() {
                array
            } else {
                cast(&array, field.data_type())?
            };
            columns.push(array);
        }
        ZSet::from_columns(&self.schema, columns, vec![1; keys.len()])
    }

    /// A step of the running sums. The step's rows are grouped first, so
    /// that each touched group is looked up once: its output before the
    /// step is computed from its state before its rows are added (so no
    /// output is remembered), its output after from the state after, and a
    /// group whose values did not change emits nothing.
    fn eval_linear(&mut self, change: &ZSet) -> Result<ZSet> {
        let n = change.len();
        let global = self.is_global();
        let keys = encode_keys(&self.key_codec, &self.group_exprs, change)?;
        let groups = Groups::of(&keys, n, global);
        let calls = self.linear.as_mut().expect("the linear path");
        let args = arguments(calls, change.batch())?;
        let weights = change.weights();
        // MIN/MAX/COUNT(DISTINCT) values change after the sums: their
        // groups' values after the step are read in a second pass.
        let ordered = calls.iter().any(LinearCall::keeps_values);
        let empty = GroupSums::default();
        // Per group: whether it had an output before the step, and has one
        // after; the values of those outputs, a call's after another.
        let (mut had, mut has) = (Vec::with_capacity(groups.len()), Vec::new());
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for (g, &key) in groups.keys.iter().enumerate() {
            let sums = self
                .sums
                .get_or_insert_with(key, || GroupSums::for_calls(calls))?;
            // The one group of a global aggregate has an output once
            // started, rows or not; a group with sums has rows (it leaves
            // the map with its last), and one just made had no output.
            let had_output = if global { self.started } else { sums.rows != 0 };
            if had_output {
                sums.push_values(calls, key, &mut before)?;
            }
            had.push(had_output);
            for &i in groups.rows(g) {
                sums.add(calls, &args, i as usize, weights[i as usize]);
            }
            let sums = if sums.rows == 0 {
                self.sums.remove(key)?;
                &empty
            } else {
                &*sums
            };
            if !ordered {
                let has_output = global || sums.rows != 0;
                if has_output {
                    sums.push_values(calls, key, &mut after)?;
                }
                has.push(has_output);
            }
        }
        self.started = true;
        if ordered {
            add_values(calls, &keys, &args, weights)?;
            for &key in &groups.keys {
                let has_output = match self.sums.get(key)? {
                    Some(sums) => {
                        sums.push_values(calls, key, &mut after)?;
                        true
                    }
                    None if global => {
                        empty.push_values(calls, key, &mut after)?;
                        true
                    }
                    None => false,
                };
                has.push(has_output);
            }
        }

        let width = calls.len();
        let (mut inserted, mut removed): (Vec<&[u8]>, Vec<&[u8]>) = (Vec::new(), Vec::new());
        let (mut new_values, mut old_values): (Vec<&Value>, Vec<&Value>) = (Vec::new(), Vec::new());
        let (mut b, mut a) = (0, 0);
        for (g, &key) in groups.keys.iter().enumerate() {
            let old = &before[b..b + if had[g] { width } else { 0 }];
            let new = &after[a..a + if has[g] { width } else { 0 }];
            b += old.len();
            a += new.len();
            if had[g] == has[g] && old == new {
                continue;
            }
            if had[g] {
                removed.push(key);
                old_values.extend(old);
            }
            if has[g] {
                inserted.push(key);
                new_values.extend(new);
            }
        }
        // The values are row by row; a column is every width-th.
        let columns = |values: &[&Value]| {
            calls
                .iter()
                .enumerate()
                .map(|(j, call)| value_column(call, values.iter().skip(j).step_by(width).copied()))
                .collect::<Result<Vec<_>>>()
        };
        let (new_columns, old_columns) = (columns(&new_values)?, columns(&old_values)?);
        let inserted = self.output_rows(&inserted, new_columns)?;
        let removed = self.output_rows(&removed, old_columns)?.negate();
        self.collect(n)?;
        self.sums.end_step();
        ZSet::concat(&self.schema, &[inserted, removed])
    }
}

/// A column of values of one general aggregate call, with `data_type`
/// when there are none.
fn scalar_column(values: Vec<ScalarValue>, data_type: &DataType) -> Result<ArrayRef> {
    Ok(if values.is_empty() {
        new_empty_array(data_type)
    } else {
        ScalarValue::iter_to_array(values)?
    })
}

impl Operator for Aggregate {
    fn name(&self) -> &str {
        "aggregate"
    }

    fn partitioned(&self) -> bool {
        !self.is_global()
    }

    fn partition_keys(&self, _input: usize, change: &ZSet) -> Result<EncodedRows> {
        encode_keys(&self.key_codec, &self.group_exprs, change)
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.trace.save(w)?;
        self.outputs.save(w)?;
        self.sums.save(w)?;
        w.put(&self.started)?;
        Collector::save_all(w, &self.gc)?;
        save_values(self.linear.as_deref().unwrap_or_default(), w)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.trace.restore(r)?;
        self.outputs.restore(r)?;
        if self.linear.is_some() {
            // Remembered by a build that kept the running sums' outputs.
            self.outputs = StateMap::new();
        }
        self.sums.restore(r)?;
        let started: bool = r.get()?;
        self.started = started || (r.merging() && self.started);
        Collector::restore_all(r, &mut self.gc)?;
        restore_values(self.linear.as_deref_mut().unwrap_or_default(), r)
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        if self.linear.is_some() {
            return self.eval_linear(change);
        }
        let n = change.len();
        let keys = encode_keys(&self.key_codec, &self.group_exprs, change)?;
        // The touched groups, in the order the rows first touch them (a
        // tree of copies cost a third of a large step, and sorting them a
        // tenth of q5's). The one group of a global aggregate is touched
        // whenever it is evaluated: on its first step, rows or not.
        let touched = Groups::keys_of(&keys, n, self.is_global());
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        for (i, &w) in change.weights().iter().enumerate() {
            self.trace.update(keys.row(i), rows.row(i), w);
        }
        self.trace.seal();
        self.started = true;

        // Recompute every touched group that still has rows.
        let global = self.is_global();
        let mut live_keys: Vec<&[u8]> = Vec::new();
        let mut values: Vec<Vec<ScalarValue>> = vec![Vec::new(); self.calls.len()];
        for &key in &touched {
            if self.trace.get(key).is_empty() && !global {
                continue;
            }
            let batch = key_rows(&self.trace, &self.row_codec, &self.input_schema, key)?;
            for (j, call) in self.calls.iter().enumerate() {
                values[j].push(self.compute(call, &batch)?);
            }
            live_keys.push(key);
        }
        let values = values
            .into_iter()
            .enumerate()
            .map(|(j, v)| {
                let field = self.schema.field(self.group_exprs.len() + j);
                scalar_column(v, field.data_type())
            })
            .collect::<Result<Vec<_>>>()?;
        let fresh = self.output_rows(&live_keys, values)?;
        let fresh_rows = self
            .out_codec
            .encode(fresh.batch().columns(), fresh.len())?;

        // Diff against the previous outputs of the touched groups.
        let mut keep = Vec::new();
        let mut retract: Vec<Vec<u8>> = Vec::new();
        let mut live = live_keys.iter().enumerate().peekable();
        for &key in &touched {
            let new_row = match live.peek() {
                Some((i, k)) if **k == key => {
                    let i = *i;
                    live.next();
                    Some((i, fresh_rows.row(i)))
                }
                _ => None,
            };
            if self.outputs.get(key)?.map(Vec::as_slice) == new_row.map(|(_, r)| r) {
                continue;
            }
            if let Some(old) = match new_row {
                Some((i, r)) => {
                    keep.push(i as u32);
                    self.outputs.insert(key, r.to_vec())?
                }
                None => self.outputs.remove(key)?,
            } {
                retract.push(old);
            }
        }
        let inserted = fresh.take(&keep)?;
        let removed = self
            .out_codec
            .decode_batch(&self.schema, retract.iter().map(Vec::as_slice))?;
        let removed = ZSet::with_weight(removed, -1);
        self.collect(n)?;
        self.outputs.end_step();
        self.sums.end_step();
        ZSet::concat(&self.schema, &[inserted, removed])
    }

    fn quiet_on_empty(&self) -> bool {
        !self.is_global() || self.started
    }

    fn state_entries(&self) -> usize {
        let (values, _, _) = values_size(self.linear.as_deref().unwrap_or_default());
        self.trace.entries() + self.outputs.len() + self.sums.len() + values
    }

    fn state_storage_bytes(&self) -> usize {
        let (_, _, values) = values_size(self.linear.as_deref().unwrap_or_default());
        self.trace.storage_bytes()
            + self.outputs.storage_bytes()
            + self.sums.storage_bytes()
            + values
    }

    fn state_bytes(&self) -> usize {
        let (_, values, _) = values_size(self.linear.as_deref().unwrap_or_default());
        self.trace.bytes() + self.outputs.bytes() + self.sums.bytes() + values
    }
}
