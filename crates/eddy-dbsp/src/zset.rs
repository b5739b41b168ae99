//! Z-set change batches.
//!
//! A [`ZSet`] is a multiset of rows with integer weights: an Arrow
//! [`RecordBatch`] plus one `i64` weight per row. A weight of +1 inserts a
//! row, −1 deletes it, and an update is a deletion plus an insertion. A batch
//! may hold the same row several times; [`ZSet::consolidate`] sorts the rows,
//! sums the weights of equal rows and drops rows whose weight is zero.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;

use crate::row::{batch_with_rows, take_rows, RowCodec};
use crate::Result;

/// A batch of weighted rows.
#[derive(Debug, Clone)]
pub struct ZSet {
    batch: RecordBatch,
    weights: Vec<i64>,
}

impl ZSet {
    /// Pairs a batch with weights (one per row).
    pub fn new(batch: RecordBatch, weights: Vec<i64>) -> Self {
        assert_eq!(batch.num_rows(), weights.len(), "one weight per row");
        Self { batch, weights }
    }

    /// Every row of `batch` with weight `weight`.
    pub fn with_weight(batch: RecordBatch, weight: i64) -> Self {
        let n = batch.num_rows();
        Self::new(batch, vec![weight; n])
    }

    /// The empty Z-set of a schema.
    pub fn empty(schema: &SchemaRef) -> Self {
        Self::new(RecordBatch::new_empty(Arc::clone(schema)), vec![])
    }

    /// Builds a Z-set from columns, allowing schemas without columns.
    pub fn from_columns(
        schema: &SchemaRef,
        columns: Vec<ArrayRef>,
        weights: Vec<i64>,
    ) -> Result<Self> {
        let batch = batch_with_rows(schema, columns, weights.len())?;
        Ok(Self::new(batch, weights))
    }

    /// The rows.
    pub fn batch(&self) -> &RecordBatch {
        &self.batch
    }

    /// The weights, one per row.
    pub fn weights(&self) -> &[i64] {
        &self.weights
    }

    /// The schema of the rows.
    pub fn schema(&self) -> SchemaRef {
        self.batch.schema()
    }

    /// Number of rows (not the sum of weights).
    pub fn len(&self) -> usize {
        self.weights.len()
    }

    /// Whether the batch has no rows.
    pub fn is_empty(&self) -> bool {
        self.weights.is_empty()
    }

    /// Splits into batch and weights.
    pub fn into_parts(self) -> (RecordBatch, Vec<i64>) {
        (self.batch, self.weights)
    }

    /// The same rows with negated weights.
    pub fn negate(&self) -> Self {
        Self::new(
            self.batch.clone(),
            self.weights.iter().map(|w| -w).collect(),
        )
    }

    /// Rows at `indices`, with their weights.
    pub fn take(&self, indices: &[u32]) -> Result<Self> {
        let batch = take_rows(&self.batch, indices)?;
        let weights = indices.iter().map(|&i| self.weights[i as usize]).collect();
        Ok(Self::new(batch, weights))
    }

    /// The rows of all parts, in order. All parts must have `schema`.
    pub fn concat(schema: &SchemaRef, parts: &[ZSet]) -> Result<Self> {
        let parts: Vec<&ZSet> = parts.iter().filter(|p| !p.is_empty()).collect();
        match parts.len() {
            0 => return Ok(Self::empty(schema)),
            1 => return parts[0].clone().with_schema(schema),
            _ => {}
        }
        let weights: Vec<i64> = parts
            .iter()
            .flat_map(|p| p.weights.iter().copied())
            .collect();
        let batch = if schema.fields().is_empty() {
            batch_with_rows(schema, vec![], weights.len())?
        } else {
            concat_batches(schema, parts.iter().map(|p| &p.batch))?
        };
        Ok(Self::new(batch, weights))
    }

    /// The same rows under another schema with the same column types
    /// (field names and nullability may differ).
    pub fn with_schema(self, schema: &SchemaRef) -> Result<Self> {
        if Arc::ptr_eq(&self.batch.schema(), schema) || self.batch.schema() == *schema {
            return Ok(self);
        }
        let n = self.batch.num_rows();
        let batch = batch_with_rows(schema, self.batch.columns().to_vec(), n)?;
        Ok(Self::new(batch, self.weights))
    }

    /// Sorts rows, sums the weights of equal rows and drops zero weights.
    pub fn consolidate(&self) -> Result<Self> {
        let codec = RowCodec::for_schema(&self.schema())?;
        self.consolidate_with(&codec)
    }

    /// [`consolidate`](Self::consolidate) with a codec built for this schema.
    pub fn consolidate_with(&self, codec: &RowCodec) -> Result<Self> {
        if self.is_empty() {
            return Ok(self.clone());
        }
        let rows = codec.encode(self.batch.columns(), self.len())?;
        let mut order: Vec<u32> = (0..self.len() as u32).collect();
        order.sort_by(|&a, &b| rows.row(a as usize).cmp(rows.row(b as usize)));
        let mut keep = Vec::with_capacity(order.len());
        let mut weights = Vec::with_capacity(order.len());
        let mut i = 0;
        while i < order.len() {
            let first = order[i];
            let mut w = 0i64;
            while i < order.len() && rows.row(order[i] as usize) == rows.row(first as usize) {
                w += self.weights[order[i] as usize];
                i += 1;
            }
            if w != 0 {
                keep.push(first);
                weights.push(w);
            }
        }
        let mut out = self.take(&keep)?;
        out.weights = weights;
        Ok(out)
    }

    /// Rows with positive weight, each repeated `weight` times, as a plain
    /// batch. Fails if a row has a negative weight: that is no set of rows.
    pub fn expand(&self) -> Result<RecordBatch> {
        let mut idx = Vec::with_capacity(self.len());
        for (i, &w) in self.weights.iter().enumerate() {
            if w < 0 {
                return Err(crate::Error::Circuit(format!(
                    "row {i} has negative weight {w} in a relation"
                )));
            }
            idx.extend(std::iter::repeat_n(i as u32, w as usize));
        }
        Ok(self.take(&idx)?.batch)
    }
}
