//! Lateness: drops the changes that arrive too late.
//!
//! A column declared with a lateness `l` promises that once a value `M` has
//! been seen, no change with a value below `M − l` will follow. The operator
//! keeps, per such column, the waterline `max(value − l)` over the rows of
//! all earlier steps; in a step, an insert or a delete whose value is below
//! the waterline is late: it is dropped and counted, and never reaches the
//! circuit. The other rows pass unchanged, so the circuit computes exactly
//! what a batch run over the rows that were not late would. Rows of one
//! step are never late with respect to each other; a NULL is never late.
//!
//! Before a primary key's upsert ([`Lateness::for_keyed_table`]) only
//! insertions are late: a deletion there names a key, whose stored row it
//! retracts whatever its time, and may carry placeholder values for the
//! columns it leaves out, which say nothing of its time. Deletions neither
//! are dropped nor move the waterlines.
//!
//! Incremental rule: a filter whose predicate (the waterlines) changes only
//! between steps; within a step it is linear.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, BooleanArray, Scalar};
use datafusion::arrow::compute::kernels::cmp::{eq, lt};
use datafusion::arrow::compute::{and_kleene, not, or_kleene};
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::min_max::MaxAccumulator;
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::PhysicalExpr;

use super::map::evaluate_one;
use super::waterline::Waterline;
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::filter_rows;
use crate::{Error, Result, ZSet};

/// One column with a lateness.
pub struct LateColumn {
    /// The column's index.
    pub column: usize,
    /// `column − lateness`, over the input rows (it must grow with the
    /// column: it is evaluated on the row of the column's greatest value).
    pub bound: Arc<dyn PhysicalExpr>,
}

/// Drops late changes; see the module documentation.
pub struct Lateness {
    columns: Vec<LateColumn>,
    /// Only insertions are late, and only they move the waterlines.
    insertions_only: bool,
    waterlines: Vec<Option<ScalarValue>>,
    /// The waterlines as of the end of the last step, for [`Lateness::waterline`].
    published: Arc<Mutex<Vec<Option<ScalarValue>>>>,
    late: Arc<AtomicU64>,
}

impl Lateness {
    /// Drops changes late on any of `columns`; counts them in `late`.
    pub fn new(columns: Vec<LateColumn>, late: Arc<AtomicU64>) -> Self {
        let waterlines = vec![None; columns.len()];
        Self {
            published: Arc::new(Mutex::new(waterlines.clone())),
            columns,
            insertions_only: false,
            waterlines,
            late,
        }
    }

    /// The same, before a primary key's upsert: only insertions are late
    /// (see the module documentation).
    pub fn for_keyed_table(columns: Vec<LateColumn>, late: Arc<AtomicU64>) -> Self {
        Self {
            insertions_only: true,
            ..Self::new(columns, late)
        }
    }

    /// The waterline of the `k`-th lateness column, as operators downstream
    /// read it: rows of later steps below it are dropped here, so none
    /// reaches them.
    pub fn waterline(&self, k: usize) -> Waterline {
        let published = Arc::clone(&self.published);
        Arc::new(move || published.lock().expect("waterlines poisoned")[k].clone())
    }

    /// The current waterline of each column (`None` before any row).
    pub fn waterlines(&self) -> &[Option<ScalarValue>] {
        &self.waterlines
    }
}

impl Operator for Lateness {
    fn name(&self) -> &str {
        "lateness"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.waterlines)?;
        w.put(&self.late.load(Ordering::Relaxed))
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        let waterlines: Vec<Option<ScalarValue>> = r.get()?;
        if waterlines.len() != self.columns.len() {
            return Err(r.corrupt("waterlines of another table"));
        }
        self.waterlines = waterlines;
        self.published
            .lock()
            .expect("waterlines poisoned")
            .clone_from(&self.waterlines);
        self.late.store(r.get()?, Ordering::Relaxed);
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let batch = change.batch();
        let mut late: Option<BooleanArray> = None;
        for (c, waterline) in self.columns.iter().zip(&self.waterlines) {
            let Some(w) = waterline else { continue };
            let values = batch.column(c.column);
            let w = w.cast_to(values.data_type())?.to_array()?;
            // NULL < w is NULL: never late.
            let below = lt(values, &Scalar::new(w))?;
            let below = BooleanArray::from_iter(below.iter().map(|b| Some(b == Some(true))));
            late = Some(match late {
                None => below,
                Some(l) => or_kleene(&l, &below)?,
            });
        }
        if let (true, Some(l)) = (self.insertions_only, &late) {
            let inserted: BooleanArray = change.weights().iter().map(|w| Some(*w > 0)).collect();
            late = Some(and_kleene(l, &inserted)?);
        }
        let kept = match late {
            Some(late) if late.true_count() > 0 => {
                let dropped: i64 = change
                    .weights()
                    .iter()
                    .zip(late.iter())
                    .filter(|(_, l)| *l == Some(true))
                    .map(|(w, _)| w.abs())
                    .sum();
                self.late.fetch_add(dropped as u64, Ordering::Relaxed);
                let keep = not(&late)?;
                let weights = change
                    .weights()
                    .iter()
                    .zip(keep.iter())
                    .filter(|(_, k)| *k == Some(true))
                    .map(|(w, _)| *w)
                    .collect();
                ZSet::new(filter_rows(batch, &keep)?, weights)
            }
            _ => change.clone(),
        };
        // The rows that move the waterlines.
        let seen = if self.insertions_only {
            let inserted: BooleanArray = kept.weights().iter().map(|w| Some(*w > 0)).collect();
            let weights = kept.weights().iter().filter(|w| **w > 0).copied().collect();
            ZSet::new(filter_rows(kept.batch(), &inserted)?, weights)
        } else {
            kept.clone()
        };
        for (c, waterline) in self.columns.iter().zip(self.waterlines.iter_mut()) {
            if seen.is_empty() {
                break;
            }
            // `value − lateness` grows with the value: evaluated on the row
            // of the greatest value only (over every row, subtracting an
            // interval from a timestamp took a tenth of a filter's step).
            let values = seen.batch().column(c.column);
            let mut max = MaxAccumulator::try_new(values.data_type())?;
            max.update_batch(std::slice::from_ref(values))?;
            let top = max.evaluate()?;
            if top.is_null() {
                continue;
            }
            let at = eq(values, &Scalar::new(top.to_array()?))?;
            let Some(row) = at.iter().position(|b| b == Some(true)) else {
                continue;
            };
            // A value within the lateness of its type's least one has no
            // waterline: `value − lateness` would wrap around (integers) or
            // fail (times), and a wrapped bound would make every later row
            // late.
            let Ok(m) = evaluate_one(&c.bound, &seen.batch().slice(row, 1)) else {
                continue;
            };
            let m = ScalarValue::try_from_array(&m, 0)?;
            if m.is_null() || m.partial_cmp(&top).is_some_and(|o| o.is_gt()) {
                continue;
            }
            *waterline = Some(match waterline.take() {
                Some(w)
                    if w.partial_cmp(&m)
                        .ok_or_else(|| incomparable(&w, &m))?
                        .is_ge() =>
                {
                    w
                }
                _ => m,
            });
        }
        self.published
            .lock()
            .expect("waterlines poisoned")
            .clone_from(&self.waterlines);
        Ok(kept)
    }
}

fn incomparable(a: &ScalarValue, b: &ScalarValue) -> Error {
    Error::Circuit(format!("cannot compare waterlines {a} and {b}"))
}
