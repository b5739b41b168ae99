//! The Avro format of Kafka connectors, as Feldera configures it
//! (`"format": {"name": "avro", "config": {…}}`): Confluent's wire format
//! (a zero byte, the schema's 4-byte id in the registry, then the Avro
//! datum), with the writer's schema fetched from a schema registry by that
//! id, or given in the config (`schema`, with `skip_schema_id` for bare
//! datums).
//!
//! Input (`update_format` `raw`: each message a row to insert; `debezium`:
//! each message a Debezium change event with `before`, `after` and `op`)
//! is decoded into one JSON change per message and parsed by the JSON
//! parser of the table, so that Avro rows meet the same type checks and
//! error reports as JSON rows. Output (`raw`) writes one message per
//! change with an `op` header (`insert` or `delete`), its datum in a
//! schema generated from the view (every column nullable where the view's
//! is), registered under the subject `<topic>-value` when a registry is
//! configured.

use std::collections::HashMap;
use std::time::Duration;

use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value as Avro;
use apache_avro::Schema;
use chrono::{DateTime, NaiveDate, NaiveTime};
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Date32Array, Float32Array, Float64Array, Int16Array,
    Int32Array, Int64Array, Int8Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use datafusion::arrow::record_batch::RecordBatch;
use eddy_dbsp::ZSet;
use eddy_io::json::UpdateFormat;
use serde_json::{json, Map, Value};

use crate::connector::ConnectorSpec;

/// Whether a connector's format is Avro.
pub fn wanted(spec: &ConnectorSpec) -> bool {
    spec.format_name() == Some("avro")
}

/// A schema registry (Confluent's REST API: `GET /schemas/ids/{id}`,
/// `POST /subjects/{subject}/versions`).
#[derive(Debug, Clone)]
pub struct Registry {
    urls: Vec<String>,
    auth: Option<String>,
    timeout: Duration,
}

impl Registry {
    fn from_config(config: &Value) -> Result<Option<Self>, String> {
        let urls: Vec<String> = match config.get("registry_urls") {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(list)) => list
                .iter()
                .map(|u| {
                    let u = u.as_str().ok_or("'registry_urls' holds strings")?;
                    let parsed =
                        url::Url::parse(u).map_err(|e| format!("registry url '{u}': {e}"))?;
                    if !matches!(parsed.scheme(), "http" | "https") {
                        return Err(format!("registry url '{u}' is not http(s)"));
                    }
                    Ok(u.trim_end_matches('/').to_string())
                })
                .collect::<Result<_, String>>()?,
            Some(_) => return Err("'registry_urls' must be an array of URLs".into()),
        };
        if urls.is_empty() {
            return Ok(None);
        }
        let text = |k: &str| config.get(k).and_then(Value::as_str);
        let auth = match (
            text("registry_username"),
            text("registry_password"),
            text("registry_authorization_token"),
        ) {
            (Some(_), _, Some(_)) => {
                return Err(
                    "'registry_username' and 'registry_authorization_token' exclude each other"
                        .into(),
                )
            }
            (Some(user), password, None) => Some(format!(
                "Basic {}",
                base64(format!("{user}:{}", password.unwrap_or("")).as_bytes())
            )),
            (None, _, Some(token)) => Some(format!("Bearer {token}")),
            (None, _, None) => None,
        };
        let timeout = config
            .get("registry_timeout_secs")
            .and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
            .unwrap_or(10);
        Ok(Some(Self {
            urls,
            auth,
            timeout: Duration::from_secs(timeout.clamp(1, 300)),
        }))
    }

    /// Sends a request to each URL in turn until one answers.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut last = String::new();
        for base in &self.urls {
            let mut request = ureq::request(method, &format!("{base}{path}"))
                .timeout(self.timeout)
                .set(
                    "Accept",
                    "application/vnd.schemaregistry.v1+json, application/json",
                );
            if let Some(auth) = &self.auth {
                request = request.set("Authorization", auth);
            }
            let answer = match body {
                Some(b) => request
                    .set("Content-Type", "application/vnd.schemaregistry.v1+json")
                    .send_string(&b.to_string()),
                None => request.call(),
            };
            match answer {
                Ok(r) => {
                    return r
                        .into_string()
                        .map_err(|e| e.to_string())
                        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                        .map_err(|e| format!("schema registry {base}: {e}"))
                }
                Err(ureq::Error::Status(code, r)) => {
                    let text = r.into_string().unwrap_or_default();
                    last = format!("schema registry {base}{path}: {code} {}", text.trim());
                }
                Err(e) => last = format!("schema registry {base}: {e}"),
            }
        }
        Err(last)
    }

    fn schema(&self, id: u32) -> Result<Schema, String> {
        let answer = self.call("GET", &format!("/schemas/ids/{id}"), None)?;
        let text = answer
            .get("schema")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("schema registry: no schema in the answer for id {id}"))?;
        Schema::parse_str(text).map_err(|e| format!("schema {id} from the registry: {e}"))
    }

    fn register(&self, subject: &str, schema: &str) -> Result<u32, String> {
        let body = json!({"schema": schema});
        let answer = self.call(
            "POST",
            &format!("/subjects/{}/versions", url_segment(subject)),
            Some(&body),
        )?;
        answer
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| format!("schema registry: no id in the answer {answer}"))
    }
}

