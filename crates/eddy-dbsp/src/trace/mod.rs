//! Traces: the integrated contents of a stream, indexed by key.
//!
//! A [`Trace`] holds `(key, row) ↦ weight` with memcomparable keys and rows,
//! as an LSM *spine*: a list of immutable batches, each sorted by
//! `(key, row)` and consolidated, plus a small mutable buffer for the
//! current step's updates. [`Trace::seal`] turns the buffer into a batch and
//! merges batches by size level (a batch is merged into the one before it
//! while it is at least half its size), so a trace of n entries has
//! O(log n) batches and each entry is merged O(log n) times. Lookups and
//! cursors read every batch and the buffer and consolidate on the fly: the
//! same `(key, row)` may sit in several batches until they merge.
//!
//! Batches store keys and rows in one contiguous byte buffer. A trace
//! created with a [`Storage`] (see [`crate::storage::with_storage`]) writes
//! a merged batch of at least [`Storage::min_bytes`] to a file instead and
//! reads it back through the storage's block cache ([`crate::storage`]);
//! small batches stay in memory. A file that cannot be written leaves the
//! batch in memory (counted in [`Storage::stats`]): a full disk slows
//! nothing down and loses nothing, it only costs memory. What a lookup or
//! a cursor reads from a file is copied into the trace (`Reads`), since
//! the caller borrows it from the trace, and dropped at the next change.
//!
//! A merge into a file of at least 16 MiB runs on the storage's merger
//! thread (under memory pressure, only one whose batches are both in files
//! already, since a merge in progress keeps its batches): the spine keeps
//! the two batches (reads see both, as before any merge) until a later
//! [`Trace::seal`] finds the merged batch ready and puts it in their place.
//! Merges wait behind one in progress rather than the step waiting for it;
//! only a spine grown past `MAX_SLOTS` batches waits for a merge to finish.

use std::sync::Arc;

use crate::storage::{current, Merge, Reader, Storage};
use crate::Result;

mod batch;
mod merge;
mod persist;
mod reads;

use batch::{Batch, MemBatch};
use merge::{build_batch, merge_runs, merge_two, never, EntrySink, Source};
use reads::Reads;

/// Buffered updates before they are sealed into a batch.
const BUFFER_LIMIT: usize = 1 << 16;

/// Slots of a spine past which a seal waits for a background merge to
/// finish (the writer is slowed rather than reads growing without bound).
const MAX_SLOTS: usize = 32;

/// A slot of the spine: a batch, or two adjacent batches being merged on
/// the storage's merger thread (read as the two until the merge is taken).
#[derive(Debug)]
enum Slot {
    Ready(Batch),
    Merging(Pending),
}

impl Slot {
    fn batches(&self) -> &[Batch] {
        match self {
            Slot::Ready(b) => std::slice::from_ref(b),
            Slot::Merging(p) => &p.sources,
        }
    }
}

/// A merge in progress and the two batches it merges, older first.
/// Dropped unfinished (a cleared trace), it cancels the merge.
struct Pending {
    sources: [Batch; 2],
    merge: Arc<Merge<Batch>>,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pending")
            .field("sources", &self.sources)
            .finish_non_exhaustive()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A result that finished anyway is dropped here, file and all.
        drop(self.merge.cancel());
    }
}

/// The route of a trace's key when it is not the key itself (see
/// [`Trace::restore_routed`]).
pub type RouteKey<'a> = &'a dyn Fn(&[u8]) -> Result<Vec<u8>>;

/// One `(key, row, weight)` of a trace.
pub type Entry<'a> = (&'a [u8], &'a [u8], i64);

type Run<'a> = std::iter::Peekable<Box<dyn Iterator<Item = Entry<'a>> + 'a>>;

fn run<'a>(entries: impl Iterator<Item = Entry<'a>> + 'a) -> Run<'a> {
    (Box::new(entries) as Box<dyn Iterator<Item = Entry<'a>>>).peekable()
}

/// A k-way merge of sorted runs that sums the weights of equal
/// `(key, row)` pairs and skips those that sum to zero. A cursor walks
/// forwards (ascending) or, from [`Trace::seek_back`], backwards.
pub struct Cursor<'a> {
    runs: Vec<Run<'a>>,
    descending: bool,
}

