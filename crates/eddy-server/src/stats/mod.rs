//! Counters of a running pipeline: per input and output endpoint, and for
//! the pipeline as a whole. Updated with relaxed atomics by the worker and
//! the connectors; read by `/stats` and `/metrics`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use eddy_dbsp::{NodeInfo, OperatorState};
use std::collections::BTreeMap;

mod prometheus;
mod report;

pub use prometheus::{pipeline_label, Exposition};

pub use report::{
    EndpointConfig, EndpointMetrics, EndpointReport, GlobalMetrics, OperatorReport, StatsReport,
};

/// The name of an HTTP ingress endpoint starts with this, then the table.
pub const INGRESS_PREFIX: &str = "api-ingress-";

/// Counters of one connector (an input into a table or an output of a view).
#[derive(Debug, Default)]
pub struct EndpointStats {
    /// Endpoint name (`api-ingress-t`, `t.kafka_input-0`, …).
    pub name: String,
    /// The table or view it feeds or drains.
    pub relation: String,
    /// Records accepted (inputs) or written (outputs).
    pub records: AtomicU64,
    /// Bytes received or sent.
    pub bytes: AtomicU64,
    /// Rows rejected by the parser (inputs).
    pub parse_errors: AtomicU64,
    /// Errors of the transport (I/O, broker, …).
    pub transport_errors: AtomicU64,
    /// Records dropped (outputs without backpressure).
    pub dropped_records: AtomicU64,
    /// Set when an input has no more data (end of a file, datagen limit).
    pub end_of_input: AtomicBool,
    /// The last error, if any.
    pub last_error: Mutex<Option<String>>,
    /// The error that stopped the connector, if one did.
    pub fatal_error: Mutex<Option<String>>,
    /// When rejected rows were last logged, and how many were rejected
    /// since without a line of their own.
    rejections: Mutex<(Option<Instant>, u64)>,
    /// How far the input is behind each partition of its source, per
    /// topic and partition (Kafka).
    pub partitions: Mutex<BTreeMap<(String, i32), PartitionLag>>,
}

/// Where an input stands in one partition of its source.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionLag {
    /// The offset of the next message the input reads.
    pub next: i64,
    /// The offset after the partition's last message, as last asked.
    pub end: Option<i64>,
    /// When the last message read was written (ms since the epoch).
    pub last_written_ms: Option<i64>,
}

impl PartitionLag {
    /// Messages written and not yet read, once the end is known.
    pub fn behind(&self) -> Option<u64> {
        self.end
            .map(|end| end.saturating_sub(self.next).max(0) as u64)
    }

    /// While messages wait, the seconds since the last message read was
    /// written: the oldest waiting message is at most that old. 0 when
    /// none wait; unknown when messages wait and none was read yet.
    pub fn seconds_behind(&self, now_ms: i64) -> Option<f64> {
        match self.behind()? {
            0 => Some(0.0),
            _ => self
                .last_written_ms
                .map(|t| (now_ms.saturating_sub(t)).max(0) as f64 / 1000.0),
        }
    }
}

/// Rejected rows are logged at most this often per endpoint (each is
/// counted, and the last one's reason is in the stats).
const REJECTIONS_LOGGED_EVERY: Duration = Duration::from_secs(1);

impl EndpointStats {
    /// A new endpoint's counters.
    pub fn new(name: impl Into<String>, relation: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            relation: relation.into(),
            ..Self::default()
        })
    }

    /// Records an error of the transport.
    pub fn error(&self, message: impl Into<String>) {
        self.transport_errors.fetch_add(1, Ordering::Relaxed);
        *self.last_error.lock().unwrap() = Some(message.into());
    }

    /// Counts `n` rows the parser rejected, `why` (the last one's place
    /// and reason) becoming the endpoint's last error. Logged as a
    /// warning at most once a second per endpoint, with how many rows
    /// were rejected since the last line, so that a bad source cannot
    /// flood the log.
    pub fn rejected(&self, n: u64, why: &str) {
        if n == 0 {
            return;
        }
        self.parse_errors.fetch_add(n, Ordering::Relaxed);
        *self.last_error.lock().unwrap() = Some(why.to_string());
        let mut rejections = self.rejections.lock().unwrap();
        let (logged, unlogged) = &mut *rejections;
        *unlogged += n;
        if logged.is_some_and(|t| t.elapsed() < REJECTIONS_LOGGED_EVERY) {
            return;
        }
        *logged = Some(Instant::now());
        let unlogged = std::mem::take(unlogged);
        drop(rejections);
        tracing::warn!(endpoint = %self.name, relation = %self.relation, rows = unlogged, "rows rejected; the last: {why}");
    }

    /// Records the error that stopped the connector.
    pub fn fatal(&self, message: impl Into<String>) {
        let message = message.into();
        self.error(message.clone());
        *self.fatal_error.lock().unwrap() = Some(message);
    }

    fn report(&self, input: bool) -> EndpointReport {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (records, bytes) = (r(&self.records), r(&self.bytes));
        let metrics = EndpointMetrics {
            total_bytes: bytes,
            total_records: records,
            num_transport_errors: r(&self.transport_errors),
            num_parse_errors: input.then(|| r(&self.parse_errors)),
            end_of_input: input.then(|| self.end_of_input.load(Ordering::Relaxed)),
            transmitted_records: (!input).then_some(records),
            transmitted_bytes: (!input).then_some(bytes),
            dropped_records: (!input).then(|| r(&self.dropped_records)),
            num_encode_errors: (!input).then_some(0),
        };
        EndpointReport {
            endpoint_name: self.name.clone(),
            config: EndpointConfig {
                stream: self.relation.clone(),
            },
            metrics,
            paused: false,
            barrier: false,
            fatal_error: self.fatal_error.lock().unwrap().clone(),
            last_error: self.last_error.lock().unwrap().clone(),
        }
    }
}