fn url_segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Refuses schemas that would let one message take the process down or
/// hold it: a type that contains itself (decoding recurses once per level,
/// and a message of a few bytes per level would exhaust the stack),
/// decimals wider than SQL's 38 digits (their text is as long as their
/// scale), and arrays of types that take no bytes (a count alone would
/// make millions of values out of nothing).
pub fn check_schema(schema: &Schema) -> Result<(), String> {
    let resolved = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
    let names = resolved.get_names();
    let mut open = Vec::new();
    check_node(schema, names, &mut open)
}

fn lookup<'a>(schema: &'a Schema, names: &HashMap<Name, &'a Schema>) -> Result<&'a Schema, String> {
    match schema {
        Schema::Ref { name } => names
            .get(name)
            .copied()
            .ok_or_else(|| format!("unknown Avro type {name}")),
        s => Ok(s),
    }
}

fn check_node<'a>(
    schema: &'a Schema,
    names: &HashMap<Name, &'a Schema>,
    open: &mut Vec<&'a Name>,
) -> Result<(), String> {
    match schema {
        Schema::Ref { name } => {
            if open.contains(&name) {
                return Err(format!(
                    "Avro type {name} contains itself: recursive schemas are not read"
                ));
            }
            open.push(name);
            let r = check_node(lookup(schema, names)?, names, open);
            open.pop();
            r
        }
        Schema::Record(r) => {
            open.push(&r.name);
            let result = r
                .fields
                .iter()
                .try_for_each(|f| check_node(&f.schema, names, open));
            open.pop();
            result
        }
        Schema::Union(u) => u
            .variants()
            .iter()
            .try_for_each(|v| check_node(v, names, open)),
        Schema::Array(a) => {
            if zero_width(&a.items, names, 0) {
                return Err("an Avro array of a type that takes no bytes is not read".into());
            }
            check_node(&a.items, names, open)
        }
        Schema::Map(m) => check_node(&m.types, names, open),
        Schema::Decimal(d) if d.precision > 38 || d.scale > 38 => Err(format!(
            "an Avro decimal of precision {} and scale {} is wider than SQL's 38 digits",
            d.precision, d.scale
        )),
        _ => Ok(()),
    }
}

/// Whether a value of `schema` can take no bytes at all.
fn zero_width(schema: &Schema, names: &HashMap<Name, &Schema>, depth: usize) -> bool {
    if depth > 64 {
        return false;
    }
    match lookup(schema, names) {
        Ok(Schema::Null) => true,
        Ok(Schema::Record(r)) => r
            .fields
            .iter()
            .all(|f| zero_width(&f.schema, names, depth + 1)),
        Ok(Schema::Fixed(f)) => f.size == 0,
        Ok(Schema::Enum(e)) => e.symbols.len() <= 1,
        _ => false,
    }
}

/// How long a schema id that failed to load is not asked for again.
const FAILED_LOOKUP_RETRY: Duration = Duration::from_secs(30);

/// A connector's Avro settings.
#[derive(Debug, Clone)]
pub struct AvroConfig {
    debezium: bool,
    /// The configured schema, parsed and as written (the registry is sent
    /// the text: the parsing canonical form would drop logical types).
    schema: Option<(Schema, String)>,
    skip_schema_id: bool,
    registry: Option<Registry>,
}

