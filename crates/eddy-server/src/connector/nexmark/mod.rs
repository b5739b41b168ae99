//! `nexmark`: the Nexmark benchmark's events, generated in process
//! straight into Arrow batches of three tables (see `generator.rs` for the
//! events themselves).
//!
//! Declared as Feldera declares it: one connector on each of the tables
//! `person`, `auction` and `bid`, each `{"transport": {"name": "nexmark",
//! "config": {"table": "person" | "auction" | "bid", "options"?: {…}}}}`,
//! with `options` on at most one of them, for all three:
//!
//! - `events`: how many (default 100,000,000);
//! - `threads`: generator threads (default 4);
//! - `batch_size_per_thread` (or `batch_size`): events each thread
//!   generates per batch (default 1,000); a batch of the three tables
//!   covers `threads × batch_size_per_thread` consecutive events;
//! - `max_step_size_per_thread`: accepted for Feldera's programs (steps
//!   here take what is waiting, up to the worker's own limit);
//! - `rate`: events per second (default: as fast as the pipeline takes
//!   them);
//! - `seed`: varies every draw (default 0).
//!
//! The connector on `bid` runs the generator and feeds all three tables;
//! the other two only name their tables. Thread `i` generates the events
//! of each batch whose number is `i` modulo `threads`; a batch's rows enter
//! person first, then auction, then bid. Its position (recorded in
//! checkpoints) is the first event not yet fed and, for a batch fed in
//! part, how many of its tables were: a resumed generator regenerates that
//! batch (events depend only on their numbers) and feeds the rest of it.
//! All three connectors report end of input once every event is fed.

mod generator;

use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::record_batch::RecordBatch;
use eddy_dbsp::ZSet;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use generator::Table;

use super::{CheckContext, ConnectorSpec, InputContext, InputRun, Transport};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// The generator's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    events: u64,
    threads: usize,
    batch_size_per_thread: u64,
    rate: Option<u64>,
    seed: u64,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            events: 100_000_000,
            threads: 4,
            batch_size_per_thread: 1000,
            rate: None,
            seed: 0,
        }
    }
}

/// `nexmark`'s configuration: the table a connector feeds and, on one of
/// the three, the generator's options.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NexmarkConfig {
    table: Table,
    options: Option<OptionsConfig>,
}

/// The generator's options as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OptionsConfig {
    events: Option<u64>,
    threads: Option<u64>,
    #[serde(alias = "batch_size")]
    batch_size_per_thread: Option<u64>,
    /// Accepted for Feldera's programs: steps here take what is waiting.
    #[serde(rename = "max_step_size_per_thread")]
    _max_step_size_per_thread: Option<u64>,
    rate: Option<u64>,
    seed: Option<u64>,
}

impl Options {
    fn new(c: &OptionsConfig) -> Result<Self, String> {
        let d = Options::default();
        let threads = c.threads.map_or(Ok(d.threads), |n| match n {
            1..=256 => Ok(n as usize),
            _ => Err("nexmark \"threads\" must be 1 to 256"),
        })?;
        let batch_size_per_thread = match c.batch_size_per_thread {
            None => d.batch_size_per_thread,
            Some(n) if (1..=1 << 20).contains(&n) => n,
            Some(_) => return Err("nexmark \"batch_size_per_thread\" must be 1 to 1048576".into()),
        };
        let rate = match c.rate {
            Some(0) => return Err("nexmark \"rate\" must be positive".into()),
            r => r,
        };
        Ok(Self {
            events: c.events.unwrap_or(d.events),
            threads,
            batch_size_per_thread,
            rate,
            seed: c.seed.unwrap_or(d.seed),
        })
    }

    /// Events per batch.
    fn batch(&self) -> u64 {
        self.threads as u64 * self.batch_size_per_thread
    }
}

impl Transport for NexmarkConfig {
    fn check(&self, _spec: &ConnectorSpec, _cx: &CheckContext<'_>) -> Result<(), String> {
        self.options.as_ref().map(Options::new).transpose()?;
        Ok(())
    }

    fn start_input(
        &self,
        _spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        if self.table != Table::Bid {
            return Ok(None);
        }
        let source = Source::open(cx.connectors, cx.feeder, cx.position)?;
        let feeder = cx.feeder.clone();
        Ok(Some(Box::new(move || source.run(&feeder))))
    }
}

/// The nexmark connectors of a program, by table (person, auction, bid),
/// with their options; `None` when the program has none. They must cover
/// each table exactly once, with options on at most one.
pub fn group(specs: &[ConnectorSpec]) -> Result<Option<([&ConnectorSpec; 3], Options)>, String> {
    let nexmark: Vec<(&ConnectorSpec, &NexmarkConfig)> = specs
        .iter()
        .filter_map(|s| Some((s, s.config::<NexmarkConfig>()?)))
        .collect();
    if nexmark.is_empty() {
        return Ok(None);
    }
    let mut found: [Option<&ConnectorSpec>; 3] = [None; 3];
    let mut options = None;
    for (spec, config) in nexmark {
        let t = config.table;
        let slot = &mut found[t as usize];
        if slot.is_some() {
            return Err(format!("more than one nexmark connector for {}", t.name()));
        }
        *slot = Some(spec);
        if let Some(o) = &config.options {
            if options.is_some() {
                return Err("nexmark \"options\" may be given on one connector only".into());
            }
            options = Some(Options::new(o)?);
        }
    }
    let mut out = Vec::with_capacity(3);
    for (t, spec) in Table::ALL.into_iter().zip(found) {
        out.push(spec.ok_or_else(|| {
            format!(
                "nexmark connectors are needed on all three tables: none for {}",
                t.name()
            )
        })?);
    }
    let specs: [&ConnectorSpec; 3] = out.try_into().expect("three tables");
    Ok(Some((specs, options.unwrap_or_default())))
}

