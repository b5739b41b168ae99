//! Ad-hoc queries: read-only SQL run by DataFusion over a consistent
//! snapshot of a pipeline's materialized tables and its views, answered as
//! text, JSON lines, CSV, Arrow IPC or Parquet.
//!
//! Everything that arrives here is hostile until checked:
//!
//! * the text is parsed and checked by Eddy first
//!   ([`eddy_sql::adhoc::check_query_text`]), on a thread whose stack fits
//!   the text: a statement nested deeper than
//!   [`eddy_sql::limits::MAX_DEPTH`], or one that is not a query, `EXPLAIN`,
//!   `SHOW TABLES|COLUMNS` or `DESCRIBE`, is refused before DataFusion sees
//!   it;
//! * DataFusion then plans it under [`SQLOptions`] that refuse DDL, DML,
//!   `COPY` and other statements (`SET`, `PREPARE`, transactions): the same
//!   rule, enforced on the plan;
//! * the session reaches no file or object store: its object store registry
//!   is empty, URL tables are off, and spilling to disk is disabled;
//! * execution has a memory pool and the answer a size bound (both
//!   [`QueryLimits::memory_bytes`]), functions whose results can outgrow
//!   their arguments are bounded ([`eddy_sql::bounded`]), and the whole
//!   query has a time limit; it
//!   runs on its own runtime, with stacks sized for checked SQL, so a slow
//!   query never holds up the API.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::common::ScalarValue;
use datafusion::datasource::{MemTable, TableProvider};
use datafusion::error::DataFusionError;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::GreedyMemoryPool;
use datafusion::execution::object_store::ObjectStoreRegistry;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::object_store::ObjectStore;
use datafusion::prelude::{SQLOptions, SessionConfig, SessionContext};
use eddy_sql::limits;
use futures::StreamExt;
use tokio::runtime::Runtime;

use crate::runner::{Rows, Snapshot};

mod keyed;

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
    /// Every format with its name.
    const NAMES: [(Self, &'static str); 5] = [
        (Self::Text, "text"),
        (Self::Json, "json"),
        (Self::Csv, "csv"),
        (Self::ArrowIpc, "arrow_ipc"),
        (Self::Parquet, "parquet"),
    ];

    /// Reads a format name.
    pub fn new(name: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(f, _)| *f)
            .ok_or_else(|| {
                format!("unknown query format '{name}' (text, json, csv, arrow_ipc, parquet)")
            })
    }

    /// The format's name, as a request gives it.
    pub fn name(&self) -> &'static str {
        Self::NAMES
            .iter()
            .find(|(f, _)| f == self)
            .map_or("", |(_, n)| n)
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

/// How much an ad-hoc query may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryLimits {
    /// Memory for execution (sorts, joins, aggregates) and, separately,
    /// for the answer.
    pub memory_bytes: usize,
    /// Wall-clock time from parsing to the last row.
    pub timeout: Duration,
    /// Longest query text.
    pub max_text_bytes: usize,
}

/// Why a query was not answered.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The query is wrong, not allowed, or too large: the client's mistake.
    #[error("{0}")]
    Invalid(String),
    /// The query ran past its time limit and was cancelled.
    #[error("the query ran longer than its limit of {0:?} and was cancelled")]
    Timeout(Duration),
    /// The query needed more memory than its limit.
    #[error("{0}")]
    Memory(String),
    /// A bug: the query task failed.
    #[error("the query failed inside the server: {0}")]
    Internal(String),
}

/// The runtime ad-hoc queries execute on, apart from the API's.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("eddy-query")
            .thread_stack_size(limits::SQL_STACK_BYTES)
            .enable_all()
            .build()
            .expect("the ad-hoc query runtime starts")
    })
}

/// An object store registry that has no stores and makes none: ad-hoc
/// queries read only the snapshot they are given.
#[derive(Debug)]
struct NoObjectStores;

impl ObjectStoreRegistry for NoObjectStores {
    fn register_store(
        &self,
        _url: &url::Url,
        _store: Arc<dyn ObjectStore>,
    ) -> Option<Arc<dyn ObjectStore>> {
        None
    }

