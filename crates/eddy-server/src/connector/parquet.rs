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

use eddy_dbsp::ZSet;
use eddy_io::parquet::conform;
use serde::{Deserialize, Serialize};

use super::{wait_while_paused, ConnectorSpec};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// How far a Parquet file has been read: the rows before the next batch.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParquetPosition {
    rows: u64,
}

/// Reads the Parquet file into the table, from the row `position` records
/// (a checkpoint's) or the first. Returns false if the pipeline stopped
/// first; a file that is not Parquet is an error of the endpoint.
pub fn feed(
    spec: &ConnectorSpec,
    file: File,
    feeder: &Feeder,
    stats: &EndpointStats,
    position: ParquetPosition,
) -> bool {
    let Ok(schema) = feeder.schema(&spec.relation).cloned() else {
        return false;
    };
    let mut rows = position.rows;
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
                tracing::warn!(connector = %spec.name, "rejected input: rows {first}..={rows}: {reason}");
                stats.parse_errors.fetch_add(n, Ordering::Relaxed);
                *stats.last_error.lock().unwrap() =
                    Some(format!("rows {first}..={rows}: {reason}"));
                ZSet::empty(&schema)
            }
        };
        let position = serde_json::to_value(ParquetPosition { rows }).expect("a number");
        let origin = Origin::at(&spec.name, position);
        if feeder
            .feed_blocking(&spec.relation, changes, origin)
            .is_err()
        {
            return false;
        }
    }
    true
}
