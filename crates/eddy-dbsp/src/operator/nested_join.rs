//! Inner equi-join inside a fixed point's nested circuit.
//!
//! Incremental rule (bilinear, in two-dimensional time): the output change
//! at (step `t`, iteration `i`) sums the products of every pair of input
//! changes whose later coordinates are exactly `(t, i)`. With `a`, `b` this
//! iteration's input changes, `CA`, `CB` the changes of this step at earlier
//! iterations, and `OA`, `OB` the changes of earlier steps (`≤ i`: at
//! iterations up to `i`, `= i`: at iteration `i`):
//!
//! ```text
//! δ = a ⋈ (CB + b + OB≤i) + (CA + OA≤i) ⋈ b + CA ⋈ OB=i + OA=i ⋈ CB
//! ```
//!
//! Each side keeps, indexed by the join key, the changes of earlier steps
//! with their iteration, and this step's changes summed over iterations
//! (with a log of their iterations, folded in at the next step). Lookups touch only the keys
//! that changed, so work follows the change. Output rows are the left
//! columns then the right columns, as [`Join`]'s.

use std::collections::BTreeSet;

use datafusion::arrow::datatypes::{DataType, SchemaRef};

use super::fixpoint::Iteration;
use super::join::{Encoded, Join, JoinSide};
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, Trace, ZSet};

/// One side's nested state.
#[derive(Default)]
struct Side {
    /// Changes of earlier outer steps: key ↦ (iteration ++ row).
    old: Trace,
    /// Iterations at which `old` holds changes.
    old_iterations: BTreeSet<u32>,
    /// Changes of this outer step at the iterations evaluated so far,
    /// summed over them: key ↦ row.
    cur: Trace,
    /// The same changes with their iterations, folded into `old` at the
    /// next step: (key, iteration ++ row, weight).
    log: Vec<(Vec<u8>, Vec<u8>, i64)>,
}

impl Side {
    fn fold(&mut self, ctx: &Iteration) {
        if self.log.is_empty() {
            return;
        }
        for (k, r, w) in std::mem::take(&mut self.log) {
            self.old.update(&k, &r, w);
            self.old_iterations.insert(untag(&r).0);
        }
        self.old.seal();
        self.cur.clear();
        if let Some(&deepest) = self.old_iterations.last() {
            ctx.reach(deepest);
        }
    }

    fn add(&mut self, i: u32, enc: &Encoded, weights: &[i64]) {
        for (j, &w) in weights.iter().enumerate() {
            if enc.matchable[j] {
                let (key, row) = (enc.keys.row(j), enc.rows.row(j));
                self.cur.update(key, row, w);
                self.log.push((key.to_vec(), tag(i, row), w));
            }
        }
        self.cur.seal();
    }
}

/// A row prefixed by its iteration (big-endian, so rows sort by iteration).
fn tag(i: u32, row: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + row.len());
    out.extend_from_slice(&i.to_be_bytes());
    out.extend_from_slice(row);
    out
}

/// The iteration and row of a tagged row.
fn untag(tagged: &[u8]) -> (u32, &[u8]) {
    let (i, row) = tagged.split_at(4);
    (u32::from_be_bytes(i.try_into().expect("four bytes")), row)
}

/// Matched pairs of encoded rows, with their weights.
#[derive(Default)]
struct Pairs {
    left: Vec<Vec<u8>>,
    right: Vec<Vec<u8>>,
    weights: Vec<i64>,
}

impl Pairs {
    fn push(&mut self, left: &[u8], right: &[u8], weight: i64) {
        self.left.push(left.to_vec());
        self.right.push(right.to_vec());
        self.weights.push(weight);
    }
}

/// Incremental inner join of two nested streams.
pub struct NestedJoin {
    join: Join,
    ctx: Iteration,
    epoch: u64,
    left: Side,
    right: Side,
}

impl NestedJoin {
    /// A nested join of `left` and `right` on their keys (see
    /// [`Join::new`]), reading its position from `ctx`.
    pub fn new(
        left: JoinSide,
        right: JoinSide,
        key_types: &[DataType],
        nulls_equal: bool,
        schema: SchemaRef,
        ctx: Iteration,
    ) -> Result<Self> {
        Ok(Self {
            join: Join::new(left, right, key_types, nulls_equal, schema)?,
            ctx,
            epoch: 0,
            left: Side::default(),
            right: Side::default(),
        })
    }
}

/// Pushes `(probe row, stored row)` pairs for the stored rows under `key`
/// whose iteration passes `keep`, oriented by `probe_is_left`.
#[allow(clippy::too_many_arguments)]
fn probe(
    pairs: &mut Pairs,
    trace: &Trace,
    key: &[u8],
    row: &[u8],
    weight: i64,
    probe_is_left: bool,
    keep: impl Fn(u32) -> bool,
) {
    for (tagged, w) in trace.get(key) {
        let (it, stored) = untag(tagged);
        if !keep(it) {
            continue;
        }
        if probe_is_left {
            pairs.push(row, stored, weight * w);
        } else {
            pairs.push(stored, row, w * weight);
        }
    }
}

