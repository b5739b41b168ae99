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
//!
//! The same holds over an input whose deletions each come with a better
//! ranked insertion: a running count per group ranked by that count
//! (`RANK() OVER (PARTITION BY w ORDER BY COUNT(*) DESC)` over the counts
//! of an append-only table, as in Nexmark's q5; see
//! [`RankTopK::rising`]). A group's count only grows, so its change is its
//! old row's deletion and its new row's insertion, ranked before it in the
//! same partition: the rows above a row past k never become fewer, and it
//! stays past k. The trace keeps each partition's first rows; a deletion
//! removes its row from them if it is there, and is forgotten if not (the
//! row was past k). The operator checks, per partition and change, that
//! every deleted unit has an inserted unit ranked before it (matched in
//! order), and fails the step rather than answer wrongly when not.

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

/// A row of a partition's first rows or of the change, with what the
/// trace holds of it (`stored` units) and its weight after the change.
struct Entry<'a> {
    key: &'a [u8],
    row: &'a [u8],
    stored: i64,
    weight: i64,
    /// The change's row, if it is one.
    change: Option<usize>,
}

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
    /// What the input's changes are known to be, and so what the trace
    /// keeps.
    input: Input,
}

/// What a top-k's input changes are known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// Anything: the trace keeps every row.
    Any,
    /// Insertions only: the trace keeps each partition's first rows.
    Inserts,
    /// Deletions each with a better ranked insertion (see
    /// [`RankTopK::rising`]): the trace keeps each partition's first rows.
    Rising,
}

