//! Distinct: every row with positive total weight, once.
//!
//! Incremental rule (non-linear): keep the integrated weight of every row.
//! For each row that the change touches, with integrated weight `w` before
//! the step and `w + Δw` after, emit +1 when the row turns positive and −1
//! when it stops being positive. Work is proportional to the change.

use std::collections::HashMap;

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::row::RowCodec;
use crate::{Result, ZSet};

/// Set semantics over a multiset stream.
pub struct Distinct {
    codec: RowCodec,
    weights: HashMap<Vec<u8>, i64>,
}

impl Distinct {
    /// A distinct over rows of `schema`.
    pub fn new(schema: &SchemaRef) -> Result<Self> {
        Ok(Self {
            codec: RowCodec::for_schema(schema)?,
            weights: HashMap::new(),
        })
    }
}

impl Operator for Distinct {
    fn name(&self) -> &str {
        "distinct"
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0].consolidate_with(&self.codec)?;
        let rows = self.codec.encode(change.batch().columns(), change.len())?;
        let mut keep = Vec::new();
        let mut weights = Vec::new();
        for (i, &dw) in change.weights().iter().enumerate() {
            let row = rows.row(i);
            let before = self.weights.get(row).copied().unwrap_or(0);
            let after = before + dw;
            if after == 0 {
                self.weights.remove(row);
            } else {
                self.weights.insert(row.to_vec(), after);
            }
            let out = i64::from(after > 0) - i64::from(before > 0);
            if out != 0 {
                keep.push(i as u32);
                weights.push(out);
            }
        }
        let taken = change.take(&keep)?;
        Ok(ZSet::new(taken.into_parts().0, weights))
    }
}
