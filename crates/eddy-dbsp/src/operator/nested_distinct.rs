//! Distinct inside a fixed point's nested circuit.
//!
//! Incremental rule (non-linear, in two-dimensional time): with `x[t][i]`
//! the integrated input at (step `t`, iteration `i`) and `D(w) = 1` when
//! `w > 0`, else 0, the output change is
//!
//! ```text
//! δ[t][i] = D(x[t][i]) − D(x[t−1][i]) − D(x[t][i−1]) + D(x[t−1][i−1])
//! ```
//!
//! For every row the operator keeps its input changes by iteration, split
//! into those of earlier steps and those of this step. A row can change the
//! output at iteration `i` only if it changes now, or if it changed at an
//! earlier iteration of this step and also at iteration `i` of an earlier
//! step; only those rows are evaluated. The changes of earlier steps are a
//! [`StateMap`], so they go to disk with the pipeline's storage.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::SchemaRef;

use super::fixpoint::Iteration;
use super::state_map::{allocation, StateMap, StateValue};
use super::{KeyMap, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Error, Result, ZSet};

/// A row's changes by iteration, in iteration order.
type History = Vec<(u32, i64)>;

/// What a saved state starts with since the changes of earlier steps are a
/// [`StateMap`]; an earlier state starts with its epoch, never this.
const STATE_MAP_FORMAT: u64 = u64::MAX;

