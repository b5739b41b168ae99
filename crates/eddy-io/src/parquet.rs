//! The Parquet format: files of a table's rows, read in batches and made
//! to fit the table's schema (columns found by name in any case and order,
//! cast strictly, missing ones NULL), and a view's changes written as one
//! file with each row's weight in a last column.

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::file::reader::ChunkReader;

/// Rows per batch read from a file.
pub const BATCH_ROWS: usize = 8192;

/// The column that holds each written row's weight.
pub const WEIGHT_COLUMN: &str = "__weight";

/// The batches of a Parquet file, from row `skip` on.
pub fn read<R: ChunkReader + 'static>(
    file: R,
    skip: u64,
) -> Result<ParquetRecordBatchReader, String> {
    ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| {
            b.with_batch_size(BATCH_ROWS)
                .with_offset(usize::try_from(skip).unwrap_or(usize::MAX))
                .build()
        })
        .map_err(|e| format!("reading Parquet: {e}"))
}

/// A change as one Parquet file: the rows, then their weights in
/// [`WEIGHT_COLUMN`]; a VARIANT is written as its JSON text.
pub fn write<W: std::io::Write + Send>(changes: &ZSet, out: W) -> Result<W, String> {
    let batch = crate::with_weight_column_named(changes, WEIGHT_COLUMN)?;
    let batch = crate::variant::arrow::batch_as_text(&batch).map_err(|e| e.to_string())?;
    let mut writer = parquet::arrow::ArrowWriter::try_new(out, batch.schema(), None)
        .map_err(|e| e.to_string())?;
    writer.write(&batch).map_err(|e| e.to_string())?;
    writer.into_inner().map_err(|e| e.to_string())
}

/// The rows of `batch` as rows of a table with `schema`.
pub fn conform(batch: &RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, String> {
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
