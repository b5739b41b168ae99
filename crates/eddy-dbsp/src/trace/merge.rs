//! Merges of a spine's runs: the consolidated merge of sorted runs, lent
//! entry by entry to a sink, and the batch (in memory or in a file) that
//! a merge builds.

use std::cell::Cell;
use std::sync::Arc;

use super::batch::{Batch, MemBatch};
use super::Entry;
use crate::storage::{fail, Scan, Storage};

/// One sorted, consolidated run read in order by a merge: a batch in
/// memory (read in place), a batch file (scanned), or entries in memory.
pub(super) enum Source<'a> {
    Memory {
        batch: &'a MemBatch,
        next: usize,
    },
    File(Scan<'a>),
    Entries {
        entries: Vec<Entry<'a>>,
        next: usize,
    },
}

impl Source<'_> {
    fn peek(&self) -> Option<Entry<'_>> {
        match self {
            Source::Memory { batch, next } => (*next < batch.len()).then(|| batch.entry(*next)),
            Source::File(scan) => scan.peek().map(|(_, e)| e),
            Source::Entries { entries, next } => entries.get(*next).copied(),
        }
    }

    fn advance(&mut self) {
        match self {
            Source::Memory { next, .. } | Source::Entries { next, .. } => *next += 1,
            Source::File(scan) => scan.advance().unwrap_or_else(|e| fail(e)),
        }
    }
}

/// A key and a row.
type KeyRow<'a> = (&'a [u8], &'a [u8]);

/// Where a merge sends its entries, one by one (lent, see
/// [`merge_runs`]); false stops it.
pub(super) type EntrySink<'s> = dyn FnMut(&[u8], &[u8], i64) -> bool + 's;

/// Feeds `out` the consolidated merge of sorted, consolidated runs in
/// order, without the entries whose weights cancel, until `out` returns
/// false. Entries are lent to `out` (a scanned file's bytes live only
/// until the scan moves on).
pub(super) fn merge_runs(mut sources: Vec<Source<'_>>, out: &mut EntrySink<'_>) {
    let mut equal = vec![false; sources.len()];
    loop {
        let mut min: Option<(usize, KeyRow<'_>)> = None;
        for (s, source) in sources.iter().enumerate() {
            if let Some((k, r, _)) = source.peek() {
                if min.is_none_or(|(_, m)| (k, r) < m) {
                    min = Some((s, (k, r)));
                }
            }
        }
        let Some((_, (k, r))) = min else {
            return;
        };
        let mut weight = 0;
        for (s, source) in sources.iter().enumerate() {
            equal[s] = match source.peek() {
                Some((k2, r2, w)) if (k2, r2) == (k, r) => {
                    weight += w;
                    true
                }
                _ => false,
            };
        }
        if weight != 0 && !out(k, r, weight) {
            return;
        }
        for (s, source) in sources.iter_mut().enumerate() {
            if equal[s] {
                source.advance();
            }
        }
    }
}

/// [`merge_runs`] of two runs, the merge of every spine merge: one
/// comparison per entry.
pub(super) fn merge_pair(mut a: Source<'_>, mut b: Source<'_>, out: &mut EntrySink<'_>) {
    use std::cmp::Ordering::{Equal, Greater, Less};
    loop {
        let ((k, r, w), from_a, from_b) = match (a.peek(), b.peek()) {
            (None, None) => return,
            (Some(x), None) => (x, true, false),
            (None, Some(y)) => (y, false, true),
            (Some(x), Some(y)) => match (x.0, x.1).cmp(&(y.0, y.1)) {
                Less => (x, true, false),
                Greater => (y, false, true),
                Equal => ((x.0, x.1, x.2 + y.2), true, true),
            },
        };
        if w != 0 && !out(k, r, w) {
            return;
        }
        if from_a {
            a.advance();
        }
        if from_b {
            b.advance();
        }
    }
}

/// Entries written to a batch between checks for a cancelled merge.
const CHECK_EVERY: usize = 1 << 16;

/// A batch of the entries that `feed` gives (sorted, consolidated; at most
/// `keys` distinct keys): in a file when the trace has storage and
/// `estimate` (bytes) reaches its threshold, else in memory (also when the
/// file cannot be written: the error is counted). `cancelled` is checked
/// now and then: once it is true the unfinished file is removed and the
/// answer is `None`.
pub(super) fn build_batch(
    storage: Option<&Arc<Storage>>,
    estimate: usize,
    keys: usize,
    feed: impl Fn(&mut EntrySink<'_>),
    cancelled: &dyn Fn() -> bool,
) -> Option<Batch> {
    let (count, stopped) = (Cell::new(0usize), Cell::new(false));
    let go_on = || {
        count.set(count.get() + 1);
        stopped.set(count.get().is_multiple_of(CHECK_EVERY) && cancelled());
        !stopped.get()
    };
    if let Some(s) = storage.filter(|s| estimate >= s.min_bytes()) {
        let file = s.writer(keys).and_then(|mut writer| {
            let mut failed = None;
            feed(&mut |k, r, w| match writer.push(k, r, w) {
                Ok(()) => go_on(),
                Err(e) => {
                    failed = Some(e);
                    false
                }
            });
            match failed {
                Some(e) => Err(e),
                None if stopped.get() => Ok(None), // the writer's drop removes the file
                None => writer.finish().map(Some),
            }
        });
        match file {
            Ok(Some(file)) => return Some(Batch::File(file)),
            Ok(None) => return None,
            Err(e) => s.note_error(&e),
        }
        count.set(0);
    }
    let mut batch = MemBatch::new();
    feed(&mut |k, r, w| {
        batch.push(k, r, w);
        go_on()
    });
    (!stopped.get()).then(|| Batch::Memory(Arc::new(batch)))
}

/// The merge of two adjacent batches of a spine (see [`build_batch`]); a
/// file it writes gets a key filter when `filter` (the trace is read by
/// key).
pub(super) fn merge_two(
    storage: Option<&Arc<Storage>>,
    older: &Batch,
    newer: &Batch,
    filter: bool,
    cancelled: &dyn Fn() -> bool,
) -> Option<Batch> {
    let estimate = older.footprint() + newer.footprint();
    let keys = if filter { older.len() + newer.len() } else { 0 };
    let feed = |out: &mut EntrySink<'_>| merge_pair(older.source(), newer.source(), out);
    build_batch(storage, estimate, keys, feed, cancelled)
}

/// The check of a merge that is never cancelled.
pub(super) fn never() -> bool {
    false
}
