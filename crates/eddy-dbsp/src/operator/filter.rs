//! Filter: keeps the rows for which a predicate is true (not false, not NULL;
//! a row on which the predicate fails counts as NULL).
//!
//! Incremental rule: filter is linear, `σ(ΔR)` is the change of `σ(R)`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::physical_expr::PhysicalExpr;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Error, Result, ZSet};

/// Keeps rows that satisfy a predicate.
pub struct Filter {
    predicate: Arc<dyn PhysicalExpr>,
}

impl Filter {
    /// A filter by `predicate`, a boolean expression over the input rows.
    pub fn new(predicate: Arc<dyn PhysicalExpr>) -> Self {
        Self { predicate }
    }
}

/// The indices of rows where `predicate` is true.
pub fn selected(predicate: &Arc<dyn PhysicalExpr>, input: &ZSet) -> Result<Vec<u32>> {
    let mask = super::map::evaluate_one(predicate, input.batch())?;
    let mask = mask
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| {
            Error::Circuit(format!(
                "filter predicate is {}, not boolean",
                mask.data_type()
            ))
        })?;
    Ok((0..mask.len())
        .filter(|&i| mask.is_valid(i) && mask.value(i))
        .map(|i| i as u32)
        .collect())
}

impl Operator for Filter {
    fn name(&self) -> &str {
        "filter"
    }

    fn save(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let input = inputs[0];
        let keep = selected(&self.predicate, input)?;
        if keep.len() == input.len() {
            return Ok(input.clone());
        }
        input.take(&keep)
    }
}
