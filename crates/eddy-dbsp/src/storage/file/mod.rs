//! Batch files: the layout of a trace batch on disk and the readers that
//! read it back; `writer.rs` writes them.
//!
//! File layout (little-endian; every region starts at a multiple of 8):
//!
//! ```text
//! "EDDYBAT2" | 16 reserved bytes | data (keys and rows) | padding |
//! offsets: u64 × (2n + 1) | weights: i64 × n |
//! fence bytes (padded to 8) | fence ends: (u64, u64) × f | filter: u64 × w |
//! n: u64 | data_len: u64 | fence_bytes: u64 | f: u64 | w: u64 |
//! crc32 × blocks (padded to 8) | blocks: u64 | "EDDYEND1"
//! ```
//!
//! (Files of the first version, `"EDDYBAT1"`, have no fences or filter
//! and only `n` and `data_len` before the checksums; they are still read,
//! their fences and filter rebuilt by a scan when they are opened.)
//!
//! Key `i` is `data[o[2i]..o[2i+1]]` and its row `data[o[2i+1]..o[2i+2]]`.
//! Every [`FENCE`]-th key and row is also kept in memory (the *fences*, collected
//! by the writer or, for a file opened from elsewhere, while it is
//! verified), and so is a Bloom filter of the keys (`bloom.rs`). A lookup
//! asks the filter, binary-searches the fences in memory and then reads
//! the one window of at most `FENCE` entries between two fences: its
//! offsets, data and weights, read with `pread` and kept decoded, as one
//! block, in the storage's block cache (`cache.rs`). Nothing is memory-mapped, so what a
//! batch file costs in resident memory is its fences and filter plus what
//! the bounded cache holds. Merges read files in large sequential chunks
//! past the cache ([`Scan`]).
//!
//! Every 64 KiB block of the file before the checksums has a CRC-32;
//! [`FileBatch::open`] verifies them all, and a file that fails is an error
//! that names it, never silently wrong data. A file is written under a
//! temporary name, synced and renamed, and deleted when the last batch
//! that reads it is dropped. A read that fails later (a disk error) stops
//! the step with a message that names the file ([`fail`]).
//!
//! The layout is itself the format (raw arrays read in place), so no
//! serialization framework sits between a batch and its file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::bloom::Bloom;
use super::cache::Weigh;
use super::{storage_error, Storage};

mod writer;
use crate::{Error, Result};
pub(crate) use writer::BatchWriter;

const MAGIC: &[u8; 8] = b"EDDYBAT2";
/// The first version's magic: no fences or filter in the file.
const MAGIC_V1: &[u8; 8] = b"EDDYBAT1";
const END: &[u8; 8] = b"EDDYEND1";
const BLOCK: usize = 64 * 1024;
/// One key in this many is kept in memory as a fence.
pub(crate) const FENCE: usize = 32;
/// A file opened from elsewhere is verified in ranges of this many bytes.
const VERIFY_RANGE: usize = 8 << 20;

/// Every [`FENCE`]-th key and row of a batch, in memory: fence `j` is
/// entry `j * FENCE`'s. With the rows, a search for an entry (not only a
/// key) ends in one window even when a key has many rows.
#[derive(Default)]
pub(crate) struct Fences {
    bytes: Vec<u8>,
    /// Where each fence's key ends and its row ends.
    ends: Vec<(usize, usize)>,
}

impl Fences {
    fn push(&mut self, key: &[u8], row: &[u8]) {
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        self.bytes.extend_from_slice(row);
        self.ends.push((key_end, self.bytes.len()));
    }

    fn entry(&self, j: usize) -> (&[u8], &[u8]) {
        let start = if j == 0 { 0 } else { self.ends[j - 1].1 };
        let (key_end, row_end) = self.ends[j];
        (&self.bytes[start..key_end], &self.bytes[key_end..row_end])
    }

    /// The first fence for which `before` is false (fences are in order
    /// and `before` holds for a prefix of them).
    fn partition(&self, before: impl Fn((&[u8], &[u8])) -> bool) -> usize {
        partition_range((0, self.ends.len()), |j| before(self.entry(j)))
    }

