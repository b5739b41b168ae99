//! Batch files: the layout of a trace batch on disk, its writer, and the
//! mapped batch that reads it.
//!
//! File layout (little-endian; every region starts at a multiple of 8):
//!
//! ```text
//! "EDDYBAT1" | 16 reserved bytes | data (keys and rows) | padding |
//! offsets: u64 × (2n + 1) | weights: i64 × n | n: u64 | data_len: u64 |
//! crc32 × blocks (padded to 8) | blocks: u64 | "EDDYEND1"
//! ```
//!
//! Key `i` is `data[o[2i]..o[2i+1]]` and its row `data[o[2i+1]..o[2i+2]]`.
//! Every [`FENCE`]-th key is also kept in memory beside the map (the
//! *fences*, collected by the writer or, for a file opened from elsewhere,
//! while it is verified), so a lookup is a binary search in memory and
//! then one among at most `FENCE` entries of the file: a few pages read,
//! not O(log n). Every 64 KiB block of the file before the checksums has a CRC-32;
//! [`FileBatch::open`] verifies them all, and a file that fails is an error
//! that names it, never silently wrong data. A file is written under a
//! temporary name, synced and renamed, and deleted when the last batch
//! that maps it is dropped.
//!
//! The layout is itself the zero-copy format (raw arrays read in place), so
//! no serialization framework sits between a batch and its file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use memmap2::Mmap;

use super::{storage_error, Storage};
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"EDDYBAT1";
const END: &[u8; 8] = b"EDDYEND1";
const BLOCK: usize = 64 * 1024;
/// One key in this many is kept in memory as a fence.
pub(crate) const FENCE: usize = 32;
/// A file opened from elsewhere is verified in ranges of this many bytes,
/// each dropped from the resident set once read.
const VERIFY_RANGE: usize = 8 << 20;

/// Every [`FENCE`]-th key of a batch, in memory: key `j` is entry
/// `j * FENCE`'s.
#[derive(Default)]
pub(crate) struct Fences {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Fences {
    fn push(&mut self, key: &[u8]) {
        self.bytes.extend_from_slice(key);
        self.ends.push(self.bytes.len());
    }

    fn key(&self, j: usize) -> &[u8] {
        let start = if j == 0 { 0 } else { self.ends[j - 1] };
        &self.bytes[start..self.ends[j]]
    }

    /// The first fence for which `before` is false (fences are in order
    /// and `before` holds for a prefix of them).
    fn partition(&self, before: impl Fn(&[u8]) -> bool) -> usize {
        partition_range((0, self.ends.len()), |j| before(self.key(j)))
    }

    /// Bytes in memory.
    fn size(&self) -> usize {
        self.bytes.capacity() + self.ends.capacity() * std::mem::size_of::<usize>()
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
    before: impl Fn(usize) -> bool,
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

/// CRC-32 of each `BLOCK` bytes of a stream.
#[derive(Default)]
struct Checksums {
    hasher: crc32fast::Hasher,
    in_block: usize,
    blocks: Vec<u32>,
}

impl Checksums {
    fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (BLOCK - self.in_block).min(bytes.len());
            self.hasher.update(&bytes[..take]);
            self.in_block += take;
            bytes = &bytes[take..];
            if self.in_block == BLOCK {
                self.finish_block();
            }
        }
    }

    fn finish_block(&mut self) {
        let hasher = std::mem::take(&mut self.hasher);
        self.blocks.push(hasher.finalize());
        self.in_block = 0;
    }

    fn finish(mut self) -> Vec<u32> {
        if self.in_block > 0 {
            self.finish_block();
        }
        self.blocks
    }
}

/// A temporary file that collects one array of a batch file while its
/// data is written (so a large merge keeps no array in memory).
struct Spool {
    path: PathBuf,
    out: BufWriter<File>,
}

impl Spool {
    fn create(path: PathBuf) -> Result<Self> {
        let file = File::create(&path).map_err(|e| storage_error(&path, e))?;
        Ok(Self {
            out: BufWriter::with_capacity(1 << 16, file),
            path,
        })
    }