impl AvroConfig {
    /// Reads and checks `format.config` of an Avro connector.
    pub fn new(spec: &ConnectorSpec) -> Result<Self, String> {
        let config = spec
            .format
            .as_ref()
            .and_then(|f| f.get("config"))
            .cloned()
            .unwrap_or_else(|| json!({}));
        let debezium = match config.get("update_format").and_then(Value::as_str) {
            None | Some("raw") => false,
            Some("debezium") if spec.input => true,
            Some(other) => {
                return Err(format!(
                    "Avro update format '{other}' is not supported for {} (raw{})",
                    if spec.input { "input" } else { "output" },
                    if spec.input { ", debezium" } else { "" }
                ))
            }
        };
        let schema = match config.get("schema") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                let schema = Schema::parse_str(s).map_err(|e| format!("Avro 'schema': {e}"))?;
                check_schema(&schema).map_err(|e| format!("Avro 'schema': {e}"))?;
                Some((schema, s.clone()))
            }
            Some(_) => return Err("Avro 'schema' is a string holding the schema's JSON".into()),
        };
        let skip_schema_id = config
            .get("skip_schema_id")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let registry = Registry::from_config(&config)?;
        if spec.input && schema.is_none() && registry.is_none() {
            return Err("Avro input needs 'registry_urls' or a 'schema'".into());
        }
        if spec.input && schema.is_some() && registry.is_some() {
            return Err("Avro input takes 'registry_urls' or a 'schema', not both".into());
        }
        if skip_schema_id && schema.is_none() {
            return Err("'skip_schema_id' needs a 'schema' (there is no id to look up)".into());
        }
        Ok(Self {
            debezium,
            schema,
            skip_schema_id,
            registry,
        })
    }
}

/// Turns Avro messages into JSON changes for a table.
pub struct AvroDecoder {
    config: AvroConfig,
    /// Schemas fetched from the registry and checked, by id; a failure is
    /// kept (with its time) so that messages naming a bad or unknown id do
    /// not each wait for the registry.
    schemas: HashMap<u32, Result<Schema, (String, std::time::Instant)>>,
}

impl AvroDecoder {
    /// A decoder for `config`.
    pub fn new(config: AvroConfig) -> Self {
        // A hostile message may claim a huge string or array: no single
        // allocation of a decoded value may exceed 64 MiB (the first call
        // in the process sets the bound).
        apache_avro::util::max_allocation_bytes(64 << 20);
        Self {
            config,
            schemas: HashMap::new(),
        }
    }

    /// The JSON update format of what [`decode`](Self::decode) returns.
    pub fn update_format(&self) -> UpdateFormat {
        if self.config.debezium {
            UpdateFormat::Debezium
        } else {
            UpdateFormat::InsertDelete
        }
    }

    /// One message as one line of JSON for a table with `columns`:
    /// `{"insert": row}` (raw) or the Debezium event. A record's fields
    /// that the table lacks are left out (a schema may carry more than the
    /// table keeps); the table's nullable columns that the record lacks are
    /// NULL. `None` for a Debezium tombstone (an empty message).
    pub fn decode(&mut self, message: &[u8], columns: &Fields) -> Result<Option<String>, String> {
        if message.is_empty() && self.config.debezium {
            return Ok(None);
        }
        let (schema, mut datum) = if self.config.skip_schema_id {
            (&self.config.schema.as_ref().expect("checked").0, message)
        } else {
            let (id, datum) =
                match message {
                    [0, a, b, c, d, rest @ ..] => (u32::from_be_bytes([*a, *b, *c, *d]), rest),
                    _ => return Err(
                        "not in Confluent's wire format (a zero byte and a 4-byte schema id first)"
                            .into(),
                    ),
                };
            let schema = match (&self.config.schema, &self.config.registry) {
                (Some((s, _)), _) => s,
                (None, Some(registry)) => {
                    let stale = matches!(
                        self.schemas.get(&id),
                        Some(Err((_, at))) if at.elapsed() > FAILED_LOOKUP_RETRY
                    );
                    if stale || !self.schemas.contains_key(&id) {
                        let fetched = registry.schema(id).and_then(|s| {
                            check_schema(&s).map_err(|e| format!("schema {id}: {e}"))?;
                            Ok(s)
                        });
                        self.schemas
                            .insert(id, fetched.map_err(|e| (e, std::time::Instant::now())));
                    }
                    match &self.schemas[&id] {
                        Ok(s) => s,
                        Err((e, _)) => return Err(e.clone()),
                    }
                }
                (None, None) => unreachable!("checked"),
            };
            (schema, datum)
        };
        let value = apache_avro::from_avro_datum(schema, &mut datum, None)
            .map_err(|e| format!("Avro datum: {e}"))?;
        if !datum.is_empty() {
            return Err(format!("{} bytes after the Avro datum", datum.len()));
        }
        let names = ResolvedSchema::try_from(schema).map_err(|e| e.to_string())?;
        let mut json = to_json(&value, schema, names.get_names())?;
        let keep = |row: &mut Value| {
            if let Value::Object(fields) = row {
                fields.retain(|k, _| columns.iter().any(|c| c.name().eq_ignore_ascii_case(k)));
            }
        };
        let line = if self.config.debezium {
            if let Value::Object(event) = &mut json {
                event.get_mut("before").map(keep);
                event.get_mut("after").map(keep);
            }
            json
        } else {
            keep(&mut json);
            json!({ "insert": json })
        };
        Ok(Some(line.to_string()))
    }
}

