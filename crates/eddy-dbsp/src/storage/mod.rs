//! Storage: trace batches on disk, in a pipeline's storage folder.
//!
//! A trace batch large enough (at least [`Storage::min_bytes`]) is written
//! to an immutable file (`file.rs`) and read back with `pread` through the
//! storage's block cache (`cache.rs`, [`Storage::set_cache_bytes`]): a
//! batch on disk costs its fences and Bloom filter in memory, and the
//! blocks read from it (decoded windows of entries) stay only as long as
//! the bounded cache keeps them. Blocks are shared, and readers copy what
//! they return (a lookup's rows, a cursor's entries) out of them, so
//! evicting a block never invalidates anything.
//!
//! A memory budget ([`Storage::watch_budget`]) lowers the threshold from
//! which batches go to disk while the process is over it, and empties the
//! cache.
//!
//! Merges whose result goes to a file run on the storage's merger thread,
//! off the step's critical path (`merger.rs`).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Error, Result};

mod bloom;
mod cache;
mod file;
mod merger;

pub use cache::{BlockCache, CacheStats, Weigh};
pub use file::FileBatch;
pub(crate) use file::{fail, partition_range, BatchWriter, Reader, Scan};
pub(crate) use merger::Merge;
use merger::Merger;

/// Files of batches carry this extension.
const EXTENSION: &str = "batch";
/// The threshold under memory pressure: nearly every merge goes to disk.
const PRESSURE_MIN_BYTES: usize = 64 * 1024;
/// An operator's hot map of keys ([`crate::operator::state_map`]) moves
/// to its trace past this many times the threshold of batches.
const HOT_STATE_FACTOR: usize = 8;
/// The size from which a merge into a file runs on the merger thread: 16
/// MiB (64 MiB made Nexmark's q13 and q20 write files in the step, 1.5×
/// slower; benches/RESULTS.md, session 30).
const BACKGROUND_MERGE_BYTES: u64 = 16 << 20;
/// The block cache's default capacity.
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// Storages opened so far in this process.
static OPENINGS: AtomicU64 = AtomicU64::new(0);

/// A pipeline's storage: its folder, the size from which batches go to
/// disk, and counters.
pub struct Storage {
    dir: PathBuf,
    min_bytes: usize,
    pressure: AtomicBool,
    /// Which opening of a storage in this process this is (see
    /// `new_path`).
    opening: u64,
    next: AtomicU64,
    files: AtomicU64,
    bytes: AtomicU64,
    /// Bytes in memory of the open files' fences and Bloom filters.
    index_bytes: AtomicU64,
    written: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
    cache: BlockCache<file::Window>,
    background_bytes: AtomicU64,
    background_merges: AtomicU64,
    merger: Merger,
}

/// What a storage holds and has done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Batch files on disk.
    pub files: u64,
    /// Bytes of the batch files on disk.
    pub bytes: u64,
    /// Bytes in memory of the files' fences and Bloom filters (part of
    /// the state's memory: what a file keeps to be read).
    pub index_bytes: u64,
    /// Bytes written to batch files since the storage was opened.
    pub written_bytes: u64,
    /// Batches that could not be written (and stayed in memory).
    pub write_errors: u64,
    /// Merges run by the merger thread, off the step's critical path.
    pub background_merges: u64,
    /// The block cache.
    pub cache: CacheStats,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Storage({})", self.dir.display())
    }
}

impl Storage {
    /// Storage in `dir` (created if missing); batches of at least
    /// `min_bytes` go to disk. Batch files left in `dir` by an earlier
    /// process are removed: nothing refers to them any more.
    pub fn open(dir: &Path, min_bytes: usize) -> Result<Arc<Self>> {
        std::fs::create_dir_all(dir).map_err(|e| storage_error(dir, e))?;
        for entry in std::fs::read_dir(dir).map_err(|e| storage_error(dir, e))? {
            let path = entry.map_err(|e| storage_error(dir, e))?.path();
            let stale = path
                .extension()
                .is_some_and(|e| e == EXTENSION || e == "tmp");
            if stale {
                std::fs::remove_file(&path).map_err(|e| storage_error(&path, e))?;
            }
        }
        Ok(Arc::new(Self {
            dir: dir.to_path_buf(),
            min_bytes,
            pressure: AtomicBool::new(false),
            next: AtomicU64::new(0),
            opening: OPENINGS.fetch_add(1, Ordering::Relaxed),
            files: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            index_bytes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            last_error: Mutex::new(None),
            cache: BlockCache::new(DEFAULT_CACHE_BYTES),
            background_bytes: AtomicU64::new(BACKGROUND_MERGE_BYTES),
            background_merges: AtomicU64::new(0),
            merger: Merger::default(),
        }))
    }

