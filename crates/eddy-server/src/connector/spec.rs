//! Connectors as a program declares them: each read once into a
//! [`ConnectorSpec`] (Feldera's generic attributes, the format, the
//! transport's typed configuration from the [`TRANSPORTS`] registry),
//! checked against its table's or view's columns, and the program's list
//! checked as a whole (two outputs writing one file, two connectors of one
//! name).

use std::sync::Arc;

use datafusion::arrow::datatypes::Fields;
use eddy_io::format::{FormatConfig, FormatKind, InputFormat, OutputFormat};
use eddy_sql::index::IndexDef;
use eddy_sql::{Program, SqlError};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{file, nexmark, s3, CheckContext, Direction, FileAccess, Transport, TRANSPORTS};

/// One connector of a program, read and checked.
#[derive(Debug, Clone)]
pub struct ConnectorSpec {
    /// The table it feeds or the view it drains.
    pub relation: String,
    /// Its name (given, or `relation.transport-i`).
    pub name: String,
    /// Input (on a table) or output (on a view).
    pub input: bool,
    /// Its transport's name.
    pub transport: &'static str,
    /// Its transport's configuration.
    pub config: Arc<dyn Transport>,
    /// Its format, for transports that carry one (JSON when none is
    /// given).
    pub format: Option<FormatConfig>,
    /// The view's key it writes by (`"index"`, a `CREATE INDEX`).
    pub index: Option<IndexDef>,
    /// The transport and format as written, echoed back to clients.
    written: Value,
}

/// A connector as written: Feldera's generic attributes, the transport and
/// the format (read by [`FormatConfig`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    name: Option<String>,
    transport: WrittenTransport,
    format: Option<Value>,
    #[serde(default)]
    paused: bool,
    #[serde(default)]
    labels: Vec<String>,
    start_after: Option<Value>,
    // Buffer sizes: Eddy bounds what is queued with the pipeline's one
    // input buffer, so these hints are accepted and not needed.
    #[serde(rename = "max_queued_records")]
    _max_queued_records: Option<u64>,
    #[serde(rename = "max_queued_bytes")]
    _max_queued_bytes: Option<u64>,
    #[serde(rename = "max_batch_size")]
    _max_batch_size: Option<u64>,
    #[serde(rename = "max_worker_batch_size")]
    _max_worker_batch_size: Option<u64>,
    index: Option<String>,
    #[serde(default)]
    send_snapshot: bool,
    #[serde(default)]
    soft_delete: bool,
    #[serde(default)]
    enable_output_buffer: bool,
    max_output_buffer_time_millis: Option<u64>,
    max_output_buffer_size_records: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WrittenTransport {
    name: String,
    #[serde(default)]
    config: Value,
}

impl Written {
    /// Refuses Feldera's attributes that Eddy does not carry out yet:
    /// taking them silently would start a connector that should wait, or
    /// write what the user asked not to.
    fn refuse_unsupported(&self) -> Result<(), String> {
        let not_yet = |what: &str| Err(format!("{what} is not supported yet"));
        if self.paused {
            return not_yet("\"paused\": true (connectors start with their pipeline)");
        }
        if self.start_after.is_some() {
            return not_yet("\"start_after\" (connector orchestration)");
        }
        if self.send_snapshot {
            return not_yet("\"send_snapshot\"");
        }
        if self.soft_delete {
            return not_yet("\"soft_delete\"");
        }
        if self.enable_output_buffer
            || self.max_output_buffer_time_millis.is_some()
            || self.max_output_buffer_size_records.is_some()
        {
            return not_yet("the output buffer");
        }
        Ok(())
    }
}

impl ConnectorSpec {
    /// The connector as written, for pipeline descriptors.
    pub fn to_json(&self) -> Value {
        self.written.clone()
    }

