//! Circuit operators, one per module. Each module's doc comment states the
//! operator's incremental rule: how a change of its inputs becomes a change
//! of its output.

pub mod aggregate;
pub mod append_only;
pub mod asof;
pub mod constant;
pub mod delay;
pub mod differentiate;
pub mod distinct;
pub mod emit_final;
pub mod filter;
pub mod fixpoint;
pub mod input;
pub mod integrate;
pub mod join;
pub mod lateness;
pub mod linear;
pub mod map;
pub mod negate;
pub mod nested_distinct;
pub mod nested_join;
pub mod plus;
pub mod product;
pub mod rank;
pub mod sharded;
pub mod state_map;
pub mod temporal;
pub mod topk;
pub mod unnest;
pub mod upsert;
pub mod waterline;
pub mod window;

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;

use crate::checkpoint::{Route, StateReader, StateWriter};
use crate::row::{take_rows, EncodedRows, RowCodec};
use crate::{Error, Result, Trace, ZSet};

/// One node's computation: its inputs' changes of a step to its own change.
pub trait Operator: Send {
    /// A short name for plans and errors.
    fn name(&self) -> &str;

    /// Computes this step's output change from this step's input changes.
    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet>;

    /// Whether empty input changes always give an empty output change, so
    /// the scheduler may skip the call. True for every operator whose output
    /// depends only on input changes; false for sources and delays.
    fn quiet_on_empty(&self) -> bool {
        true
    }

    /// Whether the operator's state and output split by a key of each
    /// input: rows of different keys never meet, so shards that each see
    /// the rows of some keys compute together what the operator computes
    /// alone (see [`Sharded`]). False (the default) for operators that
    /// must see every row, such as an aggregate without `GROUP BY`.
    fn partitioned(&self) -> bool {
        false
    }

    /// The keys that route the rows of input `input`'s change to shards,
    /// encoded as the operator encodes them (equal keys, equal bytes).
    /// Asked only of [`partitioned`](Operator::partitioned) operators.
    fn partition_keys(&self, _input: usize, _change: &ZSet) -> Result<EncodedRows> {
        Err(Error::Circuit(format!(
            "{} is not partitioned by a key",
            self.name()
        )))
    }

    /// The whole relation the operator's state holds, when it holds one
    /// (an upsert's: its table's current rows, one per key), so that the
    /// relation can be read without a copy of its own: read when called,
    /// from a copy of the state taken now (sharing its immutable batches),
    /// so that it may be read on another thread while the operator steps
    /// on.
    fn contents(&self) -> Option<Contents> {
        None
    }

    /// How many shards the operator's state is split into (1 unless it is
    /// [`Sharded`]).
    fn shards(&self) -> usize {
        1
    }

    /// How many entries (rows, keys, groups) the operator keeps as state:
    /// an upper bound that is cheap to compute, for statistics and tests.
    fn state_entries(&self) -> usize {
        0
    }

    /// The memory the operator's state takes, in bytes: batches and
    /// buffers of its traces, keys and values of its maps (an estimate
    /// that counts contents, not allocator slack).
    fn state_bytes(&self) -> usize {
        0
    }

    /// The bytes of the operator's state in storage files (batches of its
    /// traces written to disk).
    fn state_storage_bytes(&self) -> usize {
        0
    }

    /// Writes everything the operator keeps from one step to the next to
    /// a checkpoint (nothing for an operator without state). Every
    /// operator implements it, so that none is forgotten.
    fn save(&self, w: &mut StateWriter) -> Result<()>;

    /// Reads back what [`save`](Operator::save) wrote, into an operator
    /// built the same way, which then behaves exactly as the saved one.
    fn restore(&mut self, r: &mut StateReader) -> Result<()>;

