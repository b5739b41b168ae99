//! Window functions over `OVER (PARTITION BY … ORDER BY … frame)`: each
//! input row, with one more column per window function.
//!
//! Incremental rule (non-linear): the integrated input is kept in a trace.
//! A change touches some partitions, and within a partition only the rows
//! whose window values can see it; the operator evaluates the functions
//! for those rows as the partition was before the step and as it is after,
//! and emits `−old + new`, consolidated, so rows whose values did not move
//! cancel out. Two modes:
//!
//! * **Ranges.** When every function shares one `ORDER BY` and each has a
//!   bounded [`Extent`] (a `ROWS` or `RANGE` frame, `LAG`/`LEAD`, a
//!   ranking), the trace is keyed by the partition then the `ORDER BY`
//!   key, so a partition's rows lie in order. A change at a row reaches
//!   the rows whose frames can hold it (`n FOLLOWING` reaches n rows back,
//!   `n PRECEDING` n rows ahead; a `RANGE` offset reaches values within it;
//!   a ranking, or an unbounded frame, reaches the rest of the partition).
//!   The reaches of a step's changes, before and after the step, are merged
//!   into disjoint ranges; each range is evaluated over a slice that holds
//!   its rows' frames (rankings add the count of rows before the slice).
//!   Work per change is O(log n + frame) for `LAG`, `LEAD` and bounded
//!   frames; a running frame (`UNBOUNDED PRECEDING`) reads the partition's
//!   prefix, and a ranking counts it without decoding it. A chain (session
//!   windows) reaches and reads the run of rows around its row whose
//!   consecutive values are less than a gap apart: it is found by seeks
//!   that leap a gap at a time, not by walking its rows.
//! * **Partitions.** Otherwise (functions with different `ORDER BY`s,
//!   `NTILE`, `PERCENT_RANK`, `CUME_DIST`, `GROUPS` frames, frames without
//!   an `ORDER BY`), a touched partition is evaluated whole.
//!
//! The functions are DataFusion's own physical window expressions, each
//! evaluated over rows sorted by its `ORDER BY`, exactly as DataFusion's
//! batch executor does. Rows that tie on the `ORDER BY` are ordered by
//! their own bytes, so `ROW_NUMBER` and the frames are deterministic: the
//! same input always gives the same output, whatever order its changes
//! arrived in.
//!
//! With a waterline on a partition column, partitions below it are
//! forgotten: no later change can touch them. With chains only, over an
//! ascending time that has a waterline, the chains whose times are all a
//! gap or more below it are forgotten: a later row can join only a chain
//! whose last time is less than a gap before it.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use datafusion::arrow::compute::{cast, take, SortOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::map::evaluate_one;
use super::waterline::{collect_keys, Collector, Waterline};
use super::{encode_keys, key_rows, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{batch_with_rows, take_rows, EncodedRows, RowCodec};
use crate::{Result, Trace, ZSet};

mod chain;
mod ranges;

/// Which rows a window function's value depends on, around its row in the
/// partition's order: what a change can reach, and what a value reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Extent {
    /// The whole partition (`NTILE`, `PERCENT_RANK`, `GROUPS` frames, a
    /// frame without `ORDER BY`, anything not known to be narrower).
    Partition,
    /// `ROW_NUMBER` and `RANK` (`dense: false`) or `DENSE_RANK`: the count
    /// of rows (of distinct `ORDER BY` values) before the row's peers.
    Rank {
        /// Counts distinct `ORDER BY` values rather than rows.
        dense: bool,
    },
    /// At most `preceding` rows before the row and `following` after it
    /// (`None`: unbounded): `ROWS` frames, `LAG`, `LEAD`.
    Rows {
        /// Rows before the row that the value may read.
        preceding: Option<u64>,
        /// Rows after the row that the value may read.
        following: Option<u64>,
    },
    /// A `RANGE` frame: `ORDER BY` values within the offsets of the row's.
    Range {
        /// How far before the row's value the frame starts.
        preceding: RangeOffset,
        /// How far after the row's value the frame ends.
        following: RangeOffset,
    },
    /// The row's chain: the run of rows around it, in order, in which each
    /// row's (single) `ORDER BY` value is less than `gap` from the one
    /// before it (session windows). A change reaches the chains around it
    /// before and after the step, and a value reads its own chain.
    Chain {
        /// The distance that breaks a chain, in the `ORDER BY` value's
        /// ticks (an integer, or a timestamp's count of its unit).
        gap: i64,
    },
}