/// An Avro value as the JSON that the table's JSON parser reads: logical
/// types in SQL's text forms (`2024-01-02`, `2024-01-02 03:04:05.000006`,
/// decimals with their scale), bytes as hex.
fn to_json(value: &Avro, schema: &Schema, names: &HashMap<Name, &Schema>) -> Result<Value, String> {
    let schema = match schema {
        Schema::Ref { name } => *names
            .get(name)
            .ok_or_else(|| format!("unknown Avro type {name}"))?,
        s => s,
    };
    Ok(match value {
        Avro::Null => Value::Null,
        Avro::Boolean(b) => Value::Bool(*b),
        Avro::Int(i) => json!(i),
        Avro::Long(i) => json!(i),
        Avro::Float(f) => float(f64::from(*f)),
        Avro::Double(f) => float(*f),
        Avro::Bytes(b) | Avro::Fixed(_, b) => Value::String(hex(b)),
        Avro::String(s) | Avro::Enum(_, s) => Value::String(s.clone()),
        Avro::Uuid(u) => Value::String(u.to_string()),
        Avro::Union(i, v) => {
            let variant = match schema {
                Schema::Union(u) => u
                    .variants()
                    .get(*i as usize)
                    .ok_or("an Avro union index out of range")?,
                other => other,
            };
            to_json(v, variant, names)?
        }
        Avro::Array(items) => {
            let item = match schema {
                Schema::Array(a) => &*a.items,
                _ => return Err("an Avro array without an array schema".into()),
            };
            Value::Array(
                items
                    .iter()
                    .map(|v| to_json(v, item, names))
                    .collect::<Result<_, _>>()?,
            )
        }
        Avro::Map(entries) => {
            let item = match schema {
                Schema::Map(m) => &*m.types,
                _ => return Err("an Avro map without a map schema".into()),
            };
            let mut out = Map::new();
            for (k, v) in entries {
                out.insert(k.clone(), to_json(v, item, names)?);
            }
            Value::Object(out)
        }
        Avro::Record(fields) => {
            let Schema::Record(r) = schema else {
                return Err("an Avro record without a record schema".into());
            };
            let mut out = Map::new();
            for ((name, v), field) in fields.iter().zip(&r.fields) {
                out.insert(name.clone(), to_json(v, &field.schema, names)?);
            }
            Value::Object(out)
        }
        Avro::Date(days) => Value::String(date(i64::from(*days))?),
        Avro::TimeMillis(ms) => Value::String(time(i64::from(*ms) * 1000)?),
        Avro::TimeMicros(us) => Value::String(time(*us)?),
        Avro::TimestampMillis(ms) | Avro::LocalTimestampMillis(ms) => Value::String(timestamp(
            ms.checked_mul(1000).ok_or("timestamp out of range")?,
        )?),
        Avro::TimestampMicros(us) | Avro::LocalTimestampMicros(us) => {
            Value::String(timestamp(*us)?)
        }
        Avro::TimestampNanos(ns) | Avro::LocalTimestampNanos(ns) => {
            Value::String(timestamp(ns.div_euclid(1000))?)
        }
        Avro::Decimal(d) => {
            let Schema::Decimal(ds) = schema else {
                return Err("an Avro decimal without a decimal schema".into());
            };
            let bytes: Vec<u8> = d.try_into().map_err(|e| format!("Avro decimal: {e}"))?;
            Value::String(decimal_text(unscaled(&bytes)?, ds.scale as u32))
        }
        Avro::BigDecimal(d) => Value::String(d.to_string()),
        Avro::Duration(_) => return Err("Avro durations have no SQL column type".into()),
    })
}