    /// Reads back the state of the same operator saved split over `saved`
    /// shards (by a [`Sharded`] of `saved` shards, or by the operator
    /// alone when `saved` is 1), when the operator is split otherwise now
    /// (a pipeline resumed with another number of workers). Asked only of
    /// [`partitioned`](Operator::partitioned) operators, whose state is
    /// all keyed by their partition key: each shard's state keeps the keys
    /// routed to it ([`StateReader::keeps`]), and the parts saved by
    /// several shards are merged ([`StateReader::merging`]). This default
    /// is for the operator alone, which keeps every key of every part.
    fn restore_resharded(&mut self, saved: usize, r: &mut StateReader) -> Result<()> {
        if saved > 1 {
            let n: usize = r.get()?;
            if n != saved {
                return Err(r.corrupt(&format!("the state of {n} shards, not {saved}")));
            }
        }
        for part in 0..saved {
            r.set_route(Some(Route {
                keep: None,
                merge: part > 0,
            }));
            let restored = self.restore(r);
            r.set_route(None);
            restored?;
        }
        Ok(())
    }
}

/// The contents of an operator's state, read when called (see
/// [`Operator::contents`]): the rows go to the sink in chunks of at most
/// [`CONTENTS_CHUNK`] rows, and the read stops early when the sink
/// returns `false` (a reader that was cancelled, or has too much). It may
/// be read more than once, from any thread.
pub type Contents = Arc<dyn Fn(&mut dyn FnMut(ZSet) -> bool) -> Result<()> + Send + Sync>;

/// The most rows of one chunk of [`Contents`].
pub const CONTENTS_CHUNK: usize = 8192;

/// Reads all of `contents` into one Z-set of `schema`.
pub fn read_contents(contents: &Contents, schema: &SchemaRef) -> Result<ZSet> {
    let mut parts = Vec::new();
    contents(&mut |z| {
        parts.push(z);
        true
    })?;
    ZSet::concat(schema, &parts)
}

/// A hash map from encoded keys (rows, groups) to an operator's values,
/// with a fast hasher seeded at random per process (SipHash, the
/// standard one, took a tenth of a grouped aggregate's time).
pub type KeyMap<V> = hashbrown::HashMap<Vec<u8>, V, foldhash::fast::RandomState>;

/// The bytes of a map from encoded keys to values: each key's bytes, the
/// entry itself and `extra` bytes its value owns.
pub(crate) fn map_bytes<V>(map: &KeyMap<V>, extra: impl Fn(&V) -> usize) -> usize {
    map.iter()
        .map(|(k, v)| k.len() + std::mem::size_of::<(Vec<u8>, V)>() + extra(v))
        .sum()
}

pub use aggregate::Aggregate;
pub use append_only::AppendOnly;
pub use asof::{AsofJoin, AsofMatch, AsofSide};
pub use constant::Constant;
pub use delay::Delay;
pub use differentiate::Differentiate;
pub use distinct::Distinct;
pub use emit_final::EmitFinal;
pub use filter::Filter;
pub use fixpoint::{Fixpoint, FixpointOutput, Iteration};
pub use integrate::Integrate;
pub use join::Join;
pub use lateness::{LateColumn, Lateness};
pub use map::Map;
pub use negate::Negate;
pub use nested_distinct::NestedDistinct;
pub use nested_join::NestedJoin;
pub use plus::Plus;
pub use product::ConstantProduct;
pub use rank::{RankTopK, Ranking};
pub use sharded::{shard_of, Sharded};
pub use temporal::{Bound, Clock, TemporalFilter};
pub use topk::TopK;
pub use unnest::{Unnest, UnnestColumn};
pub use upsert::Upsert;
pub use waterline::Waterline;
pub use window::{Extent, RangeOffset, Window};

/// The rows of a step grouped by their encoded key (an aggregate's group,
/// a top-k's partition): the keys in the order rows first touch them, and
/// each group's rows in input order. With `global`, the empty key (the one
/// group of an aggregate without `GROUP BY`) is there even without rows.
pub(crate) struct Groups<'a> {
    /// The distinct keys, in the order of their first rows.
    pub(crate) keys: Vec<&'a [u8]>,
    /// Group `g`'s rows are `rows[starts[g]..starts[g + 1]]`.
    starts: Vec<u32>,
    rows: Vec<u32>,
}

