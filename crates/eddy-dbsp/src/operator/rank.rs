//! Top-k per partition: the rows of each partition whose `ROW_NUMBER`,
//! `RANK` or `DENSE_RANK` (over `PARTITION BY … ORDER BY …`) is at most k,
//! each with that number as a last column. SQL writes it as a filter on a
//! ranking window function (`WHERE rn <= k`, `QUALIFY rn = 1`).
//!
//! Incremental rule (non-linear): the integrated input is kept in a trace
//! whose key is the partition key followed by the `ORDER BY` key (both
//! memcomparable, so a partition's rows lie together, in rank order). A
//! change touches some partitions; for each, the operator walks only the
//! first rows of the partition, up to rank k, before and after applying the
//! change, and emits `−old + new`, consolidated. Work per touched partition
//! is O(k + log n), whatever the partition's size. A partition whose
//! changes are all insertions is not walked twice: a row past the old
//! first ones keeps a number past k (insertions only raise numbers; the
//! trace's weights are never negative), so the new first rows are among the
//! old ones and the inserted ones, sorted together (O((k + m) log(k + m))
//! for m inserted rows). Rows that tie on the
//! `ORDER BY` are numbered in the order of their bytes, as the window
//! operator numbers them. With a waterline on a partition column,
//! partitions below it are forgotten.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, UInt64Array};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};

use super::map::evaluate;
use super::waterline::{collect_keys, Collector, Waterline};
use super::{encode_keys, Groups, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{batch_with_rows, EncodedRows, RowCodec};
use crate::{Result, Trace, ZSet};

/// Which ranking function numbers the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ranking {
    /// 1, 2, 3, … whatever the ties.
    RowNumber,
    /// Ties share a number; the next number skips past them (1, 1, 3).
    Rank,
    /// Ties share a number; the next number follows (1, 1, 2).
    DenseRank,
}

/// Incremental per-partition top-k on a ranking function.
pub struct RankTopK {
    partition_exprs: Vec<Arc<dyn PhysicalExpr>>,
    order_exprs: Vec<Arc<dyn PhysicalExpr>>,
    ranking: Ranking,
    limit: u64,
    partition_codec: RowCodec,
    key_codec: RowCodec,
    row_codec: RowCodec,
    input_schema: SchemaRef,
    schema: SchemaRef,
    trace: Trace,
    /// Forgets the partitions below a waterline.
    gc: Option<Collector>,
}

impl RankTopK {
    /// Keeps the rows of each partition (rows of `input_schema` grouped by
    /// `partition_exprs`) whose `ranking` in `order` is at most `limit`;
    /// output rows have `schema`: the input columns and the number.
    pub fn new(
        input_schema: SchemaRef,
        partition_exprs: Vec<Arc<dyn PhysicalExpr>>,
        order: Vec<PhysicalSortExpr>,
        ranking: Ranking,
        limit: u64,
        schema: SchemaRef,
    ) -> Result<Self> {
        let partition_fields: Vec<(DataType, SortOptions)> = partition_exprs
            .iter()
            .map(|e| Ok((e.data_type(&input_schema)?, SortOptions::default())))
            .collect::<datafusion::error::Result<_>>()?;
        let mut key_fields = partition_fields.clone();
        for s in &order {
            key_fields.push((s.expr.data_type(&input_schema)?, s.options));
        }
        Ok(Self {
            partition_codec: RowCodec::with_options(partition_fields)?,
            key_codec: RowCodec::with_options(key_fields)?,
            row_codec: RowCodec::for_schema(&input_schema)?,
            partition_exprs,
            order_exprs: order.into_iter().map(|s| s.expr).collect(),
            ranking,
            limit,
            input_schema,
            schema,
            trace: Trace::new(),
            gc: None,
        })
    }

    /// Forgets the partitions whose partition column `column` is below
    /// `waterline`: no later change can touch them.
    pub fn with_waterline(mut self, column: usize, waterline: Waterline) -> Self {
        self.gc = Some(Collector::new(column, waterline));
        self
    }

