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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};

use eddy_dbsp::ZSet;
use eddy_io::parquet::conform;
use parquet::file::reader::ChunkReader;
use serde::{Deserialize, Serialize};

use super::{wait_while_paused, ConnectorSpec};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// How far a Parquet file has been read: the rows before the next batch.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetPosition {
    /// Rows fed.
    pub rows: u64,
}

impl ParquetPosition {
    /// The position after `rows` rows, as a checkpoint records it.
    pub fn at(rows: u64) -> serde_json::Value {
        serde_json::to_value(Self { rows }).expect("a number")
    }
}

/// How a Parquet file's rows enter the table.
pub struct Rows<'a> {
    /// Rows of the file fed before (a checkpoint's position, or 0).
    pub skip: u64,
    /// Each row's weight: 1 inserts, -1 deletes (a file a table removed).
    pub weight: i64,
    /// Columns the file does not hold, with their value as text (a Delta
    /// table's partition values), cast to the table's types as the file's
    /// own columns are.
    pub constants: &'a [(String, Option<String>)],
    /// The position after a number of the file's rows.
    pub position_of: &'a dyn Fn(u64) -> serde_json::Value,
    /// The file, in error reports (when the connector reads several).
    pub place: Option<&'a str>,
}

impl<'a> Rows<'a> {
    /// A file's rows inserted, from row `skip` on.
    pub fn inserted(
        skip: u64,
        position_of: &'a dyn Fn(u64) -> serde_json::Value,
        place: Option<&'a str>,
    ) -> Self {
        Self {
            skip,
            weight: 1,
            constants: &[],
            position_of,
            place,
        }
    }
}

/// Reads a Parquet file (a local file, or an object's bytes) into the
/// table as `how` says; each batch carries the position after it.
/// Rejected batches are reported with their rows. Returns false if the
/// pipeline stopped first; a file that is not Parquet is an error of the
/// endpoint.
pub fn feed<R: ChunkReader + 'static>(
    spec: &ConnectorSpec,
    file: R,
    feeder: &Feeder,
    stats: &EndpointStats,
    how: Rows<'_>,
) -> bool {
    let Rows {
        skip: mut rows,
        weight,
        constants,
        position_of,
        place,
    } = how;
    let Ok(schema) = feeder.schema(&spec.relation).cloned() else {
        return false;
    };
    let reader = match eddy_io::parquet::read(file, rows) {
        Ok(r) => r,
        Err(e) => {
            stats.error(e);
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
        let changes = match with_constants(batch, constants).and_then(|b| conform(&b, &schema)) {
            Ok(b) => {
                stats.records.fetch_add(n, Ordering::Relaxed);
                ZSet::with_weight(b, weight)
            }
            Err(reason) => {
                let first = rows - n + 1;
                let place = place.map(|p| format!("'{p}' ")).unwrap_or_default();
                let e = format!("{place}rows {first}..={rows}: {reason}");
                tracing::warn!(connector = %spec.name, "rejected input: {e}");
                stats.parse_errors.fetch_add(n, Ordering::Relaxed);
                *stats.last_error.lock().unwrap() = Some(e);
                ZSet::empty(&schema)
            }
        };
        let origin = Origin::at(&spec.name, position_of(rows));
        if feeder
            .feed_blocking(&spec.relation, changes, origin)
            .is_err()
        {
            return false;
        }
    }
    true
}

/// `batch` with `constants` as columns of text (a NULL where `None`).
fn with_constants(
    batch: RecordBatch,
    constants: &[(String, Option<String>)],
) -> Result<RecordBatch, String> {
    if constants.is_empty() {
        return Ok(batch);
    }
    let n = batch.num_rows();
    let mut fields: Vec<FieldRef> = batch.schema().fields().iter().cloned().collect();
    let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
    for (name, value) in constants {
        fields.push(Arc::new(Field::new(name, DataType::Utf8, true)));
        columns.push(Arc::new(StringArray::from(vec![value.as_deref(); n])));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| e.to_string())
}
