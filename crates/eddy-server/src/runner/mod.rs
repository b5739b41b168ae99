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

mod feeder;
mod keys;
mod worker;

pub use feeder::{FeedError, Feeder, Origin};
pub use keys::{valid as keys_valid, Claim, Keys};

use feeder::{Chunk, Entrance};
use worker::Worker;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::Sender;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::{Storage, ZSet};
use eddy_sql::{Pipeline, PipelineOptions, Program, ViewsKept};
use serde_json::Value;
use tokio::sync::{oneshot, watch, Semaphore};

use crate::checkpoints::Positions;
use crate::stats::{EndpointStats, PipelineStats};

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
    /// Called while the worker is idle: output that waits for a system
    /// that was down may go now. What became of it, if anything was tried.
    fn retry(&mut self) -> Option<SinkStatus> {
        None
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
pub(super) type Cut = (eddy_sql::pipeline::PendingCheckpoint, Positions);

pub(super) enum Control {
    Attach(Output),
    Checkpoint(PathBuf, oneshot::Sender<Result<Cut, String>>),
    Committed(PathBuf),
    Snapshot(oneshot::Sender<Result<Snapshot, String>>),
    Stop,
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
        let (runner, worker) = Self::build(program, state, outputs, buffer_records, paused, stats)?;
        // The worker's lines (steps, outputs) are the pipeline's log's.
        let span = tracing::info_span!("worker", pipeline = %name);
        let thread = std::thread::Builder::new()
            .name(format!("eddy-{name}"))
            .stack_size(eddy_sql::limits::SQL_STACK_BYTES)
            .spawn(move || span.in_scope(|| worker.run()))
            .map_err(|e| e.to_string())?;
        *runner.thread.lock().unwrap() = Some(thread);
        Ok(runner)
    }

    /// The handle and the worker of a pipeline whose thread has not
    /// started.
    fn build(
        program: Program,
        state: StateConfig,
        outputs: Vec<Output>,
        buffer_records: usize,
        paused: bool,
        stats: Arc<PipelineStats>,
    ) -> Result<(Self, Worker), String> {
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
            ..PipelineOptions::default()
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
            keys: Mutex::new(Keys::seeded(&state.positions.keys)),
            stats,
            holds: Mutex::default(),
            committed: Mutex::new([
                Arc::new(state.positions.inputs.clone()),
                Arc::new(state.positions.inputs.clone()),
            ]),
            replayed_until: AtomicU64::new(0),
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
            unmeasured: false,
        };
        let runner = Self {
            feeder,
            control: control_tx,
            thread: Mutex::new(None),
            inputs: Mutex::new(Vec::new()),
            egress_streams: Arc::default(),
        };
        Ok((runner, worker))
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

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int32Array;
    use std::sync::mpsc;
    use std::time::Duration;

    /// The runner of `sql` and its worker, not started.
    fn built(sql: &str, stats: Arc<PipelineStats>) -> (Runner, Worker) {
        let program = Program::parse(sql).unwrap();
        Runner::build(
            program,
            StateConfig::default(),
            Vec::new(),
            1000,
            false,
            stats,
        )
        .unwrap()
    }

    /// Sends the size of each change it is given.
    struct Counting(mpsc::Sender<usize>);

    impl Sink for Counting {
        fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
            let _ = self.0.send(changes.len());
            SinkStatus::Written {
                records: changes.len() as u64,
                bytes: 0,
            }
        }
    }

    /// An output attached before some input was sent sees that input's
    /// change, even when both wait for a worker that has not yet taken
    /// its first step (the first step takes no input).
    #[test]
    fn an_output_attached_before_input_sees_its_change() {
        let stats = Arc::new(PipelineStats::default());
        let (runner, worker) = built(
            "CREATE TABLE t (x INT); CREATE VIEW v AS SELECT x FROM t;",
            Arc::clone(&stats),
        );
        let (tx, rx) = mpsc::channel();
        runner
            .attach(Output {
                view: "v".into(),
                sink: Box::new(Counting(tx)),
                stats: stats.add_output("test", "v"),
                snapshot: false,
            })
            .unwrap();
        let schema = Arc::clone(runner.feeder.schema("t").unwrap());
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int32Array::from(vec![7]))]).unwrap();
        runner
            .feeder
            .feed_blocking("t", ZSet::new(batch, vec![1]), Origin::default())
            .unwrap();
        *runner.thread.lock().unwrap() = Some(std::thread::spawn(move || worker.run()));
        assert_eq!(rx.recv_timeout(Duration::from_secs(30)), Ok(1));
        runner.stop();
    }

    /// What is fed before the journal is set was replayed from it: the
    /// pipeline is replaying until the worker has taken those steps.
    #[test]
    fn a_pipeline_replays_until_its_journal_changes_are_processed() {
        let (runner, worker) = built("CREATE TABLE t (x INT);", Arc::default());
        let schema = Arc::clone(runner.feeder.schema("t").unwrap());
        for x in 0..3 {
            let batch = RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int32Array::from(vec![x]))],
            )
            .unwrap();
            let origin = Origin {
                replayed: Some(x as u64 + 1),
                ..Origin::default()
            };
            runner
                .feeder
                .feed_blocking("t", ZSet::new(batch, vec![1]), origin)
                .unwrap();
        }
        assert!(
            !runner.feeder.replaying(),
            "no journal yet: nothing replayed"
        );
        let dir = std::env::temp_dir().join(format!("eddy-replaying-{}", std::process::id()));
        let opening = crate::journal::Opening {
            after: 0,
            expected: false,
            accept_loss: false,
        };
        let (journal, _) = crate::journal::Journal::open(&dir, opening, |_| Ok(())).unwrap();
        runner.feeder.set_journal(journal);
        assert!(runner.feeder.replaying(), "three replayed changes wait");
        *runner.thread.lock().unwrap() = Some(std::thread::spawn(move || worker.run()));
        let started = std::time::Instant::now();
        while runner.feeder.replaying() {
            assert!(started.elapsed() < Duration::from_secs(30), "replayed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(runner.feeder.processed() >= 3);
        runner.stop();
        let _ = std::fs::remove_dir_all(dir);
    }
}
