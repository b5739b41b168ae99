//! The `eddy` binary: `eddy serve` runs the server, `eddy check` validates
//! a program, `eddy run` runs one over change files.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::Schema;
use datafusion::arrow::util::pretty::pretty_format_batches;
use eddy_dbsp::ZSet;
use eddy_io::json::UpdateFormat;
use eddy_server::Limits;
use eddy_sql::{limits, Pipeline, Program};
use std::sync::Arc;

/// Eddy: SQL views kept up to date incrementally.
#[derive(Parser)]
#[command(name = "eddy", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the server: pipelines deployed and fed over a REST API
    /// (Feldera's /v0 shape), kept up to date as changes arrive.
    ///
    /// The log goes to standard error: by default Eddy's own lines at
    /// info (requests that change something or fail, programs accepted or
    /// refused, starts, stops, checkpoints, connector errors) and its
    /// libraries' warnings. EDDY_LOG, or else RUST_LOG, sets the filter
    /// (`debug`, `eddy_server=debug`, `warn,eddy_server::connector=debug`).
    /// Each pipeline's lines are also at GET /v0/pipelines/NAME/logs.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        bind: std::net::SocketAddr,
        /// Directory where pipeline definitions are kept across restarts.
        #[arg(long, default_value = "./eddy-data")]
        data_dir: PathBuf,
        /// Require `Authorization: Bearer <KEY>` on every endpoint but
        /// /healthz. Without one, anyone who reaches the address controls
        /// every pipeline: the server warns when it listens beyond loopback
        /// without a key.
        #[arg(long, env = "EDDY_API_KEY", hide_env_values = true)]
        api_key: Option<String>,
        /// A folder outside the data directory that file connectors may
        /// read and write (repeatable). Without one they use only
        /// DATA_DIR/files, where relative paths resolve.
        #[arg(long = "file-dir", value_name = "DIR")]
        file_dirs: Vec<PathBuf>,
        /// Also serve PostgreSQL's wire protocol on this address (psql,
        /// drivers, BI tools): user `eddy`, the API key as password,
        /// database = pipeline name. Off by default.
        #[arg(long, value_name = "ADDR")]
        pg_bind: Option<std::net::SocketAddr>,
        /// How log lines are written: `text`, or `json` (one object per
        /// line, for a log collector).
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = "EDDY_LOG_FORMAT")]
        log_format: LogFormat,
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Checks a program: prints errors with line:column (exit 1) or a
    /// summary of its tables, views and circuit (exit 0).
    Check {
        /// The SQL program (CREATE TABLE and CREATE VIEW statements).
        program: PathBuf,
    },
    /// Asks a running server whether it is up: exits 0 when URL/healthz
    /// answers 200 within the timeout, 1 otherwise (a container's health
    /// check: the image has no curl and its /bin/sh cannot open sockets).
    Health {
        /// The server's base address.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 5)]
        timeout_secs: u64,
    },
    /// Runs a program over change files, one step per file, and prints every
    /// view's final contents (or, with --changes, each step's changes).
    /// Rows that do not read are listed on standard error and left out;
    /// the exit status is then 2 (0 when every row was taken, 1 on an
    /// error).
    Run {
        /// The SQL program.
        program: PathBuf,
        /// TABLE=PATH: a change file for a table. `.json`: one
        /// {"insert": row} or {"delete": row} per line; `.csv`: rows to insert.
        #[arg(long = "input", value_name = "TABLE=PATH")]
        inputs: Vec<String>,
        /// Print each step's view changes instead of the final contents.
        #[arg(long)]
        changes: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
}

