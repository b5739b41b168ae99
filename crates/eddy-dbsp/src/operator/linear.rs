//! Aggregates maintained without the group's rows: `COUNT`, `SUM`/`AVG`
//! over integers from running sums, and `MIN`/`MAX` from ordered values.
//!
//! Incremental rule: `COUNT`, `SUM` and `AVG` are linear in the input
//! Z-set. Per group the state is `(rows, [(non-NULL count, sum)])`; a change
//! row of weight `w` adds `w` to the counts and `w·x` to the sums, so a step
//! costs O(changed rows) whatever the size of the group, and the group's
//! rows are not stored at all. Floating-point and decimal sums are left to
//! the general path, so that results never depend on the order of updates.
//!
//! `MIN`, `MAX` and `COUNT(DISTINCT …)` are not linear, but their state
//! is: per call, a trace of `(group, value) ↦ multiplicity` of the
//! non-NULL argument values, the value encoded so that byte order is SQL
//! order. A step consolidates its change per `(group, value)` and adds it;
//! the group's minimum is the first value under its key and the maximum the
//! last, found by one seek, so deleting the current maximum finds the next
//! one without a scan; the number of distinct values per group is kept
//! beside, moved when a value's multiplicity leaves or reaches zero. A step
//! costs O(changed rows · log n), not the group's size.
//!
//! Over any other input, each group's best value as the trace gives it is
//! remembered until a change adds or removes a value that is not worse
//! than it (the trace is then read once after the step): over random
//! values a new best is rare, so most steps read no trace.
//!
//! Over an input that changes only by insertions (see
//! [`Aggregate::inserts_only`](super::Aggregate::inserts_only)), `MIN` and
//! `MAX` keep only each group's best value, in a hash map: an inserted value
//! replaces it when it is better, and a value that is not the best can never
//! become it. A step costs one lookup per changed row, and the state is one
//! value per group. Floating-point
//! arguments are left to the general path (the encoding tells `-0.0` from
//! `0.0` and orders NaN above infinity, which DataFusion need not).
//!
//! `FILTER (WHERE …)` is applied to the arguments: a row the filter does
//! not keep counts as a NULL argument of that call (`COUNT(*) FILTER`
//! counts the rows kept).

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, Float64Array, Int64Array};
use datafusion::arrow::compute::kernels::boolean::not;
use datafusion::arrow::compute::{cast, nullif, prep_null_mask_filter};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::CastExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::aggregate::AggregateCall;
use super::state_map::{StateMap, StateValue};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{EncodedRows, RowCodec};
use crate::{Error, Result, Trace};

/// What a linear aggregate computes from its running sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Count,
    Sum,
    Avg,
    Min,
    Max,
    CountDistinct,
}

/// One aggregate call kept without the group's rows.
pub struct LinearCall {
    kind: Kind,
    arg: Arc<dyn PhysicalExpr>,
    filter: Option<Arc<dyn PhysicalExpr>>,
    /// `MIN`/`MAX`/`COUNT(DISTINCT)`: the ordered non-NULL values of every
    /// group.
    values: Option<OrderedValues>,
    /// `AVG`: the integer type of the average under Feldera's rules (the
    /// argument's, the quotient truncated toward zero); `None` for a
    /// DOUBLE average.
    integer_avg: Option<DataType>,
}

/// `(group, value) ↦ multiplicity`, the value memcomparable, and the
/// number of values of positive multiplicity per group; or, for `MIN`/`MAX`
/// over insertions only, each group's best value (`best`).
struct OrderedValues {
    codec: RowCodec,
    data_type: DataType,
    trace: Trace,
    distinct: StateMap<i64>,
    best: Option<StateMap<Vec<u8>>>,
    /// `MIN`/`MAX` over any change: the best value of the groups whose
    /// best is known, as the trace gives it. A change keeps a group's
    /// entry only when every value it adds or removes is worse than it
    /// (the trace would still give that value); otherwise the entry goes
    /// and the group's next step reads the trace. Not saved: a restored
    /// map starts empty.
    known: Option<StateMap<Vec<u8>>>,
}

