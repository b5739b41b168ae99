//! The product of a stream with a constant relation: every row of the
//! stream paired with every row of the constant, as in a cross join with a
//! `VALUES` list (which is how `HOP` puts a row in each of its windows).
//!
//! Incremental rule: `Δ(S × C) = ΔS × (C + ΔC) + S × ΔC`. The constant
//! changes only before any row of the stream has arrived (a constant
//! relation emits its rows in the first step), so `S × ΔC` is always
//! empty and the stream is never kept: the operator's only state is the
//! constant itself. A constant that changes after the stream has had rows
//! would need the stream's history, and is an error, never a wrong answer.
//!
//! Each row of the stream's change is copied once per constant row, so
//! equal rows are first made one (their weights summed): a `HOP` over a
//! table whose time is needed only to pick its windows reads the time's
//! pane, and a step's many bids of one auction and pane become one row
//! before they are copied into five windows. When a step's change has
//! few equal rows the operator stops looking for them for a while.

use datafusion::arrow::datatypes::SchemaRef;

use super::{Groups, Operator};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Error, Result, ZSet};

/// Steps to skip consolidating after one where it did not pay.
const SKIP_AFTER_MISS: u32 = 16;

/// Pairs each row of one input with every row of a constant other input.
pub struct ConstantProduct {
    schema: SchemaRef,
    /// Which input (0 or 1) is the constant.
    constant: usize,
    /// The constant's rows so far.
    rows: ZSet,
    /// Whether the stream has had a row (the constant may no longer change).
    started: bool,
    /// Encodes the stream's rows to find equal ones (made at its first
    /// change; `None` inside when its columns cannot be encoded).
    stream_codec: Option<Option<RowCodec>>,
    /// Steps left before the stream's change is consolidated again.
    skip: u32,
}

impl ConstantProduct {
    /// The product of inputs 0 and 1, whose output rows are input 0's
    /// columns then input 1's (`schema`); input `constant` is the constant.
    pub fn new(schema: SchemaRef, constant: usize, constant_schema: &SchemaRef) -> Result<Self> {
        if constant > 1 {
            return Err(Error::Circuit(format!(
                "a product has inputs 0 and 1, not {constant}"
            )));
        }
        Ok(Self {
            schema,
            constant,
            rows: ZSet::empty(constant_schema),
            started: false,
            stream_codec: None,
            skip: 0,
        })
    }

    /// The stream's change with equal rows made one, when that pays: at
    /// least an eighth fewer rows. `None` leaves the change as it is.
    fn consolidated(&mut self, stream: &ZSet) -> Result<Option<ZSet>> {
        if self.rows.len() < 2 || stream.len() < 2 {
            return Ok(None);
        }
        if self.skip > 0 {
            self.skip -= 1;
            return Ok(None);
        }
        let codec = self
            .stream_codec
            .get_or_insert_with(|| RowCodec::for_schema(&stream.schema()).ok());
        let Some(codec) = codec else {
            return Ok(None);
        };
        let encoded = codec.encode(stream.batch().columns(), stream.len())?;
        let groups = Groups::of(&encoded, stream.len(), false);
        if groups.len() * 8 > stream.len() * 7 {
            self.skip = SKIP_AFTER_MISS;
            return Ok(None);
        }
        let mut keep = Vec::with_capacity(groups.len());
        let mut weights = Vec::with_capacity(groups.len());
        for g in 0..groups.len() {
            let rows = groups.rows(g);
            let w: i64 = rows.iter().map(|&i| stream.weights()[i as usize]).sum();
            if w != 0 {
                keep.push(rows[0]);
                weights.push(w);
            }
        }
        let (batch, _) = stream.take(&keep)?.into_parts();
        Ok(Some(ZSet::new(batch, weights)))
    }
}

