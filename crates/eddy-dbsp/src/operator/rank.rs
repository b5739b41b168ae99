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
//!
//! Over an input that changes only by insertions (a table declared
//! `append_only`; see [`RankTopK::inserts_only`]), the trace keeps only each
//! partition's first rows: a row whose number passes k never comes back
//! (insertions only raise numbers), so the rows that fall past k are
//! deleted from the trace and inserted rows past k are never added. State
//! is then O(k) per partition, not the partition's size.

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
use crate::{Error, Result, Trace, ZSet};

/// A row that may be among a partition's first: `(key, row, weight, the
/// change's row, or `None` for one of the trace's)`.
type Candidate<'a> = (&'a [u8], &'a [u8], i64, Option<usize>);

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
    /// Whether the input changes only by insertions, so that the trace
    /// keeps each partition's first rows only.
    inserts_only: bool,
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
            inserts_only: false,
        })
    }

    /// Keeps only each partition's first rows (up to number k) in the
    /// trace, for an input whose changes are all insertions. A deletion is
    /// then an error: the rows it would bring back are gone.
    pub fn inserts_only(mut self) -> Self {
        self.inserts_only = true;
        self
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
        match self.inserts_only {
            true => "rank_topk_inserts",
            false => "rank_topk",
        }
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
        if self.inserts_only && weights.iter().any(|&w| w < 0) {
            return Err(Error::Circuit(
                "a top-k over insertions only was sent a deletion".into(),
            ));
        }

        // The partitions in key order: their seeks then read each batch
        // (and file) forward.
        let mut order: Vec<usize> = (0..touched.len()).collect();
        order.sort_unstable_by_key(|&g| touched.keys[g]);
        let mut old: Vec<(&[u8], u64)> = Vec::new();
        let mut new: Vec<(&[u8], u64)> = Vec::new();
        // The partitions with a deletion, walked again once the trace has
        // the change.
        let mut walk_after: Vec<&[u8]> = Vec::new();
        // With `inserts_only`: the trace's rows that fall past k (copied,
        // since the trace lends them), and the change's rows that enter the
        // first ones, with the weight that enters.
        let mut evicted: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut entered: Vec<(usize, i64)> = Vec::new();
        for &g in &order {
            let p = touched.keys[g];
            let before = self.top(p);
            old.extend(before.iter().map(|&(_, row, number)| (row, number)));
            let changes = touched.rows(g);
            if !self.inserts_only && changes.iter().any(|&i| weights[i as usize] <= 0) {
                walk_after.push(p);
                continue;
            }
            let mut merged: Vec<Candidate> = before
                .iter()
                .map(|&(key, row, _)| (key, row, 1, None))
                .collect();
            merged.extend(changes.iter().map(|&i| {
                let i = i as usize;
                (keys.row(i), rows.row(i), weights[i], Some(i))
            }));
            merged.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(b.1)));
            let after = self.first(p.len(), merged.iter().map(|&(k, r, w, _)| (k, r, w)));
            new.extend(after.iter().map(|&(_, row, number)| (row, number)));
            if self.inserts_only {
                // `after` numbers a prefix of `merged`'s units: the units of
                // each entry that lie in it stay (or enter), the rest go.
                let mut units = after.len() as i64;
                for &(key, row, w, from) in &merged {
                    let kept = units.clamp(0, w);
                    units -= w;
                    match from {
                        Some(i) if kept > 0 => entered.push((i, kept)),
                        None if kept == 0 => evicted.push((key.to_vec(), row.to_vec())),
                        _ => {}
                    }
                }
            }
        }
        // What the trace lends is decoded before the trace changes.
        let removed = self.rows(&old, -1)?;
        let merged = self.rows(&new, 1)?;
        if self.inserts_only {
            for (key, row) in &evicted {
                self.trace.update(key, row, -1);
            }
            for &(i, w) in &entered {
                self.trace.update(keys.row(i), rows.row(i), w);
            }
        } else {
            for (i, &w) in weights.iter().enumerate() {
                self.trace.update(keys.row(i), rows.row(i), w);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    /// Rows `(k, v)` for `k` in `0..partitions` and `v` in `values`.
    fn rows(schema: &SchemaRef, partitions: i64, values: std::ops::Range<i64>) -> ZSet {
        let (ks, vs): (Vec<i64>, Vec<i64>) = (0..partitions)
            .flat_map(|k| values.clone().map(move |v| (k, v)))
            .unzip();
        let batch = RecordBatch::try_new(
            Arc::clone(schema),
            vec![
                Arc::new(Int64Array::from(ks)),
                Arc::new(Int64Array::from(vs)),
            ],
        )
        .unwrap();
        ZSet::with_weight(batch, 1)
    }

    #[test]
    fn over_insertions_only_the_first_rows_are_kept() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
        ]));
        let out = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("v", DataType::Int64, true),
            Field::new("n", DataType::UInt64, true),
        ]));
        let order = vec![PhysicalSortExpr {
            expr: col("v", &schema).unwrap(),
            options: SortOptions {
                descending: true,
                nulls_first: false,
            },
        }];
        let make = || {
            RankTopK::new(
                Arc::clone(&schema),
                vec![col("k", &schema).unwrap()],
                order.clone(),
                Ranking::RowNumber,
                3,
                Arc::clone(&out),
            )
            .unwrap()
        };
        let (mut all, mut first) = (make(), make().inserts_only());
        // Ten steps of 4 partitions × 10 rising values each.
        for step in 0..10 {
            let change = rows(&schema, 4, step * 10..step * 10 + 10);
            let a = all.eval(&[&change]).unwrap();
            let f = first.eval(&[&change]).unwrap();
            let (a, f) = (a.consolidate().unwrap(), f.consolidate().unwrap());
            assert_eq!((a.batch(), a.weights()), (f.batch(), f.weights()));
        }
        assert_eq!(all.state_entries(), 400);
        // Three rows per partition, and the deletions of the rows that
        // fell past them until the trace merges them away.
        let kept: i64 = first.trace.iter().map(|(_, _, w)| w).sum();
        assert_eq!(kept, 12);
        let deletion = ZSet::with_weight(rows(&schema, 1, 95..96).batch().clone(), -1);
        let err = first.eval(&[&deletion]).unwrap_err().to_string();
        assert!(err.contains("sent a deletion"), "{err}");
    }
}
