//! ASOF join: each left row with the one right row of the same key whose
//! time is the closest not past it (`l.ts >= r.ts`: the latest right row at
//! or before the left row; `>`, `<=`, `<` alike), padded with NULLs when
//! there is none and the join is a LEFT ASOF join.
//!
//! Incremental rule: for a fixed right side the join is linear in the left
//! side (each left row yields one output row or none), so
//! `Δ(L ⋈ R) = ΔL ⋈ R_new + (L_old ⋈ R_new − L_old ⋈ R_old)`. Both inputs
//! are kept in traces indexed by the join key. The changed left rows are
//! matched against the key's right rows after the step; only for keys whose
//! right rows changed are the key's existing left rows matched again, before
//! and after, and their difference emitted. A stream of left rows against a
//! right side that changes seldom (a side table) costs what its change
//! costs, not the left side's history. NULL keys and NULL times never match. Right rows
//! that tie on time are told apart by their bytes (the last one wins for
//! `>=`/`>`, the first for `<=`/`<`), so the answer is deterministic.
//! With waterlines on both times, rows that no later change can reach are
//! forgotten (see [`AsofJoin::with_waterline`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;

use super::map::{evaluate, evaluate_one};
use super::waterline::{Collector, Waterline};
use super::{key_rows, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{batch_with_rows, EncodedRows, RowCodec};
use crate::{Result, Trace, ZSet};

/// How the left time compares with the matching right time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsofMatch {
    /// `l.ts >= r.ts`: the latest right row at or before the left row.
    AtOrBefore,
    /// `l.ts > r.ts`: the latest right row strictly before.
    Before,
    /// `l.ts <= r.ts`: the earliest right row at or after.
    AtOrAfter,
    /// `l.ts < r.ts`: the earliest right row strictly after.
    After,
}

/// One side of an ASOF join: its key and time expressions.
pub struct AsofSide {
    /// Equi-join key expressions.
    pub keys: Vec<Arc<dyn PhysicalExpr>>,
    /// The time expression.
    pub time: Arc<dyn PhysicalExpr>,
}

/// Incremental ASOF join.
pub struct AsofJoin {
    left: AsofSide,
    right: AsofSide,
    matching: AsofMatch,
    left_outer: bool,
    key_codec: RowCodec,
    time_codec: RowCodec,
    left_codec: RowCodec,
    right_codec: RowCodec,
    left_schema: SchemaRef,
    right_schema: SchemaRef,
    schema: SchemaRef,
    left_trace: Trace,
    right_trace: Trace,
    /// Forgets rows below the lesser of both times' waterlines.
    gc: Option<Collector>,
    time_type: DataType,
}

