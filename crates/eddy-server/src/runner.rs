//! A running pipeline: one worker thread that owns the circuit, fed through
//! a bounded input buffer and drained by output sinks.
//!
//! Inputs (HTTP requests, connectors) parse their bytes themselves and hand
//! the worker whole Z-set chunks through [`Feeder`]. The buffer is bounded in
//! records by a semaphore: a producer waits for room, so a fast producer is
//! slowed down instead of growing memory, and nothing is dropped. Every chunk
//! gets a sequence number when it enters the buffer; a step takes all waiting
//! chunks (up to a limit), runs the circuit once, hands each view's change to
//! its sinks, and only then publishes the highest sequence number it
//! consumed. That number answers completion tokens: everything sent before a
//! token has been processed and is visible in outputs once it is reached.
//!
//! A chunk may carry its input's position (a connector's offset) and, for
//! HTTP input under fault tolerance, its journal record: the worker keeps
//! the positions of what its state holds and writes them into each
//! checkpoint, so that a resumed pipeline reads on from exactly there.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::{Storage, ZSet};
use eddy_sql::pipeline::UnreadColumns;
use eddy_sql::{Pipeline, PipelineOptions, Program, ViewsKept};
use serde_json::Value;
use tokio::sync::{oneshot, watch, OwnedSemaphorePermit, Semaphore};

use crate::checkpoints::Positions;
use crate::journal::Journal;
use crate::stats::{EndpointStats, PipelineStats};

/// Most input records one step takes from the buffer.
const MAX_STEP_RECORDS: usize = 100_000;

/// Where a view's changes go: an HTTP stream, a file, a Kafka topic.
pub trait Sink: Send {
    /// Writes one step's change of the view (never empty). `sequence` is
    /// the last input sequence number the step consumed.
    fn write(&mut self, sequence: u64, changes: &ZSet) -> SinkStatus;
    /// Marks the end of step `step`, whether or not it changed the view
    /// (HTTP streams tell clients how far they are).
    fn step_done(&mut self, _sequence: u64, _step: u64) -> SinkStatus {
        SinkStatus::Written {
            records: 0,
            bytes: 0,
        }
    }
    /// Flushes buffered output (at shutdown).
    fn flush(&mut self) {}
    /// Makes everything written so far durable and says how much that is
    /// (a file's length), for a checkpoint; `None` for outputs that keep no
    /// position. `spool` names a file in the checkpoint the sink may write
    /// (output held back until the checkpoint is durable).
    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        Ok(None)
    }
    /// The checkpoint last written is durable, in folder `dir`: output held
    /// back for it may go out now.
    fn committed(&mut self, _dir: &Path) {}
}

/// What became of one write.
#[derive(Debug)]
pub enum SinkStatus {
    /// Written: this many records and bytes.
    Written {
        /// Records written.
        records: u64,
        /// Bytes written.
        bytes: u64,
    },
    /// Dropped because the reader is slow and asked for no backpressure.
    Dropped,
    /// The reader went away: forget the sink.
    Closed,
    /// The write failed; the sink stays.
    Failed(String),
}

/// An output attached to a view.
pub struct Output {
    /// The view.
    pub view: String,
    /// Where its changes go.
    pub sink: Box<dyn Sink>,
    /// Its counters.
    pub stats: Arc<EndpointStats>,
    /// Send the view's current contents first.
    pub snapshot: bool,
}

/// A consistent snapshot for ad-hoc queries: materialized tables and views.
pub type Snapshot = Vec<(String, SchemaRef, Rows)>;

/// A relation's rows in a [`Snapshot`].
pub enum Rows {
    /// Copied when the snapshot was taken (a materialized table's or
    /// view's contents).
    Now(RecordBatch),
    /// Read when a query scans the relation, from state shared when the
    /// snapshot was taken (a keyed table's upsert): a query that does not
    /// name the table costs nothing, and the pipeline steps on meanwhile.
    Later(eddy_sql::pipeline::KeyedRows),
}