/// A float as JSON: NaN and the infinities, which JSON numbers cannot
/// hold, as the strings the JSON parser reads for them.
fn float(f: f64) -> Value {
    match serde_json::Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("inf".into()),
        None => Value::String("-inf".into()),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn date(days: i64) -> Result<String, String> {
    NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|epoch| epoch.checked_add_signed(chrono::Duration::try_days(days)?))
        .map(|d| d.format("%Y-%m-%d").to_string())
        .ok_or_else(|| format!("date {days} days from 1970 is out of range"))
}

fn time(micros: i64) -> Result<String, String> {
    let secs = u32::try_from(micros.div_euclid(1_000_000)).map_err(|_| "time out of range")?;
    let nanos = (micros.rem_euclid(1_000_000) * 1000) as u32;
    NaiveTime::from_num_seconds_from_midnight_opt(secs, nanos)
        .map(|t| t.format("%H:%M:%S%.6f").to_string())
        .ok_or_else(|| format!("time {micros} µs is out of range"))
}

fn timestamp(micros: i64) -> Result<String, String> {
    DateTime::from_timestamp_micros(micros)
        .map(|t| t.naive_utc().format("%Y-%m-%d %H:%M:%S%.6f").to_string())
        .ok_or_else(|| format!("timestamp {micros} µs is out of range"))
}

