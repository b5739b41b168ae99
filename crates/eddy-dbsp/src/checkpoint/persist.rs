//! [`Persist`]: how values are written to a state file and read back,
//! with its implementations for integers, strings, sequences, maps, Arrow
//! batches, Z-sets and scalars.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::Hash;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{Field, Schema};
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::common::ScalarValue;

use super::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// A value that can be written to a checkpoint and read back.
pub trait Persist: Sized {
    /// Writes the value.
    fn save(&self, w: &mut StateWriter) -> Result<()>;
    /// Reads a value written by [`save`](Persist::save).
    fn load(r: &mut StateReader) -> Result<Self>;
}

macro_rules! persist_int {
    ($($t:ty),*) => {$(
        impl Persist for $t {
            fn save(&self, w: &mut StateWriter) -> Result<()> {
                w.raw(&self.to_le_bytes())
            }
            fn load(r: &mut StateReader) -> Result<Self> {
                let bytes = r.take(std::mem::size_of::<$t>())?;
                Ok(<$t>::from_le_bytes(bytes.try_into().expect("sized")))
            }
        }
    )*};
}
persist_int!(u32, u64, i64, i128);

impl Persist for usize {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&(*self as u64))
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        usize::try_from(r.get::<u64>()?).map_err(|_| r.corrupt("a size out of range"))
    }
}

impl Persist for bool {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.raw(&[u8::from(*self)])
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        match r.take(1)?[0] {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(r.corrupt("a bad boolean")),
        }
    }
}

/// A length read from the state, checked against the bytes left (each
/// element takes at least `min_size` bytes), so a corrupt length cannot
/// make a reader allocate without bound.
fn length(r: &mut StateReader, min_size: usize) -> Result<usize> {
    let n: usize = r.get()?;
    if n.saturating_mul(min_size.max(1)) > r.data.len() - r.pos {
        return Err(r.corrupt("a length past the end of the state"));
    }
    Ok(n)
}

impl Persist for Vec<u8> {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.len())?;
        w.raw(self)
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let n = length(r, 1)?;
        Ok(r.take(n)?.to_vec())
    }
}

impl Persist for String {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.len())?;
        w.raw(self.as_bytes())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let bytes: Vec<u8> = r.get()?;
        String::from_utf8(bytes).map_err(|_| r.corrupt("a string that is not UTF-8"))
    }
}

impl<T: Persist> Persist for Option<T> {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.is_some())?;
        match self {
            Some(v) => w.put(v),
            None => Ok(()),
        }
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        Ok(if r.get::<bool>()? {
            Some(r.get()?)
        } else {
            None
        })
    }
}

impl<A: Persist, B: Persist> Persist for (A, B) {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.0)?;
        w.put(&self.1)
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        Ok((r.get()?, r.get()?))
    }
}

impl<A: Persist, B: Persist, C: Persist> Persist for (A, B, C) {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.0)?;
        w.put(&self.1)?;
        w.put(&self.2)
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        Ok((r.get()?, r.get()?, r.get()?))
    }
}

/// Writes the elements of a sequence with its length first.
fn save_seq<'a, T: Persist + 'a>(
    w: &mut StateWriter,
    len: usize,
    items: impl Iterator<Item = &'a T>,
) -> Result<()> {
    w.put(&len)?;
    items.into_iter().try_for_each(|v| w.put(v))
}

impl<T: Persist> Persist for Vec<T> {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        save_seq(w, self.len(), self.iter())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let n = length(r, 1)?;
        (0..n).map(|_| r.get()).collect()
    }
}

/// Writes the entries of a map with their number first.
fn save_map<'a, K: Persist + 'a, V: Persist + 'a>(
    w: &mut StateWriter,
    len: usize,
    entries: impl Iterator<Item = (&'a K, &'a V)>,
) -> Result<()> {
    w.put(&len)?;
    entries.into_iter().try_for_each(|(k, v)| {
        w.put(k)?;
        w.put(v)
    })
}

/// Reads the entries [`save_map`] wrote.
fn load_map<K: Persist, V: Persist, M: FromIterator<(K, V)>>(r: &mut StateReader) -> Result<M> {
    let n = length(r, 2)?;
    (0..n).map(|_| Ok((r.get()?, r.get()?))).collect()
}