/// Whether `MIN`/`MAX` over this type can be read from the memcomparable
/// order (every type but floating point, whose order differs at `-0.0`
/// and NaN, and nested or dictionary types).
fn ordered_as_encoded(t: &DataType) -> bool {
    t.is_integer()
        || matches!(
            t,
            DataType::Boolean
                | DataType::Utf8
                | DataType::LargeUtf8
                | DataType::Utf8View
                | DataType::Decimal128(..)
                | DataType::Decimal256(..)
                | DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(..)
        )
}

/// The running sums of one group.
#[derive(Debug, Clone, Default)]
pub struct GroupSums {
    /// Total weight of the group's rows.
    pub rows: i64,
    sums: Vec<(i64, i128)>,
}

impl StateValue for GroupSums {
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.rows.to_le_bytes());
        for (count, sum) in &self.sums {
            out.extend_from_slice(&count.to_le_bytes());
            out.extend_from_slice(&sum.to_le_bytes());
        }
    }

    fn decode(bytes: &[u8]) -> Result<Self> {
        let bad = || Error::Storage(format!("stored sums have {} bytes", bytes.len()));
        let (rows, rest) = bytes.split_first_chunk::<8>().ok_or_else(bad)?;
        if rest.len() % 24 != 0 {
            return Err(bad());
        }
        let sums = rest
            .chunks_exact(24)
            .map(|c| {
                let (count, sum) = c.split_at(8);
                (
                    i64::from_le_bytes(count.try_into().expect("8 bytes")),
                    i128::from_le_bytes(sum.try_into().expect("16 bytes")),
                )
            })
            .collect();
        Ok(Self {
            rows: i64::from_le_bytes(*rows),
            sums,
        })
    }

    fn heap_bytes(&self) -> usize {
        super::state_map::allocation(self.sums.capacity() * std::mem::size_of::<(i64, i128)>())
    }
}

/// Returns the linear form of every call, or `None` if any call needs the
/// general path (DISTINCT, FILTER, ORDER BY, another function, or a
/// non-integer SUM/AVG). With `inserts_only` (the input changes only by
/// insertions), `MIN` and `MAX` keep each group's best value only.
pub fn linear_calls(
    calls: &[AggregateCall],
    input: &SchemaRef,
    inserts_only: bool,
) -> Option<Vec<LinearCall>> {
    // Whether some call keeps ordered values (MIN, MAX, COUNT(DISTINCT)).
    let ordered = calls.iter().any(|c| {
        let name = c.function.fun().name();
        (!inserts_only && (name == "min" || name == "max"))
            || (name == "count" && c.function.is_distinct())
    });
    calls
        .iter()
        .map(|c| {
            let f = &c.function;
            if !c.order_by.is_empty() {
                return None;
            }
            let args = f.expressions();
            let [arg] = args.as_slice() else { return None };
            let mut arg = Arc::clone(arg);
            let kind = match (f.fun().name(), f.is_distinct()) {
                ("count", false) => Kind::Count,
                ("count", true) => Kind::CountDistinct,
                ("sum", false) => Kind::Sum,
                ("avg", false) => Kind::Avg,
                ("min", _) => Kind::Min,
                ("max", _) => Kind::Max,
                _ => return None,
            };
            // Not beside ordered values: with those, keeping the rows and
            // recomputing each touched group was measured faster on groups
            // of a few rows (Nexmark q17: 585k against 440k events/s), so
            // such an average stays on the general path.
            if kind == Kind::Avg && ordered {
                return None;
            }
            // Under PostgreSQL's rules the planner averages integers as
            // DOUBLE (`AVG(CAST(v AS DOUBLE))`): their exact sum, divided
            // as a DOUBLE, is the same average (closer to exact past 2^53).
            // Under Feldera's the argument is the integer itself and the
            // average is of its type.
            if kind == Kind::Avg {
                let integer = arg
                    .downcast_ref::<CastExpr>()
                    .filter(|c| c.cast_type() == &DataType::Float64)
                    .map(|c| Arc::clone(c.expr()))
                    .filter(|e| e.data_type(input).is_ok_and(|t| t.is_integer()));
                if let Some(e) = integer {
                    arg = e;
                }
            }
            let data_type = arg.data_type(input).ok()?;
            let integer_avg = (kind == Kind::Avg)
                .then(|| c.function.field().data_type().clone())
                .filter(DataType::is_integer);
            let values = match kind {
                Kind::Count => None,
                // Summed as Int64: BIGINT UNSIGNED takes the general path.
                Kind::Sum | Kind::Avg
                    if data_type.is_integer() && data_type != DataType::UInt64 =>
                {
                    None
                }
                Kind::Min | Kind::Max | Kind::CountDistinct if ordered_as_encoded(&data_type) => {
                    Some(OrderedValues {
                        codec: RowCodec::new(std::slice::from_ref(&data_type)).ok()?,
                        data_type,
                        trace: Trace::new(),
                        distinct: StateMap::new(),
                        best: (inserts_only && kind != Kind::CountDistinct).then(StateMap::new),
                        known: (!inserts_only && kind != Kind::CountDistinct).then(StateMap::new),
                    })
                }
                _ => return None,
            };
            Some(LinearCall {
                kind,
                arg,
                filter: c.filter.clone(),
                values,
                integer_avg,
            })
        })
        .collect()
}

