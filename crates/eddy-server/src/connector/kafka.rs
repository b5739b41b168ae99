//! `kafka_input` and `kafka_output` over librdkafka (the `rdkafka` crate).
//!
//! Input: a consumer in group `group.id` (default `eddy-<pipeline>-<connector>`)
//! reads `topic` (or `topics`) from its committed offsets, or from
//! `start_from` (`earliest`, the default, or `latest`) when the group has
//! none. Messages are parsed in the connector's format (each message holds
//! one or more lines, or one JSON array), and a message's offset is
//! committed only after the step that consumed it, so a restarted pipeline
//! resumes exactly where the last completed step ended.
//!
//! Checkpoints: each piece fed carries the next offset of every partition
//! read so far (`{"offsets": {topic: {partition: offset}}}`). A pipeline
//! resumed from a checkpoint (or started afresh under fault tolerance,
//! from `{}`) does not rely on the group's committed offsets: it assigns
//! itself every partition of its topics, at the checkpoint's offsets, and
//! at `start_from` for partitions the checkpoint has not seen. Partitions
//! added to a topic later are then not read until the next start.
//!
//! Output: each step's change of the view is written to `topic` in the
//! connector's format, up to 1,000 records per message, and flushed before
//! the step is reported complete. Under `exactly_once` fault tolerance,
//! messages go out at checkpoints instead ([`super::kafka_epochs`]).
//!
//! Any other key of the transport config is passed to librdkafka, except
//! those that would let a program reach the server's files or run code:
//! `plugin.library.paths` and `sasl.kerberos.kinit.cmd` are refused, and
//! settings that name a file (`*.location`, `sasl.kerberos.keytab`) must
//! name one inside the folders file connectors may use ([`FileAccess`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use eddy_dbsp::ZSet;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{json, Value};

use super::kafka_epochs::Epochs;
use super::{feed_piece, wait_while_paused, ConnectorSpec, FileAccess};
use crate::avro::{AvroConfig, AvroDecoder, AvroEncoder};
use crate::format::{InputFormat, OutputFormat};
use crate::input::Chunker;
use crate::runner::{Feeder, Origin, Sink, SinkStatus};
use crate::stats::EndpointStats;

/// Keys that are Eddy's, not librdkafka's.
const OWN_KEYS: &[&str] = &["topic", "topics", "start_from", "records_per_message"];

/// Records per output message unless `records_per_message` says otherwise.
const RECORDS_PER_MESSAGE: usize = 1000;

/// Input bytes gathered before they are parsed and fed.
const FEED_BYTES: usize = 1 << 20;

