//! Final rows only: a view that emits each row once, when it can no
//! longer change (`WITH ('emit_final' = 'column')`).
//!
//! Incremental rule: the input's changes wait, indexed by the column's
//! value; after each step, the waiting changes whose column is below the
//! column's [waterline](super::waterline) are consolidated and emitted, and
//! forgotten. Since no later change has a value below the waterline, what
//! is emitted is final: a sink sees a window's row once, never retracted.
//! A row whose column is NULL is never final and waits.

use datafusion::arrow::array::new_null_array;
use datafusion::arrow::datatypes::SchemaRef;

use super::waterline::Waterline;
use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, Trace, ZSet};

/// Holds changes back until their column is below a waterline.
pub struct EmitFinal {
    schema: SchemaRef,
    column: usize,
    waterline: Waterline,
    key_codec: RowCodec,
    row_codec: RowCodec,
    /// The encoding of a NULL in the column.
    null_key: Vec<u8>,
    /// Waiting changes: column value ↦ row.
    waiting: Trace,
}

impl EmitFinal {
    /// Emits rows of `schema` once `column` is below `waterline`.
    pub fn new(schema: &SchemaRef, column: usize, waterline: Waterline) -> Result<Self> {
        let data_type = schema.field(column).data_type().clone();
        let key_codec = RowCodec::new(std::slice::from_ref(&data_type))?;
        let null_key = key_codec
            .encode(&[new_null_array(&data_type, 1)], 1)?
            .row(0)
            .to_vec();
        Ok(Self {
            schema: schema.clone(),
            column,
            waterline,
            key_codec,
            row_codec: RowCodec::for_schema(schema)?,
            null_key,
            waiting: Trace::new(),
        })
    }
}

impl Operator for EmitFinal {
    fn name(&self) -> &str {
        "emit final"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.waiting.save(w)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.waiting.restore(r)
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        if !change.is_empty() {
            let batch = change.batch();
            let keys = self
                .key_codec
                .encode(&[batch.column(self.column).clone()], change.len())?;
            let rows = self.row_codec.encode(batch.columns(), change.len())?;
            for (i, &w) in change.weights().iter().enumerate() {
                self.waiting.update(keys.row(i), rows.row(i), w);
            }
            self.waiting.seal();
        }
        let Some(bound) = (self.waterline)() else {
            return Ok(ZSet::empty(&self.schema));
        };
        let data_type = self.schema.field(self.column).data_type();
        let bound = bound.cast_to(data_type)?.to_array()?;
        let bound = self.key_codec.encode(&[bound], 1)?.row(0).to_vec();
        let mut ready: Vec<(Vec<u8>, Vec<u8>, i64)> = Vec::new();
        for (k, r, w) in self.waiting.iter() {
            if k >= bound.as_slice() {
                break;
            }
            if k != self.null_key.as_slice() {
                ready.push((k.to_vec(), r.to_vec(), w));
            }
        }
        if ready.is_empty() {
            return Ok(ZSet::empty(&self.schema));
        }
        for (k, r, w) in &ready {
            self.waiting.update(k, r, -w);
        }
        self.waiting.seal();
        let batch = self
            .row_codec
            .decode_batch(&self.schema, ready.iter().map(|(_, r, _)| r.as_slice()))?;
        Ok(ZSet::new(
            batch,
            ready.into_iter().map(|(_, _, w)| w).collect(),
        ))
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }

    fn state_entries(&self) -> usize {
        self.waiting.entries()
    }

    fn state_storage_bytes(&self) -> usize {
        self.waiting.storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.waiting.bytes()
    }
}
