//! Top-k: the first `offset + limit` rows of a relation in a given order,
//! minus the first `offset` (SQL `ORDER BY … LIMIT … OFFSET …`).
//!
//! Incremental rule (non-linear): the integrated input is kept in a trace
//! ordered by the memcomparable encoding of the sort key (which follows each
//! key's ASC/DESC and NULLS FIRST/LAST), so the current top rows are the
//! trace's first entries. When a step changes the input, the operator walks
//! the first `offset + limit` rows of the trace and emits the difference
//! between the new and the previous result. Ties in the sort key are broken
//! by the row's own bytes, so the result is deterministic.

use std::collections::BTreeMap;

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::physical_expr::PhysicalSortExpr;

use super::map::evaluate;
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, Trace, ZSet};

/// Incremental `ORDER BY … LIMIT`.
pub struct TopK {
    sort_exprs: Vec<std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>>,
    key_codec: RowCodec,
    row_codec: RowCodec,
    schema: SchemaRef,
    offset: usize,
    limit: Option<usize>,
    trace: Trace,
    current: BTreeMap<Vec<u8>, i64>,
}

impl TopK {
    /// Keeps rows `offset .. offset + limit` of rows of `schema` ordered by `order`
    /// (`limit = None` keeps every row after the offset).
    pub fn new(
        schema: SchemaRef,
        order: Vec<PhysicalSortExpr>,
        offset: usize,
        limit: Option<usize>,
    ) -> Result<Self> {
        let fields: Vec<(DataType, SortOptions)> = order
            .iter()
            .map(|s| Ok((s.expr.data_type(&schema)?, s.options)))
            .collect::<datafusion::error::Result<_>>()?;
        Ok(Self {
            sort_exprs: order.into_iter().map(|s| s.expr).collect(),
            key_codec: RowCodec::with_options(fields)?,
            row_codec: RowCodec::for_schema(&schema)?,
            schema,
            offset,
            limit,
            trace: Trace::new(),
            current: BTreeMap::new(),
        })
    }
}

impl Operator for TopK {
    fn name(&self) -> &str {
        "topk"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.trace.save(w)?;
        w.put(&self.current)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.trace.restore(r)?;
        r.get_into(&mut self.current)
    }

    fn state_entries(&self) -> usize {
        self.trace.entries() + self.current.len()
    }

    fn state_storage_bytes(&self) -> usize {
        self.trace.storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.trace.bytes()
            + self
                .current
                .keys()
                .map(|k| k.len() + std::mem::size_of::<(Vec<u8>, i64)>())
                .sum::<usize>()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let n = change.len();
        let keys = self
            .key_codec
            .encode(&evaluate(&self.sort_exprs, change)?, n)?;
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        for (i, &w) in change.weights().iter().enumerate() {
            self.trace.update(keys.row(i), rows.row(i), w);
        }
        self.trace.seal();

        let mut next: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
        let mut position = 0usize;
        let end = self
            .limit
            .map(|l| self.offset.saturating_add(l))
            .unwrap_or(usize::MAX);
        'walk: for (_, row, w) in self.trace.iter() {
            for _ in 0..w.max(0) {
                if position >= end {
                    break 'walk;
                }
                if position >= self.offset {
                    *next.entry(row.to_vec()).or_default() += 1;
                }
                position += 1;
            }
        }

        let mut out_rows: Vec<&[u8]> = Vec::new();
        let mut weights = Vec::new();
        for (row, &w) in &next {
            let d = w - self.current.get(row).copied().unwrap_or(0);
            if d != 0 {
                out_rows.push(row);
                weights.push(d);
            }
        }
        for (row, &w) in &self.current {
            if !next.contains_key(row) {
                out_rows.push(row);
                weights.push(-w);
            }
        }
        let batch = self.row_codec.decode_batch(&self.schema, out_rows)?;
        let out = ZSet::new(batch, weights);
        self.current = next;
        Ok(out)
    }
}
