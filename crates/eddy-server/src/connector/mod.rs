//! Connectors declared in SQL: `WITH ('connectors' = '[…]')` on a table
//! (inputs) or a view (outputs), each
//! `{"name"?, "transport": {"name", "config"}, "format"?: {"name", "config"}}`.
//!
//! Inputs run on their own threads and hand parsed changes to the
//! pipeline's [`Feeder`], which slows them down when its buffer is full and
//! stops them when the pipeline stops. Outputs are [`Sink`]s the worker
//! writes each step's change to.

pub mod access;
pub mod datagen;
pub mod file;
pub mod kafka;
pub mod kafka_epochs;
pub mod nexmark;
pub mod parquet;
pub mod parquet_sink;
pub mod url;

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use eddy_sql::Program;
use serde_json::{json, Value};

use crate::format::{InputFormat, OutputFormat};
use crate::input::{parse_piece, Chunker, Piece};
use crate::runner::{Feeder, Origin, Sink};
use crate::stats::EndpointStats;
pub use access::FileAccess;

/// Transports that feed tables.
const INPUTS: &[&str] = &[
    "file_input",
    "url_input",
    "datagen",
    "kafka_input",
    "nexmark",
];
/// Transports that drain views.
const OUTPUTS: &[&str] = &["file_output", "kafka_output"];

/// One connector of a program.
#[derive(Debug, Clone)]
pub struct ConnectorSpec {
    /// The table it feeds or the view it drains.
    pub relation: String,
    /// Its name (given, or `relation.transport-i`).
    pub name: String,
    /// Input (on a table) or output (on a view).
    pub input: bool,
    /// Transport name.
    pub transport: String,
    /// Transport settings.
    pub config: Value,
    /// The `format` object, if any.
    pub format: Option<Value>,
}

impl ConnectorSpec {
    /// The connector as written, for pipeline descriptors.
    pub fn to_json(&self) -> Value {
        json!({
            "stream": self.relation,
            "transport": {"name": self.transport, "config": self.config},
            "format": self.format,
        })
    }

    /// The name of its format (`"format": {"name": …}`), if one is given.
    pub fn format_name(&self) -> Option<&str> {
        self.format.as_ref()?.get("name")?.as_str()
    }

    /// A string setting of the transport.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.config.get(key).and_then(Value::as_str)
    }

    /// A required string setting of the transport.
    pub fn required(&self, key: &str) -> Result<&str, String> {
        self.string(key).ok_or_else(|| {
            format!(
                "transport '{}' needs \"{key}\" in its config",
                self.transport
            )
        })
    }
}

fn parse_list(
    relation: &str,
    input: bool,
    options: &[(String, String)],
    files: &FileAccess,
    out: &mut Vec<ConnectorSpec>,
) -> Result<(), String> {
    let Some((_, text)) = options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("connectors"))
    else {
        return Ok(());
    };
    let list: Vec<Value> = serde_json::from_str(text)
        .map_err(|e| format!("connectors of '{relation}': not a JSON array of connectors: {e}"))?;
    for (i, c) in list.into_iter().enumerate() {
        let transport = c
            .get("transport")
            .ok_or_else(|| format!("connector {i} of '{relation}' has no \"transport\""))?;
        let tname = transport
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("connector {i} of '{relation}': transport needs a \"name\""))?;
        let allowed = if input { INPUTS } else { OUTPUTS };
        if !allowed.contains(&tname) {
            return Err(format!(
                "connector {i} of '{relation}': transport '{tname}' cannot be used on a {} (use one of: {})",
                if input { "table" } else { "view" },
                allowed.join(", ")
            ));
        }
        let name = c
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("{relation}.{tname}-{i}"));
        let spec = ConnectorSpec {
            relation: relation.to_string(),
            name,
            input,
            transport: tname.to_string(),
            config: transport
                .get("config")
                .cloned()
                .unwrap_or_else(|| json!({})),
            format: c.get("format").cloned(),
        };
        validate(&spec, files).map_err(|e| format!("connector '{}': {e}", spec.name))?;
        out.push(spec);
    }
    Ok(())
}

