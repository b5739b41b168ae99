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
//! at `start_from` for partitions the checkpoint has not seen (`latest`
//! as the partition's end offset then, put into the state at once). Partitions
//! added to a topic later are then not read until the next start.
//!
//! Output: each step's change of the view is written to `topic` in the
//! connector's format, up to 1,000 records per message, and flushed before
//! the step is reported complete. Under `exactly_once` fault tolerance,
//! messages go out at checkpoints instead ([`epochs`]).
//!
//! Avro messages are decoded and encoded by `eddy_io::avro`; the schema
//! registry they name is reached by [`registry`].
//!
//! Any other key of the transport config is passed to librdkafka (which
//! checks it when the program is), except Feldera's own settings that Eddy
//! does not carry out yet (refused by name) and
//! those that would let a program reach the server's files or run code:
//! `plugin.library.paths` and `sasl.kerberos.kinit.cmd` are refused, and
//! settings that name a file (`*.location`, `sasl.kerberos.keytab`) must
//! name one inside the folders file connectors may use ([`FileAccess`]).

mod epochs;
mod lag;
mod registry;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use eddy_dbsp::ZSet;
use eddy_io::avro::{AvroDecoder, AvroEncoder, SchemaSource};
use eddy_io::format::{FormatConfig, InputFormat, OutputFormat};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Deserialize;
use serde_json::{json, Value};

use self::epochs::Epochs;
use self::registry::Registry;
use super::{
    feed_piece, wait_while_paused, CheckContext, ConnectorSpec, FileAccess, InputContext, InputRun,
    OutputContext, Transport,
};
use crate::input::Chunker;
use crate::runner::{Feeder, Origin, Sink, SinkStatus};
use crate::stats::EndpointStats;

/// Records per output message unless `records_per_message` says otherwise.
const RECORDS_PER_MESSAGE: usize = 1000;

/// Input bytes gathered before they are parsed and fed.
const FEED_BYTES: usize = 1 << 20;

/// `kafka_input`'s configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct KafkaInput {
    /// The topic read.
    topic: Option<String>,
    /// Topics read (Feldera's older form).
    topics: Option<Vec<String>>,
    /// Where a group without committed offsets starts.
    #[serde(default)]
    start_from: StartFrom,
    #[serde(flatten)]
    settings: Settings,
}

/// `kafka_output`'s configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct KafkaOutput {
    /// The topic written.
    topic: String,
    /// Text records per message.
    records_per_message: Option<usize>,
    #[serde(flatten)]
    settings: Settings,
}

/// `start_from`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum StartFrom {
    #[default]
    Earliest,
    Latest,
}

impl StartFrom {
    fn name(self) -> &'static str {
        match self {
            Self::Earliest => "earliest",
            Self::Latest => "latest",
        }
    }
}

/// The settings of a Kafka connector that are not Eddy's own: librdkafka's
/// (checked by librdkafka itself when the connector is checked, and for
/// those that reach the local system, here).
#[derive(Debug, Clone, Deserialize)]
struct Settings {
    #[serde(flatten)]
    librdkafka: BTreeMap<String, Value>,
}

/// Settings of Feldera's Kafka connectors that Eddy does not carry out
/// yet: refused by name rather than passed to librdkafka.
const FELDERA_UNSUPPORTED: &[&str] = &[
    "resume_earliest_if_data_expires",
    "include_headers",
    "include_topic",
    "include_partition",
    "include_offset",
    "include_timestamp",
    "header_filter",
    "headers",
    "kafka_service",
    "region",
    "partitions",
    "synchronize_partitions",
    "fault_tolerance",
];

/// Settings of Feldera's Kafka connectors that tune its own client and
/// change nothing that is read or written: accepted, not needed here.
const FELDERA_HINTS: &[&str] = &[
    "log_level",
    "group_join_timeout_secs",
    "poller_threads",
    "initialization_timeout_secs",
];

