//! Chains of a window's rows (session windows, [`super::Extent::Chain`]): the
//! run of rows around a row whose consecutive `ORDER BY` values are less
//! than a gap apart, found by seeks that leap a gap at a time, and the
//! evaluation of a partition's changed chains in one batch.
//!
//! Values and gaps are counted in ticks: an integer, or a timestamp's
//! count of its unit. A key whose value is a 64-bit integer or timestamp
//! is moved by a gap without decoding it, once [`Keys::new`] has checked
//! that the row codec lays such values out as this module reads them.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;

use super::ranges::{below, max_upper, past, successor, Pos, View};
use super::{Ranged, Window};
use crate::operator::weighted_rows;
use crate::row::{take_rows, RowCodec};
use crate::trace::Entry;
use crate::Result;
use crate::Trace;

/// How a chain's keys are moved by a gap.
pub(super) struct Keys {
    /// The values are 8-byte fixed-width keys read directly.
    fixed: bool,
    /// The order is descending.
    descending: bool,
    /// The `ORDER BY` value's type.
    data_type: DataType,
    /// The bytes of every encoded `ORDER BY` value, NULL too, when they
    /// are all as long: a key's partition is then all but its last
    /// `width` bytes.
    width: Option<usize>,
}

impl Keys {
    /// The way to move keys of `codec` (one `ORDER BY` column of
    /// `data_type`, in the order `descending`).
    pub(super) fn new(codec: &RowCodec, data_type: &DataType, descending: bool) -> Result<Self> {
        let fixed = matches!(data_type, DataType::Int64 | DataType::Timestamp(_, _))
            && Self::reads(codec, data_type, descending)?;
        Ok(Self {
            fixed,
            descending,
            data_type: data_type.clone(),
            width: Self::width(codec, data_type)?,
        })
    }

    /// The one length of every encoded value of `data_type`, checked on a
    /// NULL and on values across the range; `None` when they differ.
    fn width(codec: &RowCodec, data_type: &DataType) -> Result<Option<usize>> {
        let values = [None, Some(i64::MIN), Some(-1), Some(0), Some(i64::MAX)];
        let array: ArrayRef = cast(
            &(Arc::new(Int64Array::from(values.to_vec())) as ArrayRef),
            data_type,
        )?;
        let rows = codec.encode(&[array], values.len())?;
        let width = rows.row(0).len();
        Ok((0..values.len())
            .all(|i| rows.row(i).len() == width)
            .then_some(width))
    }

    /// Whether `codec` writes 64-bit values as [`Keys::fixed_value`] reads
    /// them, checked on values across the range.
    fn reads(codec: &RowCodec, data_type: &DataType, descending: bool) -> Result<bool> {
        let values = [i64::MIN, -1_000_003, -1, 0, 1, 1_700_000_000_123, i64::MAX];
        let array: ArrayRef = cast(
            &(Arc::new(Int64Array::from(values.to_vec())) as ArrayRef),
            data_type,
        )?;
        let rows = codec.encode(&[array], values.len())?;
        Ok(values
            .iter()
            .enumerate()
            .all(|(i, &v)| rows.row(i) == fixed_key(v, descending).as_slice()))
    }

    /// The value of a key (partition `p`'s prefix cut off) in ticks, or
    /// `None` when it is NULL or has no ticks (an unsigned value past
    /// `i64::MAX`, which the session functions also take for NULL).
    fn value(&self, ranged: &Ranged, key: &[u8]) -> Result<Option<i64>> {
        if self.fixed {
            return Ok(fixed_value(key, self.descending));
        }
        let columns = ranged.order_codec.decode([key])?;
        let column = cast(&columns[0], &DataType::Int64)?;
        let column = column
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("cast to Int64");
        Ok(column.is_valid(0).then(|| column.value(0)))
    }

    /// The key of a value in ticks.
    fn key(&self, ranged: &Ranged, value: i64) -> Result<Option<Vec<u8>>> {
        if self.fixed {
            return Ok(Some(fixed_key(value, self.descending)));
        }
        let Ok(moved) = ScalarValue::Int64(Some(value)).cast_to(&self.data_type) else {
            return Ok(None);
        };
        let encoded = ranged.order_codec.encode(&[moved.to_array()?], 1)?;
        Ok(Some(encoded.row(0).to_vec()))
    }

