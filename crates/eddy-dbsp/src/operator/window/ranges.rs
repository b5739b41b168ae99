//! The range mode of [`Window`]: a change reaches the rows whose values can
//! see it, found by seeks in the trace as it was before the step and as it
//! is after ([`View`]); the reaches are merged into disjoint ranges, and
//! each range is evaluated over a slice of the partition that holds its
//! rows' frames.

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::numeric::add;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;

use super::{chain, Extent, RangeOffset, Ranged, Window};
use crate::operator::map::evaluate;
use crate::operator::weighted_rows;
use crate::trace::{Cursor, Entry};
use crate::{Result, Trace, ZSet};

/// A position in a trace: `(key, row)`. Lower bounds are inclusive, upper
/// bounds exclusive; `None` is the partition's edge.
pub(super) type Pos = (Vec<u8>, Vec<u8>);

/// The trace as it was before the step (no overlay) or as it is after it
/// (the step's changes as an overlay).
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    trace: &'a Trace,
    overlay: &'a [Entry<'a>],
}

impl<'a> View<'a> {
    /// The entries from `at` on, in order.
    pub(super) fn from(&self, at: (&[u8], &[u8])) -> Cursor<'a> {
        self.trace.seek_entry_over(at.0, at.1, self.overlay)
    }

    /// The entries before `at`, last first.
    pub(super) fn before(&self, at: (&[u8], &[u8])) -> Cursor<'a> {
        self.trace.seek_back_over(at.0, at.1, self.overlay)
    }

    /// The `n`-th entry of partition `p` before `at` (an inclusive lower
    /// bound), or `None` when the partition has fewer.
    pub(super) fn back(&self, p: &[u8], at: (&[u8], &[u8]), n: Option<u64>) -> Option<Pos> {
        let n = n?;
        if n == 0 {
            return Some((at.0.to_vec(), at.1.to_vec()));
        }
        let mut count = 0;
        for (k, r, _) in self.before(at) {
            if !k.starts_with(p) {
                return None;
            }
            count += 1;
            if count == n {
                return Some((k.to_vec(), r.to_vec()));
            }
        }
        None
    }

    /// The bound just past the `n`-th entry of partition `p` after `at`
    /// (exclusive), or `None` when the partition has fewer.
    pub(super) fn ahead(&self, p: &[u8], at: (&[u8], &[u8]), n: Option<u64>) -> Option<Pos> {
        let n = n?;
        if n == 0 {
            return Some(successor(at));
        }
        let mut count = 0;
        for (k, r, _) in self.from((at.0, &successor(at).1)) {
            if !k.starts_with(p) {
                return None;
            }
            count += 1;
            if count == n {
                return Some(successor((k, r)));
            }
        }
        None
    }

    /// The entries of partition `p` from `lo` up to `hi`.
    pub(super) fn entries(&self, p: &[u8], lo: &Pos, hi: &Option<Pos>) -> Vec<Entry<'a>> {
        self.from((&lo.0, &lo.1))
            .take_while(|&(k, r, _)| k.starts_with(p) && below(hi, (k, r)))
            .collect()
    }
}

/// The least position after `at`: rows are prefix-free, so nothing lies
/// between `(k, r)` and `(k, r ++ [0])`.
pub(super) fn successor(at: (&[u8], &[u8])) -> Pos {
    let mut row = Vec::with_capacity(at.1.len() + 1);
    row.extend_from_slice(at.1);
    row.push(0);
    (at.0.to_vec(), row)
}

/// Whether `at` lies below the exclusive upper bound `hi`.
pub(super) fn below(hi: &Option<Pos>, at: (&[u8], &[u8])) -> bool {
    hi.as_ref()
        .is_none_or(|(k, r)| at < (k.as_slice(), r.as_slice()))
}

/// The smaller of two lower bounds (`None` is the partition's start).
pub(super) fn min_lower(a: Option<Pos>, b: Option<Pos>) -> Option<Pos> {
    Some(a?.min(b?))
}

