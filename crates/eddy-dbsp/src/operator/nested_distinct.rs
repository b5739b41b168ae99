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
//! step; only those rows are evaluated.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::SchemaRef;

use super::fixpoint::Iteration;
use super::{KeyMap, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, ZSet};

/// A row's changes by iteration, in iteration order.
type History = Vec<(u32, i64)>;

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
    old: KeyMap<History>,
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
            old: KeyMap::default(),
            old_iterations: BTreeMap::new(),
            cur: KeyMap::default(),
        })
    }

    fn fold(&mut self) {
        for (row, (changes, _)) in std::mem::take(&mut self.cur) {
            let history = self.old.entry(row.clone()).or_default();
            for (i, w) in changes {
                let had = history.iter().any(|(it, _)| *it == i);
                add_at(history, i, w);
                let has = history.iter().any(|(it, _)| *it == i);
                let count = self.old_iterations.entry(i).or_default();
                match (had, has) {
                    (false, true) => *count += 1,
                    (true, false) => *count -= 1,
                    _ => {}
                }
            }
            if history.is_empty() {
                self.old.remove(&row);
            }
        }
        self.old_iterations.retain(|_, n| *n > 0);
        if let Some((&deepest, _)) = self.old_iterations.last_key_value() {
            self.ctx.reach(deepest);
        }
    }
}

impl Operator for NestedDistinct {
    fn name(&self) -> &str {
        "nested distinct"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.epoch)?;
        w.put(&self.old)?;
        w.put(&self.old_iterations)?;
        w.put(&self.cur)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        r.get_into(&mut self.epoch)?;
        r.get_into(&mut self.old)?;
        r.get_into(&mut self.old_iterations)?;
        r.get_into(&mut self.cur)
    }

    fn state_entries(&self) -> usize {
        self.old.len() + self.cur.len()
    }

    fn state_bytes(&self) -> usize {
        super::map_bytes(&self.old, |h| 16 * h.len())
            + super::map_bytes(&self.cur, |(h, _)| 16 * h.len())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let i = self.ctx.iteration();
        if self.ctx.epoch() != self.epoch {
            self.fold();
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
            let revisit: Vec<Vec<u8>> = self
                .cur
                .keys()
                .filter(|r| !changed.contains(r.as_slice()))
                .filter(|r| {
                    self.old
                        .get(*r)
                        .is_some_and(|h| h.iter().any(|(it, _)| *it == i))
                })
                .cloned()
                .collect();
            candidates.extend(revisit.into_iter().map(|r| (r, 0)));
        }
        let before = i.checked_sub(1);
        let mut out_rows = Vec::new();
        let mut out_weights = Vec::new();
        for (row, dw) in candidates {
            let old = self.old.get(&row);
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