/// The arguments of every call over a change batch, as Int64 where
/// summed, NULL where the call's filter does not keep the row.
pub fn arguments(
    calls: &[LinearCall],
    batch: &datafusion::arrow::array::RecordBatch,
) -> Result<Vec<ArrayRef>> {
    calls
        .iter()
        .map(|c| {
            let mut a = super::map::evaluate_one(&c.arg, batch)?;
            if let Some(filter) = &c.filter {
                let mask = super::map::evaluate_one(filter, batch)?;
                let mask = mask
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .ok_or_else(|| Error::Circuit("aggregate FILTER is not boolean".into()))?;
                // NULL is not kept; a row not kept gets a NULL argument.
                let kept = if mask.null_count() > 0 {
                    prep_null_mask_filter(mask)
                } else {
                    mask.clone()
                };
                let dropped = not(&kept)?;
                a = nullif(&a, &dropped)?;
            }
            Ok(match c.kind {
                Kind::Count | Kind::Min | Kind::Max | Kind::CountDistinct => a,
                Kind::Sum | Kind::Avg => cast(&a, &DataType::Int64)?,
            })
        })
        .collect()
}

/// Adds a change's non-NULL arguments of every `MIN`/`MAX`/`COUNT(DISTINCT)`
/// call to its ordered values, under each row's group key, consolidated
/// per `(group, value)` first; counts the values that appear or vanish.
pub fn add_values(
    calls: &mut [LinearCall],
    keys: &EncodedRows,
    args: &[ArrayRef],
    weights: &[i64],
) -> Result<()> {
    for (call, arg) in calls.iter_mut().zip(args) {
        let Some(v) = &mut call.values else { continue };
        let rows = v.codec.encode(std::slice::from_ref(arg), arg.len())?;
        if let Some(best) = &mut v.best {
            let min = call.kind == Kind::Min;
            for (i, &w) in weights.iter().enumerate() {
                if w < 0 {
                    return Err(Error::Circuit(
                        "a MIN or MAX over insertions only was sent a deletion".into(),
                    ));
                }
                if w == 0 || !arg.is_valid(i) {
                    continue;
                }
                let (key, value) = (keys.row(i), rows.row(i));
                let better = match best.get(key)? {
                    None => true,
                    Some(old) => {
                        (min && value < old.as_slice()) || (!min && value > old.as_slice())
                    }
                };
                if better {
                    // Inserted anew, so that the map counts the value's bytes.
                    best.insert(key, value.to_vec())?;
                }
            }
            best.end_step();
            continue;
        }
        let mut change: Vec<(&[u8], &[u8], i64)> = weights
            .iter()
            .enumerate()
            .filter(|(i, _)| arg.is_valid(*i))
            .map(|(i, &w)| (keys.row(i), rows.row(i), w))
            .collect();
        if call.kind == Kind::CountDistinct {
            // Consolidated per (group, value), then every lookup before any
            // update: the trace is sealed, so a lookup reads sorted
            // batches only. (MIN and MAX need neither: the trace's seal
            // consolidates.)
            change.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
            change.dedup_by(|next, kept| {
                let same = (next.0, next.1) == (kept.0, kept.1);
                if same {
                    kept.2 += next.2;
                }
                same
            });
            change.retain(|c| c.2 != 0);
            for &(key, value, w) in &change {
                let before = match v.trace.seek_entry(key, value).next() {
                    Some((k, r, m)) if k == key && r == value => m,
                    _ => 0,
                };
                let step = i64::from(before + w > 0) - i64::from(before > 0);
                if step != 0 {
                    let n = v.distinct.get_or_default(key)?;
                    *n += step;
                    if *n == 0 {
                        v.distinct.remove(key)?;
                    }
                }
            }
        }
        if let Some(known) = &mut v.known {
            let min = call.kind == Kind::Min;
            for &(key, value, w) in &change {
                if w == 0 {
                    continue;
                }
                let worse = match known.get(key)? {
                    None => continue,
                    Some(best) if min => value > best.as_slice(),
                    Some(best) => value < best.as_slice(),
                };
                if !worse {
                    known.remove(key)?;
                }
            }
        }
        for &(key, value, w) in &change {
            v.trace.update(key, value, w);
        }
        v.trace.seal();
        v.distinct.end_step();
        if let Some(known) = &mut v.known {
            // The groups this step touched whose best is not known: read
            // once from the trace (the step's output asks for it next).
            // A group left without values is read once too, not once per
            // row.
            let mut empty: HashSet<&[u8]> = HashSet::new();
            for &(key, _, _) in &change {
                if empty.contains(key) || known.get(key)?.is_some() {
                    continue;
                }
                match best_in_trace(&v.trace, call.kind, key) {
                    Some(best) => {
                        known.insert(key, best.to_vec())?;
                    }
                    None => {
                        empty.insert(key);
                    }
                }
            }
            known.end_step();
        }
    }
    Ok(())
}