impl Input {
    /// Whether the trace keeps only each partition's first rows.
    fn first_only(self) -> bool {
        self != Input::Any
    }
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
            input: Input::Any,
        })
    }

    /// Keeps only each partition's first rows (up to number k) in the
    /// trace, for an input whose changes are all insertions. A deletion is
    /// then an error: the rows it would bring back are gone.
    pub fn inserts_only(mut self) -> Self {
        self.input = Input::Inserts;
        self
    }

    /// Keeps only each partition's first rows in the trace, for an input
    /// whose every deleted row comes, in the same change, with an inserted
    /// row of the same partition ranked before it (a row's running count
    /// that only grows, ranked by that count, highest first). A change
    /// that breaks this is an error: the rows it would bring back are gone.
    pub fn rising(mut self) -> Self {
        self.input = Input::Rising;
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

    /// The candidates for a partition's first rows when the trace keeps
    /// only those: its first rows (`before`, one per unit) and the
    /// change's rows `changes`, in the trace's order, equal rows made one.
    /// With `rising`, checks that each deleted unit of the change has an
    /// inserted unit before it.
    fn candidates<'a>(
        &self,
        before: &[(&'a [u8], &'a [u8], u64)],
        changes: &[u32],
        keys: &'a EncodedRows,
        rows: &'a EncodedRows,
        weights: &[i64],
    ) -> Result<Vec<Entry<'a>>> {
        let mut merged: Vec<Candidate<'a>> = before
            .iter()
            .map(|&(key, row, _)| (key, row, 1, None))
            .collect();
        merged.extend(changes.iter().map(|&i| {
            let i = i as usize;
            (keys.row(i), rows.row(i), weights[i], Some(i))
        }));
        merged.sort_unstable_by(|a, b| a.0.cmp(b.0).then_with(|| a.1.cmp(b.1)));
        let mut entries: Vec<Entry> = Vec::with_capacity(merged.len());
        for (key, row, w, from) in merged {
            let stored = if from.is_none() { w } else { 0 };
            match entries.last_mut() {
                Some(e) if e.key == key && e.row == row => {
                    e.stored += stored;
                    e.weight += w;
                    e.change = e.change.or(from);
                }
                _ => entries.push(Entry {
                    key,
                    row,
                    stored,
                    weight: w,
                    change: from,
                }),
            }
        }
        if self.input == Input::Rising {
            // Inserted units not yet matched with a deleted one after them.
            let mut spare = 0i64;
            for e in &entries {
                let change = e.weight - e.stored;
                spare += change;
                if change < 0 && spare < 0 {
                    return Err(Error::Circuit(
                        "a top-k over rising rows was sent a deletion without a better ranked insertion".into(),
                    ));
                }
            }
        }
        Ok(entries)
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
        match self.input {
            Input::Rising => "rank_topk_rising",
            Input::Inserts => "rank_topk_inserts",
            Input::Any => "rank_topk",
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
        // Keys are of partition and order; rows are routed by partition.
        let (key_codec, partition_codec) = (&self.key_codec, &self.partition_codec);
        let route = |k: &[u8]| key_codec.prefix_of(k, partition_codec);
        self.trace.restore_routed(r, Some(&route))?;
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
        if self.input == Input::Inserts && weights.iter().any(|&w| w < 0) {
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
        // When the trace keeps first rows only: the trace's rows that fall past k or are
        // deleted (copied, since the trace lends them), and the change's
        // rows that enter the first ones or leave them, with the weight
        // that the trace gains.
        let mut trace_updates: Vec<(Vec<u8>, Vec<u8>, i64)> = Vec::new();
        let mut change_updates: Vec<(usize, i64)> = Vec::new();
        for &g in &order {
            let p = touched.keys[g];
            let before = self.top(p);
            old.extend(before.iter().map(|&(_, row, number)| (row, number)));
            let changes = touched.rows(g);
            if !self.input.first_only() && changes.iter().any(|&i| weights[i as usize] <= 0) {
                walk_after.push(p);
                continue;
            }
            let entries = self.candidates(&before, changes, &keys, &rows, weights)?;
            let after = self.first(p.len(), entries.iter().map(|e| (e.key, e.row, e.weight)));
            new.extend(after.iter().map(|&(_, row, number)| (row, number)));
            if self.input.first_only() {
                // `after` numbers a prefix of the entries' units: the units
                // of each entry that lie in it stay (or enter), the rest go.
                let mut units = after.len() as i64;
                for e in &entries {
                    let kept = units.clamp(0, e.weight.max(0));
                    units -= e.weight.max(0);
                    match e.change {
                        Some(i) if kept != e.stored => change_updates.push((i, kept - e.stored)),
                        None if kept != e.stored => {
                            trace_updates.push((e.key.to_vec(), e.row.to_vec(), kept - e.stored))
                        }
                        _ => {}
                    }
                }
            }
        }
        // What the trace lends is decoded before the trace changes.
        let removed = self.rows(&old, -1)?;
        let merged = self.rows(&new, 1)?;
        if self.input.first_only() {
            for (key, row, w) in &trace_updates {
                self.trace.update(key, row, *w);
            }
            for &(i, w) in &change_updates {
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

    /// Rows `(k, v)`, and a top-k of `ranking` ≤ `limit` per `k` by `v`
    /// descending.
    fn top_k(ranking: Ranking, limit: u64) -> (SchemaRef, RankTopK) {
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
        let top = RankTopK::new(
            Arc::clone(&schema),
            vec![col("k", &schema).unwrap()],
            order,
            ranking,
            limit,
            out,
        )
        .unwrap();
        (schema, top)
    }

    #[test]
    fn over_insertions_only_the_first_rows_are_kept() {
        let (schema, mut all) = top_k(Ranking::RowNumber, 3);
        let mut first = top_k(Ranking::RowNumber, 3).1.inserts_only();
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

    #[test]
    fn over_rising_rows_a_deletion_needs_a_better_insertion() {
        let (schema, top) = top_k(Ranking::Rank, 1);
        let mut top = top.rising();
        top.eval(&[&rows(&schema, 1, 0..5)]).unwrap();
        // 4 rises to 6: the first row changes, and the trace keeps it only.
        let rise = ZSet::concat(
            &schema,
            &[
                ZSet::with_weight(rows(&schema, 1, 4..5).batch().clone(), -1),
                rows(&schema, 1, 6..7),
            ],
        )
        .unwrap();
        let out = top.eval(&[&rise]).unwrap().consolidate().unwrap();
        assert_eq!(out.weights(), &[-1, 1]);
        assert_eq!(top.trace.iter().map(|(_, _, w)| w).sum::<i64>(), 1);
        // A fall (6 to 5) is refused: 5 would need the rows past the first.
        let fall = ZSet::concat(
            &schema,
            &[
                ZSet::with_weight(rows(&schema, 1, 6..7).batch().clone(), -1),
                rows(&schema, 1, 5..6),
            ],
        )
        .unwrap();
        let err = top.eval(&[&fall]).unwrap_err().to_string();
        assert!(err.contains("without a better ranked insertion"), "{err}");
    }
}