/// Where the generator is: every event before `next` was fed, and of the
/// batch `next..end`, the first `fed` tables (person, auction, bid).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Position {
    next: u64,
    end: u64,
    fed: usize,
}

impl Position {
    fn to_json(self) -> Value {
        serde_json::to_value(self).expect("three numbers")
    }
}

/// The generator of a program's three nexmark connectors.
pub struct Source {
    /// The connector that runs it (on `bid`): its name carries the
    /// position.
    name: String,
    relations: [String; 3],
    schemas: [SchemaRef; 3],
    stats: [Arc<EndpointStats>; 3],
    options: Options,
    start: Position,
}

impl Source {
    /// The generator of the nexmark connectors in `specs`, for the
    /// pipeline `feeder` feeds, from `position` (the `bid` connector's).
    pub fn open(
        specs: &[ConnectorSpec],
        feeder: &Feeder,
        position: Option<&Value>,
    ) -> Result<Self, String> {
        let (group, options) = group(specs)?.ok_or("no nexmark connectors")?;
        let mut schemas = Vec::with_capacity(3);
        for (t, spec) in Table::ALL.into_iter().zip(group) {
            let schema = Arc::clone(feeder.schema(&spec.relation).map_err(|e| e.to_string())?);
            t.check(&schema)?;
            schemas.push(schema);
        }
        Ok(Self {
            name: group[2].name.clone(),
            relations: group.map(|s| s.relation.clone()),
            schemas: schemas.try_into().expect("three tables"),
            stats: group.map(|s| feeder.stats.input(&s.name, &s.relation)),
            options,
            start: {
                let p: Position = super::position(position)?;
                if p.end < p.next || p.fed > 2 {
                    return Err(format!(
                        "the checkpoint's nexmark position {p:?} is not one"
                    ));
                }
                p
            },
        })
    }

    /// Generates every event and feeds it, until done or stopped.
    pub fn run(self, feeder: &Feeder) {
        let workers: Vec<Worker> = (0..self.options.threads)
            .map(|i| Worker::spawn(i, &self.options, &self.schemas))
            .collect();
        let events = self.options.events;
        let batch = self.options.batch();
        let started = Instant::now();
        let first = self.start.next;
        // The batch being generated, and how many of its tables to skip.
        let mut pending: Option<(Range<u64>, usize)> = None;
        let mut next = self.start.next;
        if self.start.fed > 0 && self.start.end > next {
            for w in &workers {
                w.send(next..self.start.end);
            }
            pending = Some((next..self.start.end, self.start.fed));
            next = self.start.end;
        }
        loop {
            // Start the next batch before feeding the one ready, so that
            // generation overlaps with feeding.
            let upcoming = (next < events).then(|| next..(next + batch).min(events));
            if let Some(r) = &upcoming {
                if !self.wait_for_rate(feeder, started, r.end - first) {
                    return;
                }
                for w in &workers {
                    w.send(r.clone());
                }
            }
            if let Some((range, skip)) = pending.take() {
                if !self.feed(feeder, &workers, range, skip) {
                    return;
                }
            }
            match upcoming {
                Some(r) => {
                    next = r.end;
                    pending = Some((r, 0));
                }
                None => break,
            }
        }
        for s in &self.stats {
            s.end_of_input.store(true, Ordering::Relaxed);
        }
    }

    /// Waits until `generated` events are due at the configured rate;
    /// false once the pipeline is stopping.
    fn wait_for_rate(&self, feeder: &Feeder, started: Instant, generated: u64) -> bool {
        let Some(rate) = self.options.rate else {
            return !feeder.is_stopping();
        };
        loop {
            let due = started.elapsed().as_secs_f64() * rate as f64;
            if due >= generated as f64 || feeder.is_stopping() {
                return !feeder.is_stopping();
            }
            let wait = (generated as f64 - due) / rate as f64;
            std::thread::sleep(Duration::from_secs_f64(wait.min(0.05)));
        }
    }

