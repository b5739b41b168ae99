//! Map (projection): evaluates expressions over each row.
//!
//! Incremental rule: map is linear, `map(ΔR)` is the change of `map(R)`;
//! weights pass through unchanged. MAPs come out in their canonical form
//! ([`crate::maps`]). A row on which an expression fails (a
//! division by zero, an overflow, a bad cast) fails the step, unless the
//! expression was built to be NULL there ([`crate::row_errors`]).
//! Expressions are DataFusion physical expressions evaluated over the whole
//! change batch at once.

use std::sync::Arc;

use datafusion::arrow::array::{new_empty_array, ArrayRef, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Projects each row through a list of expressions.
pub struct Map {
    exprs: Vec<Arc<dyn PhysicalExpr>>,
    schema: SchemaRef,
    /// The output columns that hold MAPs, put in canonical form.
    maps: Vec<usize>,
}

impl Map {
    /// A map producing rows of `schema`, one column per expression.
    pub fn new(exprs: Vec<Arc<dyn PhysicalExpr>>, schema: SchemaRef) -> Self {
        let maps = (schema.fields().iter().enumerate())
            .filter(|(_, f)| crate::maps::holds_map(f.data_type()))
            .map(|(i, _)| i)
            .collect();
        Self {
            exprs,
            schema,
            maps,
        }
    }
}

/// Evaluates expressions over a change batch into columns.
///
/// An expression that fails on a row fails the evaluation (and so the
/// step), unless it was built to be NULL there (see [`crate::row_errors`]).
pub fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], input: &ZSet) -> Result<Vec<ArrayRef>> {
    exprs
        .iter()
        .map(|e| evaluate_one(e, input.batch()))
        .collect()
}

/// Evaluates one expression over a batch.
pub fn evaluate_one(expr: &Arc<dyn PhysicalExpr>, batch: &RecordBatch) -> Result<ArrayRef> {
    let n = batch.num_rows();
    match expr.evaluate(batch).and_then(|v| v.into_array(n)) {
        Ok(a) => Ok(a),
        // No row to fail: a constant such as `61 / 0` fails as a scalar
        // even over an empty batch, where the answer is simply no values.
        Err(_) if n == 0 => Ok(new_empty_array(&expr.data_type(&batch.schema())?)),
        Err(e) => Err(e.into()),
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
        let mut columns = evaluate(&self.exprs, input)?;
        // A MAP an expression builds is put in its canonical form.
        for &i in &self.maps {
            columns[i] = crate::maps::canonical(&columns[i])?;
        }
        ZSet::from_columns(&self.schema, columns, input.weights().to_vec())
    }
}
