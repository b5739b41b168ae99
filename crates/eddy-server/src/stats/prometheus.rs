//! The Prometheus text exposition (`text/plain; version=0.0.4`) of a
//! pipeline's counters (`GET /v0/pipelines/{name}/metrics`) and of every
//! pipeline of the server at once (`GET /v0/metrics`): each series is one
//! family, with its `HELP` and `TYPE` written once, whichever pipelines
//! add samples to it. `docker/grafana-dashboard.json` charts these series
//! (a test checks that each series it queries is exposed).

use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use super::{escape_label, free_bytes, per_relation, rss_bytes, EndpointStats, PipelineStats};

/// Series being gathered: families in the order first added, each with
/// its samples (label set, value).
#[derive(Debug, Default)]
pub struct Exposition {
    families: Vec<Family>,
}

#[derive(Debug)]
struct Family {
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    samples: Vec<(String, String)>,
}

impl Exposition {
    /// Adds `samples` to the family `name`, made on first use. A sample
    /// without labels (the process's figures, which every pipeline
    /// reports) is added once.
    pub fn add<V: Display>(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: &'static str,
        samples: &[(String, V)],
    ) {
        let at = match self.families.iter().position(|f| f.name == name) {
            Some(at) => at,
            None => {
                self.families.push(Family {
                    name,
                    help,
                    kind,
                    samples: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        let family = &mut self.families[at];
        for (labels, value) in samples {
            // Only the process's figures (no labels) come more than once.
            if !labels.is_empty() || !family.samples.iter().any(|(l, _)| l.is_empty()) {
                family.samples.push((labels.clone(), value.to_string()));
            }
        }
    }

    /// The text Prometheus scrapes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.families {
            let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
            let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
            for (labels, v) in &f.samples {
                let _ = writeln!(out, "{}{{{labels}}} {v}", f.name);
            }
        }
        out
    }
}

/// The labels of a pipeline's series.
pub fn pipeline_label(pipeline: &str) -> String {
    format!("pipeline=\"{}\"", escape_label(pipeline))
}

/// Seconds since the epoch, now.
fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl PipelineStats {
    /// Prometheus text exposition of the pipeline's counters.
    pub fn to_prometheus(&self, pipeline: &str) -> String {
        let mut out = Exposition::default();
        self.expose(pipeline, &mut out);
        out.render()
    }

    /// Adds this pipeline's series to `out`, labelled with its name.
    pub fn expose(&self, pipeline: &str, out: &mut Exposition) {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut gauge =
            |name: &'static str,
             help: &'static str,
             kind: &'static str,
             samples: &[(String, u64)]| { out.add(name, help, kind, samples) };
        let p = pipeline_label(pipeline);
        gauge(
            "eddy_steps_total",
            "Steps completed.",
            "counter",
            &[(p.clone(), r(&self.steps))],
        );
        gauge(
            "eddy_processed_records_total",
            "Input records processed by completed steps.",
            "counter",
            &[(p.clone(), r(&self.processed_records))],
        );
        gauge(
            "eddy_buffered_records",
            "Input records accepted and not yet processed.",
            "gauge",
            &[(p.clone(), r(&self.buffered_records))],
        );
        gauge(
            "eddy_last_step_latency_microseconds",
            "Duration of the last step.",
            "gauge",
            &[(p.clone(), r(&self.last_step_micros))],
        );
        gauge(
            "eddy_rss_bytes",
            "Resident memory of the server process (all its pipelines).",
            "gauge",
            &[(String::new(), rss_bytes())],
        );
        let labelled = |counters| {
            per_relation(counters)
                .into_iter()
                .map(|(relation, n)| (format!("{p},relation=\"{}\"", escape_label(&relation)), n))
                .collect::<Vec<_>>()
        };
        gauge(
            "eddy_late_records_total",
            "Changes dropped as late (LATENESS), per table or view.",
            "counter",
            &labelled(&self.late_records),
        );
        gauge(
            "eddy_refused_deletions_total",
            "Deletions refused by tables declared append_only.",
            "counter",
            &labelled(&self.refused_deletions),
        );
        let state = self.state.lock().unwrap().clone();
        gauge(
            "eddy_state_memory_bytes",
            "Bytes of state kept by the pipeline's operators and view contents.",
            "gauge",
            &[(p.clone(), state.iter().map(|s| s.bytes as u64).sum())],
        );
        let per_operator: Vec<(String, u64)> = state
            .iter()
            .map(|s| {
                (
                    format!(
                        "{p},node=\"{}\",operator=\"{}\"",
                        s.node,
                        escape_label(&s.operator)
                    ),
                    s.bytes as u64,
                )
            })
            .collect();
        gauge(
            "eddy_operator_state_memory_bytes",
            "Bytes of state kept by one operator (or one view's contents).",
            "gauge",
            &per_operator,
        );
        let storage = self.storage.get().map(|s| s.stats()).unwrap_or_default();
        let storage_free = self.storage.get().and_then(|s| free_bytes(s.dir()));
        gauge(
            "eddy_storage_bytes",
            "Bytes of state batches in the pipeline's storage files.",
            "gauge",
            &[(p.clone(), storage.bytes)],
        );
        gauge(
            "eddy_storage_index_memory_bytes",
            "Of the state's memory, the fences and Bloom filters of its files.",
            "gauge",
            &[(p.clone(), storage.index_bytes)],
        );
        gauge(
            "eddy_storage_written_bytes_total",
            "Bytes written to storage files since the pipeline started.",
            "counter",
            &[(p.clone(), storage.written_bytes)],
        );
        gauge(
            "eddy_storage_degraded",
            "1 while input or checkpoints cannot be made durable (a full or failing disk), else 0.",
            "gauge",
            &[(p.clone(), u64::from(self.degraded().is_some()))],
        );
        gauge(
            "eddy_durability_failures_total",
            "Journal appends and checkpoints that failed.",
            "counter",
            &[(p.clone(), self.durability_failures.load(Ordering::Relaxed))],
        );
        if let Some(free) = storage_free {
            gauge(
                "eddy_storage_free_bytes",
                "Bytes free on the file system of the pipeline's storage.",
                "gauge",
                &[(p.clone(), free)],
            );
        }
        gauge(
            "eddy_storage_write_errors_total",
            "State batches that could not be written to storage (they stayed in memory).",
            "counter",
            &[(p.clone(), storage.write_errors)],
        );
        gauge(
            "eddy_storage_background_merges_total",
            "Merges of state batches into storage files run off the step's critical path.",
            "counter",
            &[(p.clone(), storage.background_merges)],
        );
        gauge(
            "eddy_storage_cache_bytes",
            "Bytes of storage file blocks held by the block cache.",
            "gauge",
            &[(p.clone(), storage.cache.bytes)],
        );
        gauge(
            "eddy_storage_cache_hits_total",
            "Reads of storage file blocks answered by the block cache.",
            "counter",
            &[(p.clone(), storage.cache.hits)],
        );
        gauge(
            "eddy_storage_cache_misses_total",
            "Reads of storage file blocks that went to the file.",
            "counter",
            &[(p.clone(), storage.cache.misses)],
        );
        let endpoint = |e: &EndpointStats| {
            format!(
                "{p},endpoint=\"{}\",relation=\"{}\"",
                escape_label(&e.name),
                escape_label(&e.relation)
            )
        };
        let inputs = self.inputs.lock().unwrap().clone();
        let outputs = self.outputs.lock().unwrap().clone();
        let each = |list: &[Arc<EndpointStats>], f: &dyn Fn(&EndpointStats) -> u64| {
            list.iter().map(|e| (endpoint(e), f(e))).collect::<Vec<_>>()
        };
        gauge(
            "eddy_input_records_total",
            "Records accepted per input endpoint.",
            "counter",
            &each(&inputs, &|e| r(&e.records)),
        );
        gauge(
            "eddy_input_bytes_total",
            "Bytes received per input endpoint.",
            "counter",
            &each(&inputs, &|e| r(&e.bytes)),
        );
        gauge(
            "eddy_input_parse_errors_total",
            "Rows rejected per input endpoint.",
            "counter",
            &each(&inputs, &|e| r(&e.parse_errors)),
        );
        gauge(
            "eddy_output_records_total",
            "Records written per output endpoint.",
            "counter",
            &each(&outputs, &|e| r(&e.records)),
        );
        gauge(
            "eddy_output_bytes_total",
            "Bytes written per output endpoint.",
            "counter",
            &each(&outputs, &|e| r(&e.bytes)),
        );
        self.expose_progress(&p, out);
        self.expose_lag(&p, &inputs, out);
    }

    /// How long the pipeline has run, and its checkpoints.
    fn expose_progress(&self, p: &str, out: &mut Exposition) {
        let now = now_secs();
        out.add(
            "eddy_uptime_seconds",
            "Seconds since the pipeline started.",
            "gauge",
            &[(
                p.to_string(),
                (now - self.start_time as f64).max(0.0).floor(),
            )],
        );
        let checkpoints = self.checkpoints.lock().unwrap().clone();
        out.add(
            "eddy_checkpoints_total",
            "Checkpoints written since the pipeline started.",
            "counter",
            &[(p.to_string(), checkpoints.written)],
        );
        out.add(
            "eddy_checkpoint_failures_total",
            "Checkpoints that failed since the pipeline started.",
            "counter",
            &[(p.to_string(), checkpoints.failed)],
        );
        if let Some(last) = checkpoints.last {
            out.add(
                "eddy_last_checkpoint_duration_seconds",
                "How long the last checkpoint written took to write.",
                "gauge",
                &[(p.to_string(), last.took.as_secs_f64())],
            );
            out.add(
                "eddy_last_checkpoint_age_seconds",
                "Seconds since the last checkpoint was written.",
                "gauge",
                &[(p.to_string(), last.at.elapsed().as_secs_f64())],
            );
        }
    }

    /// How far each input is behind the partitions of its source (Kafka).
    fn expose_lag(&self, p: &str, inputs: &[Arc<EndpointStats>], out: &mut Exposition) {
        let now_ms = (now_secs() * 1000.0) as i64;
        let mut records = Vec::new();
        let mut seconds = Vec::new();
        for e in inputs {
            for ((topic, partition), lag) in e.partitions.lock().unwrap().iter() {
                let Some(behind) = lag.behind() else {
                    continue;
                };
                let labels = format!(
                    "{p},endpoint=\"{}\",relation=\"{}\",topic=\"{}\",partition=\"{partition}\"",
                    escape_label(&e.name),
                    escape_label(&e.relation),
                    escape_label(topic)
                );
                records.push((labels.clone(), behind));
                if let Some(s) = lag.seconds_behind(now_ms) {
                    seconds.push((labels, s));
                }
            }
        }
        out.add(
            "eddy_kafka_consumer_lag_records",
            "Messages of a partition written and not yet read by an input.",
            "gauge",
            &records,
        );
        out.add(
            "eddy_kafka_consumer_lag_seconds",
            "While messages of a partition wait, seconds since the last message read was \
             written (at least the age of the oldest waiting one); 0 when none wait.",
            "gauge",
            &seconds,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::PartitionLag;

    #[test]
    fn a_series_added_by_several_pipelines_is_one_family() {
        let mut out = Exposition::default();
        for pipeline in ["a", "b"] {
            PipelineStats::default().expose(pipeline, &mut out);
        }
        let text = out.render();
        assert_eq!(text.matches("# TYPE eddy_steps_total counter").count(), 1);
        assert!(text
            .contains("eddy_steps_total{pipeline=\"a\"} 0\neddy_steps_total{pipeline=\"b\"} 0\n"));
        // The process's figure once, though both pipelines report it.
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with("eddy_rss_bytes{}"))
                .count(),
            1
        );
        // No checkpoint yet: neither its duration nor its age.
        assert!(!text.contains("eddy_last_checkpoint_age_seconds{"));
        assert!(text.contains("eddy_checkpoints_total{pipeline=\"a\"} 0"));
    }

    #[test]
    fn a_checkpoint_gives_its_duration_and_age() {
        let stats = PipelineStats::default();
        stats.checkpoint_written(None, std::time::Duration::from_millis(1500));
        stats.checkpoint_written(Some("disk full".into()), std::time::Duration::ZERO);
        let text = stats.to_prometheus("p");
        assert!(
            text.contains("eddy_checkpoints_total{pipeline=\"p\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("eddy_checkpoint_failures_total{pipeline=\"p\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("eddy_last_checkpoint_duration_seconds{pipeline=\"p\"} 1.5\n"),
            "{text}"
        );
        assert!(
            text.contains("eddy_last_checkpoint_age_seconds{pipeline=\"p\"} "),
            "{text}"
        );
    }

    #[test]
    fn lag_is_what_waits_and_how_old_it_can_be() {
        let mut lag = PartitionLag {
            next: 10,
            end: None,
            last_written_ms: None,
        };
        assert_eq!((lag.behind(), lag.seconds_behind(5_000)), (None, None));
        lag.end = Some(10);
        assert_eq!(
            (lag.behind(), lag.seconds_behind(5_000)),
            (Some(0), Some(0.0))
        );
        lag.end = Some(14);
        // Messages wait, but none was read: how old they are is unknown.
        assert_eq!((lag.behind(), lag.seconds_behind(5_000)), (Some(4), None));
        lag.last_written_ms = Some(2_500);
        assert_eq!(lag.seconds_behind(5_000), Some(2.5));
        // An end asked before the last reads is not a negative lag.
        lag.next = 20;
        assert_eq!(lag.behind(), Some(0));
    }
}