/// What a checkpoint wrote.
#[derive(Debug, Clone)]
pub struct CheckpointDone {
    /// Bytes written.
    pub written: u64,
    /// Bytes of batch files linked rather than written.
    pub linked: u64,
    /// Where the inputs and outputs stood at the cut.
    pub positions: Positions,
}

/// A checkpoint whose cut the worker took: the rest to write, and the
/// positions at the cut.
type Cut = (eddy_sql::pipeline::PendingCheckpoint, Positions);

enum Control {
    Attach(Output),
    Checkpoint(PathBuf, oneshot::Sender<Result<Cut, String>>),
    Committed(PathBuf),
    Snapshot(oneshot::Sender<Result<Snapshot, String>>),
    Stop,
}

/// A chunk of input for one table.
pub struct Chunk {
    table: String,
    changes: ZSet,
    sequence: u64,
    _permit: Option<OwnedSemaphorePermit>,
    on_processed: Option<Box<dyn FnOnce() + Send>>,
    position: Option<(Arc<str>, Value)>,
    journal_record: Option<u64>,
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
struct Entrance {
    last: u64,
    tx: Sender<Chunk>,
    journal: Option<Journal>,
}

/// What inputs use to hand changes to the worker.
pub struct Feeder {
    sender: Mutex<Entrance>,
    buffer: Arc<Semaphore>,
    capacity: usize,
    processed: watch::Sender<u64>,
    paused: AtomicBool,
    stopping: AtomicBool,
    /// Set when the worker failed (a bug): the pipeline stopped taking steps.
    failure: Mutex<Option<String>>,
    schemas: HashMap<String, SchemaRef>,
    /// The tables declared `append_only`, which refuse deletions.
    append_only: HashSet<String>,
    /// The tables' columns nothing reads: dropped once journaled, so that
    /// changes waiting for a step do not hold them.
    unread: Arc<UnreadColumns>,
    /// The pipeline's counters.
    pub stats: Arc<PipelineStats>,
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
    pub fn set_journal(&self, journal: Journal) {
        self.sender.lock().unwrap().journal = Some(journal);
    }

    /// Whether HTTP input is journaled.
    pub fn journaled(&self) -> bool {
        self.sender.lock().unwrap().journal.is_some()
    }

