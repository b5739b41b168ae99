//! `url_input`: a table fed once from the body of an HTTP GET of `"path"`
//! (plain `http://`; the body is read as a stream, in pieces of whole lines).

use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{feed_stream, ConnectorSpec};
use crate::runner::Feeder;
use crate::stats::EndpointStats;

/// An HTTP resource feeding a table.
pub struct UrlSource {
    url: String,
}

impl UrlSource {
    /// Checks the URL.
    pub fn new(spec: &ConnectorSpec) -> Result<Self, String> {
        let url = spec.required("path")?;
        if !url.starts_with("http://") {
            return Err(format!("'{url}': only http:// URLs are supported"));
        }
        Ok(Self {
            url: url.to_string(),
        })
    }

    /// Fetches the URL into the pipeline.
    pub fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(10))
            .build();
        match agent.get(&self.url).call() {
            Ok(response) => {
                if feed_stream(spec, response.into_reader(), feeder, stats, false) {
                    stats.end_of_input.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => stats.error(format!("GET {}: {e}", self.url)),
        }
    }
}
