//! Window functions over `OVER (PARTITION BY … ORDER BY … frame)`: each
//! input row, with one more column per window function.
//!
//! Incremental rule (non-linear): the integrated input is kept in a trace
//! indexed by the partition key. A change touches some partitions; for each
//! of them the operator evaluates the window functions over the partition
//! as it was before the step and as it is after, and emits `−old + new`,
//! consolidated, so rows whose window values did not change cancel out and
//! the output change holds only the rows whose values moved. Work is
//! proportional to the sizes of the touched partitions, not to the input.
//!
//! The functions are DataFusion's own physical window expressions
//! (`ROW_NUMBER`, `RANK`, `LAG`, `FIRST_VALUE`, every aggregate over `ROWS`
//! and `RANGE` frames, …), each evaluated over one partition sorted by its
//! `ORDER BY`, exactly as DataFusion's batch executor does. Rows that tie on
//! the `ORDER BY` are ordered by their own bytes, so `ROW_NUMBER` and the
//! frames are deterministic: the same input always gives the same output,
//! whatever order its changes arrived in.
//!
//! With a waterline on a partition column, partitions below it are
//! forgotten: no later change can touch them.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{take, SortOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::map::evaluate_one;
use super::waterline::{collect_keys, Collector, Waterline};
use super::{encode_keys, key_rows, Operator};
use crate::row::{batch_with_rows, take_rows, RowCodec};
use crate::{Result, Trace, ZSet};

/// One window function with the codec of its `ORDER BY` values.
struct Function {
    expr: Arc<dyn WindowExpr>,
    order_codec: Option<RowCodec>,
}

/// Incremental window functions sharing one `PARTITION BY`.
pub struct Window {
    partition_exprs: Vec<Arc<dyn PhysicalExpr>>,
    functions: Vec<Function>,
    input_schema: SchemaRef,
    schema: SchemaRef,
    key_codec: RowCodec,
    row_codec: RowCodec,
    out_codec: RowCodec,
    trace: Trace,
    /// Forgets the partitions below a waterline.
    gc: Option<Collector>,
}

impl Window {
    /// Window functions over rows of `input_schema`, partitioned by
    /// `partition_exprs`; `functions` must all have that partitioning
    /// (their own `partition_by` is not consulted). Output rows are the
    /// input columns followed by one column per function, of `schema`.
    pub fn new(
        input_schema: SchemaRef,
        partition_exprs: Vec<Arc<dyn PhysicalExpr>>,
        functions: Vec<Arc<dyn WindowExpr>>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let key_types: Vec<DataType> = partition_exprs
            .iter()
            .map(|e| e.data_type(&input_schema))
            .collect::<datafusion::error::Result<_>>()?;
        let functions = functions
            .into_iter()
            .map(|expr| {
                let order = expr.order_by();
                let order_codec = if order.is_empty() {
                    None
                } else {
                    let fields: Vec<(DataType, SortOptions)> = order
                        .iter()
                        .map(|s| Ok((s.expr.data_type(&input_schema)?, s.options)))
                        .collect::<datafusion::error::Result<_>>()?;
                    Some(RowCodec::with_options(fields)?)
                };
                Ok(Function { expr, order_codec })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            key_codec: RowCodec::new(&key_types)?,
            row_codec: RowCodec::for_schema(&input_schema)?,
            out_codec: RowCodec::for_schema(&schema)?,
            partition_exprs,
            functions,
            input_schema,
            schema,
            trace: Trace::new(),
            gc: None,
        })
    }

    /// Forgets the partitions whose partition column `column` is below
    /// `waterline`: no later change can touch them.
    pub fn with_waterline(mut self, column: usize, waterline: Waterline) -> Self {
        self.gc = Some(Collector::new(column, waterline));
        self
    }

    /// The output rows of one partition as the trace holds it now.
    fn partition_output(&self, key: &[u8]) -> Result<RecordBatch> {
        let rows = key_rows(&self.trace, &self.row_codec, &self.input_schema, key)?;
        if rows.num_rows() == 0 {
            return Ok(RecordBatch::new_empty(Arc::clone(&self.schema)));
        }
        let mut columns = rows.columns().to_vec();
        for f in &self.functions {
            columns.push(evaluate_sorted(f, &rows)?);
        }
        let columns = columns
            .into_iter()
            .zip(self.schema.fields())
            .map(|(c, field)| {
                if c.data_type() == field.data_type() {
                    Ok(c)
                } else {
                    Ok(datafusion::arrow::compute::cast(&c, field.data_type())?)
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        batch_with_rows(&self.schema, columns, rows.num_rows())
    }
}

/// One function's values for the rows of one partition, in the rows' order:
/// the rows are sorted by the function's `ORDER BY` (ties keep the rows'
/// order, which is the trace's byte order), evaluated, and put back.
fn evaluate_sorted(f: &Function, rows: &RecordBatch) -> Result<ArrayRef> {
    let n = rows.num_rows();
    let Some(codec) = &f.order_codec else {
        return Ok(f.expr.evaluate(rows)?);
    };
    let order_values: Vec<ArrayRef> = f
        .expr
        .order_by()
        .iter()
        .map(|s| evaluate_one(&s.expr, rows))
        .collect::<Result<_>>()?;
    let keys = codec.encode(&order_values, n)?;
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by(|&a, &b| keys.row(a as usize).cmp(keys.row(b as usize)));
    let sorted = take_rows(rows, &order)?;
    let values = f.expr.evaluate(&sorted)?;
    let mut back = vec![0u32; n];
    for (position, &row) in order.iter().enumerate() {
        back[row as usize] = position as u32;
    }
    Ok(take(&values, &UInt32Array::from(back), None)?)
}

impl Operator for Window {
    fn name(&self) -> &str {
        "window"
    }

    fn state_entries(&self) -> usize {
        self.trace.entries()
    }

    fn state_bytes(&self) -> usize {
        self.trace.bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let n = change.len();
        let keys = encode_keys(&self.key_codec, &self.partition_exprs, change)?;
        let touched: BTreeSet<&[u8]> = (0..n).map(|i| keys.row(i)).collect();

        let mut parts = Vec::with_capacity(2 * touched.len());
        for key in &touched {
            let old = self.partition_output(key)?;
            if old.num_rows() > 0 {
                parts.push(ZSet::with_weight(old, -1));
            }
        }
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        for (i, &w) in change.weights().iter().enumerate() {
            self.trace.update(keys.row(i), rows.row(i), w);
        }
        self.trace.seal();
        for key in &touched {
            let new = self.partition_output(key)?;
            if new.num_rows() > 0 {
                parts.push(ZSet::with_weight(new, 1));
            }
        }
        if let Some(gc) = &mut self.gc {
            collect_keys(gc, &mut self.trace, &self.key_codec, n)?;
        }
        ZSet::concat(&self.schema, &parts)?.consolidate_with(&self.out_codec)
    }
}
