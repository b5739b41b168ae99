//! Exactly-once output to Kafka, without broker transactions.
//!
//! A `kafka_output` of a pipeline whose fault tolerance is `exactly_once`
//! does not send a step's messages at once. It gathers them into the
//! current *epoch*; a checkpoint seals the epoch and writes its messages
//! into the checkpoint (the spool), and only once the checkpoint is durable
//! are they sent. So a message goes out only when the state that produced
//! it is on disk: after a crash, the pipeline resumes from that checkpoint
//! and replays its inputs past it, regenerating exactly the output that was
//! not yet sent.
//!
//! What a crash can leave half done is the sending itself. Every message
//! carries two headers, `eddy-sink` (pipeline and connector) and
//! `eddy-epoch`, and message `i` of an epoch goes to partition `i mod P`;
//! Kafka keeps a partition's messages in order (the producer is
//! idempotent), so the messages of an epoch already in partition `p` are
//! the first ones sent there. On recovery, the epochs in the checkpoint's
//! spool are sent again without the messages the topic already holds,
//! counted per partition from the topic's tail.
//!
//! The price is latency: output reaches the topic at each checkpoint
//! (`checkpoint_interval_secs`), as it reaches `read_committed` readers of
//! a transactional producer that commits at checkpoints.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

const SINK_HEADER: &str = "eddy-sink";
const EPOCH_HEADER: &str = "eddy-epoch";

/// How long reading back or sending may take before it is an error.
const TIMEOUT: Duration = Duration::from_secs(30);

/// An epoch's messages.
#[derive(Debug, Serialize, Deserialize)]
struct Sealed {
    epoch: u64,
    messages: Vec<String>,
    /// Whether sending it was tried (it may be partly in the topic).
    #[serde(skip)]
    tried: bool,
}

/// The spool file of a checkpoint: the sealed epochs not yet sent.
#[derive(Debug, Serialize, Deserialize)]
struct Spool {
    epochs: Vec<Sealed>,
}

/// The epochs of one exactly-once Kafka output.
pub struct Epochs {
    /// The `eddy-sink` header: the pipeline and the connector.
    id: String,
    topic: String,
    partitions: i32,
    /// The epoch being gathered and its messages.
    next: u64,
    pending: Vec<String>,
    /// Epochs sealed in checkpoints and not yet (wholly) sent.
    sealed: VecDeque<Sealed>,
    /// Settings for reading the topic back.
    reader: ClientConfig,
}