    /// The key of partition `p` whose value is `value` moved `gap` ticks
    /// ahead (in the order's direction) or back; `None` when it cannot be
    /// moved (overflow): callers then take the partition's edge, a wider
    /// range, which is never wrong.
    fn moved(
        &self,
        ranged: &Ranged,
        p: &[u8],
        value: i64,
        gap: i64,
        ahead: bool,
    ) -> Result<Option<Vec<u8>>> {
        let moved = if ahead != self.descending {
            value.checked_add(gap)
        } else {
            value.checked_sub(gap)
        };
        let Some(moved) = moved else {
            return Ok(None);
        };
        Ok(self.key(ranged, moved)?.map(|k| [p, &k].concat()))
    }
}

/// The entries of the chains of `trace` (a window's, chains ascending)
/// that no change at or above `bound` can reach, in the trace's order
/// ([`Trace::retain_entries`]'s mask); `None` when there are none. A
/// later row at `u >= bound` joins a chain only if the chain's last
/// value is more than `u - gap`: every chain whose values are all at or
/// below `bound - gap` is closed. In each partition those are the chains
/// before the chain of its first value above `bound - gap`, or all of
/// them when it has none. NULLs (each a chain of its own, exempt from
/// waterlines) are kept.
pub(super) fn closed_chains(
    ranged: &Ranged,
    trace: &Trace,
    gap: i64,
    bound: &ScalarValue,
) -> Result<Option<Vec<bool>>> {
    let keys = ranged.chain_keys.as_ref().expect("chains have keys");
    let (Some(width), false) = (keys.width, keys.descending) else {
        return Ok(None);
    };
    // A bound that does not count in ticks (an unsigned one past
    // `i64::MAX`) forgets nothing.
    let ticks = bound
        .cast_to(&keys.data_type)
        .and_then(|b| b.cast_to(&DataType::Int64));
    let Ok(ScalarValue::Int64(Some(bound))) = ticks else {
        return Ok(None);
    };
    let Some(limit) = bound.checked_sub(gap) else {
        return Ok(None);
    };
    let mut dead: Vec<bool> = Vec::new();
    let mut any = false;
    // The current partition, its undecided valued entries, where their
    // last chain starts among them, the last value, and whether its first
    // value above the limit was met.
    let mut partition: Vec<u8> = Vec::new();
    let (mut undecided, mut chain_from): (Vec<usize>, usize) = (Vec::new(), 0);
    let (mut last, mut decided) = (None::<i64>, false);
    let mut failed = None;
    let mut close = |undecided: &mut Vec<usize>, upto: usize, dead: &mut Vec<bool>| {
        for &i in &undecided[..upto] {
            dead[i] = true;
        }
        any |= upto > 0;
        undecided.clear();
    };
    trace.for_each(|k, _, _| {
        let i = dead.len();
        dead.push(false);
        if failed.is_some() || k.len() < width {
            return;
        }
        let (p, order) = k.split_at(k.len() - width);
        if p != partition.as_slice() {
            if !decided {
                let n = undecided.len();
                close(&mut undecided, n, &mut dead);
            }
            partition.clear();
            partition.extend_from_slice(p);
            undecided.clear();
            (chain_from, last, decided) = (0, None, false);
        }
        if decided {
            return;
        }
        let value = match keys.value(ranged, order) {
            Ok(Some(v)) => v,
            Ok(None) => return,
            Err(e) => {
                failed = Some(e);
                return;
            }
        };
        if last.is_some_and(|l| i128::from(value) - i128::from(l) >= i128::from(gap)) {
            chain_from = undecided.len();
        }
        undecided.push(i);
        last = Some(value);
        if value > limit {
            close(&mut undecided, chain_from, &mut dead);
            decided = true;
        }
    });
    if let Some(e) = failed {
        return Err(e);
    }
    if !decided {
        let n = undecided.len();
        close(&mut undecided, n, &mut dead);
    }
    Ok(any.then_some(dead))
}

/// A valid 64-bit value's key: a byte 1, then the big-endian value with its
/// sign bit flipped (so that bytes sort as numbers), every byte inverted
/// when descending.
fn fixed_key(value: i64, descending: bool) -> Vec<u8> {
    let mut bytes = value.to_be_bytes();
    bytes[0] ^= 0x80;
    if descending {
        bytes.iter_mut().for_each(|b| *b = !*b);
    }
    let mut key = Vec::with_capacity(9);
    key.push(1);
    key.extend_from_slice(&bytes);
    key
}

/// The value of a [`fixed_key`]; `None` for a NULL's key.
fn fixed_value(key: &[u8], descending: bool) -> Option<i64> {
    let [1, rest @ ..] = key else {
        return None;
    };
    let mut bytes: [u8; 8] = rest.try_into().ok()?;
    if descending {
        bytes.iter_mut().for_each(|b| *b = !*b);
    }
    bytes[0] ^= 0x80;
    Some(i64::from_be_bytes(bytes))
}

