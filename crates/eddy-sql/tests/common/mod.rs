//! The oracle: DataFusion executing a query in batch over tables' current
//! contents, and helpers to compare relations as multisets of rows.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::array_value_to_string;
use datafusion::datasource::MemTable;
use datafusion::prelude::{SessionConfig, SessionContext};

/// Runs `sql` in DataFusion over `tables` (name → rows).
#[allow(dead_code)] // not every test file uses the oracle
pub fn datafusion_rows(
    tables: &HashMap<String, RecordBatch>,
    sql: &str,
) -> Result<RecordBatch, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut config = SessionConfig::new().with_target_partitions(1);
        config.options_mut().sql_parser.map_string_types_to_utf8view = false;
        let ctx = SessionContext::new_with_config(config);
        for (name, batch) in tables {
            let table = MemTable::try_new(batch.schema(), vec![vec![batch.clone()]])
                .map_err(|e| e.to_string())?;
            ctx.register_table(name.as_str(), Arc::new(table))
                .map_err(|e| e.to_string())?;
        }
        let df = ctx.sql(sql).await.map_err(|e| e.to_string())?;
        let schema = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await.map_err(|e| e.to_string())?;
        datafusion::arrow::compute::concat_batches(&schema, &batches).map_err(|e| e.to_string())
    })
}

/// The rows of a batch as sorted strings (floats rounded to 6 decimals).
pub fn sorted_rows(batch: &RecordBatch) -> Vec<String> {
    let mut rows: Vec<String> = (0..batch.num_rows())
        .map(|r| {
            batch
                .columns()
                .iter()
                .map(|c| cell(c.as_ref(), r))
                .collect::<Vec<_>>()
                .join("|")
        })
        .collect();
    rows.sort();
    rows
}

fn cell(col: &dyn Array, row: usize) -> String {
    if col.is_null(row) {
        return "NULL".into();
    }
    let s = array_value_to_string(col, row).unwrap_or_else(|e| format!("<{e}>"));
    match col.data_type() {
        DataType::Float32 | DataType::Float64 => match s.parse::<f64>() {
            Ok(f) => format!("{f:.6}"),
            Err(_) => s,
        },
        _ => s,
    }
}

/// Checkpoints `pipeline` into a scratch folder and restores the
/// checkpoint into a new pipeline of the same program (a restart).
#[allow(dead_code)]
pub fn restarted(pipeline: eddy_sql::Pipeline, name: &str) -> eddy_sql::Pipeline {
    let dir = std::env::temp_dir().join(format!("eddy-restart-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    pipeline.checkpoint(&dir).unwrap();
    let program = pipeline.program().clone();
    drop(pipeline);
    let mut fresh = eddy_sql::Pipeline::new(program).unwrap();
    fresh.restore(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    fresh
}
