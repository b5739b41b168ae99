//! How far a Kafka input is behind its partitions (consumer lag), for the
//! metrics: the consumer records where it stands in each partition as it
//! reads ([`read`]); a thread of its own asks the broker for each
//! partition's end every [`EVERY`] ([`watch`]), so that a slow broker never
//! stalls consumption and the lag keeps moving while the pipeline is
//! paused and nothing is read.
//!
//! The lag is the partition's end less the offset after the last message
//! read. On a topic written by transactional producers the end also counts
//! the commit markers, which no consumer reads: there the lag stays at
//! least 1 after a transaction even when every message has been read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};

use crate::stats::{EndpointStats, PartitionLag};

/// How often each partition's end is asked.
const EVERY: Duration = Duration::from_secs(2);

/// Records that `m` was read: the partition's next offset follows it.
pub(super) fn read(stats: &EndpointStats, m: &BorrowedMessage<'_>) {
    let mut partitions = stats.partitions.lock().unwrap();
    let key = (m.topic().to_string(), m.partition());
    let lag = partitions.entry(key).or_default();
    lag.next = m.offset() + 1;
    if let Some(t) = m.timestamp().to_millis() {
        lag.last_written_ms = Some(t);
    }
}

/// Records where the input starts in a partition before it reads any
/// message of it (a checkpoint's offset).
pub(super) fn starts_at(stats: &EndpointStats, topic: &str, partition: i32, next: i64) {
    let mut partitions = stats.partitions.lock().unwrap();
    partitions.insert(
        (topic.to_string(), partition),
        PartitionLag {
            next,
            ..PartitionLag::default()
        },
    );
}

/// Sets its flag when dropped: the consumer's end, however it ends.
pub(super) struct Done<'a>(pub &'a AtomicBool);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// How long the broker is given to say a partition's end (a stop waits
/// for an answer under way at most this long).
const ASK_TIMEOUT: Duration = Duration::from_millis(500);

/// Asks each partition's end until `done` is set.
pub(super) fn watch(consumer: &BaseConsumer, stats: &EndpointStats, done: &AtomicBool) {
    let mut asked = Instant::now() - EVERY;
    while !done.load(Ordering::Relaxed) {
        if asked.elapsed() >= EVERY {
            asked = Instant::now();
            let known: Vec<(String, i32)> =
                stats.partitions.lock().unwrap().keys().cloned().collect();
            for (topic, partition) in known {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                // An unanswered question leaves the last end known: the
                // consumer's own errors say what is wrong with the broker.
                if let Ok((_, end)) = consumer.fetch_watermarks(&topic, partition, ASK_TIMEOUT) {
                    if let Some(lag) = stats
                        .partitions
                        .lock()
                        .unwrap()
                        .get_mut(&(topic, partition))
                    {
                        lag.end = Some(end);
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