    fn put(&mut self, v: u64) -> Result<()> {
        self.out
            .write_all(&v.to_le_bytes())
            .map_err(|e| storage_error(&self.path, e))
    }
}

/// Adds a value to a spool of an unfinished writer.
fn put(spool: &mut Option<Spool>, v: u64) -> Result<()> {
    spool.as_mut().expect("an unfinished writer").put(v)
}

impl Drop for Spool {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes a batch file entry by entry (entries in order, consolidated):
/// keys and rows stream to the file, offsets and weights to spool files
/// that [`finish`](Self::finish) appends.
pub(crate) struct BatchWriter {
    /// The storage the file belongs to (none for a checkpoint's copy).
    storage: Option<Arc<Storage>>,
    /// Taken by `finish`.
    out: Option<BufWriter<File>>,
    path: PathBuf,
    temporary: PathBuf,
    /// The offsets and the weights, until `finish` takes them.
    offsets: Option<Spool>,
    weights: Option<Spool>,
    n: u64,
    data_len: u64,
    crc: Checksums,
    fences: Fences,
}

impl BatchWriter {
    /// A writer of the file `path`, counted in `storage` if it belongs to
    /// one. Its temporary files sit beside it.
    pub(crate) fn create(path: PathBuf, storage: Option<Arc<Storage>>) -> Result<Self> {
        let temporary = path.with_extension("tmp");
        let file = File::create(&temporary).map_err(|e| storage_error(&temporary, e))?;
        let spool = |what: &str| Spool::create(path.with_extension(format!("{what}.tmp")));
        let (offsets, weights) = (spool("offsets")?, spool("weights")?);
        let mut w = BatchWriter {
            storage,
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            path,
            temporary,
            offsets: Some(offsets),
            weights: Some(weights),
            n: 0,
            data_len: 0,
            crc: Checksums::default(),
            fences: Fences::default(),
        };
        put(&mut w.offsets, 0)?;
        // The header: the counts are known only at the end, so they are
        // kept before the checksums; these 16 bytes are reserved.
        w.write(MAGIC)?;
        w.write(&[0u8; 16])?;
        Ok(w)
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        let out = self.out.as_mut().expect("an unfinished writer");
        out.write_all(bytes)
            .map_err(|e| storage_error(&self.temporary, e))
    }

    /// Appends one entry.
    pub(crate) fn push(&mut self, key: &[u8], row: &[u8], weight: i64) -> Result<()> {
        if self.n.is_multiple_of(FENCE as u64) {
            self.fences.push(key);
        }
        self.write(key)?;
        self.data_len += key.len() as u64;
        put(&mut self.offsets, self.data_len)?;
        self.write(row)?;
        self.data_len += row.len() as u64;
        put(&mut self.offsets, self.data_len)?;
        put(&mut self.weights, weight as u64)?;
        self.n += 1;
        Ok(())
    }

    /// Appends a spool's contents to the file.
    fn append(&mut self, mut spool: Spool) -> Result<()> {
        spool
            .out
            .flush()
            .map_err(|e| storage_error(&spool.path, e))?;
        let mut file = File::open(&spool.path).map_err(|e| storage_error(&spool.path, e))?;
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let read = std::io::Read::read(&mut file, &mut buffer)
                .map_err(|e| storage_error(&spool.path, e))?;
            if read == 0 {
                return Ok(());
            }
            self.write(&buffer[..read])?;
        }
    }

    /// Completes the file (trailer, sync, rename) and maps it.
    pub(crate) fn finish(mut self) -> Result<Arc<FileBatch>> {
        let pad = (8 - (self.data_len % 8) as usize) % 8;
        self.write(&[0u8; 8][..pad])?;
        let temporary = self.temporary.clone();
        for spool in [self.offsets.take(), self.weights.take()] {
            self.append(spool.expect("an unfinished writer"))?;
        }
        let n = self.n;
        let counts: Vec<u8> = [n, self.data_len]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        self.write(&counts)?;
        let crc = std::mem::take(&mut self.crc).finish();
        let mut trailer: Vec<u8> = crc.iter().flat_map(|c| c.to_le_bytes()).collect();
        if !trailer.len().is_multiple_of(8) {
            trailer.extend_from_slice(&[0u8; 4]);
        }
        trailer.extend_from_slice(&(crc.len() as u64).to_le_bytes());
        trailer.extend_from_slice(END);
        let mut out = self.out.take().expect("an unfinished writer");
        out.write_all(&trailer)
            .map_err(|e| storage_error(&temporary, e))?;
        let file = out.into_inner().map_err(|e| storage_error(&temporary, e))?;
        file.sync_all().map_err(|e| storage_error(&temporary, e))?;
        std::fs::rename(&temporary, &self.path).map_err(|e| storage_error(&self.path, e))?;
        let fences = std::mem::take(&mut self.fences);
        let batch = FileBatch::map(&self.path, self.storage.clone(), Some(fences))?;
        if let Some(s) = &self.storage {
            s.written.fetch_add(batch.size(), Ordering::Relaxed);
        }
        Ok(batch)
    }
}

impl Drop for BatchWriter {
    fn drop(&mut self) {
        // An unfinished file (an error midway) is removed; a finished one
        // was renamed away and this fails harmlessly.
        let _ = std::fs::remove_file(&self.temporary);
    }
}

/// An immutable batch in a mapped file.
pub struct FileBatch {
    path: PathBuf,
    map: Mmap,
    n: usize,
    data: std::ops::Range<usize>,
    offsets: usize,
    weights: usize,
    fences: Fences,
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

impl FileBatch {
    /// Opens a batch file written earlier and verifies every block's
    /// checksum; a file that fails is an error that names it.
    pub fn open(path: &Path) -> Result<Arc<Self>> {
        Self::map(path, None, None)
    }