    /// Drops the journal records up to `upto`, which a checkpoint holds.
    pub fn truncate_journal(&self, upto: u64) -> Result<(), String> {
        match &mut self.sender.lock().unwrap().journal {
            Some(j) => j.truncate(upto),
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
            (Some(journal), true) => Some(
                journal
                    .append(table, &changes)
                    .map_err(FeedError::Journal)?,
            ),
            _ => origin.replayed,
        };
        let sequence = sender.last + 1;
        sender
            .tx
            .send(Chunk {
                table: table.to_string(),
                changes: kept.unwrap_or(changes),
                sequence,
                _permit: permit,
                on_processed: origin.on_processed,
                position: origin.position,
                journal_record,
            })
            .map_err(|_| FeedError::Stopped)?;
        sender.last = sequence;
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

/// A handle on a running pipeline.
pub struct Runner {
    /// Inputs hand their changes here.
    pub feeder: Arc<Feeder>,
    control: Sender<Control>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Threads of the input connectors, joined at stop.
    inputs: Mutex<Vec<JoinHandle<()>>>,
    /// HTTP egress streams open now.
    pub egress_streams: Arc<std::sync::atomic::AtomicUsize>,
}

/// Where a pipeline keeps its state, and its memory budget.
#[derive(Default)]
pub struct StateConfig {
    /// The storage for the operators' large batches, if any.
    pub storage: Option<Arc<Storage>>,
    /// `runtime_config.max_rss_mb`, in bytes: past it, batches go to disk
    /// from a much smaller size and the block cache is emptied.
    pub max_rss_bytes: Option<u64>,
    /// A checkpoint folder to resume from.
    pub resume: Option<PathBuf>,
    /// The inputs' positions in that checkpoint.
    pub positions: Positions,
    /// A changed program's first step, computed from kept tables.
    pub bootstrap: Option<Bootstrap>,
    /// `runtime_config.workers`: shards of each keyed operator, evaluated
    /// in parallel.
    pub workers: usize,
}

/// The start of a changed program from an older program's checkpoint
/// (see [`crate::bootstrap`]): the unchanged tables and views take over
/// their state, a first step computes the new and modified views from
/// the kept contents and sends them whole to their outputs (the others'
/// outputs already hold theirs), and a second takes the changes the old
/// program journaled after the checkpoint.
pub struct Bootstrap {
    /// The program that wrote the checkpoint.
    pub old_program: Program,
    /// The checkpoint's folder.
    pub checkpoint: PathBuf,
    /// The tables and views whose state is taken over.
    pub kept: Vec<String>,
    /// Changes pushed after the first step.
    pub changes: Vec<(String, ZSet)>,
    /// Views whose outputs receive the first step's change.
    pub announce: HashSet<String>,
}

impl Runner {
    /// Builds the circuit of `program` and starts its worker thread.
    /// `buffer_records` bounds the records waiting for a step.
    pub fn start(
        name: &str,
        program: Program,
        state: StateConfig,
        outputs: Vec<Output>,
        buffer_records: usize,
        paused: bool,
        stats: Arc<PipelineStats>,
    ) -> Result<Self, String> {
        let schemas = program
            .tables
            .iter()
            .map(|t| (t.name.clone(), Arc::clone(&t.schema)))
            .collect();
        let append_only = program
            .tables
            .iter()
            .filter(|t| t.append_only)
            .map(|t| t.name.clone())
            .collect();
        let options = PipelineOptions {
            storage: state.storage.clone(),
            workers: state.workers,
            views: ViewsKept::Materialized,
        };
        let mut pipeline =
            Pipeline::with_options(program, options.clone()).map_err(|e| e.to_string())?;
        if let Some(dir) = &state.resume {
            pipeline
                .resume(dir)
                .map_err(|e| format!("resuming from the checkpoint: {e}"))?;
            log_recomputed(&pipeline);
        }
        if let Some(b) = &state.bootstrap {
            take_state(&mut pipeline, b, options)
                .map_err(|e| format!("keeping the state of what did not change: {e}"))?;
        }
        if let Some(storage) = &state.storage {
            let _ = stats.storage.set(Arc::clone(storage));
            if let Some(budget) = state.max_rss_bytes {
                storage.watch_budget(budget).map_err(|e| e.to_string())?;
            }
        }
        *stats.late_records.lock().unwrap() = pipeline.late_records();
        *stats.refused_deletions.lock().unwrap() = pipeline.refused_deletions();
        *stats.view_changes.lock().unwrap() =
            pipeline.view_names().into_iter().map(|v| (v, 0)).collect();
        let (data_tx, data_rx) = crossbeam_channel::unbounded();
        let (control_tx, control_rx) = crossbeam_channel::unbounded();
        let capacity = buffer_records.clamp(1, Semaphore::MAX_PERMITS);
        let feeder = Arc::new(Feeder {
            sender: Mutex::new(Entrance {
                last: 0,
                tx: data_tx,
                journal: None,
            }),
            buffer: Arc::new(Semaphore::new(capacity)),
            capacity,
            processed: watch::Sender::new(0),
            paused: AtomicBool::new(paused),
            stopping: AtomicBool::new(false),
            failure: Mutex::new(None),
            schemas,
            append_only,
            unread: Arc::clone(pipeline.unread_columns()),
            stats,
        });
        let worker = Worker {
            pipeline,
            outputs,
            feeder: Arc::clone(&feeder),
            control: control_rx,
            data: data_rx,
            sequence: 0,
            positions: state.positions,
            bootstrap: state.bootstrap,
            last_step: Instant::now(),
            last_measure: None,
        };
        let thread = std::thread::Builder::new()
            .name(format!("eddy-{name}"))
            .stack_size(eddy_sql::limits::SQL_STACK_BYTES)
            .spawn(move || worker.run())
            .map_err(|e| e.to_string())?;
        Ok(Self {
            feeder,
            control: control_tx,
            thread: Mutex::new(Some(thread)),
            inputs: Mutex::new(Vec::new()),
            egress_streams: Arc::default(),
        })
    }

    /// Stops or resumes steps (and the connectors, which watch the flag).
    pub fn set_paused(&self, paused: bool) {
        self.feeder.paused.store(paused, Ordering::Relaxed);
    }

    /// Attaches an output to a view; it receives every later step's change
    /// (and first the view's contents when `output.snapshot` is set).
    pub fn attach(&self, output: Output) -> Result<(), FeedError> {
        self.control
            .send(Control::Attach(output))
            .map_err(|_| FeedError::Stopped)
    }

    /// A consistent snapshot of the materialized tables and the views.
    pub async fn snapshot(&self) -> Result<Snapshot, String> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Snapshot(tx))
            .map_err(|_| "the pipeline is not running".to_string())?;
        rx.await
            .map_err(|_| "the pipeline is not running".to_string())?
    }

