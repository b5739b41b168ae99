//! A map from encoded keys to an operator's values that can outgrow memory.
//!
//! Operators whose state is one value per key (DISTINCT's weights, an
//! aggregate's running sums and last outputs, the distinct counts of
//! `COUNT(DISTINCT …)`) keep it in a [`StateMap`]: a hash map of the keys
//! touched lately (*hot*) in front of a [`Trace`] of
//! `(key, encoded value) ↦ 1` (*cold*).
//!
//! Without storage nothing is ever moved to the trace: the map is a hash
//! map. With storage, once the hot map holds more than
//! [`Storage::hot_state_bytes`] at the end of a step
//! ([`StateMap::end_step`]), each key it changed is written into the trace
//! (its old value retracted, its new one added) and leaves the hot map:
//! every key but those touched in the last two steps, or every key when
//! those alone hold half the limit. The trace then spills to files, merges off the step and is
//! linked into checkpoints like every other trace, so the state's memory
//! is the hot map plus the trace's in-memory index, not the state itself.
//! A lookup that misses the hot map reads the trace (a Bloom filter and
//! one window per file batch) and keeps what it found in the hot map, so a
//! key touched again in the same step is not read twice.

use std::sync::Arc;

use hashbrown::hash_map::EntryRef;

use super::KeyMap;
use crate::checkpoint::{StateReader, StateWriter};
use crate::storage::{current, Storage};
use crate::{Error, Result, Trace};

/// The most steps a key may go untouched and stay hot past the limit.
const MAX_AGE: usize = 64;

/// Below this many slots the hot map is not shrunk after a waterline
/// drops keys (a small table costs little, and shrinking it is a rehash).
const MIN_SHRUNK_CAPACITY: usize = 4096;

/// The hot map's limit in a map without storage whose trace holds state
/// (restored from a checkpoint taken with storage).
const NO_STORAGE_HOT_BYTES: usize = 32 << 20;

/// The bytes the allocator takes for `n` bytes: glibc's malloc hands out
/// chunks of a multiple of 16 bytes with an 8-byte header, 32 at least.
pub(crate) fn allocation(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        (n + 8).next_multiple_of(16).max(32)
    }
}

/// A value kept in a [`StateMap`]: encoded to bytes when it goes to the
/// map's trace.
pub trait StateValue: Clone {
    /// Appends the value's encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads back what [`encode`](StateValue::encode) wrote.
    fn decode(bytes: &[u8]) -> Result<Self>;
    /// Bytes the value owns on the heap (for the map's size; see
    /// [`allocation`]).
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl StateValue for i64 {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let bytes: [u8; 8] = bytes
            .try_into()
            .map_err(|_| Error::Storage(format!("a stored count has {} bytes", bytes.len())))?;
        Ok(i64::from_le_bytes(bytes))
    }
}

impl StateValue for Vec<u8> {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        Ok(bytes.to_vec())
    }

    fn heap_bytes(&self) -> usize {
        allocation(self.capacity())
    }
}

/// A key of the hot map: its value now (`None`: the key is absent) and
/// the encoding the trace holds for it (`None`: the trace holds nothing).
#[derive(Clone)]
struct Slot<V> {
    value: Option<V>,
    cold: Option<Box<[u8]>>,
    /// The step that last read or changed the key.
    touched: u32,
}

/// Keys to values, hot ones in a hash map, the rest in a trace that may
/// be on disk (see the module's documentation).
pub struct StateMap<V> {
    hot: KeyMap<Slot<V>>,
    cold: Trace,
    storage: Option<Arc<Storage>>,
    /// Keys with a value, hot or cold.
    len: usize,
    /// Bytes the hot map's keys and values own on the heap.
    heap: usize,
    /// Steps ended so far (wrapping), to tell recently touched keys.
    step: u32,
}

impl<V> Default for StateMap<V> {
    fn default() -> Self {
        Self {
            hot: KeyMap::default(),
            cold: Trace::new(),
            storage: current(),
            len: 0,
            heap: 0,
            step: 0,
        }
    }
}

impl<V: StateValue> StateMap<V> {
    /// An empty map, with the storage current on this thread (see
    /// [`crate::storage::with_storage`]), if any.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys with a value.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key has a value.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The heap bytes a slot owns: its key, its value's, its encoding.
    fn slot_heap(key: &[u8], slot: &Slot<V>) -> usize {
        allocation(key.len())
            + slot.value.as_ref().map_or(0, V::heap_bytes)
            + slot.cold.as_ref().map_or(0, |c| allocation(c.len()))
    }

