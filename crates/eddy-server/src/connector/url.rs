//! `url_input`: a table fed once from the body of an HTTP GET of `"path"`
//! (plain `http://`; the body is read as a stream, in pieces of whole lines).

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::Value;

use super::{feed_stream, ConnectorSpec, StreamPosition};
use crate::runner::Feeder;
use crate::stats::EndpointStats;

/// An HTTP resource feeding a table.
pub struct UrlSource {
    url: String,
    start: StreamPosition,
}

impl UrlSource {
    /// Checks the URL; `position` (from a checkpoint) is how much of the
    /// body the state already holds: it is read again and skipped.
    pub fn new(spec: &ConnectorSpec, position: Option<&Value>) -> Result<Self, String> {
        let url = spec.required("path")?;
        if !url.starts_with("http://") {
            return Err(format!("'{url}': only http:// URLs are supported"));
        }
        Ok(Self {
            url: url.to_string(),
            start: StreamPosition::from_value(position),
        })
    }

    /// Fetches the URL into the pipeline.
    pub fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .build();
        match agent.get(&self.url).call() {
            Ok(response) => {
                let mut body = response.into_reader();
                let skip = std::io::copy(
                    &mut std::io::Read::take(&mut body, self.start.offset),
                    &mut std::io::sink(),
                );
                match skip {
                    Ok(n) if n == self.start.offset => {}
                    Ok(n) => {
                        return stats.error(format!(
                        "GET {}: the body has {n} bytes, fewer than the {} the checkpoint had read",
                        self.url, self.start.offset
                    ))
                    }
                    Err(e) => return stats.error(format!("GET {}: {e}", self.url)),
                }
                if feed_stream(spec, body, feeder, stats, false, self.start) {
                    stats.end_of_input.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => stats.error(format!("GET {}: {e}", self.url)),
        }
    }
}