    fn get_store(&self, url: &url::Url) -> datafusion::error::Result<Arc<dyn ObjectStore>> {
        datafusion::common::plan_err!("ad-hoc queries cannot read '{url}'")
    }
}

/// Read-only relations and functions that a caller adds to the session of
/// an ad-hoc query (the PostgreSQL door's `pg_catalog`): they are
/// registered after the snapshot's tables, and the query is still checked
/// and planned under the same rules.
pub trait SessionExtras: Send + Sync {
    /// Adjusts the session's configuration (its default catalog's name).
    fn configure(&self, config: SessionConfig) -> SessionConfig {
        config
    }

    /// Registers the extra tables and functions.
    fn register(&self, ctx: &SessionContext) -> datafusion::error::Result<()>;
}

/// A value for a `$n` placeholder.
#[derive(Debug, Clone)]
pub enum Param {
    /// A typed value.
    Value(ScalarValue),
    /// Text, converted to the type the query gives the placeholder (text
    /// when it gives none).
    Text(String),
}

/// An ad-hoc query and everything it reads.
pub struct Request {
    /// The tables and views it reads.
    pub snapshot: Snapshot,
    /// Its text.
    pub sql: String,
    /// Values of its `$1`, `$2`, … placeholders.
    pub params: Vec<Param>,
    /// Extra read-only relations and functions.
    pub extras: Option<Arc<dyn SessionExtras>>,
    /// Plan only: the answer has the schema and the placeholders' types
    /// but no rows.
    pub describe: bool,
}

impl Request {
    /// A query of `sql` over `snapshot`, without placeholders or extras.
    pub fn new(snapshot: Snapshot, sql: String) -> Self {
        Self {
            snapshot,
            sql,
            params: Vec::new(),
            extras: None,
            describe: false,
        }
    }
}

/// The answer to a [`Request`].
pub struct Answer {
    /// The rows (none when only described).
    pub batches: Vec<RecordBatch>,
    /// Their schema.
    pub schema: SchemaRef,
    /// The type of each placeholder `$1`, `$2`, … that the query implies
    /// (`None` when it implies none).
    pub param_types: Vec<Option<DataType>>,
}

/// Runs `sql` over `snapshot` within `limits`.
pub async fn run(
    snapshot: Snapshot,
    sql: String,
    limits: QueryLimits,
) -> Result<(Vec<RecordBatch>, SchemaRef), QueryError> {
    let answer = run_request(Request::new(snapshot, sql), limits).await?;
    Ok((answer.batches, answer.schema))
}

/// Runs (or only plans) a [`Request`] within `limits`: the same checks,
/// session and limits as [`run`].
pub async fn run_request(request: Request, limits: QueryLimits) -> Result<Answer, QueryError> {
    if request.sql.len() > limits.max_text_bytes {
        return Err(QueryError::Invalid(format!(
            "the query text has {} bytes; the limit is {}",
            request.sql.len(),
            limits.max_text_bytes
        )));
    }
    let task = runtime().spawn(async move {
        // Eddy's parser first: it refuses statements too deep to plan safely.
        let text = request.sql.clone();
        let checked = tokio::task::spawn_blocking(move || {
            limits::with_stack(limits::stack_for_text(text.len()), || {
                eddy_sql::adhoc::check_query_text(&text)
            })
        })
        .await
        .map_err(|e| QueryError::Internal(e.to_string()))?;
        checked.map_err(|e| QueryError::Invalid(e.to_string()))?;
        execute(request, limits.memory_bytes).await
    });
    let abort = task.abort_handle();
    match tokio::time::timeout(limits.timeout, task).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) if e.is_panic() => {
            let message = crate::error::panic_message(e.into_panic().as_ref());
            tracing::error!(error = %message, "ad-hoc query panicked");
            Err(QueryError::Internal(message))
        }
        Ok(Err(e)) => Err(QueryError::Internal(e.to_string())),
        Err(_) => {
            abort.abort();
            Err(QueryError::Timeout(limits.timeout))
        }
    }
}

