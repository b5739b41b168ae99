//! The worker thread of a running pipeline: it owns the circuit, takes
//! the waiting chunks into a step, hands each view's change to its
//! outputs, answers control messages (outputs, snapshots, checkpoints)
//! between steps, and publishes how far it has processed.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver};
use eddy_dbsp::ZSet;
use eddy_sql::Pipeline;

use super::{Bootstrap, Chunk, Control, Cut, Feeder, Output, Rows, SinkStatus, Snapshot};
use crate::checkpoints::Positions;
/// Most input records one step takes from the buffer.
const MAX_STEP_RECORDS: usize = 100_000;

pub(super) struct Worker {
    pub(super) pipeline: Pipeline,
    pub(super) outputs: Vec<Output>,
    pub(super) feeder: Arc<Feeder>,
    pub(super) control: Receiver<Control>,
    pub(super) data: Receiver<Chunk>,
    pub(super) sequence: u64,
    /// Where the inputs stand in what the state holds.
    pub(super) positions: Positions,
    /// A first step to take before any input.
    pub(super) bootstrap: Option<Bootstrap>,
    /// When the last step started (views bounded by NOW() step on a clock).
    pub(super) last_step: Instant,
    /// When the operators' state was last measured for the statistics.
    pub(super) last_measure: Option<Instant>,
    /// Whether a step was taken since (measured when the worker is next
    /// idle, so that what is shown after a burst is its end).
    pub(super) unmeasured: bool,
}

/// How often the operators' state is measured for `/stats` (a measure
/// walks the operators' maps, so it is not done on every step).
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// How often a pipeline whose views bound a time by `NOW()` steps when no
/// input arrives.
const CLOCK_STEP: Duration = Duration::from_millis(100);

impl Worker {
    /// Steps until stopped: takes waiting chunks, runs the circuit,
    /// hands each view's change to its outputs.
    pub(super) fn run(mut self) {
        let initial = std::mem::take(&mut self.outputs);
        for output in initial {
            self.attach(output);
        }
        // A pipeline takes a step when it starts, input or not, so that
        // views of constants (`AS VALUES …`) are filled at once.
        let bootstrapped = match self.bootstrap.take() {
            Some(b) => self.bootstrap(b),
            None => {
                self.step(Vec::new());
                // The operators' state is measured after the first step
                // with input, not after this empty one.
                self.last_measure = None;
                Ok(())
            }
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
        // Time passing changes views that bound a time by NOW(): step at
        // least every CLOCK_STEP, input or not.
        if self.pipeline.uses_clock() && self.last_step.elapsed() >= CLOCK_STEP {
            self.step(Vec::new());
            return false;
        }
        select! {
            recv(self.control) -> c => match c {
                Ok(c) => self.handle(c),
                Err(_) => true,
            },
            recv(self.data) -> chunk => match chunk {
                Ok(chunk) => {
                    // Control messages that arrived with it go first (see
                    // above); a stop among them still takes this chunk's
                    // step, as it was received.
                    let mut stop = false;
                    while let Ok(c) = self.control.try_recv() {
                        if self.handle(c) {
                            stop = true;
                            break;
                        }
                    }
                    self.step(self.waiting(chunk));
                    stop
                }
                Err(_) => true,
            },
            default(CLOCK_STEP) => {
                if self.unmeasured
                    && self
                        .last_measure
                        .is_none_or(|at| at.elapsed() >= MEASURE_EVERY)
                {
                    self.measure();
                }
                // Idle: outputs retry what waits for their systems.
                for o in &mut self.outputs {
                    if let Some(status) = o.sink.retry() {
                        Self::record(o, status, 0);
                    }
                }
                false
            }
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
        if let Some(input) = self.feeder.held_by() {
            return Err(format!(
                "input '{input}' is reading a snapshot, which enters the state whole: the checkpoint waits for it"
            ));
        }
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
        self.positions.write(dir).map_err(|e| e.to_string())?;
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

    /// `first` and the chunks waiting behind it, up to MAX_STEP_RECORDS.
    fn waiting(&self, first: Chunk) -> Vec<Chunk> {
        let mut records = first.changes.len();
        let mut chunks = vec![first];
        while records < MAX_STEP_RECORDS {
            match self.data.try_recv() {
                Ok(c) => {
                    records += c.changes.len();
                    chunks.push(c);
                }
                Err(_) => break,
            }
        }
        chunks
    }

    /// Runs one step over `chunks` and writes the outputs (no chunks for
    /// the first step and the clock's steps: input is taken only after the
    /// control messages sent before it, so that an output attached before
    /// some input sees its change).
    fn step(&mut self, mut chunks: Vec<Chunk>) {
        let started = Instant::now();
        self.last_step = started;
        let records: usize = chunks.iter().map(|c| c.changes.len()).sum();
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
            if let Some(key) = chunk.key.take() {
                self.positions.keys.push(key);
                super::keys::trim(&mut self.positions.keys);
            }
        }
        self.sequence = last;
        let stats = Arc::clone(&self.feeder.stats);
        let step = stats.steps.fetch_add(1, Ordering::Relaxed) + 1;
        if let Err(e) = self.pipeline.step() {
            // A step that fails is not half applied downstream: nothing is
            // emitted, its input is not reported processed (completion
            // tokens stay in progress, Kafka offsets are not committed),
            // and the pipeline fails visibly. (Whether a program fix then
            // replays this input from the journal is not yet tested.)
            tracing::error!(error = %e, step, "step failed; the pipeline stops");
            self.fail(format!("step {step} failed: {e}"));
            return;
        }
        self.count_view_changes();
        self.emit(last, step, None);
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
        // The thread's CPU time so far: its steps and outputs.
        stats
            .worker_cpu_micros
            .store(crate::stats::thread_cpu_micros(), Ordering::Relaxed);

        if self
            .last_measure
            .is_none_or(|at| at.elapsed() >= MEASURE_EVERY)
        {
            self.measure();
        } else {
            self.unmeasured = true;
        }
        self.feeder.processed.send_replace(last);
    }

    /// Measures the operators' state and the circuit's costs for the
    /// statistics.
    fn measure(&mut self) {
        let stats = &self.feeder.stats;
        *stats.state.lock().unwrap() = self.pipeline.operator_states();
        *stats.dataflow.lock().unwrap() = crate::stats::Dataflow {
            steps: stats.steps.load(Ordering::Relaxed),
            nodes: self.pipeline.dataflow(),
        };
        self.last_measure = Some(Instant::now());
        self.unmeasured = false;
    }
}
