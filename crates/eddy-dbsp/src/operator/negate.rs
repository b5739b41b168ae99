//! Negate: flips the sign of every weight (with plus, SQL `EXCEPT ALL`-style
//! differences and anti-joins are built from it).
//!
//! Incremental rule: negation is linear, `Δ(−R) = −ΔR`.

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Negates weights.
pub struct Negate;

impl Operator for Negate {
    fn name(&self) -> &str {
        "negate"
    }

    fn save(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        Ok(inputs[0].negate())
    }
}