pub(super) fn topics(spec: &ConnectorSpec) -> Vec<String> {
    match (spec.config.get("topic"), spec.config.get("topics")) {
        (Some(Value::String(t)), _) => vec![t.clone()],
        (_, Some(Value::Array(ts))) => ts
            .iter()
            .filter_map(|t| t.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

/// librdkafka settings that load code or run a program.
const REFUSED_KEYS: &[&str] = &["plugin.library.paths", "sasl.kerberos.kinit.cmd"];

/// Whether a librdkafka setting names a local file.
fn names_file(key: &str) -> bool {
    key.ends_with(".location") || key == "sasl.kerberos.keytab"
}

/// Checks the librdkafka settings that reach the local system; returns
/// the settings with file paths resolved.
fn checked_settings(
    spec: &ConnectorSpec,
    files: &FileAccess,
    open: bool,
) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let Some(m) = spec.config.as_object() else {
        return Err("config must be an object".into());
    };
    for (k, v) in m {
        if OWN_KEYS.contains(&k.as_str()) {
            continue;
        }
        let key = k.trim().to_ascii_lowercase();
        if REFUSED_KEYS.contains(&key.as_str()) {
            return Err(format!(
                "the librdkafka setting '{k}' is not allowed: it would load code or run a program on the server"
            ));
        }
        let mut v = match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        // `ssl.ca.location = probe` asks for the system's certificates.
        if names_file(&key) && !(key == "ssl.ca.location" && v == "probe") {
            let path = if open {
                files.resolve(&v)
            } else {
                files.check(&v)
            }
            .map_err(|e| format!("'{k}': {e}"))?;
            v = path.to_string_lossy().into_owned();
        }
        out.push((k.clone(), v));
    }
    Ok(out)
}

/// Checks a Kafka connector's config.
pub fn validate(spec: &ConnectorSpec, files: &FileAccess) -> Result<(), String> {
    checked_settings(spec, files, false)?;
    spec.required("bootstrap.servers")?;
    let ts = topics(spec);
    if ts.is_empty() || (!spec.input && ts.len() != 1) {
        return Err(format!(
            "transport '{}' needs \"topic\" in its config",
            spec.transport
        ));
    }
    if let Some(s) = spec.config.get("start_from") {
        if !matches!(s.as_str(), Some("earliest") | Some("latest")) {
            return Err("start_from must be \"earliest\" or \"latest\"".into());
        }
    }
    Ok(())
}

fn client_config(spec: &ConnectorSpec, files: &FileAccess) -> Result<ClientConfig, String> {
    let mut config = ClientConfig::new();
    for (k, v) in checked_settings(spec, files, true)? {
        config.set(k, v);
    }
    Ok(config)
}

/// Next offset per topic and partition.
type Offsets = BTreeMap<String, BTreeMap<i32, i64>>;

/// A consumer feeding a table.
pub struct KafkaSource {
    consumer: Arc<BaseConsumer>,
    format: InputFormat,
    /// Avro messages are decoded into lines of `format` (JSON) first.
    avro: Option<AvroDecoder>,
    /// Where to start when resuming (the consumer assigns itself its
    /// partitions instead of joining the group's assignment).
    start: Option<Offsets>,
    topics: Vec<String>,
    earliest: bool,
}

/// The offsets of a checkpointed position.
fn offsets_of(position: &Value) -> Result<Offsets, String> {
    match position.get("offsets") {
        None => Ok(Offsets::new()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| format!("the checkpoint's Kafka offsets: {e}")),
    }
}

impl KafkaSource {
    /// Creates the consumer: subscribed to its topics, or, resuming from
    /// `position`, to be assigned its partitions when it runs.
    pub fn open(
        spec: &ConnectorSpec,
        pipeline: &str,
        files: &FileAccess,
        position: Option<&Value>,
    ) -> Result<Self, String> {
        let (format, avro) = if crate::avro::wanted(spec) {
            let decoder = AvroDecoder::new(AvroConfig::new(spec)?);
            let format = InputFormat::Json {
                update: decoder.update_format(),
                array: false,
            };
            (format, Some(decoder))
        } else {
            (InputFormat::from_config(spec.format.as_ref())?, None)
        };
        let mut config = client_config(spec, files)?;
        if config.get("group.id").is_none() {
            config.set("group.id", format!("eddy-{pipeline}-{}", spec.name));
        }
        config.set("enable.auto.commit", "false");
        config.set(
            "auto.offset.reset",
            spec.string("start_from").unwrap_or("earliest"),
        );
        let consumer: BaseConsumer = config.create().map_err(|e| e.to_string())?;
        let ts = topics(spec);
        let start = position.map(offsets_of).transpose()?;
        if start.is_none() {
            let refs: Vec<&str> = ts.iter().map(String::as_str).collect();
            consumer.subscribe(&refs).map_err(|e| e.to_string())?;
        }
        Ok(Self {
            consumer: Arc::new(consumer),
            format,
            avro,
            start,
            topics: ts,
            earliest: spec.string("start_from") != Some("latest"),
        })
    }

    /// Assigns the consumer every partition of its topics, at `start`'s
    /// offsets or `start_from`; waits for topics that do not exist yet.
    /// False once the pipeline is stopping.
    fn assign(&self, start: &Offsets, feeder: &Feeder, stats: &EndpointStats) -> bool {
        let mut list = TopicPartitionList::new();
        for topic in &self.topics {
            let partitions = loop {
                if feeder.is_stopping() {
                    return false;
                }
                match self
                    .consumer
                    .fetch_metadata(Some(topic), Duration::from_secs(5))
                {
                    Ok(m) => {
                        let ids: Vec<i32> = m
                            .topics()
                            .iter()
                            .filter(|t| t.name() == topic && t.error().is_none())
                            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                            .collect();
                        if !ids.is_empty() {
                            break ids;
                        }
                    }
                    Err(e) => stats.error(format!("topic '{topic}': {e}")),
                }
                std::thread::sleep(Duration::from_millis(500));
            };
            for p in partitions {
                let offset = match start.get(topic).and_then(|m| m.get(&p)) {
                    Some(&o) => Offset::Offset(o),
                    None if self.earliest => Offset::Beginning,
                    None => Offset::End,
                };
                let _ = list.add_partition_offset(topic, p, offset);
            }
        }
        if let Err(e) = self.consumer.assign(&list) {
            stats.error(format!("assigning partitions: {e}"));
            return false;
        }
        true
    }

    /// Consumes until the pipeline stops.
    pub fn run(mut self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let line_oriented = self.format.line_oriented();
        let mut chunker = Chunker::new(&self.format);
        let mut avro = self.avro.take();
        let Ok(columns) = feeder.schema(&spec.relation).map(|s| s.fields().clone()) else {
            return;
        };
        // Next offset of every partition read, for positions.
        let mut read: Offsets = self.start.clone().unwrap_or_default();
        if let Some(start) = &self.start {
            if !self.assign(start, feeder, stats) {
                return;
            }
        }
        // Next offset to commit per (topic, partition), for what is gathered.
        let mut offsets: HashMap<(String, i32), i64> = HashMap::new();
        let origin = |offsets: &mut HashMap<(String, i32), i64>, read: &Offsets| Origin {
            position: Some((Arc::from(spec.name.as_str()), json!({"offsets": read}))),
            on_processed: self.commit(offsets, stats),
            ..Origin::default()
        };
        loop {
            if !wait_while_paused(feeder) {
                return;
            }
            let message = self.consumer.poll(Duration::from_millis(100));
            match message {
                Some(Ok(m)) => {
                    match (m.payload(), &mut avro) {
                        (Some(payload), None) => {
                            chunker.gather(payload);
                            if line_oriented && !payload.ends_with(b"\n") {
                                chunker.gather(b"\n");
                            }
                        }
                        (payload, Some(avro)) => {
                            match avro.decode(payload.unwrap_or_default(), &columns) {
                                Ok(Some(line)) => {
                                    chunker.gather(line.as_bytes());
                                    chunker.gather(b"\n");
                                }
                                Ok(None) => {}
                                Err(e) => {
                                    let e = format!(
                                        "{} partition {} offset {}: {e}",
                                        m.topic(),
                                        m.partition(),
                                        m.offset()
                                    );
                                    tracing::warn!(connector = %spec.name, "rejected input: {e}");
                                    stats.parse_errors.fetch_add(1, Ordering::Relaxed);
                                    *stats.last_error.lock().unwrap() = Some(e);
                                }
                            }
                        }
                        (None, None) => {}
                    }
                    offsets.insert((m.topic().to_string(), m.partition()), m.offset() + 1);
                    read.entry(m.topic().to_string())
                        .or_default()
                        .insert(m.partition(), m.offset() + 1);
                    if !line_oriented {
                        // One JSON array per message: parse each alone.
                        if let Some(piece) = chunker.finish() {
                            let origin = origin(&mut offsets, &read);
                            if !feed_piece(spec, &self.format, piece, feeder, stats, origin) {
                                return;
                            }
                        }
                    }
                    if chunker.pending() < FEED_BYTES {
                        continue;
                    }
                }
                Some(Err(e)) => {
                    stats.error(e.to_string());
                    std::thread::sleep(Duration::from_millis(100));
                }
                None => {}
            }
            if let Some(piece) = chunker.finish() {
                let origin = origin(&mut offsets, &read);
                if !feed_piece(spec, &self.format, piece, feeder, stats, origin) {
                    return;
                }
            }
        }
    }

    /// A callback committing the gathered offsets, run after the step that
    /// consumed them.
    fn commit(
        &self,
        offsets: &mut HashMap<(String, i32), i64>,
        stats: &EndpointStats,
    ) -> Option<Box<dyn FnOnce() + Send>> {
        if offsets.is_empty() {
            return None;
        }
        let mut list = TopicPartitionList::new();
        for ((topic, partition), offset) in offsets.drain() {
            let _ = list.add_partition_offset(&topic, partition, Offset::Offset(offset));
        }
        let consumer = Arc::clone(&self.consumer);
        let name = stats.name.clone();
        Some(Box::new(move || {
            if let Err(e) = consumer.commit(&list, CommitMode::Sync) {
                tracing::warn!(connector = %name, error = %e, "offset commit failed");
            }
        }))
    }
}

/// A producer receiving a view's changes.
pub struct KafkaSink {
    producer: ThreadedProducer<DefaultProducerContext>,
    topic: String,
    encoding: Encoding,
    per_message: usize,
    /// Exactly-once output: messages held back until checkpoints.
    epochs: Option<Epochs>,
}

impl KafkaSink {
    /// Creates the producer. With `exactly_once`, messages go out at
    /// checkpoints; resuming from checkpoint folder `dir` where the output
    /// recorded `position`, what it had not sent goes out first.
    pub fn open(
        spec: &ConnectorSpec,
        encoding: Encoding,
        pipeline: &str,
        files: &FileAccess,
        exactly_once: bool,
        resume: Option<(&Path, &Value)>,
    ) -> Result<Self, String> {
        let config = client_config(spec, files)?;
        let mut producer_config = config.clone();
        if exactly_once {
            producer_config.set("enable.idempotence", "true");
        }
        let producer: ThreadedProducer<DefaultProducerContext> =
            producer_config.create().map_err(|e| e.to_string())?;
        let topic = topics(spec).remove(0);
        if exactly_once && matches!(encoding, Encoding::Avro(_)) {
            return Err("Avro output to Kafka is at least once: its messages carry headers that held-back epochs do not keep yet; set the pipeline's fault_tolerance model to at_least_once, or use JSON".into());
        }
        let epochs = if exactly_once {
            let id = format!("{pipeline}/{}", spec.name);
            Some(Epochs::open(id, &topic, &producer, config, resume)?)
        } else {
            None
        };
        Ok(Self {
            producer,
            topic,
            encoding,
            per_message: spec
                .config
                .get("records_per_message")
                .and_then(Value::as_u64)
                .map_or(RECORDS_PER_MESSAGE, |n| n.max(1) as usize),
            epochs,
        })
    }

    fn send(&self, payload: &[u8]) -> Result<(), String> {
        send_waiting(
            &self.producer,
            BaseRecord::<(), [u8]>::to(&self.topic).payload(payload),
        )
    }
}

/// How a Kafka output writes changes.
pub enum Encoding {
    /// Lines of a text format, up to `records_per_message` per message.
    Text(OutputFormat),
    /// One Avro message per change, with an `op` header.
    Avro(Box<AvroEncoder>),
}

impl KafkaSink {
    fn write_avro(&mut self, changes: &ZSet) -> SinkStatus {
        let Encoding::Avro(encoder) = &self.encoding else {
            unreachable!("called for Avro");
        };
        let messages = match encoder.encode(changes) {
            Ok(m) => m,
            Err(e) => return SinkStatus::Failed(e),
        };
        let mut bytes = 0;
        for (op, payload) in &messages {
            bytes += payload.len() as u64;
            let headers = OwnedHeaders::new().insert(Header {
                key: "op",
                value: Some(*op),
            });
            let record = BaseRecord::<(), [u8]>::to(&self.topic)
                .payload(payload.as_slice())
                .headers(headers);
            if let Err(e) = send_waiting(&self.producer, record) {
                return SinkStatus::Failed(e);
            }
        }
        if let Err(e) = self.producer.flush(Duration::from_secs(30)) {
            return SinkStatus::Failed(e.to_string());
        }
        SinkStatus::Written {
            records: messages.len() as u64,
            bytes,
        }
    }
}

/// Queues a message, waiting while the producer's queue is full.
pub(super) fn send_waiting<K, P>(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut record: BaseRecord<'_, K, P>,
) -> Result<(), String>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e.to_string()),
        }
    }
}