/// One side of a `RANGE` frame, as a distance from the row's value.
#[derive(Debug, Clone, PartialEq)]
pub enum RangeOffset {
    /// To the partition's edge.
    Unbounded,
    /// The row's peers (`CURRENT ROW`, or a frame side that does not pass
    /// the row).
    Current,
    /// An offset added to or subtracted from the `ORDER BY` value.
    By(ScalarValue),
}

/// One window function with the codec of its `ORDER BY` values.
struct Function {
    expr: Arc<dyn WindowExpr>,
    order_codec: Option<RowCodec>,
    extent: Extent,
}

/// What the range mode needs: the shared `ORDER BY` and its codecs.
struct Ranged {
    order_exprs: Vec<Arc<dyn PhysicalExpr>>,
    partition_codec: RowCodec,
    /// The `ORDER BY` key alone (one column when a frame has an offset).
    order_codec: RowCodec,
    /// Whether the (first) `ORDER BY` column sorts descending.
    descending: bool,
    /// Whether some function is a ranking (and needs the count before).
    ranks: bool,
    /// Whether every function's extent is a chain.
    chains: bool,
    /// How chains move keys, when a function's extent is a chain.
    chain_keys: Option<chain::Keys>,
}

/// Incremental window functions sharing one `PARTITION BY`.
pub struct Window {
    partition_exprs: Vec<Arc<dyn PhysicalExpr>>,
    functions: Vec<Function>,
    input_schema: SchemaRef,
    schema: SchemaRef,
    key_codec: RowCodec,
    row_codec: RowCodec,
    out_codec: RowCodec,
    trace: Trace,
    /// Set when changes re-evaluate ranges rather than partitions.
    ranged: Option<Ranged>,
    /// Forgets the partitions below a waterline.
    gc: Option<Collector>,
    /// Forgets the closed chains below a waterline on the `ORDER BY`
    /// value, with the largest gap. Its counters are not checkpointed: a
    /// restored operator only collects a little later.
    chain_gc: Option<(Collector, i64)>,
}

impl Window {
    /// Window functions over rows of `input_schema`, partitioned by
    /// `partition_exprs`, each with its [`Extent`]; the functions must all
    /// have that partitioning (their own `partition_by` is not consulted).
    /// Output rows are the input columns followed by one column per
    /// function, of `schema`.
    pub fn new(
        input_schema: SchemaRef,
        partition_exprs: Vec<Arc<dyn PhysicalExpr>>,
        functions: Vec<(Arc<dyn WindowExpr>, Extent)>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let partition_fields: Vec<(DataType, SortOptions)> = partition_exprs
            .iter()
            .map(|e| Ok((e.data_type(&input_schema)?, SortOptions::default())))
            .collect::<datafusion::error::Result<_>>()?;
        let functions: Vec<Function> = functions
            .into_iter()
            .map(|(expr, extent)| {
                let order_codec = order_codec(&expr, &input_schema)?;
                Ok(Function {
                    expr,
                    order_codec,
                    extent,
                })
            })
            .collect::<Result<_>>()?;
        let ranged = match functions.first() {
            Some(first) if ranges_apply(&functions) => {
                let order = first.expr.order_by();
                let order_codec =
                    order_codec(&first.expr, &input_schema)?.expect("ranges need an ORDER BY");
                let descending = order[0].options.descending;
                let chain_keys = if functions
                    .iter()
                    .any(|f| matches!(f.extent, Extent::Chain { .. }))
                {
                    let data_type = order[0].expr.data_type(&input_schema)?;
                    Some(chain::Keys::new(&order_codec, &data_type, descending)?)
                } else {
                    None
                };
                Some(Ranged {
                    order_exprs: order.iter().map(|s| Arc::clone(&s.expr)).collect(),
                    partition_codec: RowCodec::with_options(partition_fields.clone())?,
                    order_codec,
                    descending,
                    chain_keys,
                    ranks: functions
                        .iter()
                        .any(|f| matches!(f.extent, Extent::Rank { .. })),
                    chains: functions
                        .iter()
                        .all(|f| matches!(f.extent, Extent::Chain { .. })),
                })
            }
            _ => None,
        };
        let mut key_fields = partition_fields;
        if let Some(first) = functions.first().filter(|_| ranged.is_some()) {
            for s in first.expr.order_by() {
                key_fields.push((s.expr.data_type(&input_schema)?, s.options));
            }
        }
        Ok(Self {
            key_codec: RowCodec::with_options(key_fields)?,
            row_codec: RowCodec::for_schema(&input_schema)?,
            out_codec: RowCodec::for_schema(&schema)?,
            partition_exprs,
            functions,
            input_schema,
            schema,
            trace: Trace::new(),
            ranged,
            gc: None,
            chain_gc: None,
        })
    }