impl<'a> Iterator for Cursor<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        loop {
            let mut min: Option<(&'a [u8], &'a [u8])> = None;
            for run in &mut self.runs {
                if let Some(&(k, r, _)) = run.peek() {
                    let first = |m: (&[u8], &[u8])| {
                        if self.descending {
                            (k, r) > m
                        } else {
                            (k, r) < m
                        }
                    };
                    if min.is_none_or(first) {
                        min = Some((k, r));
                    }
                }
            }
            let (k, r) = min?;
            let mut weight = 0;
            for run in &mut self.runs {
                while let Some(&(k2, r2, w)) = run.peek() {
                    if (k2, r2) != (k, r) {
                        break;
                    }
                    weight += w;
                    run.next();
                }
            }
            if weight != 0 {
                return Some((k, r, weight));
            }
        }
    }
}

/// A consolidated, indexed Z-set kept as a spine of sorted batches.
#[derive(Debug)]
pub struct Trace {
    /// Oldest first.
    slots: Vec<Slot>,
    /// Where large batches go, when the trace has storage.
    storage: Option<Arc<Storage>>,
    /// Unsorted updates since the last seal: bytes, and (start, key length,
    /// row length, weight) per update.
    buffer_bytes: Vec<u8>,
    buffer: Vec<(usize, usize, usize, i64)>,
    /// What readers copied out of batch files since the last change.
    reads: Reads,
    /// Whether the trace was ever read by key ([`get`](Self::get)): only
    /// then do the files it writes carry a key filter (keeping one costs
    /// a comparison of each entry's key with the last when writing).
    lookups: std::sync::atomic::AtomicBool,
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for Trace {
    /// A copy sharing the immutable batches; a merge in progress stays with
    /// the original (the copy holds its two batches).
    fn clone(&self) -> Self {
        Self {
            slots: self.batches().cloned().map(Slot::Ready).collect(),
            storage: self.storage.clone(),
            buffer_bytes: self.buffer_bytes.clone(),
            buffer: self.buffer.clone(),
            reads: Reads::default(),
            lookups: std::sync::atomic::AtomicBool::new(self.looked_up()),
        }
    }
}

impl Trace {
    /// An empty trace, with the storage current on this thread (see
    /// [`crate::storage::with_storage`]), if any.
    pub fn new() -> Self {
        Self {
            slots: Vec::new(),
            storage: current(),
            buffer_bytes: Vec::new(),
            buffer: Vec::new(),
            reads: Reads::default(),
            lookups: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Adds `weight` to `row` under `key`. The update is visible at once;
    /// operators [`seal`](Self::seal) after a step's updates so that reads
    /// find it in a sorted batch.
    pub fn update(&mut self, key: &[u8], row: &[u8], weight: i64) {
        if weight == 0 {
            return;
        }
        self.reads.clear();
        let start = self.buffer_bytes.len();
        self.buffer_bytes.extend_from_slice(key);
        self.buffer_bytes.extend_from_slice(row);
        self.buffer.push((start, key.len(), row.len(), weight));
        if self.buffer.len() >= BUFFER_LIMIT {
            self.seal();
        }
    }

    fn buffered(&self, e: &(usize, usize, usize, i64)) -> Entry<'_> {
        let (s, kl, rl, w) = *e;
        (
            &self.buffer_bytes[s..s + kl],
            &self.buffer_bytes[s + kl..s + kl + rl],
            w,
        )
    }

    /// The buffered updates whose key is not less than `key`, sorted.
    fn sorted_buffer(&self, key: &[u8]) -> Vec<Entry<'_>> {
        let mut entries: Vec<Entry<'_>> = self
            .buffer
            .iter()
            .map(|e| self.buffered(e))
            .filter(|(k, _, _)| *k >= key)
            .collect();
        // Unstable: equal (key, row) pairs are consolidated, whatever their
        // order.
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(b.1)));
        entries
    }

    /// The buffered updates, sorted and consolidated.
    fn consolidated_buffer(&self) -> Vec<Entry<'_>> {
        let sorted = self.sorted_buffer(&[]);
        let mut consolidated: Vec<Entry<'_>> = Vec::with_capacity(sorted.len());
        for (k, r, w) in sorted {
            match consolidated.last_mut() {
                Some(last) if (last.0, last.1) == (k, r) => last.2 += w,
                _ => consolidated.push((k, r, w)),
            }
        }
        consolidated.retain(|e| e.2 != 0);
        consolidated
    }

    /// Whether the trace was ever read by key.
    fn looked_up(&self) -> bool {
        self.lookups.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every batch and the buffer, as runs read in order by a merge.
    fn sources(&self) -> Vec<Source<'_>> {
        let mut sources: Vec<Source<'_>> = self.batches().map(Batch::source).collect();
        sources.push(Source::Entries {
            entries: self.consolidated_buffer(),
            next: 0,
        });
        sources
    }

    /// Every batch of the spine, oldest first (both batches of a merge in
    /// progress).
    fn batches(&self) -> impl Iterator<Item = &Batch> {
        self.slots.iter().flat_map(Slot::batches)
    }

    /// Turns buffered updates into a batch, takes the merges finished in
    /// the background and merges batches by size level.
    pub fn seal(&mut self) {
        self.reads.clear();
        self.take_finished_merges();
        if !self.buffer.is_empty() {
            let batch = Batch::Memory(Arc::new(MemBatch::from_sorted(
                self.consolidated_buffer().into_iter(),
            )));
            self.buffer.clear();
            self.buffer_bytes.clear();
            if batch.len() > 0 {
                self.slots.push(Slot::Ready(batch));
            }
        }
        self.merge_levels();
        while self.slots.len() > MAX_SLOTS && self.wait_for_a_merge() {
            self.merge_levels();
        }
    }

    /// Merges adjacent batches by size level: while two neighbouring
    /// batches, neither in a merge in progress, have the newer at least half
    /// the older, the newest such pair is merged. (Pairs inside the spine
    /// count too: a merge taken late can leave two batches of one level
    /// behind the newest.) A large merge into a file goes to the storage's
    /// merger thread, but for one that moves a batch out of memory under
    /// memory pressure.
    fn merge_levels(&mut self) {
        loop {
            let due = (1..self.slots.len()).rev().find(|&i| {
                matches!(
                    (&self.slots[i - 1], &self.slots[i]),
                    (Slot::Ready(older), Slot::Ready(newer)) if newer.len() * 2 >= older.len()
                )
            });
            let Some(i) = due else { break };
            let (Slot::Ready(older), Slot::Ready(newer)) = (&self.slots[i - 1], &self.slots[i])
            else {
                unreachable!("found above")
            };
            let (older, newer) = (older.clone(), newer.clone());
            let estimate = older.footprint() + newer.footprint();
            let (a, b, storage) = (older.clone(), newer.clone(), self.storage.clone());
            let filter = self.looked_up();
            let job = move |cancelled: &dyn Fn() -> bool| {
                merge_two(storage.as_ref(), &a, &b, filter, cancelled)
            };
            // Under memory pressure a merge that moves a batch from memory
            // to a file runs now: on the merger thread its sources would
            // stay in memory until it is taken.
            let frees_memory = older.is_memory() || newer.is_memory();
            let merge = (self.storage.as_ref())
                .filter(|s| s.merges_in_background(estimate))
                .filter(|s| !(frees_memory && s.under_pressure()))
                .map(|s| s.merge_in_background(job));
            let replacement = match merge {
                Some(merge) => Some(Slot::Merging(Pending {
                    sources: [older, newer],
                    merge,
                })),
                None => {
                    let merged = merge_two(self.storage.as_ref(), &older, &newer, filter, &never)
                        .expect("never cancelled");
                    (merged.len() > 0).then_some(Slot::Ready(merged))
                }
            };
            self.slots.splice(i - 1..=i, replacement);
        }
    }

    /// Puts each merge finished in the background in the place of its two
    /// batches (a merge that failed leaves them as they were).
    fn take_finished_merges(&mut self) {
        if !self.slots.iter().any(|s| matches!(s, Slot::Merging(_))) {
            return;
        }
        for slot in std::mem::take(&mut self.slots) {
            match slot {
                Slot::Merging(p) => match p.merge.poll() {
                    None => self.slots.push(Slot::Merging(p)),
                    Some(Some(merged)) => {
                        if merged.len() > 0 {
                            self.slots.push(Slot::Ready(merged));
                        }
                    }
                    Some(None) => {
                        let [older, newer] = p.sources.clone();
                        self.slots.push(Slot::Ready(older));
                        self.slots.push(Slot::Ready(newer));
                    }
                },
                ready => self.slots.push(ready),
            }
        }
    }

    /// Waits for the oldest merge in progress and takes it; false when
    /// none is in progress.
    fn wait_for_a_merge(&mut self) -> bool {
        let Some(Slot::Merging(p)) = self.slots.iter().find(|s| matches!(s, Slot::Merging(_)))
        else {
            return false;
        };
        p.merge.wait();
        self.take_finished_merges();
        true
    }

    /// Waits for every merge in progress and takes it, then merges by
    /// size level until no merge is left in progress: the spine as it
    /// would be had every merge run in the step.
    pub fn finish_merges(&mut self) {
        while self.wait_for_a_merge() {
            self.merge_levels();
        }
    }

    /// A cursor over every `(key, row, weight)` whose key is not less than
    /// `key`, in order, consolidated.
    pub fn seek<'a>(&'a self, key: &[u8]) -> Cursor<'a> {
        self.seek_entry(key, &[])
    }

    /// A cursor over every entry not less than `(key, row)`, in order,
    /// consolidated.
    pub fn seek_entry<'a>(&'a self, key: &[u8], row: &[u8]) -> Cursor<'a> {
        self.seek_entry_over(key, row, &[])
    }

    /// [`seek_entry`](Self::seek_entry) over the trace plus `overlay`, a
    /// sorted, consolidated run of updates not yet applied (the state as
    /// it will be after them).
    pub fn seek_entry_over<'a>(
        &'a self,
        key: &[u8],
        row: &[u8],
        overlay: &'a [Entry<'a>],
    ) -> Cursor<'a> {
        self.cursor(key, row, overlay, false)
    }

    /// A cursor from `(key, row)` over the batches, the buffer and
    /// `overlay`: ascending from it (inclusive), or descending below it.
    fn cursor<'a>(
        &'a self,
        key: &[u8],
        row: &[u8],
        overlay: &'a [Entry<'a>],
        descending: bool,
    ) -> Cursor<'a> {
        let at = (key, row);
        let mut runs: Vec<Run<'a>> = Vec::with_capacity(self.slots.len() + 3);
        let reads = &self.reads;
        for b in self.batches() {
            runs.push(match b {
                Batch::Memory(m) => {
                    let start = m.lower_bound_entry(key, row);
                    if descending {
                        run((0..start).rev().map(move |i| m.entry(i)))
                    } else {
                        run((start..m.len()).map(move |i| m.entry(i)))
                    }
                }
                Batch::File(f) => {
                    // What a cursor yields outlives the reader's window:
                    // each entry is copied out as it is reached.
                    let mut reader = Reader::new(f);
                    let start = reader.lower_bound_entry(key, row);
                    if descending {
                        run((0..start).rev().map(move |i| reads.entry(reader.at(i))))
                    } else {
                        run((start..f.len()).map(move |i| reads.entry(reader.at(i))))
                    }
                }
            });
        }
        if !self.buffer.is_empty() {
            let mut buffered = self.sorted_buffer(if descending { &[] } else { key });
            buffered.retain(|&(k, r, _)| ((k, r) < at) == descending);
            runs.push(if descending {
                run(buffered.into_iter().rev())
            } else {
                run(buffered.into_iter())
            });
        }
        let start = overlay.partition_point(|&(k, r, _)| (k, r) < at);
        runs.push(if descending {
            run(overlay[..start].iter().rev().copied())
        } else {
            run(overlay[start..].iter().copied())
        });
        Cursor { runs, descending }
    }

    /// A cursor over every entry less than `(key, row)`, from the greatest
    /// down, consolidated.
    pub fn seek_back<'a>(&'a self, key: &[u8], row: &[u8]) -> Cursor<'a> {
        self.seek_back_over(key, row, &[])
    }

    /// [`seek_back`](Self::seek_back) over the trace plus `overlay` (see
    /// [`seek_entry_over`](Self::seek_entry_over)).
    pub fn seek_back_over<'a>(
        &'a self,
        key: &[u8],
        row: &[u8],
        overlay: &'a [Entry<'a>],
    ) -> Cursor<'a> {
        self.cursor(key, row, overlay, true)
    }

    /// Every `(key, row, weight)` in order, consolidated.
    pub fn iter(&self) -> Cursor<'_> {
        self.seek(&[])
    }

    /// The rows under `key` with their weights, in row order.
    pub fn get<'a>(&'a self, key: &[u8]) -> Vec<(&'a [u8], i64)> {
        if !self.looked_up() {
            self.lookups
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        let mut out: Vec<(&'a [u8], i64)> = Vec::new();
        let mut sources = 0;
        for b in self.batches() {
            let before = out.len();
            match b {
                Batch::Memory(m) => {
                    let mut i = m.lower_bound(key);
                    while i < m.len() && m.key(i) == key {
                        let (_, r, w) = m.entry(i);
                        out.push((r, w));
                        i += 1;
                    }
                }
                Batch::File(f) if f.may_contain(key) => {
                    let mut reader = Reader::new(f);
                    let mut i = reader.lower_bound(key);
                    while i < f.len() {
                        let (k, r, w) = reader.at(i);
                        if k != key {
                            break;
                        }
                        out.push((self.reads.copy(r), w));
                        i += 1;
                    }
                }
                Batch::File(_) => {}
            }
            sources += usize::from(out.len() > before);
        }
        if !self.buffer.is_empty() {
            let before = out.len();
            for e in &self.buffer {
                let (k, r, w) = self.buffered(e);
                if k == key {
                    out.push((r, w));
                }
            }
            // Buffered updates may repeat a row: always consolidate them.
            sources += 2 * usize::from(out.len() > before);
        }
        if sources > 1 {
            // The same row may sit in several batches: consolidate.
            out.sort_by(|a, b| a.0.cmp(b.0));
            let mut merged: Vec<(&'a [u8], i64)> = Vec::with_capacity(out.len());
            for (r, w) in out {
                match merged.last_mut() {
                    Some(last) if last.0 == r => last.1 += w,
                    _ => merged.push((r, w)),
                }
            }
            merged.retain(|(_, w)| *w != 0);
            out = merged;
        }
        out
    }

    /// Drops what lookups and cursors copied out of batch files (they
    /// borrow it until the trace's next change; a trace only read for a
    /// while calls this between reads so that the copies do not pile up).
    pub fn release_reads(&mut self) {
        self.reads.clear();
    }

    /// Drops every entry (the trace keeps its storage).
    pub fn clear(&mut self) {
        self.reads.clear();
        self.slots.clear();
        self.buffer.clear();
        self.buffer_bytes.clear();
    }

    /// Drops every entry whose key fails `keep` (state below a waterline),
    /// leaving one consolidated batch. Returns the entries kept.
    pub fn retain_keys(&mut self, keep: impl Fn(&[u8]) -> bool) -> usize {
        self.retain(|k, _| keep(k))
    }

    /// Drops every entry for which `keep(key, row)` is false, leaving one
    /// consolidated batch. Returns the entries kept.
    pub fn retain(&mut self, keep: impl Fn(&[u8], &[u8]) -> bool) -> usize {
        self.retain_at(|_, k, r| keep(k, r))
    }

    /// Drops the entries whose place in the trace's order (that of
    /// [`iter`](Self::iter), consolidated) is `true` in `dead`, leaving one
    /// consolidated batch; entries past its end are kept. Returns the
    /// entries kept. Cheaper than [`retain`](Self::retain) with a set of
    /// dead entries: nothing is hashed or copied.
    pub fn retain_entries(&mut self, dead: &[bool]) -> usize {
        self.retain_at(|i, _, _| !dead.get(i).copied().unwrap_or(false))
    }

    /// [`retain`](Self::retain) with each entry's place in the order.
    fn retain_at(&mut self, keep: impl Fn(usize, &[u8], &[u8]) -> bool) -> usize {
        self.reads.clear();
        let estimate = self.bytes() + self.storage_bytes();
        // The batch may be built twice (in memory when a file fails), so
        // each pass counts from the start.
        let feed = |out: &mut EntrySink<'_>| {
            let mut place = 0;
            merge_runs(self.sources(), &mut |k, r, w| {
                place += 1;
                !keep(place - 1, k, r) || out(k, r, w)
            });
        };
        let keys = if self.looked_up() { self.entries() } else { 0 };
        let batch = build_batch(self.storage.as_ref(), estimate, keys, feed, &never)
            .expect("never cancelled");
        let kept = batch.len();
        self.slots = if kept > 0 {
            vec![Slot::Ready(batch)]
        } else {
            Vec::new()
        };
        self.buffer.clear();
        self.buffer_bytes.clear();
        kept
    }

    /// Whether no update was ever kept (entries that cancel across batches
    /// may make a non-empty trace hold nothing until they merge).
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty() && self.batches().all(|b| b.len() == 0)
    }

    /// Number of distinct `(key, row)` pairs with non-zero weight (a full scan).
    pub fn len(&self) -> usize {
        let mut n = 0;
        self.for_each(|_, _, _| n += 1);
        n
    }

    /// Calls `f` on every `(key, row, weight)` in order, consolidated: a
    /// full scan that reads batch files in large chunks and keeps nothing
    /// (where [`iter`](Self::iter) copies what it reads from files into
    /// the trace until its next change).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8], i64)) {
        merge_runs(self.sources(), &mut |k, r, w| {
            f(k, r, w);
            true
        });
    }

    /// Entries held, counting an entry once per batch that holds it (an
    /// upper bound on [`len`](Self::len), without a scan).
    pub fn entries(&self) -> usize {
        self.batches().map(Batch::len).sum::<usize>() + self.buffer.len()
    }

    /// Bytes the batches and the buffer hold in memory (contents, not
    /// slack).
    pub fn bytes(&self) -> usize {
        self.batches().map(Batch::memory_bytes).sum::<usize>()
            + self.buffer_bytes.len()
            + self.buffer.len() * std::mem::size_of::<(usize, usize, usize, i64)>()
    }

    /// Bytes of the batches in files.
    pub fn storage_bytes(&self) -> usize {
        self.batches().map(Batch::storage_bytes).sum()
    }

    /// Number of batches in the spine (for tests and statistics).
    pub fn num_batches(&self) -> usize {
        self.batches().count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// Bytes and entries follow what a trace holds: they grow with updates
    /// and shrink when entries are dropped.
    #[test]
    fn bytes_follow_the_entries() {
        let mut trace = Trace::new();
        assert_eq!((trace.entries(), trace.bytes()), (0, 0));
        for k in 0u32..1000 {
            trace.update(&k.to_be_bytes(), b"row-bytes", 1);
        }
        trace.seal();
        let (entries, bytes) = (trace.entries(), trace.bytes());
        assert_eq!(entries, 1000);
        assert!(bytes >= 1000 * (4 + 9), "{bytes}");
        let kept = trace.retain_keys(|k| k < 500u32.to_be_bytes().as_slice());
        assert_eq!(kept, 500);
        assert_eq!(trace.entries(), 500);
        assert!(
            trace.bytes() * 2 <= bytes + 16,
            "{} of {bytes}",
            trace.bytes()
        );
    }

    /// Under memory pressure a merge that would move a batch out of memory
    /// runs in the step, since one on the merger thread keeps its batches
    /// until it is taken; without pressure it goes to the thread.
    #[test]
    fn under_pressure_a_merge_out_of_memory_runs_in_the_step() {
        for pressure in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(dir.path(), 64 * 1024).unwrap();
            storage.set_background_merge_bytes(0);
            let mut trace = crate::storage::with_storage(Some(Arc::clone(&storage)), Trace::new);
            // Two sealed batches in memory of about 100 KiB each: their
            // merge, into a file, is due at the second seal.
            for step in 0u32..2 {
                if step == 1 {
                    storage.set_pressure(pressure);
                }
                for k in 0u32..4000 {
                    trace.update(&(step * 4000 + k).to_be_bytes(), &[7; 20], 1);
                }
                trace.seal();
            }
            let background = storage.stats().background_merges;
            if pressure {
                assert_eq!(background, 0);
                assert_eq!(trace.num_batches(), 1);
                assert!(trace.batches().all(|b| !b.is_memory()));
            } else {
                assert_eq!(background, 1);
                assert_eq!(trace.num_batches(), 2);
            }
            trace.finish_merges();
            assert_eq!(trace.entries(), 8000);
            assert_eq!(trace.num_batches(), 1);
        }
    }

    proptest! {
        /// Dropping entries by their place in the order (with a buffer and
        /// batches not yet merged, some cancelling) drops exactly the
        /// entries a predicate on the same places drops.
        #[test]
        fn retain_entries_drops_the_entries_at_its_places(
            ops in prop::collection::vec((0u8..6, 0u8..4, -2i64..3, prop::bool::ANY), 0..200),
            dead in prop::collection::vec(prop::bool::ANY, 0..40),
        ) {
            let mut trace = Trace::new();
            for &(k, r, w, seal) in &ops {
                trace.update(&[k], &[r], w);
                if seal {
                    trace.seal();
                }
            }
            let entries: Vec<(u8, u8, i64)> = trace.iter().map(|(k, r, w)| (k[0], r[0], w)).collect();
            let expected: Vec<(u8, u8, i64)> = entries
                .iter()
                .enumerate()
                .filter(|(i, _)| !dead.get(*i).copied().unwrap_or(false))
                .map(|(_, e)| *e)
                .collect();
            let kept = trace.retain_entries(&dead);
            prop_assert_eq!(kept, expected.len());
            let got: Vec<(u8, u8, i64)> = trace.iter().map(|(k, r, w)| (k[0], r[0], w)).collect();
            prop_assert_eq!(got, expected);
        }

        /// A trace equals a naive map of accumulated weights, without zeros,
        /// however its updates are split into sealed batches.
        #[test]
        fn trace_matches_naive_model(ops in prop::collection::vec((0u8..4, 0u8..4, -2i64..3, prop::bool::ANY), 0..300)) {
            let mut trace = Trace::new();
            let mut model: HashMap<(u8, u8), i64> = HashMap::new();
            for &(k, r, w, seal) in &ops {
                trace.update(&[k], &[r], w);
                *model.entry((k, r)).or_default() += w;
                if seal {
                    trace.seal();
                }
            }
            model.retain(|_, w| *w != 0);
            let got: HashMap<(u8, u8), i64> = trace.iter().map(|(k, r, w)| ((k[0], r[0]), w)).collect();
            prop_assert_eq!(trace.len(), model.len());
            prop_assert_eq!(&got, &model);
            for k in 0u8..4 {
                let rows: Vec<(u8, i64)> = trace.get(&[k]).into_iter().map(|(r, w)| (r[0], w)).collect();
                let mut expected: Vec<(u8, i64)> = model.iter().filter(|((k2, _), _)| *k2 == k).map(|((_, r), w)| (*r, *w)).collect();
                expected.sort();
                prop_assert_eq!(rows, expected);
            }
            let keys: Vec<u8> = trace.seek(&[2]).map(|(k, _, _)| k[0]).collect();
            prop_assert!(keys.iter().all(|&k| k >= 2));
            prop_assert!(keys.windows(2).all(|w| w[0] <= w[1]));
            prop_assert!(trace.num_batches() <= 12);
        }

        /// Seeking from an entry forwards and backwards splits the ordered
        /// entries of the trace plus an overlay of pending updates at that
        /// entry, whatever the batches, buffer and overlay.
        #[test]
        fn cursors_split_at_an_entry(
            ops in prop::collection::vec((0u8..4, 0u8..4, -2i64..3, prop::bool::ANY), 0..200),
            pending in prop::collection::btree_map((0u8..4, 0u8..4), -2i64..3, 0..8),
            at in (0u8..5, 0u8..5),
        ) {
            let mut trace = Trace::new();
            let mut model = trace.clone();
            for &(k, r, w, seal) in &ops {
                trace.update(&[k], &[r], w);
                model.update(&[k], &[r], w);
                if seal {
                    trace.seal();
                }
            }
            let bytes: Vec<([u8; 1], [u8; 1], i64)> =
                pending.iter().filter(|(_, &w)| w != 0).map(|(&(k, r), &w)| ([k], [r], w)).collect();
            let overlay: Vec<Entry<'_>> = bytes.iter().map(|(k, r, w)| (&k[..], &r[..], *w)).collect();
            for (k, r, w) in &overlay {
                model.update(k, r, *w);
            }
            let flat = |e: Entry<'_>| (e.0[0], e.1[0], e.2);
            let all: Vec<(u8, u8, i64)> = model.iter().map(flat).collect();
            let after: Vec<(u8, u8, i64)> = trace.seek_entry_over(&[at.0], &[at.1], &overlay).map(flat).collect();
            let mut before: Vec<(u8, u8, i64)> = trace.seek_back_over(&[at.0], &[at.1], &overlay).map(flat).collect();
            before.reverse();
            let split = all.iter().position(|&(k, r, _)| (k, r) >= at).unwrap_or(all.len());
            prop_assert_eq!(&before[..], &all[..split]);
            prop_assert_eq!(&after[..], &all[split..]);
        }

        /// A trace whose merged batches all go to files holds exactly what
        /// one in memory holds, through cursors, lookups and retains; its
        /// files go when its batches do.
        #[test]
        fn a_trace_on_disk_matches_one_in_memory(
            ops in prop::collection::vec((0u8..6, 0u8..6, -2i64..3, prop::bool::ANY), 0..300),
            at in (0u8..7, 0u8..7),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(dir.path(), 0).unwrap();
            // Merges in the step: the files on disk are exactly the trace's.
            storage.set_background_merge_bytes(u64::MAX);
            let mut disk = crate::storage::with_storage(Some(Arc::clone(&storage)), Trace::new);
            let mut memory = Trace::new();
            // Read by key from the start: the files written carry key
            // filters, which the lookups below consult.
            prop_assert!(disk.get(&[at.0]).is_empty());
            for &(k, r, w, seal) in &ops {
                for t in [&mut disk, &mut memory] {
                    t.update(&[k], &[r], w);
                    if seal {
                        t.seal();
                    }
                }
            }
            let flat = |e: Entry<'_>| (e.0.to_vec(), e.1.to_vec(), e.2);
            prop_assert_eq!(disk.iter().map(flat).collect::<Vec<_>>(), memory.iter().map(flat).collect::<Vec<_>>());
            let mut scanned = Vec::new();
            disk.for_each(|k, r, w| scanned.push((k.to_vec(), r.to_vec(), w)));
            prop_assert_eq!(scanned, memory.iter().map(flat).collect::<Vec<_>>());
            prop_assert_eq!(disk.len(), memory.len());
            prop_assert_eq!(
                disk.seek_back(&[at.0], &[at.1]).map(flat).collect::<Vec<_>>(),
                memory.seek_back(&[at.0], &[at.1]).map(flat).collect::<Vec<_>>()
            );
            prop_assert_eq!(disk.get(&[at.0]), memory.get(&[at.0]));
            prop_assert_eq!(disk.storage_bytes() as u64, storage.stats().bytes);
            prop_assert!(disk.bytes() <= memory.bytes());
            let keep = |k: &[u8]| k[0].is_multiple_of(2);
            prop_assert_eq!(disk.retain_keys(keep), memory.retain_keys(keep));
            prop_assert_eq!(disk.iter().map(flat).collect::<Vec<_>>(), memory.iter().map(flat).collect::<Vec<_>>());
            drop(disk);
            prop_assert_eq!(storage.stats().files, 0);
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }

        /// With merges into files on the merger thread, a trace holds what
        /// one merging in the step holds after every seal, whatever merges are still in progress; once they are
        /// finished its files are exactly its batches, and dropping it (or
        /// clearing it) mid-merge leaves no file behind.
        #[test]
        fn merges_in_the_background_change_nothing_a_reader_sees(
            ops in prop::collection::vec((0u8..6, 0u8..6, -2i64..3, prop::bool::ANY), 0..300),
            at in (0u8..7, 0u8..7),
            clear in prop::bool::ANY,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(dir.path(), 0).unwrap();
            storage.set_background_merge_bytes(0);
            let mut disk = crate::storage::with_storage(Some(Arc::clone(&storage)), Trace::new);
            let mut memory = Trace::new();
            let flat = |e: Entry<'_>| (e.0.to_vec(), e.1.to_vec(), e.2);
            for &(k, r, w, seal) in &ops {
                for t in [&mut disk, &mut memory] {
                    t.update(&[k], &[r], w);
                    if seal {
                        t.seal();
                    }
                }
                if seal {
                    prop_assert_eq!(disk.iter().map(flat).collect::<Vec<_>>(), memory.iter().map(flat).collect::<Vec<_>>());
                    prop_assert_eq!(
                        disk.seek_back(&[at.0], &[at.1]).map(flat).collect::<Vec<_>>(),
                        memory.seek_back(&[at.0], &[at.1]).map(flat).collect::<Vec<_>>()
                    );
                    prop_assert_eq!(disk.get(&[at.0]), memory.get(&[at.0]));
                    prop_assert!(disk.num_batches() <= 2 * MAX_SLOTS);
                }
            }
            let copy = disk.clone();
            prop_assert_eq!(copy.iter().map(flat).collect::<Vec<_>>(), memory.iter().map(flat).collect::<Vec<_>>());
            drop(copy);
            if clear {
                disk.clear();
                prop_assert!(disk.is_empty());
            } else {
                disk.finish_merges();
                prop_assert!(disk.slots.iter().all(|s| matches!(s, Slot::Ready(_))));
                prop_assert_eq!(disk.iter().map(flat).collect::<Vec<_>>(), memory.iter().map(flat).collect::<Vec<_>>());
                prop_assert_eq!(disk.storage_bytes() as u64, storage.stats().bytes);
            }
            drop(disk);
            prop_assert_eq!(storage.stats().files, 0);
            prop_assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }
}