    /// Maps a batch file. A file this process just wrote comes with its
    /// `fences`; any other (`None`) is verified (every block's checksum,
    /// offsets in order) and its fences read, a range at a time, so that
    /// opening a large file does not fill the resident set.
    pub(super) fn map(
        path: &Path,
        storage: Option<Arc<Storage>>,
        fences: Option<Fences>,
    ) -> Result<Arc<Self>> {
        let verify = fences.is_none();
        let file = File::open(path).map_err(|e| storage_error(path, e))?;
        // SAFETY: batch files are created by this process in its own
        // storage folder, never written after they are renamed into place,
        // and removed only when no batch maps them (a removed file stays
        // mapped until unmapped). The folder must not be writable by
        // anyone else (docs/security.md).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| storage_error(path, e))?;
        let bad = |what: &str| Error::Storage(format!("{}: {what}", path.display()));
        let len = map.len();
        if len < 48 || &map[..8] != MAGIC || &map[len - 8..] != END {
            return Err(bad("not a batch file (bad magic)"));
        }
        let blocks = read_u64(&map, len - 16) as usize;
        let crc_len = blocks.checked_mul(4).ok_or_else(|| bad("bad trailer"))?;
        let crc_start = (len - 16)
            .checked_sub(crc_len.div_ceil(8) * 8)
            .ok_or_else(|| bad("bad trailer"))?;
        if blocks != crc_start.div_ceil(BLOCK) {
            return Err(bad("bad trailer"));
        }
        if verify {
            let per_range = VERIFY_RANGE / BLOCK;
            for (r, range) in map[..crc_start].chunks(VERIFY_RANGE).enumerate() {
                for (b, chunk) in range.chunks(BLOCK).enumerate() {
                    let i = r * per_range + b;
                    let expected = u32::from_le_bytes(
                        map[crc_start + 4 * i..crc_start + 4 * i + 4]
                            .try_into()
                            .expect("4 bytes"),
                    );
                    if crc32fast::hash(chunk) != expected {
                        return Err(bad(&format!("checksum mismatch in block {i}")));
                    }
                }
                release_range(&map, r * VERIFY_RANGE, range.len());
            }
        }
        let n = read_u64(&map, crc_start - 16) as usize;
        let data_len = read_u64(&map, crc_start - 8) as usize;
        let data = 24..24usize.saturating_add(data_len);
        let offsets = 24 + data_len.div_ceil(8) * 8;
        let weights = offsets + 8 * (2 * n + 1);
        if n > len / 24 || weights + 8 * n != crc_start - 16 {
            return Err(bad("inconsistent sizes"));
        }
        let mut batch = Self {
            path: path.to_path_buf(),
            map,
            n,
            data,
            offsets,
            weights,
            fences: fences.unwrap_or_default(),
            storage,
        };
        if verify {
            // Offsets must rise within the data, or a read would go
            // astray (a file this process just wrote has them in order).
            let mut last = 0;
            for i in 0..=2 * n {
                let o = batch.offset(i);
                if o < last || o > data_len {
                    return Err(bad("offsets out of order"));
                }
                last = o;
            }
            for j in (0..n).step_by(FENCE) {
                let key = batch.key(j).to_vec();
                batch.fences.push(&key);
            }
            batch.release_pages();
        }
        batch.fences.shrink();
        let batch = Arc::new(batch);
        if let Some(s) = &batch.storage {
            s.files.fetch_add(1, Ordering::Relaxed);
            s.bytes.fetch_add(batch.size(), Ordering::Relaxed);
            let mut live = s.live.lock().unwrap_or_else(|e| e.into_inner());
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&batch));
        }
        Ok(batch)
    }

