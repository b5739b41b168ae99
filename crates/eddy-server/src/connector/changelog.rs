//! A step's change as the entries of a change log, as the outputs that
//! write by key or append a log read it (`postgres_output`, in either mode,
//! and `delta_table_output`). With the view's key (a `CREATE INDEX` the
//! connector names), the rows of each key make one entry: a row inserted
//! and one deleted an update, a row only inserted an insert, a row only
//! deleted a delete. Without a key, each row is an insert or a delete, as
//! often as its weight says.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::row::{RowConverter, SortField};
use eddy_dbsp::ZSet;

/// What an entry does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A row (or key) that was not there.
    Insert,
    /// A row (or key) that goes.
    Delete,
    /// A key whose row changed.
    Update,
}

impl Op {
    /// The letter a change log writes (Feldera's `__feldera_op`).
    pub fn letter(self) -> &'static str {
        match self {
            Op::Insert => "i",
            Op::Delete => "d",
            Op::Update => "u",
        }
    }
}

/// The entries of a change: each the row (its place in the change's
/// batch) an entry writes and what it does; in key order with a key (by
/// the positions of its columns), in row order without.
pub fn entries(changes: &ZSet, key: Option<&[usize]>) -> Result<Vec<(usize, Op)>, String> {
    let weights = changes.weights();
    let Some(key) = key else {
        let mut out = Vec::new();
        for (i, &w) in weights.iter().enumerate() {
            let op = if w > 0 { Op::Insert } else { Op::Delete };
            out.extend(std::iter::repeat_n((i, op), w.unsigned_abs() as usize));
        }
        return Ok(out);
    };
    let batch = changes.batch();
    let columns: Vec<ArrayRef> = key.iter().map(|&i| Arc::clone(batch.column(i))).collect();
    let fields = columns
        .iter()
        .map(|c| SortField::new(c.data_type().clone()))
        .collect();
    let converter = RowConverter::new(fields).map_err(|e| e.to_string())?;
    let rows = converter
        .convert_columns(&columns)
        .map_err(|e| e.to_string())?;
    // Per key: the row inserted, and a row deleted.
    let mut by_key: BTreeMap<&[u8], (Option<usize>, Option<usize>)> = BTreeMap::new();
    for (i, &w) in weights.iter().enumerate() {
        let entry = by_key.entry(rows.row(i).data()).or_default();
        if w > 0 {
            entry.0 = Some(i);
        } else if w < 0 && entry.1.is_none() {
            entry.1 = Some(i);
        }
    }
    Ok(by_key
        .into_values()
        .filter_map(|change| match change {
            (Some(i), Some(_)) => Some((i, Op::Update)),
            (Some(i), None) => Some((i, Op::Insert)),
            (None, Some(i)) => Some((i, Op::Delete)),
            (None, None) => None,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn change(rows: &[(i64, &str, i64)]) -> ZSet {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap();
        ZSet::new(batch, rows.iter().map(|r| r.2).collect())
    }

    #[test]
    fn keys_make_one_entry_each() {
        let c = change(&[(1, "old", -1), (1, "new", 1), (2, "a", 1), (3, "gone", -1)]);
        assert_eq!(
            entries(&c, Some(&[0])).unwrap(),
            vec![(1, Op::Update), (2, Op::Insert), (3, Op::Delete)]
        );
    }

    #[test]
    fn without_a_key_rows_repeat_by_weight() {
        let c = change(&[(1, "a", 2), (2, "b", -1)]);
        assert_eq!(
            entries(&c, None).unwrap(),
            vec![(0, Op::Insert), (0, Op::Insert), (1, Op::Delete)]
        );
    }
}
