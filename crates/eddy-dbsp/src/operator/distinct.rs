//! Distinct: every row with positive total weight, once.
//!
//! Incremental rule (non-linear): keep the integrated weight of every row.
//! For each row that the change touches, with integrated weight `w` before
//! the step and `w + Δw` after, emit +1 when the row turns positive and −1
//! when it stops being positive. Work is proportional to the change. With a
//! waterline on a column, rows below it are forgotten. The weights are kept
//! in a [`StateMap`], which moves them to a trace on disk with storage.

use datafusion::arrow::datatypes::SchemaRef;

use super::state_map::StateMap;
use super::waterline::{Collector, Waterline};
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{EncodedRows, RowCodec};
use crate::{Result, ZSet};

/// Set semantics over a multiset stream.
pub struct Distinct {
    codec: RowCodec,
    weights: StateMap<i64>,
    gc: Option<Collector>,
}

impl Distinct {
    /// A distinct over rows of `schema`.
    pub fn new(schema: &SchemaRef) -> Result<Self> {
        Ok(Self {
            codec: RowCodec::for_schema(schema)?,
            weights: StateMap::new(),
            gc: None,
        })
    }

    /// Forgets the rows whose `column` is below `waterline`: no later
    /// change can reach them.
    pub fn with_waterline(mut self, column: usize, waterline: Waterline) -> Self {
        self.gc = Some(Collector::new(column, waterline));
        self
    }

    fn collect(&mut self, updates: usize) -> Result<()> {
        let Some((gc, bound)) = Collector::due_in(&mut self.gc, updates) else {
            return Ok(());
        };
        let dead = gc.dead(&self.codec, &self.weights, &bound)?;
        if let Some(dead) = dead {
            self.weights.retain(|row| !dead.contains(row));
        }
        gc.collected(self.weights.len());
        Ok(())
    }
}

impl Operator for Distinct {
    fn name(&self) -> &str {
        "distinct"
    }

    fn partitioned(&self) -> bool {
        true
    }

    fn partition_keys(&self, _input: usize, change: &ZSet) -> Result<EncodedRows> {
        self.codec.encode(change.batch().columns(), change.len())
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.weights.save(w)?;
        Collector::save_all(w, &self.gc)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.weights.restore(r)?;
        Collector::restore_all(r, &mut self.gc)
    }

    fn state_entries(&self) -> usize {
        self.weights.len()
    }

    fn state_bytes(&self) -> usize {
        self.weights.bytes()
    }

    fn state_storage_bytes(&self) -> usize {
        self.weights.storage_bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0].consolidate_with(&self.codec)?;
        let rows = self.codec.encode(change.batch().columns(), change.len())?;
        let mut keep = Vec::new();
        let mut weights = Vec::new();
        for (i, &dw) in change.weights().iter().enumerate() {
            let row = rows.row(i);
            let weight = self.weights.get_or_default(row)?;
            let before = *weight;
            *weight += dw;
            let after = *weight;
            if after == 0 {
                self.weights.remove(row)?;
            }
            let out = i64::from(after > 0) - i64::from(before > 0);
            if out != 0 {
                keep.push(i as u32);
                weights.push(out);
            }
        }
        let taken = change.take(&keep)?;
        self.collect(change.len())?;
        self.weights.end_step();
        Ok(ZSet::new(taken.into_parts().0, weights))
    }
}