    /// Bytes in memory.
    fn size(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<(usize, usize)>()
    }

    /// Gives back the room grown for pushes.
    fn shrink(&mut self) {
        self.bytes.shrink_to_fit();
        self.ends.shrink_to_fit();
    }
}

/// The first index in `lo..hi` for which `before` is false (`before` holds
/// for a prefix of the range).
pub(crate) fn partition_range(
    (mut lo, mut hi): (usize, usize),
    mut before: impl FnMut(usize) -> bool,
) -> usize {
    while lo < hi {
        let mid = (lo + hi) / 2;
        if before(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Gives each batch file opened its own name in the block cache.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// Where the data region starts: after the magic and the reserved bytes.
const DATA: u64 = 24;

/// Entries a scan reads at a time (fewer when their bytes pass
/// [`SCAN_BYTES`]).
const SCAN_ENTRIES: usize = 4096;
const SCAN_BYTES: u64 = 1 << 20;

/// An immutable batch in a file, read with `pread`: by the window of a
/// fence through the storage's block cache ([`Reader`]), or in large
/// sequential chunks past it ([`Scan`], for merges).
pub struct FileBatch {
    path: PathBuf,
    file: File,
    /// The file's name in the block cache.
    id: u64,
    size: u64,
    n: usize,
    data_len: u64,
    /// Positions of the offsets and of the weights.
    offsets: u64,
    weights: u64,
    fences: Fences,
    bloom: Bloom,
    storage: Option<Arc<Storage>>,
}

impl std::fmt::Debug for FileBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FileBatch({}, {} entries)", self.path.display(), self.n)
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// The filter of a file of about `keys` keys: none (it excludes nothing)
/// for fewer than a window's worth, which one read of a window answers.
fn filter_for(keys: usize) -> Bloom {
    if keys >= FENCE {
        Bloom::with_keys(keys)
    } else {
        Bloom::default()
    }
}

/// Reads `buf.len()` bytes of `file` at `pos`.
fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], pos: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(buf, pos)
        .map_err(|e| storage_error(path, e))
}

impl FileBatch {
    /// Opens a batch file written earlier and verifies every block's
    /// checksum; a file that fails is an error that names it.
    pub fn open(path: &Path) -> Result<Arc<Self>> {
        Self::load(path, None, None)
    }

    /// Opens a batch file. A file this process just wrote comes with its
    /// fences and its filter; any other (`None`) is verified (every
    /// block's checksum) and its fences and filter read from it. Offsets
    /// are checked window by window as they are read, so a file that
    /// passes its checksums and lies in its offsets is an error, never a
    /// read astray.
    pub(super) fn load(
        path: &Path,
        storage: Option<Arc<Storage>>,
        written: Option<(Fences, Bloom)>,
    ) -> Result<Arc<Self>> {
        let file = File::open(path).map_err(|e| storage_error(path, e))?;
        let size = file.metadata().map_err(|e| storage_error(path, e))?.len();
        let bad = |what: &str| Error::Storage(format!("{}: {what}", path.display()));
        if size < 48 {
            return Err(bad("not a batch file (too short)"));
        }
        let (mut head, mut tail) = ([0u8; 8], [0u8; 16]);
        read_exact_at(&file, path, &mut head, 0)?;
        read_exact_at(&file, path, &mut tail, size - 16)?;
        let v1 = &head == MAGIC_V1;
        if !(v1 || &head == MAGIC) || &tail[8..] != END {
            return Err(bad("not a batch file (bad magic)"));
        }
        let blocks = read_u64(&tail, 0);
        let crc_len = blocks.checked_mul(4).ok_or_else(|| bad("bad trailer"))?;
        let crc_start = (size - 16)
            .checked_sub(crc_len.div_ceil(8) * 8)
            .ok_or_else(|| bad("bad trailer"))?;
        if blocks != crc_start.div_ceil(BLOCK as u64) || crc_start < 40 {
            return Err(bad("bad trailer"));
        }
        let verify = written.is_none();
        if verify {
            let mut crcs = vec![0u8; crc_len as usize];
            read_exact_at(&file, path, &mut crcs, crc_start)?;
            let mut range = vec![0u8; VERIFY_RANGE];
            let mut pos = 0;
            while pos < crc_start {
                let len = (crc_start - pos).min(VERIFY_RANGE as u64) as usize;
                read_exact_at(&file, path, &mut range[..len], pos)?;
                for (b, chunk) in range[..len].chunks(BLOCK).enumerate() {
                    let i = pos as usize / BLOCK + b;
                    let expected =
                        u32::from_le_bytes(crcs[4 * i..4 * i + 4].try_into().expect("4 bytes"));
                    if crc32fast::hash(chunk) != expected {
                        return Err(bad(&format!("checksum mismatch in block {i}")));
                    }
                }
                pos += len as u64;
            }
        }
        let counts_len: u64 = if v1 { 16 } else { 40 };
        let mut counts = [0u8; 40];
        let counts_at = crc_start - counts_len;
        read_exact_at(&file, path, &mut counts[..counts_len as usize], counts_at)?;
        let count = |i: usize| read_u64(&counts, 8 * i);
        let (n, data_len) = (count(0), count(1));
        let (fence_bytes, fence_count, bloom_words) = if v1 {
            (0, 0, 0)
        } else {
            (count(2), count(3), count(4))
        };
        if [n, data_len, fence_bytes, fence_count, bloom_words]
            .iter()
            .any(|&c| c > size)
        {
            return Err(bad("inconsistent sizes"));
        }
        // Every count is at most the file's size: these sums cannot overflow.
        let offsets = DATA + data_len.div_ceil(8) * 8;
        let weights = offsets + 8 * (2 * n + 1);
        let fences_at = weights + 8 * n;
        let ends_at = fences_at + fence_bytes.div_ceil(8) * 8;
        let bloom_at = ends_at + 16 * fence_count;
        let stored_fences = !v1 && fence_count != n.div_ceil(FENCE as u64);
        if n > size / 24 || bloom_at + 8 * bloom_words != counts_at || stored_fences {
            return Err(bad("inconsistent sizes"));
        }
        let read_at = |pos: u64, len: u64| -> Result<Vec<u8>> {
            let mut buf = vec![0u8; len as usize];
            read_exact_at(&file, path, &mut buf, pos)?;
            Ok(buf)
        };
        let (fences, bloom) = match written {
            Some(written) => written,
            None if v1 => Default::default(), // rebuilt by the scan below
            None => {
                let bytes = read_at(fences_at, fence_bytes)?;
                let ends: Vec<(usize, usize)> = (read_at(ends_at, 16 * fence_count)?)
                    .chunks_exact(16)
                    .map(|c| (read_u64(c, 0) as usize, read_u64(c, 8) as usize))
                    .collect();
                let mut last = 0;
                for &(key_end, row_end) in &ends {
                    if key_end < last || row_end < key_end || row_end > bytes.len() {
                        return Err(bad("fences out of order"));
                    }
                    last = row_end;
                }
                // Only a storage's lookups use the filter.
                let bloom = match &storage {
                    Some(_) => {
                        let words = (read_at(bloom_at, 8 * bloom_words)?)
                            .chunks_exact(8)
                            .map(|c| read_u64(c, 0))
                            .collect();
                        Bloom::from_words(words).ok_or_else(|| bad("a bad filter"))?
                    }
                    None => Bloom::default(),
                };
                (Fences { bytes, ends }, bloom)
            }
        };
        let mut batch = Self {
            path: path.to_path_buf(),
            file,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            size,
            n: n as usize,
            data_len,
            offsets,
            weights,
            fences,
            bloom,
            storage,
        };
        if v1 && verify {
            // A file of the first version: its fences and the keys of its
            // filter are collected by a scan (which also checks, window by
            // window, that its offsets rise within the data).
            let mut fences = Fences::default();
            let mut bloom = match batch.storage {
                Some(_) => filter_for(batch.n),
                None => Bloom::default(),
            };
            let mut scan = Scan::new(&batch)?;
            let mut last: Option<Vec<u8>> = None;
            while let Some((i, (key, row, _))) = scan.peek() {
                if i % FENCE == 0 {
                    fences.push(key, row);
                }
                if last.as_deref() != Some(key) {
                    bloom.insert(key);
                    last = Some(key.to_vec());
                }
                scan.advance()?;
            }
            batch.fences = fences;
            batch.bloom = bloom;
        }
        batch.fences.shrink();
        let batch = Arc::new(batch);
        if let Some(s) = &batch.storage {
            s.files.fetch_add(1, Ordering::Relaxed);
            s.bytes.fetch_add(batch.size(), Ordering::Relaxed);
            s.index_bytes
                .fetch_add(batch.memory_bytes() as u64, Ordering::Relaxed);
        }
        Ok(batch)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether the batch has no entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Bytes this batch keeps in memory (its fences and its filter).
    pub fn memory_bytes(&self) -> usize {
        self.fences.size() + self.bloom.size()
    }

    /// False when no entry has key `key` (most keys a file lacks are
    /// answered so, without a read).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.bloom.may_contain(key)
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads `len` bytes at `pos` into `out` (a reused buffer is
    /// overwritten, not zeroed first).
    fn read(&self, pos: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        out.resize(len, 0);
        read_exact_at(&self.file, &self.path, out, pos)
    }

    /// Reads entries `first..` into `window`: at most `count` of them, and
    /// past the first no more than `max_data` bytes of keys and rows.
    fn read_window(
        &self,
        first: usize,
        count: usize,
        max_data: u64,
        window: &mut Window,
    ) -> Result<()> {
        let mut count = count.min(self.n - first);
        let bad = || Error::Storage(format!("{}: offsets out of order", self.path.display()));
        let scratch = &mut window.scratch;
        self.read(
            self.offsets + 16 * first as u64,
            8 * (2 * count + 1),
            scratch,
        )?;
        window.offsets.clear();
        window
            .offsets
            .extend(scratch.chunks_exact(8).map(|c| read_u64(c, 0)));
        let o = &window.offsets;
        if o.windows(2).any(|w| w[0] > w[1]) || o[2 * count] > self.data_len {
            return Err(bad());
        }
        while count > 1 && o[2 * count] - o[0] > max_data {
            count = (count / 2).max(1);
        }
        window.offsets.truncate(2 * count + 1);
        let (start, end) = (window.offsets[0], window.offsets[2 * count]);
        self.read(DATA + start, (end - start) as usize, &mut window.data)?;
        let scratch = &mut window.scratch;
        self.read(self.weights + 8 * first as u64, 8 * count, scratch)?;
        window.weights.clear();
        window
            .weights
            .extend(scratch.chunks_exact(8).map(|c| read_u64(c, 0) as i64));
        window.first = first;
        Ok(())
    }
}

impl Drop for FileBatch {
    fn drop(&mut self) {
        if let Some(s) = &self.storage {
            s.files.fetch_sub(1, Ordering::Relaxed);
            s.bytes.fetch_sub(self.size(), Ordering::Relaxed);
            s.index_bytes
                .fetch_sub(self.memory_bytes() as u64, Ordering::Relaxed);
            s.cache().forget(self.id);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Entries of a batch file read into memory: `first..first + len`.
#[derive(Debug, Default)]
pub(crate) struct Window {
    first: usize,
    /// `2 len + 1` offsets into the file's data; `data` starts at the first.
    offsets: Vec<u64>,
    data: Vec<u8>,
    weights: Vec<i64>,
    scratch: Vec<u8>,
}

impl Weigh for Window {
    fn weight(&self) -> usize {
        std::mem::size_of::<Self>()
            + 8 * (self.offsets.capacity() + self.weights.capacity())
            + self.data.capacity()
            + self.scratch.capacity()
    }
}

impl Window {
    /// Whether entry `i` is in the window.
    fn holds(&self, i: usize) -> bool {
        i >= self.first && i < self.first + self.weights.len()
    }

    /// Entry `i` (in the window): key, row and weight.
    fn entry(&self, i: usize) -> (&[u8], &[u8], i64) {
        let j = i - self.first;
        let o = &self.offsets;
        let at = |k: usize| (o[k] - o[0]) as usize;
        let data = &self.data;
        (
            &data[at(2 * j)..at(2 * j + 1)],
            &data[at(2 * j + 1)..at(2 * j + 2)],
            self.weights[j],
        )
    }
}

/// Panics with a read error: a batch file that cannot be read back (a
/// disk error, a file changed under the process) stops the step, which
/// the server reports as the pipeline's failure.
pub(crate) fn fail(e: Error) -> ! {
    panic!("reading a batch file: {e}")
}

/// Reads the entries of a batch file by index, a fence's window at a time
/// through the block cache (the window decoded, shared with other
/// readers): a lookup reads one window.
pub(crate) struct Reader<'a> {
    file: &'a FileBatch,
    window: Option<Arc<Window>>,
}

impl<'a> Reader<'a> {
    /// A reader of `file`.
    pub(crate) fn new(file: &'a FileBatch) -> Self {
        Self { file, window: None }
    }

    /// Entry `i`.
    pub(crate) fn at(&mut self, i: usize) -> (&[u8], &[u8], i64) {
        if !self.window.as_ref().is_some_and(|w| w.holds(i)) {
            let block = i / FENCE;
            let load = || -> Result<Arc<Window>> {
                let mut window = Window::default();
                (self.file).read_window(block * FENCE, FENCE, u64::MAX, &mut window)?;
                window.scratch = Vec::new();
                Ok(Arc::new(window))
            };
            let window = match &self.file.storage {
                Some(s) => s.cache().block(self.file.id, block as u64, load),
                None => load(),
            };
            self.window = Some(window.unwrap_or_else(|e| fail(e)));
        }
        self.window.as_ref().expect("read above").entry(i)
    }

    /// The first entry whose key is not less than `key`.
    pub(crate) fn lower_bound(&mut self, key: &[u8]) -> usize {
        let j = self.file.fences.partition(|(k, _)| k < key);
        partition_range(self.file.window(j), |i| self.at(i).0 < key)
    }

    /// The first entry not less than `(key, row)`.
    pub(crate) fn lower_bound_entry(&mut self, key: &[u8], row: &[u8]) -> usize {
        let j = self.file.fences.partition(|f| f < (key, row));
        partition_range(self.file.window(j), |i| {
            let (k, r, _) = self.at(i);
            (k, r) < (key, row)
        })
    }
}

impl FileBatch {
    /// The entries to search when fence `j` is the first not less than
    /// what is sought: the answer is past the fence before it and at most
    /// at it, in one window.
    fn window(&self, j: usize) -> (usize, usize) {
        (j.saturating_sub(1) * FENCE, (j * FENCE).min(self.n))
    }
}

/// Reads a batch file's entries in order, in large chunks straight from
/// the file (a merge reads each entry once: the cache would only lose
/// what lookups need).
pub(crate) struct Scan<'a> {
    file: &'a FileBatch,
    window: Window,
    next: usize,
}

impl<'a> Scan<'a> {
    /// A scan from the first entry.
    pub(crate) fn new(file: &'a FileBatch) -> Result<Self> {
        let mut scan = Self {
            file,
            window: Window::default(),
            next: 0,
        };
        scan.fill()?;
        Ok(scan)
    }

    /// The entry at the scan's position and its index; `None` at the end.
    pub(crate) fn peek(&self) -> Option<(usize, crate::trace::Entry<'_>)> {
        let i = self.next;
        self.window.holds(i).then(|| (i, self.window.entry(i)))
    }

    /// Moves to the next entry.
    pub(crate) fn advance(&mut self) -> Result<()> {
        self.next += 1;
        self.fill()
    }

    fn fill(&mut self) -> Result<()> {
        if !self.window.holds(self.next) && self.next < self.file.n {
            let window = &mut self.window;
            (self.file).read_window(self.next, SCAN_ENTRIES, SCAN_BYTES, window)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(storage: &Arc<Storage>, n: u32) -> Arc<FileBatch> {
        let mut w = storage.writer(n as usize).unwrap();
        for i in 0..n {
            w.push(
                &i.to_be_bytes(),
                format!("row {i}").as_bytes(),
                i as i64 - 5,
            )
            .unwrap();
        }
        w.finish().unwrap()
    }

    #[test]
    fn a_batch_file_reads_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 0).unwrap();
        for n in [0, 1, 7, 20_000] {
            let batch = write(&storage, n);
            assert_eq!(batch.len(), n as usize);
            let reopened = FileBatch::open(batch.path()).unwrap();
            assert_eq!(reopened.len(), n as usize);
            for file in [&batch, &reopened] {
                let expected = |i: u32| {
                    (
                        i.to_be_bytes().to_vec(),
                        format!("row {i}").into_bytes(),
                        i as i64 - 5,
                    )
                };
                // By index through the cache, backwards so that every
                // window is read anew, and in order by a scan.
                let mut reader = Reader::new(file);
                for i in (0..n).rev() {
                    let (k, r, w) = reader.at(i as usize);
                    assert_eq!((k.to_vec(), r.to_vec(), w), expected(i));
                    assert!(file.may_contain(k));
                }
                // Another reader of a window read: from the cache (for the
                // file of a storage).
                if n > 0 {
                    assert_eq!(Reader::new(file).at(0).2, -5);
                }
                let mut scan = Scan::new(file).unwrap();
                let mut seen = 0;
                while let Some((i, (k, r, w))) = scan.peek() {
                    assert_eq!(
                        (i, (k.to_vec(), r.to_vec(), w)),
                        (seen, expected(seen as u32))
                    );
                    seen += 1;
                    scan.advance().unwrap();
                }
                assert_eq!(seen, n as usize);
            }
        }
        let stats = storage.stats().cache;
        assert!(stats.hits > 0 && stats.misses > 0, "{stats:?}");
    }

    proptest::proptest! {
        /// Lookups through the fences find what a binary search over every
        /// entry finds, in a file just written and in one reopened (whose
        /// fences are read back while it is verified), with keys repeated
        /// across fence boundaries.
        #[test]
        fn fenced_lookups_equal_a_full_search(
            mut entries in proptest::collection::vec((0u8..40, 0u16..200), 0..400),
            probes in proptest::collection::vec((0u8..42, 0u16..201), 1..40),
        ) {
            entries.sort();
            entries.dedup();
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(dir.path(), 0).unwrap();
            let mut w = storage.writer(entries.len()).unwrap();
            for (k, r) in &entries {
                w.push(&[*k], &r.to_be_bytes(), 1).unwrap();
            }
            let written = w.finish().unwrap();
            let reopened = FileBatch::open(written.path()).unwrap();
            for batch in [&written, &reopened] {
                let mut batch = Reader::new(batch);
                for (k, r) in &probes {
                    let key = [*k];
                    let row = r.to_be_bytes();
                    let by_key = entries.partition_point(|(ek, _)| *ek < *k);
                    let by_entry = entries.partition_point(|(ek, er)| (*ek, *er) < (*k, *r));
                    proptest::prop_assert_eq!(batch.lower_bound(&key), by_key);
                    proptest::prop_assert_eq!(batch.lower_bound_entry(&key, &row), by_entry);
                }
            }
        }
    }

    /// The bytes of a file of the first version (no fences, no filter)
    /// holding `entries`.
    fn first_version(entries: &[(Vec<u8>, Vec<u8>, i64)]) -> Vec<u8> {
        let mut data = Vec::new();
        let mut offsets = vec![0u64];
        for (k, r, _) in entries {
            data.extend_from_slice(k);
            offsets.push(data.len() as u64);
            data.extend_from_slice(r);
            offsets.push(data.len() as u64);
        }
        let data_len = data.len() as u64;
        let mut file = MAGIC_V1.to_vec();
        file.extend_from_slice(&[0u8; 16]);
        file.extend_from_slice(&data);
        file.resize(file.len().div_ceil(8) * 8, 0);
        offsets
            .iter()
            .for_each(|o| file.extend_from_slice(&o.to_le_bytes()));
        entries
            .iter()
            .for_each(|e| file.extend_from_slice(&e.2.to_le_bytes()));
        file.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        file.extend_from_slice(&data_len.to_le_bytes());
        let crcs: Vec<u32> = file.chunks(BLOCK).map(crc32fast::hash).collect();
        crcs.iter()
            .for_each(|c| file.extend_from_slice(&c.to_le_bytes()));
        file.resize(file.len().div_ceil(8) * 8, 0);
        file.extend_from_slice(&(crcs.len() as u64).to_le_bytes());
        file.extend_from_slice(END);
        file
    }

    /// A file of the first version (in a checkpoint written before the
    /// fences and the filter were stored) is still read, adopted by a
    /// storage, and looked up; its fences and filter are rebuilt.
    #[test]
    fn files_of_the_first_version_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(&dir.path().join("s"), 0).unwrap();
        let entries: Vec<(Vec<u8>, Vec<u8>, i64)> = (0..5000u32)
            .map(|i| {
                (
                    (i / 3).to_be_bytes().to_vec(),
                    format!("r{i}").into_bytes(),
                    i as i64 + 1,
                )
            })
            .collect();
        let old = dir.path().join("old.batch");
        std::fs::write(&old, first_version(&entries)).unwrap();
        for batch in [FileBatch::open(&old).unwrap(), storage.adopt(&old).unwrap()] {
            assert_eq!(batch.len(), entries.len());
            let mut reader = Reader::new(&batch);
            for (i, (k, r, w)) in entries.iter().enumerate().step_by(7) {
                assert_eq!(reader.at(i), (&k[..], &r[..], *w));
                assert_eq!(reader.lower_bound(k), i - i % 3);
                assert_eq!(reader.lower_bound_entry(k, r), i);
            }
        }
        let adopted = storage.adopt(&old).unwrap();
        assert!(adopted.may_contain(&7u32.to_be_bytes()));
        let absent = (5000u32..6000).filter(|i| adopted.may_contain(&i.to_be_bytes()));
        assert!(absent.count() < 100, "the filter was rebuilt");
    }

    #[test]
    fn files_are_counted_and_removed_with_their_batch() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 0).unwrap();
        let batch = write(&storage, 1000);
        let stats = storage.stats();
        assert_eq!(stats.files, 1);
        assert_eq!(stats.bytes, batch.size());
        // Its fences and its filter, in memory.
        assert_eq!(stats.index_bytes, batch.memory_bytes() as u64);
        assert!(stats.index_bytes > 0);
        let path = batch.path().to_path_buf();
        assert!(path.exists());
        assert_eq!(Reader::new(&batch).at(999).2, 994);
        assert!(storage.stats().cache.bytes > 0);
        storage.set_cache_bytes(0);
        assert_eq!(storage.stats().cache.bytes, 0);
        assert_eq!(
            Reader::new(&batch).at(999).2,
            994,
            "read again past the cache"
        );
        storage.set_cache_bytes(1 << 20);
        Reader::new(&batch).at(0);
        drop(batch);
        assert!(!path.exists());
        assert_eq!(storage.stats().files, 0);
        assert_eq!(storage.stats().bytes, 0);
        assert_eq!(storage.stats().index_bytes, 0);
        assert_eq!(
            storage.stats().cache.bytes,
            0,
            "a file's blocks leave with it"
        );
    }

    #[test]
    fn a_corrupt_file_is_an_error_that_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 0).unwrap();
        let batch = write(&storage, 50_000);
        let copy = dir.path().join("copy.bin");
        let mut bytes = std::fs::read(batch.path()).unwrap();
        bytes[100_000] ^= 1;
        std::fs::write(&copy, &bytes).unwrap();
        let err = FileBatch::open(&copy).unwrap_err().to_string();
        assert!(
            err.contains("copy.bin") && err.contains("checksum"),
            "{err}"
        );
        std::fs::write(&copy, &bytes[..bytes.len() - 3]).unwrap();
        let err = FileBatch::open(&copy).unwrap_err().to_string();
        assert!(err.contains("copy.bin"), "{err}");
    }
}
