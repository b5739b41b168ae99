//! Waterlines and the garbage collection of state below them.
//!
//! A [`Waterline`] is a bound on one column of a stream: no change of a
//! later step has a value below it in that column (NULLs excepted). It is
//! set by a [`Lateness`](super::Lateness) operator and carried, through
//! monotone expressions, by the SQL lowering. A stateful operator whose
//! state is keyed by such a column can forget the keys below the bound:
//! no future change can reach them, so they can neither change an output
//! nor be needed to compute one.
//!
//! A [`Collector`] decides when to collect: after as many updates as there
//! were live keys at the previous collection (and at least
//! [`MIN_UPDATES`]), so the scans cost O(1) per update, amortized, and the
//! state stays within twice its live size.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Scalar};
use datafusion::arrow::compute::kernels::cmp::lt;
use datafusion::common::ScalarValue;

use super::state_map::{StateMap, StateValue};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, Trace};

/// The current bound of a column (`None` while there is none).
pub type Waterline = Arc<dyn Fn() -> Option<ScalarValue> + Send + Sync>;

/// Fewest updates between two collections.
pub const MIN_UPDATES: usize = 4096;

/// Collects the keys of an operator's state whose column `column` (in the
/// key's encoding) is below a waterline.
pub struct Collector {
    column: usize,
    waterline: Waterline,
    since: usize,
    live: usize,
}

impl Collector {
    /// Collects keys whose `column` is below `waterline`.
    pub fn new(column: usize, waterline: Waterline) -> Self {
        Self {
            column,
            waterline,
            since: 0,
            live: 0,
        }
    }

    /// Counts `updates` more updates of the state; returns the bound when a
    /// collection is due.
    pub fn due(&mut self, updates: usize) -> Option<ScalarValue> {
        self.since += updates;
        if self.since < self.live.max(MIN_UPDATES) {
            return None;
        }
        let bound = (self.waterline)()?;
        (!bound.is_null()).then_some(bound)
    }

    /// The collector of an optional one with its bound, when a collection
    /// is due after `updates` more updates.
    pub fn due_in(
        gc: &mut Option<Collector>,
        updates: usize,
    ) -> Option<(&mut Collector, ScalarValue)> {
        let gc = gc.as_mut()?;
        let bound = gc.due(updates)?;
        Some((gc, bound))
    }

    /// Writes the counters of `collectors` (their waterlines belong to
    /// the lateness operators upstream, which save them).
    pub fn save_all<'a>(
        w: &mut StateWriter,
        collectors: impl IntoIterator<Item = &'a Collector>,
    ) -> Result<()> {
        let counters: Vec<(usize, usize)> =
            collectors.into_iter().map(|c| (c.since, c.live)).collect();
        w.put(&counters)
    }

    /// Reads back the counters [`save_all`](Self::save_all) wrote (while a
    /// state is re-split, a shard's share of them, added to the counters
    /// so far when the reader is [`merging`](StateReader::merging)).
    pub fn restore_all<'a>(
        r: &mut StateReader,
        collectors: impl IntoIterator<Item = &'a mut Collector>,
    ) -> Result<()> {
        let counters: Vec<(usize, usize)> = r.get()?;
        let collectors: Vec<&mut Collector> = collectors.into_iter().collect();
        if counters.len() != collectors.len() {
            return Err(r.corrupt("collectors of another operator"));
        }
        // Split over shards, each takes its share of the counts.
        let (merging, shares) = (r.merging(), r.shares());
        for (c, (since, live)) in collectors.into_iter().zip(counters) {
            let (since, live) = (since / shares, live / shares);
            (c.since, c.live) = match merging {
                true => (c.since.saturating_add(since), c.live.saturating_add(live)),
                false => (since, live),
            };
        }
        Ok(())
    }

    /// Records a collection that kept `live` keys.
    pub fn collected(&mut self, live: usize) {
        self.since = 0;
        self.live = live;
    }

    /// The keys of `map` (encoded by `codec`) whose column is below
    /// `bound`, `None` when there are none: tested on each key's bytes
    /// where the column has a fixed place, else found by decoding every
    /// key. The map's keys are an operator's groups, so that its other
    /// state (traces of rows or values per group) is rewritten only when
    /// some group is dead.
    pub fn dead<V: StateValue>(
        &self,
        codec: &RowCodec,
        map: &StateMap<V>,
        bound: &ScalarValue,
    ) -> Result<Option<Dead>> {
        if let Some(test) = KeyBound::new(codec, self.column, bound)? {
            return Ok(map.any_key(|k| test.below(k)).then_some(Dead::Below(test)));
        }
        let keys = map.with_keys(|keys| -> Result<HashSet<Vec<u8>, _>> {
            let below = below(codec, keys, self.column, bound)?;
            Ok(keys
                .iter()
                .zip(below)
                .filter(|(_, b)| *b)
                .map(|(k, _)| k.to_vec())
                .collect())
        })?;
        Ok((!keys.is_empty()).then_some(Dead::Keys(keys)))
    }
}