/// `cur ⋈ old=i`: every row of this step's earlier iterations (`cur`)
/// against the rows of `old` stored at exactly iteration `i`,
/// `cur_is_left` orienting the pairs.
fn cross(pairs: &mut Pairs, cur: &Trace, old: &Side, i: u32, cur_is_left: bool) {
    if cur.is_empty() || !old.old_iterations.contains(&i) {
        return;
    }
    for (key, row, w) in cur.iter() {
        probe(pairs, &old.old, key, row, w, cur_is_left, |o| o == i);
    }
}

/// Pushes pairs for this step's rows (`cur`, untagged) under `key`.
fn probe_cur(pairs: &mut Pairs, cur: &Trace, key: &[u8], row: &[u8], weight: i64, left: bool) {
    for (stored, w) in cur.get(key) {
        if left {
            pairs.push(row, stored, weight * w);
        } else {
            pairs.push(stored, row, w * weight);
        }
    }
}

impl Operator for NestedJoin {
    fn name(&self) -> &str {
        "nested join"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.join.save(w)?;
        w.put(&self.epoch)?;
        for side in [&self.left, &self.right] {
            side.old.save(w)?;
            w.put(&side.old_iterations)?;
            side.cur.save(w)?;
            w.put(&side.log)?;
        }
        Ok(())
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.join.restore(r)?;
        r.get_into(&mut self.epoch)?;
        for side in [&mut self.left, &mut self.right] {
            side.old.restore(r)?;
            r.get_into(&mut side.old_iterations)?;
            side.cur.restore(r)?;
            r.get_into(&mut side.log)?;
        }
        Ok(())
    }

    fn state_entries(&self) -> usize {
        [&self.left, &self.right]
            .iter()
            .map(|s| s.old.entries() + s.cur.entries() + s.log.len())
            .sum()
    }

    fn state_storage_bytes(&self) -> usize {
        [&self.left, &self.right]
            .iter()
            .map(|s| s.old.storage_bytes() + s.cur.storage_bytes())
            .sum()
    }

    fn state_bytes(&self) -> usize {
        [&self.left, &self.right]
            .iter()
            .map(|s| {
                s.old.bytes()
                    + s.cur.bytes()
                    + s.log
                        .iter()
                        .map(|(k, r, _)| k.len() + r.len() + 56)
                        .sum::<usize>()
            })
            .sum()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let i = self.ctx.iteration();
        if self.ctx.epoch() != self.epoch {
            self.left.fold(&self.ctx);
            self.right.fold(&self.ctx);
            self.epoch = self.ctx.epoch();
        }
        let (da, db) = (inputs[0], inputs[1]);
        let ea = (!da.is_empty())
            .then(|| self.join.encode(&self.join.left, da))
            .transpose()?;
        let eb = (!db.is_empty())
            .then(|| self.join.encode(&self.join.right, db))
            .transpose()?;
        let mut pairs = Pairs::default();
        // The cross terms first, while `cur` holds earlier iterations only.
        cross(&mut pairs, &self.left.cur, &self.right, i, true);
        cross(&mut pairs, &self.right.cur, &self.left, i, false);
        if let Some(eb) = &eb {
            // (CA + OA≤i) ⋈ b.
            for (j, &w) in db.weights().iter().enumerate() {
                if eb.matchable[j] {
                    let (key, row) = (eb.keys.row(j), eb.rows.row(j));
                    probe_cur(&mut pairs, &self.left.cur, key, row, w, false);
                    probe(&mut pairs, &self.left.old, key, row, w, false, |o| o <= i);
                }
            }
            self.right.add(i, eb, db.weights());
        }
        if let Some(ea) = &ea {
            // a ⋈ (CB + b + OB≤i): b is in CB now.
            for (j, &w) in da.weights().iter().enumerate() {
                if ea.matchable[j] {
                    let (key, row) = (ea.keys.row(j), ea.rows.row(j));
                    probe_cur(&mut pairs, &self.right.cur, key, row, w, true);
                    probe(&mut pairs, &self.right.old, key, row, w, true, |o| o <= i);
                }
            }
            self.left.add(i, ea, da.weights());
        }
        if pairs.weights.is_empty() {
            return Ok(ZSet::empty(&self.join.schema));
        }
        let left = self
            .join
            .left
            .rows
            .decode(pairs.left.iter().map(Vec::as_slice))?;
        let right = self
            .join
            .right
            .rows
            .decode(pairs.right.iter().map(Vec::as_slice))?;
        self.join.assemble(left, right, pairs.weights)
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}