fn session(
    memory_bytes: usize,
    extras: Option<&dyn SessionExtras>,
) -> Result<SessionContext, QueryError> {
    let mut config = SessionConfig::new()
        .with_target_partitions(1)
        .with_information_schema(true)
        .set_bool(
            "datafusion.execution.parquet.schema_force_view_types",
            false,
        )
        .set_bool("datafusion.sql_parser.map_string_types_to_utf8view", false)
        .set_usize("datafusion.sql_parser.recursion_limit", 256)
        // Places in the text for errors (`Column 'x' not found` at 1:8).
        .set_bool("datafusion.sql_parser.collect_spans", true);
    if let Some(extras) = extras {
        config = extras.configure(config);
    }
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(Arc::new(GreedyMemoryPool::new(memory_bytes)))
        .with_disk_manager_builder(
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled),
        )
        .with_object_store_registry(Arc::new(NoObjectStores))
        .build_arc()
        .map_err(|e| QueryError::Internal(e.strip_backtrace()))?;
    let ctx = SessionContext::new_with_config_rt(config, runtime);
    for f in eddy_sql::bounded::functions() {
        ctx.register_udf(f.as_ref().clone());
    }
    // Feldera's aggregates, as views have them.
    for f in eddy_sql::aggregates::functions(&ctx) {
        ctx.register_udaf(f.as_ref().clone());
    }
    Ok(ctx)
}

/// A query's failure: out of memory, or the query's own fault, said in
/// SQL's words and placed in `sql` (`2:8: Object 'x' not found`).
fn datafusion_error(e: DataFusionError, memory_bytes: usize, sql: &str) -> QueryError {
    match e.find_root() {
        DataFusionError::ResourcesExhausted(m) => QueryError::Memory(format!(
            "the query needs more than its memory limit of {} MiB: {m}",
            memory_bytes >> 20
        )),
        _ => QueryError::Invalid(eddy_sql::adhoc::query_error(&e, sql).to_string()),
    }
}

async fn execute(request: Request, memory_bytes: usize) -> Result<Answer, QueryError> {
    let ctx = session(memory_bytes, request.extras.as_deref())?;
    let sql = request.sql.clone();
    let df_err = |e: DataFusionError| datafusion_error(e, memory_bytes, &sql);
    for (name, schema, rows) in request.snapshot {
        let table: Arc<dyn TableProvider> = match rows {
            Rows::Now(rows) => {
                Arc::new(MemTable::try_new(schema, vec![vec![rows]]).map_err(df_err)?)
            }
            Rows::Later(read) => Arc::new(keyed::table(&name, schema, read).map_err(df_err)?),
        };
        ctx.register_table(name.as_str(), table).map_err(df_err)?;
    }
    if let Some(extras) = &request.extras {
        extras.register(&ctx).map_err(df_err)?;
    }
    let read_only = SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let mut df = ctx
        .sql_with_options(&request.sql, read_only)
        .await
        .map_err(|e| {
            let e = df_err(e);
            match e {
                QueryError::Invalid(m) if m.contains(" not supported: ") => {
                    QueryError::Invalid(format!("{}: {m}", eddy_sql::adhoc::READ_ONLY))
                }
                other => other,
            }
        })?;
    let param_types = placeholder_types(df.logical_plan()).map_err(df_err)?;
    if !request.params.is_empty() || !param_types.is_empty() {
        if request.describe && request.params.is_empty() {
            let schema = Arc::new(df.schema().as_arrow().clone());
            return Ok(Answer {
                batches: Vec::new(),
                schema,
                param_types,
            });
        }
        if request.params.len() != param_types.len() {
            return Err(QueryError::Invalid(format!(
                "the query has {} placeholder(s) but {} value(s) were given",
                param_types.len(),
                request.params.len()
            )));
        }
        let values = request
            .params
            .into_iter()
            .zip(&param_types)
            .enumerate()
            .map(|(i, (p, t))| match p {
                Param::Value(v) => Ok(v),
                Param::Text(text) => match t {
                    Some(t) if *t != DataType::Null => ScalarValue::try_from_string(text, t)
                        .map_err(|e| {
                            QueryError::Invalid(format!(
                                "the value of ${} is not a {t}: {}",
                                i + 1,
                                e.strip_backtrace()
                            ))
                        }),
                    _ => Ok(ScalarValue::Utf8(Some(text))),
                },
            })
            .collect::<Result<Vec<_>, _>>()?;
        df = df.with_param_values(values).map_err(df_err)?;
    }
    let schema = Arc::new(df.schema().as_arrow().clone());
    if request.describe {
        return Ok(Answer {
            batches: Vec::new(),
            schema,
            param_types,
        });
    }
    let mut stream = df.execute_stream().await.map_err(df_err)?;
    let mut batches = Vec::new();
    let mut bytes = 0usize;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(df_err)?;
        bytes += answer_bytes(&batch);
        if bytes > memory_bytes {
            return Err(QueryError::Memory(format!(
                "the answer is larger than the query memory limit of {} MiB; \
                 narrow the query or add a LIMIT",
                memory_bytes >> 20
            )));
        }
        batches.push(batch);
    }
    Ok(Answer {
        batches,
        schema,
        param_types,
    })
}