/// What one client may ask of the server.
#[derive(clap::Args)]
struct LimitArgs {
    /// Largest pipeline definition request body, in bytes.
    #[arg(long, default_value_t = Limits::default().max_body_bytes)]
    max_body_bytes: usize,
    /// Largest program text (and ad-hoc query text), in bytes.
    #[arg(long, default_value_t = Limits::default().max_program_bytes)]
    max_program_bytes: usize,
    /// Most pipelines the server holds.
    #[arg(long, default_value_t = Limits::default().max_pipelines)]
    max_pipelines: usize,
    /// Most egress streams open at once on one pipeline.
    #[arg(long, default_value_t = Limits::default().max_egress_streams)]
    max_egress_streams: usize,
    /// Memory of one ad-hoc query, in MiB, for pipelines without a memory
    /// budget (runtime_config.resources.memory_mb_max); those with one get
    /// a quarter of it.
    #[arg(long, default_value_t = Limits::default().query_memory_bytes >> 20)]
    query_memory_mb: usize,
    /// Time one ad-hoc query may run, in seconds.
    #[arg(long, default_value_t = Limits::default().query_timeout.as_secs())]
    query_timeout_secs: u64,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_body_bytes: self.max_body_bytes,
            max_program_bytes: self.max_program_bytes,
            max_pipelines: self.max_pipelines,
            max_egress_streams: self.max_egress_streams,
            query_memory_bytes: self.query_memory_mb.saturating_mul(1 << 20),
            query_timeout: std::time::Duration::from_secs(self.query_timeout_secs),
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Json,
    Csv,
    Table,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            bind,
            data_dir,
            api_key,
            file_dirs,
            pg_bind,
            log_format,
            limits,
        } => serve(
            log_format,
            eddy_server::ServerConfig {
                bind,
                data_dir,
                api_key: api_key.filter(|k| !k.is_empty()),
                limits: limits.limits(),
                file_dirs,
                pg_bind,
            },
        ),
        // Programs are checked on a thread whose stack fits their text
        // (see eddy_sql::limits).
        Command::Check { program } => {
            limits::with_stack(program_stack(&program), || check(&program))
        }
        Command::Health { url, timeout_secs } => health(&url, timeout_secs),
        Command::Run {
            program,
            inputs,
            changes,
            format,
        } => limits::with_stack(program_stack(&program), || {
            run(&program, &inputs, changes, format)
        }),
    };
    match result {
        Ok(code) => code,
        // A reader that stopped reading (`eddy check p.sql | head`) is not
        // an error of the program.
        Err(e)
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `eddy health`: GET URL/healthz.
fn health(url: &str, timeout_secs: u64) -> Result<ExitCode> {
    let url = format!("{}/healthz", url.trim_end_matches('/'));
    let agent = ureq::AgentBuilder::new()
        .timeout(std::time::Duration::from_secs(timeout_secs))
        .build();
    match agent.get(&url).call() {
        Ok(r) if r.status() == 200 => {
            writeln!(std::io::stdout(), "{url}: healthy")?;
            Ok(ExitCode::SUCCESS)
        }
        Ok(r) => {
            eprintln!("{url}: status {}", r.status());
            Ok(ExitCode::FAILURE)
        }
        Err(e) => {
            eprintln!("{url}: {e}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// The stack for checking the program in `path`.
fn program_stack(path: &Path) -> usize {
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    limits::stack_for_text(usize::try_from(len).unwrap_or(usize::MAX))
}

/// How the server's log lines are written.
#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// Eddy's own crates at info, the libraries' warnings: their info and
/// debug lines (DataFusion's planning, HTTP internals) say nothing a user
/// acts on.
const DEFAULT_LOG: &str =
    "warn,eddy=info,eddy_server=info,eddy_sql=info,eddy_dbsp=info,eddy_io=info";

/// Installs the log: lines on standard error in `format` (colours only
/// on a terminal) through a filter from EDDY_LOG or RUST_LOG (a wrong one
/// is reported and the default used), and each pipeline's lines kept for
/// its `/logs`.
fn init_logging(format: LogFormat) {
    use std::io::IsTerminal as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{fmt, EnvFilter, Layer as _};
    let given = ["EDDY_LOG", "RUST_LOG"]
        .iter()
        .find_map(|v| Some((*v, std::env::var(v).ok().filter(|s| !s.trim().is_empty())?)));
    let (filter, refused) = match given {
        None => (EnvFilter::new(DEFAULT_LOG), None),
        Some((var, text)) => match EnvFilter::try_new(&text) {
            Ok(f) => (f, None),
            Err(e) => (
                EnvFilter::new(DEFAULT_LOG),
                Some(format!("{var}={text:?}: {e}")),
            ),
        },
    };
    let lines = fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let lines = match format {
        LogFormat::Text => lines.boxed(),
        LogFormat::Json => lines.json().boxed(),
    };
    // A pipeline's own log keeps Eddy's lines at info whatever the
    // filter of standard error says.
    tracing_subscriber::registry()
        .with(lines.with_filter(filter))
        .with(eddy_server::logs::Capture.with_filter(EnvFilter::new(DEFAULT_LOG)))
        .init();
    if let Some(refused) = refused {
        tracing::warn!("the log filter {refused}; logging with the default ({DEFAULT_LOG})");
    }
}

fn serve(log_format: LogFormat, config: eddy_server::ServerConfig) -> Result<ExitCode> {
    init_logging(log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(eddy_server::serve(
        config,
        |addr| println!("eddy listening on http://{addr}"),
        shutdown_signal(),
    ))?;
    Ok(ExitCode::SUCCESS)
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}

/// The program in `path`, or every error in it as a compiler prints them
/// (the file, line and column, the line itself and a caret).
fn load(path: &Path) -> Result<std::result::Result<Program, String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let file = path.display().to_string();
    Ok(Program::check(&text).map_err(|errors| {
        let shown: Vec<String> = errors.iter().map(|e| e.snippet_in(&text, &file)).collect();
        let count = match errors.len() {
            1 => String::new(),
            n => format!("\n{n} errors"),
        };
        format!("{}{count}", shown.join("\n\n"))
    }))
}

/// A column as SQL declares it: its name, type and nullability.
fn columns(schema: &Schema) -> String {
    schema
        .fields()
        .iter()
        .map(|f| {
            let null = if f.is_nullable() { "" } else { " NOT NULL" };
            let ty = eddy_sql::castcheck::feldera_type(f.data_type());
            format!("{} {ty}{null}", f.name())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn check(path: &Path) -> Result<ExitCode> {
    let program = match load(path)? {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let pipeline = match Pipeline::new(program) {
        Ok(p) => p,
        Err(e) => {
            let text = std::fs::read_to_string(path)?;
            let e = eddy_sql::program::placed_in(&text, e);
            eprintln!("{}", e.snippet_in(&text, &path.display().to_string()));
            return Ok(ExitCode::FAILURE);
        }
    };
    let program = pipeline.program();
    writeln!(
        std::io::stdout(),
        "{} tables, {} views, {} circuit nodes",
        program.tables.len(),
        program.views.len(),
        pipeline.circuit().len()
    )?;
    for t in &program.tables {
        let pk: Vec<&str> = t
            .primary_key
            .iter()
            .map(|&i| t.schema.field(i).name().as_str())
            .collect();
        let pk = if pk.is_empty() {
            String::new()
        } else {
            format!(" primary key ({})", pk.join(", "))
        };
        writeln!(
            std::io::stdout(),
            "table {} ({}){pk}",
            t.name,
            columns(&t.schema)
        )?;
    }
    for v in &program.views {
        writeln!(
            std::io::stdout(),
            "view {} ({})",
            v.name,
            columns(&v.schema)
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn run(path: &Path, inputs: &[String], changes: bool, format: Format) -> Result<ExitCode> {
    let program = load(path)?.map_err(|e| anyhow!(e))?;
    let mut pipeline = Pipeline::new(program).map_err(|e| anyhow!("{}: {e}", path.display()))?;
    let views = pipeline.view_names();
    let mut rejected = 0usize;
    for (step, input) in inputs.iter().enumerate() {
        let (table, file) = input
            .split_once('=')
            .ok_or_else(|| anyhow!("--input wants TABLE=PATH, got '{input}'"))?;
        let table = table.to_lowercase();
        let schema = pipeline
            .program()
            .table(&table)
            .map(|t| Arc::clone(&t.schema))
            .ok_or_else(|| anyhow!("no table '{table}' in the program"))?;
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?;
        let parsed = match Path::new(file).extension().and_then(|e| e.to_str()) {
            Some("json") | Some("jsonl") | Some("ndjson") => {
                eddy_io::json::parse(&text, &schema, UpdateFormat::InsertDelete, false)
            }
            Some("csv") => eddy_io::csv::parse(&text, &schema, 1),
            _ => bail!("{file}: unknown format (use .json or .csv)"),
        };
        for e in &parsed.errors {
            eprintln!("{file}:{e}");
        }
        rejected += parsed.errors.len();
        pipeline
            .push(&table, parsed.changes)
            .map_err(|e| anyhow!("{e}"))?;
        pipeline
            .step()
            .map_err(|e| anyhow!("step {}: {e}", step + 1))?;
        if changes {
            for view in &views {
                let change = pipeline
                    .view_change(view)
                    .map_err(|e| anyhow!("{e}"))?
                    .consolidate()?;
                if change.is_empty() {
                    continue;
                }
                print_changes(step + 1, view, &change, format)?;
            }
        }
    }
    if inputs.is_empty() {
        pipeline.step().map_err(|e| anyhow!("{e}"))?;
    }
    if !changes {
        for view in &views {
            let rows = pipeline.view_rows(view).map_err(|e| anyhow!("{e}"))?;
            print_rows(view, &rows, format)?;
        }
    }
    if rejected > 0 {
        // The views were computed without them: a script must not take
        // that for success.
        eprintln!("{rejected} rows rejected");
        return Ok(ExitCode::from(2));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_rows(view: &str, rows: &RecordBatch, format: Format) -> Result<()> {
    match format {
        Format::Table => writeln!(
            std::io::stdout(),
            "{view}:\n{}",
            pretty_format_batches(std::slice::from_ref(rows))?
        )?,
        Format::Csv => write!(
            std::io::stdout(),
            "# {view}\n{}",
            eddy_io::csv::encode(rows, true).map_err(|e| anyhow!(e))?
        )?,
        Format::Json => {
            for row in eddy_io::json::encode_rows(rows).map_err(|e| anyhow!(e))? {
                writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::json!({ "view": view, "row": row })
                )?;
            }
        }
    }
    Ok(())
}

fn print_changes(step: usize, view: &str, change: &ZSet, format: Format) -> Result<()> {
    match format {
        Format::Json => {
            for c in eddy_io::json::encode_changes(change).map_err(|e| anyhow!(e))? {
                writeln!(
                    std::io::stdout(),
                    "{}",
                    serde_json::json!({ "step": step, "view": view, "change": c })
                )?;
            }
        }
        Format::Csv | Format::Table => {
            let with_weight = eddy_io::with_weight_column(change).map_err(|e| anyhow!(e))?;
            match format {
                Format::Csv => write!(
                    std::io::stdout(),
                    "# step {step} {view}\n{}",
                    eddy_io::csv::encode(&with_weight, true).map_err(|e| anyhow!(e))?
                )?,
                _ => writeln!(
                    std::io::stdout(),
                    "step {step} {view}:\n{}",
                    pretty_format_batches(&[with_weight])?
                )?,
            }
        }
    }
    Ok(())
}