/// The larger of two upper bounds (`None` is the partition's end).
pub(super) fn max_upper(a: Option<Pos>, b: Option<Pos>) -> Option<Pos> {
    Some(a?.max(b?))
}

/// Merges ranges `[lo, hi)` into disjoint ones: a row evaluated in two
/// ranges would be emitted twice.
fn merge_ranges(mut ranges: Vec<(Option<Pos>, Option<Pos>)>) -> Vec<(Option<Pos>, Option<Pos>)> {
    ranges.sort_by(|a, b| match (&a.0, &b.0) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => x.cmp(y),
    });
    let mut merged: Vec<(Option<Pos>, Option<Pos>)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match merged.last_mut() {
            Some(last) if lo.as_ref().is_none_or(|l| below(&last.1, (&l.0, &l.1))) => {
                last.1 = max_upper(last.1.take(), hi);
            }
            _ => merged.push((lo, hi)),
        }
    }
    merged
}

impl Window {
    /// A step in range mode: the ranges of the touched partitions that the
    /// changes reach, before and after the step.
    pub(super) fn eval_ranges(&mut self, change: &ZSet) -> Result<Vec<ZSet>> {
        let ranged = self.ranged.as_ref().expect("range mode");
        let n = change.len();
        let partition_columns = evaluate(&self.partition_exprs, change)?;
        let mut key_columns = partition_columns.clone();
        key_columns.extend(evaluate(&ranged.order_exprs, change)?);
        let partitions = ranged.partition_codec.encode(&partition_columns, n)?;
        let keys = self.key_codec.encode(&key_columns, n)?;
        let rows = self.row_codec.encode(change.batch().columns(), n)?;

        // The step's changes, sorted and consolidated: the overlay that
        // turns the trace into the state after the step.
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| (keys.row(a), rows.row(a)).cmp(&(keys.row(b), rows.row(b))));
        let mut consolidated: Vec<(Entry<'_>, usize)> = Vec::with_capacity(n);
        for i in order {
            let (k, r, w) = (keys.row(i), rows.row(i), change.weights()[i]);
            match consolidated.last_mut() {
                Some((last, _)) if (last.0, last.1) == (k, r) => last.2 += w,
                _ => consolidated.push(((k, r, w), i)),
            }
        }
        consolidated.retain(|(e, _)| e.2 != 0);
        // `owner[j]`: a change row of overlay entry j, for its partition.
        let (overlay, owner): (Vec<Entry<'_>>, Vec<usize>) = consolidated.into_iter().unzip();

        let mut parts = Vec::new();
        let (mut start, old) = (
            0,
            View {
                trace: &self.trace,
                overlay: &[],
            },
        );
        let new = View {
            trace: &self.trace,
            overlay: &overlay,
        };
        while start < overlay.len() {
            let p = partitions.row(owner[start]);
            let mut end = start + 1;
            while end < overlay.len() && partitions.row(owner[end]) == p {
                end += 1;
            }
            let mut ranges: Vec<(Option<Pos>, Option<Pos>)> = Vec::with_capacity(2 * (end - start));
            // With chains only, a change of positive weight (its row is
            // there after the step) needs only its chain after the step,
            // and one of negative weight its chain before: if a row's
            // chain changed, its chain after the step holds an added row or
            // its chain before holds a removed one (a chain that holds
            // neither keeps its rows and its ends). A change inside the
            // last range a view gave lies in that range's chains.
            let mut last: [Option<usize>; 2] = [None, None];
            for &(k, r, w) in &overlay[start..end] {
                for (v, view) in [old, new].into_iter().enumerate() {
                    if ranged.chains {
                        if (v == 1) != (w > 0) {
                            continue;
                        }
                        if let Some((lo, hi)) = last[v].map(|i| &ranges[i]) {
                            if lo
                                .as_ref()
                                .is_none_or(|lo| (lo.0.as_slice(), lo.1.as_slice()) <= (k, r))
                                && below(hi, (k, r))
                            {
                                continue;
                            }
                        }
                        last[v] = Some(ranges.len());
                    }
                    ranges.push(self.bounds(ranged, view, p, (k, r), (k, r), true)?);
                }
            }
            let ranges: Vec<(Pos, Option<Pos>)> = merge_ranges(ranges)
                .into_iter()
                .map(|(lo, hi)| (lo.unwrap_or_else(|| (p.to_vec(), Vec::new())), hi))
                .collect();
            if ranged.chains {
                for (view, weight) in [(old, -1), (new, 1)] {
                    if let Some(b) = self.chains_output(ranged, view, p, &ranges)? {
                        parts.push(ZSet::with_weight(b, weight));
                    }
                }
            } else {
                for (lo, hi) in &ranges {
                    for (view, weight) in [(old, -1), (new, 1)] {
                        if let Some(b) = self.range_output(ranged, view, p, lo, hi)? {
                            parts.push(ZSet::with_weight(b, weight));
                        }
                    }
                }
            }
            start = end;
        }
        for &(k, r, w) in &overlay {
            self.trace.update(k, r, w);
        }
        self.trace.seal();
        Ok(parts)
    }

    /// Bounds around the entries `first ..= last` of partition `p`. With
    /// `reach`, the rows whose values can see a change at `first` (a frame
    /// `n FOLLOWING` reaches n rows back); otherwise the rows the values of
    /// `first ..= last` read (their frames).
    pub(super) fn bounds(
        &self,
        ranged: &Ranged,
        view: View<'_>,
        p: &[u8],
        first: (&[u8], &[u8]),
        last: (&[u8], &[u8]),
        reach: bool,
    ) -> Result<(Option<Pos>, Option<Pos>)> {
        let mut lo: Option<Option<Pos>> = None;
        let mut hi: Option<Option<Pos>> = None;
        for f in &self.functions {
            let (l, h) = match &f.extent {
                Extent::Partition => (None, None),
                Extent::Rank { .. } if reach => (Some((first.0.to_vec(), first.1.to_vec())), None),
                Extent::Rank { .. } => {
                    (Some((first.0.to_vec(), Vec::new())), Some(successor(last)))
                }
                Extent::Rows {
                    preceding,
                    following,
                } => {
                    let (back, ahead) = if reach {
                        (*following, *preceding)
                    } else {
                        (*preceding, *following)
                    };
                    (view.back(p, first, back), view.ahead(p, last, ahead))
                }
                Extent::Range {
                    preceding,
                    following,
                } => {
                    let (back, ahead) = if reach {
                        (following, preceding)
                    } else {
                        (preceding, following)
                    };
                    (
                        self.value_bound(ranged, p, first.0, back, false)?,
                        self.value_bound(ranged, p, last.0, ahead, true)?,
                    )
                }
                Extent::Chain { gap } => (
                    chain::chain_edge(ranged, view, p, first, *gap, false)?,
                    chain::chain_edge(ranged, view, p, last, *gap, true)?,
                ),
            };
            lo = Some(match lo {
                None => l,
                Some(lo) => min_lower(lo, l),
            });
            hi = Some(match hi {
                None => h,
                Some(hi) => max_upper(hi, h),
            });
        }
        Ok((lo.flatten(), hi.flatten()))
    }

    /// The bound of the rows whose `ORDER BY` value lies within `offset`
    /// of the value in `key` (of partition `p`): ahead (an exclusive upper
    /// bound) or back (an inclusive lower bound). `None` (the partition's
    /// edge) when unbounded, when the value is NULL, or when the offset
    /// cannot be applied (overflow): a wider range is never wrong.
    fn value_bound(
        &self,
        ranged: &Ranged,
        p: &[u8],
        key: &[u8],
        offset: &RangeOffset,
        ahead: bool,
    ) -> Result<Option<Pos>> {
        let bound = |key: Vec<u8>| Some((if ahead { past(key) } else { key }, Vec::new()));
        match offset {
            RangeOffset::Unbounded => Ok(None),
            RangeOffset::Current => Ok(bound(key.to_vec())),
            RangeOffset::By(by) => Ok(moved_key(ranged, p, key, by, ahead)?.and_then(bound)),
        }
    }

    /// The output rows of the entries of partition `p` in `[lo, hi)`, as
    /// `view` holds them, evaluated over a slice that holds their frames;
    /// `None` when the range holds no rows.
    fn range_output(
        &self,
        ranged: &Ranged,
        view: View<'_>,
        p: &[u8],
        lo: &Pos,
        hi: &Option<Pos>,
    ) -> Result<Option<RecordBatch>> {
        let inside = view.entries(p, lo, hi);
        let (Some(&first), Some(&last)) = (inside.first(), inside.last()) else {
            return Ok(None);
        };
        let (slice_lo, slice_hi) =
            self.bounds(ranged, view, p, (first.0, first.1), (last.0, last.1), false)?;
        // Start at a peer boundary, so rankings count whole peer groups.
        let slice_lo = (slice_lo.map_or_else(|| p.to_vec(), |(k, _)| k), Vec::new());
        let slice = view.entries(p, &slice_lo, &slice_hi);
        let skip: i64 = slice
            .iter()
            .take_while(|e| (e.0, e.1) < (first.0, first.1))
            .map(|e| e.2)
            .sum();
        let count: i64 = inside.iter().map(|e| e.2).sum();
        let weighted: Vec<(&[u8], i64)> = slice.iter().map(|e| (e.1, e.2)).collect();
        let batch = weighted_rows(&self.row_codec, &self.input_schema, &weighted)?;
        let (rows_before, keys_before) = if ranged.ranks {
            count_before(view, p, &slice_lo)
        } else {
            (0, 0)
        };
        let mut columns = batch.columns().to_vec();
        for f in &self.functions {
            let mut values = f.expr.evaluate(&batch)?;
            if let Extent::Rank { dense } = f.extent {
                let offset = if dense { keys_before } else { rows_before };
                if offset > 0 {
                    values = add(
                        &cast(&values, &DataType::UInt64)?,
                        &UInt64Array::new_scalar(offset),
                    )?;
                }
            }
            columns.push(values);
        }
        let out = self.output(columns, batch.num_rows())?;
        Ok(Some(out.slice(skip as usize, count as usize)))
    }
}

/// Keys are prefix-free: nothing lies between `key` and `key ++ [0]` but
/// keys that start with `key`, and none do; the bound just past `key`'s
/// entries.
pub(super) fn past(mut key: Vec<u8>) -> Vec<u8> {
    key.push(0);
    key
}

/// The key (partition `p`, then the `ORDER BY` value) of the value in
/// `key` moved by `by`, ahead (in the order's direction) or back; `None`
/// when the value is NULL or cannot be moved (overflow, a type that does
/// not add): callers then take the partition's edge, a wider range, which
/// is never wrong.
fn moved_key(
    ranged: &Ranged,
    p: &[u8],
    key: &[u8],
    by: &ScalarValue,
    ahead: bool,
) -> Result<Option<Vec<u8>>> {
    let columns = ranged.order_codec.decode([&key[p.len()..]])?;
    let value = ScalarValue::try_from_array(&columns[0], 0)?;
    if value.is_null() {
        return Ok(None);
    }
    let moved = if ahead != ranged.descending {
        value.add_checked(by)
    } else {
        value.sub_checked(by)
    };
    let Ok(moved) = moved.and_then(|m| m.cast_to(&value.data_type())) else {
        return Ok(None);
    };
    let encoded = ranged.order_codec.encode(&[moved.to_array()?], 1)?;
    let mut moved_key = p.to_vec();
    moved_key.extend_from_slice(encoded.row(0));
    Ok(Some(moved_key))
}

/// Rows and distinct keys of partition `p` before `at`.
fn count_before(view: View<'_>, p: &[u8], at: &Pos) -> (u64, u64) {
    let (mut rows, mut keys) = (0u64, 0u64);
    let mut last: Option<&[u8]> = None;
    for (k, r, w) in view.from((p, &[])) {
        if !k.starts_with(p) || (k, r) >= (at.0.as_slice(), at.1.as_slice()) {
            break;
        }
        rows += w.max(0) as u64;
        if last != Some(k) {
            keys += 1;
            last = Some(k);
        }
    }
    (rows, keys)
}