/// Counters of one running pipeline.
#[derive(Debug)]
pub struct PipelineStats {
    /// Completed steps.
    pub steps: AtomicU64,
    /// Input records processed by completed steps.
    pub processed_records: AtomicU64,
    /// Input records accepted but not yet processed.
    pub buffered_records: AtomicU64,
    /// Duration of the last step, in microseconds.
    pub last_step_micros: AtomicU64,
    /// When the pipeline started, seconds since the epoch.
    pub start_time: u64,
    /// Input endpoints.
    pub inputs: Mutex<Vec<Arc<EndpointStats>>>,
    /// Output endpoints.
    pub outputs: Mutex<Vec<Arc<EndpointStats>>>,
    /// Late changes dropped, per table or view that declares a `LATENESS`.
    pub late_records: Mutex<Vec<(String, Arc<AtomicU64>)>>,
    /// Deletions refused, per table declared `append_only`.
    pub refused_deletions: Mutex<Vec<(String, Arc<AtomicU64>)>>,
    /// Change rows each view has output, over all steps.
    pub view_changes: Mutex<Vec<(String, u64)>>,
    /// The state each operator keeps, as of a recent step.
    pub state: Mutex<Vec<OperatorState>>,
    /// The circuit's nodes, their costs and owners, as of a recent step.
    pub dataflow: Mutex<Dataflow>,
    /// The storage of the pipeline's state, if it has one.
    pub storage: std::sync::OnceLock<Arc<eddy_dbsp::Storage>>,
    /// What cannot be made durable now (a full or failing disk).
    pub durability: Mutex<Durability>,
    /// Journal appends and checkpoints that failed.
    pub durability_failures: AtomicU64,
    /// The checkpoints written since the pipeline started.
    pub checkpoints: Mutex<Checkpoints>,
    /// CPU time of the pipeline's worker thread (its steps, its outputs),
    /// in microseconds, as of its last step.
    pub worker_cpu_micros: AtomicU64,
    /// This run of the pipeline: a random UUID (version 4) made when it
    /// starts.
    pub incarnation_uuid: String,
}

/// A pipeline's circuit as measured after a step.
#[derive(Debug, Clone, Default)]
pub struct Dataflow {
    /// Steps taken then.
    pub steps: u64,
    /// Each node, with the table or view whose definition built it.
    pub nodes: Vec<(NodeInfo, Option<String>)>,
}

/// The checkpoints of one run of a pipeline.
#[derive(Debug, Clone, Default)]
pub struct Checkpoints {
    /// Written.
    pub written: u64,
    /// Failed.
    pub failed: u64,
    /// The last one written.
    pub last: Option<LastCheckpoint>,
}

/// When the last checkpoint was written, and how long it took.
#[derive(Debug, Clone, Copy)]
pub struct LastCheckpoint {
    /// When it was done.
    pub at: Instant,
    /// How long it took.
    pub took: Duration,
}

/// What of a pipeline cannot be made durable now, each until its next
/// write succeeds: the pipeline runs and answers reads meanwhile, and
/// refuses input it cannot journal.
#[derive(Debug, Clone, Default)]
pub struct Durability {
    /// The last journal append failed: HTTP input is refused (503).
    pub journal: Option<String>,
    /// The last checkpoint failed (retried).
    pub checkpoint: Option<String>,
}

