//! Plus: the sum of Z-sets (SQL `UNION ALL`).
//!
//! Incremental rule: plus is linear, `Δ(A + B) = ΔA + ΔB`.

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Adds its inputs, which all have the same column types.
pub struct Plus {
    schema: SchemaRef,
}

impl Plus {
    /// A sum producing rows of `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Self { schema }
    }
}

impl Operator for Plus {
    fn name(&self) -> &str {
        "plus"
    }

    fn save(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let parts: Vec<ZSet> = inputs
            .iter()
            .map(|z| (*z).clone().with_schema(&self.schema))
            .collect::<Result<_>>()?;
        ZSet::concat(&self.schema, &parts)
    }
}