fn validate(spec: &ConnectorSpec, files: &FileAccess) -> Result<(), String> {
    if !spec.input && parquet::wanted(spec) {
        if spec.transport != "file_output" {
            return Err("the parquet format is written by file_output only".into());
        }
    } else if spec.input && parquet::wanted(spec) {
        if spec.transport != "file_input" {
            return Err("the parquet format is read by file_input only".into());
        }
        if spec.config.get("follow").and_then(Value::as_bool) == Some(true) {
            return Err("a Parquet file cannot be followed (its index is at its end)".into());
        }
    } else if crate::avro::wanted(spec) {
        if !matches!(spec.transport.as_str(), "kafka_input" | "kafka_output") {
            return Err("the avro format is read and written by Kafka connectors only".into());
        }
        crate::avro::AvroConfig::new(spec)?;
    } else if spec.input {
        // Generators make typed rows: a format, if given, is not used.
        if !matches!(spec.transport.as_str(), "datagen" | "nexmark") {
            InputFormat::from_config(spec.format.as_ref())?;
        }
    } else {
        OutputFormat::from_config(spec.format.as_ref())?;
    }
    match spec.transport.as_str() {
        "file_input" | "file_output" => files.check(spec.required("path")?).map(|_| ()),
        "url_input" => spec.required("path").map(|_| ()),
        "kafka_input" | "kafka_output" => kafka::validate(spec, files),
        "datagen" => datagen::Plan::new(&spec.config).map(|_| ()),
        "nexmark" => nexmark::validate(spec),
        other => Err(format!("unknown transport '{other}'")),
    }
}

/// The connectors declared in a program, checked (file paths against
/// `files`).
pub fn specs(program: &Program, files: &FileAccess) -> Result<Vec<ConnectorSpec>, String> {
    let mut out = Vec::new();
    for t in &program.tables {
        parse_list(&t.name, true, &t.options, files, &mut out)?;
    }
    for v in &program.views {
        let first = out.len();
        parse_list(&v.name, false, &v.options, files, &mut out)?;
        // An Avro output needs an Avro type for every column of its view.
        if out[first..].iter().any(crate::avro::wanted) {
            crate::avro::schema_of(v.schema.fields())
                .map_err(|e| format!("view '{}': Avro output: {e}", v.name))?;
        }
    }
    // Two outputs writing one file (or one Parquet folder) would mangle it.
    let mut paths: Vec<&str> = out
        .iter()
        .filter(|c| c.transport == "file_output")
        .filter_map(|c| c.string("path"))
        .collect();
    paths.sort_unstable();
    if let Some(w) = paths.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two outputs write '{}'", w[0]));
    }
    let mut names: Vec<&str> = out.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two connectors are named '{}'", w[0]));
    }
    nexmark::group(&out)?;
    Ok(out)
}

/// Opens an output connector of a view with `columns`. `resume` is the
/// checkpoint folder the pipeline resumes from and the output's position
/// there (a file is cut back to it; held-back Kafka output is sent);
/// `exactly_once` is the pipeline's fault tolerance model.
pub fn open_output(
    spec: &ConnectorSpec,
    pipeline: &str,
    files: &FileAccess,
    resume: Option<(&Path, &Value)>,
    exactly_once: bool,
    columns: &datafusion::arrow::datatypes::Fields,
) -> Result<Box<dyn Sink>, String> {
    if parquet::wanted(spec) {
        let dir = files.resolve(spec.required("path")?)?;
        return Ok(Box::new(parquet_sink::ParquetSink::open(
            &dir,
            resume.map(|(_, p)| p),
        )?));
    }
    if crate::avro::wanted(spec) {
        return Ok(Box::new(kafka::KafkaSink::open(
            spec,
            kafka::Encoding::Avro(Box::new(crate::avro::AvroEncoder::new(
                crate::avro::AvroConfig::new(spec)?,
                &kafka::topics(spec).into_iter().next().unwrap_or_default(),
                columns,
            )?)),
            pipeline,
            files,
            exactly_once,
            resume,
        )?));
    }
    let format = OutputFormat::from_config(spec.format.as_ref())?;
    match spec.transport.as_str() {
        "file_output" => Ok(Box::new(file::FileSink::open(
            &files.resolve(spec.required("path")?)?,
            format,
            resume.map(|(_, p)| p),
        )?)),
        "kafka_output" => Ok(Box::new(kafka::KafkaSink::open(
            spec,
            kafka::Encoding::Text(format),
            pipeline,
            files,
            exactly_once,
            resume,
        )?)),
        other => Err(format!("'{other}' is not an output transport")),
    }
}

