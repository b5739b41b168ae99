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

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, StringArray,
};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};

use eddy_dbsp::ZSet;
use eddy_io::parquet::conform;
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use parquet::file::reader::ChunkReader;
use serde::{Deserialize, Serialize};

use super::filter::RowFilter;
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
    /// Columns named by their Parquet field id (an Iceberg table's, whose
    /// columns are renamed without rewriting files): a column whose id is
    /// here takes its name, one whose id is not is left out (a column
    /// dropped since); columns without an id keep their names, unless
    /// `name_mapping` gives them one.
    pub field_ids: Option<&'a HashMap<i32, String>>,
    /// The field id of a column written without one, by its name (an
    /// Iceberg table's name mapping, for migrated files).
    pub name_mapping: Option<&'a HashMap<String, i32>>,
    /// Only the rows for which this holds.
    pub filter: Option<&'a RowFilter>,
    /// Rows of the file deleted since it was written (a Delta table's
    /// deletion vector), by their index in the file from 0: left out
    /// before anything else is done with the batch.
    pub deleted: Option<&'a dyn Fn(u64) -> bool>,
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
            field_ids: None,
            name_mapping: None,
            filter: None,
            deleted: None,
        }
    }
}

/// A file that could not be read whole.
#[derive(Debug)]
pub struct Unreadable {
    /// The file's rows fed before the error (from its start, the skipped
    /// ones included): where a second read begins.
    pub rows: u64,
    /// Why.
    pub error: String,
}

/// Reads a Parquet file (a local file, or an object's bytes) into the
/// table as `how` says; each batch carries the position after it.
/// Rejected batches (values that cannot become the table's) are reported
/// with their rows. Returns false if the pipeline stopped first, and an
/// error when the file cannot be read (not Parquet, a batch that does not
/// decode): the rows fed before it stand, each with its position, and the
/// caller decides whether to try again or go on without the rest.
pub fn feed<R: ChunkReader + 'static>(
    spec: &ConnectorSpec,
    file: R,
    feeder: &Feeder,
    stats: &EndpointStats,
    how: Rows<'_>,
) -> Result<bool, Unreadable> {
    let Ok(schema) = feeder.schema(&spec.relation).cloned() else {
        return Ok(false);
    };
    let position_of = how.position_of;
    changes(file, &schema, stats, how, |changes, rows| {
        if !wait_while_paused(feeder) {
            return false;
        }
        // The rows fed: a filter's leftovers are not input.
        stats
            .records
            .fetch_add(changes.len() as u64, Ordering::Relaxed);
        let origin = Origin::at(&spec.name, position_of(rows));
        feeder
            .feed_blocking(&spec.relation, changes, origin)
            .is_ok()
    })
}

/// Reads a Parquet file's rows as rows of a table of `schema`, as `how`
/// says (its `position_of` is not used), giving `each` the changes of
/// each batch and the file's rows read after it; a rejected batch is
/// reported and given as no change. Returns false if `each` did, and an
/// error when the file cannot be read.
pub fn changes<R: ChunkReader + 'static>(
    file: R,
    schema: &SchemaRef,
    stats: &EndpointStats,
    how: Rows<'_>,
    mut each: impl FnMut(ZSet, u64) -> bool,
) -> Result<bool, Unreadable> {
    let Rows {
        skip: mut rows,
        weight,
        constants,
        position_of: _,
        place,
        field_ids,
        name_mapping,
        filter,
        deleted,
    } = how;
    let place = place.map(|p| format!("'{p}' ")).unwrap_or_default();
    let reader = eddy_io::parquet::read(file, rows).map_err(|e| Unreadable {
        rows,
        error: format!("{place}{e}"),
    })?;
    for batch in reader {
        let batch = batch.map_err(|e| Unreadable {
            rows,
            error: format!("{place}reading Parquet: {e}"),
        })?;
        let n = batch.num_rows() as u64;
        rows += n;
        let read = live(batch, rows - n, deleted)
            .and_then(|b| renamed(b, field_ids, name_mapping))
            .and_then(|b| with_constants(b, constants))
            .and_then(|b| conform(&b, schema))
            .and_then(|b| match filter {
                Some(f) => f.apply(&b),
                None => Ok(b),
            });
        let changes = match read {
            Ok(b) => ZSet::with_weight(b, weight),
            Err(reason) => {
                let first = rows - n + 1;
                stats.rejected(n, &format!("{place}rows {first}..={rows}: {reason}"));
                ZSet::empty(schema)
            }
        };
        if !each(changes, rows) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The rows of `batch`, the file's from `first` on, that are not
/// `deleted`.
fn live(
    batch: RecordBatch,
    first: u64,
    deleted: Option<&dyn Fn(u64) -> bool>,
) -> Result<RecordBatch, String> {
    let Some(deleted) = deleted else {
        return Ok(batch);
    };
    let n = batch.num_rows() as u64;
    let keep: BooleanArray = (first..first + n).map(|i| Some(!deleted(i))).collect();
    if keep.true_count() as u64 == n {
        return Ok(batch);
    }
    filter_record_batch(&batch, &keep).map_err(|e| e.to_string())
}

/// `batch` with its columns named by their field ids, or by the ids the
/// name mapping gives columns without one (see [`Rows::field_ids`]).
fn renamed(
    batch: RecordBatch,
    ids: Option<&HashMap<i32, String>>,
    mapping: Option<&HashMap<String, i32>>,
) -> Result<RecordBatch, String> {
    let Some(ids) = ids else {
        return Ok(batch);
    };
    let mut fields: Vec<FieldRef> = Vec::new();
    let mut columns: Vec<ArrayRef> = Vec::new();
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let id = field
            .metadata()
            .get(PARQUET_FIELD_ID_META_KEY)
            .and_then(|id| id.parse::<i32>().ok())
            .or_else(|| mapping.and_then(|m| m.get(field.name()).copied()));
        let field = match id {
            None => Arc::clone(field),
            Some(id) => match ids.get(&id) {
                Some(name) => Arc::new(field.as_ref().clone().with_name(name)),
                None => continue,
            },
        };
        fields.push(field);
        columns.push(Arc::clone(column));
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::new(Schema::new(fields)), columns, &options)
        .map_err(|e| e.to_string())
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
