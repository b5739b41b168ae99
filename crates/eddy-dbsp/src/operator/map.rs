//! Map (projection): evaluates expressions over each row.
//!
//! Incremental rule: map is linear, `map(ΔR)` is the change of `map(R)`;
//! weights pass through unchanged. Expressions are DataFusion physical
//! expressions evaluated over the whole change batch at once.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::Operator;
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

/// Evaluates expressions over a change batch into columns.
pub fn evaluate(exprs: &[Arc<dyn PhysicalExpr>], input: &ZSet) -> Result<Vec<ArrayRef>> {
    let n = input.len();
    exprs
        .iter()
        .map(|e| Ok(e.evaluate(input.batch())?.into_array(n)?))
        .collect()
}

impl Operator for Map {
    fn name(&self) -> &str {
        "map"
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let input = inputs[0];
        let columns = evaluate(&self.exprs, input)?;
        ZSet::from_columns(&self.schema, columns, input.weights().to_vec())
    }
}