impl Durability {
    /// The reason storage is degraded, if it is.
    pub fn reason(&self) -> Option<String> {
        match (&self.journal, &self.checkpoint) {
            (None, None) => None,
            (Some(j), None) => Some(format!("input cannot be journaled: {j}")),
            (None, Some(c)) => Some(format!("checkpoints fail: {c}")),
            (Some(j), Some(c)) => Some(format!(
                "input cannot be journaled: {j}; checkpoints fail: {c}"
            )),
        }
    }
}

impl PipelineStats {
    /// Records how the last journal append went.
    pub fn journal_written(&self, failure: Option<String>) {
        self.durability_outcome(|d| &mut d.journal, failure);
    }

    /// Records how the last checkpoint went, and how long it took.
    pub fn checkpoint_written(&self, failure: Option<String>, took: Duration) {
        {
            let mut c = self.checkpoints.lock().unwrap();
            match failure {
                None => {
                    c.written += 1;
                    c.last = Some(LastCheckpoint {
                        at: Instant::now(),
                        took,
                    });
                }
                Some(_) => c.failed += 1,
            }
        }
        self.durability_outcome(|d| &mut d.checkpoint, failure);
    }

    fn durability_outcome(
        &self,
        slot: impl FnOnce(&mut Durability) -> &mut Option<String>,
        failure: Option<String>,
    ) {
        let mut d = self.durability.lock().unwrap();
        let slot = slot(&mut d);
        match (&slot, &failure) {
            (None, Some(e)) => {
                tracing::error!(error = %e, "storage degraded: a write that makes the pipeline durable failed")
            }
            (Some(_), None) => tracing::info!("storage recovered: durable writes succeed again"),
            _ => {}
        }
        if failure.is_some() {
            self.durability_failures.fetch_add(1, Ordering::Relaxed);
        }
        *slot = failure;
    }

    /// The reason storage is degraded, if it is.
    pub fn degraded(&self) -> Option<String> {
        self.durability.lock().unwrap().reason()
    }
}

/// Bytes free to an unprivileged writer on the file system holding
/// `path` (none when it cannot be asked).
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    let s = rustix::fs::statvfs(path).ok()?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

impl Default for PipelineStats {
    fn default() -> Self {
        Self {
            steps: AtomicU64::new(0),
            processed_records: AtomicU64::new(0),
            buffered_records: AtomicU64::new(0),
            last_step_micros: AtomicU64::new(0),
            start_time: SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            inputs: Mutex::new(Vec::new()),
            outputs: Mutex::new(Vec::new()),
            late_records: Mutex::new(Vec::new()),
            refused_deletions: Mutex::new(Vec::new()),
            view_changes: Mutex::new(Vec::new()),
            state: Mutex::new(Vec::new()),
            dataflow: Mutex::new(Dataflow::default()),
            storage: std::sync::OnceLock::new(),
            durability: Mutex::new(Durability::default()),
            durability_failures: AtomicU64::new(0),
            checkpoints: Mutex::new(Checkpoints::default()),
            worker_cpu_micros: AtomicU64::new(0),
            incarnation_uuid: uuid_v4(rand::random()),
        }
    }
}

/// `bits` as a version 4 (random) UUID's text.
fn uuid_v4(bits: u128) -> String {
    let b = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let h = format!("{b:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// CPU time of the calling thread, in microseconds (0 where it cannot be
/// read).
pub fn thread_cpu_micros() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000)
        .saturating_add(t.tv_nsec as u64 / 1_000)
}

/// Resident memory of this process, in bytes (Linux; 0 elsewhere).
pub fn rss_bytes() -> u64 {
    eddy_dbsp::storage::resident_bytes()
}

impl PipelineStats {
    /// The input endpoint named `name`, created on first use.
    pub fn input(&self, name: &str, table: &str) -> Arc<EndpointStats> {
        let mut inputs = self.inputs.lock().unwrap();
        if let Some(e) = inputs.iter().find(|e| e.name == name) {
            return Arc::clone(e);
        }
        let e = EndpointStats::new(name, table);
        inputs.push(Arc::clone(&e));
        e
    }

    /// Registers a new output endpoint.
    pub fn add_output(&self, name: &str, view: &str) -> Arc<EndpointStats> {
        let e = EndpointStats::new(name, view);
        self.outputs.lock().unwrap().push(Arc::clone(&e));
        e
    }

    /// Forgets an output endpoint (its client went away).
    pub fn remove_output(&self, endpoint: &Arc<EndpointStats>) {
        self.outputs
            .lock()
            .unwrap()
            .retain(|e| !Arc::ptr_eq(e, endpoint));
    }