/// One end of the chain (see [`super::Extent::Chain`]) around `at` in
/// partition `p`, as `view` holds it; `at` need not be in the view (a
/// change's row before it is inserted). Back, the inclusive lower bound:
/// each seek leaps to the first row less than `gap` before the chain's
/// first row so far. Ahead, the exclusive upper bound: each seek leaps to
/// the last row less than `gap` after its last row so far. `None` (the
/// partition's edge) when a value cannot be moved by the gap.
pub(super) fn chain_edge(
    ranged: &Ranged,
    view: View<'_>,
    p: &[u8],
    at: (&[u8], &[u8]),
    gap: i64,
    ahead: bool,
) -> Result<Option<Pos>> {
    let keys = ranged.chain_keys.as_ref().expect("chains have keys");
    let Some(mut value) = keys.value(ranged, &at.0[p.len()..])? else {
        // A NULL is a chain of its own (it and its peers).
        let key = at.0.to_vec();
        return Ok(Some((if ahead { past(key) } else { key }, Vec::new())));
    };
    let mut edge: Pos = (at.0.to_vec(), at.1.to_vec());
    loop {
        let Some(key) = keys.moved(ranged, p, value, gap, ahead)? else {
            return Ok(None);
        };
        let next = if ahead {
            view.before((&key, &[]))
                .next()
                .filter(|&(k, r, _)| k.starts_with(p) && (k, r) > (&edge.0[..], &edge.1[..]))
        } else {
            // Past the keys equal to `first − gap`: those are a gap away.
            view.from((&past(key), &[]))
                .next()
                .filter(|&(k, r, _)| k.starts_with(p) && (k, r) < (&edge.0[..], &edge.1[..]))
        };
        let Some((k, r, _)) = next else {
            return Ok(Some(if ahead {
                successor((&edge.0, &edge.1))
            } else {
                (edge.0, Vec::new())
            }));
        };
        // A row strictly between two values is not NULL; were it one, the
        // partition's edge is a wider bound, never a wrong one.
        let Some(v) = keys.value(ranged, &k[p.len()..])? else {
            return Ok(None);
        };
        (value, edge) = (v, (k.to_vec(), r.to_vec()));
    }
}

impl Window {
    /// With chains only: the output rows of the entries of partition `p`
    /// in `ranges` (sorted, disjoint), as `view` holds them, evaluated in
    /// one batch: the slices of whole chains that hold the ranges, merged
    /// where they overlap, one after the other. Chains of different slices
    /// stay apart in the batch: a slice ends where the next row is a gap
    /// away or more, and the next slice starts at that row or after it.
    pub(super) fn chains_output(
        &self,
        ranged: &Ranged,
        view: View<'_>,
        p: &[u8],
        ranges: &[(Pos, Option<Pos>)],
    ) -> Result<Option<RecordBatch>> {
        let mut slices: Vec<(Pos, Option<Pos>)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            let Some((first, last)) = first_last(view, p, lo, hi) else {
                continue;
            };
            let last = last.map_or((first.0, first.1), |l| (l.0, l.1));
            let (slice_lo, mut slice_hi) =
                self.bounds(ranged, view, p, (first.0, first.1), last, false)?;
            if hi.is_none() {
                slice_hi = None;
            }
            let slice_lo = slice_lo.unwrap_or_else(|| (p.to_vec(), Vec::new()));
            match slices.last_mut() {
                Some(prev) if below(&prev.1, (&slice_lo.0, &slice_lo.1)) => {
                    prev.1 = max_upper(prev.1.take(), slice_hi);
                }
                _ => slices.push((slice_lo, slice_hi)),
            }
        }
        // Entries of every slice, and the (row-expanded) positions of those
        // inside a range.
        let mut weighted: Vec<(&[u8], i64)> = Vec::new();
        let mut keep: Vec<u32> = Vec::new();
        let (mut range, mut position) = (0, 0u32);
        for (lo, hi) in &slices {
            for (k, r, w) in view.entries(p, lo, hi) {
                while range < ranges.len() && !below(&ranges[range].1, (k, r)) {
                    range += 1;
                }
                // A negative weight is refused by `weighted_rows` below.
                let weight = u32::try_from(w.max(0)).unwrap_or(u32::MAX);
                let inside = range < ranges.len() && {
                    let lo = &ranges[range].0;
                    (lo.0.as_slice(), lo.1.as_slice()) <= (k, r)
                };
                if inside {
                    keep.extend(position..position + weight);
                }
                position += weight;
                weighted.push((r, w));
            }
        }
        if keep.is_empty() {
            return Ok(None);
        }
        let batch = weighted_rows(&self.row_codec, &self.input_schema, &weighted)?;
        let mut columns = batch.columns().to_vec();
        for f in &self.functions {
            columns.push(f.expr.evaluate(&batch)?);
        }
        let out = self.output(columns, batch.num_rows())?;
        Ok(Some(take_rows(&out, &keep)?))
    }
}

