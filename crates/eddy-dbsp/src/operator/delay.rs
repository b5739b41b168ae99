//! Delay `z⁻¹`: outputs the previous step's input (empty in the first step).
//!
//! Incremental rule: delay is linear and time-invariant, `Δ(z⁻¹x) = z⁻¹(Δx)`.

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Holds one step's input back by one step.
pub struct Delay {
    held: ZSet,
}

impl Delay {
    /// A delay of rows of `schema`.
    pub fn new(schema: &SchemaRef) -> Self {
        Self {
            held: ZSet::empty(schema),
        }
    }
}

impl Operator for Delay {
    fn name(&self) -> &str {
        "delay"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.held)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        r.get_into(&mut self.held)
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        Ok(std::mem::replace(&mut self.held, inputs[0].clone()))
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}