    /// Writes a checkpoint of the pipeline's state into `dir`: steps wait
    /// while the worker takes the cut between two steps, and go on while
    /// the rest is written (on a blocking thread).
    pub async fn checkpoint(&self, dir: PathBuf) -> Result<CheckpointDone, String> {
        let (tx, rx) = oneshot::channel();
        self.control
            .send(Control::Checkpoint(dir, tx))
            .map_err(|_| "the pipeline is not running".to_string())?;
        let (pending, positions) = rx
            .await
            .map_err(|_| "the pipeline is not running".to_string())??;
        let (written, linked) = tokio::task::spawn_blocking(move || pending.finish())
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        Ok(CheckpointDone {
            written,
            linked,
            positions,
        })
    }

    /// Tells the outputs that the checkpoint last written is durable, in
    /// `dir` (held-back output goes out).
    pub fn committed(&self, dir: PathBuf) {
        let _ = self.control.send(Control::Committed(dir));
    }

    /// Adds the thread of an input connector, to be joined at stop.
    pub fn add_input(&self, thread: JoinHandle<()>) {
        self.inputs.lock().unwrap().push(thread);
    }

    /// Whether the worker thread is still running.
    pub fn is_running(&self) -> bool {
        self.thread
            .lock()
            .unwrap()
            .as_ref()
            .is_some_and(|t| !t.is_finished())
    }