/// The entries of partition `p` first in `[lo, hi)` and last (`None`
/// when `hi` is the partition's end: the last entry's chain ends there).
fn first_last<'a>(
    view: View<'a>,
    p: &[u8],
    lo: &Pos,
    hi: &Option<Pos>,
) -> Option<(Entry<'a>, Option<Entry<'a>>)> {
    let first = view
        .from((&lo.0, &lo.1))
        .next()
        .filter(|&(k, r, _)| k.starts_with(p) && below(hi, (k, r)))?;
    let last = hi
        .as_ref()
        .and_then(|hi| view.before((&hi.0, &hi.1)).next());
    Some((first, last))
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::compute::SortOptions;

    use super::*;

    /// Keys of partition `p` and time `t` (`None`: NULL), as a window's
    /// trace holds them.
    fn key(codec: &RowCodec, p: i64, t: Option<i64>) -> Vec<u8> {
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(vec![p])),
            Arc::new(Int64Array::from(vec![t])),
        ];
        codec.encode(&columns, 1).unwrap().row(0).to_vec()
    }

    #[test]
    fn closed_chains_are_those_a_gap_below_the_bound() {
        let asc = SortOptions::default();
        let order_codec = RowCodec::with_options([(DataType::Int64, asc)]).unwrap();
        let key_codec =
            RowCodec::with_options([(DataType::Int64, asc), (DataType::Int64, asc)]).unwrap();
        let ranged = Ranged {
            order_exprs: Vec::new(),
            partition_codec: RowCodec::with_options([(DataType::Int64, asc)]).unwrap(),
            chain_keys: Some(Keys::new(&order_codec, &DataType::Int64, false).unwrap()),
            order_codec,
            descending: false,
            ranks: false,
            chains: true,
        };
        // Gap 3. Partition 1: chains {1, 2}, {10, 11, 13}, {20}, and a
        // NULL; partition 2: {1}, {5}.
        let rows: [(i64, Option<i64>); 9] = [
            (1, Some(1)),
            (1, Some(2)),
            (1, Some(10)),
            (1, Some(11)),
            (1, Some(13)),
            (1, Some(20)),
            (1, None),
            (2, Some(1)),
            (2, Some(5)),
        ];
        let mut trace = Trace::new();
        for (i, &(p, t)) in rows.iter().enumerate() {
            trace.update(&key(&key_codec, p, t), &[i as u8], 1);
        }
        trace.seal();
        let dead_at = |bound: i64| -> Vec<(i64, Option<i64>)> {
            let mask = closed_chains(&ranged, &trace, 3, &ScalarValue::Int64(Some(bound)))
                .unwrap()
                .unwrap_or_default();
            let mut dead = Vec::new();
            trace.for_each(|_, r, _| dead.push(rows[r[0] as usize]));
            dead.into_iter()
                .zip(mask.iter().chain(std::iter::repeat(&false)))
                .filter(|(_, &d)| d)
                .map(|(row, _)| row)
                .collect()
        };
        // At 15 a later row at 15 joins {10, 11, 13}: only {1, 2} and
        // partition 2's chains are closed.
        assert_eq!(
            dead_at(15),
            vec![(1, Some(1)), (1, Some(2)), (2, Some(1)), (2, Some(5))]
        );
        // At 16 {10, 11, 13} is closed too; {20} never is before 23.
        assert_eq!(
            dead_at(16),
            vec![
                (1, Some(1)),
                (1, Some(2)),
                (1, Some(10)),
                (1, Some(11)),
                (1, Some(13)),
                (2, Some(1)),
                (2, Some(5))
            ]
        );
        assert_eq!(dead_at(23).len(), 8, "all but the NULL");
        // At 4 partition 2's {1} is closed (a row at 4 is a gap after it).
        assert_eq!(dead_at(4), vec![(2, Some(1))]);
        assert!(dead_at(3).is_empty(), "no chain ends a gap below 3");
    }
}
