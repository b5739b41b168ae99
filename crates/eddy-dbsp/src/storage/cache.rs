//! The block cache: blocks of batch files (the decoded window of entries
//! between two fences), read with `pread`, kept in memory up to a byte
//! budget.
//!
//! Batch files are read through this cache instead of a memory map, so
//! what a storage keeps resident is bounded: the blocks in the cache (at
//! most its capacity) and what readers copied out of them. The kernel's
//! page cache still holds the files, but it is not the process's memory
//! and the kernel reclaims it under pressure.
//!
//! The cache is split into shards, each a map guarded by its own mutex,
//! evicting with the CLOCK rule (a block read since the hand last passed
//! it gets a second chance). A block is shared (`Arc`), so evicting it
//! never invalidates a reader that holds it.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const SHARDS: usize = 16;

/// A block of a file: the file's id and the block's number in it.
type BlockId = (u64, u64);

/// What a cache can hold: something that knows its size in bytes.
pub trait Weigh {
    /// Bytes in memory.
    fn weight(&self) -> usize;
}

impl Weigh for [u8] {
    fn weight(&self) -> usize {
        self.len()
    }
}

/// A shared, bounded cache of file blocks.
pub struct BlockCache<V: ?Sized + Weigh> {
    shards: Vec<Mutex<Shard<V>>>,
    /// Bytes per shard.
    capacity: AtomicUsize,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// Hashes block ids (two integers) with one multiply each: the default
/// hasher, built against flooding, costs more than the rest of a hit.
#[derive(Default)]
struct BlockHasher(u64);

impl Hasher for BlockHasher {
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

struct Shard<V: ?Sized> {
    blocks: HashMap<BlockId, (Arc<V>, bool), BuildHasherDefault<BlockHasher>>,
    /// The CLOCK: every block of the map once, oldest first.
    clock: VecDeque<BlockId>,
    bytes: usize,
}

impl<V: ?Sized> Default for Shard<V> {
    fn default() -> Self {
        Self {
            blocks: HashMap::default(),
            clock: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<V: ?Sized + Weigh> Shard<V> {
    /// Evicts blocks until the shard holds at most `capacity` bytes.
    fn evict_to(&mut self, capacity: usize) {
        while self.bytes > capacity {
            let Some(id) = self.clock.pop_front() else {
                return;
            };
            let Some((block, referenced)) = self.blocks.get_mut(&id) else {
                continue;
            };
            if *referenced {
                *referenced = false;
                self.clock.push_back(id);
            } else {
                self.bytes -= block.weight();
                self.blocks.remove(&id);
            }
        }
    }
}

/// What a cache holds and how it was used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Bytes of blocks held.
    pub bytes: u64,
    /// Bytes the cache may hold.
    pub capacity: u64,
    /// Block reads answered from the cache.
    pub hits: u64,
    /// Block reads that went to the file.
    pub misses: u64,
}

impl<V: ?Sized + Weigh> BlockCache<V> {
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

    /// Evicts blocks until at most `bytes` are held (the capacity stays).
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

    /// Block `block` of file `file`: from the cache, or from `read` (then
    /// kept).
    pub(crate) fn block<E>(
        &self,
        file: u64,
        block: u64,
        read: impl FnOnce() -> Result<Arc<V>, E>,
    ) -> Result<Arc<V>, E> {
        let id = (file, block);
        let shard = &self.shards[shard_of(id)];
        if let Some((block, referenced)) = lock(shard).blocks.get_mut(&id) {
            *referenced = true;
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Arc::clone(block));
        }
        self.misses.fetch_add(1, Ordering::Relaxed);
        let bytes = read()?;
        let capacity = self.capacity.load(Ordering::Relaxed);
        let weight = bytes.weight();
        if weight <= capacity {
            let mut s = lock(shard);
            if let Some((old, _)) = s.blocks.insert(id, (Arc::clone(&bytes), false)) {
                s.bytes -= old.weight();
            } else {
                s.clock.push_back(id);
            }
            s.bytes += weight;
            s.evict_to(capacity);
        }
        Ok(bytes)
    }

    /// Drops every block of `file` (a batch file being deleted).
    pub(crate) fn forget(&self, file: u64) {
        for shard in &self.shards {
            let mut s = lock(shard);
            let before = s.blocks.len();
            let mut freed = 0;
            s.blocks.retain(|id, (block, _)| {
                let keep = id.0 != file;
                if !keep {
                    freed += block.weight();
                }
                keep
            });
            if s.blocks.len() != before {
                s.bytes -= freed;
                let Shard { blocks, clock, .. } = &mut *s;
                clock.retain(|id| blocks.contains_key(id));
            }
        }
    }
}

fn lock<V: ?Sized>(shard: &Mutex<Shard<V>>) -> std::sync::MutexGuard<'_, Shard<V>> {
    shard.lock().unwrap_or_else(|e| e.into_inner())
}

/// Spreads the blocks of a file over the shards.
fn shard_of((file, block): BlockId) -> usize {
    let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ block).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (h >> 60) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: usize = 4096;

    fn page(byte: u8) -> std::io::Result<Arc<[u8]>> {
        Ok(Arc::from(vec![byte; PAGE]))
    }

    #[test]
    fn the_cache_answers_what_it_holds_and_stays_within_its_capacity() {
        let cache = BlockCache::<[u8]>::new(64 * PAGE);
        for p in 0..1000u64 {
            let got = cache.block(1, p, || page(p as u8)).unwrap();
            assert_eq!(got[0], p as u8);
            assert!(cache.stats().bytes <= 64 * PAGE as u64);
        }
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses), (0, 1000));
        // A page just read is held: no second read.
        let again = cache
            .block::<std::io::Error>(1, 999, || panic!("read twice"))
            .unwrap();
        assert_eq!(again[0], 999u64 as u8);
        assert_eq!(cache.stats().hits, 1);
        cache.forget(1);
        assert_eq!(cache.stats().bytes, 0);
        cache.block(1, 999, || page(7)).unwrap();
        assert_eq!(cache.stats().misses, 1001);
    }

    #[test]
    fn a_block_read_again_outlives_blocks_read_once() {
        let cache = BlockCache::<[u8]>::new(SHARDS * 8 * PAGE);
        // Page 0 of file 2 is read between every other read: CLOCK keeps it.
        cache.block(2, 0, || page(0)).unwrap();
        for p in 0..2000u64 {
            cache.block(3, p, || page(1)).unwrap();
            cache
                .block::<std::io::Error>(2, 0, || panic!("evicted"))
                .unwrap();
        }
        cache.set_capacity(0);
        assert_eq!(cache.stats().bytes, 0);
    }

    #[test]
    fn a_failed_read_is_returned_and_not_kept() {
        let cache = BlockCache::<[u8]>::new(64 * PAGE);
        let err = cache
            .block(1, 0, || Err(std::io::Error::other("disk gone")))
            .unwrap_err();
        assert_eq!(err.to_string(), "disk gone");
        assert_eq!(cache.block(1, 0, || page(3)).unwrap()[0], 3);
    }
}