    /// The `/stats` document, in the shape of Feldera's.
    pub fn report(&self, paused: bool) -> StatsReport {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let inputs: Vec<EndpointReport> = self
            .inputs
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.report(true))
            .collect();
        let outputs: Vec<EndpointReport> = self
            .outputs
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.report(false))
            .collect();
        let (total_input, total_input_bytes) = (self.inputs.lock().unwrap().iter())
            .map(|e| (r(&e.records), r(&e.bytes)))
            .fold((0, 0), |(n, b), (en, eb)| (n + en, b + eb));
        let buffered = r(&self.buffered_records);
        // Every input connector is at its end and everything it fed was
        // processed (HTTP ingress has no end).
        let complete = buffered == 0
            && self
                .inputs
                .lock()
                .unwrap()
                .iter()
                .filter(|e| !e.name.starts_with(INGRESS_PREFIX))
                .all(|e| e.end_of_input.load(Ordering::Relaxed));
        // Each relation's count, and their total.
        let counted = |counters| {
            let per = per_relation(counters);
            let total: u64 = per.iter().map(|(_, n)| n).sum();
            let map: BTreeMap<String, u64> = per.into_iter().collect();
            (map, total)
        };
        let (late, total_late) = counted(&self.late_records);
        let (refused, total_refused) = counted(&self.refused_deletions);
        let state = self.state.lock().unwrap().clone();
        let state_bytes: usize = state.iter().map(|s| s.bytes).sum();
        let state_entries: usize = state.iter().map(|s| s.entries).sum();
        let storage = self.storage.get().map(|s| s.stats()).unwrap_or_default();
        let storage_free = self.storage.get().and_then(|s| free_bytes(s.dir()));
        let operators = state
            .iter()
            .map(|s| OperatorReport {
                node: s.node as u64,
                operator: s.operator.clone(),
                entries: s.entries as u64,
                memory_bytes: s.bytes as u64,
                storage_bytes: s.storage_bytes as u64,
                shards: s.shards as u64,
            })
            .collect();
        StatsReport {
            global_metrics: GlobalMetrics {
                state: if paused { "Paused" } else { "Running" },
                bootstrap_in_progress: false,
                rss_bytes: rss_bytes(),
                cpu_msecs: r(&self.worker_cpu_micros) / 1000,
                start_time: self.start_time,
                uptime_msecs: (now.saturating_sub(self.start_time)) * 1000,
                incarnation_uuid: self.incarnation_uuid.clone(),
                storage_bytes: storage.bytes,
                storage_files: storage.files,
                storage_index_bytes: storage.index_bytes,
                storage_written_bytes: storage.written_bytes,
                storage_write_errors: storage.write_errors,
                storage_degraded: self.degraded(),
                storage_free_bytes: storage_free,
                durability_failures: r(&self.durability_failures),
                storage_background_merges: storage.background_merges,
                storage_cache_bytes: storage.cache.bytes,
                storage_cache_capacity_bytes: storage.cache.capacity,
                storage_cache_hits: storage.cache.hits,
                storage_cache_misses: storage.cache.misses,
                buffered_input_records: buffered,
                total_input_records: total_input,
                total_input_bytes,
                total_processed_records: r(&self.processed_records),
                total_completed_records: r(&self.processed_records),
                pipeline_complete: complete,
                transaction_status: "NoTransaction",
                transaction_id: 0,
                steps: r(&self.steps),
                last_step_latency_micros: r(&self.last_step_micros),
                late_records: total_late,
                refused_deletions: total_refused,
                state_memory_bytes: state_bytes as u64,
                state_entries: state_entries as u64,
            },
            late_records: late,
            refused_deletions: refused,
            view_changes: self
                .view_changes
                .lock()
                .unwrap()
                .clone()
                .into_iter()
                .collect(),
            operators,
            suspend_error: None,
            inputs,
            outputs,
        }
    }
}

/// Each relation's count, read now.
fn per_relation(counters: &Mutex<Vec<(String, Arc<AtomicU64>)>>) -> Vec<(String, u64)> {
    let counters = counters.lock().unwrap();
    counters
        .iter()
        .map(|(relation, n)| (relation.clone(), n.load(Ordering::Relaxed)))
        .collect()
}

fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incarnations_are_version_4_uuids() {
        assert_eq!(uuid_v4(0), "00000000-0000-4000-8000-000000000000");
        assert_eq!(uuid_v4(u128::MAX), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let a = PipelineStats::default().incarnation_uuid;
        assert_ne!(a, PipelineStats::default().incarnation_uuid);
        assert_eq!(a.len(), 36);
    }

    #[test]
    fn a_threads_cpu_time_grows_with_its_work() {
        let before = thread_cpu_micros();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(thread_cpu_micros() > before);
    }
}