impl Operator for ConstantProduct {
    fn name(&self) -> &str {
        "product"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.rows)?;
        w.put(&self.started)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        r.get_into(&mut self.rows)?;
        r.get_into(&mut self.started)
    }

    fn state_entries(&self) -> usize {
        self.rows.len()
    }

    fn state_bytes(&self) -> usize {
        self.rows.batch().get_array_memory_size() + self.rows.len() * 8
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let (constant, stream) = (inputs[self.constant], inputs[1 - self.constant]);
        if !constant.is_empty() {
            if self.started {
                return Err(Error::Circuit(
                    "the constant side of a product changed after rows of the other side arrived"
                        .into(),
                ));
            }
            let schema = self.rows.schema();
            self.rows =
                ZSet::concat(&schema, &[self.rows.clone(), constant.clone()])?.consolidate()?;
        }
        if stream.is_empty() || self.rows.is_empty() {
            self.started |= !stream.is_empty();
            return Ok(ZSet::empty(&self.schema));
        }
        self.started = true;
        let consolidated = self.consolidated(stream)?;
        let stream = consolidated.as_ref().unwrap_or(stream);
        // Stream row i with constant row j, i major.
        let (n, m) = (stream.len(), self.rows.len());
        let mut si = Vec::with_capacity(n * m);
        let mut ci = Vec::with_capacity(n * m);
        let mut weights = Vec::with_capacity(n * m);
        for (i, &ws) in stream.weights().iter().enumerate() {
            for (j, &wc) in self.rows.weights().iter().enumerate() {
                si.push(i as u32);
                ci.push(j as u32);
                weights.push(ws * wc);
            }
        }
        let s = stream.take(&si)?.into_parts().0;
        let c = self.rows.take(&ci)?.into_parts().0;
        let (first, second) = match self.constant {
            0 => (c, s),
            _ => (s, c),
        };
        let columns = first
            .columns()
            .iter()
            .chain(second.columns())
            .cloned()
            .collect();
        ZSet::from_columns(&self.schema, columns, weights)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::arrow::record_batch::RecordBatch;

    use super::*;

    fn one(name: &str) -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new(name, DataType::Int64, true)]))
    }

    /// Two integer columns.
    fn two(first: &str, second: &str) -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new(first, DataType::Int64, true),
            Field::new(second, DataType::Int64, true),
        ]))
    }

    fn zset(schema: &SchemaRef, values: &[i64], weights: Vec<i64>) -> ZSet {
        let col = Arc::new(Int64Array::from(values.to_vec()));
        ZSet::new(
            RecordBatch::try_new(Arc::clone(schema), vec![col]).unwrap(),
            weights,
        )
    }

    fn rows(z: &ZSet) -> Vec<(i64, i64, i64)> {
        let col = |i: usize| {
            z.batch()
                .column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .clone()
        };
        let (a, b) = (col(0), col(1));
        let mut out: Vec<_> = (0..z.len())
            .map(|i| (a.value(i), b.value(i), z.weights()[i]))
            .collect();
        out.sort();
        out
    }

    #[test]
    fn pairs_each_change_with_the_constant_and_keeps_no_stream() {
        let (s, c) = (one("s"), one("c"));
        let both = two("s", "c");
        let mut p = ConstantProduct::new(Arc::clone(&both), 1, &c).unwrap();
        // The constant and the first rows arrive together.
        let out = p
            .eval(&[&zset(&s, &[1], vec![1]), &zset(&c, &[0, 1], vec![1, 2])])
            .unwrap();
        assert_eq!(rows(&out), vec![(1, 0, 1), (1, 1, 2)]);
        // A deletion pairs with the constant too.
        let out = p
            .eval(&[&zset(&s, &[1, 5], vec![-1, 3]), &ZSet::empty(&c)])
            .unwrap();
        assert_eq!(
            rows(&out),
            vec![(1, 0, -1), (1, 1, -2), (5, 0, 3), (5, 1, 6)]
        );
        assert_eq!(p.state_entries(), 2);
        // The constant may not change once the stream has rows.
        assert!(p
            .eval(&[&ZSet::empty(&s), &zset(&c, &[2], vec![1])])
            .is_err());
    }

    #[test]
    fn equal_rows_of_a_change_are_paired_once() {
        let (s, c) = (one("s"), one("c"));
        let both = two("s", "c");
        let mut p = ConstantProduct::new(both, 1, &c).unwrap();
        p.eval(&[&ZSet::empty(&s), &zset(&c, &[0, 1], vec![1, 1])])
            .unwrap();
        // Ten rows of 4, one of 5 inserted and deleted, two of 6.
        let mut values = vec![4; 10];
        values.extend([5, 5, 6, 6]);
        let mut weights = vec![1; 10];
        weights.extend([1, -1, 1, 2]);
        let out = p
            .eval(&[&zset(&s, &values, weights), &ZSet::empty(&c)])
            .unwrap();
        assert_eq!(
            rows(&out),
            vec![(4, 0, 10), (4, 1, 10), (6, 0, 3), (6, 1, 3)]
        );
        // Distinct rows (consolidating them saves nothing) are paired as
        // they are, and still right.
        let out = p
            .eval(&[&zset(&s, &[1, 2, 3], vec![1, 1, -1]), &ZSet::empty(&c)])
            .unwrap();
        assert_eq!(out.len(), 6);
        assert_eq!(
            rows(&out),
            vec![
                (1, 0, 1),
                (1, 1, 1),
                (2, 0, 1),
                (2, 1, 1),
                (3, 0, -1),
                (3, 1, -1)
            ]
        );
    }

    #[test]
    fn the_constant_may_come_first() {
        let (s, c) = (one("s"), one("c"));
        let both = two("c", "s");
        let mut p = ConstantProduct::new(both, 0, &c).unwrap();
        // The constant alone, then the stream.
        let out = p
            .eval(&[&zset(&c, &[7], vec![1]), &ZSet::empty(&s)])
            .unwrap();
        assert!(out.is_empty());
        let out = p
            .eval(&[&ZSet::empty(&c), &zset(&s, &[3], vec![1])])
            .unwrap();
        assert_eq!(rows(&out), vec![(7, 3, 1)]);
    }
}
