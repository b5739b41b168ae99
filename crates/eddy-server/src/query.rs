//! Ad-hoc queries: any SELECT, run by DataFusion over a consistent snapshot
//! of a pipeline's materialized tables and its views, answered as text,
//! JSON lines, CSV, Arrow IPC or Parquet.

use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};

use crate::runner::Snapshot;

/// The answer formats of `/query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueryFormat {
    /// A table drawn in text.
    Text,
    /// One JSON object per row, one per line.
    Json,
    /// CSV with a header line.
    Csv,
    /// An Arrow IPC stream.
    ArrowIpc,
    /// A Parquet file.
    Parquet,
}

impl QueryFormat {
    /// Reads a format name.
    pub fn new(name: &str) -> Result<Self, String> {
        match name {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            "csv" => Ok(Self::Csv),
            "arrow_ipc" => Ok(Self::ArrowIpc),
            "parquet" => Ok(Self::Parquet),
            other => Err(format!(
                "unknown query format '{other}' (text, json, csv, arrow_ipc, parquet)"
            )),
        }
    }

    /// The HTTP content type of an answer.
    pub fn content_type(&self) -> &'static str {
        match self {
            Self::Text => "text/plain; charset=utf-8",
            Self::Json => "application/x-ndjson",
            Self::Csv => "text/csv",
            Self::ArrowIpc => "application/vnd.apache.arrow.stream",
            Self::Parquet => "application/vnd.apache.parquet",
        }
    }
}

/// Runs `sql` over `snapshot`; an error is DataFusion's message.
pub async fn run(
    snapshot: Snapshot,
    sql: &str,
) -> Result<(Vec<RecordBatch>, Arc<datafusion::arrow::datatypes::Schema>), String> {
    let config = SessionConfig::new()
        .with_target_partitions(1)
        .set_bool(
            "datafusion.execution.parquet.schema_force_view_types",
            false,
        )
        .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false);
    let ctx = SessionContext::new_with_config(config);
    for (name, schema, rows) in snapshot {
        let table = MemTable::try_new(schema, vec![vec![rows]]).map_err(|e| e.strip_backtrace())?;
        ctx.register_table(name.as_str(), Arc::new(table))
            .map_err(|e| e.strip_backtrace())?;
    }
    let df = ctx.sql(sql).await.map_err(|e| e.strip_backtrace())?;
    let schema = Arc::new(df.schema().as_arrow().clone());
    let batches = df.collect().await.map_err(|e| e.strip_backtrace())?;
    Ok((batches, schema))
}

/// Writes an answer in `format`.
pub fn encode(
    format: QueryFormat,
    schema: &Arc<datafusion::arrow::datatypes::Schema>,
    batches: &[RecordBatch],
) -> Result<Vec<u8>, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    match format {
        QueryFormat::Text => {
            let mut text = pretty_format_batches(batches)
                .map_err(|e| err(&e))?
                .to_string();
            text.push('\n');
            Ok(text.into_bytes())
        }
        QueryFormat::Json => {
            let mut out = Vec::new();
            for b in batches {
                for row in eddy_io::json::encode_rows(b)? {
                    out.extend_from_slice(row.to_string().as_bytes());
                    out.push(b'\n');
                }
            }
            Ok(out)
        }
        QueryFormat::Csv => {
            let batch =
                datafusion::arrow::compute::concat_batches(schema, batches).map_err(|e| err(&e))?;
            Ok(eddy_io::csv::encode(&batch, true)?.into_bytes())
        }
        QueryFormat::ArrowIpc => {
            let mut out = Vec::new();
            let mut w = StreamWriter::try_new(&mut out, schema).map_err(|e| err(&e))?;
            for b in batches {
                w.write(b).map_err(|e| err(&e))?;
            }
            w.finish().map_err(|e| err(&e))?;
            drop(w);
            Ok(out)
        }
        QueryFormat::Parquet => {
            let mut out = Vec::new();
            let mut w = parquet::arrow::ArrowWriter::try_new(&mut out, Arc::clone(schema), None)
                .map_err(|e| err(&e))?;
            for b in batches {
                w.write(b).map_err(|e| err(&e))?;
            }
            w.close().map_err(|e| err(&e))?;
            Ok(out)
        }
    }
}
