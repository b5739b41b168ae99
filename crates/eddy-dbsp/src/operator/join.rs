//! Inner equi-join of two streams on key expressions.
//!
//! Incremental rule (bilinear): with `A`, `B` the integrated inputs before
//! the step, `Δ(A ⋈ B) = ΔA ⋈ B + (A + ΔA) ⋈ ΔB`. Both sides keep a trace
//! indexed by the join key, so a change only looks up the keys it carries.
//! Output rows are the left columns followed by the right columns, with the
//! product of the weights. Rows whose key has a NULL never match unless the
//! join treats NULLs as equal (as `INTERSECT` and `IS NOT DISTINCT FROM` do).
//! A join without keys is a cross product. Non-equi conditions are a filter
//! after the join. With a waterline on a key column of one side, the other
//! side's trace forgets the keys below it (no later row can match them).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::map::evaluate;
use super::waterline::{collect_keys, collect_rows, Collector, Waterline};
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{EncodedRows, RowCodec};
use crate::{Result, Trace, ZSet};

/// One input side of a join.
pub struct JoinSide {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    pub(crate) rows: RowCodec,
    trace: Trace,
}

impl JoinSide {
    /// A side whose rows have `schema`, joined on `keys`.
    pub fn new(schema: &SchemaRef, keys: Vec<Arc<dyn PhysicalExpr>>) -> Result<Self> {
        Ok(Self {
            keys,
            rows: RowCodec::for_schema(schema)?,
            trace: Trace::new(),
        })
    }
}

/// Incremental inner join.
pub struct Join {
    pub(crate) left: JoinSide,
    pub(crate) right: JoinSide,
    key_codec: RowCodec,
    nulls_equal: bool,
    pub(crate) schema: SchemaRef,
    /// Forget left and right trace keys below a waterline.
    gc: [Option<Collector>; 2],
    /// Forget left and right trace rows below waterlines.
    row_gc: [Vec<Collector>; 2],
}

/// A change encoded for lookups: key bytes, row bytes, and which rows can match.
pub(crate) struct Encoded {
    pub(crate) keys: EncodedRows,
    pub(crate) rows: EncodedRows,
    pub(crate) matchable: Vec<bool>,
}

impl Join {
    /// A join of `left` and `right` producing rows of `schema` (left columns,
    /// then right columns). `key_types` are the common types of the keys.
    pub fn new(
        left: JoinSide,
        right: JoinSide,
        key_types: &[datafusion::arrow::datatypes::DataType],
        nulls_equal: bool,
        schema: SchemaRef,
    ) -> Result<Self> {
        Ok(Self {
            left,
            right,
            key_codec: RowCodec::new(key_types)?,
            nulls_equal,
            schema,
            gc: [None, None],
            row_gc: [Vec::new(), Vec::new()],
        })
    }

    /// Forgets the left trace's keys whose key column `left.0` is below
    /// `left.1` (a bound on the right side's changes, so no later right row
    /// can match them), and the right trace's likewise.
    pub fn with_waterlines(
        mut self,
        left: Option<(usize, Waterline)>,
        right: Option<(usize, Waterline)>,
    ) -> Self {
        self.gc = [
            left.map(|(c, w)| Collector::new(c, w)),
            right.map(|(c, w)| Collector::new(c, w)),
        ];
        self
    }

    /// Forgets, on each side, the rows whose column is below a waterline
    /// (a band condition such as `b.ts BETWEEN a.ts AND a.expires` bounds
    /// which rows of one side later rows of the other can still match):
    /// `left` lists `(left column, bound)`, `right` likewise.
    pub fn with_row_waterlines(
        mut self,
        left: Vec<(usize, Waterline)>,
        right: Vec<(usize, Waterline)>,
    ) -> Self {
        let collectors =
            |v: Vec<(usize, Waterline)>| v.into_iter().map(|(c, w)| Collector::new(c, w)).collect();
        self.row_gc = [collectors(left), collectors(right)];
        self
    }

    fn collect(&mut self, updates: [usize; 2]) -> Result<()> {
        let sides = [&mut self.left, &mut self.right];
        for ((side, (gc, rows)), n) in sides
            .into_iter()
            .zip(self.gc.iter_mut().zip(self.row_gc.iter_mut()))
            .zip(updates)
        {
            if let Some(gc) = gc {
                collect_keys(gc, &mut side.trace, &self.key_codec, n)?;
            }
            for gc in rows {
                collect_rows(gc, &mut side.trace, &side.rows, n)?;
            }
        }
        Ok(())
    }