    /// The storage folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The size from which a batch goes to disk (smaller under pressure).
    pub fn min_bytes(&self) -> usize {
        if self.under_pressure() {
            self.min_bytes.min(PRESSURE_MIN_BYTES)
        } else {
            self.min_bytes
        }
    }

    /// The size past which an operator's map of recently touched keys
    /// moves into its trace at the end of a step (see
    /// [`crate::operator::state_map`]): eight times
    /// [`min_bytes`](Self::min_bytes), so 32 MiB by default and 512 KiB
    /// under memory pressure. A checkpoint's cut writes the hot maps while
    /// steps wait, so this also bounds that pause (about 20 ms a map).
    /// Larger limits were measured and not kept: with 1 GiB a map the
    /// spill bench's 10,000,000 groups took 106 s instead of 82 s and a
    /// cut paused steps for 7.4 s (`benches/RESULTS.md`).
    pub fn hot_state_bytes(&self) -> usize {
        self.min_bytes().saturating_mul(HOT_STATE_FACTOR)
    }

    /// Whether the process is over its memory budget (see
    /// [`set_pressure`](Self::set_pressure)).
    pub fn under_pressure(&self) -> bool {
        self.pressure.load(Ordering::Relaxed)
    }

    /// Sets memory pressure: while set, batches go to disk from a much
    /// smaller size.
    pub fn set_pressure(&self, pressure: bool) {
        self.pressure.store(pressure, Ordering::Relaxed);
    }

    /// What the storage holds.
    pub fn stats(&self) -> StorageStats {
        StorageStats {
            files: self.files.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            index_bytes: self.index_bytes.load(Ordering::Relaxed),
            written_bytes: self.written.load(Ordering::Relaxed),
            write_errors: self.errors.load(Ordering::Relaxed),
            background_merges: self.background_merges.load(Ordering::Relaxed),
            cache: self.cache.stats(),
        }
    }

    /// The block cache through which batch files are read.
    pub(crate) fn cache(&self) -> &BlockCache<file::Window> {
        &self.cache
    }

    /// Sets the block cache's capacity (default [`DEFAULT_CACHE_BYTES`]).
    pub fn set_cache_bytes(&self, bytes: usize) {
        self.cache.set_capacity(bytes);
    }

    /// Whether a merge into a file of about `bytes` runs on the merger
    /// thread rather than in the step that asks for it.
    pub fn merges_in_background(&self, bytes: usize) -> bool {
        bytes >= self.min_bytes() && bytes as u64 >= self.background_bytes.load(Ordering::Relaxed)
    }

    /// Runs merges into files of at least `bytes` on the merger thread
    /// (default 16 MiB; smaller ones, quick, stay in the step and keep the
    /// spine short); `u64::MAX` runs every merge in the step (a trace's
    /// batches then depend only on its updates, which some tests compare).
    pub fn set_background_merge_bytes(&self, bytes: u64) {
        self.background_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Runs a merge on the storage's merger thread (see `merger.rs`).
    pub(crate) fn merge_in_background<T: Send + 'static>(
        &self,
        work: impl FnOnce(&dyn Fn() -> bool) -> Option<T> + Send + 'static,
    ) -> Arc<Merge<T>> {
        self.background_merges.fetch_add(1, Ordering::Relaxed);
        self.merger.run(work)
    }