    /// Its transport's typed configuration.
    pub fn config<T: 'static>(&self) -> Option<&T> {
        // Through the `dyn Transport`: the `Arc` is an `Any` of its own.
        (*self.config).as_any().downcast_ref()
    }

    /// How a byte stream of this connector is read.
    pub fn input_format(&self) -> Result<InputFormat, String> {
        match &self.format {
            Some(f) => f.text_input().map_err(|e| e.to_string()),
            None => Ok(InputFormat::default()),
        }
    }

    /// How this connector writes a view's changes as bytes.
    pub fn output_format(&self) -> Result<OutputFormat, String> {
        match &self.format {
            Some(f) => f.text_output().map_err(|e| e.to_string()),
            None => Ok(OutputFormat::default()),
        }
    }

    /// Its format's kind.
    pub fn format_kind(&self) -> Option<FormatKind> {
        self.format.as_ref().map(FormatConfig::kind)
    }

    /// Reads connector `index` of `relation` as written.
    pub(super) fn read(
        relation: &str,
        input: bool,
        number: usize,
        value: Value,
        indexes: &[IndexDef],
    ) -> Result<Self, String> {
        let written: Written = serde_json::from_value(value.clone())
            .map_err(|e| format!("connector {number} of '{relation}': {e}"))?;
        let tname = written.transport.name.as_str();
        let name = written
            .name
            .clone()
            .unwrap_or_else(|| format!("{relation}.{tname}-{number}"));
        let err = |e: String| format!("connector '{name}': {e}");
        written.refuse_unsupported().map_err(err)?;
        let direction = if input {
            Direction::Input
        } else {
            Direction::Output
        };
        let Some(entry) = TRANSPORTS.iter().find(|t| t.name == tname) else {
            return Err(err(format!("unknown transport '{tname}'")));
        };
        if entry.direction != direction {
            let allowed: Vec<&str> = TRANSPORTS
                .iter()
                .filter(|t| t.direction == direction)
                .map(|t| t.name)
                .collect();
            return Err(err(format!(
                "transport '{tname}' cannot be used on a {} (use one of: {})",
                if input { "table" } else { "view" },
                allowed.join(", ")
            )));
        }
        let config = (entry.read)(written.transport.config.clone())
            .map_err(|e| err(format!("transport '{tname}': {e}")))?;
        let format = match (&written.format, entry.formats.first()) {
            // A generator makes typed rows: a format, if given, is not used.
            (_, None) => None,
            (None, Some(_)) => None,
            (Some(f), Some(_)) => {
                let f = FormatConfig::from_value(f).map_err(|e| err(e.to_string()))?;
                if !entry.formats.contains(&f.kind()) {
                    let carried: Vec<&str> = entry.formats.iter().map(|k| k.name()).collect();
                    return Err(err(format!(
                        "transport '{tname}' does not carry the {} format (it carries {})",
                        f.kind().name(),
                        carried.join(", ")
                    )));
                }
                Some(f)
            }
        };
        if let Some(FormatConfig::Json(j)) = &format {
            if j.key_fields.is_some() && tname != "redis_output" {
                return Err(err(format!(
                    "\"key_fields\" of the json format is read by redis_output, not {tname}"
                )));
            }
        }
        let index = match &written.index {
            None => None,
            Some(_) if !entry.keyed => {
                return Err(err(format!(
                    "transport '{tname}' does not write by a key: \"index\" is not used by it"
                )))
            }
            Some(name) => {
                let Some(found) = indexes.iter().find(|i| i.name.eq_ignore_ascii_case(name)) else {
                    return Err(err(format!(
                        "\"index\": the program defines no index '{name}' (CREATE INDEX {name} ON {relation}(columns))"
                    )));
                };
                if found.view != relation {
                    return Err(err(format!(
                        "\"index\": index '{name}' is on view '{}', not '{relation}'",
                        found.view
                    )));
                }
                Some(found.clone())
            }
        };
        let mut echo = json!({
            "stream": relation,
            "transport": {"name": tname, "config": written.transport.config},
            "format": written.format,
        });
        if !written.labels.is_empty() {
            echo["labels"] = json!(written.labels);
        }
        if let Some(i) = &written.index {
            echo["index"] = json!(i);
        }
        Ok(Self {
            relation: relation.to_string(),
            name,
            input,
            transport: entry.name,
            config,
            format,
            index,
            written: echo,
        })
    }

    /// Checks the connector against its table's or view's `columns`.
    pub(super) fn check(&self, files: &FileAccess, columns: &Fields) -> Result<(), String> {
        let cx = CheckContext { files, columns };
        if let Some(format) = &self.format {
            format
                .check(columns)
                .map_err(|e| format!("connector '{}': {e}", self.name))?;
        }
        self.config
            .check(self, &cx)
            .map_err(|e| format!("connector '{}': {e}", self.name))
    }
}