/// Starts an input connector's thread (none for a connector another one
/// runs: the nexmark generator is run by the `bid` table's connector for
/// all three of the program's `connectors`). `position` is where the state
/// the pipeline resumes holds its input up to (`{}`: nothing yet; the
/// connector starts where its config says, ignoring whatever a Kafka group
/// committed); `None` starts it as configured.
pub fn start_input(
    spec: &ConnectorSpec,
    connectors: &[ConnectorSpec],
    feeder: Arc<Feeder>,
    pipeline: &str,
    files: &FileAccess,
    position: Option<&Value>,
) -> Result<Option<JoinHandle<()>>, String> {
    let stats = feeder.stats.input(&spec.name, &spec.relation);
    let spec = spec.clone();
    let run: Box<dyn FnOnce() + Send> = match spec.transport.as_str() {
        "file_input" => {
            let source = file::FileSource::open(&spec, files, position)?;
            Box::new(move || source.run(&spec, &feeder, &stats))
        }
        "url_input" => {
            let source = url::UrlSource::new(&spec, position)?;
            Box::new(move || source.run(&spec, &feeder, &stats))
        }
        "datagen" => {
            let schema = Arc::clone(feeder.schema(&spec.relation).map_err(|e| e.to_string())?);
            let plan = datagen::Plan::new(&spec.config)?;
            let from = position
                .and_then(|p| p.get("rows"))
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Box::new(move || plan.run(&spec, &schema, &feeder, &stats, from))
        }
        "kafka_input" => {
            let source = kafka::KafkaSource::open(&spec, pipeline, files, position)?;
            Box::new(move || source.run(&spec, &feeder, &stats))
        }
        "nexmark" if nexmark::table_of(&spec)? == nexmark::Table::Bid => {
            let source = nexmark::Source::open(connectors, &feeder, position)?;
            Box::new(move || source.run(&feeder))
        }
        "nexmark" => return Ok(None),
        other => return Err(format!("'{other}' is not an input transport")),
    };
    std::thread::Builder::new()
        .name(format!("eddy-{pipeline}-in"))
        .spawn(run)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// Waits while the pipeline is paused; false once it is stopping.
pub fn wait_while_paused(feeder: &Feeder) -> bool {
    while feeder.is_paused() {
        if feeder.is_stopping() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !feeder.is_stopping()
}

/// Parses a piece and hands it to the pipeline; false once the pipeline
/// is stopping. Rejected rows are counted and logged.
pub fn feed_piece(
    spec: &ConnectorSpec,
    format: &InputFormat,
    piece: Piece,
    feeder: &Feeder,
    stats: &EndpointStats,
    origin: Origin,
) -> bool {
    let Ok(schema) = feeder.schema(&spec.relation) else {
        return false;
    };
    let (changes, errors) = parse_piece(format, piece, schema, stats);
    for e in errors.iter().take(10) {
        tracing::warn!(connector = %spec.name, "rejected input: {e}");
    }
    if !wait_while_paused(feeder) {
        return false;
    }
    feeder
        .feed_blocking(&spec.relation, changes, origin)
        .is_ok()
}

/// How far a byte stream input has read: the byte offset of the next
/// piece and the stream line it starts on. Recorded as
/// `{"offset": n, "line": l}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamPosition {
    /// Bytes of the stream before the next piece.
    pub offset: u64,
    /// The stream line of the next piece, counting from 1.
    pub line: usize,
}

impl StreamPosition {
    /// The position recorded in a checkpoint (the start when none).
    pub fn from_value(v: Option<&Value>) -> Self {
        let get = |k: &str| v.and_then(|v| v.get(k)).and_then(Value::as_u64);
        Self {
            offset: get("offset").unwrap_or(0),
            line: get("line").map_or(1, |l| l as usize),
        }
    }

    fn to_value(self) -> Value {
        json!({"offset": self.offset, "line": self.line})
    }
}

/// Reads a byte stream, positioned at `start`, into the pipeline, in
/// pieces of whole lines: to its end, or with `follow`, on past it (waiting
/// for more) until the pipeline stops. Each piece carries the position
/// after it. Returns false if the pipeline stopped first.
pub fn feed_stream(
    spec: &ConnectorSpec,
    mut reader: impl std::io::Read,
    feeder: &Feeder,
    stats: &EndpointStats,
    follow: bool,
    start: StreamPosition,
) -> bool {
    let format = match InputFormat::from_config(spec.format.as_ref()) {
        Ok(f) if follow && !f.line_oriented() => {
            stats.error("a followed input must be line-oriented (not a JSON array)");
            return true;
        }
        Ok(f) => f,
        Err(e) => {
            stats.error(e);
            return true;
        }
    };
    let mut chunker = Chunker::new(&format).at_line(start.line);
    let mut read = start.offset;
    // The position just after the piece cut last.
    let after = |chunker: &Chunker, read: u64| {
        let position = StreamPosition {
            offset: read - chunker.pending() as u64,
            line: chunker.next_line(),
        };
        Origin::at(&spec.name, position.to_value())
    };
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if feeder.is_stopping() {
            return false;
        }
        let piece = match reader.read(&mut buf) {
            Ok(0) if follow => {
                std::thread::sleep(Duration::from_millis(100));
                chunker.take_lines()
            }
            Ok(0) => break,
            Ok(n) => {
                read += n as u64;
                let piece = chunker.push(&buf[..n]);
                if chunker.line_too_long() {
                    stats.error(format!(
                        "a line is longer than {} bytes: the input stops here",
                        crate::input::MAX_LINE_BYTES
                    ));
                    return true;
                }
                piece
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => None,
            Err(e) if follow => {
                stats.error(e.to_string());
                std::thread::sleep(Duration::from_millis(500));
                None
            }
            Err(e) => {
                stats.error(e.to_string());
                break;
            }
        };
        if let Some(piece) = piece {
            let origin = after(&chunker, read);
            if !feed_piece(spec, &format, piece, feeder, stats, origin) {
                return false;
            }
        }
    }
    if let Some(piece) = chunker.finish() {
        let origin = after(&chunker, read);
        if !feed_piece(spec, &format, piece, feeder, stats, origin) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sql: &str) -> Result<Vec<ConnectorSpec>, String> {
        let dir = std::env::temp_dir().join(format!("eddy-specs-{}", std::process::id()));
        let files = FileAccess::new(&dir, &[]).unwrap();
        let program = Program::parse(sql).map_err(|e| e.to_string())?;
        let out = specs(&program, &files);
        let _ = std::fs::remove_dir_all(&dir);
        out
    }

    #[test]
    fn outputs_are_checked_against_their_views() {
        let out = |path: &str, format: &str| {
            format!(
                r#"[{{"transport": {{"name": "file_output", "config": {{"path": "{path}"}}}}, "format": {{"name": "{format}"}}}}]"#
            )
        };
        let two = format!(
            "CREATE TABLE t (x INT);
             CREATE VIEW a WITH ('connectors' = '{}') AS SELECT x FROM t;
             CREATE VIEW b WITH ('connectors' = '{}') AS SELECT x FROM t;",
            out("same", "parquet"),
            out("same", "parquet")
        );
        assert!(check(&two)
            .unwrap_err()
            .contains("two outputs write 'same'"));
        let apart = two.replacen("same", "other", 1);
        assert_eq!(check(&apart).unwrap().len(), 2);
        let kafka = r#"[{"transport": {"name": "kafka_output", "config": {"bootstrap.servers": "127.0.0.1:1", "topic": "t"}}, "format": {"name": "avro", "config": {}}}]"#;
        let interval = format!(
            "CREATE TABLE t (x INT);
             CREATE VIEW v WITH ('connectors' = '{kafka}') AS SELECT INTERVAL '1' DAY AS i FROM t;"
        );
        assert!(
            check(&interval).unwrap_err().contains("no Avro encoding"),
            "{interval}"
        );
    }
}