/// The bytes an answer's batch holds: its rows' share of its buffers. A
/// batch sliced from a larger one (a LIMIT, a scan's chunk) shares its
/// buffers, whose whole capacity counted once per slice would be many
/// times what the answer holds.
fn answer_bytes(batch: &RecordBatch) -> usize {
    batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| c.get_array_memory_size())
        })
        .sum()
}

/// The types of a plan's placeholders `$1`, `$2`, … in order; refuses
/// other placeholder names and gaps.
fn placeholder_types(
    plan: &datafusion::logical_expr::LogicalPlan,
) -> datafusion::error::Result<Vec<Option<DataType>>> {
    let found = plan.get_parameter_types()?;
    let mut types = vec![None; found.len()];
    for (id, t) in found {
        let n: usize = id
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=types.len()).contains(n))
            .ok_or_else(|| {
                DataFusionError::Plan(format!(
                    "placeholder {id} is not one of $1 to ${}",
                    types.len()
                ))
            })?;
        types[n - 1] = t;
    }
    Ok(types)
}

/// Longest cell of a text answer, in characters: drawing a table takes
/// time that grows faster than its cells' length, so longer values are cut
/// (the other formats carry them whole).
const MAX_TEXT_CELL: usize = 4096;

/// A batch's cells as text, each cut to [`MAX_TEXT_CELL`] characters.
fn text_cells(batch: &RecordBatch) -> Result<RecordBatch, ArrowError> {
    let options = FormatOptions::default();
    let mut fields = Vec::with_capacity(batch.num_columns());
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        let formatter = ArrayFormatter::try_new(column.as_ref(), &options)?;
        let cells: StringArray = (0..column.len())
            .map(|i| {
                let cell = formatter.value(i).to_string();
                Some(match cell.char_indices().nth(MAX_TEXT_CELL) {
                    Some((cut, _)) => format!(
                        "{}… ({} more characters)",
                        &cell[..cut],
                        cell[cut..].chars().count()
                    ),
                    None => cell,
                })
            })
            .collect();
        fields.push(Field::new(field.name(), DataType::Utf8, true));
        columns.push(Arc::new(cells));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
}

/// Why an answer could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// The format cannot hold the answer's values (nested values in CSV, …).
    Shape(String),
    /// Written out, the answer would take more than the query memory limit.
    TooLarge(String),
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Shape(m) | Self::TooLarge(m) => f.write_str(m),
        }
    }
}

/// Memory a text table takes per cell beyond its characters while it is
/// drawn (the table library keeps each cell as a styled object, then pads
/// it into lines).
const TEXT_CELL_OVERHEAD: usize = 160;

