//! Inner equi-join of two streams on key expressions.
//!
//! Incremental rule (bilinear): with `A`, `B` the integrated inputs before
//! the step, `Δ(A ⋈ B) = ΔA ⋈ B + (A + ΔA) ⋈ ΔB`. Both sides keep a trace
//! indexed by the join key, so a change only looks up the keys it carries.
//! Output rows are the left columns followed by the right columns, with the
//! product of the weights. Rows whose key has a NULL never match unless the
//! join treats NULLs as equal (as `INTERSECT` and `IS NOT DISTINCT FROM` do).
//! A join without keys is a cross product. Non-equi conditions are a filter
//! after the join.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::physical_expr::PhysicalExpr;

use super::map::evaluate;
use super::Operator;
use crate::row::{EncodedRows, RowCodec};
use crate::{Result, Trace, ZSet};

/// One input side of a join.
pub struct JoinSide {
    keys: Vec<Arc<dyn PhysicalExpr>>,
    rows: RowCodec,
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
    left: JoinSide,
    right: JoinSide,
    key_codec: RowCodec,
    nulls_equal: bool,
    schema: SchemaRef,
}

/// A change encoded for lookups: key bytes, row bytes, and which rows can match.
struct Encoded {
    keys: EncodedRows,
    rows: EncodedRows,
    matchable: Vec<bool>,
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
        })
    }

    fn encode(&self, side: &JoinSide, change: &ZSet) -> Result<Encoded> {
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
    fn assemble(
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
            self.left.trace.seal();
        }

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
        ZSet::concat(&self.schema, &parts)
    }
}