impl Sink for KafkaSink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        let format = match &mut self.encoding {
            Encoding::Text(format) => *format,
            Encoding::Avro(_) => return self.write_avro(changes),
        };
        let text = match format.encode(changes) {
            Ok(t) => t,
            Err(e) => return SinkStatus::Failed(e),
        };
        let lines: Vec<&str> = text.lines().collect();
        for group in lines.chunks(self.per_message) {
            let mut payload = group.join("\n");
            payload.push('\n');
            if let Some(epochs) = &mut self.epochs {
                epochs.push(payload);
            } else if let Err(e) = self.send(payload.as_bytes()) {
                return SinkStatus::Failed(e);
            }
        }
        if self.epochs.is_none() {
            if let Err(e) = self.producer.flush(Duration::from_secs(30)) {
                return SinkStatus::Failed(e.to_string());
            }
        }
        SinkStatus::Written {
            records: lines.len() as u64,
            bytes: text.len() as u64,
        }
    }

    fn flush(&mut self) {
        let _ = self.producer.flush(Duration::from_secs(10));
    }

    fn checkpoint(&mut self, spool: &Path) -> Result<Option<Value>, String> {
        match &mut self.epochs {
            Some(epochs) => epochs.seal(spool).map(Some),
            None => Ok(None),
        }
    }

    fn committed(&mut self, _dir: &Path) {
        if let Some(epochs) = &mut self.epochs {
            if let Err(e) = epochs.publish(&self.producer) {
                tracing::warn!(topic = %self.topic, error = %e, "sending output held for a checkpoint failed; it is tried again at the next one");
            }
        }
    }
}
