//! Each pipeline's log: the server's log lines that concern a pipeline
//! (an event with a `pipeline` field, or inside a span that has one, as
//! the pipeline's worker and connector threads run), kept in memory, the
//! last [`KEPT`] of them, and streamed to followers by
//! `GET /v0/pipelines/{name}/logs` (Feldera's endpoint).
//!
//! [`Capture`] is a `tracing` layer the binary installs beside its
//! writer; with none installed (a library user, a unit test) the logs are
//! empty. Lines are formatted once, as `time LEVEL target: message
//! key=value…`, the way the server's own text log writes them.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Mutex, OnceLock};

use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Lines kept per pipeline.
pub const KEPT: usize = 2_000;

/// One pipeline's lines, and the followers' channel.
struct Log {
    lines: VecDeque<String>,
    follow: broadcast::Sender<String>,
}

impl Log {
    fn new() -> Self {
        Self {
            lines: VecDeque::new(),
            follow: broadcast::channel(1024).0,
        }
    }
}

fn logs() -> &'static Mutex<HashMap<String, Log>> {
    static LOGS: OnceLock<Mutex<HashMap<String, Log>>> = OnceLock::new();
    LOGS.get_or_init(Mutex::default)
}

/// Starts keeping a pipeline's log (when it is defined or loaded): only
/// the pipelines that exist have one, so a line naming any other (a
/// request for a pipeline that does not exist) is not kept anywhere.
pub fn open(pipeline: &str) {
    let mut logs = logs().lock().unwrap();
    logs.entry(pipeline.to_string()).or_insert_with(Log::new);
}

/// Adds a line to a pipeline's log, if it has one.
pub fn append(pipeline: &str, line: String) {
    let mut logs = logs().lock().unwrap();
    let Some(log) = logs.get_mut(pipeline) else {
        return;
    };
    if log.lines.len() == KEPT {
        log.lines.pop_front();
    }
    // No follower is not an error.
    let _ = log.follow.send(line.clone());
    log.lines.push_back(line);
}

/// A pipeline's lines so far, and a receiver of those that follow (taken
/// together, so that none falls between); `None` for a pipeline without
/// a log.
pub fn follow(pipeline: &str) -> Option<(Vec<String>, broadcast::Receiver<String>)> {
    let logs = logs().lock().unwrap();
    let log = logs.get(pipeline)?;
    Some((log.lines.iter().cloned().collect(), log.follow.subscribe()))
}

/// Forgets a deleted pipeline's log (its followers' streams end).
pub fn forget(pipeline: &str) {
    logs().lock().unwrap().remove(pipeline);
}

/// The pipeline a span belongs to, kept in its extensions.
struct PipelineOf(String);

/// Reads an event's or span's fields: the `pipeline` one apart, the
/// message and the others as text.
#[derive(Default)]
struct Fields {
    pipeline: Option<String>,
    message: String,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "pipeline" => self.pipeline = Some(value.to_string()),
            "message" => self.message = value.to_string(),
            name => {
                let _ = write!(self.rest, " {name}={value}");
            }
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "pipeline" => self.pipeline = Some(format!("{value:?}")),
            "message" => self.message = format!("{value:?}"),
            name => {
                let _ = write!(self.rest, " {name}={value:?}");
            }
        }
    }
}

/// The layer that copies the lines of pipelines into their logs.
pub struct Capture;

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let (Some(pipeline), Some(span)) = (fields.pipeline, ctx.span(id)) {
            span.extensions_mut().insert(PipelineOf(pipeline));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let pipeline = fields.pipeline.take().or_else(|| {
            ctx.event_scope(event)?
                .find_map(|span| (span.extensions().get::<PipelineOf>()).map(|p| p.0.clone()))
        });
        let Some(pipeline) = pipeline else {
            return;
        };
        let meta = event.metadata();
        let line = format!(
            "{} {:>5} {}: {}{}",
            chrono::Utc::now().format("%Y-%m-%dT%H:%M:%S%.6fZ"),
            meta.level(),
            meta.target(),
            fields.message,
            fields.rest
        );
        append(&pipeline, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn lines_of_a_pipeline_are_kept_and_followed() {
        let subscriber = tracing_subscriber::registry().with(Capture);
        tracing::subscriber::with_default(subscriber, || {
            // No log until the pipeline is defined: its lines are dropped.
            tracing::info!(pipeline = "logs-test-a", "before");
            assert!(follow("logs-test-a").is_none());
            open("logs-test-a");
            open("logs-test-b");
            let (before, mut rx) = follow("logs-test-a").unwrap();
            assert!(before.is_empty());
            tracing::info!(pipeline = "logs-test-a", records = 3, "rows rejected");
            let span = tracing::info_span!("worker", pipeline = "logs-test-a");
            span.in_scope(|| tracing::warn!(connector = "lake", "retrying"));
            // Lines of no pipeline, and of another, are not this one's.
            tracing::info!("server started");
            tracing::info!(pipeline = "logs-test-b", "other");
            tracing::info!(pipeline = "logs-test-nobody", "dropped");
            assert!(follow("logs-test-nobody").is_none());
            let (lines, _) = follow("logs-test-a").unwrap();
            assert_eq!(lines.len(), 2, "{lines:?}");
            assert!(lines[0].ends_with("INFO eddy_server::logs::tests: rows rejected records=3"));
            assert!(lines[1].contains(" WARN ") && lines[1].ends_with("retrying connector=lake"));
            assert_eq!(rx.try_recv().unwrap(), lines[0]);
            assert_eq!(rx.try_recv().unwrap(), lines[1]);
            for i in 0..KEPT + 5 {
                append("logs-test-a", format!("line {i}"));
            }
            let (lines, _) = follow("logs-test-a").unwrap();
            assert_eq!(lines.len(), KEPT);
            assert_eq!(lines.last().unwrap(), &format!("line {}", KEPT + 4));
            forget("logs-test-a");
            assert!(follow("logs-test-a").is_none());
            // Its last lines, logged after it was deleted, bring no log back.
            tracing::info!(pipeline = "logs-test-a", "request");
            assert!(follow("logs-test-a").is_none());
            forget("logs-test-b");
        });
    }
}