impl AsofJoin {
    /// Joins rows of `left_schema` with rows of `right_schema`; keys are
    /// compared as `key_types` and times as `time_type` (the right side's
    /// expressions must already yield those types). Output rows (left
    /// columns, then right columns) have `schema`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        left_schema: SchemaRef,
        right_schema: SchemaRef,
        left: AsofSide,
        right: AsofSide,
        key_types: &[DataType],
        time_type: &DataType,
        matching: AsofMatch,
        left_outer: bool,
        schema: SchemaRef,
    ) -> Result<Self> {
        Ok(Self {
            key_codec: RowCodec::new(key_types)?,
            time_codec: RowCodec::new(std::slice::from_ref(time_type))?,
            left_codec: RowCodec::for_schema(&left_schema)?,
            right_codec: RowCodec::for_schema(&right_schema)?,
            left,
            right,
            matching,
            left_outer,
            left_schema,
            right_schema,
            schema,
            left_trace: Trace::new(),
            right_trace: Trace::new(),
            gc: None,
            time_type: time_type.clone(),
        })
    }

    /// Forgets the rows that no later change can reach, given `bound`,
    /// the lesser of the left and right times' waterlines (call it `m`):
    /// no later change of either side has a time below `m`. For `>=`/`>`
    /// a left row before `m` keeps its match for ever (later right rows
    /// come after it) and is forgotten; of a key's right rows before `m`
    /// only the latest can still be a match (for left rows at or after
    /// `m`), so the others are forgotten. For `<=`/`<` the right rows
    /// before `m` can match no left row still kept or to come.
    pub fn with_waterline(mut self, bound: Waterline) -> Self {
        self.gc = Some(Collector::new(0, bound));
        self
    }

    /// The encoded times of a trace's entries (`None` for a NULL time).
    fn times(
        &self,
        entries: &[(&[u8], &[u8])],
        codec: &RowCodec,
        schema: &SchemaRef,
        time: &Arc<dyn PhysicalExpr>,
    ) -> Result<Vec<Option<Vec<u8>>>> {
        let batch = codec.decode_batch(schema, entries.iter().map(|(_, r)| *r))?;
        let times = evaluate_one(time, &batch)?;
        let bytes = self
            .time_codec
            .encode(&[Arc::clone(&times)], batch.num_rows())?;
        Ok((0..batch.num_rows())
            .map(|i| times.is_valid(i).then(|| bytes.row(i).to_vec()))
            .collect())
    }

    fn collect(&mut self, updates: usize) -> Result<()> {
        let Some((_, bound)) = Collector::due_in(&mut self.gc, updates) else {
            return Ok(());
        };
        let bound = bound.cast_to(&self.time_type)?.to_array()?;
        let m = self.time_codec.encode(&[bound], 1)?.row(0).to_vec();
        let before = |t: &Option<Vec<u8>>| t.as_ref().is_some_and(|t| *t < m);
        let latest_wins = matches!(self.matching, AsofMatch::AtOrBefore | AsofMatch::Before);

        let left: Vec<(&[u8], &[u8])> = self.left_trace.iter().map(|(k, r, _)| (k, r)).collect();
        let mut dead_left: std::collections::HashSet<(Vec<u8>, Vec<u8>)> = Default::default();
        if latest_wins {
            let times = self.times(&left, &self.left_codec, &self.left_schema, &self.left.time)?;
            for ((k, r), t) in left.iter().zip(&times) {
                if before(t) {
                    dead_left.insert((k.to_vec(), r.to_vec()));
                }
            }
        }
        let right: Vec<(&[u8], &[u8])> = self.right_trace.iter().map(|(k, r, _)| (k, r)).collect();
        let times = self.times(
            &right,
            &self.right_codec,
            &self.right_schema,
            &self.right.time,
        )?;
        let mut dead_right: std::collections::HashSet<(Vec<u8>, Vec<u8>)> = Default::default();
        let mut i = 0;
        while i < right.len() {
            let key = right[i].0;
            let mut end = i;
            while end < right.len() && right[end].0 == key {
                end += 1;
            }
            // The right rows of this key before `m`; keep the latest.
            let mut old: Vec<usize> = (i..end).filter(|&j| before(&times[j])).collect();
            if latest_wins {
                old.sort_by(|&a, &b| (&times[a], right[a].1).cmp(&(&times[b], right[b].1)));
                old.pop();
            }
            for j in old {
                dead_right.insert((right[j].0.to_vec(), right[j].1.to_vec()));
            }
            i = end;
        }
        drop((left, right));
        let mut live = 0;
        if !dead_left.is_empty() {
            live += self
                .left_trace
                .retain(|k, r| !dead_left.contains(&(k.to_vec(), r.to_vec())));
        }
        if !dead_right.is_empty() {
            live += self
                .right_trace
                .retain(|k, r| !dead_right.contains(&(k.to_vec(), r.to_vec())));
        }
        if let Some(gc) = self.gc.as_mut() {
            gc.collected(live.max(self.left_trace.entries() + self.right_trace.entries()));
        }
        Ok(())
    }

    /// Encoded keys of a change; `None` where a key column is NULL.
    fn keys(&self, side: &AsofSide, change: &ZSet) -> Result<Vec<Option<Vec<u8>>>> {
        let columns = evaluate(&side.keys, change)?;
        let rows = self.key_codec.encode(&columns, change.len())?;
        Ok((0..change.len())
            .map(|i| (!columns.iter().any(|c| c.is_null(i))).then(|| rows.row(i).to_vec()))
            .collect())
    }

    /// The joined rows of one key, from the traces as they are now.
    fn matches(&self, key: &[u8]) -> Result<Option<RecordBatch>> {
        let left = key_rows(&self.left_trace, &self.left_codec, &self.left_schema, key)?;
        if left.num_rows() == 0 {
            return Ok(None);
        }
        Ok(Some(self.join_rows(&left, key)?.0))
    }

    /// Each of `left`'s rows (all of key `key`) with its match among the
    /// key's right rows now in the trace (or NULLs, in a LEFT join), and
    /// the indices of the left rows that are in the output.
    fn join_rows(&self, left: &RecordBatch, key: &[u8]) -> Result<(RecordBatch, Vec<u32>)> {
        let right = key_rows(
            &self.right_trace,
            &self.right_codec,
            &self.right_schema,
            key,
        )?;
        let l_time = evaluate_one(&self.left.time, left)?;
        let r_time = evaluate_one(&self.right.time, &right)?;
        let l_bytes = self
            .time_codec
            .encode(&[Arc::clone(&l_time)], left.num_rows())?;
        let r_bytes = self
            .time_codec
            .encode(&[Arc::clone(&r_time)], right.num_rows())?;
        // Right rows with a time, in time order (ties keep row order).
        let mut order: Vec<usize> = (0..right.num_rows())
            .filter(|&i| !r_time.is_null(i))
            .collect();
        order.sort_by(|&a, &b| r_bytes.row(a).cmp(r_bytes.row(b)));
        let mut left_idx = Vec::new();
        let mut right_idx: Vec<Option<u32>> = Vec::new();
        for i in 0..left.num_rows() {
            let found = if l_time.is_null(i) {
                None
            } else {
                let t = l_bytes.row(i);
                let le = order.partition_point(|&j| r_bytes.row(j) <= t);
                let lt = order.partition_point(|&j| r_bytes.row(j) < t);
                match self.matching {
                    AsofMatch::AtOrBefore => le.checked_sub(1),
                    AsofMatch::Before => lt.checked_sub(1),
                    AsofMatch::AtOrAfter => (lt < order.len()).then_some(lt),
                    AsofMatch::After => (le < order.len()).then_some(le),
                }
                .map(|p| order[p] as u32)
            };
            if found.is_some() || self.left_outer {
                left_idx.push(i as u32);
                right_idx.push(found);
            }
        }
        let kept = left_idx.clone();
        let left_idx = UInt32Array::from(left_idx);
        let right_idx = UInt32Array::from(right_idx);
        let mut columns: Vec<ArrayRef> = left
            .columns()
            .iter()
            .map(|c| take(c, &left_idx, None))
            .collect::<std::result::Result<_, _>>()?;
        for (c, field) in right.columns().iter().zip(self.right_schema.fields()) {
            columns.push(if right.num_rows() == 0 {
                new_null_array(field.data_type(), right_idx.len())
            } else {
                take(c, &right_idx, None)?
            });
        }
        let joined = batch_with_rows(&self.schema, columns, left_idx.len())?;
        Ok((joined, kept))
    }
}

