//! Append-only input: refuses the deletions sent to a table declared
//! `WITH ('append_only' = 'true')`.
//!
//! The declaration is a promise that the table only ever receives
//! insertions; the SQL layer relies on it (a top-k over such a table
//! keeps only its first rows, see [`RankTopK::inserts_only`]). Instead of
//! trusting it, the operator checks it: a change of negative weight is
//! dropped and counted, never reaches the circuit, and the table behaves
//! as if it had not been sent. Insertions pass unchanged.
//!
//! Incremental rule: a filter on the weight, linear.
//!
//! [`RankTopK::inserts_only`]: super::RankTopK::inserts_only

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::BooleanArray;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::filter_rows;
use crate::{Result, ZSet};

/// Drops deletions; see the module documentation.
pub struct AppendOnly {
    refused: Arc<AtomicU64>,
}

impl AppendOnly {
    /// Drops deletions, counting the rows refused (times their weight) in
    /// `refused`.
    pub fn new(refused: Arc<AtomicU64>) -> Self {
        Self { refused }
    }
}

impl Operator for AppendOnly {
    fn name(&self) -> &str {
        "append_only"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.refused.load(Ordering::Relaxed))
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.refused.store(r.get()?, Ordering::Relaxed);
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let weights = change.weights();
        let refused: i64 = weights.iter().filter(|&&w| w < 0).map(|w| -w).sum();
        if refused == 0 {
            return Ok(change.clone());
        }
        self.refused.fetch_add(refused as u64, Ordering::Relaxed);
        let keep = BooleanArray::from_iter(weights.iter().map(|&w| Some(w > 0)));
        let kept = weights.iter().copied().filter(|&w| w > 0).collect();
        Ok(ZSet::new(filter_rows(change.batch(), &keep)?, kept))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn deletions_are_dropped_and_counted() {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2, 3, 4]))])
                .unwrap();
        let change = ZSet::new(batch, vec![1, -2, 3, -1]);
        let refused = Arc::new(AtomicU64::new(0));
        let mut op = AppendOnly::new(Arc::clone(&refused));
        let out = op.eval(&[&change]).unwrap();
        assert_eq!(out.weights(), &[1, 3]);
        let xs = out
            .batch()
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(xs.values(), &[1, 3]);
        assert_eq!(refused.load(Ordering::Relaxed), 3);
    }
}
