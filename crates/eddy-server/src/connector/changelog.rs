//! A step's change as the entries of a change log, as the outputs that
//! write by key or append a log read it (`postgres_output`, in either mode,
//! and `delta_table_output`). With the view's key (a `CREATE INDEX` the
//! connector names), the rows of each key make one entry: a row inserted
//! and one deleted an update, a row only inserted an insert, a row only
//! deleted a delete. Without a key, each row is an insert or a delete, as
//! often as its weight says.
//!
//! A key is meant to be unique in the view. When a step inserts two rows
//! of one key (or one row twice), one of them is written and the others
//! are counted in [`Entries::duplicates`], for the output to report: a
//! keyed destination can hold only one. Rows of one key inserted in
//! different steps are not seen here (the later overwrites the earlier).

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

/// A change's entries.
#[derive(Debug, Default, PartialEq)]
pub struct Entries {
    /// Each the row (its place in the change's batch) an entry writes and
    /// what it does; in key order with a key, in row order without.
    pub entries: Vec<(usize, Op)>,
    /// Rows inserted with a key that another inserted row of the change
    /// has: not written.
    pub duplicates: u64,
}

impl Entries {
    /// The error to report for the duplicates, if any.
    pub fn duplicates_error(&self) -> Option<String> {
        (self.duplicates > 0).then(|| {
            format!(
                "{} rows share their key with another row of the same step: the view's index is not unique, and one row per key is written",
                self.duplicates
            )
        })
    }
}

/// The entries of a change: by the key (the positions of its columns)
/// when there is one, else each row as often as its weight.
pub fn entries(changes: &ZSet, key: Option<&[usize]>) -> Result<Entries, String> {
    let weights = changes.weights();
    let Some(key) = key else {
        let mut out = Vec::new();
        for (i, &w) in weights.iter().enumerate() {
            let op = if w > 0 { Op::Insert } else { Op::Delete };
            out.extend(std::iter::repeat_n((i, op), w.unsigned_abs() as usize));
        }
        return Ok(Entries {
            entries: out,
            duplicates: 0,
        });
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
    let mut duplicates = 0;
    for (i, &w) in weights.iter().enumerate() {
        let entry = by_key.entry(rows.row(i).data()).or_default();
        if w > 0 {
            duplicates += (w as u64 - 1) + u64::from(entry.0.is_some());
            entry.0 = Some(i);
        } else if w < 0 && entry.1.is_none() {
            entry.1 = Some(i);
        }
    }
    let entries = by_key
        .into_values()
        .filter_map(|change| match change {
            (Some(i), Some(_)) => Some((i, Op::Update)),
            (Some(i), None) => Some((i, Op::Insert)),
            (None, Some(i)) => Some((i, Op::Delete)),
            (None, None) => None,
        })
        .collect();
    Ok(Entries {
        entries,
        duplicates,
    })
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
        let e = entries(&c, Some(&[0])).unwrap();
        assert_eq!(
            e.entries,
            vec![(1, Op::Update), (2, Op::Insert), (3, Op::Delete)]
        );
        assert_eq!((e.duplicates, e.duplicates_error()), (0, None));
    }

    #[test]
    fn rows_that_share_a_key_are_counted() {
        // Key 1 inserted twice, key 2 once with weight 3.
        let c = change(&[(1, "a", 1), (1, "b", 1), (2, "c", 3), (3, "d", 1)]);
        let e = entries(&c, Some(&[0])).unwrap();
        assert_eq!(e.entries.len(), 3);
        assert_eq!(e.duplicates, 3);
        assert!(e
            .duplicates_error()
            .unwrap()
            .starts_with("3 rows share their key"));
    }

    #[test]
    fn without_a_key_rows_repeat_by_weight() {
        let c = change(&[(1, "a", 2), (2, "b", -1)]);
        assert_eq!(
            entries(&c, None).unwrap().entries,
            vec![(0, Op::Insert), (0, Op::Insert), (1, Op::Delete)]
        );
    }
}