    /// Forgets the partitions whose partition column `column` is below
    /// `waterline`: no later change can touch them.
    pub fn with_waterline(mut self, column: usize, waterline: Waterline) -> Self {
        self.gc = Some(Collector::new(column, waterline));
        self
    }

    /// With chains only (session windows) whose `ORDER BY` ascends:
    /// forgets the chains that no change at or above `waterline` (a bound
    /// on the `ORDER BY` value) can reach, those whose values are all a gap
    /// or more below it. Otherwise the operator is unchanged.
    pub fn with_chain_waterline(mut self, waterline: Waterline) -> Self {
        let gap = self
            .functions
            .iter()
            .filter_map(|f| match f.extent {
                Extent::Chain { gap } => Some(gap),
                _ => None,
            })
            .max();
        let applies = self
            .ranged
            .as_ref()
            .is_some_and(|r| r.chains && !r.descending);
        if let (Some(gap), true) = (gap, applies) {
            self.chain_gc = Some((Collector::new(0, waterline), gap));
        }
        self
    }

    /// Whether changes re-evaluate ranges of a partition (rather than the
    /// whole partition).
    pub fn evaluates_ranges(&self) -> bool {
        self.ranged.is_some()
    }

    /// Output rows from input columns and one column per function, each
    /// cast to its output type.
    fn output(&self, columns: Vec<ArrayRef>, num_rows: usize) -> Result<RecordBatch> {
        let columns = columns
            .into_iter()
            .zip(self.schema.fields())
            .map(|(c, field)| {
                if c.data_type() == field.data_type() {
                    Ok(c)
                } else {
                    Ok(cast(&c, field.data_type())?)
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        batch_with_rows(&self.schema, columns, num_rows)
    }

    /// The output rows of one partition as the trace holds it now.
    fn partition_output(&self, key: &[u8]) -> Result<RecordBatch> {
        let rows = key_rows(&self.trace, &self.row_codec, &self.input_schema, key)?;
        if rows.num_rows() == 0 {
            return Ok(RecordBatch::new_empty(Arc::clone(&self.schema)));
        }
        let mut columns = rows.columns().to_vec();
        for f in &self.functions {
            columns.push(evaluate_sorted(f, &rows)?);
        }
        self.output(columns, rows.num_rows())
    }

    /// A step in partition mode: every touched partition, whole.
    fn eval_partitions(&mut self, change: &ZSet) -> Result<Vec<ZSet>> {
        let n = change.len();
        let keys = encode_keys(&self.key_codec, &self.partition_exprs, change)?;
        let touched: BTreeSet<&[u8]> = (0..n).map(|i| keys.row(i)).collect();
        let mut parts = Vec::with_capacity(2 * touched.len());
        for key in &touched {
            let old = self.partition_output(key)?;
            if old.num_rows() > 0 {
                parts.push(ZSet::with_weight(old, -1));
            }
        }
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        for (i, &w) in change.weights().iter().enumerate() {
            self.trace.update(keys.row(i), rows.row(i), w);
        }
        self.trace.seal();
        for key in &touched {
            let new = self.partition_output(key)?;
            if new.num_rows() > 0 {
                parts.push(ZSet::with_weight(new, 1));
            }
        }
        Ok(parts)
    }
}

/// Whether every function shares one non-empty `ORDER BY` and has an
/// extent narrower than the partition (offsets of `RANGE` frames need a
/// single `ORDER BY` column).
fn ranges_apply(functions: &[Function]) -> bool {
    let Some(first) = functions.first() else {
        return false;
    };
    let order = first.expr.order_by();
    !order.is_empty()
        && functions.iter().all(|f| {
            f.expr.order_by() == order
                && match &f.extent {
                    Extent::Partition => false,
                    Extent::Range {
                        preceding,
                        following,
                    } => {
                        order.len() == 1
                            || !matches!(preceding, RangeOffset::By(_))
                                && !matches!(following, RangeOffset::By(_))
                    }
                    Extent::Chain { .. } => order.len() == 1,
                    _ => true,
                }
        })
}

/// The codec of a function's `ORDER BY` values, if it has one.
fn order_codec(expr: &Arc<dyn WindowExpr>, input_schema: &SchemaRef) -> Result<Option<RowCodec>> {
    let order = expr.order_by();
    if order.is_empty() {
        return Ok(None);
    }
    let fields: Vec<(DataType, SortOptions)> = order
        .iter()
        .map(|s| Ok((s.expr.data_type(input_schema)?, s.options)))
        .collect::<datafusion::error::Result<_>>()?;
    Ok(Some(RowCodec::with_options(fields)?))
}

/// One function's values for the rows of one partition, in the rows' order:
/// the rows are sorted by the function's `ORDER BY` (ties keep the rows'
/// order, which is the trace's byte order), evaluated, and put back.
fn evaluate_sorted(f: &Function, rows: &RecordBatch) -> Result<ArrayRef> {
    let n = rows.num_rows();
    let Some(codec) = &f.order_codec else {
        return Ok(f.expr.evaluate(rows)?);
    };
    let order_values: Vec<ArrayRef> = f
        .expr
        .order_by()
        .iter()
        .map(|s| evaluate_one(&s.expr, rows))
        .collect::<Result<_>>()?;
    let keys = codec.encode(&order_values, n)?;
    let mut order: Vec<u32> = (0..n as u32).collect();
    order.sort_by(|&a, &b| keys.row(a as usize).cmp(keys.row(b as usize)));
    let sorted = take_rows(rows, &order)?;
    let values = f.expr.evaluate(&sorted)?;
    let mut back = vec![0u32; n];
    for (position, &row) in order.iter().enumerate() {
        back[row as usize] = position as u32;
    }
    Ok(take(&values, &UInt32Array::from(back), None)?)
}

impl Operator for Window {
    fn name(&self) -> &str {
        "window"
    }

    fn partitioned(&self) -> bool {
        !self.partition_exprs.is_empty()
    }

    fn partition_keys(&self, _input: usize, change: &ZSet) -> Result<EncodedRows> {
        let codec = match &self.ranged {
            Some(ranged) => &ranged.partition_codec,
            None => &self.key_codec,
        };
        encode_keys(codec, &self.partition_exprs, change)
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.trace.save(w)?;
        Collector::save_all(w, &self.gc)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        match &self.ranged {
            // Keys are of partition and order; rows are routed by partition.
            Some(ranged) => {
                let (key_codec, partition_codec) = (&self.key_codec, &ranged.partition_codec);
                let route = |k: &[u8]| key_codec.prefix_of(k, partition_codec);
                self.trace.restore_routed(r, Some(&route))?;
            }
            None => self.trace.restore(r)?,
        }
        Collector::restore_all(r, &mut self.gc)
    }

    fn state_entries(&self) -> usize {
        self.trace.entries()
    }

    fn state_storage_bytes(&self) -> usize {
        self.trace.storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.trace.bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let parts = if self.ranged.is_some() {
            self.eval_ranges(change)?
        } else {
            self.eval_partitions(change)?
        };
        if let Some(gc) = &mut self.gc {
            collect_keys(gc, &mut self.trace, &self.key_codec, change.len())?;
        }
        if let (Some((gc, gap)), Some(ranged)) = (&mut self.chain_gc, &self.ranged) {
            if let Some(bound) = gc.due(change.len()) {
                if let Some(dead) = chain::closed_chains(ranged, &self.trace, *gap, &bound)? {
                    self.trace.retain_entries(&dead);
                }
                gc.collected(self.trace.entries());
            }
        }
        ZSet::concat(&self.schema, &parts)?.consolidate_with(&self.out_codec)
    }
}
