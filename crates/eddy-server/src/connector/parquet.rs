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

/// Reads a Parquet file (a local file, or an object's bytes) into the
/// table, from row `rows` on (a checkpoint's position, or 0); each batch
/// carries the position `position_of` makes of the rows read after it.
/// Rejected batches are reported with their rows (in `place`, when the
/// connector reads several files). Returns false if the pipeline stopped
/// first; a file that is not Parquet is an error of the endpoint.
pub fn feed<R: ChunkReader + 'static>(
    spec: &ConnectorSpec,
    file: R,
    feeder: &Feeder,
    stats: &EndpointStats,
    mut rows: u64,
    position_of: &dyn Fn(u64) -> serde_json::Value,
    place: Option<&str>,
) -> bool {
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
        let changes = match conform(&batch, &schema) {
            Ok(b) => {
                stats.records.fetch_add(n, Ordering::Relaxed);
                ZSet::with_weight(b, 1)
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