    /// Collects the batch `range` from the workers and feeds its tables
    /// after the first `skip`; false once the pipeline is stopping.
    fn feed(&self, feeder: &Feeder, workers: &[Worker], range: Range<u64>, skip: usize) -> bool {
        let mut parts: [Vec<RecordBatch>; 3] = Default::default();
        for w in workers {
            match w.results.recv() {
                Ok(Ok(batches)) => {
                    for (part, b) in parts.iter_mut().zip(batches) {
                        part.push(b);
                    }
                }
                Ok(Err(e)) => {
                    self.stats[2].error(format!("nexmark: {e}"));
                    return false;
                }
                Err(_) => return false,
            }
        }
        for (i, part) in parts.iter().enumerate().skip(skip) {
            let batch = match concat_batches(&self.schemas[i], part) {
                Ok(b) => b,
                Err(e) => {
                    self.stats[i].error(format!("nexmark: {e}"));
                    return false;
                }
            };
            if batch.num_rows() == 0 {
                continue;
            }
            let stats = &self.stats[i];
            stats
                .records
                .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
            stats
                .bytes
                .fetch_add(batch.get_array_memory_size() as u64, Ordering::Relaxed);
            let position = if i == 2 {
                Position {
                    next: range.end,
                    end: range.end,
                    fed: 0,
                }
            } else {
                Position {
                    next: range.start,
                    end: range.end,
                    fed: i + 1,
                }
            };
            let origin = Origin::at(&self.name, position.to_json());
            if !super::wait_while_paused(feeder)
                || feeder
                    .feed_blocking(&self.relations[i], ZSet::with_weight(batch, 1), origin)
                    .is_err()
            {
                return false;
            }
        }
        true
    }
}

/// A generator thread: takes batches (ranges of event numbers) and
/// answers with its share of each, the three tables' rows.
struct Worker {
    ranges: Sender<Range<u64>>,
    results: Receiver<Result<[RecordBatch; 3], String>>,
}

impl Worker {
    fn spawn(index: usize, options: &Options, schemas: &[SchemaRef; 3]) -> Self {
        let (ranges, inbox) = channel::<Range<u64>>();
        let (outbox, results) = channel();
        let (threads, seed, schemas) = (options.threads as u64, options.seed, schemas.clone());
        let index = index as u64;
        let spawned = std::thread::Builder::new()
            .name(format!("eddy-nexmark-{index}"))
            .spawn(move || {
                let mut events = generator::Events::new(seed);
                // Ends when the source drops its sender.
                for range in inbox {
                    // The events of `range` that are `index` modulo `threads`.
                    let first = range.start + (index + threads - range.start % threads) % threads;
                    for e in (first..range.end).step_by(threads as usize) {
                        events.push(e);
                    }
                    let mut out = Vec::with_capacity(3);
                    for (t, schema) in Table::ALL.into_iter().zip(&schemas) {
                        match events.finish(t, schema) {
                            Ok(b) => out.push(b),
                            Err(e) => {
                                let _ = outbox.send(Err(e));
                                return;
                            }
                        }
                    }
                    let batches: [RecordBatch; 3] = out.try_into().expect("three tables");
                    if outbox.send(Ok(batches)).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = spawned {
            // No thread: the source sees its results channel closed.
            tracing::error!(error = %e, "could not start a nexmark generator thread");
        }
        Self { ranges, results }
    }

    fn send(&self, range: Range<u64>) {
        let _ = self.ranges.send(range);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(table: &str, options: Option<Value>) -> Result<ConnectorSpec, String> {
        let mut config = json!({"table": table});
        if let Some(o) = options {
            config["options"] = o;
        }
        let written = json!({"transport": {"name": "nexmark", "config": config}});
        ConnectorSpec::read(table, true, 0, written, &[])
    }

    fn validate(table: &str, options: Option<Value>) -> Result<(), String> {
        let spec = read(table, options)?;
        let files = super::super::FileAccess::new(&std::env::temp_dir(), &[]).unwrap();
        let columns = datafusion::arrow::datatypes::Fields::empty();
        spec.check(&files, &columns)
    }

    fn spec(table: &str, options: Option<Value>) -> ConnectorSpec {
        read(table, options).unwrap()
    }

    #[test]
    fn the_three_connectors_form_one_group() {
        let all = vec![
            spec("person", Some(json!({"events": 1000, "threads": 2}))),
            spec("auction", None),
            spec("bid", None),
        ];
        let (specs, options) = group(&all).unwrap().unwrap();
        assert_eq!(specs[2].relation, "bid");
        assert_eq!((options.events, options.threads), (1000, 2));
        assert!(group(&all[..2]).unwrap_err().contains("none for bid"));
        let twice = vec![
            spec("person", Some(json!({}))),
            spec("auction", Some(json!({}))),
            spec("bid", None),
        ];
        assert!(group(&twice).unwrap_err().contains("one connector only"));
        assert!(validate("bids", None).is_err());
        assert!(validate("bid", Some(json!({"threads": 0}))).is_err());
        assert!(validate("bid", Some(json!({"colour": 1}))).is_err());
        assert!(validate("bid", Some(json!({"rate": 5000, "batch_size": 10}))).is_ok());
    }

    #[test]
    fn positions_read_back() {
        let p = Position {
            next: 4000,
            end: 8000,
            fed: 2,
        };
        let back: Position = super::super::position(Some(&p.to_json())).unwrap();
        assert_eq!(back, p);
        let none: Position = super::super::position(None).unwrap();
        assert_eq!(none, Position::default());
    }
}