impl StateValue for History {
    fn encode(&self, out: &mut Vec<u8>) {
        for (i, w) in self {
            out.extend_from_slice(&i.to_le_bytes());
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        if !bytes.len().is_multiple_of(12) {
            return Err(Error::Storage(format!(
                "a stored history of changes has {} bytes",
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(12)
            .map(|c| {
                let (i, w) = c.split_at(4);
                (
                    u32::from_le_bytes(i.try_into().expect("4 bytes")),
                    i64::from_le_bytes(w.try_into().expect("8 bytes")),
                )
            })
            .collect())
    }

    fn heap_bytes(&self) -> usize {
        allocation(self.capacity() * std::mem::size_of::<(u32, i64)>())
    }
}

/// The sum of the changes at iterations up to `i` (`None`: iteration −1, none).
fn sum_to(history: Option<&History>, i: Option<u32>) -> i64 {
    let Some(h) = history else { return 0 };
    h.iter()
        .take_while(|(it, _)| i.is_some_and(|i| *it <= i))
        .map(|(_, w)| w)
        .sum()
}

/// Adds `w` at iteration `i`, keeping iteration order and dropping zeros.
fn add_at(history: &mut History, i: u32, w: i64) {
    match history.binary_search_by_key(&i, |(it, _)| *it) {
        Ok(p) => {
            history[p].1 += w;
            if history[p].1 == 0 {
                history.remove(p);
            }
        }
        Err(p) => history.insert(p, (i, w)),
    }
}

fn positive(w: i64) -> i64 {
    i64::from(w > 0)
}

/// Set semantics over a nested multiset stream.
pub struct NestedDistinct {
    codec: RowCodec,
    schema: SchemaRef,
    ctx: Iteration,
    epoch: u64,
    /// Changes of earlier outer steps, by row.
    old: StateMap<History>,
    /// How many rows of `old` changed at each iteration.
    old_iterations: BTreeMap<u32, usize>,
    /// Changes of this outer step, by row: by iteration, and their sum.
    cur: KeyMap<(History, i64)>,
}

impl NestedDistinct {
    /// A nested distinct over rows of `schema`, reading its position from `ctx`.
    pub fn new(schema: &SchemaRef, ctx: Iteration) -> Result<Self> {
        Ok(Self {
            codec: RowCodec::for_schema(schema)?,
            schema: schema.clone(),
            ctx,
            epoch: 0,
            old: StateMap::new(),
            old_iterations: BTreeMap::new(),
            cur: KeyMap::default(),
        })
    }

    fn fold(&mut self) -> Result<()> {
        for (row, (changes, _)) in std::mem::take(&mut self.cur) {
            // Taken out and put back, so that the map counts its bytes.
            let mut history = self.old.remove(&row)?.unwrap_or_default();
            for (i, w) in changes {
                let had = history.iter().any(|(it, _)| *it == i);
                add_at(&mut history, i, w);
                let has = history.iter().any(|(it, _)| *it == i);
                let count = self.old_iterations.entry(i).or_default();
                match (had, has) {
                    (false, true) => *count += 1,
                    (true, false) => *count -= 1,
                    _ => {}
                }
            }
            if !history.is_empty() {
                self.old.insert(&row, history)?;
            }
        }
        self.old.end_step();
        self.old_iterations.retain(|_, n| *n > 0);
        if let Some((&deepest, _)) = self.old_iterations.last_key_value() {
            self.ctx.reach(deepest);
        }
        Ok(())
    }
}

impl Operator for NestedDistinct {
    fn name(&self) -> &str {
        "nested distinct"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&STATE_MAP_FORMAT)?;
        w.put(&self.epoch)?;
        self.old.save(w)?;
        w.put(&self.old_iterations)?;
        w.put(&self.cur)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        let first: u64 = r.get()?;
        if first == STATE_MAP_FORMAT {
            r.get_into(&mut self.epoch)?;
            self.old.restore(r)?;
        } else {
            // A state saved before the changes were a state map: its epoch,
            // then the changes as one map.
            self.epoch = first;
            let old: KeyMap<History> = r.get()?;
            for (row, history) in old {
                self.old.insert(&row, history)?;
            }
        }
        r.get_into(&mut self.old_iterations)?;
        r.get_into(&mut self.cur)
    }

    fn state_entries(&self) -> usize {
        self.old.len() + self.cur.len()
    }

    fn state_bytes(&self) -> usize {
        self.old.bytes() + super::map_bytes(&self.cur, |(h, _)| 16 * h.len())
    }

    fn state_storage_bytes(&self) -> usize {
        self.old.storage_bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let i = self.ctx.iteration();
        if self.ctx.epoch() != self.epoch {
            self.fold()?;
            self.epoch = self.ctx.epoch();
        }
        let change = inputs[0].consolidate_with(&self.codec)?;
        let rows = self.codec.encode(change.batch().columns(), change.len())?;
        let mut candidates: Vec<(Vec<u8>, i64)> = (0..change.len())
            .map(|j| (rows.row(j).to_vec(), change.weights()[j]))
            .collect();
        if self.old_iterations.contains_key(&i) {
            let changed: std::collections::HashSet<&[u8]> =
                candidates.iter().map(|(r, _)| r.as_slice()).collect();
            let mut revisit: Vec<Vec<u8>> = Vec::new();
            for r in self.cur.keys() {
                if changed.contains(r.as_slice()) {
                    continue;
                }
                let old = self.old.get(r)?;
                if old.is_some_and(|h| h.iter().any(|(it, _)| *it == i)) {
                    revisit.push(r.clone());
                }
            }
            candidates.extend(revisit.into_iter().map(|r| (r, 0)));
        }
        let before = i.checked_sub(1);
        let mut out_rows = Vec::new();
        let mut out_weights = Vec::new();
        for (row, dw) in candidates {
            let old = self.old.get(&row)?;
            let cur = self.cur.get(&row);
            let (old_i, old_before) = (sum_to(old, Some(i)), sum_to(old, before));
            let cur_before = cur.map_or(0, |c| c.1);
            let out = positive(old_i + cur_before + dw)
                - positive(old_i)
                - positive(old_before + cur_before)
                + positive(old_before);
            if dw != 0 {
                let (history, total) = self.cur.entry(row.clone()).or_default();
                add_at(history, i, dw);
                *total += dw;
            }
            if out != 0 {
                out_rows.push(row);
                out_weights.push(out);
            }
        }
        if out_weights.is_empty() {
            return Ok(ZSet::empty(&self.schema));
        }
        let batch = self
            .codec
            .decode_batch(&self.schema, out_rows.iter().map(Vec::as_slice))?;
        Ok(ZSet::new(batch, out_weights))
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn distinct() -> NestedDistinct {
        let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        NestedDistinct::new(&schema, Iteration::new()).unwrap()
    }

    /// A state saved before the changes of earlier steps were a state map
    /// (its epoch first, then one map) still restores, and is saved anew
    /// in the present form.
    #[test]
    fn a_state_of_the_earlier_form_restores() {
        let dir = tempfile::tempdir().unwrap();
        let (earlier, now) = (dir.path().join("earlier"), dir.path().join("now"));
        std::fs::create_dir_all(&earlier).unwrap();
        std::fs::create_dir_all(&now).unwrap();
        let mut old: KeyMap<History> = KeyMap::default();
        old.insert(b"row-a".to_vec(), vec![(0, 1), (2, -1)]);
        old.insert(b"row-b".to_vec(), vec![(1, 2)]);
        let iterations: BTreeMap<u32, usize> = [(0, 1), (1, 1), (2, 1)].into();
        let mut w = StateWriter::create(&earlier).unwrap();
        w.put(&7u64).unwrap();
        w.put(&old).unwrap();
        w.put(&iterations).unwrap();
        w.put(&KeyMap::<(History, i64)>::default()).unwrap();
        w.finish().unwrap();

        let mut restored = distinct();
        let mut r = StateReader::open(&earlier).unwrap();
        restored.restore(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!(restored.epoch, 7);
        assert_eq!(restored.state_entries(), 2);
        assert_eq!(
            restored.old.peek(b"row-a").unwrap(),
            Some(vec![(0, 1), (2, -1)])
        );

        let mut w = StateWriter::create(&now).unwrap();
        restored.save(&mut w).unwrap();
        w.finish().unwrap();
        // Saved anew in the present form, marker first.
        let first: u64 = StateReader::open(&now).unwrap().get().unwrap();
        assert_eq!(first, STATE_MAP_FORMAT);
        let mut again = distinct();
        let mut r = StateReader::open(&now).unwrap();
        again.restore(&mut r).unwrap();
        r.finish().unwrap();
        assert_eq!((again.epoch, again.state_entries()), (7, 2));
        assert_eq!(again.old.peek(b"row-b").unwrap(), Some(vec![(1, 2)]));
        assert_eq!(again.old_iterations, iterations);
    }

    #[test]
    fn histories_round_trip_through_bytes() {
        let h: History = vec![(0, -3), (5, i64::MAX), (u32::MAX, 1)];
        let mut bytes = Vec::new();
        h.encode(&mut bytes);
        assert_eq!(History::decode(&bytes).unwrap(), h);
        assert!(History::decode(&bytes[..13]).is_err());
    }
}