/// A group's `MIN` (its first value) or `MAX` (its last) in `trace`, if it
/// has one.
fn best_in_trace<'a>(trace: &'a Trace, kind: Kind, key: &[u8]) -> Option<&'a [u8]> {
    let entry = if kind == Kind::Min {
        trace.seek(key).next()
    } else {
        // Every entry of `key` sorts before the key's successor.
        let successor = [key, &[0]].concat();
        trace.seek_back(&successor, &[]).next()
    };
    entry
        .filter(|(k, _, _)| *k == key)
        .map(|(_, value, _)| value)
}

/// Keeps the ordered values of the groups whose key passes `keep`.
pub fn retain_values(calls: &mut [LinearCall], keep: impl Fn(&[u8]) -> bool) {
    for call in calls {
        if let Some(v) = &mut call.values {
            v.trace.retain_keys(&keep);
            v.distinct.retain(&keep);
            if let Some(best) = &mut v.best {
                best.retain(&keep);
            }
            if let Some(known) = &mut v.known {
                known.retain(&keep);
            }
        }
    }
}

/// Writes the ordered values of every call to a checkpoint.
pub fn save_values(calls: &[LinearCall], w: &mut StateWriter) -> Result<()> {
    calls
        .iter()
        .filter_map(|c| c.values.as_ref())
        .try_for_each(|v| {
            v.trace.save(w)?;
            v.distinct.save(w)?;
            v.best.as_ref().map_or(Ok(()), |b| b.save(w))
        })
}