/// Writes an answer in `format`, refusing to make more than `max_bytes`
/// (the query's memory limit): an answer that is small as Arrow arrays can
/// be many times larger as text or JSON, and it is built in memory.
pub fn encode(
    format: QueryFormat,
    schema: &Arc<datafusion::arrow::datatypes::Schema>,
    batches: &[RecordBatch],
    max_bytes: usize,
) -> Result<Vec<u8>, EncodeError> {
    let err = |e: &dyn std::fmt::Display| EncodeError::Shape(e.to_string());
    // A VARIANT is answered as its JSON text, in every format.
    let shown = batches
        .iter()
        .map(eddy_io::variant::arrow::batch_as_text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(&e))?;
    let batches = shown.as_slice();
    let shown_schema = Arc::new(datafusion::arrow::datatypes::Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| {
                f.as_ref()
                    .clone()
                    .with_data_type(eddy_io::variant::arrow::text_type(f.data_type()))
            })
            .collect::<Vec<_>>(),
    ));
    let schema = &shown_schema;
    let too_large = || {
        EncodeError::TooLarge(format!(
            "the answer takes more than the query memory limit of {} MiB in this format; \
             narrow the query, add a LIMIT, or ask for arrow_ipc or parquet",
            max_bytes >> 20
        ))
    };
    let check = |out: &Vec<u8>| {
        if out.len() > max_bytes {
            Err(too_large())
        } else {
            Ok(())
        }
    };
    match format {
        QueryFormat::Text => {
            let mut cost = 0usize;
            let mut cells: Vec<RecordBatch> = Vec::with_capacity(batches.len());
            for b in batches {
                let c = text_cells(b).map_err(|e| err(&e))?;
                cost = cost.saturating_add(
                    c.get_array_memory_size() + c.num_rows() * c.num_columns() * TEXT_CELL_OVERHEAD,
                );
                if cost.saturating_mul(2) > max_bytes {
                    return Err(too_large());
                }
                cells.push(c);
            }
            let mut text = pretty_format_batches(&cells)
                .map_err(|e| err(&e))?
                .to_string();
            text.push('\n');
            Ok(text.into_bytes())
        }
        QueryFormat::Json => {
            let mut out = Vec::new();
            for b in batches {
                for row in eddy_io::json::encode_rows(b).map_err(|e| err(&e))? {
                    out.extend_from_slice(row.to_string().as_bytes());
                    out.push(b'\n');
                }
                check(&out)?;
            }
            Ok(out)
        }
        QueryFormat::Csv => {
            let mut out = Vec::new();
            for (i, b) in batches.iter().enumerate() {
                let text = eddy_io::csv::encode(b, i == 0).map_err(|e| err(&e))?;
                out.extend_from_slice(text.as_bytes());
                check(&out)?;
            }
            if batches.is_empty() {
                let empty = RecordBatch::new_empty(Arc::clone(schema));
                let text = eddy_io::csv::encode(&empty, true).map_err(|e| err(&e))?;
                out.extend_from_slice(text.as_bytes());
            }
            Ok(out)
        }
        QueryFormat::ArrowIpc => {
            let mut out = Vec::new();
            let mut w = StreamWriter::try_new(&mut out, schema).map_err(|e| err(&e))?;
            for b in batches {
                w.write(b).map_err(|e| err(&e))?;
                if w.get_ref().len() > max_bytes {
                    return Err(too_large());
                }
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
                if w.bytes_written() + w.in_progress_size() > max_bytes {
                    return Err(too_large());
                }
            }
            w.close().map_err(|e| err(&e))?;
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    #[test]
    fn a_sliced_answer_counts_its_rows_not_the_buffers_it_shares() {
        let column: ArrayRef = Arc::new(Int64Array::from_iter_values(0..1_000_000));
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let whole = RecordBatch::try_new(schema, vec![column]).unwrap();
        assert_eq!(answer_bytes(&whole), 8_000_000);
        // A thousand slices of a thousand rows hold the million rows'
        // buffer between them, once.
        let sum: usize = (0..1000)
            .map(|i| answer_bytes(&whole.slice(i * 1000, 1000)))
            .sum();
        assert_eq!(sum, 8_000_000);
        assert!(whole.slice(0, 1000).get_array_memory_size() >= 8_000_000);
    }
}
