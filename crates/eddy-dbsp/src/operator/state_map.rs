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
//! (its old value retracted, its new one added) and the hot map is
//! emptied. The trace then spills to files, merges off the step and is
//! linked into checkpoints like every other trace, so the state's memory
//! is the hot map plus the trace's in-memory index, not the state itself.
//! A lookup that misses the hot map reads the trace (a Bloom filter and
//! one window per file batch) and keeps what it found in the hot map, so a
//! key touched again in the same step is not read twice.

use std::sync::Arc;

use super::KeyMap;
use crate::checkpoint::{StateReader, StateWriter};
use crate::storage::{current, Storage};
use crate::{Error, Result, Trace};

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
}

impl<V> Default for StateMap<V> {
    fn default() -> Self {
        Self {
            hot: KeyMap::default(),
            cold: Trace::new(),
            storage: current(),
            len: 0,
            heap: 0,
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
        Self::slot_in(&mut self.hot, &self.cold, &mut self.heap, key)
    }

    /// [`slot`](Self::slot) over the map's parts, so that the caller may
    /// still change the others.
    fn slot_in<'a>(
        hot: &'a mut KeyMap<Slot<V>>,
        cold: &Trace,
        heap: &mut usize,
        key: &[u8],
    ) -> Result<&'a mut Slot<V>> {
        if !hot.contains_key(key) {
            let slot = match Self::read_cold(cold, key)? {
                Some((value, cold)) => Slot {
                    value: Some(value),
                    cold: Some(cold),
                },
                None => Slot {
                    value: None,
                    cold: None,
                },
            };
            *heap += Self::slot_heap(key, &slot);
            hot.insert(key.to_vec(), slot);
        }
        Ok(hot.get_mut(key).expect("inserted above"))
    }

    /// The value of `key`, if any. A key read from the trace stays in the
    /// hot map until the next move to the trace.
    pub fn get(&mut self, key: &[u8]) -> Result<Option<&V>> {
        if self.cold.is_empty() || self.hot.contains_key(key) {
            return Ok(self.hot.get(key).and_then(|s| s.value.as_ref()));
        }
        match Self::read_cold(&self.cold, key)? {
            Some((value, cold)) => {
                let slot = Slot {
                    value: Some(value),
                    cold: Some(cold),
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
        let slot = Self::slot_in(&mut self.hot, &self.cold, &mut self.heap, key)?;
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

    /// Every key with a value, in no particular order.
    pub fn keys(&self) -> Vec<&[u8]> {
        let mut keys: Vec<&[u8]> = self
            .hot
            .iter()
            .filter(|(_, s)| s.value.is_some())
            .map(|(k, _)| k.as_slice())
            .collect();
        if !self.cold.is_empty() {
            keys.extend(
                self.cold
                    .keys()
                    .into_iter()
                    .filter(|k| !self.hot.contains_key(*k)),
            );
        }
        keys
    }

    /// Keeps only the keys that pass `keep` (state below a waterline).
    pub fn retain(&mut self, keep: impl Fn(&[u8]) -> bool) {
        if !self.cold.is_empty() {
            let dropped = std::cell::Cell::new(0usize);
            let hot = &self.hot;
            self.cold.retain(|k, _| {
                let kept = keep(k);
                if !kept && !hot.contains_key(k) {
                    dropped.set(dropped.get() + 1);
                }
                kept
            });
            self.len -= dropped.get();
        }
        let mut len = self.len;
        let mut bytes = self.heap;
        self.hot.retain(|k, slot| {
            let kept = keep(k);
            if !kept {
                len -= usize::from(slot.value.is_some());
                bytes = bytes.saturating_sub(Self::slot_heap(k, slot));
            }
            kept
        });
        self.len = len;
        self.heap = bytes;
    }

    /// Ends a step: with storage, moves the hot map into the trace once it
    /// holds more than [`Storage::hot_state_bytes`].
    pub fn end_step(&mut self) {
        let Some(storage) = &self.storage else { return };
        if self.hot.is_empty() || self.hot_bytes() < storage.hot_state_bytes() {
            return;
        }
        let mut encoded = Vec::new();
        for (key, slot) in std::mem::take(&mut self.hot) {
            encoded.clear();
            if let Some(v) = &slot.value {
                v.encode(&mut encoded);
                if slot.cold.as_deref() == Some(encoded.as_slice()) {
                    continue;
                }
                self.cold.update(&key, &encoded, 1);
            }
            if let Some(old) = &slot.cold {
                self.cold.update(&key, old, -1);
            }
        }
        self.cold.seal();
        self.heap = 0;
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

    /// Reads back what [`save`](Self::save) wrote, into an empty map.
    pub fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.len = r.get()?;
        self.cold.restore(r)?;
        let n: usize = r.get()?;
        self.hot = KeyMap::default();
        self.heap = 0;
        for _ in 0..n {
            let key: Vec<u8> = r.get()?;
            let value: Option<Vec<u8>> = r.get()?;
            let cold: Option<Vec<u8>> = r.get()?;
            let slot = Slot {
                value: value.as_deref().map(V::decode).transpose()?,
                cold: cold.map(Vec::into_boxed_slice),
            };
            self.heap += Self::slot_heap(&key, &slot);
            self.hot.insert(key, slot);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
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
            }
            assert_eq!(map.len(), model.len());
            let mut keys: Vec<Vec<u8>> = map.keys().into_iter().map(<[u8]>::to_vec).collect();
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
    fn a_hot_map_under_its_threshold_stays_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), 1 << 20).unwrap();
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
}
