//! The batches of a spine: sorted, consolidated runs of `(key, row,
//! weight)`, in memory or in a batch file.

use std::sync::Arc;

use super::merge::Source;
use crate::storage::{fail, partition_range, FileBatch, Scan};

/// An immutable, sorted, consolidated run of `(key, row, weight)` in
/// memory.
#[derive(Debug, Default, Clone)]
pub(super) struct MemBatch {
    bytes: Vec<u8>,
    /// `2n + 1` offsets: key `i` is `bytes[o[2i]..o[2i+1]]`, row `i` is `bytes[o[2i+1]..o[2i+2]]`.
    offsets: Vec<usize>,
    weights: Vec<i64>,
}

impl MemBatch {
    /// A batch with no entries, ready for pushes.
    pub(super) fn new() -> Self {
        MemBatch {
            bytes: Vec::new(),
            offsets: vec![0],
            weights: Vec::new(),
        }
    }

    pub(super) fn from_sorted<'a>(
        entries: impl Iterator<Item = (&'a [u8], &'a [u8], i64)>,
    ) -> Self {
        let mut b = MemBatch::new();
        for (k, r, w) in entries {
            if w != 0 {
                b.push(k, r, w);
            }
        }
        b
    }

    pub(super) fn len(&self) -> usize {
        self.weights.len()
    }

    pub(super) fn key(&self, i: usize) -> &[u8] {
        &self.bytes[self.offsets[2 * i]..self.offsets[2 * i + 1]]
    }

    pub(super) fn entry(&self, i: usize) -> (&[u8], &[u8], i64) {
        let o = &self.offsets;
        (
            &self.bytes[o[2 * i]..o[2 * i + 1]],
            &self.bytes[o[2 * i + 1]..o[2 * i + 2]],
            self.weights[i],
        )
    }

    pub(super) fn push(&mut self, k: &[u8], r: &[u8], w: i64) {
        self.bytes.extend_from_slice(k);
        self.offsets.push(self.bytes.len());
        self.bytes.extend_from_slice(r);
        self.offsets.push(self.bytes.len());
        self.weights.push(w);
    }

    pub(super) fn size(&self) -> usize {
        self.bytes.len() + 8 * (self.offsets.len() + self.weights.len())
    }
}

/// A batch of a trace: in memory, or in a file.
#[derive(Debug, Clone)]
pub(super) enum Batch {
    /// Shared, so that a checkpoint can write it after the cut.
    Memory(Arc<MemBatch>),
    File(Arc<FileBatch>),
}

impl Batch {
    pub(super) fn len(&self) -> usize {
        match self {
            Batch::Memory(b) => b.len(),
            Batch::File(f) => f.len(),
        }
    }

    /// Whether the batch is held in memory (not in a file).
    pub(super) fn is_memory(&self) -> bool {
        matches!(self, Batch::Memory(_))
    }

    /// Bytes in memory.
    pub(super) fn memory_bytes(&self) -> usize {
        match self {
            Batch::Memory(b) => b.size(),
            Batch::File(f) => f.memory_bytes(),
        }
    }

    /// Bytes on disk.
    pub(super) fn storage_bytes(&self) -> usize {
        match self {
            Batch::Memory(_) => 0,
            Batch::File(f) => f.size() as usize,
        }
    }

    /// Bytes of the batch where it lives (what a merge of it writes).
    pub(super) fn footprint(&self) -> usize {
        self.memory_bytes().max(self.storage_bytes())
    }

    /// The batch read in order by a merge.
    pub(super) fn source(&self) -> Source<'_> {
        match self {
            Batch::Memory(batch) => Source::Memory { batch, next: 0 },
            Batch::File(f) => Source::File(Scan::new(f).unwrap_or_else(|e| fail(e))),
        }
    }
}

impl MemBatch {
    /// The first entry whose key is not less than `key`.
    pub(super) fn lower_bound(&self, key: &[u8]) -> usize {
        partition_range((0, self.len()), |i| self.key(i) < key)
    }

    /// The first entry not less than `(key, row)`.
    pub(super) fn lower_bound_entry(&self, key: &[u8], row: &[u8]) -> usize {
        partition_range((0, self.len()), |i| {
            let (k, r, _) = self.entry(i);
            (k, r) < (key, row)
        })
    }
}
