//! `eddy-io`: Eddy's data formats, turning bytes into weighted batches
//! (Z-sets) and back. [`format::FormatConfig`] is the one way a format is
//! chosen; JSON, CSV, Avro, Parquet and raw each have their module.
//!
//! Parsers never stop at a bad row: each rejected row is reported with its
//! position and the reason, and every other row is kept.

pub mod avro;
pub mod csv;
pub mod format;
pub mod json;
pub mod parquet;
pub mod raw;
pub mod types;
pub mod uuid;
pub mod variant;

/// A row that could not be parsed or does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    /// 1-based line (or record) number in the input.
    pub line: usize,
    /// Why the row was rejected.
    pub reason: String,
}

impl std::fmt::Display for RowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

/// The outcome of parsing: the accepted rows and the rejected ones.
#[derive(Debug)]
pub struct Parsed {
    /// Accepted rows with their weights.
    pub changes: eddy_dbsp::ZSet,
    /// Rejected rows.
    pub errors: Vec<RowError>,
}

/// The change's rows with a last `weight` column (for CSV and tables).
pub fn with_weight_column(
    changes: &eddy_dbsp::ZSet,
) -> Result<datafusion::arrow::array::RecordBatch, String> {
    with_weight_column_named(changes, "weight")
}

/// The change's rows with a last column `name` holding each row's weight.
pub fn with_weight_column_named(
    changes: &eddy_dbsp::ZSet,
    name: &str,
) -> Result<datafusion::arrow::array::RecordBatch, String> {
    use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;
    let batch = changes.batch();
    let mut fields: Vec<Field> = batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(name, DataType::Int64, false));
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    columns.push(Arc::new(Int64Array::from(changes.weights().to_vec())));
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}