/// The dead keys of a state map (see [`Collector::dead`]).
pub enum Dead {
    /// Those below a bound tested on their bytes.
    Below(KeyBound),
    /// These.
    Keys(HashSet<Vec<u8>, foldhash::fast::RandomState>),
}

impl Dead {
    /// Whether `key` is dead.
    pub fn contains(&self, key: &[u8]) -> bool {
        match self {
            Dead::Below(test) => test.below(key),
            Dead::Keys(keys) => keys.contains(key),
        }
    }
}

/// A bound on a column that sits at the same place in every encoded key
/// (every column before it has a fixed width), tested on the key's bytes:
/// the encoding is memcomparable, so the column's slice is below the
/// bound's encoding exactly when its value is below the bound. Nothing is
/// decoded.
pub struct KeyBound {
    offset: usize,
    /// The bound, encoded as the column is (a validity byte first).
    bound: Vec<u8>,
}

impl KeyBound {
    /// The test of column `column` of keys encoded by `codec` against a
    /// non-NULL `bound`, when the column has a fixed place and ascending
    /// order; `None` otherwise.
    pub fn new(codec: &RowCodec, column: usize, bound: &ScalarValue) -> Result<Option<Self>> {
        let Some((offset, data_type, options)) = codec.fixed_place(column) else {
            return Ok(None);
        };
        if options.descending || bound.is_null() {
            return Ok(None);
        }
        let value = bound.cast_to(data_type)?.to_array()?;
        let one = RowCodec::with_options([(data_type.clone(), options)])?;
        let bound = one.encode(&[value], 1)?.row(0).to_vec();
        Ok(Some(Self { offset, bound }))
    }

    /// Whether the key's column is below the bound (never when it is
    /// NULL: its validity byte differs from the bound's).
    pub fn below(&self, key: &[u8]) -> bool {
        match key.get(self.offset..self.offset + self.bound.len()) {
            Some(value) => value[0] == self.bound[0] && value < self.bound.as_slice(),
            None => false,
        }
    }

    /// Whether no key at or after `key` in byte order is below the bound:
    /// when the column comes first, a non-NULL key not below it (every
    /// later key's column is then at least as large, or NULL).
    pub fn none_below_from(&self, key: &[u8]) -> bool {
        self.offset == 0
            && key
                .get(..self.bound.len())
                .is_some_and(|value| value[0] == self.bound[0] && value >= self.bound.as_slice())
    }
}

/// Collects a trace by key: when due, drops the keys (encoded by `codec`)
/// whose column is below the bound.
pub fn collect_keys(
    gc: &mut Collector,
    trace: &mut Trace,
    codec: &RowCodec,
    updates: usize,
) -> Result<()> {
    collect_trace(gc, trace, codec, updates, false)
}

/// Collects a trace by row: when due, drops the entries whose row (encoded
/// by `codec`) has its column below the bound.
pub fn collect_rows(
    gc: &mut Collector,
    trace: &mut Trace,
    codec: &RowCodec,
    updates: usize,
) -> Result<()> {
    collect_trace(gc, trace, codec, updates, true)
}

