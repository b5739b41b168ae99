//! Parquet input: `file_input` with `"format": {"name": "parquet"}` inserts
//! the rows of a Parquet file into a table (output is `parquet_sink.rs`).
//!
//! The file is read a batch of rows at a time by arrow's Parquet reader,
//! straight into Arrow columns (no text round trip). Columns are matched
//! to the table's by name (ignoring case) and cast to its types; a column
//! the file lacks is NULL, one the table lacks is ignored. A batch whose
//! values cannot become the table's (a string that is not a number, a NULL
//! in a `NOT NULL` column) is rejected whole with the reason, counted as
//! parse errors, and the input goes on with the next. A checkpoint records
//! the rows read (`{"rows": n}`), so a resumed pipeline skips them.

use std::fs::File;
use std::sync::atomic::Ordering;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::{json, Value};

use super::{wait_while_paused, ConnectorSpec};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// Rows per batch read.
const BATCH_ROWS: usize = 8192;

/// Whether a connector's format is Parquet.
pub fn wanted(spec: &ConnectorSpec) -> bool {
    spec.format_name() == Some("parquet")
}

/// Reads the Parquet file into the table, from the row `position` records
/// (a checkpoint's) or the first. Returns false if the pipeline stopped
/// first; a file that is not Parquet is an error of the endpoint.
pub fn feed(
    spec: &ConnectorSpec,
    file: File,
    feeder: &Feeder,
    stats: &EndpointStats,
    position: Option<&Value>,
) -> bool {
    let Ok(schema) = feeder.schema(&spec.relation).cloned() else {
        return false;
    };
    let mut rows = position
        .and_then(|p| p.get("rows"))
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let reader = ParquetRecordBatchReaderBuilder::try_new(file).and_then(|b| {
        b.with_batch_size(BATCH_ROWS)
            .with_offset(usize::try_from(rows).unwrap_or(usize::MAX))
            .build()
    });
    let reader = match reader {
        Ok(r) => r,
        Err(e) => {
            stats.error(format!("reading Parquet: {e}"));
            return true;
        }
    };
    for batch in reader {
        if !wait_while_paused(feeder) {
            return false;
        }
        let batch = match batch {
            Ok(b) => b,
            Err(e) => {
                stats.error(format!("reading Parquet: {e}"));
                return true;
            }
        };
        let n = batch.num_rows() as u64;
        rows += n;
        let changes = match conform(&batch, &schema) {
            Ok(b) => {
                stats.records.fetch_add(n, Ordering::Relaxed);
                ZSet::with_weight(b, 1)
            }
            Err(reason) => {
                let first = rows - n + 1;
                tracing::warn!(connector = %spec.name, "rejected input: rows {first}..={rows}: {reason}");
                stats.parse_errors.fetch_add(n, Ordering::Relaxed);
                *stats.last_error.lock().unwrap() =
                    Some(format!("rows {first}..={rows}: {reason}"));
                ZSet::empty(&schema)
            }
        };
        let origin = Origin::at(&spec.name, json!({ "rows": rows }));
        if feeder
            .feed_blocking(&spec.relation, changes, origin)
            .is_err()
        {
            return false;
        }
    }
    true
}

/// The rows of `batch` as rows of a table with `schema`.
fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
    let n = batch.num_rows();
    let strict = CastOptions {
        safe: false,
        ..Default::default()
    };
    let columns = schema
        .fields()
        .iter()
        .map(|field| {
            let found = (batch.schema().fields().iter())
                .position(|f| f.name().eq_ignore_ascii_case(field.name()));
            let column: ArrayRef = match found {
                Some(i) => cast_with_options(batch.column(i), field.data_type(), &strict)
                    .map_err(|e| format!("column '{}': {e}", field.name()))?,
                None => new_null_array(field.data_type(), n),
            };
            if !field.is_nullable() && column.null_count() > 0 {
                return Err(format!("column '{}' cannot be NULL", field.name()));
            }
            Ok(column)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let options = RecordBatchOptions::new().with_row_count(Some(n));
    RecordBatch::try_new_with_options(schema.clone(), columns, &options).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn table() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ]))
    }

    /// Columns are found by name whatever their case and order, cast to
    /// the table's types; missing ones are NULL.
    #[test]
    fn a_file_batch_becomes_the_tables_rows() {
        let file = Arc::new(Schema::new(vec![
            Field::new("NAME", DataType::Utf8, true),
            Field::new("Id", DataType::Int32, true),
            Field::new("extra", DataType::Int64, true),
        ]));
        let batch = RecordBatch::try_new(
            file,
            vec![
                Arc::new(StringArray::from(vec!["a", "b"])),
                Arc::new(Int32Array::from(vec![1, 2])),
                Arc::new(Int64Array::from(vec![9, 9])),
            ],
        )
        .unwrap();
        let rows = conform(&batch, &table()).unwrap();
        assert_eq!(rows.schema(), table());
        let ids = rows
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[1, 2]);
        assert_eq!(rows.column(2).null_count(), 2);
    }

    /// Values that do not fit are refused, never turned into NULLs.
    #[test]
    fn values_that_do_not_fit_are_refused() {
        let strings = Arc::new(Schema::new(vec![Field::new("id", DataType::Utf8, true)]));
        let bad = RecordBatch::try_new(strings, vec![Arc::new(StringArray::from(vec!["7", "x"]))])
            .unwrap();
        let err = conform(&bad, &table()).unwrap_err();
        assert!(err.contains("column 'id'"), "{err}");
        let nulls = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)]));
        let missing_key =
            RecordBatch::try_new(nulls, vec![Arc::new(StringArray::from(vec!["a"]))]).unwrap();
        let err = conform(&missing_key, &table()).unwrap_err();
        assert_eq!(err, "column 'id' cannot be NULL");
    }
}