/// A big-endian two's complement integer of at most 16 bytes.
fn unscaled(bytes: &[u8]) -> Result<i128, String> {
    if bytes.len() > 16 {
        return Err("an Avro decimal wider than 128 bits".into());
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut full = [fill; 16];
    full[16 - bytes.len()..].copy_from_slice(bytes);
    Ok(i128::from_be_bytes(full))
}

fn decimal_text(unscaled: i128, scale: u32) -> String {
    if scale == 0 {
        return unscaled.to_string();
    }
    let digits = unscaled.unsigned_abs().to_string();
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{}{int}.{frac}", if unscaled < 0 { "-" } else { "" })
}

/// Writes a view's changes as Avro messages.
pub struct AvroEncoder {
    /// The writer's schema (the configured one, or one made from the
    /// view's columns) and its text.
    schema: Schema,
    text: String,
    /// Its id in the registry, once registered.
    id: Option<u32>,
    skip_schema_id: bool,
}

/// One message: its `op` header and its bytes.
pub type AvroMessage = (&'static str, Vec<u8>);

impl AvroEncoder {
    /// An encoder of a view with `columns` writing to `topic`: its schema
    /// is registered as `<topic>-value` now, so that a registry that is
    /// down or refuses it fails the start rather than the steps.
    pub fn new(config: AvroConfig, topic: &str, columns: &Fields) -> Result<Self, String> {
        let (schema, text) = match config.schema {
            Some(s) => s,
            None => schema_of(columns)?,
        };
        let id = match &config.registry {
            Some(r) => Some(r.register(&format!("{topic}-value"), &text)?),
            None => None,
        };
        Ok(Self {
            schema,
            text,
            id,
            skip_schema_id: config.skip_schema_id,
        })
    }

    /// The schema's JSON text.
    pub fn schema_text(&self) -> &str {
        &self.text
    }

    /// The messages of `changes`: a row of weight `w` is `|w|` messages,
    /// `insert` when `w` > 0, `delete` otherwise.
    pub fn encode(&self, changes: &ZSet) -> Result<Vec<AvroMessage>, String> {
        let batch = changes.batch();
        let mut out = Vec::new();
        for (row, &w) in changes.weights().iter().enumerate() {
            if w == 0 {
                continue;
            }
            let record = record_of(batch, row, &self.schema)?;
            let datum = apache_avro::to_avro_datum(&self.schema, record)
                .map_err(|e| format!("Avro encoding: {e}"))?;
            let mut message = Vec::with_capacity(datum.len() + 5);
            if let (Some(id), false) = (self.id, self.skip_schema_id) {
                message.push(0);
                message.extend_from_slice(&id.to_be_bytes());
            }
            message.extend_from_slice(&datum);
            let op = if w > 0 { "insert" } else { "delete" };
            for _ in 0..w.unsigned_abs() {
                out.push((op, message.clone()));
            }
        }
        Ok(out)
    }
}

/// The Avro record schema of a view's columns, parsed and as JSON text.
pub fn schema_of(fields: &Fields) -> Result<(Schema, String), String> {
    let columns = fields
        .iter()
        .map(|f| {
            let t = avro_type(f)?;
            let t = if f.is_nullable() {
                json!(["null", t])
            } else {
                t
            };
            Ok(json!({"name": f.name(), "type": t}))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let schema = json!({"type": "record", "name": "eddy_row", "fields": columns});
    let parsed = Schema::parse(&schema).map_err(|e| format!("the view's Avro schema: {e}"))?;
    Ok((parsed, schema.to_string()))
}

fn avro_type(f: &Field) -> Result<Value, String> {
    Ok(match f.data_type() {
        DataType::Boolean => json!("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => json!("int"),
        DataType::Int64 => json!("long"),
        DataType::Float32 => json!("float"),
        DataType::Float64 => json!("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => json!("string"),
        // A VARIANT is written as its JSON text.
        DataType::LargeBinary => json!("string"),
        // A UUID is written as its canonical text.
        t if eddy_io::uuid::is_uuid(t) => json!("string"),
        DataType::Binary | DataType::BinaryView => json!("bytes"),
        DataType::Date32 => json!({"type": "int", "logicalType": "date"}),
        DataType::Time64(_) => json!({"type": "long", "logicalType": "time-micros"}),
        DataType::Timestamp(_, _) => json!({"type": "long", "logicalType": "timestamp-micros"}),
        DataType::Decimal128(p, s) if *s >= 0 => {
            json!({"type": "bytes", "logicalType": "decimal", "precision": p, "scale": s})
        }
        other => {
            return Err(format!(
                "column '{}' of type {other} has no Avro encoding yet",
                f.name()
            ))
        }
    })
}

/// Row `row` of `batch` as a record of the writer's `schema`, whose
/// fields are the batch's columns in order: a value of a union field is
/// put in the union's `null` branch or its other one, in whichever order
/// the schema lists them.
fn record_of(batch: &RecordBatch, row: usize, schema: &Schema) -> Result<Avro, String> {
    let Schema::Record(record) = schema else {
        return Err("the Avro schema of an output must be a record".into());
    };
    if record.fields.len() != batch.num_columns() {
        return Err(format!(
            "the Avro schema has {} fields, the view {} columns",
            record.fields.len(),
            batch.num_columns()
        ));
    }
    let fields = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .zip(&record.fields)
        .map(|((f, a), field)| {
            let v = value_of(a, row)?;
            let v = match &field.schema {
                Schema::Union(u) => {
                    let null = matches!(v, Avro::Null);
                    let i = u
                        .variants()
                        .iter()
                        .position(|s| matches!(s, Schema::Null) == null)
                        .ok_or_else(|| {
                            format!("column '{}': no branch of its Avro union fits", f.name())
                        })?;
                    Avro::Union(i as u32, Box::new(v))
                }
                _ => v,
            };
            Ok((field.name.clone(), v))
        })
        .collect::<Result<_, String>>()?;
    Ok(Avro::Record(fields))
}

fn value_of(a: &ArrayRef, row: usize) -> Result<Avro, String> {
    if a.is_null(row) {
        return Ok(Avro::Null);
    }
    macro_rules! prim {
        ($t:ty, $v:ident, $conv:expr) => {{
            let x = a.as_any().downcast_ref::<$t>().expect("type").value(row);
            Avro::$v($conv(x))
        }};
    }
    Ok(match a.data_type() {
        DataType::Boolean => prim!(BooleanArray, Boolean, |x| x),
        DataType::Int8 => prim!(Int8Array, Int, i32::from),
        DataType::Int16 => prim!(Int16Array, Int, i32::from),
        DataType::Int32 => prim!(Int32Array, Int, |x| x),
        DataType::Int64 => prim!(Int64Array, Long, |x| x),
        DataType::Float32 => prim!(Float32Array, Float, |x| x),
        DataType::Float64 => prim!(Float64Array, Double, |x| x),
        DataType::Utf8 => Avro::String(a.as_string::<i32>().value(row).to_string()),
        DataType::LargeUtf8 => Avro::String(a.as_string::<i64>().value(row).to_string()),
        DataType::Utf8View => Avro::String(a.as_string_view().value(row).to_string()),
        DataType::Binary => Avro::Bytes(a.as_binary::<i32>().value(row).to_vec()),
        DataType::LargeBinary => Avro::String(
            eddy_io::variant::codec::decode(a.as_binary::<i64>().value(row))
                .map(|v| eddy_io::variant::json::to_json_lenient(&v))
                .map_err(|e| e.to_string())?,
        ),
        DataType::BinaryView => Avro::Bytes(a.as_binary_view().value(row).to_vec()),
        t if eddy_io::uuid::is_uuid(t) => {
            Avro::String(eddy_io::uuid::text(a.as_fixed_size_binary().value(row)))
        }
        DataType::Date32 => prim!(Date32Array, Date, |x| x),
        DataType::Time64(unit) => {
            let v = match unit {
                TimeUnit::Microsecond => a
                    .as_primitive::<datafusion::arrow::datatypes::Time64MicrosecondType>()
                    .value(row),
                _ => {
                    a.as_primitive::<datafusion::arrow::datatypes::Time64NanosecondType>()
                        .value(row)
                        / 1000
                }
            };
            Avro::TimeMicros(v)
        }
        DataType::Timestamp(unit, _) => {
            use datafusion::arrow::datatypes::*;
            let micros = match unit {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(row) * 1_000_000,
                TimeUnit::Millisecond => {
                    a.as_primitive::<TimestampMillisecondType>().value(row) * 1000
                }
                TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(row),
                TimeUnit::Nanosecond => {
                    a.as_primitive::<TimestampNanosecondType>().value(row) / 1000
                }
            };
            Avro::TimestampMicros(micros)
        }
        DataType::Decimal128(_, _) => {
            let v = a
                .as_primitive::<datafusion::arrow::datatypes::Decimal128Type>()
                .value(row);
            Avro::Decimal(apache_avro::Decimal::from(minimal_bytes(v)))
        }
        other => return Err(format!("{other} has no Avro encoding yet")),
    })
}

/// The shortest big-endian two's complement bytes of `v`.
fn minimal_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Schema as ArrowSchema;
    use std::sync::Arc;

    fn spec(input: bool, config: Value) -> ConnectorSpec {
        ConnectorSpec {
            relation: "t".into(),
            name: "c".into(),
            input,
            transport: "kafka_input".into(),
            config: json!({}),
            format: Some(json!({"name": "avro", "config": config})),
        }
    }

    #[test]
    fn configs_are_checked() {
        assert!(AvroConfig::new(&spec(true, json!({}))).is_err());
        assert!(AvroConfig::new(&spec(true, json!({"registry_urls": ["ftp://x"]}))).is_err());
        assert!(AvroConfig::new(&spec(true, json!({"schema": "{"}))).is_err());
        assert!(AvroConfig::new(&spec(false, json!({"update_format": "debezium"}))).is_err());
        assert!(AvroConfig::new(&spec(true, json!({"skip_schema_id": true}))).is_err());
        let ok = AvroConfig::new(&spec(
            true,
            json!({"registry_urls": ["http://127.0.0.1:1/"]}),
        ));
        assert!(ok.is_ok(), "{ok:?}");
        assert_eq!(base64(b"eddy:k"), "ZWRkeTpr");
    }

    #[test]
    fn schemas_that_could_take_the_process_down_are_refused() {
        let refused = [
            r#"{"type": "record", "name": "N", "fields": [{"name": "next", "type": ["null", "N"]}]}"#,
            r#"{"type": "bytes", "logicalType": "decimal", "precision": 1000, "scale": 900}"#,
            r#"{"type": "array", "items": "null"}"#,
            r#"{"type": "array", "items": {"type": "record", "name": "E", "fields": []}}"#,
        ];
        for text in refused {
            let schema = Schema::parse_str(text).unwrap();
            assert!(check_schema(&schema).is_err(), "{text}");
        }
        let fine = r#"{"type": "record", "name": "R", "fields": [
            {"name": "a", "type": {"type": "record", "name": "P", "fields": [{"name": "x", "type": "int"}]}},
            {"name": "b", "type": ["null", "P"]},
            {"name": "c", "type": {"type": "array", "items": "P"}}]}"#;
        check_schema(&Schema::parse_str(fine).unwrap()).unwrap();
        assert_eq!(float(f64::NAN), json!("NaN"));
        assert_eq!(float(f64::NEG_INFINITY), json!("-inf"));
    }

    #[test]
    fn logical_types_become_sql_text() {
        assert_eq!(date(19724).unwrap(), "2024-01-02");
        assert_eq!(time(3_723_000_004).unwrap(), "01:02:03.000004");
        assert_eq!(
            timestamp(1_704_164_645_000_006).unwrap(),
            "2024-01-02 03:04:05.000006"
        );
        assert_eq!(decimal_text(-1234, 2), "-12.34");
        assert_eq!(decimal_text(5, 3), "0.005");
        for v in [0i128, 1, -1, 127, 128, -128, -129, 1 << 70, -(1 << 70)] {
            assert_eq!(unscaled(&minimal_bytes(v)).unwrap(), v, "{v}");
        }
        assert_eq!(minimal_bytes(127), [127]);
        assert_eq!(minimal_bytes(128), [0, 128]);
    }

    #[test]
    fn rows_round_trip_through_the_generated_schema() {
        let fields = ArrowSchema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
            Field::new("d", DataType::Date32, true),
            Field::new("amount", DataType::Decimal128(10, 2), true),
        ]);
        let batch = RecordBatch::try_new(
            Arc::new(fields),
            vec![
                Arc::new(Int64Array::from(vec![1, 2])),
                Arc::new(datafusion::arrow::array::StringArray::from(vec![
                    Some("ann"),
                    None,
                ])),
                Arc::new(Date32Array::from(vec![Some(19724), None])),
                Arc::new(
                    datafusion::arrow::array::Decimal128Array::from(vec![Some(-1234), None])
                        .with_precision_and_scale(10, 2)
                        .unwrap(),
                ),
            ],
        )
        .unwrap();
        let changes = ZSet::new(batch, vec![1, -2]);
        let config = AvroConfig::new(&spec(false, json!({}))).unwrap();
        let columns = changes.batch().schema().fields().clone();
        let encoder = AvroEncoder::new(config, "t", &columns).unwrap();
        let messages = encoder.encode(&changes).unwrap();
        let ops: Vec<&str> = messages.iter().map(|m| m.0).collect();
        assert_eq!(ops, ["insert", "delete", "delete"]);
        let schema = encoder.schema_text().to_string();
        let mut decoder = AvroDecoder::new(
            AvroConfig::new(&spec(
                true,
                json!({"schema": schema, "skip_schema_id": true}),
            ))
            .unwrap(),
        );
        let first: Value =
            serde_json::from_str(&decoder.decode(&messages[0].1, &columns).unwrap().unwrap())
                .unwrap();
        assert_eq!(
            first,
            json!({"insert": {"id": 1, "name": "ann", "d": "2024-01-02", "amount": "-12.34"}})
        );
        let second: Value =
            serde_json::from_str(&decoder.decode(&messages[1].1, &columns).unwrap().unwrap())
                .unwrap();
        assert_eq!(
            second,
            json!({"insert": {"id": 2, "name": null, "d": null, "amount": null}})
        );
        assert!(decoder.decode(b"\x00\x01", &columns).is_err());
        let narrow = Fields::from(vec![Field::new("ID", DataType::Int64, false)]);
        let only_id: Value =
            serde_json::from_str(&decoder.decode(&messages[0].1, &narrow).unwrap().unwrap())
                .unwrap();
        assert_eq!(only_id, json!({"insert": {"id": 1}}));
    }
}