fn collect_trace(
    gc: &mut Collector,
    trace: &mut Trace,
    codec: &RowCodec,
    updates: usize,
    by_row: bool,
) -> Result<()> {
    let Some(bound) = gc.due(updates) else {
        return Ok(());
    };
    if let Some(test) = KeyBound::new(codec, gc.column, &bound)? {
        // Tested on bytes: the scan stops at the first dead entry, or, when
        // the column leads the keys, at the first live key past the NULLs
        // (the keys after it are live too); the trace is rewritten only
        // when something is dead.
        let dead_at = |k: &[u8], r: &[u8]| test.below(if by_row { r } else { k });
        let (mut dead, mut stopped, mut scanned) = (false, false, 0);
        for (k, r, _) in trace.iter() {
            if dead_at(k, r) {
                dead = true;
                break;
            }
            if !by_row && test.none_below_from(k) {
                stopped = true;
                break;
            }
            scanned += 1;
        }
        trace.release_reads();
        let live = if dead {
            trace.retain(|k, r| !dead_at(k, r))
        } else if stopped {
            // Not counted to the end: the batches' entries (at least the
            // trace's consolidated ones).
            trace.entries()
        } else {
            scanned
        };
        gc.collected(live);
        return Ok(());
    }
    // Each distinct item (the entry's row, or its key) in the trace's
    // order, with how many entries in a row have it; then whether each
    // entry is dead, in that order.
    let (mut items, mut runs): (Vec<&[u8]>, Vec<usize>) = (Vec::new(), Vec::new());
    for (k, r, _) in trace.iter() {
        let item = if by_row { r } else { k };
        match (items.last(), runs.last_mut()) {
            (Some(last), Some(n)) if *last == item => *n += 1,
            _ => {
                items.push(item);
                runs.push(1);
            }
        }
    }
    let below = below(codec, &items, gc.column, &bound);
    drop(items);
    // The scan copied what it read from batch files: drop the copies now,
    // whatever happens next.
    trace.release_reads();
    let below = below?;
    if !below.contains(&true) {
        // Nothing to drop: the trace is not rewritten.
        gc.collected(runs.iter().sum());
        return Ok(());
    }
    let dead: Vec<bool> = below
        .iter()
        .zip(&runs)
        .flat_map(|(b, n)| std::iter::repeat_n(*b, *n))
        .collect();
    let live = trace.retain_entries(&dead);
    gc.collected(live);
    Ok(())
}