/// Reads back what [`save_values`] wrote.
pub fn restore_values(calls: &mut [LinearCall], r: &mut StateReader) -> Result<()> {
    calls
        .iter_mut()
        .filter_map(|c| c.values.as_mut())
        .try_for_each(|v| {
            v.trace.restore(r)?;
            v.distinct.restore(r)?;
            // Not saved: read from the restored trace when next needed.
            if let Some(known) = &mut v.known {
                known.retain(|_| false);
            }
            v.best.as_mut().map_or(Ok(()), |b| b.restore(r))
        })
}

/// Entries, bytes in memory and bytes in files of the ordered values.
pub fn values_size(calls: &[LinearCall]) -> (usize, usize, usize) {
    calls
        .iter()
        .filter_map(|c| c.values.as_ref())
        .fold((0, 0, 0), |(e, b, s), v| {
            let maps = [v.best.as_ref(), v.known.as_ref()];
            let sum = |f: fn(&StateMap<Vec<u8>>) -> usize| {
                maps.iter().flatten().map(|m| f(m)).sum::<usize>()
            };
            (
                e + v.trace.entries() + v.distinct.len() + sum(StateMap::len),
                b + v.trace.bytes() + v.distinct.bytes() + sum(StateMap::bytes),
                s + v.trace.storage_bytes()
                    + v.distinct.storage_bytes()
                    + sum(StateMap::storage_bytes),
            )
        })
}

impl GroupSums {
    /// The sums of a group with no rows yet, for `calls`.
    pub fn for_calls(calls: &[LinearCall]) -> Self {
        Self {
            rows: 0,
            sums: vec![(0, 0); calls.len()],
        }
    }

    /// Adds row `i` of the arguments with weight `w`.
    pub fn add(&mut self, calls: &[LinearCall], args: &[ArrayRef], i: usize, w: i64) {
        if self.sums.is_empty() {
            self.sums = vec![(0, 0); calls.len()];
        }
        self.rows += w;
        for (j, call) in calls.iter().enumerate() {
            let a = &args[j];
            if a.is_null(i) {
                continue;
            }
            self.sums[j].0 += w;
            if matches!(call.kind, Kind::Sum | Kind::Avg) {
                let v = a
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("cast to Int64")
                    .value(i);
                self.sums[j].1 += i128::from(v) * i128::from(w);
            }
        }
    }

    /// The value of call `j` for the group of this `key`.
    pub fn value(&self, calls: &[LinearCall], j: usize, key: &[u8]) -> Result<Value> {
        let (count, sum) = self.sums.get(j).copied().unwrap_or((0, 0));
        Ok(match calls[j].kind {
            Kind::Count => Value::Int(Some(count)),
            Kind::Sum if count == 0 => Value::Int(None),
            // A sum past BIGINT fails, never wraps around.
            Kind::Sum => Value::Int(Some(i64::try_from(sum).map_err(|_| {
                Error::DataFusion(datafusion::error::DataFusionError::Execution(format!(
                    "SUM of {sum} causes overflow for type BIGINT"
                )))
            })?)),
            Kind::Avg if calls[j].integer_avg.is_some() => Value::Int(
                // The average of values of an integer type is of that type:
                // i128 division truncates toward zero, as Feldera does.
                (count != 0).then(|| (sum / i128::from(count)) as i64),
            ),
            Kind::Avg if count == 0 => Value::Float(None),
            Kind::Avg => Value::Float(Some(sum as f64 / count as f64)),
            Kind::CountDistinct => {
                let v = calls[j]
                    .values
                    .as_ref()
                    .expect("COUNT(DISTINCT) keeps values");
                Value::Int(Some(v.distinct.peek(key)?.unwrap_or(0)))
            }
            kind @ (Kind::Min | Kind::Max) => {
                let v = calls[j].values.as_ref().expect("MIN/MAX keep values");
                let null = || ScalarValue::try_from(&v.data_type);
                let decode = |value: &[u8]| -> Result<ScalarValue> {
                    Ok(ScalarValue::try_from_array(
                        &v.codec.decode([value])?[0],
                        0,
                    )?)
                };
                let scalar = if count == 0 {
                    null()?
                } else if let Some(best) = &v.best {
                    match best.peek(key)? {
                        Some(value) => decode(&value)?,
                        None => null()?,
                    }
                } else {
                    let known = match &v.known {
                        Some(known) => known.peek(key)?,
                        None => None,
                    };
                    match known
                        .as_deref()
                        .or_else(|| best_in_trace(&v.trace, kind, key))
                    {
                        Some(value) => decode(value)?,
                        None => null()?,
                    }
                };
                Value::Other(Box::new(scalar))
            }
        })
    }