impl<'a> Groups<'a> {
    /// Groups the first `n` rows of `keys`.
    pub(crate) fn of(keys: &'a EncodedRows, n: usize, global: bool) -> Self {
        let (group_keys, group_of) = Self::index(keys, n, global);
        // A counting sort of the rows by group.
        let mut starts = vec![0u32; group_keys.len() + 1];
        for &g in &group_of {
            starts[g as usize + 1] += 1;
        }
        for g in 0..group_keys.len() {
            starts[g + 1] += starts[g];
        }
        let mut next = starts.clone();
        let mut rows = vec![0u32; n];
        for (i, &g) in group_of.iter().enumerate() {
            rows[next[g as usize] as usize] = i as u32;
            next[g as usize] += 1;
        }
        Self {
            keys: group_keys,
            starts,
            rows,
        }
    }

    /// Only the distinct keys of [`of`](Self::of), in the order of their
    /// first rows (no rows by group).
    pub(crate) fn keys_of(keys: &'a EncodedRows, n: usize, global: bool) -> Vec<&'a [u8]> {
        Self::index(keys, n, global).0
    }

    /// The distinct keys and each row's group.
    fn index(keys: &'a EncodedRows, n: usize, global: bool) -> (Vec<&'a [u8]>, Vec<u32>) {
        let mut index: hashbrown::HashMap<&[u8], u32, foldhash::fast::RandomState> =
            // Rows per group vary (q5's counts see about seven): a quarter
            // of the rows is a start that seldom grows more than twice.
            hashbrown::HashMap::with_capacity_and_hasher(n / 4, Default::default());
        let mut group_keys: Vec<&[u8]> = Vec::new();
        if global {
            index.insert(&[], 0);
            group_keys.push(&[]);
        }
        let group_of: Vec<u32> = (0..n)
            .map(|i| {
                let key = keys.row(i);
                *index.entry(key).or_insert_with(|| {
                    group_keys.push(key);
                    (group_keys.len() - 1) as u32
                })
            })
            .collect();
        (group_keys, group_of)
    }

    /// The number of groups.
    pub(crate) fn len(&self) -> usize {
        self.keys.len()
    }

    /// The rows of group `g`, in input order.
    pub(crate) fn rows(&self, g: usize) -> &[u32] {
        &self.rows[self.starts[g] as usize..self.starts[g + 1] as usize]
    }
}

/// The keys of a change's rows: `exprs` evaluated and encoded by `codec`.
pub(crate) fn encode_keys(
    codec: &RowCodec,
    exprs: &[Arc<dyn datafusion::physical_expr::PhysicalExpr>],
    change: &ZSet,
) -> Result<crate::row::EncodedRows> {
    codec.encode(&map::evaluate(exprs, change)?, change.len())
}

/// The rows a trace holds under `key`, decoded, each repeated by its
/// weight. Fails on a negative weight: the trace holds no relation then.
pub(crate) fn key_rows(
    trace: &Trace,
    codec: &RowCodec,
    schema: &SchemaRef,
    key: &[u8],
) -> Result<RecordBatch> {
    weighted_rows(codec, schema, &trace.get(key))
}

/// Rows with their weights, decoded, each repeated by its weight. Fails on
/// a negative weight: the rows are no relation then.
pub(crate) fn weighted_rows(
    codec: &RowCodec,
    schema: &SchemaRef,
    rows: &[(&[u8], i64)],
) -> Result<RecordBatch> {
    if rows.is_empty() {
        return Ok(RecordBatch::new_empty(Arc::clone(schema)));
    }
    let batch = codec.decode_batch(schema, rows.iter().map(|(r, _)| *r))?;
    let mut idx = Vec::with_capacity(rows.len());
    for (i, &(_, w)) in rows.iter().enumerate() {
        if w < 0 {
            return Err(Error::Circuit(format!(
                "a row has negative weight {w} in a relation"
            )));
        }
        idx.extend(std::iter::repeat_n(i as u32, w as usize));
    }
    if idx.len() == batch.num_rows() {
        return Ok(batch);
    }
    take_rows(&batch, &idx)
}