    fn offset(&self, i: usize) -> usize {
        read_u64(&self.map, self.offsets + 8 * i) as usize
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Bytes this batch keeps in memory (its fences).
    pub fn memory_bytes(&self) -> usize {
        self.fences.size()
    }

    /// The first entry whose key is not less than `key`.
    pub fn lower_bound(&self, key: &[u8]) -> usize {
        let j = self.fences.partition(|f| f < key);
        partition_range(self.window(j, j), |i| self.key(i) < key)
    }

    /// The first entry not less than `(key, row)`.
    pub fn lower_bound_entry(&self, key: &[u8], row: &[u8]) -> usize {
        let first = self.fences.partition(|f| f < key);
        let last = self.fences.partition(|f| f <= key);
        partition_range(self.window(first, last), |i| {
            let (k, r, _) = self.entry(i);
            (k, r) < (key, row)
        })
    }

    /// The entries to search when fence `first` is the first not less
    /// than the key sought and fence `last` the first greater than it:
    /// the answer is past the fence before `first` and at most at `last`.
    fn window(&self, first: usize, last: usize) -> (usize, usize) {
        (first.saturating_sub(1) * FENCE, (last * FENCE).min(self.n))
    }

    /// Whether the batch has no entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.map.len() as u64
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Entry `i`: key, row and weight.
    pub fn entry(&self, i: usize) -> (&[u8], &[u8], i64) {
        let data = &self.map[self.data.clone()];
        let (a, b, c) = (
            self.offset(2 * i),
            self.offset(2 * i + 1),
            self.offset(2 * i + 2),
        );
        let w = read_u64(&self.map, self.weights + 8 * i) as i64;
        (&data[a..b], &data[b..c], w)
    }

    /// Key `i`.
    pub fn key(&self, i: usize) -> &[u8] {
        let data = &self.map[self.data.clone()];
        &data[self.offset(2 * i)..self.offset(2 * i + 1)]
    }

    /// Drops the file's pages from the process's resident memory.
    pub(crate) fn release_pages(&self) {
        release_range(&self.map, 0, self.map.len());
    }
}

/// Drops `len` bytes of `map` from `offset` (page-aligned) from the
/// process's resident memory.
fn release_range(map: &Mmap, offset: usize, len: usize) {
    // SAFETY: the map is a read-only shared mapping of an immutable file:
    // dropping its pages only makes later reads fetch them from the file
    // (or the page cache) again; no data is lost.
    let _ = unsafe { map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len) };
}

impl Drop for FileBatch {
    fn drop(&mut self) {
        if let Some(s) = &self.storage {
            s.files.fetch_sub(1, Ordering::Relaxed);
            s.bytes.fetch_sub(self.size(), Ordering::Relaxed);
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(storage: &Arc<Storage>, n: u32) -> Arc<FileBatch> {
        let mut w = storage.writer().unwrap();
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
            for i in 0..n {
                let (k, r, w) = batch.entry(i as usize);
                assert_eq!(
                    (k, r, w),
                    (
                        &i.to_be_bytes()[..],
                        format!("row {i}").as_bytes(),
                        i as i64 - 5
                    )
                );
            }
            let reopened = FileBatch::open(batch.path()).unwrap();
            assert_eq!(reopened.len(), n as usize);
        }
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
            let mut w = storage.writer().unwrap();
            for (k, r) in &entries {
                w.push(&[*k], &r.to_be_bytes(), 1).unwrap();
            }
            let written = w.finish().unwrap();
            let reopened = FileBatch::open(written.path()).unwrap();
            for batch in [&written, &reopened] {
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

    #[test]
    fn files_are_counted_and_removed_with_their_batch() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 0).unwrap();
        let batch = write(&storage, 1000);
        let stats = storage.stats();
        assert_eq!(stats.files, 1);
        assert_eq!(stats.bytes, batch.size());
        let path = batch.path().to_path_buf();
        assert!(path.exists());
        storage.release_pages();
        assert_eq!(batch.entry(999).2, 994, "pages come back after release");
        drop(batch);
        assert!(!path.exists());
        assert_eq!(storage.stats().files, 0);
        assert_eq!(storage.stats().bytes, 0);
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