    /// Stops the worker after its current step, flushes the outputs and
    /// waits for the worker and the input connectors to end. Blocks.
    pub fn stop(&self) {
        self.feeder.stopping.store(true, Ordering::Relaxed);
        self.feeder.buffer.close();
        let _ = self.control.send(Control::Stop);
        let worker = self.thread.lock().unwrap().take();
        if let Some(t) = worker {
            let _ = t.join();
        }
        let inputs = std::mem::take(&mut *self.inputs.lock().unwrap());
        for t in inputs {
            let _ = t.join();
        }
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.stop();
    }
}

struct Worker {
    pipeline: Pipeline,
    outputs: Vec<Output>,
    feeder: Arc<Feeder>,
    control: Receiver<Control>,
    data: Receiver<Chunk>,
    sequence: u64,
    /// Where the inputs stand in what the state holds.
    positions: Positions,
    /// A first step to take before any input.
    bootstrap: Option<Bootstrap>,
    /// When the last step started (views bounded by NOW() step on a clock).
    last_step: Instant,
    /// When the operators' state was last measured for the statistics.
    last_measure: Option<Instant>,
}

/// How often the operators' state is measured for `/stats` (a measure
/// walks the operators' maps, so it is not done on every step).
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// How often a pipeline whose views bound a time by `NOW()` steps when no
/// input arrives.
const CLOCK_STEP: Duration = Duration::from_millis(100);

impl Worker {
    fn run(mut self) {
        let initial = std::mem::take(&mut self.outputs);
        for output in initial {
            self.attach(output);
        }
        let bootstrapped = match self.bootstrap.take() {
            Some(b) => self.bootstrap(b),
            None => Ok(()),
        };
        if let Err(message) = bootstrapped {
            // Views half computed must not be checkpointed or read on.
            self.fail(message);
        }
        while self.feeder.failure().is_none() {
            let turn = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.turn()));
            match turn {
                Ok(false) => {}
                Ok(true) => break,
                Err(panic) => {
                    let message = crate::error::panic_message(panic.as_ref());
                    tracing::error!(error = %message, "pipeline worker failed");
                    self.fail(message);
                    break;
                }
            }
        }
        for o in &mut self.outputs {
            o.sink.flush();
        }
        self.feeder.processed.send_replace(u64::MAX);
    }

    /// Waits for and handles one control message or input chunk; true to
    /// stop.
    fn turn(&mut self) -> bool {
        // Time passing changes views that bound a time by NOW(): step at
        // least every CLOCK_STEP, input or not.
        if self.pipeline.uses_clock()
            && !self.feeder.is_paused()
            && self.last_step.elapsed() >= CLOCK_STEP
        {
            self.step(Vec::new());
            return false;
        }
        if self.feeder.is_paused() {
            return match self.control.recv_timeout(Duration::from_millis(50)) {
                Ok(c) => self.handle(c),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => false,
                Err(_) => true,
            };
        }
        // Control messages first: an output attached before some input was
        // sent must see that input's step (select! picks among ready
        // channels at random).
        match self.control.try_recv() {
            Ok(c) => return self.handle(c),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return true,
            Err(crossbeam_channel::TryRecvError::Empty) => {}
        }
        select! {
            recv(self.control) -> c => match c {
                Ok(c) => self.handle(c),
                Err(_) => true,
            },
            recv(self.data) -> chunk => match chunk {
                Ok(chunk) => { self.step(vec![chunk]); false }
                Err(_) => true,
            },
            default(CLOCK_STEP) => false,
        }
    }

    /// Handles a control message; true to stop.
    fn handle(&mut self, control: Control) -> bool {
        match control {
            Control::Attach(output) => self.attach(output),
            Control::Snapshot(reply) => {
                let _ = reply.send(self.snapshot());
            }
            Control::Checkpoint(dir, reply) => {
                let started = Instant::now();
                let done = self.checkpoint(&dir);
                tracing::info!(dir = %dir.display(), pause_ms = started.elapsed().as_millis() as u64, ok = done.is_ok(), "checkpoint cut taken");
                let _ = reply.send(done);
            }
            Control::Committed(dir) => {
                for output in &mut self.outputs {
                    output.sink.committed(&dir);
                }
            }
            Control::Stop => return true,
        }
        false
    }

    /// Writes each view's change of step `step` to its outputs (only those
    /// of the views in `only`, when given) and forgets the outputs whose
    /// readers went away.
    /// Adds each view's change rows of the step just taken to the stats.
    fn count_view_changes(&self) {
        let mut counts = self.feeder.stats.view_changes.lock().unwrap();
        for (view, n) in counts.iter_mut() {
            *n += self
                .pipeline
                .view_change(view)
                .map_or(0, |c| c.len() as u64);
        }
    }

    fn emit(&mut self, sequence: u64, step: u64, only: Option<&HashSet<String>>) {
        let stats = &self.feeder.stats;
        for output in &mut self.outputs {
            if only.is_some_and(|views| !views.contains(&output.view)) {
                continue;
            }
            let change = match self.pipeline.view_change(&output.view) {
                Ok(c) if c.is_empty() => c,
                Ok(c) => c.consolidate().unwrap_or_else(|_| ZSet::empty(&c.schema())),
                Err(_) => continue,
            };
            let mut open = change.is_empty() || Self::write(output, sequence, &change);
            if open {
                let status = output.sink.step_done(sequence, step);
                open = Self::record(output, status, 0);
            }
            if !open {
                stats.remove_output(&output.stats);
                output.view.clear();
            }
        }
        self.outputs.retain(|o| !o.view.is_empty());
    }

    /// Marks the pipeline failed: it takes no more input or steps.
    fn fail(&self, message: String) {
        *self.feeder.failure.lock().unwrap() = Some(message);
        self.feeder.stopping.store(true, Ordering::Relaxed);
        self.feeder.buffer.close();
    }

    /// Takes a changed program's first steps (see [`Bootstrap`]).
    fn bootstrap(&mut self, b: Bootstrap) -> Result<(), String> {
        let started = Instant::now();
        if let Err(e) = self.pipeline.step() {
            tracing::error!(error = %e, "the bootstrap step failed");
            return Err(format!("the first step of the changed program: {e}"));
        }
        let step = self.feeder.stats.steps.fetch_add(1, Ordering::Relaxed) + 1;
        self.emit(0, step, Some(&b.announce));
        if !b.changes.is_empty() {
            for (table, changes) in b.changes {
                if let Err(e) = self.pipeline.push(&table, changes) {
                    tracing::error!(table = %table, error = %e, "journaled input rejected");
                }
            }
            if let Err(e) = self.pipeline.step() {
                tracing::error!(error = %e, "the step of the journaled input failed");
                return Err(format!("the step of the old program's journal: {e}"));
            }
            let step = self.feeder.stats.steps.fetch_add(1, Ordering::Relaxed) + 1;
            self.emit(0, step, None);
        }
        tracing::info!(
            millis = started.elapsed().as_millis() as u64,
            "bootstrap step done"
        );
        Ok(())
    }

    /// Takes the cut of a checkpoint into `dir`: the state (the rest to
    /// write comes back), the outputs' positions and the inputs'.
    fn checkpoint(&mut self, dir: &Path) -> Result<Cut, String> {
        let pending = self
            .pipeline
            .checkpoint_cut(dir)
            .map_err(|e| e.to_string())?;
        for (i, output) in self.outputs.iter_mut().enumerate() {
            if let Some(p) = output
                .sink
                .checkpoint(&dir.join(format!("output-{i}.spool")))
                .map_err(|e| format!("output '{}': {e}", output.stats.name))?
            {
                self.positions.outputs.insert(output.stats.name.clone(), p);
            }
        }
        self.positions.write(dir)?;
        Ok((pending, self.positions.clone()))
    }

    fn attach(&mut self, mut output: Output) {
        if output.snapshot {
            match self.pipeline.view_contents(&output.view) {
                Ok(contents) if !contents.is_empty() => {
                    if !Self::write(&mut output, self.sequence, &contents) {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => output.stats.error(e.to_string()),
            }
        }
        self.outputs.push(output);
    }

    /// Writes to one output; false when its reader went away.
    fn write(output: &mut Output, sequence: u64, changes: &ZSet) -> bool {
        let status = output.sink.write(sequence, changes);
        Self::record(output, status, changes.len())
    }

    /// Counts what became of a write; false when the reader went away.
    fn record(output: &Output, status: SinkStatus, records: usize) -> bool {
        match status {
            SinkStatus::Written { records, bytes } => {
                output.stats.records.fetch_add(records, Ordering::Relaxed);
                output.stats.bytes.fetch_add(bytes, Ordering::Relaxed);
                true
            }
            SinkStatus::Dropped => {
                output
                    .stats
                    .dropped_records
                    .fetch_add(records as u64, Ordering::Relaxed);
                true
            }
            SinkStatus::Failed(e) => {
                output.stats.error(e);
                true
            }
            SinkStatus::Closed => false,
        }
    }

    fn snapshot(&self) -> Result<Snapshot, String> {
        let program = self.pipeline.program();
        let mut out = Vec::new();
        for t in &program.tables {
            if let Some(rows) = self
                .pipeline
                .table_rows(&t.name)
                .map_err(|e| e.to_string())?
            {
                out.push((t.name.clone(), rows.schema(), Rows::Now(rows)));
            } else if let Some((schema, read)) = self.pipeline.keyed_rows(&t.name) {
                out.push((t.name.clone(), schema, Rows::Later(read)));
            }
        }
        // Only the views whose rows are kept: materialized ones.
        for v in program
            .views
            .iter()
            .filter(|v| self.pipeline.keeps_view(&v.name))
        {
            let rows = self
                .pipeline
                .view_rows(&v.name)
                .map_err(|e| e.to_string())?;
            out.push((v.name.clone(), rows.schema(), Rows::Now(rows)));
        }
        Ok(out)
    }

    /// Takes `chunks` and whatever else waits (up to a limit), runs one
    /// step and writes the outputs.
    fn step(&mut self, mut chunks: Vec<Chunk>) {
        let started = Instant::now();
        self.last_step = started;
        let mut records: usize = chunks.iter().map(|c| c.changes.len()).sum();
        while records < MAX_STEP_RECORDS {
            match self.data.try_recv() {
                Ok(c) => {
                    records += c.changes.len();
                    chunks.push(c);
                }
                Err(_) => break,
            }
        }
        let mut last = self.sequence;
        let mut callbacks = Vec::new();
        for chunk in &mut chunks {
            last = last.max(chunk.sequence);
            let schema = chunk.changes.schema();
            let changes = std::mem::replace(&mut chunk.changes, ZSet::empty(&schema));
            if let Err(e) = self.pipeline.push(&chunk.table, changes) {
                tracing::error!(table = %chunk.table, error = %e, "input rejected");
            }
            if let Some(f) = chunk.on_processed.take() {
                callbacks.push(f);
            }
            if let Some((name, position)) = chunk.position.take() {
                self.positions.inputs.insert(name.to_string(), position);
            }
            if let Some(n) = chunk.journal_record {
                self.positions.journal = self.positions.journal.max(n);
            }
        }
        self.sequence = last;
        let stats = Arc::clone(&self.feeder.stats);
        let step = stats.steps.fetch_add(1, Ordering::Relaxed) + 1;
        match self.pipeline.step() {
            Ok(()) => {
                self.count_view_changes();
                self.emit(last, step, None)
            }
            Err(e) => tracing::error!(error = %e, "step failed"),
        }
        drop(chunks);
        for f in callbacks {
            f();
        }
        stats
            .processed_records
            .fetch_add(records as u64, Ordering::Relaxed);
        stats
            .buffered_records
            .fetch_sub(records as u64, Ordering::Relaxed);
        stats
            .last_step_micros
            .store(started.elapsed().as_micros() as u64, Ordering::Relaxed);

        if self
            .last_measure
            .is_none_or(|at| at.elapsed() >= MEASURE_EVERY)
        {
            *stats.state.lock().unwrap() = self.pipeline.operator_states();
            self.last_measure = Some(Instant::now());
        }
        self.feeder.processed.send_replace(last);
    }
}

/// Says which views a restore computed again (this Eddy plans them
/// otherwise than the one that wrote the checkpoint).
fn log_recomputed(pipeline: &Pipeline) {
    let views = pipeline.recomputed_views();
    if !views.is_empty() {
        tracing::info!(
            views = ?views,
            "views planned otherwise than in the checkpoint were computed again from what they read"
        );
    }
    let differing = pipeline.recomputed_differently();
    if !differing.is_empty() {
        tracing::warn!(
            views = ?differing,
            "views computed again hold other rows than the checkpoint's: their contents are the new rows, and their outputs were not sent the difference"
        );
    }
}

/// Builds the pipeline of the program that wrote a bootstrap's checkpoint,
/// restores it, and hands the state of the kept tables and views to
/// `pipeline` (through a scratch folder beside the checkpoint).
fn take_state(
    pipeline: &mut Pipeline,
    b: &Bootstrap,
    options: PipelineOptions,
) -> Result<(), String> {
    let mut old = Pipeline::with_options(b.old_program.clone(), options)
        .map_err(|e| format!("the earlier program: {e}"))?;
    old.resume(&b.checkpoint)
        .map_err(|e| format!("the checkpoint: {e}"))?;
    log_recomputed(&old);
    let parent = b.checkpoint.parent().unwrap_or(&b.checkpoint);
    let scratch = parent.join("bootstrap.tmp");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch)
        .map_err(|e| format!("a scratch folder {}: {e}", scratch.display()))?;
    let taken = pipeline
        .take_state(&old, &b.kept, &scratch)
        .map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&scratch);
    taken
}
