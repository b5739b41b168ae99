//! Upsert: a table with a primary key.
//!
//! Input rows are commands in arrival order: a positive weight inserts the
//! row, replacing any row with the same key; a negative weight deletes the
//! row with that key (the other columns are ignored). The output is the
//! change of the table's contents.
//!
//! Incremental rule (non-linear): the current row of every key is kept; a
//! command on key `k` emits `−old(k)` (if there was one) and `+new(k)` (for
//! an insert). Work is proportional to the number of commands.

use std::collections::HashMap;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, ZSet};

/// Keeps one row per primary key.
pub struct Upsert {
    key_columns: Vec<usize>,
    key_codec: RowCodec,
    row_codec: RowCodec,
    schema: SchemaRef,
    rows: HashMap<Vec<u8>, Vec<u8>>,
}

impl Upsert {
    /// An upsert over rows of `schema` keyed by the columns `key_columns`.
    pub fn new(schema: SchemaRef, key_columns: Vec<usize>) -> Result<Self> {
        let types: Vec<_> = key_columns
            .iter()
            .map(|&i| schema.field(i).data_type().clone())
            .collect();
        Ok(Self {
            key_codec: RowCodec::new(&types)?,
            row_codec: RowCodec::for_schema(&schema)?,
            key_columns,
            schema,
            rows: HashMap::new(),
        })
    }
}

impl Operator for Upsert {
    fn name(&self) -> &str {
        "upsert"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.rows)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        r.get_into(&mut self.rows)
    }

    fn state_entries(&self) -> usize {
        self.rows.len()
    }

    fn state_bytes(&self) -> usize {
        super::map_bytes(&self.rows, Vec::len)
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let n = change.len();
        let key_cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|&i| change.batch().column(i).clone())
            .collect();
        let keys = self.key_codec.encode(&key_cols, n)?;
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        let mut removed: Vec<Vec<u8>> = Vec::new();
        let mut inserted: Vec<u32> = Vec::new();
        // Net effect per key: the first old row and the last new row.
        let mut first_old: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
        let mut last_new: HashMap<Vec<u8>, Option<u32>> = HashMap::new();
        for (i, &w) in change.weights().iter().enumerate() {
            if w == 0 {
                continue;
            }
            let key = keys.row(i).to_vec();
            first_old
                .entry(key.clone())
                .or_insert_with(|| self.rows.get(&key).cloned());
            if w > 0 {
                self.rows.insert(key.clone(), rows.row(i).to_vec());
                last_new.insert(key, Some(i as u32));
            } else {
                self.rows.remove(&key);
                last_new.insert(key, None);
            }
        }
        for (key, old) in first_old {
            let new = last_new.get(&key).copied().flatten();
            if let (Some(old), Some(new)) = (&old, new) {
                if old.as_slice() == rows.row(new as usize) {
                    continue;
                }
            }
            if let Some(old) = old {
                removed.push(old);
            }
            if let Some(new) = new {
                inserted.push(new);
            }
        }
        inserted.sort_unstable();
        let plus = change.take(&inserted)?;
        let plus = ZSet::new(plus.into_parts().0, vec![1; inserted.len()]);
        let minus = self
            .row_codec
            .decode_batch(&self.schema, removed.iter().map(Vec::as_slice))?;
        ZSet::concat(&self.schema, &[plus, ZSet::with_weight(minus, -1)])
    }
}