impl Operator for AsofJoin {
    fn name(&self) -> &str {
        "asof_join"
    }

    fn partitioned(&self) -> bool {
        !self.left.keys.is_empty()
    }

    fn partition_keys(&self, input: usize, change: &ZSet) -> Result<EncodedRows> {
        let side = if input == 0 { &self.left } else { &self.right };
        self.key_codec
            .encode(&evaluate(&side.keys, change)?, change.len())
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.left_trace.save(w)?;
        self.right_trace.save(w)?;
        Collector::save_all(w, &self.gc)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.left_trace.restore(r)?;
        self.right_trace.restore(r)?;
        Collector::restore_all(r, &mut self.gc)
    }

    fn state_entries(&self) -> usize {
        self.left_trace.entries() + self.right_trace.entries()
    }

    fn state_storage_bytes(&self) -> usize {
        self.left_trace.storage_bytes() + self.right_trace.storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.left_trace.bytes() + self.right_trace.bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let (lc, rc) = (inputs[0], inputs[1]);
        let lkeys = self.keys(&self.left, lc)?;
        let rkeys = self.keys(&self.right, rc)?;
        let mut parts = Vec::new();
        // L_old ⋈ R_new − L_old ⋈ R_old, for the keys whose right rows change.
        let right_touched: BTreeSet<&Vec<u8>> = rkeys.iter().flatten().collect();
        for &key in &right_touched {
            if let Some(old) = self.matches(key)? {
                parts.push(ZSet::with_weight(old, -1));
            }
        }
        let rrows = self.right_codec.encode(rc.batch().columns(), rc.len())?;
        for (i, (key, &w)) in rkeys.iter().zip(rc.weights()).enumerate() {
            if let Some(k) = key {
                self.right_trace.update(k, rrows.row(i), w);
            }
        }
        self.right_trace.seal();
        for &key in &right_touched {
            if let Some(new) = self.matches(key)? {
                parts.push(ZSet::with_weight(new, 1));
            }
        }
        // ΔL ⋈ R_new, key by key. Unmatched left rows with a NULL key pass
        // straight through a LEFT ASOF join; an inner one drops them.
        let mut by_key: std::collections::BTreeMap<&[u8], Vec<u32>> = Default::default();
        let mut null_keyed = Vec::new();
        for (i, key) in lkeys.iter().enumerate() {
            match key {
                Some(k) => by_key.entry(k).or_default().push(i as u32),
                None => null_keyed.push(i as u32),
            }
        }
        for (key, rows) in &by_key {
            let change = lc.take(rows)?;
            let (joined, kept) = self.join_rows(change.batch(), key)?;
            let weights = kept.iter().map(|&i| change.weights()[i as usize]).collect();
            parts.push(ZSet::new(joined, weights));
        }
        let lrows = self.left_codec.encode(lc.batch().columns(), lc.len())?;
        for (i, (key, &w)) in lkeys.iter().zip(lc.weights()).enumerate() {
            if let Some(k) = key {
                self.left_trace.update(k, lrows.row(i), w);
            }
        }
        self.left_trace.seal();
        if self.left_outer && !null_keyed.is_empty() {
            let rows = lc.take(&null_keyed)?;
            let n = rows.len();
            let mut columns = rows.batch().columns().to_vec();
            for field in self.right_schema.fields() {
                columns.push(new_null_array(field.data_type(), n));
            }
            let (_, weights) = rows.into_parts();
            parts.push(ZSet::new(
                batch_with_rows(&self.schema, columns, n)?,
                weights,
            ));
        }
        self.collect(lc.len() + rc.len())?;
        let out = ZSet::concat(&self.schema, &parts)?;
        // Re-matched keys retract and re-insert their rows: consolidated,
        // what did not change cancels. New left rows alone need no sort.
        if right_touched.is_empty() {
            Ok(out)
        } else {
            out.consolidate()
        }
    }
}