    /// The hot map's bytes: its table (a control byte per bucket, at most
    /// 7/8 of them full) and what its entries own.
    fn hot_bytes(&self) -> usize {
        let buckets = self.hot.capacity() * 8 / 7;
        buckets * (std::mem::size_of::<(Vec<u8>, Slot<V>)>() + 1) + self.heap
    }

    /// What the trace holds for `key`: its value and encoding.
    fn read_cold(cold: &Trace, key: &[u8]) -> Result<Option<(V, Box<[u8]>)>> {
        if cold.is_empty() {
            return Ok(None);
        }
        let mut found = None;
        for (bytes, w) in cold.get(key) {
            if w != 1 || found.is_some() {
                return Err(Error::Storage(format!(
                    "an operator's stored state holds a key with weight {w} or with two values"
                )));
            }
            found = Some((V::decode(bytes)?, Box::from(bytes)));
        }
        Ok(found)
    }

    /// Puts `key` in the hot map if it is not there, with what the trace
    /// holds for it (or nothing); returns its slot.
    fn slot(&mut self, key: &[u8]) -> Result<&mut Slot<V>> {
        Self::slot_in(&mut self.hot, &self.cold, &mut self.heap, self.step, key)
    }

    /// [`slot`](Self::slot) over the map's parts, so that the caller may
    /// still change the others.
    fn slot_in<'a>(
        hot: &'a mut KeyMap<Slot<V>>,
        cold: &Trace,
        heap: &mut usize,
        step: u32,
        key: &[u8],
    ) -> Result<&'a mut Slot<V>> {
        match hot.entry_ref(key) {
            EntryRef::Occupied(entry) => {
                let slot = entry.into_mut();
                slot.touched = step;
                Ok(slot)
            }
            EntryRef::Vacant(entry) => {
                let (value, cold) = match Self::read_cold(cold, key)? {
                    Some((value, cold)) => (Some(value), Some(cold)),
                    None => (None, None),
                };
                let slot = Slot {
                    value,
                    cold,
                    touched: step,
                };
                *heap += Self::slot_heap(key, &slot);
                Ok(entry.insert(slot))
            }
        }
    }

    /// The value of `key`, if any. A key read from the trace stays in the
    /// hot map until the next move to the trace.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<&V>> {
        if self.cold.is_empty() || self.hot.contains_key(key) {
            let step = self.step;
            return Ok(self.hot.get_mut(key).and_then(|s| {
                s.touched = step;
                s.value.as_ref()
            }));
        }
        match Self::read_cold(&self.cold, key)? {
            Some((value, cold)) => {
                let slot = Slot {
                    value: Some(value),
                    cold: Some(cold),
                    touched: self.step,
                };
                self.heap += Self::slot_heap(key, &slot);
                self.hot.insert(key.to_vec(), slot);
                Ok(self.hot.get(key).and_then(|s| s.value.as_ref()))
            }
            None => Ok(None),
        }
    }

    /// A copy of the value of `key`, if any, read without changing the
    /// map (from `&self`).
    pub fn peek(&self, key: &[u8]) -> Result<Option<V>> {
        match self.hot.get(key) {
            Some(slot) => Ok(slot.value.clone()),
            None => Ok(Self::read_cold(&self.cold, key)?.map(|(v, _)| v)),
        }
    }

    /// The value of `key`, set to `V::default()` first if the key had none.
    pub fn get_or_default(&mut self, key: &[u8]) -> Result<&mut V>
    where
        V: Default,
    {
        self.get_or_insert_with(key, V::default)
    }

    /// The value of `key`, set to `make()` first if the key had none.
    pub fn get_or_insert_with(&mut self, key: &[u8], make: impl FnOnce() -> V) -> Result<&mut V> {
        let slot = Self::slot_in(&mut self.hot, &self.cold, &mut self.heap, self.step, key)?;
        if slot.value.is_none() {
            let value = make();
            self.heap += value.heap_bytes();
            self.len += 1;
            slot.value = Some(value);
        }
        Ok(slot.value.as_mut().expect("set above"))
    }

    /// Sets the value of `key`; returns the value it replaces.
    pub fn insert(&mut self, key: &[u8], value: V) -> Result<Option<V>> {
        let added = value.heap_bytes();
        let slot = self.slot(key)?;
        let old = slot.value.replace(value);
        let removed = old.as_ref().map_or(0, V::heap_bytes);
        if old.is_none() {
            self.len += 1;
        }
        self.heap = (self.heap + added).saturating_sub(removed);
        Ok(old)
    }

    /// Removes the value of `key`; returns it.
    pub fn remove(&mut self, key: &[u8]) -> Result<Option<V>> {
        let slot = self.slot(key)?;
        let old = slot.value.take();
        if slot.cold.is_none() {
            // Nothing to retract from the trace: forget the key.
            let slot = self.hot.remove(key).expect("present");
            self.heap = self.heap.saturating_sub(Self::slot_heap(key, &slot));
        }
        if let Some(old) = &old {
            self.len -= 1;
            self.heap = self.heap.saturating_sub(old.heap_bytes());
        }
        Ok(old)
    }

    /// Calls `f` with every key that has a value, in no particular order:
    /// the hot map's borrowed, the trace's read with a scan that keeps
    /// nothing of its files, into one buffer (no allocation per key).
    pub fn with_keys<R>(&self, f: impl FnOnce(&[&[u8]]) -> R) -> R {
        let mut cold_keys = Vec::new();
        let mut ends = Vec::new();
        if !self.cold.is_empty() {
            self.cold.for_each(|k, _, _| {
                if !self.hot.contains_key(k) {
                    cold_keys.extend_from_slice(k);
                    ends.push(cold_keys.len());
                }
            });
        }
        let mut keys: Vec<&[u8]> = Vec::with_capacity(self.len);
        keys.extend(
            self.hot
                .iter()
                .filter(|(_, s)| s.value.is_some())
                .map(|(k, _)| k.as_slice()),
        );
        let mut start = 0;
        for end in ends {
            keys.push(&cold_keys[start..end]);
            start = end;
        }
        f(&keys)
    }

    /// Whether some key with a value passes `test`: the hot map's first,
    /// then the trace's, read with a scan that keeps nothing of its files.
    pub fn any_key(&self, test: impl Fn(&[u8]) -> bool) -> bool {
        if self.hot.iter().any(|(k, s)| s.value.is_some() && test(k)) {
            return true;
        }
        let mut any = false;
        if !self.cold.is_empty() {
            self.cold.for_each(|k, _, _| {
                any = any || (!self.hot.contains_key(k) && test(k));
            });
        }
        any
    }

    /// Keeps only the keys that pass `keep` (state below a waterline).
    pub fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        // One entry per key in the trace, so the entries it keeps are its
        // keys; the hot map then overrides what it holds for its own.
        let cold = if self.cold.is_empty() {
            0
        } else {
            // A scan that finds nothing to drop costs less than rewriting
            // the trace (and its files) unchanged.
            let (mut dropped, mut entries) = (false, 0);
            self.cold.for_each(|k, _, _| {
                dropped = dropped || !keep(k);
                entries += 1;
            });
            self.cold.release_reads();
            if dropped {
                self.cold.retain(|k, _| keep(k))
            } else {
                entries
            }
        };
        // One pass over the hot map: what it drops, and what the keys it
        // keeps add to or remove from the trace's.
        let (mut heap, mut added, mut removed) = (self.heap, 0, 0);
        self.hot.retain(|k, slot| {
            let kept = keep(k);
            if !kept {
                heap = heap.saturating_sub(Self::slot_heap(k, slot));
            } else {
                match (&slot.value, &slot.cold) {
                    (Some(_), None) => added += 1,
                    (None, Some(_)) => removed += 1,
                    _ => {}
                }
            }
            kept
        });
        // A large step's keys, once below the waterline, leave a table
        // sized for them: give it back when it is mostly empty (a table
        // that shrinks to twice what it holds grows again only after as
        // many new keys).
        if self.hot.capacity() > (8 * self.hot.len()).max(MIN_SHRUNK_CAPACITY) {
            self.hot.shrink_to(2 * self.hot.len());
        }
        self.heap = heap;
        self.len = cold + added - removed;
    }

    /// Ends a step: with storage, moves the hot map into the trace once it
    /// holds more than [`Storage::hot_state_bytes`]; drops what reads
    /// copied out of the trace's files.
    pub fn end_step(&mut self) {
        self.cold.release_reads();
        let limit = match &self.storage {
            Some(storage) => storage.hot_state_bytes(),
            // Restored from a checkpoint taken with storage: the trace
            // takes what the hot map changed now and then, in memory.
            None if !self.cold.is_empty() => NO_STORAGE_HOT_BYTES,
            None => return,
        };
        let step = self.step;
        self.step = self.step.wrapping_add(1);
        if self.hot.is_empty() || self.hot_bytes() < limit {
            return;
        }
        // The keys touched most lately stay hot (a stream's open windows,
        // say): those of the last `age` steps, the most that fit in half
        // the limit; none when even this step's keys do not.
        let entry = std::mem::size_of::<(Vec<u8>, Slot<V>)>() + 1;
        let mut by_age = [(0usize, 0usize); MAX_AGE + 1];
        for (key, slot) in &self.hot {
            let age = (step.wrapping_sub(slot.touched) as usize).min(MAX_AGE);
            by_age[age].0 += 1;
            by_age[age].1 += Self::slot_heap(key, slot);
        }
        let (mut kept_keys, mut recent_heap, mut age) = (0, 0, None);
        for (a, &(keys, heap)) in by_age[..MAX_AGE].iter().enumerate() {
            if (kept_keys + keys) * entry * 8 / 7 + recent_heap + heap >= limit / 2 {
                break;
            }
            kept_keys += keys;
            recent_heap += heap;
            age = Some(a);
        }
        let recent = |slot: &Slot<V>| {
            age.is_some_and(|age| (step.wrapping_sub(slot.touched) as usize) <= age)
        };
        let keep_recent = age.is_some();
        let mut encoded = Vec::new();
        let cold = &mut self.cold;
        let mut move_out = |key: &[u8], slot: &Slot<V>| {
            encoded.clear();
            if let Some(v) = &slot.value {
                v.encode(&mut encoded);
                if slot.cold.as_deref() == Some(encoded.as_slice()) {
                    return;
                }
                cold.update(key, &encoded, 1);
            }
            if let Some(old) = &slot.cold {
                cold.update(key, old, -1);
            }
        };
        if keep_recent {
            self.hot.retain(|key, slot| {
                let kept = recent(slot);
                if !kept {
                    move_out(key, slot);
                }
                kept
            });
            self.hot.shrink_to_fit();
            self.heap = recent_heap;
        } else {
            for (key, slot) in std::mem::take(&mut self.hot) {
                move_out(&key, &slot);
            }
            self.heap = 0;
        }
        self.cold.seal();
    }

    /// Bytes held in memory: the hot map (estimated) and the trace's
    /// batches in memory.
    pub fn bytes(&self) -> usize {
        self.hot_bytes() + self.cold.bytes()
    }

    /// Bytes of the trace's batches in files.
    pub fn storage_bytes(&self) -> usize {
        self.cold.storage_bytes()
    }

    /// Writes the map to a checkpoint: the trace (its files linked) and
    /// the hot map.
    pub fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.len)?;
        self.cold.save(w)?;
        w.put(&self.hot.len())?;
        let mut encoded = Vec::new();
        for (key, slot) in &self.hot {
            encoded.clear();
            let value = slot.value.as_ref().map(|v| {
                v.encode(&mut encoded);
                encoded.clone()
            });
            w.put(key)?;
            w.put(&value)?;
            w.put(&slot.cold.as_deref().map(<[u8]>::to_vec))?;
        }
        Ok(())
    }

    /// Reads back what [`save`](Self::save) wrote, into an empty map (or,
    /// while a state is re-split, the keys the reader
    /// [`keeps`](StateReader::keeps), added to the map when it is
    /// [`merging`](StateReader::merging)).
    pub fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        let len: usize = r.get()?;
        self.cold.restore(r)?;
        let n: usize = r.get()?;
        if !r.merging() {
            self.hot = KeyMap::default();
            self.heap = 0;
        }
        for _ in 0..n {
            let key: Vec<u8> = r.get()?;
            let value: Option<Vec<u8>> = r.get()?;
            let cold: Option<Vec<u8>> = r.get()?;
            if !r.keeps(&key) {
                continue;
            }
            let slot = Slot {
                value: value.as_deref().map(V::decode).transpose()?,
                cold: cold.map(Vec::into_boxed_slice),
                touched: self.step,
            };
            self.heap += Self::slot_heap(&key, &slot);
            self.hot.insert(key, slot);
        }
        self.len = match r.routed() {
            true => self.count_keys(),
            false => len,
        };
        Ok(())
    }

    /// Keys with a value, counted: those of the trace (a scan), less
    /// those the hot map removed, plus those it added.
    fn count_keys(&self) -> usize {
        let mut n = self.cold.len();
        for slot in self.hot.values() {
            match (&slot.cold, &slot.value) {
                (Some(_), None) => n = n.saturating_sub(1),
                (None, Some(_)) => n += 1,
                _ => {}
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::checkpoint::Route;
    use crate::operator::shard_of;
    use crate::storage::with_storage;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u8, i64),
        Remove(u8),
        Add(u8, i64),
        Get(u8),
        Retain(u8),
        EndStep,
        Checkpoint,
        /// Split over shards by route, then merged back.
        Reshard(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..40, any::<i64>()).prop_map(|(k, v)| Op::Insert(k, v)),
            2 => (0u8..40).prop_map(Op::Remove),
            3 => (0u8..40, -3i64..3).prop_map(|(k, v)| Op::Add(k, v)),
            2 => (0u8..40).prop_map(Op::Get),
            1 => (0u8..40).prop_map(Op::Retain),
            3 => Just(Op::EndStep),
            1 => Just(Op::Checkpoint),
            1 => (1usize..4).prop_map(Op::Reshard),
        ]
    }

    fn key(k: u8) -> Vec<u8> {
        // Keys of several lengths, so that one is a prefix of another.
        vec![7; usize::from(k % 5)].into_iter().chain([k]).collect()
    }

    /// Runs `ops` on a map (built with `storage`) and on a `BTreeMap`,
    /// comparing every answer.
    fn check(ops: &[Op], storage: Option<Arc<Storage>>, dir: &std::path::Path) {
        let new_map = || with_storage(storage.clone(), StateMap::<i64>::new);
        let mut map = new_map();
        let mut model: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        for (n, op) in ops.iter().enumerate() {
            match *op {
                Op::Insert(k, v) => {
                    assert_eq!(map.insert(&key(k), v).unwrap(), model.insert(key(k), v));
                }
                Op::Remove(k) => {
                    assert_eq!(map.remove(&key(k)).unwrap(), model.remove(&key(k)));
                }
                Op::Add(k, d) => {
                    *map.get_or_default(&key(k)).unwrap() += d;
                    *model.entry(key(k)).or_default() += d;
                }
                Op::Get(k) => {
                    assert_eq!(map.peek(&key(k)).unwrap(), model.get(&key(k)).copied());
                    assert_eq!(map.get(&key(k)).unwrap(), model.get(&key(k)));
                }
                Op::Retain(k) => {
                    let bound = key(k);
                    map.retain(|x| x >= bound.as_slice());
                    model.retain(|x, _| x >= &bound);
                }
                Op::EndStep => map.end_step(),
                Op::Checkpoint => {
                    let at = dir.join(format!("checkpoint-{n}"));
                    std::fs::create_dir_all(&at).unwrap();
                    let mut w = StateWriter::create(&at).unwrap();
                    map.save(&mut w).unwrap();
                    w.finish().unwrap();
                    let mut restored = new_map();
                    let mut r = StateReader::open(&at).unwrap();
                    restored.restore(&mut r).unwrap();
                    r.finish().unwrap();
                    map = restored;
                }
                Op::Reshard(shards) => {
                    // Each shard keeps the keys routed to it...
                    let at = dir.join(format!("split-{n}"));
                    std::fs::create_dir_all(&at).unwrap();
                    let mut w = StateWriter::create(&at).unwrap();
                    map.save(&mut w).unwrap();
                    w.finish().unwrap();
                    let mut parts = Vec::new();
                    for shard in 0..shards {
                        let mut part = new_map();
                        let mut r = StateReader::open(&at).unwrap();
                        r.set_route(Some(Route {
                            keep: Some((shard, shards)),
                            merge: false,
                        }));
                        part.restore(&mut r).unwrap();
                        r.finish().unwrap();
                        let mine = |k: &Vec<u8>| shard_of(k, shards) == shard;
                        assert_eq!(part.len(), model.keys().filter(|k| mine(k)).count());
                        for (k, v) in model.iter().filter(|(k, _)| mine(k)) {
                            assert_eq!(part.peek(k).unwrap(), Some(*v));
                        }
                        parts.push(part);
                    }
                    // ... and one map reads all their states back.
                    let at = dir.join(format!("joined-{n}"));
                    std::fs::create_dir_all(&at).unwrap();
                    let mut w = StateWriter::create(&at).unwrap();
                    for part in &parts {
                        part.save(&mut w).unwrap();
                    }
                    w.finish().unwrap();
                    let mut whole = new_map();
                    let mut r = StateReader::open(&at).unwrap();
                    for part in 0..shards {
                        r.set_route(Some(Route {
                            keep: None,
                            merge: part > 0,
                        }));
                        whole.restore(&mut r).unwrap();
                    }
                    r.finish().unwrap();
                    map = whole;
                }
            }
            assert_eq!(map.len(), model.len());
            let mut keys =
                map.with_keys(|keys| keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>());
            keys.sort();
            assert_eq!(keys, model.keys().cloned().collect::<Vec<_>>());
        }
        for (k, v) in &model {
            assert_eq!(map.peek(k).unwrap(), Some(*v));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// With storage of threshold 0, every step moves the hot map to
        /// the trace and every trace batch is a file.
        #[test]
        fn a_state_map_on_disk_answers_as_a_map(ops in prop::collection::vec(op(), 1..120)) {
            let dir = tempfile::tempdir().unwrap();
            let storage = Storage::open(&dir.path().join("storage"), 0).unwrap();
            check(&ops, Some(storage), dir.path());
        }

        #[test]
        fn a_state_map_in_memory_answers_as_a_map(ops in prop::collection::vec(op(), 1..120)) {
            let dir = tempfile::tempdir().unwrap();
            check(&ops, None, dir.path());
        }
    }

    #[test]
    fn keys_touched_lately_stay_hot_when_the_rest_moves() {
        let dir = tempfile::tempdir().unwrap();
        // A limit of 512 KiB.
        let storage = Storage::open(dir.path(), 64 << 10).unwrap();
        let mut map = with_storage(Some(Arc::clone(&storage)), StateMap::<i64>::new);
        for i in 0..3000i64 {
            map.insert(&i.to_be_bytes(), i).unwrap();
        }
        map.end_step();
        map.end_step();
        assert_eq!(map.hot.len(), 3000, "under the limit, nothing moved");
        // Old keys and new ones together pass the limit: the old ones move.
        for i in 3000..5000i64 {
            map.insert(&i.to_be_bytes(), i).unwrap();
        }
        *map.get_or_default(&7i64.to_be_bytes()).unwrap() += 1;
        map.end_step();
        assert_eq!(
            map.hot.len(),
            2001,
            "the keys of this step stay, not older ones"
        );
        assert!(map.hot.contains_key(&7i64.to_be_bytes()[..]));
        assert_eq!(map.len(), 5000);
        for i in 0..5000i64 {
            let expected = if i == 7 { 8 } else { i };
            assert_eq!(map.peek(&i.to_be_bytes()).unwrap(), Some(expected));
        }
    }

    #[test]
    fn a_hot_map_under_its_threshold_stays_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        // A limit of 4 MiB.
        let storage = Storage::open(dir.path(), 512 << 10).unwrap();
        let mut map = with_storage(Some(Arc::clone(&storage)), StateMap::<i64>::new);
        map.insert(b"a", 1).unwrap();
        map.end_step();
        assert_eq!(map.storage_bytes() + map.cold.bytes(), 0, "nothing moved");
        for i in 0..200_000i64 {
            map.insert(&i.to_be_bytes(), i).unwrap();
        }
        map.end_step();
        assert!(map.hot.is_empty(), "moved to the trace");
        assert!(map.storage_bytes() > 0, "the trace spilled to a file");
        assert_eq!(map.peek(&77i64.to_be_bytes()).unwrap(), Some(77));
        assert_eq!(map.len(), 200_001);
    }

    #[test]
    fn a_waterline_that_drops_most_keys_gives_the_table_back() {
        let mut map = StateMap::<i64>::new();
        for i in 0..100_000i64 {
            map.insert(&i.to_be_bytes(), i).unwrap();
        }
        let full = map.bytes();
        map.retain(|k| k >= 99_990i64.to_be_bytes().as_slice());
        assert_eq!(map.len(), 10);
        assert!(
            map.bytes() < full / 50,
            "{} of {full} bytes kept",
            map.bytes()
        );
        assert_eq!(map.get(&99_995i64.to_be_bytes()).unwrap(), Some(&99_995));
        assert_eq!(map.get(&5i64.to_be_bytes()).unwrap(), None);
        // A waterline that keeps most keys leaves the table as it is.
        let mut map = StateMap::<i64>::new();
        for i in 0..100_000i64 {
            map.insert(&i.to_be_bytes(), i).unwrap();
        }
        map.retain(|k| k >= 10i64.to_be_bytes().as_slice());
        assert!(map.hot.capacity() >= 100_000, "{}", map.hot.capacity());
    }
}