impl Epochs {
    /// Epochs for output `id` to `topic`. Resuming from checkpoint folder
    /// `dir`, where the output recorded `position`, the epochs spooled there
    /// are sent again, less what the topic holds.
    pub fn open(
        id: String,
        topic: &str,
        producer: &ThreadedProducer<DefaultProducerContext>,
        reader: ClientConfig,
        resume: Option<(&Path, &Value)>,
    ) -> Result<Self, String> {
        let metadata = producer
            .client()
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| format!("topic '{topic}': {e}"))?;
        let partitions = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none())
            .map_or(0, |t| t.partitions().len() as i32);
        if partitions == 0 {
            return Err(format!(
                "topic '{topic}' does not exist: exactly-once output needs it created first"
            ));
        }
        let mut epochs = Self {
            id,
            topic: topic.to_string(),
            partitions,
            next: 1,
            pending: Vec::new(),
            sealed: VecDeque::new(),
            reader,
        };
        if let Some((dir, position)) = resume {
            epochs.resume(dir, position)?;
            epochs.publish(producer)?;
        }
        Ok(epochs)
    }

    fn resume(&mut self, dir: &Path, position: &Value) -> Result<(), String> {
        let name = position["spool"].as_str().unwrap_or_default();
        if name.is_empty() || name.contains('/') || name.starts_with('.') {
            return Err(format!("a bad spool name in the checkpoint: {position}"));
        }
        let path = dir.join(name);
        let spool: Spool = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.partitions = position["partitions"]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .filter(|&p| p > 0)
            .unwrap_or(self.partitions);
        self.next = position["next_epoch"].as_u64().unwrap_or(1);
        self.sealed = spool
            .epochs
            .into_iter()
            .map(|s| Sealed { tried: true, ..s })
            .collect();
        Ok(())
    }

    /// Adds a message to the current epoch.
    pub fn push(&mut self, payload: String) {
        self.pending.push(payload);
    }

    /// Seals the current epoch and writes every epoch not yet sent into
    /// `spool` (synced); returns the output's position for the checkpoint.
    pub fn seal(&mut self, spool: &Path) -> Result<Value, String> {
        let messages = std::mem::take(&mut self.pending);
        if !messages.is_empty() {
            self.sealed.push_back(Sealed {
                epoch: self.next,
                messages,
                tried: false,
            });
        }
        self.next += 1;
        let bytes = serde_json::to_vec(&Spool {
            epochs: self
                .sealed
                .iter()
                .map(|s| Sealed {
                    epoch: s.epoch,
                    messages: s.messages.clone(),
                    tried: s.tried,
                })
                .collect(),
        })
        .map_err(|e| e.to_string())?;
        std::fs::write(spool, bytes)
            .and_then(|_| std::fs::File::open(spool)?.sync_all())
            .map_err(|e| format!("{}: {e}", spool.display()))?;
        let name = spool
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(json!({"spool": name, "partitions": self.partitions, "next_epoch": self.next}))
    }

    /// Sends the sealed epochs (their checkpoint is durable), oldest first.
    /// An epoch sent before in part is sent without what the topic holds.
    pub fn publish(
        &mut self,
        producer: &ThreadedProducer<DefaultProducerContext>,
    ) -> Result<(), String> {
        while let Some((epoch, tried)) = self.sealed.front().map(|s| (s.epoch, s.tried)) {
            let skip = if tried {
                self.written(epoch)?
            } else {
                vec![0; self.partitions as usize]
            };
            if tried {
                tracing::info!(sink = %self.id, epoch, already = ?skip, "sending an epoch again without what the topic holds");
            }
            let front = self.sealed.front_mut().expect("an epoch");
            front.tried = true;
            let mut sent_in = vec![0usize; self.partitions as usize];
            for (i, payload) in front.messages.iter().enumerate() {
                let p = (i % self.partitions as usize) as i32;
                let rank = &mut sent_in[p as usize];
                *rank += 1;
                if *rank <= skip[p as usize] {
                    continue;
                }
                send(producer, &self.topic, p, &self.id, epoch, payload)?;
            }
            producer.flush(TIMEOUT).map_err(|e| e.to_string())?;
            self.sealed.pop_front();
        }
        Ok(())
    }

    /// How many messages of `epoch` each partition of the topic holds:
    /// read back from each partition's tail, in ever larger windows, until
    /// an older message of this output or the partition's start shows that
    /// the epoch's messages are all seen. A partition's end is found by
    /// reading to it (EOF), not from the high watermark, which some brokers
    /// report short.
    fn written(&self, epoch: u64) -> Result<Vec<usize>, String> {
        let consumer: BaseConsumer<ReadBack> = self
            .reader
            .clone()
            .set(
                "group.id",
                format!("eddy-readback-{}", rand::random::<u64>()),
            )
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("enable.partition.eof", "true")
            .set("fetch.wait.max.ms", "10")
            .create_with_context(ReadBack)
            .map_err(|e| e.to_string())?;
        let marks = (0..self.partitions)
            .map(|p| {
                consumer
                    .fetch_watermarks(&self.topic, p, TIMEOUT)
                    .map_err(|e| format!("topic '{}' partition {p}: {e}", self.topic))
            })
            .collect::<Result<Vec<(i64, i64)>, String>>()?;
        let mut counts: Vec<Option<usize>> = vec![None; marks.len()];
        let mut window: i64 = 1024;
        while counts.iter().any(Option::is_none) {
            // Per partition still open: where reading starts, what it saw.
            let mut open: Vec<Reading> = Vec::new();
            let mut list = TopicPartitionList::new();
            for (p, &(low, high)) in marks.iter().enumerate() {
                if counts[p].is_none() {
                    let start = (high - window).max(low);
                    list.add_partition_offset(&self.topic, p as i32, Offset::Offset(start))
                        .map_err(|e| e.to_string())?;
                    open.push(Reading {
                        partition: p as i32,
                        whole: start == low,
                        at: start,
                        ..Reading::default()
                    });
                }
            }
            consumer.assign(&list).map_err(|e| e.to_string())?;
            let deadline = Instant::now() + TIMEOUT;
            while open.iter().any(|r| !r.ended) {
                if Instant::now() > deadline {
                    return Err(format!("reading back topic '{}': timed out", self.topic));
                }
                match consumer.poll(Duration::from_millis(100)) {
                    None => {}
                    Some(Err(KafkaError::PartitionEOF(p))) => {
                        if let Some(r) = open.iter_mut().find(|r| r.partition == p) {
                            r.ended = true;
                        }
                    }
                    Some(Err(e)) => return Err(e.to_string()),
                    Some(Ok(m)) => {
                        if m.topic() != self.topic {
                            continue;
                        }
                        if let Some(r) = open.iter_mut().find(|r| r.partition == m.partition()) {
                            if m.offset() >= r.at {
                                r.at = m.offset() + 1;
                                self.count(&m, epoch, r);
                            }
                        }
                    }
                }
            }
            for r in open {
                if r.older || r.whole {
                    counts[r.partition as usize] = Some(r.count);
                }
            }
            window = window.saturating_mul(4);
        }
        Ok(counts.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Counts a message read back, if it is this output's.
    fn count(&self, m: &impl Message, epoch: u64, r: &mut Reading) {
        let Some(headers) = m.headers() else {
            return;
        };
        let value = |key: &str| {
            headers
                .iter()
                .find(|h| h.key == key)
                .and_then(|h| h.value)
                .and_then(|v| std::str::from_utf8(v).ok())
        };
        if value(SINK_HEADER) != Some(self.id.as_str()) {
            return;
        }
        match value(EPOCH_HEADER).and_then(|e| e.parse::<u64>().ok()) {
            Some(e) if e == epoch => r.count += 1,
            Some(e) if e < epoch => r.older = true,
            _ => {}
        }
    }
}

/// The read-back consumer's context: reaching a partition's end is what it
/// reads for, not an error to log.
struct ReadBack;

impl ClientContext for ReadBack {
    fn error(&self, error: KafkaError, reason: &str) {
        let end = matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        );
        if !end {
            tracing::warn!(error = %error, reason, "reading back an output topic");
        }
    }
}

impl ConsumerContext for ReadBack {}

/// Reading one partition back.
#[derive(Default)]
struct Reading {
    partition: i32,
    /// Reading from the partition's first message.
    whole: bool,
    /// The next offset expected.
    at: i64,
    ended: bool,
    /// Messages of the epoch seen, and whether an older one was.
    count: usize,
    older: bool,
}

/// Sends one message of `epoch` to partition `p`, waiting while the
/// producer's queue is full.
fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    p: i32,
    id: &str,
    epoch: u64,
    payload: &str,
) -> Result<(), String> {
    let epoch = epoch.to_string();
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: SINK_HEADER,
            value: Some(id),
        })
        .insert(Header {
            key: EPOCH_HEADER,
            value: Some(epoch.as_str()),
        });
    let record = BaseRecord::<(), str>::to(topic)
        .partition(p)
        .payload(payload)
        .headers(headers);
    super::send_waiting(producer, record)
}
