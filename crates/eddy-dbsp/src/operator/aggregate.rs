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
//! That path remembers no outputs either: a touched group's output before
//! the step is computed from its state before its first row is added.
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

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;
use datafusion::arrow::array::{new_empty_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast, lexsort_to_indices, take_record_batch, SortColumn};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use super::linear::{
    add_values, arguments, linear_calls, restore_values, retain_values, save_values, values_size,
    GroupSums, LinearCall,
};
use super::map::evaluate_one;
use super::state_map::StateMap;
use super::waterline::{Collector, Waterline};
use super::{encode_keys, key_rows, Operator};
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
    /// Whether the single group of an aggregate without `GROUP BY` has been emitted.
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
        let linear = linear_calls(&calls, &input_schema);
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

    /// Output rows (weight 1): the groups of `keys`, with `values[j][i]`
    /// the value of call `j` in group `i`.
    fn output_rows(&self, keys: &[&[u8]], values: Vec<Vec<ScalarValue>>) -> Result<ZSet> {
        let mut columns = self.key_codec.decode(keys.iter().copied())?;
        if self.group_exprs.is_empty() {
            columns.clear();
        }
        for (j, vals) in values.into_iter().enumerate() {
            let field = self.schema.field(self.group_exprs.len() + j);
            let array = if vals.is_empty() {
                new_empty_array(field.data_type())
            } else {
                ScalarValue::iter_to_array(vals)?
            };
            let array = if array.data_type() == field.data_type() {
                array
            } else {
                cast(&array, field.data_type())?
            };
            columns.push(array);
        }
        ZSet::from_columns(&self.schema, columns, vec![1; keys.len()])
    }

    /// A step of the running sums: each touched group's output before the
    /// step is computed from its state before the step (at the group's
    /// first row), so no output is remembered, and a group whose values
    /// did not change emits nothing.
    fn eval_linear(&mut self, change: &ZSet) -> Result<ZSet> {
        let n = change.len();
        let global = self.is_global();
        let keys = encode_keys(&self.key_codec, &self.group_exprs, change)?;
        let calls = self.linear.as_mut().expect("the linear path");
        let args = arguments(calls, change.batch())?;
        let values_of = |calls: &[LinearCall], sums: &GroupSums, key: &[u8]| {
            (0..calls.len())
                .map(|j| sums.value(calls, j, key))
                .collect::<Result<Vec<_>>>()
        };
        // The touched groups in the order rows first touch them, with
        // their values before the step (`None`: the group had no output).
        let mut seen: HashSet<&[u8], foldhash::fast::RandomState> = HashSet::default();
        let mut touched: Vec<(&[u8], Option<Vec<ScalarValue>>)> = Vec::new();
        if global {
            // The one group has an output once started, rows or not.
            let before = if self.started {
                let sums = self.sums.get(&[])?.cloned().unwrap_or_default();
                Some(values_of(calls, &sums, &[])?)
            } else {
                None
            };
            seen.insert(&[]);
            touched.push((&[], before));
            self.started = true;
        }
        for (i, &w) in change.weights().iter().enumerate() {
            let key = keys.row(i);
            let sums = self
                .sums
                .get_or_insert_with(key, || GroupSums::for_calls(calls))?;
            if seen.insert(key) {
                // A group with sums has rows (it leaves the map with its
                // last); one just made has none, and had no output.
                let before = match sums.rows {
                    0 => None,
                    _ => Some(values_of(calls, sums, key)?),
                };
                touched.push((key, before));
            }
            sums.add(calls, &args, i, w);
            if sums.rows == 0 {
                self.sums.remove(key)?;
            }
        }
        add_values(calls, &keys, &args, change.weights())?;

        let (mut inserted, mut removed): (Vec<&[u8]>, Vec<&[u8]>) = (Vec::new(), Vec::new());
        let mut new_values: Vec<Vec<ScalarValue>> = vec![Vec::new(); calls.len()];
        let mut old_values: Vec<Vec<ScalarValue>> = vec![Vec::new(); calls.len()];
        let empty = GroupSums::default();
        for (key, before) in touched {
            let after = match self.sums.get(key)? {
                Some(sums) => Some(values_of(calls, sums, key)?),
                None if global => Some(values_of(calls, &empty, key)?),
                None => None,
            };
            if before == after {
                continue;
            }
            if let Some(before) = before {
                removed.push(key);
                old_values
                    .iter_mut()
                    .zip(before)
                    .for_each(|(c, v)| c.push(v));
            }
            if let Some(after) = after {
                inserted.push(key);
                new_values
                    .iter_mut()
                    .zip(after)
                    .for_each(|(c, v)| c.push(v));
            }
        }
        let inserted = self.output_rows(&inserted, new_values)?;
        let removed = self.output_rows(&removed, old_values)?.negate();
        self.collect(n)?;
        self.sums.end_step();
        ZSet::concat(&self.schema, &[inserted, removed])
    }
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
        r.get_into(&mut self.started)?;
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
        // tenth of q5's).
        let mut seen: HashSet<&[u8], foldhash::fast::RandomState> = HashSet::default();
        let mut touched: Vec<&[u8]> = Vec::new();
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        for (i, &w) in change.weights().iter().enumerate() {
            self.trace.update(keys.row(i), rows.row(i), w);
            if seen.insert(keys.row(i)) {
                touched.push(keys.row(i));
            }
        }
        self.trace.seal();
        if self.is_global() && !self.started {
            if seen.insert(&[]) {
                touched.push(&[]);
            }
            self.started = true;
        }

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
