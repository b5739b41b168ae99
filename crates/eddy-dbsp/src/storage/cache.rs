//! The block cache: pages of batch files, read with `pread`, kept in
//! memory up to a byte budget.
//!
//! Batch files are read through this cache instead of a memory map, so
//! what a storage keeps resident is bounded: the pages in the cache (at
//! most its capacity) and what readers copied out of them. The kernel's
//! page cache still holds the files, but it is not the process's memory
//! and the kernel reclaims it under pressure.
//!
//! The cache is split into shards, each a map guarded by its own mutex,
//! evicting with the CLOCK rule (a page read since the hand last passed it
//! gets a second chance). A page is shared (`Arc`), so evicting it never
//! invalidates a reader that holds it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Bytes of a page: the unit read from a file and kept.
pub(crate) const PAGE: usize = 4096;

const SHARDS: usize = 16;

/// A page of a file: the file's id and the page's number in it.
type PageId = (u64, u64);

/// A shared, bounded cache of file pages.
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    /// Bytes per shard.
    capacity: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Hashes page ids (two integers) with one multiply each: the default
/// hasher, built against flooding, costs more than the rest of a hit.
#[derive(Default)]
struct PageHasher(u64);

impl Hasher for PageHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(26) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[derive(Default)]
struct Shard {
    pages: HashMap<PageId, (Arc<[u8]>, bool), BuildHasherDefault<PageHasher>>,
    /// The CLOCK: every page of the map once, oldest first.
    clock: VecDeque<PageId>,
    bytes: usize,
}

impl Shard {
    /// Evicts pages until the shard holds at most `capacity` bytes.
    fn evict_to(&mut self, capacity: usize) {
        while self.bytes > capacity {
            let Some(id) = self.clock.pop_front() else {
                return;
            };
            let Some((page, referenced)) = self.pages.get_mut(&id) else {
                continue;
            };
            if *referenced {
                *referenced = false;
                self.clock.push_back(id);
            } else {
                self.bytes -= page.len();
                self.pages.remove(&id);
            }
        }
    }
}

/// What a cache holds and how it was used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Bytes of pages held.
    pub bytes: u64,
    /// Bytes the cache may hold.
    pub capacity: u64,
    /// Page reads answered from the cache.
    pub hits: u64,
    /// Page reads that went to the file.
    pub misses: u64,
}

impl BlockCache {
    /// A cache of at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            capacity: AtomicUsize::new(capacity / SHARDS),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// Changes the capacity, evicting at once what no longer fits.
    pub fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity / SHARDS, Ordering::Relaxed);
        self.shrink_to(capacity);
    }

    /// Evicts pages until at most `bytes` are held (the capacity stays).
    pub fn shrink_to(&self, bytes: usize) {
        for shard in &self.shards {
            lock(shard).evict_to(bytes / SHARDS);
        }
    }

    /// What the cache holds and how it was used.
    pub fn stats(&self) -> CacheStats {
        let bytes = self.shards.iter().map(|s| lock(s).bytes as u64).sum();
        CacheStats {
            bytes,
            capacity: (self.capacity.load(Ordering::Relaxed) * SHARDS) as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    /// Page `page` of file `file`: from the cache, or from `read` (then
    /// kept).
    pub(crate) fn page(
        &self,
        file: u64,
        page: u64,
        read: impl FnOnce() -> std::io::Result<Arc<[u8]>>,
    ) -> std::io::Result<Arc<[u8]>> {
        let id = (file, page);
        let shard = &self.shards[shard_of(id)];
        if let Some((page, referenced)) = lock(shard).pages.get_mut(&id) {
            *referenced = true;
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Arc::clone(page));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let bytes = read()?;
        let capacity = self.capacity.load(Ordering::Relaxed);
        if bytes.len() <= capacity {
            let mut s = lock(shard);
            if s.pages.insert(id, (Arc::clone(&bytes), false)).is_none() {
                s.bytes += bytes.len();
                s.clock.push_back(id);
            }
            s.evict_to(capacity);
        }
        Ok(bytes)
    }

    /// Drops every page of `file` (a batch file being deleted).
    pub(crate) fn forget(&self, file: u64) {
        for shard in &self.shards {
            let mut s = lock(shard);
            let before = s.pages.len();
            let mut freed = 0;
            s.pages.retain(|id, (page, _)| {
                let keep = id.0 != file;
                if !keep {
                    freed += page.len();
                }
                keep
            });
            if s.pages.len() != before {
                s.bytes -= freed;
                let Shard { pages, clock, .. } = &mut *s;
                clock.retain(|id| pages.contains_key(id));
            }
        }
    }
}

fn lock(shard: &Mutex<Shard>) -> std::sync::MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spreads the pages of a file over the shards.
fn shard_of((file, page): PageId) -> usize {
    let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ page).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (h >> 60) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(byte: u8) -> std::io::Result<Arc<[u8]>> {
        Ok(Arc::from(vec![byte; PAGE]))
    }

    #[test]
    fn the_cache_answers_what_it_holds_and_stays_within_its_capacity() {
        let cache = BlockCache::new(64 * PAGE);
        for p in 0..1000u64 {
            let got = cache.page(1, p, || page(p as u8)).unwrap();
            assert_eq!(got[0], p as u8);
            assert!(cache.stats().bytes <= 64 * PAGE as u64);
        }
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (0, 1000));
        // A page just read is held: no second read.
        let again = cache.page(1, 999, || panic!("read twice")).unwrap();
        assert_eq!(again[0], 999u64 as u8);
        assert_eq!(cache.stats().hits, 1);
        cache.forget(1);
        assert_eq!(cache.stats().bytes, 0);
        cache.page(1, 999, || page(7)).unwrap();
        assert_eq!(cache.stats().misses, 1001);
    }

    #[test]
    fn a_page_read_again_outlives_pages_read_once() {
        let cache = BlockCache::new(SHARDS * 8 * PAGE);
        // Page 0 of file 2 is read between every other read: CLOCK keeps it.
        cache.page(2, 0, || page(0)).unwrap();
        for p in 0..2000u64 {
            cache.page(3, p, || page(1)).unwrap();
            cache.page(2, 0, || panic!("evicted")).unwrap();
        }
        cache.set_capacity(0);
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn a_failed_read_is_returned_and_not_kept() {
        let cache = BlockCache::new(64 * PAGE);
        let err = cache
            .page(1, 0, || Err(std::io::Error::other("disk gone")))
            .unwrap_err();
        assert_eq!(err.to_string(), "disk gone");
        assert_eq!(cache.page(1, 0, || page(3)).unwrap()[0], 3);
    }
}
