//! Temporal filter: the rows whose time lies within bounds that move with
//! the clock (`WHERE ts >= NOW() - INTERVAL '7' DAY AND ts <= NOW()`).
//!
//! Incremental rule: the clock only moves forward, so a row whose time has
//! fallen below the lower bound never comes back: it is deleted from the
//! output and forgotten, and the operator keeps no state below the bound.
//! A row above the upper bound waits until the clock reaches it, then is
//! inserted. Each step: rows that the clock moved past are deleted, waiting
//! rows it reached are inserted, and the step's input changes are placed
//! by the same rule. Rows are kept ordered by time, so a step costs the
//! rows that enter or leave, plus the input. A NULL time is never inside.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, TimestampNanosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::physical_expr::PhysicalExpr;

use super::map::evaluate_one;
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, ZSet};

/// The circuit's clock: the time a step started, in nanoseconds since the
/// epoch, shared by the pipeline (which sets it) and its temporal filters.
#[derive(Debug, Clone, Default)]
pub struct Clock(Arc<AtomicI64>);

impl Clock {
    /// A clock at 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock to `nanos`, never back.
    pub fn advance(&self, nanos: i64) {
        self.0.fetch_max(nanos, Ordering::Relaxed);
    }

    /// The current time, in nanoseconds since the epoch.
    pub fn now(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// The schema of the one-row batch bounds are evaluated over: `now`.
    pub fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new(
            "now",
            DataType::Timestamp(TimeUnit::Nanosecond, None),
            false,
        )]))
    }
}

/// A bound of a temporal filter: an expression of `now` (over
/// [`Clock::schema`]) and whether the bound itself is inside.
pub struct Bound {
    /// The bound's value, from `now`.
    pub value: Arc<dyn PhysicalExpr>,
    /// Whether a time equal to the bound is inside.
    pub inclusive: bool,
}

/// Incremental temporal filter.
pub struct TemporalFilter {
    time: Arc<dyn PhysicalExpr>,
    time_type: DataType,
    lower: Option<Bound>,
    upper: Option<Bound>,
    clock: Clock,
    time_codec: RowCodec,
    row_codec: RowCodec,
    schema: SchemaRef,
    /// Rows inside the bounds, by (time, row).
    inside: BTreeMap<(Vec<u8>, Vec<u8>), i64>,
    /// Rows above the upper bound, waiting for the clock.
    waiting: BTreeMap<(Vec<u8>, Vec<u8>), i64>,
}

impl TemporalFilter {
    /// Keeps the rows of `schema` whose `time` lies within `lower` and
    /// `upper` at the time of `clock`.
    pub fn new(
        schema: SchemaRef,
        time: Arc<dyn PhysicalExpr>,
        lower: Option<Bound>,
        upper: Option<Bound>,
        clock: Clock,
    ) -> Result<Self> {
        let time_type = time.data_type(&schema)?;
        Ok(Self {
            time_codec: RowCodec::new(std::slice::from_ref(&time_type))?,
            row_codec: RowCodec::for_schema(&schema)?,
            time,
            time_type,
            lower,
            upper,
            clock,
            schema,
            inside: BTreeMap::new(),
            waiting: BTreeMap::new(),
        })
    }

    /// A bound's value now, encoded like the times.
    fn bound(&self, bound: &Option<Bound>) -> Result<Option<(Vec<u8>, bool)>> {
        let Some(b) = bound else { return Ok(None) };
        let now: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![self.clock.now()]));
        let batch = RecordBatch::try_new(Clock::schema(), vec![now])?;
        let value = cast(&evaluate_one(&b.value, &batch)?, &self.time_type)?;
        let bytes = self.time_codec.encode(&[value], 1)?;
        Ok(Some((bytes.row(0).to_vec(), b.inclusive)))
    }

    fn rows(&self, rows: Vec<(Vec<u8>, i64)>) -> Result<ZSet> {
        let batch = self
            .row_codec
            .decode_batch(&self.schema, rows.iter().map(|(r, _)| r.as_slice()))?;
        Ok(ZSet::new(batch, rows.into_iter().map(|(_, w)| w).collect()))
    }
}

/// Whether `time` is below a lower bound (gone for good).
fn below(time: &[u8], lower: &Option<(Vec<u8>, bool)>) -> bool {
    match lower {
        Some((b, true)) => time < b.as_slice(),
        Some((b, false)) => time <= b.as_slice(),
        None => false,
    }
}

/// Whether `time` is above an upper bound (not yet inside).
fn above(time: &[u8], upper: &Option<(Vec<u8>, bool)>) -> bool {
    match upper {
        Some((b, true)) => time > b.as_slice(),
        Some((b, false)) => time >= b.as_slice(),
        None => false,
    }
}

fn add(map: &mut BTreeMap<(Vec<u8>, Vec<u8>), i64>, key: (Vec<u8>, Vec<u8>), w: i64) {
    let entry = map.entry(key.clone()).or_default();
    *entry += w;
    if *entry == 0 {
        map.remove(&key);
    }
}

impl Operator for TemporalFilter {
    fn name(&self) -> &str {
        "temporal_filter"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.inside)?;
        w.put(&self.waiting)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        r.get_into(&mut self.inside)?;
        r.get_into(&mut self.waiting)
    }

    fn state_entries(&self) -> usize {
        self.inside.len() + self.waiting.len()
    }

    fn state_bytes(&self) -> usize {
        self.inside
            .keys()
            .chain(self.waiting.keys())
            .map(|(a, b)| a.len() + b.len() + std::mem::size_of::<((Vec<u8>, Vec<u8>), i64)>())
            .sum()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let lower = self.bound(&self.lower)?;
        let upper = self.bound(&self.upper)?;
        let mut out: Vec<(Vec<u8>, i64)> = Vec::new();
        // Rows the clock moved past: delete and forget.
        while let Some(((t, _), _)) = self.inside.first_key_value() {
            if !below(t, &lower) {
                break;
            }
            let ((_, row), w) = self.inside.pop_first().expect("first");
            out.push((row, -w));
        }
        while let Some(((t, _), _)) = self.waiting.first_key_value() {
            if !below(t, &lower) && above(t, &upper) {
                break;
            }
            let ((t, row), w) = self.waiting.pop_first().expect("first");
            if !below(&t, &lower) {
                out.push((row.clone(), w));
                add(&mut self.inside, (t, row), w);
            }
        }
        // This step's changes.
        let change = inputs[0];
        let n = change.len();
        if n > 0 {
            let times = evaluate_one(&self.time, change.batch())?;
            let times = cast(&times, &self.time_type)?;
            let encoded = self.time_codec.encode(std::slice::from_ref(&times), n)?;
            let rows = self.row_codec.encode(change.batch().columns(), n)?;
            for (i, &w) in change.weights().iter().enumerate() {
                if times.is_null(i) {
                    continue;
                }
                let t = encoded.row(i);
                if below(t, &lower) {
                    continue;
                }
                let key = (t.to_vec(), rows.row(i).to_vec());
                if above(t, &upper) {
                    add(&mut self.waiting, key, w);
                } else {
                    out.push((key.1.clone(), w));
                    add(&mut self.inside, key, w);
                }
            }
        }
        self.rows(out)?.consolidate_with(&self.row_codec)
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}
