//! Indexed traces: the integrated contents of a stream, grouped by key.
//!
//! A [`Trace`] maps a memcomparable key to the rows (also memcomparable
//! bytes) stored under it, each with its accumulated weight. Rows whose
//! weight sums to zero disappear, so a trace always holds a consolidated
//! Z-set. Keys and rows are kept in byte order, which is the SQL order of the
//! encoded columns, so a cursor can seek a key and walk forward from it.
//!
//! This is the first cut of Eddy's trace: one ordered in-memory index per
//! operator. The target design (an LSM spine of immutable sorted batches
//! merged by size level, spilled to files past a memory budget) keeps this
//! interface; see `docs/architecture.md`.

use std::collections::BTreeMap;
use std::ops::Bound;

/// Rows under one key, with their weights.
pub type Rows = BTreeMap<Vec<u8>, i64>;

/// A consolidated, indexed Z-set.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    entries: BTreeMap<Vec<u8>, Rows>,
    rows: usize,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `weight` to `row` under `key`.
    pub fn update(&mut self, key: &[u8], row: &[u8], weight: i64) {
        if weight == 0 {
            return;
        }
        let rows = match self.entries.get_mut(key) {
            Some(rows) => rows,
            None => self.entries.entry(key.to_vec()).or_default(),
        };
        match rows.get_mut(row) {
            Some(w) => {
                *w += weight;
                if *w == 0 {
                    rows.remove(row);
                    self.rows -= 1;
                    if rows.is_empty() {
                        self.entries.remove(key);
                    }
                }
            }
            None => {
                rows.insert(row.to_vec(), weight);
                self.rows += 1;
            }
        }
    }

    /// The rows under `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<&Rows> {
        self.entries.get(key)
    }

    /// Number of distinct (key, row) pairs.
    pub fn len(&self) -> usize {
        self.rows
    }

    /// Whether the trace is empty.
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Number of distinct keys.
    pub fn num_keys(&self) -> usize {
        self.entries.len()
    }

    /// Every key with its rows, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Rows)> {
        self.entries.iter().map(|(k, v)| (k.as_slice(), v))
    }

    /// A cursor positioned at the first key not less than `key`.
    pub fn seek<'a>(&'a self, key: &[u8]) -> impl Iterator<Item = (&'a [u8], &'a Rows)> + 'a {
        self.entries
            .range::<[u8], _>((Bound::Included(key), Bound::Unbounded))
            .map(|(k, v)| (k.as_slice(), v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        /// A trace equals a naive map of accumulated weights, without zeros.
        #[test]
        fn trace_matches_naive_model(ops in prop::collection::vec((0u8..4, 0u8..4, -2i64..3), 0..200)) {
            let mut trace = Trace::new();
            let mut model: HashMap<(u8, u8), i64> = HashMap::new();
            for &(k, r, w) in &ops {
                trace.update(&[k], &[r], w);
                *model.entry((k, r)).or_default() += w;
            }
            model.retain(|_, w| *w != 0);
            let got: HashMap<(u8, u8), i64> = trace
                .iter()
                .flat_map(|(k, rows)| rows.iter().map(move |(r, w)| ((k[0], r[0]), *w)))
                .collect();
            prop_assert_eq!(trace.len(), model.len());
            prop_assert_eq!(got, model);
            let keys: Vec<u8> = trace.seek(&[2]).map(|(k, _)| k[0]).collect();
            prop_assert!(keys.iter().all(|&k| k >= 2));
            prop_assert!(keys.windows(2).all(|w| w[0] < w[1]));
        }
    }
}