    pub(crate) fn encode(&self, side: &JoinSide, change: &ZSet) -> Result<Encoded> {
        let n = change.len();
        let key_cols = evaluate(&side.keys, change)?;
        let mut matchable = vec![true; n];
        if !self.nulls_equal {
            for col in &key_cols {
                if col.null_count() > 0 {
                    for (i, m) in matchable.iter_mut().enumerate() {
                        *m &= col.is_valid(i);
                    }
                }
            }
        }
        Ok(Encoded {
            keys: self.key_codec.encode(&key_cols, n)?,
            rows: side.rows.encode(change.batch().columns(), n)?,
            matchable,
        })
    }

    /// Builds output rows from pairs (left part, right part).
    pub(crate) fn assemble(
        &self,
        left: Vec<ArrayRef>,
        right: Vec<ArrayRef>,
        weights: Vec<i64>,
    ) -> Result<ZSet> {
        let columns = left.into_iter().chain(right).collect();
        ZSet::from_columns(&self.schema, columns, weights)
    }
}

fn update(side: &mut JoinSide, enc: &Encoded, weights: &[i64]) {
    for (i, &w) in weights.iter().enumerate() {
        if enc.matchable[i] {
            side.trace.update(enc.keys.row(i), enc.rows.row(i), w);
        }
    }
}

impl Operator for Join {
    fn name(&self) -> &str {
        "join"
    }

    fn partitioned(&self) -> bool {
        !self.left.keys.is_empty()
    }

    fn partition_keys(&self, input: usize, change: &ZSet) -> Result<EncodedRows> {
        let side = if input == 0 { &self.left } else { &self.right };
        let keys = evaluate(&side.keys, change)?;
        self.key_codec.encode(&keys, change.len())
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.left.trace.save(w)?;
        self.right.trace.save(w)?;
        Collector::save_all(
            w,
            self.gc.iter().flatten().chain(self.row_gc.iter().flatten()),
        )
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.left.trace.restore(r)?;
        self.right.trace.restore(r)?;
        let [a, b] = &mut self.gc;
        let [c, d] = &mut self.row_gc;
        Collector::restore_all(
            r,
            a.iter_mut()
                .chain(b)
                .chain(c.iter_mut())
                .chain(d.iter_mut()),
        )
    }

    fn state_entries(&self) -> usize {
        self.left.trace.entries() + self.right.trace.entries()
    }

    fn state_storage_bytes(&self) -> usize {
        self.left.trace.storage_bytes() + self.right.trace.storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.left.trace.bytes() + self.right.trace.bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let (da, db) = (inputs[0], inputs[1]);
        let mut parts = Vec::with_capacity(2);

        // ΔA ⋈ B (B before this step).
        if !da.is_empty() {
            let enc = self.encode(&self.left, da)?;
            if !self.right.trace.is_empty() {
                let (mut idx, mut rows, mut weights) = (Vec::new(), Vec::new(), Vec::new());
                for (i, &w) in da.weights().iter().enumerate() {
                    if !enc.matchable[i] {
                        continue;
                    }
                    for (b, wb) in self.right.trace.get(enc.keys.row(i)) {
                        idx.push(i as u32);
                        rows.push(b);
                        weights.push(w * wb);
                    }
                }
                if !weights.is_empty() {
                    let left = da.take(&idx)?.into_parts().0.columns().to_vec();
                    let right = self.right.rows.decode(rows)?;
                    parts.push(self.assemble(left, right, weights)?);
                }
            }
            update(&mut self.left, &enc, da.weights());
        }
        // Sealed whether or not it changed: a seal also drops what the
        // last step's lookups copied out of batch files.
        self.left.trace.seal();

        // (A + ΔA) ⋈ ΔB.
        if !db.is_empty() {
            let enc = self.encode(&self.right, db)?;
            if !self.left.trace.is_empty() {
                let (mut idx, mut rows, mut weights) = (Vec::new(), Vec::new(), Vec::new());
                for (i, &w) in db.weights().iter().enumerate() {
                    if !enc.matchable[i] {
                        continue;
                    }
                    for (a, wa) in self.left.trace.get(enc.keys.row(i)) {
                        idx.push(i as u32);
                        rows.push(a);
                        weights.push(wa * w);
                    }
                }
                if !weights.is_empty() {
                    let left = self.left.rows.decode(rows)?;
                    let right = db.take(&idx)?.into_parts().0.columns().to_vec();
                    parts.push(self.assemble(left, right, weights)?);
                }
            }
            update(&mut self.right, &enc, db.weights());
        }
        self.right.trace.seal();
        self.collect([da.len(), db.len()])?;
        ZSet::concat(&self.schema, &parts)
    }
}