/// A table's or view's connectors, as `parse_list` reads them.
struct Relation<'a> {
    name: &'a str,
    input: bool,
    options: &'a [(String, String)],
    columns: &'a Fields,
}

fn parse_list(
    relation: Relation<'_>,
    files: &FileAccess,
    indexes: &[IndexDef],
    out: &mut Vec<ConnectorSpec>,
) -> Result<(), String> {
    let Relation {
        name: relation,
        input,
        options,
        columns,
    } = relation;
    let Some((_, text)) = options
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("connectors"))
    else {
        return Ok(());
    };
    let list: Vec<Value> = serde_json::from_str(text)
        .map_err(|e| format!("connectors of '{relation}': not a JSON array of connectors: {e}"))?;
    for (i, c) in list.into_iter().enumerate() {
        let spec = ConnectorSpec::read(relation, input, i, c, indexes)?;
        spec.check(files, columns)?;
        out.push(spec);
    }
    Ok(())
}

/// The connectors declared in a program, checked (file paths against
/// `files`); the first error.
pub fn specs(program: &Program, files: &FileAccess) -> Result<Vec<ConnectorSpec>, String> {
    specs_placed(program, files).map_err(|mut errors| errors.remove(0).message)
}

/// [`specs`], with every table's and view's errors, each placed at the
/// statement that declares the connector.
pub fn specs_placed(
    program: &Program,
    files: &FileAccess,
) -> Result<Vec<ConnectorSpec>, Vec<SqlError>> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    let relations = program.tables.iter().map(|t| {
        let relation = Relation {
            name: &t.name,
            input: true,
            options: &t.options,
            columns: t.schema.fields(),
        };
        (relation, t.at)
    });
    let views = program.views.iter().map(|v| {
        let relation = Relation {
            name: &v.name,
            input: false,
            options: &v.options,
            columns: v.schema.fields(),
        };
        (relation, v.at)
    });
    for (relation, at) in relations.chain(views) {
        if let Err(e) = parse_list(relation, files, &program.indexes, &mut out) {
            let e = SqlError::new(e);
            errors.push(match at {
                Some(at) => e.or_at(at),
                None => e,
            });
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    every_target_once(&out).map_err(|e| vec![SqlError::new(e)])?;
    Ok(out)
}

/// Refuses two outputs of one file or object prefix, and two connectors of
/// one name.
fn every_target_once(out: &[ConnectorSpec]) -> Result<(), String> {
    // Two outputs writing one file (or one Parquet folder) would mangle it.
    let mut paths: Vec<&str> = out
        .iter()
        .filter_map(|c| c.config::<file::FileOutput>())
        .map(|f| f.path.as_str())
        .collect();
    paths.sort_unstable();
    if let Some(w) = paths.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two outputs write '{}'", w[0]));
    }
    let mut targets: Vec<String> = out
        .iter()
        .filter_map(|c| c.config::<s3::sink::S3Output>())
        .map(s3::sink::S3Output::target)
        .collect();
    targets.sort_unstable();
    if let Some(w) = targets.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two outputs write the objects under '{}'", w[0]));
    }
    let mut names: Vec<&str> = out.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two connectors are named '{}'", w[0]));
    }
    nexmark::group(out)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(sql: &str) -> Result<Vec<ConnectorSpec>, String> {
        // A folder per call: tests run in parallel, and each removes its own.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("eddy-specs-{}-{n}", std::process::id()));
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

    /// Keyed outputs need the view's key, named by a `CREATE INDEX` on
    /// their own view; other outputs refuse one.
    #[test]
    fn keyed_outputs_name_an_index_of_their_view() {
        let program = |connector: &str| {
            format!(
                "CREATE TABLE t (x INT NOT NULL);
                 CREATE VIEW v WITH ('connectors' = '[{connector}]') AS SELECT x FROM t;
                 CREATE VIEW w AS SELECT x FROM t;
                 CREATE INDEX vx ON v(x);
                 CREATE INDEX wx ON w(x);"
            )
        };
        let pg = |index: &str| {
            format!(
                r#"{{{index}"transport": {{"name": "postgres_output", "config": {{"uri": "postgres://u@127.0.0.1:1/db", "table": "v"}}}}}}"#
            )
        };
        assert!(check(&program(&pg("")))
            .unwrap_err()
            .contains("CREATE INDEX"));
        let keyed = check(&program(&pg(r#""index": "VX", "#))).unwrap();
        assert_eq!(keyed[0].index.as_ref().unwrap().columns, ["x"]);
        assert!(check(&program(&pg(r#""index": "wx", "#)))
            .unwrap_err()
            .contains("is on view 'w'"));
        assert!(check(&program(&pg(r#""index": "zz", "#)))
            .unwrap_err()
            .contains("no index 'zz'"));
        let file =
            r#"{"index": "vx", "transport": {"name": "file_output", "config": {"path": "o"}}}"#;
        assert!(check(&program(file))
            .unwrap_err()
            .contains("does not write by a key"));
        let redis = r#"{"transport": {"name": "redis_output", "config": {"connection_string": "redis://127.0.0.1:1/0"}}, "format": {"name": "json", "config": {"key_fields": ["nope"]}}}"#;
        assert!(check(&program(redis))
            .unwrap_err()
            .contains("no column 'nope'"));
        let stray = r#"{"transport": {"name": "file_output", "config": {"path": "o"}}, "format": {"name": "json", "config": {"key_fields": ["x"]}}}"#;
        assert!(check(&program(stray)).unwrap_err().contains("redis_output"));
    }

    /// Every level of a connector refuses what it does not know by name:
    /// the generic attributes, the transport, its configuration and the
    /// format; and a transport takes only the formats it carries.
    #[test]
    fn connectors_are_read_strictly() {
        let table = |connectors: &str| {
            check(&format!(
                "CREATE TABLE t (x INT) WITH ('connectors' = '{connectors}');"
            ))
        };
        let file = r#"{"name": "file_input", "config": {"path": "in.json"}}"#;
        assert_eq!(
            table(&format!(r#"[{{"transport": {file}}}]"#))
                .unwrap()
                .len(),
            1
        );
        let cases = [
            (format!(r#"[{{"transport": {file}, "max_queued_records": 10, "labels": ["a"]}}]"#), None),
            (format!(r#"[{{"transport": {file}, "buffer": 10}}]"#), Some("unknown field `buffer`")),
            (format!(r#"[{{"transport": {file}, "paused": true}}]"#), Some("not supported yet")),
            (format!(r#"[{{"transport": {file}, "start_after": ["a"]}}]"#), Some("start_after")),
            (r#"[{"transport": {"name": "file_input", "config": {"pth": "x"}}}]"#.to_string(), Some("unknown field `pth`")),
            (r#"[{"transport": {"name": "file_input", "config": {}}}]"#.to_string(), Some("missing field `path`")),
            (r#"[{"transport": {"name": "file_input", "config": ["in.json", true]}}]"#.to_string(), Some("must be an object")),
            (format!(r#"[{{"transport": {file}, "format": {{"name": "json", "config": ["raw"]}}}}]"#), Some("must be an object")),
            (r#"[{"transport": {"name": "s4_input", "config": {}}}]"#.to_string(), Some("unknown transport 's4_input'")),
            (r#"[{"transport": {"name": "file_output", "config": {"path": "x"}}}]"#.to_string(), Some("cannot be used on a table")),
            (format!(r#"[{{"transport": {file}, "format": {{"name": "avro"}}}}]"#), Some("does not carry the avro format")),
            (format!(r#"[{{"transport": {file}, "format": {{"name": "csv", "config": {{"headers": true}}}}}}]"#), Some("unknown field `headers`")),
            (r#"[{"transport": {"name": "file_input", "config": {"path": "x", "follow": true}}, "format": {"name": "json", "config": {"array": true}}}]"#.to_string(), Some("line-oriented")),
            (r#"[{"transport": {"name": "kafka_input", "config": {"bootstrap.servers": "h:1", "topic": "t", "include_headers": true}}}]"#.to_string(), Some("include_headers")),
            (r#"[{"transport": {"name": "datagen", "config": {"plan": [{"rows": 3}]}}}]"#.to_string(), Some("unknown field `rows`")),
        ];
        for (connectors, expected) in cases {
            match (table(&connectors), expected) {
                (Ok(_), None) => {}
                (Err(e), Some(want)) => assert!(e.contains(want), "{connectors}: {e}"),
                (got, want) => panic!("{connectors}: {got:?}, expected {want:?}"),
            }
        }
    }
}
