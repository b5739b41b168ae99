//! The entrance of a running pipeline: inputs hand their changes to
//! [`Feeder::feed`], which bounds what waits for a step, journals HTTP
//! input when the pipeline keeps a journal, numbers each chunk and sends
//! it to the worker.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::Sender;
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use eddy_sql::pipeline::UnreadColumns;
use serde_json::Value;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::journal::Journal;
use crate::stats::PipelineStats;
/// A chunk of input for one table.
pub struct Chunk {
    pub(super) table: String,
    pub(super) changes: ZSet,
    pub(super) sequence: u64,
    pub(super) _permit: Option<OwnedSemaphorePermit>,
    pub(super) on_processed: Option<Box<dyn FnOnce() + Send>>,
    pub(super) position: Option<(Arc<str>, Value)>,
    pub(super) journal_record: Option<u64>,
    /// The idempotency key of the request, and the rows it applied.
    pub(super) key: Option<(String, u64)>,
}

/// Where a chunk of input comes from, beyond its changes.
#[derive(Default)]
pub struct Origin {
    /// The connector that read it and its position just after it, recorded
    /// in checkpoints once the chunk is in the state.
    pub position: Option<(Arc<str>, Value)>,
    /// Runs on the worker after the step that consumed the chunk (Kafka
    /// offset commits).
    pub on_processed: Option<Box<dyn FnOnce() + Send>>,
    /// HTTP input: appended to the journal (and synced) before it enters,
    /// when the pipeline keeps one.
    pub journal: bool,
    /// A journal record replayed on recovery (already in the journal).
    pub replayed: Option<u64>,
    /// The idempotency key of the HTTP request it completes (claimed in
    /// [`Feeder::keys`]).
    pub key: Option<String>,
}

impl Origin {
    /// A chunk read by connector `name`, which is at `position` after it.
    pub fn at(name: &str, position: Value) -> Self {
        Self {
            position: Some((Arc::from(name), position)),
            ..Self::default()
        }
    }
}

/// The entrance of the worker's channel: the last sequence number given,
/// the channel and the journal, locked together so that chunks enter the
/// channel (and the journal) in sequence order.
pub(super) struct Entrance {
    pub(super) last: u64,
    pub(super) tx: Sender<Chunk>,
    pub(super) journal: Option<Journal>,
}

/// What inputs use to hand changes to the worker.
pub struct Feeder {
    pub(super) sender: Mutex<Entrance>,
    pub(super) buffer: Arc<Semaphore>,
    pub(super) capacity: usize,
    pub(super) processed: watch::Sender<u64>,
    pub(super) paused: AtomicBool,
    pub(super) stopping: AtomicBool,
    /// Set when the worker failed (a bug): the pipeline stopped taking steps.
    pub(super) failure: Mutex<Option<String>>,
    pub(super) schemas: HashMap<String, SchemaRef>,
    /// The tables declared `append_only`, which refuse deletions.
    pub(super) append_only: HashSet<String>,
    /// The idempotency keys of recent HTTP requests.
    pub keys: Mutex<super::Keys>,
    /// The tables' columns nothing reads: dropped once journaled, so that
    /// changes waiting for a step do not hold them.
    pub(super) unread: Arc<UnreadColumns>,
    /// The pipeline's counters.
    pub stats: Arc<PipelineStats>,
    /// Inputs reading what must enter the state whole before a checkpoint
    /// may be cut (a database snapshot): checkpoints fail while any is.
    pub(super) holds: Mutex<BTreeSet<String>>,
    /// The inputs' positions in the two checkpoints kept (the older
    /// first), for sources that forget what the state holds (a replication
    /// slot): a recovery may start from either.
    pub(super) committed: Mutex<[Arc<BTreeMap<String, Value>>; 2]>,
    /// The sequence number of the last change replayed from the journal.
    pub(super) replayed_until: AtomicU64,
}

/// Why input was refused.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The table is not in the program.
    #[error("table '{0}' not found")]
    NoSuchTable(String),
    /// The pipeline stopped.
    #[error("the pipeline is not running")]
    Stopped,
    /// The journal could not be written: the change was not taken.
    #[error("the input journal could not be written: {0}")]
    Journal(String),
}

impl Feeder {
    /// The schema of a table's rows as inputs parse them.
    pub fn schema(&self, table: &str) -> Result<&SchemaRef, FeedError> {
        self.schemas
            .get(table)
            .ok_or_else(|| FeedError::NoSuchTable(table.to_string()))
    }

    /// Whether `table` is declared `append_only` (the pipeline refuses the
    /// deletions sent to it).
    pub fn append_only(&self, table: &str) -> bool {
        self.append_only.contains(table)
    }

