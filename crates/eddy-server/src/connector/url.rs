//! `url_input`: a table fed once from the body of an HTTP GET of `"path"`
//! (plain `http://`; the body is read as a stream, in pieces of whole lines).

use std::sync::atomic::Ordering;
use std::time::Duration;

use eddy_io::format::InputFormat;
use serde::Deserialize;

use super::{
    feed_stream, position, CheckContext, ConnectorSpec, InputContext, InputRun, Stream, StreamEnd,
    StreamPosition, Transport,
};
use crate::runner::Feeder;
use crate::stats::EndpointStats;

/// `url_input`'s configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UrlInput {
    /// The URL (`http://` only).
    pub path: String,
}

impl Transport for UrlInput {
    fn check(&self, spec: &ConnectorSpec, _cx: &CheckContext<'_>) -> Result<(), String> {
        if !self.path.starts_with("http://") {
            return Err(format!("'{}': only http:// URLs are supported", self.path));
        }
        spec.input_format().map(|_| ())
    }

    /// `position` (from a checkpoint) is how much of the body the state
    /// already holds: it is read again and skipped.
    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let source = UrlSource {
            url: self.path.clone(),
            format: spec.input_format()?,
            start: position(cx.position)?,
        };
        cx.run(spec, move |spec, feeder, stats| {
            source.run(spec, feeder, stats)
        })
    }
}

/// An HTTP resource feeding a table.
struct UrlSource {
    url: String,
    format: InputFormat,
    start: StreamPosition,
}

impl UrlSource {
    /// Fetches the URL into the pipeline.
    fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
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
                        return stats.fatal(format!(
                        "GET {}: the body has {n} bytes, fewer than the {} the checkpoint had read",
                        self.url, self.start.offset
                    ))
                    }
                    Err(e) => return stats.fatal(format!("GET {}: {e}", self.url)),
                }
                if feed_stream(
                    spec,
                    body,
                    feeder,
                    stats,
                    Stream {
                        format: self.format,
                        follow: false,
                        start: self.start,
                        position_of: &StreamPosition::to_value,
                        place: None,
                    },
                ) == StreamEnd::Read
                {
                    stats.end_of_input.store(true, Ordering::Relaxed);
                }
            }
            Err(e) => stats.fatal(format!("GET {}: {e}", self.url)),
        }
    }
}
