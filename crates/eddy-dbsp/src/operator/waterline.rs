//! Waterlines and the garbage collection of state below them.
//!
//! A [`Waterline`] is a bound on one column of a stream: no change of a
//! later step has a value below it in that column (NULLs excepted). It is
//! set by a [`Lateness`](super::Lateness) operator and carried, through
//! monotone expressions, by the SQL lowering. A stateful operator whose
//! state is keyed by such a column can forget the keys below the bound:
//! no future change can reach them, so they can neither change an output
//! nor be needed to compute one.
//!
//! A [`Collector`] decides when to collect: after as many updates as there
//! were live keys at the previous collection (and at least
//! [`MIN_UPDATES`]), so the scans cost O(1) per update, amortized, and the
//! state stays within twice its live size.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Scalar};
use datafusion::arrow::compute::kernels::cmp::lt;
use datafusion::common::ScalarValue;

use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, Trace};

/// The current bound of a column (`None` while there is none).
pub type Waterline = Arc<dyn Fn() -> Option<ScalarValue> + Send + Sync>;

/// Fewest updates between two collections.
pub const MIN_UPDATES: usize = 4096;

/// Collects the keys of an operator's state whose column `column` (in the
/// key's encoding) is below a waterline.
pub struct Collector {
    column: usize,
    waterline: Waterline,
    since: usize,
    live: usize,
}

impl Collector {
    /// Collects keys whose `column` is below `waterline`.
    pub fn new(column: usize, waterline: Waterline) -> Self {
        Self {
            column,
            waterline,
            since: 0,
            live: 0,
        }
    }

    /// Counts `updates` more updates of the state; returns the bound when a
    /// collection is due.
    pub fn due(&mut self, updates: usize) -> Option<ScalarValue> {
        self.since += updates;
        if self.since < self.live.max(MIN_UPDATES) {
            return None;
        }
        let bound = (self.waterline)()?;
        (!bound.is_null()).then_some(bound)
    }

    /// The collector of an optional one with its bound, when a collection
    /// is due after `updates` more updates.
    pub fn due_in(
        gc: &mut Option<Collector>,
        updates: usize,
    ) -> Option<(&mut Collector, ScalarValue)> {
        let gc = gc.as_mut()?;
        let bound = gc.due(updates)?;
        Some((gc, bound))
    }

    /// Writes the counters of `collectors` (their waterlines belong to
    /// the lateness operators upstream, which save them).
    pub fn save_all<'a>(
        w: &mut StateWriter,
        collectors: impl IntoIterator<Item = &'a Collector>,
    ) -> Result<()> {
        let counters: Vec<(usize, usize)> =
            collectors.into_iter().map(|c| (c.since, c.live)).collect();
        w.put(&counters)
    }

    /// Reads back the counters [`save_all`](Self::save_all) wrote.
    pub fn restore_all<'a>(
        r: &mut StateReader,
        collectors: impl IntoIterator<Item = &'a mut Collector>,
    ) -> Result<()> {
        let counters: Vec<(usize, usize)> = r.get()?;
        let collectors: Vec<&mut Collector> = collectors.into_iter().collect();
        if counters.len() != collectors.len() {
            return Err(r.corrupt("collectors of another operator"));
        }
        for (c, (since, live)) in collectors.into_iter().zip(counters) {
            (c.since, c.live) = (since, live);
        }
        Ok(())
    }

    /// Records a collection that kept `live` keys.
    pub fn collected(&mut self, live: usize) {
        self.since = 0;
        self.live = live;
    }

    /// The keys (encoded by `codec`) whose column is below `bound`.
    pub fn dead(
        &self,
        codec: &RowCodec,
        keys: &[&[u8]],
        bound: &ScalarValue,
    ) -> Result<HashSet<Vec<u8>, foldhash::fast::RandomState>> {
        let below = below(codec, keys, self.column, bound)?;
        Ok(keys
            .iter()
            .zip(below)
            .filter(|(_, b)| *b)
            .map(|(k, _)| k.to_vec())
            .collect())
    }
}

/// Collects a trace by key: when due, drops the keys (encoded by `codec`)
/// whose column is below the bound.
pub fn collect_keys(
    gc: &mut Collector,
    trace: &mut Trace,
    codec: &RowCodec,
    updates: usize,
) -> Result<()> {
    collect_trace(gc, trace, codec, updates, false)
}

/// Collects a trace by row: when due, drops the entries whose row (encoded
/// by `codec`) has its column below the bound.
pub fn collect_rows(
    gc: &mut Collector,
    trace: &mut Trace,
    codec: &RowCodec,
    updates: usize,
) -> Result<()> {
    collect_trace(gc, trace, codec, updates, true)
}

fn collect_trace(
    gc: &mut Collector,
    trace: &mut Trace,
    codec: &RowCodec,
    updates: usize,
    by_row: bool,
) -> Result<()> {
    let Some(bound) = gc.due(updates) else {
        return Ok(());
    };
    // Each distinct item (the entry's row, or its key) in the trace's
    // order, with how many entries in a row have it; then whether each
    // entry is dead, in that order.
    let (mut items, mut runs): (Vec<&[u8]>, Vec<usize>) = (Vec::new(), Vec::new());
    for (k, r, _) in trace.iter() {
        let item = if by_row { r } else { k };
        match (items.last(), runs.last_mut()) {
            (Some(last), Some(n)) if *last == item => *n += 1,
            _ => {
                items.push(item);
                runs.push(1);
            }
        }
    }
    let below = below(codec, &items, gc.column, &bound);
    drop(items);
    // The scan copied what it read from batch files: drop the copies now,
    // whatever happens next.
    trace.release_reads();
    let below = below?;
    if !below.contains(&true) {
        // Nothing to drop: the trace is not rewritten.
        gc.collected(runs.iter().sum());
        return Ok(());
    }
    let dead: Vec<bool> = below
        .iter()
        .zip(&runs)
        .flat_map(|(b, n)| std::iter::repeat_n(*b, *n))
        .collect();
    let live = trace.retain_entries(&dead);
    gc.collected(live);
    Ok(())
}

/// For each row (encoded by `codec`), whether its `column` is below `bound`
/// (a NULL is never below).
pub fn below(
    codec: &RowCodec,
    rows: &[&[u8]],
    column: usize,
    bound: &ScalarValue,
) -> Result<Vec<bool>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let columns = codec.decode(rows.iter().copied())?;
    let values = &columns[column];
    let bound = bound.cast_to(values.data_type())?.to_array()?;
    let below = lt(values, &Scalar::new(bound))?;
    Ok((0..below.len())
        .map(|i| below.is_valid(i) && below.value(i))
        .collect())
}
