//! MAP values in their one canonical form: entries sorted by key.
//!
//! A map has no order of its own (Feldera's comparisons.md: `MAP['b', 1,
//! 'a', 2]` and `MAP['a', 2, 'b', 1]` are the same value, and maps order
//! by their entries by increasing key). Arrow's maps keep their entries in
//! the order they were written, and every comparison of rows here (keys of
//! groups and joins, `DISTINCT`, the consolidation of changes) compares
//! encoded rows, so two writings of one map would be two values. Maps are
//! therefore put in this form where they enter a circuit: table input, and
//! the expressions and constants that build them.

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, ListArray, MapArray, StructArray, UInt32Array,
};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::arrow::row::{RowConverter, SortField};

use crate::Result;

/// Whether a MAP appears in `t`.
pub fn holds_map(t: &DataType) -> bool {
    match t {
        DataType::Map(..) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_map(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| holds_map(f.data_type())),
        _ => false,
    }
}

/// `array` with every map in it (nested ones too) sorted by key (by the
/// keys' row format, so keys of any type).
pub fn canonical(array: &ArrayRef) -> Result<ArrayRef> {
    if !holds_map(array.data_type()) {
        return Ok(Arc::clone(array));
    }
    Ok(match array.data_type() {
        DataType::Map(field, sorted) => {
            let m = array.as_map();
            let keys = canonical(m.keys())?;
            let values = canonical(m.values())?;
            let offsets = m.value_offsets();
            let first = offsets[0] as usize;
            let n = *offsets.last().unwrap_or(&0) as usize - first;
            let (keys, values) = (keys.slice(first, n), values.slice(first, n));
            // Keys ordered by their row format, which every type has, so
            // that no map is left in another form.
            let rows = RowConverter::new(vec![SortField::new(keys.data_type().clone())])?
                .convert_columns(std::slice::from_ref(&keys))?;
            let mut order: Vec<u32> = (0..n as u32).collect();
            for w in offsets.windows(2) {
                let range = (w[0] as usize - first)..(w[1] as usize - first);
                order[range].sort_by(|&a, &b| rows.row(a as usize).cmp(&rows.row(b as usize)));
            }
            let order = UInt32Array::from(order);
            let (keys, values) = (take(&keys, &order, None)?, take(&values, &order, None)?);
            let DataType::Struct(entry_fields) = field.data_type() else {
                return Ok(Arc::clone(array));
            };
            let entries = StructArray::try_new(entry_fields.clone(), vec![keys, values], None)?;
            let rebased: Vec<i32> = offsets.iter().map(|o| o - offsets[0]).collect();
            Arc::new(MapArray::try_new(
                Arc::clone(field),
                datafusion::arrow::buffer::OffsetBuffer::new(rebased.into()),
                entries,
                m.nulls().cloned(),
                *sorted,
            )?)
        }
        DataType::List(item) => {
            let l = array.as_list::<i32>();
            Arc::new(ListArray::try_new(
                Arc::clone(item),
                l.offsets().clone(),
                canonical(l.values())?,
                l.nulls().cloned(),
            )?)
        }
        DataType::Struct(fields) => {
            let s = array.as_struct();
            let columns = s
                .columns()
                .iter()
                .map(canonical)
                .collect::<Result<Vec<_>>>()?;
            Arc::new(StructArray::try_new(
                fields.clone(),
                columns,
                s.nulls().cloned(),
            )?)
        }
        _ => Arc::clone(array),
    })
}

/// `batch` with the maps of its columns in canonical form.
pub fn canonical_batch(batch: RecordBatch) -> Result<RecordBatch> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| holds_map(f.data_type()))
    {
        return Ok(batch);
    }
    let columns = batch
        .columns()
        .iter()
        .map(canonical)
        .collect::<Result<Vec<_>>>()?;
    crate::row::batch_with_rows(&batch.schema(), columns, batch.num_rows())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, StringArray};

    #[test]
    fn entries_are_sorted_by_key_within_each_map() {
        let keys = StringArray::from(vec!["b", "a", "z", "y", "x"]);
        let values = Int32Array::from(vec![1, 2, 3, 4, 5]);
        let m = MapArray::new_from_strings(keys.iter().map(|k| k.unwrap()), &values, &[0, 2, 2, 5])
            .unwrap();
        let a: ArrayRef = Arc::new(m);
        let c = canonical(&a).unwrap();
        let c = c.as_map();
        let keys: Vec<_> = c.keys().as_string::<i32>().iter().flatten().collect();
        assert_eq!(keys, ["a", "b", "x", "y", "z"]);
        let values: Vec<_> = c
            .values()
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .values()
            .to_vec();
        assert_eq!(values, [2, 1, 5, 4, 3]);
        assert_eq!(c.value_offsets(), &[0, 2, 2, 5]);
    }
}
