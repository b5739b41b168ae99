//! What a trace's readers copied out of batch files (see [`Reads`]).

use super::Entry;

/// Keys and rows copied out of batch files for the trace's readers: a
/// lookup or a cursor returns slices borrowed from the trace, so what it
/// read from a file must live as long as that borrow. The copies are
/// dropped by the next change to the trace (which needs `&mut`, so no
/// borrow is left).
#[derive(Default)]
pub(super) struct Reads {
    /// Each chunk is filled up to its capacity and never reallocated, so a
    /// slice handed out stays where it is until the chunks are dropped.
    chunks: std::cell::RefCell<Vec<Vec<u8>>>,
}

impl std::fmt::Debug for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reads")
    }
}

/// The smallest chunk of [`Reads`].
const READS_CHUNK: usize = 64 * 1024;

impl Reads {
    /// A copy of `parts`, one after the other, that lives until the next
    /// [`clear`](Self::clear).
    pub(super) fn copy_parts(&self, parts: [&[u8]; 2]) -> &[u8] {
        let len = parts[0].len() + parts[1].len();
        let mut chunks = self.chunks.borrow_mut();
        let room = chunks.last().is_some_and(|c| c.capacity() - c.len() >= len);
        if !room {
            chunks.push(Vec::with_capacity(len.max(READS_CHUNK)));
        }
        let chunk = chunks.last_mut().expect("a chunk with room");
        let start = chunk.len();
        // Within capacity: the buffer never moves.
        chunk.extend_from_slice(parts[0]);
        chunk.extend_from_slice(parts[1]);
        let copy = &chunk[start..];
        // SAFETY: `copy` points into a chunk's heap buffer. That buffer is
        // never reallocated (pushes stay within its capacity) nor written
        // again where a copy was handed out, and it is freed only by
        // `clear`, which takes `&mut self`, so no slice borrowed from
        // `&self` can outlive it. Moving the `Vec` that owns the buffer
        // (when `chunks` grows) does not move the buffer.
        unsafe { std::slice::from_raw_parts(copy.as_ptr(), copy.len()) }
    }

    /// A copy of `bytes` that lives until the next [`clear`](Self::clear).
    pub(super) fn copy(&self, bytes: &[u8]) -> &[u8] {
        self.copy_parts([bytes, &[]])
    }

    /// A copy of an entry's key and row.
    pub(super) fn entry(&self, (key, row, weight): Entry<'_>) -> Entry<'_> {
        let (k, r) = self.copy_parts([key, row]).split_at(key.len());
        (k, r, weight)
    }

    /// Drops every copy.
    pub(super) fn clear(&mut self) {
        let chunks = self.chunks.get_mut();
        chunks.truncate(1);
        if let Some(c) = chunks.first_mut() {
            c.clear();
            if c.capacity() > READS_CHUNK {
                *c = Vec::new();
            }
        }
    }
}
