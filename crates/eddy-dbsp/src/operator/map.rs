//! Map (projection): evaluates expressions over each row.
//!
//! Incremental rule: map is linear, `map(ΔR)` is the change of `map(R)`;
//! weights pass through unchanged. A row on which an expression fails (a
//! division by zero, a bad cast) gets NULL there and is counted in
//! [`row_errors`], so the step goes on. Expressions are DataFusion physical
//! expressions evaluated over the whole change batch at once.

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::arrow::array::{new_empty_array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Projects each row through a list of expressions.
pub struct Map {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
}

impl Map {
    /// A map producing rows of `schema`, one column per expression.
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        Self { exprs, schema }
    }
}

/// Rows whose expression failed (say, a division by zero) and became NULL.
static ROW_ERRORS: AtomicU64 = AtomicU64::new(0);

/// How many row evaluations failed and yielded NULL, in this process.
pub fn row_errors() -> u64 {
    ROW_ERRORS.load(Ordering::Relaxed)
}

/// Evaluates expressions over a change batch into columns.
///
/// An expression that fails on the batch is evaluated row by row, and the
/// rows where it fails get NULL: one bad row never stops a step or leaves
/// the circuit half-updated, and the result stays a function of the input.
pub fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], input: &ZSet) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| evaluate_one(e, input.batch()))
        .collect()
}

/// Evaluates one expression over a batch, NULL where a row fails.
pub fn evaluate_one(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    let n = batch.num_rows();
    match expr.evaluate(batch).and_then(|v| v.into_array(n)) {
        Ok(a) => Ok(a),
        // No row to fail: a constant such as `61 / 0` fails as a scalar
        // even over an empty batch, where the answer is simply no values.
        Err(_) if n == 0 => Ok(new_empty_array(&expr.data_type(&batch.schema())?)),
        Err(_) => {
            let data_type = expr.data_type(&batch.schema())?;
            let mut values = Vec::with_capacity(n);
            for i in 0..n {
                let row = batch.slice(i, 1);
                match expr.evaluate(&row).and_then(|v| v.into_array(1)) {
                    Ok(a) => values.push(ScalarValue::try_from_array(&a, 0)?),
                    Err(_) => {
                        ROW_ERRORS.fetch_add(1, Ordering::Relaxed);
                        values.push(ScalarValue::try_from(&data_type)?);
                    }
                }
            }
            Ok(ScalarValue::iter_to_array(values)?)
        }
    }
}

impl Operator for Map {
    fn name(&self) -> &str {
        "map"
    }

    fn save(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let input = inputs[0];
        let columns = evaluate(&self.exprs, input)?;
        ZSet::from_columns(&self.schema, columns, input.weights().to_vec())
    }
}
