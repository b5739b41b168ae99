//! Differentiate: `D(x)[t] = x[t] − x[t−1]`, turning a stream of snapshots
//! into a stream of changes.
//!
//! Incremental rule: differentiation is linear; `D` undoes
//! [`Integrate`](super::Integrate).

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Subtracts the previous input from the current one.
pub struct Differentiate {
    schema: SchemaRef,
    previous: Option<ZSet>,
}

impl Differentiate {
    /// A differentiator of rows of `schema`.
    pub fn new(schema: SchemaRef) -> Self {
        Self {
            schema,
            previous: None,
        }
    }
}

impl Operator for Differentiate {
    fn name(&self) -> &str {
        "differentiate"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.previous)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        r.get_into(&mut self.previous)
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let current = inputs[0].clone();
        let previous = self.previous.replace(current.clone());
        let parts = match previous {
            Some(p) => vec![current, p.negate()],
            None => vec![current],
        };
        ZSet::concat(&self.schema, &parts)?.consolidate()
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}