impl<K: Persist + Eq + Hash, V: Persist, S: std::hash::BuildHasher + Default> Persist
    for HashMap<K, V, S>
{
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        save_map(w, self.len(), self.iter())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        load_map(r)
    }
}

impl<K: Persist + Eq + Hash, V: Persist, S: std::hash::BuildHasher + Default> Persist
    for hashbrown::HashMap<K, V, S>
{
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        save_map(w, self.len(), self.iter())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        load_map(r)
    }
}

impl<K: Persist + Ord, V: Persist> Persist for BTreeMap<K, V> {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        save_map(w, self.len(), self.iter())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        load_map(r)
    }
}

impl<K: Persist + Ord> Persist for BTreeSet<K> {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        save_seq(w, self.len(), self.iter())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let n = length(r, 1)?;
        (0..n).map(|_| r.get()).collect()
    }
}

impl Persist for RecordBatch {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        let mut bytes = Vec::new();
        {
            let mut ipc = StreamWriter::try_new(&mut bytes, &self.schema())?;
            ipc.write(self)?;
            ipc.finish()?;
        }
        w.put(&self.num_rows())?;
        w.put(&bytes)
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let rows: usize = r.get()?;
        let bytes: Vec<u8> = r.get()?;
        let mut ipc = StreamReader::try_new(std::io::Cursor::new(bytes), None)?;
        let schema = ipc.schema();
        let batch = match ipc.next() {
            Some(b) => b?,
            None => return Err(r.corrupt("a batch without rows")),
        };
        if batch.num_columns() == 0 {
            // A batch of no columns carries its row count outside IPC.
            return Ok(RecordBatch::try_new_with_options(
                schema,
                vec![],
                &datafusion::arrow::array::RecordBatchOptions::new().with_row_count(Some(rows)),
            )?);
        }
        Ok(batch)
    }
}

impl Persist for ZSet {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(self.batch())?;
        save_seq(w, self.weights().len(), self.weights().iter())
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let batch: RecordBatch = r.get()?;
        let weights: Vec<i64> = r.get()?;
        if weights.len() != batch.num_rows() {
            return Err(r.corrupt("a change whose weights and rows differ in number"));
        }
        Ok(ZSet::new(batch, weights))
    }
}

impl Persist for ScalarValue {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        let schema = Schema::new(vec![Field::new("v", self.data_type(), true)]);
        let batch = RecordBatch::try_new(Arc::new(schema), vec![self.to_array()?])?;
        w.put(&batch)
    }
    fn load(r: &mut StateReader) -> Result<Self> {
        let batch: RecordBatch = r.get()?;
        if batch.num_columns() != 1 || batch.num_rows() != 1 {
            return Err(r.corrupt("a bad scalar"));
        }
        Ok(ScalarValue::try_from_array(batch.column(0), 0)?)
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::DataType;

    use super::*;

    #[test]
    fn values_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let z = ZSet::new(
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![1, 2]))]).unwrap(),
            vec![1, -3],
        );
        let empty = ZSet::empty(&Arc::new(Schema::empty()));
        type Map = HashMap<Vec<u8>, (i64, Vec<(u32, i64)>)>;
        let map: Map = [(b"k".to_vec(), (7, vec![(1, 2)]))].into_iter().collect();
        let scalar = ScalarValue::Utf8(Some("w".into()));
        let mut w = StateWriter::create(dir.path()).unwrap();
        w.put(&z).unwrap();
        w.put(&empty).unwrap();
        w.put(&map).unwrap();
        w.put(&Some(scalar.clone())).unwrap();
        w.put(&i128::MIN).unwrap();
        w.finish().unwrap();
        let mut r = StateReader::open(dir.path()).unwrap();
        let z2: ZSet = r.get().unwrap();
        assert_eq!(z2.batch(), z.batch());
        assert_eq!(z2.weights(), z.weights());
        assert_eq!(r.get::<ZSet>().unwrap().len(), 0);
        assert_eq!(r.get::<Map>().unwrap(), map);
        assert_eq!(r.get::<Option<ScalarValue>>().unwrap(), Some(scalar));
        assert_eq!(r.get::<i128>().unwrap(), i128::MIN);
        r.finish().unwrap();
        assert!(r.get::<u64>().is_err(), "reading past the end fails");
    }
}