    /// The first of `entries` (`(key, row, weight)` of one partition, in
    /// the trace's order; keys start with the partition's `prefix` bytes),
    /// each repeated by its weight, up to the last whose number is at most
    /// `limit`: `(key, row, number)`.
    fn first<'a>(
        &self,
        prefix: usize,
        entries: impl Iterator<Item = (&'a [u8], &'a [u8], i64)>,
    ) -> Vec<(&'a [u8], &'a [u8], u64)> {
        let (mut position, mut rank, mut dense) = (0u64, 0u64, 0u64);
        let mut last_key: Option<&[u8]> = None;
        let mut out = Vec::new();
        for (key, row, w) in entries {
            // The ORDER BY key is what follows the partition key.
            let order_key = &key[prefix..];
            for _ in 0..w.max(0) {
                position += 1;
                if last_key != Some(order_key) {
                    rank = position;
                    dense += 1;
                    last_key = Some(order_key);
                }
                let number = match self.ranking {
                    Ranking::RowNumber => position,
                    Ranking::Rank => rank,
                    Ranking::DenseRank => dense,
                };
                if number > self.limit {
                    return out;
                }
                out.push((key, row, number));
            }
        }
        out
    }

    /// The first rows of one partition in the trace (see [`first`](Self::first)).
    fn top(&self, partition: &[u8]) -> Vec<(&[u8], &[u8], u64)> {
        let entries = self
            .trace
            .seek(partition)
            .take_while(|(key, _, _)| key.starts_with(partition));
        self.first(partition.len(), entries)
    }

    /// The rows `top` (`(row, number)`) with their numbers, of `weight`.
    fn rows(&self, top: &[(&[u8], u64)], weight: i64) -> Result<ZSet> {
        let mut columns = self.row_codec.decode(top.iter().map(|(r, _)| *r))?;
        if self.input_schema.fields().is_empty() {
            columns.clear();
        }
        let numbers: ArrayRef = Arc::new(UInt64Array::from_iter_values(top.iter().map(|t| t.1)));
        let field = self.schema.field(self.schema.fields().len() - 1);
        columns.push(datafusion::arrow::compute::cast(
            &numbers,
            field.data_type(),
        )?);
        let batch = batch_with_rows(&self.schema, columns, top.len())?;
        Ok(ZSet::with_weight(batch, weight))
    }
}

impl Operator for RankTopK {
    fn name(&self) -> &str {
        "rank_topk"
    }

    fn partitioned(&self) -> bool {
        !self.partition_exprs.is_empty()
    }

    fn partition_keys(&self, _input: usize, change: &ZSet) -> Result<EncodedRows> {
        encode_keys(&self.partition_codec, &self.partition_exprs, change)
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.trace.save(w)?;
        Collector::save_all(w, &self.gc)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.trace.restore(r)?;
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
        let n = change.len();
        let partitions = evaluate(&self.partition_exprs, change)?;
        let mut key_columns = partitions.clone();
        key_columns.extend(evaluate(&self.order_exprs, change)?);
        let partitions = self.partition_codec.encode(&partitions, n)?;
        let keys = self.key_codec.encode(&key_columns, n)?;
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        let touched = Groups::of(&partitions, n, false);
        let weights = change.weights();

        // The partitions in key order: their seeks then read each batch
        // (and file) forward.
        let mut order: Vec<usize> = (0..touched.len()).collect();
        order.sort_unstable_by_key(|&g| touched.keys[g]);
        let mut old: Vec<(&[u8], u64)> = Vec::new();
        let mut new: Vec<(&[u8], u64)> = Vec::new();
        // The partitions with a deletion, walked again once the trace has
        // the change.
        let mut walk_after: Vec<&[u8]> = Vec::new();
        for &g in &order {
            let p = touched.keys[g];
            let before = self.top(p);
            old.extend(before.iter().map(|&(_, row, number)| (row, number)));
            let changes = touched.rows(g);
            if changes.iter().any(|&i| weights[i as usize] <= 0) {
                walk_after.push(p);
                continue;
            }
            let mut merged: Vec<(&[u8], &[u8], i64)> = before
                .iter()
                .map(|&(key, row, _)| (key, row, 1))
                .chain(changes.iter().map(|&i| {
                    let i = i as usize;
                    (keys.row(i), rows.row(i), weights[i])
                }))
                .collect();
            merged.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(b.1)));
            let after = self.first(p.len(), merged.into_iter());
            new.extend(after.iter().map(|&(_, row, number)| (row, number)));
        }
        // What the trace lends is decoded before the trace changes.
        let removed = self.rows(&old, -1)?;
        let merged = self.rows(&new, 1)?;
        for (i, &w) in weights.iter().enumerate() {
            self.trace.update(keys.row(i), rows.row(i), w);
        }
        self.trace.seal();
        let walked: Vec<(&[u8], u64)> = walk_after
            .iter()
            .flat_map(|p| self.top(p))
            .map(|(_, row, number)| (row, number))
            .collect();
        let walked = self.rows(&walked, 1)?;
        if let Some(gc) = &mut self.gc {
            collect_keys(gc, &mut self.trace, &self.key_codec, n)?;
        }
        ZSet::concat(&self.schema, &[removed, merged, walked])?.consolidate()
    }
}