/// librdkafka settings that load code or run a program.
const REFUSED_KEYS: &[&str] = &["plugin.library.paths", "sasl.kerberos.kinit.cmd"];

/// Whether a librdkafka setting names a local file.
fn names_file(key: &str) -> bool {
    key.ends_with(".location") || key == "sasl.kerberos.keytab"
}

impl Settings {
    /// The librdkafka settings, with file paths checked (`open`: resolved
    /// as well).
    fn checked(&self, files: &FileAccess, open: bool) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        for (k, v) in &self.librdkafka {
            let key = k.trim().to_ascii_lowercase();
            if FELDERA_HINTS.contains(&key.as_str()) {
                continue;
            }
            if FELDERA_UNSUPPORTED.contains(&key.as_str()) {
                return Err(format!("'{k}' is not supported yet"));
            }
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

    /// Checks the settings: files, Feldera's settings, and librdkafka's
    /// own check of every property (no client is made).
    fn check(&self, files: &FileAccess) -> Result<(), String> {
        if !self.librdkafka.contains_key("bootstrap.servers") {
            return Err("needs \"bootstrap.servers\" in its config".into());
        }
        let mut config = ClientConfig::new();
        for (k, v) in self.checked(files, false)? {
            config.set(k, v);
        }
        config
            .create_native_config()
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// The client configuration, file paths resolved.
    fn client(&self, files: &FileAccess) -> Result<ClientConfig, String> {
        let mut config = ClientConfig::new();
        for (k, v) in self.checked(files, true)? {
            config.set(k, v);
        }
        Ok(config)
    }
}

impl KafkaInput {
    fn topics(&self) -> Vec<String> {
        match (&self.topic, &self.topics) {
            (Some(t), _) => vec![t.clone()],
            (None, Some(ts)) => ts.clone(),
            (None, None) => Vec::new(),
        }
    }
}

impl Transport for KafkaInput {
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        self.settings.check(cx.files)?;
        if self.topics().is_empty() {
            return Err("transport 'kafka_input' needs \"topic\" in its config".into());
        }
        match &spec.format {
            Some(FormatConfig::Avro(avro)) => {
                avro.checked(true).map_err(|e| e.to_string())?;
                Registry::new(avro)?;
                Ok(())
            }
            _ => spec.input_format().map(|_| ()),
        }
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let source = KafkaSource::open(self, spec, cx.pipeline, cx.files, cx.position)?;
        cx.run(spec, move |spec, feeder, stats| {
            source.run(spec, feeder, stats)
        })
    }
}

impl Transport for KafkaOutput {
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        self.settings.check(cx.files)?;
        match &spec.format {
            Some(FormatConfig::Avro(avro)) => {
                let format = avro.checked(false).map_err(|e| e.to_string())?;
                Registry::new(avro)?;
                // An Avro output needs an Avro type for every column.
                AvroEncoder::new(format, cx.columns)
                    .map_err(|e| format!("view '{}': Avro output: {e}", spec.relation))?;
                Ok(())
            }
            _ => spec.output_format().map(|_| ()),
        }
    }

    fn open_output(
        &self,
        spec: &ConnectorSpec,
        cx: OutputContext<'_>,
    ) -> Result<Box<dyn Sink>, String> {
        let encoding = match &spec.format {
            Some(FormatConfig::Avro(avro)) => {
                let format = avro.checked(false).map_err(|e| e.to_string())?;
                let mut encoder = AvroEncoder::new(format, cx.columns)?;
                // Registered now, so that a registry that is down or
                // refuses the schema fails the start rather than the steps.
                if let Some(registry) = Registry::new(avro)? {
                    encoder.register(&registry, &format!("{}-value", self.topic))?;
                }
                Encoding::Avro(Box::new(encoder))
            }
            _ => Encoding::Text(spec.output_format()?),
        };
        Ok(Box::new(KafkaSink::open(self, spec, encoding, cx)?))
    }
}

