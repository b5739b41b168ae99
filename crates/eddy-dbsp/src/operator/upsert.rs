//! Upsert: a table with a primary key.
//!
//! Input rows are commands in arrival order: a positive weight inserts the
//! row, replacing any row with the same key; a negative weight deletes the
//! row with that key (the other columns are ignored). The output is the
//! change of the table's contents.
//!
//! Incremental rule (non-linear): the current row of every key is kept, in
//! a trace keyed by the primary key (so a large table spills to storage
//! like any other state); a step's commands on key `k` emit `−old(k)` (the
//! row before the step, if there was one) and `+new(k)` (the row after its
//! last command, if any). Work is proportional to the number of commands:
//! one lookup per distinct key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::SchemaRef;

use super::{Contents, Operator, CONTENTS_CHUNK};
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::{EncodedRows, RowCodec};
use crate::trace::Trace;
use crate::{Result, ZSet};

/// Keeps one row per primary key.
pub struct Upsert {
    key_columns: Vec<usize>,
    key_codec: RowCodec,
    row_codec: RowCodec,
    schema: SchemaRef,
    /// Primary key ↦ the current row (weight 1).
    rows: Trace,
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
            rows: Trace::new(),
        })
    }
}

impl Upsert {
    /// The encoded primary keys of a change's rows.
    fn keys(&self, change: &ZSet) -> Result<EncodedRows> {
        let key_cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|&i| change.batch().column(i).clone())
            .collect();
        self.key_codec.encode(&key_cols, change.len())
    }
}

impl Operator for Upsert {
    fn name(&self) -> &str {
        "upsert"
    }

    fn contents(&self) -> Option<Contents> {
        // A copy sharing the trace's immutable batches: read later, on
        // whatever thread, while this one steps on. Each read takes its
        // own copy (a trace is read by one thread at a time), so reads
        // never wait on each other.
        let (trace, schema) = (Mutex::new(self.rows.clone()), Arc::clone(&self.schema));
        Some(Arc::new(move |sink| {
            let codec = RowCodec::for_schema(&schema)?;
            let mut trace = trace.lock().unwrap_or_else(|e| e.into_inner()).clone();
            // Each chunk is read by a cursor of its own, from just past the
            // last entry of the one before, and what the cursor copied out
            // of batch files is dropped before the next: a read of a large
            // table on disk holds one chunk's bytes at a time.
            let mut after: Option<(Vec<u8>, Vec<u8>)> = None;
            loop {
                let (mut bytes, mut ends, mut weights) = (Vec::new(), Vec::new(), Vec::new());
                let cursor = match &after {
                    None => trace.iter(),
                    Some((k, r)) => trace.seek_entry(k, &[r.as_slice(), &[0]].concat()),
                };
                let mut last = None;
                for (k, row, w) in cursor.take(CONTENTS_CHUNK) {
                    bytes.extend_from_slice(row);
                    ends.push(bytes.len());
                    weights.push(w);
                    last = Some((k, row));
                }
                let Some((k, r)) = last else {
                    break;
                };
                after = Some((k.to_vec(), r.to_vec()));
                trace.release_reads();
                let rows = ends.iter().scan(0, |start, &end| {
                    Some(&bytes[std::mem::replace(start, end)..end])
                });
                let batch = codec.decode_batch(&schema, rows)?;
                if !sink(ZSet::new(batch, weights)) {
                    break;
                }
            }
            Ok(())
        }))
    }

    fn partitioned(&self) -> bool {
        true
    }

    fn partition_keys(&self, _input: usize, change: &ZSet) -> Result<EncodedRows> {
        self.keys(change)
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.rows.save(w)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.rows.restore(r)
    }

    fn state_entries(&self) -> usize {
        self.rows.entries()
    }

    fn state_bytes(&self) -> usize {
        self.rows.bytes()
    }

    fn state_storage_bytes(&self) -> usize {
        self.rows.storage_bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let change = inputs[0];
        let n = change.len();
        let keys = self.keys(change)?;
        let rows = self.row_codec.encode(change.batch().columns(), n)?;
        let mut removed: Vec<Vec<u8>> = Vec::new();
        let mut inserted: Vec<u32> = Vec::new();
        // Net effect per key: the row before the step (read before any
        // of the step's commands is applied) and the last command's row.
        let mut last_new: HashMap<&[u8], Option<u32>> = HashMap::new();
        for (i, &w) in change.weights().iter().enumerate() {
            if w != 0 {
                last_new.insert(keys.row(i), (w > 0).then_some(i as u32));
            }
        }
        // Per key: the row before the step and the index of the new one.
        type Change<'k> = (&'k [u8], Option<Vec<u8>>, Option<u32>);
        let mut changes: Vec<Change<'_>> = Vec::new();
        for (&key, &new) in &last_new {
            let old = (self.rows.get(key).into_iter())
                .find(|&(_, w)| w > 0)
                .map(|(row, _)| row.to_vec());
            if let (Some(old), Some(new)) = (&old, new) {
                if old.as_slice() == rows.row(new as usize) {
                    continue;
                }
            }
            changes.push((key, old, new));
        }
        for (key, old, new) in changes {
            if let Some(old) = old {
                self.rows.update(key, &old, -1);
                removed.push(old);
            }
            if let Some(new) = new {
                self.rows.update(key, rows.row(new as usize), 1);
                inserted.push(new);
            }
        }
        self.rows.seal();
        inserted.sort_unstable();
        let plus = change.take(&inserted)?;
        let plus = ZSet::new(plus.into_parts().0, vec![1; inserted.len()]);
        let minus = self
            .row_codec
            .decode_batch(&self.schema, removed.iter().map(Vec::as_slice))?;
        ZSet::concat(&self.schema, &[plus, ZSet::with_weight(minus, -1)])
    }
}