    /// Why the worker failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.failure.lock().unwrap().clone()
    }

    /// Whether the pipeline is paused (connectors wait while it is).
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// Whether the pipeline is stopping (connectors end).
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// The sequence number of the last chunk entered so far: a completion
    /// token for everything sent before now.
    pub fn token(&self) -> u64 {
        self.sender.lock().unwrap().last
    }

    /// Starts journaling HTTP input (fault tolerance).
    /// Everything fed before it was replayed from the journal (inputs
    /// start after): the pipeline is replaying until that is processed.
    pub fn set_journal(&self, journal: Journal) {
        let mut sender = self.sender.lock().unwrap();
        sender.journal = Some(journal);
        self.replayed_until.store(sender.last, Ordering::Relaxed);
    }

    /// Whether changes replayed from the journal after a restart are still
    /// waiting for their steps: the views do not yet hold all the input
    /// the pipeline had taken before it.
    pub fn replaying(&self) -> bool {
        self.processed() < self.replayed_until.load(Ordering::Relaxed)
    }

    /// Whether HTTP input is journaled.
    pub fn journaled(&self) -> bool {
        self.sender.lock().unwrap().journal.is_some()
    }

    /// Holds checkpoints back while input `name` reads something the
    /// state must take whole; [`Feeder::release`] ends the hold.
    pub fn hold(&self, name: &str) {
        self.holds.lock().unwrap().insert(name.to_string());
    }

    /// Ends input `name`'s hold on checkpoints.
    pub fn release(&self, name: &str) {
        self.holds.lock().unwrap().remove(name);
    }

    /// An input holding checkpoints back, if any.
    pub fn held_by(&self) -> Option<String> {
        self.holds.lock().unwrap().first().cloned()
    }

    /// Records the inputs' positions of a checkpoint just written (the
    /// older of the two kept before it is no longer kept).
    pub fn checkpointed(&self, inputs: BTreeMap<String, Value>) {
        let mut kept = self.committed.lock().unwrap();
        kept[0] = std::mem::replace(&mut kept[1], Arc::new(inputs));
    }

    /// Input `name`'s position in the older checkpoint kept: what the
    /// source must still be able to give again.
    pub fn checkpointed_position(&self, name: &str) -> Option<Value> {
        self.committed.lock().unwrap()[0].get(name).cloned()
    }

    /// Drops the journal records up to `upto`, which a checkpoint holds.
    pub fn truncate_journal(&self, upto: u64) -> Result<(), String> {
        match &mut self.sender.lock().unwrap().journal {
            Some(j) => j.truncate(upto).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// The highest sequence number processed and visible in outputs.
    pub fn processed(&self) -> u64 {
        *self.processed.borrow()
    }

    /// Waits until `token` is processed or the pipeline stops.
    pub async fn wait_processed(&self, token: u64) -> bool {
        let mut rx = self.processed.subscribe();
        let done = rx.wait_for(|&p| p >= token).await.is_ok();
        done
    }

    /// Hands a change of `table` to the worker, waiting while the buffer is
    /// full; returns its sequence number. A journaled change is synced to
    /// the journal first, so this blocks on the disk: call it off the async
    /// runtime's threads then ([`Feeder::feed_blocking`]).
    pub async fn feed(&self, table: &str, changes: ZSet, origin: Origin) -> Result<u64, FeedError> {
        // A keyed request that is not taken lets go of its key (the
        // handler hands it over before a journaled feed, which goes on
        // even when the client has gone).
        let key = origin.key.clone();
        let fed = self.feed_change(table, changes, origin).await;
        if let (Err(_), Some(key)) = (&fed, key) {
            self.keys.lock().unwrap().release(&key);
        }
        fed
    }

    async fn feed_change(
        &self,
        table: &str,
        changes: ZSet,
        origin: Origin,
    ) -> Result<u64, FeedError> {
        if !self.schemas.contains_key(table) {
            return Err(FeedError::NoSuchTable(table.to_string()));
        }
        let n = changes.len().min(self.capacity) as u32;
        let permit = if n > 0 {
            Some(
                Arc::clone(&self.buffer)
                    .acquire_many_owned(n)
                    .await
                    .map_err(|_| FeedError::Stopped)?,
            )
        } else {
            None
        };
        if self.is_stopping() {
            return Err(FeedError::Stopped);
        }
        let len = changes.len() as u64;
        // The journal keeps whole rows (a changed program may read more);
        // the step gets only what is read.
        let kept = match self.unread.columns(table).is_empty() {
            true => None,
            false => self.unread.drop_from(table, changes.clone()).ok(),
        };
        let mut sender = self.sender.lock().unwrap();
        let journal_record = match (&mut sender.journal, origin.journal) {
            (Some(journal), true) => {
                let appended = journal.append(table, &changes, origin.key.as_deref());
                self.stats
                    .journal_written(appended.as_ref().err().map(|e| e.to_string()));
                Some(appended.map_err(|e| FeedError::Journal(e.to_string()))?)
            }
            _ => origin.replayed,
        };
        let sequence = sender.last + 1;
        let sent = sender.tx.send(Chunk {
            table: table.to_string(),
            changes: kept.unwrap_or(changes),
            sequence,
            _permit: permit,
            on_processed: origin.on_processed,
            position: origin.position,
            journal_record,
            key: origin.key.clone().map(|k| (k, len)),
        });
        if sent.is_err() {
            // The worker is gone: the change was not taken, so it must not
            // replay either.
            if let (Some(journal), Some(n)) = (&mut sender.journal, journal_record) {
                if origin.journal {
                    journal
                        .retract(n)
                        .map_err(|e| FeedError::Journal(e.to_string()))?;
                }
            }
            return Err(FeedError::Stopped);
        }
        sender.last = sequence;
        if let Some(key) = origin.key {
            self.keys.lock().unwrap().remember(key, len);
        }
        self.stats
            .buffered_records
            .fetch_add(len, Ordering::Relaxed);
        Ok(sequence)
    }

    /// [`Feeder::feed`] for connector threads outside the async runtime.
    pub fn feed_blocking(
        &self,
        table: &str,
        changes: ZSet,
        origin: Origin,
    ) -> Result<u64, FeedError> {
        futures::executor::block_on(self.feed(table, changes, origin))
    }
}