    /// Keeps to a memory budget from a background thread: every 20 ms,
    /// [`keep_to_budget`](Self::keep_to_budget), so that pressure is seen
    /// within a step, not only between steps. The thread ends when the
    /// storage is dropped.
    pub fn watch_budget(self: &Arc<Self>, budget: u64) -> Result<()> {
        let storage = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("eddy-storage-budget".into())
            .spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_millis(20));
                let Some(storage) = storage.upgrade() else {
                    return;
                };
                storage.keep_to_budget(budget);
            })
            .map_err(|e| storage_error(&self.dir, e))?;
        Ok(())
    }

    /// Keeps to a memory budget now: while the process's resident memory
    /// exceeds `budget` bytes, batches go to disk from a much smaller size
    /// and the block cache is emptied (blocks read again come from the
    /// kernel's page cache or the disk).
    pub fn keep_to_budget(&self, budget: u64) {
        let over = resident_bytes() > budget;
        self.set_pressure(over);
        if over {
            self.cache.shrink_to(0);
        }
    }

    /// Counts a batch that could not be written (it stays in memory).
    pub(crate) fn note_error(&self, e: &Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
    }

    /// The last error writing a batch file, if any.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The path of a new batch file: named by the storage's opening too,
    /// so that a batch still held by an earlier storage of the same folder
    /// (a query's snapshot outliving its pipeline) never removes, when it
    /// is dropped, a file of this one.
    fn new_path(&self) -> PathBuf {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.dir
            .join(format!("{:06}-{id:012}.{EXTENSION}", self.opening))
    }

    /// A writer of a new batch file of at most about `keys` distinct keys.
    pub(crate) fn writer(self: &Arc<Self>, keys: usize) -> Result<BatchWriter> {
        BatchWriter::create(self.new_path(), Some(Arc::clone(self)), keys)
    }

    /// Takes a batch file kept elsewhere (in a checkpoint) into the
    /// storage: a hard link (a copy where links fail) under a new name,
    /// opened after its checksums are verified. The original stays.
    pub fn adopt(self: &Arc<Self>, source: &Path) -> Result<Arc<FileBatch>> {
        let path = self.new_path();
        if std::fs::hard_link(source, &path).is_err() {
            std::fs::copy(source, &path).map_err(|e| storage_error(source, e))?;
        }
        FileBatch::load(&path, Some(Arc::clone(self)), None).inspect_err(|_| {
            let _ = std::fs::remove_file(&path);
        })
    }
}

/// The process's resident memory in bytes (0 where `/proc` is missing).
pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Wraps an I/O error with the path it concerns.
fn storage_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Storage(format!("{}: {e}", path.display()))
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Storage>>> = const { RefCell::new(None) };
}

/// Runs `build` with `storage` as the storage of every trace it creates
/// (the operators of a circuit built inside take it).
pub fn with_storage<T>(storage: Option<Arc<Storage>>, build: impl FnOnce() -> T) -> T {
    let previous = CURRENT.with(|c| c.replace(storage));
    struct Restore(Option<Option<Arc<Storage>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take().flatten();
            CURRENT.with(|c| *c.borrow_mut() = previous);
        }
    }
    let _restore = Restore(Some(previous));
    build()
}

/// The storage that traces created now take.
pub(crate) fn current() -> Option<Arc<Storage>> {
    CURRENT.with(|c| c.borrow().clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_watcher_lowers_the_threshold_while_over_budget() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(storage.min_bytes(), 1 << 30);
        assert_eq!(storage.hot_state_bytes(), 8 << 30);
        // Every process is over a budget of one byte.
        storage.watch_budget(1).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while storage.min_bytes() != PRESSURE_MIN_BYTES {
            assert!(std::time::Instant::now() < deadline, "no pressure seen");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let other = Storage::open(&dir.path().join("other"), 1 << 30).unwrap();
        other.keep_to_budget(1);
        assert_eq!(other.min_bytes(), PRESSURE_MIN_BYTES);
        assert_eq!(
            other.hot_state_bytes(),
            8 * PRESSURE_MIN_BYTES,
            "over the budget"
        );
        other.keep_to_budget(u64::MAX);
        assert_eq!(other.min_bytes(), 1 << 30);
        assert_eq!(other.hot_state_bytes(), 8 << 30, "under the budget");
    }

    #[test]
    fn opening_storage_removes_stale_batch_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("000000000001.batch"), b"old").unwrap();
        std::fs::write(dir.path().join("keep.txt"), b"other").unwrap();
        let _storage = Storage::open(dir.path(), 0).unwrap();
        assert!(!dir.path().join("000000000001.batch").exists());
        assert!(dir.path().join("keep.txt").exists());
    }

    /// A batch of an earlier storage of the folder, dropped after a later
    /// one opened (a query's snapshot outliving its pipeline), removes its
    /// own file only, never one of the later storage.
    #[test]
    fn a_batch_of_an_earlier_storage_never_removes_a_later_ones_file() {
        let dir = tempfile::tempdir().unwrap();
        let batch = |storage: &Arc<Storage>| {
            let mut writer = storage.writer(1).unwrap();
            writer.push(b"k", b"r", 1).unwrap();
            writer.finish().unwrap()
        };
        let earlier = Storage::open(dir.path(), 0).unwrap();
        let old = batch(&earlier);
        let later = Storage::open(dir.path(), 0).unwrap();
        let new = batch(&later);
        assert_ne!(old.path(), new.path());
        drop((old, earlier));
        assert!(new.path().exists());
    }
}