/// For each row (encoded by `codec`), whether its `column` is below `bound`
/// (a NULL is never below).
pub fn below(
    codec: &RowCodec,
    rows: &[&[u8]],
    column: usize,
    bound: &ScalarValue,
) -> Result<Vec<bool>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(test) = KeyBound::new(codec, column, bound)? {
        return Ok(rows.iter().map(|r| test.below(r)).collect());
    }
    let columns = codec.decode(rows.iter().copied())?;
    let values = &columns[column];
    let bound = bound.cast_to(values.data_type())?.to_array()?;
    let below = lt(values, &Scalar::new(bound))?;
    Ok((0..below.len())
        .map(|i| below.is_valid(i) && below.value(i))
        .collect())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{
        ArrayRef, BooleanArray, Date32Array, Decimal128Array, Int16Array, Int64Array, StringArray,
        TimestampMicrosecondArray, UInt8Array,
    };
    use datafusion::arrow::datatypes::DataType;

    use super::*;

    /// The test on bytes agrees with decoding and comparing, for every
    /// place a column can have, NULLs included.
    #[test]
    fn key_bound_agrees_with_decoding() {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(BooleanArray::from(vec![
                Some(true),
                None,
                Some(false),
                Some(true),
            ])),
            Arc::new(Int16Array::from(vec![Some(-3), Some(7), None, Some(0)])),
            Arc::new(UInt8Array::from(vec![Some(200), Some(1), Some(0), None])),
            Arc::new(Date32Array::from(vec![Some(-5), None, Some(10), Some(3)])),
            Arc::new(
                Decimal128Array::from(vec![Some(-12_345), Some(99), None, Some(0)])
                    .with_precision_and_scale(10, 2)
                    .unwrap(),
            ),
            Arc::new(TimestampMicrosecondArray::from(vec![
                Some(1_000),
                Some(-1),
                Some(5),
                None,
            ])),
            Arc::new(Int64Array::from(vec![
                Some(i64::MIN),
                Some(i64::MAX),
                Some(0),
                None,
            ])),
            Arc::new(StringArray::from(vec![
                Some("a"),
                None,
                Some("bb"),
                Some(""),
            ])),
        ];
        let types: Vec<DataType> = columns.iter().map(|c| c.data_type().clone()).collect();
        let codec = RowCodec::new(&types).unwrap();
        let rows = codec.encode(&columns, 4).unwrap();
        let rows: Vec<&[u8]> = (0..4).map(|i| rows.row(i)).collect();
        let bounds = [
            (0, ScalarValue::Boolean(Some(true))),
            (1, ScalarValue::Int16(Some(0))),
            (2, ScalarValue::UInt8(Some(1))),
            (3, ScalarValue::Date32(Some(3))),
            (4, ScalarValue::Decimal128(Some(100), 10, 2)),
            (5, ScalarValue::TimestampMicrosecond(Some(5), None)),
            (6, ScalarValue::Int64(Some(-1))),
            (6, ScalarValue::Int64(Some(i64::MAX))),
        ];
        for (column, bound) in bounds {
            let test = KeyBound::new(&codec, column, &bound).unwrap().unwrap();
            let columns = codec.decode(rows.iter().copied()).unwrap();
            let values = &columns[column];
            let bound_array = bound
                .cast_to(values.data_type())
                .unwrap()
                .to_array()
                .unwrap();
            let expected = lt(values, &Scalar::new(bound_array)).unwrap();
            for (i, row) in rows.iter().enumerate() {
                let decoded = expected.is_valid(i) && expected.value(i);
                assert_eq!(
                    test.below(row),
                    decoded,
                    "column {column}, row {i}, {bound}"
                );
            }
        }
        // After a string the place is unknown; the string itself too.
        assert!(codec.fixed_place(7).is_none());
        assert!(KeyBound::new(&codec, 7, &ScalarValue::from("b"))
            .unwrap()
            .is_none());
        let after = RowCodec::new(&[DataType::Utf8, DataType::Int64]).unwrap();
        assert!(after.fixed_place(1).is_none());
    }

    /// A scan that stops where `none_below_from` says misses no key below
    /// the bound: over sorted keys whose first column is bounded (NULLs
    /// sort first), and never stops early when the column is not first.
    #[test]
    fn a_scan_stopped_at_the_first_live_key_misses_nothing_below() {
        let first = Int64Array::from(vec![
            None,
            Some(-4),
            Some(2),
            None,
            Some(2),
            Some(9),
            Some(0),
        ]);
        let second = Int64Array::from(vec![
            Some(5),
            Some(1),
            None,
            Some(3),
            Some(-7),
            Some(0),
            Some(8),
        ]);
        let columns: Vec<ArrayRef> = vec![Arc::new(first), Arc::new(second)];
        let codec = RowCodec::new(&[DataType::Int64, DataType::Int64]).unwrap();
        let encoded = codec.encode(&columns, 7).unwrap();
        let mut keys: Vec<&[u8]> = (0..7).map(|i| encoded.row(i)).collect();
        keys.sort();
        for bound in [-5, -4, 0, 2, 3, 10] {
            for column in [0, 1] {
                let test = KeyBound::new(&codec, column, &ScalarValue::Int64(Some(bound)))
                    .unwrap()
                    .unwrap();
                for (i, key) in keys.iter().enumerate() {
                    if test.none_below_from(key) {
                        assert_eq!(column, 0);
                        assert!(
                            keys[i..].iter().all(|k| !test.below(k)),
                            "bound {bound}: a key after {i} is below it"
                        );
                    }
                }
                // The keys below are there to find before any stop.
                let stop = keys
                    .iter()
                    .position(|k| test.none_below_from(k))
                    .unwrap_or(keys.len());
                let below = keys.iter().filter(|k| test.below(k)).count();
                assert_eq!(keys[..stop].iter().filter(|k| test.below(k)).count(), below);
            }
        }
    }
}