/// Next offset per topic and partition.
type Offsets = BTreeMap<String, BTreeMap<i32, i64>>;

/// A consumer feeding a table.
struct KafkaSource {
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

/// An input's position: the next offset of every partition read.
#[derive(Debug, Clone, Default, serde::Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KafkaPosition {
    #[serde(default)]
    offsets: Offsets,
}

impl KafkaSource {
    /// Creates the consumer: subscribed to its topics, or, resuming from
    /// `position`, to be assigned its partitions when it runs.
    fn open(
        config: &KafkaInput,
        spec: &ConnectorSpec,
        pipeline: &str,
        files: &FileAccess,
        position: Option<&Value>,
    ) -> Result<Self, String> {
        let (format, avro) = match &spec.format {
            Some(FormatConfig::Avro(avro)) => {
                let registry = Registry::new(avro)?.map(|r| Box::new(r) as Box<dyn SchemaSource>);
                let decoder =
                    AvroDecoder::new(avro.checked(true).map_err(|e| e.to_string())?, registry);
                (
                    InputFormat::json_lines(decoder.update_format()),
                    Some(decoder),
                )
            }
            _ => (spec.input_format()?, None),
        };
        let mut client = config.settings.client(files)?;
        if client.get("group.id").is_none() {
            client.set("group.id", format!("eddy-{pipeline}-{}", spec.name));
        }
        client.set("enable.auto.commit", "false");
        client.set("auto.offset.reset", config.start_from.name());
        let consumer: BaseConsumer = client.create().map_err(|e| e.to_string())?;
        let ts = config.topics();
        let start = match position {
            None => None,
            Some(p) => Some(super::position::<KafkaPosition>(Some(p))?.offsets),
        };
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
            earliest: config.start_from == StartFrom::Earliest,
        })
    }

    /// Assigns the consumer every partition of its topics, at `start`'s
    /// offsets or `start_from`; waits for topics that do not exist yet.
    /// `latest` is made an offset (the partition's end now), returned so
    /// that it goes into the state at once: a pipeline resumed from a
    /// checkpoint taken before any message came then reads what was
    /// written after this start, rather than start at the end again and
    /// skip it. `None` once the pipeline is stopping.
    fn assign(&self, start: &Offsets, feeder: &Feeder, stats: &EndpointStats) -> Option<Offsets> {
        let mut ends = Offsets::new();
        let mut list = TopicPartitionList::new();
        for topic in &self.topics {
            let partitions = loop {
                if feeder.is_stopping() {
                    return None;
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
                    None => {
                        let end = self.end_of(topic, p, feeder, stats)?;
                        ends.entry(topic.clone()).or_default().insert(p, end);
                        Offset::Offset(end)
                    }
                };
                let _ = list.add_partition_offset(topic, p, offset);
            }
        }
        if let Err(e) = self.consumer.assign(&list) {
            stats.error(format!("assigning partitions: {e}"));
            return None;
        }
        Some(ends)
    }

    /// The offset after a partition's last message now (its high
    /// watermark), asked until the broker answers; `None` once the
    /// pipeline is stopping.
    fn end_of(
        &self,
        topic: &str,
        partition: i32,
        feeder: &Feeder,
        stats: &EndpointStats,
    ) -> Option<i64> {
        loop {
            if feeder.is_stopping() {
                return None;
            }
            match (self.consumer).fetch_watermarks(topic, partition, Duration::from_secs(5)) {
                Ok((_, high)) => return Some(high),
                Err(e) => stats.error(format!("topic '{topic}' partition {partition}'s end: {e}")),
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Consumes until the pipeline stops, its lag watched beside it.
    fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let done = AtomicBool::new(false);
        let consumer = Arc::clone(&self.consumer);
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("kafka-lag".into())
                .spawn_scoped(scope, || lag::watch(&consumer, stats, &done))
                .ok();
            // Set however consuming ends, a panic included: the scope
            // waits for the watcher, which ends only then.
            let _done = lag::Done(&done);
            self.consume(spec, feeder, stats);
        });
    }

    /// Consumes until the pipeline stops.
    fn consume(mut self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let line_oriented = self.format.line_oriented();
        let mut chunker = Chunker::new(&self.format);
        let mut avro = self.avro.take();
        let Ok(columns) = feeder.schema(&spec.relation).map(|s| s.fields().clone()) else {
            return;
        };
        // Next offset of every partition read, for positions.
        let mut read: Offsets = self.start.clone().unwrap_or_default();
        if let Some(start) = &self.start {
            let Some(ends) = self.assign(start, feeder, stats) else {
                return;
            };
            if !ends.is_empty() {
                for (topic, partitions) in ends {
                    read.entry(topic).or_default().extend(partitions);
                }
                let position = json!({ "offsets": read });
                if !super::record_position(feeder, spec, position) {
                    return;
                }
            }
        }
        for (topic, partitions) in &read {
            for (&partition, &next) in partitions {
                lag::starts_at(stats, topic, partition, next);
            }
        }
        // Next offset to commit per (topic, partition), for what is gathered.
        let mut offsets: HashMap<(String, i32), i64> = HashMap::new();
        let origin = |offsets: &mut HashMap<(String, i32), i64>, read: &Offsets| Origin {
            position: Some((Arc::from(spec.name.as_str()), json!({ "offsets": read }))),
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
                                    stats.rejected(1, &e);
                                }
                            }
                        }
                        (None, None) => {}
                    }
                    lag::read(stats, &m);
                    offsets.insert((m.topic().to_string(), m.partition()), m.offset() + 1);
                    read.entry(m.topic().to_string())
                        .or_default()
                        .insert(m.partition(), m.offset() + 1);
                    if !line_oriented {
                        // One JSON array per message: parse each alone.
                        if let Some(piece) = chunker.finish() {
                            let origin = origin(&mut offsets, &read);
                            if !feed_piece(spec, &self.format, piece, feeder, stats, origin, None) {
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
                if !feed_piece(spec, &self.format, piece, feeder, stats, origin, None) {
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
struct KafkaSink {
    producer: ThreadedProducer<DefaultProducerContext>,
    topic: String,
    encoding: Encoding,
    per_message: usize,
    /// Exactly-once output: messages held back until checkpoints.
    epochs: Option<Epochs>,
}

impl KafkaSink {
    /// Creates the producer. Under exactly-once fault tolerance, messages
    /// go out at checkpoints; resuming from a checkpoint, what the output
    /// had not sent goes out first.
    fn open(
        config: &KafkaOutput,
        spec: &ConnectorSpec,
        encoding: Encoding,
        cx: OutputContext<'_>,
    ) -> Result<Self, String> {
        let client = config.settings.client(cx.files)?;
        let mut producer_config = client.clone();
        if cx.exactly_once {
            producer_config.set("enable.idempotence", "true");
        }
        let producer: ThreadedProducer<DefaultProducerContext> =
            producer_config.create().map_err(|e| e.to_string())?;
        let topic = config.topic.clone();
        if cx.exactly_once && matches!(encoding, Encoding::Avro(_)) {
            return Err("Avro output to Kafka is at least once: its messages carry headers that held-back epochs do not keep yet; set the pipeline's fault_tolerance model to at_least_once, or use JSON".into());
        }
        let epochs = if cx.exactly_once {
            let id = format!("{}/{}", cx.pipeline, spec.name);
            Some(Epochs::open(id, &topic, &producer, client, cx.resume)?)
        } else {
            None
        };
        Ok(Self {
            producer,
            topic,
            encoding,
            per_message: config
                .records_per_message
                .map_or(RECORDS_PER_MESSAGE, |n| n.max(1)),
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
enum Encoding {
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