    /// Appends the value of every call for the group of `key` to `out`.
    pub fn push_values(
        &self,
        calls: &[LinearCall],
        key: &[u8],
        out: &mut Vec<Value>,
    ) -> Result<()> {
        for j in 0..calls.len() {
            out.push(self.value(calls, j, key)?);
        }
        Ok(())
    }
}

/// The value of a linear call: a plain integer or float where the call's
/// kind fixes the type (`COUNT`, integer `SUM`, `AVG`), so that a step
/// builds its output columns without a `ScalarValue` per value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `COUNT`, `SUM`, `COUNT(DISTINCT)`, and `AVG` of an integer type
    /// under Feldera's rules: an Int64 (NULL: `None`).
    Int(Option<i64>),
    /// `AVG` as a DOUBLE: a Float64 (NULL: `None`).
    Float(Option<f64>),
    /// `MIN`/`MAX`: a value of the argument's type (boxed, so that the
    /// other kinds' values stay small).
    Other(Box<ScalarValue>),
}

/// The column of call `call`'s values, `values` (one per output row,
/// every one of the kind the call computes).
pub fn value_column<'a>(
    call: &LinearCall,
    values: impl ExactSizeIterator<Item = &'a Value>,
) -> Result<ArrayRef> {
    let mismatch = || Error::Circuit("a linear aggregate's value of another kind".into());
    Ok(match call.kind {
        Kind::Count | Kind::Sum | Kind::CountDistinct => Arc::new(
            values
                .map(|v| match v {
                    Value::Int(i) => Ok(*i),
                    _ => Err(mismatch()),
                })
                .collect::<Result<Int64Array>>()?,
        ),
        Kind::Avg => match &call.integer_avg {
            Some(t) => {
                let ints = values
                    .map(|v| match v {
                        Value::Int(i) => Ok(*i),
                        _ => Err(mismatch()),
                    })
                    .collect::<Result<Int64Array>>()?;
                // An average lies within its values' range: the cast
                // cannot fail.
                cast(&ints, t)?
            }
            None => Arc::new(
                values
                    .map(|v| match v {
                        Value::Float(f) => Ok(*f),
                        _ => Err(mismatch()),
                    })
                    .collect::<Result<Float64Array>>()?,
            ),
        },
        Kind::Min | Kind::Max => {
            let data_type = &call.values.as_ref().expect("MIN/MAX keep values").data_type;
            if values.len() == 0 {
                return Ok(datafusion::arrow::array::new_empty_array(data_type));
            }
            let scalars = values
                .map(|v| match v {
                    Value::Other(s) => Ok(s.as_ref().clone()),
                    _ => Err(mismatch()),
                })
                .collect::<Result<Vec<_>>>()?;
            ScalarValue::iter_to_array(scalars)?
        }
    })
}

impl LinearCall {
    /// Whether the call keeps ordered values (`MIN`, `MAX`,
    /// `COUNT(DISTINCT)`), which a step changes after the sums.
    pub fn keeps_values(&self) -> bool {
        self.values.is_some()
    }
}
