//! `s3_input`: a table fed from the objects of a bucket, Feldera's
//! connector: one object (`key`) or every object under a `prefix`, read in
//! key order, in the connector's format (json, csv, or parquet). With
//! `follow` (Eddy's), the prefix is listed again every
//! `poll_interval_secs` and objects that appeared after those read are
//! read too, until the pipeline stops; objects are expected to be written
//! whole and never changed, and new ones to sort after those already read
//! (names that carry a time or a sequence number), as S3 lists in key
//! order.
//!
//! Checkpoints: the position is the last object read whole (`after`) and
//! the object being read with how far (`reading`: its key, and the byte
//! offset and line of a text object or the rows of a Parquet one); a
//! resumed connector skips what the state holds and goes on from there.
//!
//! Failures: a listing or a read that fails (a bucket that is gone, a
//! network that is down) is an error of the connector, retried with
//! backoff until it succeeds or the pipeline stops; an object deleted
//! between its listing and its reading is reported and passed over.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use eddy_dbsp::ZSet;
use eddy_io::format::{FormatKind, InputFormat};
use object_store::{ObjectMeta, ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{backoff, block_on, object_path, Bucket};
use crate::connector::{
    feed_stream, position, sleep_unless_stopping, CheckContext, ConnectorSpec, InputContext,
    InputRun, Stream, StreamEnd, StreamPosition, Transport,
};
use crate::runner::{Feeder, Origin};
use crate::stats::EndpointStats;

/// Bytes asked for in one range read of a text object.
const RANGE_BYTES: u64 = 8 << 20;

/// `s3_input`'s configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct S3Input {
    #[serde(flatten)]
    bucket: Bucket,
    /// One object.
    key: Option<String>,
    /// Every object whose key starts so.
    prefix: Option<String>,
    /// Feldera's parallel fetches: objects are read one after another here.
    #[serde(rename = "max_concurrent_fetches")]
    _max_concurrent_fetches: Option<u64>,
    /// Feldera's retries of a failed read: here a read is retried until it
    /// succeeds, the object is gone, or the pipeline stops.
    #[serde(rename = "max_retries")]
    _max_retries: Option<u64>,
    /// Go on listing the prefix for new objects.
    #[serde(default)]
    follow: bool,
    /// Seconds between listings when following (1 when absent).
    poll_interval_secs: Option<u64>,
    /// Anything else: refused by name.
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

/// Refuses the fields a flattened configuration did not know.
pub(super) fn refuse_unknown(unknown: &BTreeMap<String, Value>) -> Result<(), String> {
    match unknown.keys().next() {
        Some(k) => Err(format!("unknown field `{k}`")),
        None => Ok(()),
    }
}

impl Transport for S3Input {
    fn check(&self, spec: &ConnectorSpec, _cx: &CheckContext<'_>) -> Result<(), String> {
        refuse_unknown(&self.unknown)?;
        self.bucket.check()?;
        if let Some(k) = &self.key {
            super::check_key("key", k)?;
        }
        if let Some(p) = &self.prefix {
            super::check_key("prefix", p)?;
        }
        match (&self.key, &self.prefix) {
            (Some(_), Some(_)) | (None, None) => {
                return Err("exactly one of 'key' and 'prefix' is needed".into())
            }
            (Some(_), None) if self.follow => {
                return Err("'follow' reads new objects under a 'prefix', not one 'key'".into())
            }
            _ => {}
        }
        if spec.format_kind() != Some(FormatKind::Parquet) {
            spec.input_format()?;
        }
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let read = match spec.format_kind() {
            Some(FormatKind::Parquet) => Read::Parquet,
            _ => Read::Text(spec.input_format()?),
        };
        let source = S3Source {
            store: self.bucket.store()?,
            config: self.clone(),
            read,
            start: position(cx.position)?,
        };
        cx.run(spec, move |spec, feeder, stats| {
            source.run(spec, feeder, stats)
        })
    }
}

/// How far the state holds the bucket's objects.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct S3Position {
    /// Every object up to this key, in key order, is read whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after: Option<String>,
    /// The object being read, and how far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reading: Option<Reading>,
}

/// How far an object is read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reading {
    key: String,
    /// A text object: bytes and lines read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<StreamPosition>,
    /// A Parquet object: rows read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rows: Option<u64>,
}

enum Read {
    Text(InputFormat),
    Parquet,
}

struct S3Source {
    store: Arc<dyn ObjectStore>,
    config: S3Input,
    read: Read,
    start: S3Position,
}

impl S3Source {
    /// The objects to read, in key order: after `after`, when given.
    fn list(&self, after: Option<String>) -> Result<Vec<ObjectMeta>, String> {
        let store = Arc::clone(&self.store);
        let bucket = self.config.bucket.bucket_name.clone();
        if let Some(key) = &self.config.key {
            let path = object_path(key);
            return block_on(async move { store.head(&path).await })
                .map(|m| vec![m])
                .map_err(|e| format!("bucket '{bucket}': {e}"));
        }
        let prefix = self.config.prefix.clone().unwrap_or_default();
        block_on(super::list(store, prefix, after))
            .map_err(|e| format!("listing bucket '{bucket}': {e}"))
    }

    fn run(self, spec: &ConnectorSpec, feeder: &Feeder, stats: &EndpointStats) {
        let mut at = self.start.clone();
        let mut failures = 0;
        loop {
            if feeder.is_stopping() {
                return;
            }
            let objects = match self.list(at.after.clone()) {
                Ok(o) => {
                    failures = 0;
                    o
                }
                Err(e) => {
                    stats.error(e);
                    failures += 1;
                    if !sleep_unless_stopping(feeder, backoff(failures)) {
                        return;
                    }
                    continue;
                }
            };
            for object in objects {
                let key = object.location.as_ref().to_string();
                if at.after.as_ref().is_some_and(|a| key <= *a) {
                    continue;
                }
                if !self.read_object(&object, &mut at, spec, feeder, stats) {
                    return;
                }
            }
            if !self.config.follow {
                stats.end_of_input.store(true, Ordering::Relaxed);
                return;
            }
            let every = Duration::from_secs(self.config.poll_interval_secs.unwrap_or(1).max(1));
            if !sleep_unless_stopping(feeder, every) {
                return;
            }
        }
    }

    /// Reads one object whole into the table and records it read; false
    /// once the pipeline is stopping.
    fn read_object(
        &self,
        object: &ObjectMeta,
        at: &mut S3Position,
        spec: &ConnectorSpec,
        feeder: &Feeder,
        stats: &EndpointStats,
    ) -> bool {
        let key = object.location.as_ref().to_string();
        // The object being read when the checkpoint was taken: it is this
        // one, or, when a listing no longer has it, one before this.
        let resumed = match &at.reading {
            Some(r) if r.key == key => at.reading.take(),
            Some(r) if r.key < key => {
                at.reading = None;
                None
            }
            _ => None,
        };
        let after = at.after.clone();
        let reading = |text: Option<StreamPosition>, rows: Option<u64>| {
            let p = S3Position {
                after: after.clone(),
                reading: Some(Reading {
                    key: key.clone(),
                    text,
                    rows,
                }),
            };
            serde_json::to_value(p).expect("keys and numbers")
        };
        let fed = match &self.read {
            Read::Text(format) => {
                let start = resumed.and_then(|r| r.text).unwrap_or_default();
                let reader = ObjectReader {
                    store: Arc::clone(&self.store),
                    object: object.clone(),
                    offset: start.offset,
                    buffer: bytes::Bytes::new(),
                    feeder,
                    stats,
                };
                let stream = Stream {
                    format: format.clone(),
                    follow: false,
                    start,
                    position_of: &|p| reading(Some(p), None),
                    place: Some(&key),
                };
                match feed_stream(spec, reader, feeder, stats, stream) {
                    // A line too long to read: the input stops there
                    // (reported), not to skip what follows it.
                    StreamEnd::Stopped | StreamEnd::Refused => false,
                    // Failed reads are retried until the object is gone
                    // (reported) or the pipeline stops.
                    StreamEnd::Read | StreamEnd::Failed => true,
                }
            }
            Read::Parquet => {
                let rows = resumed.and_then(|r| r.rows).unwrap_or(0);
                let Some(bytes) = self.fetch_whole(object, feeder, stats) else {
                    return !feeder.is_stopping();
                };
                let position_of = |rows| reading(None, Some(rows));
                super::super::parquet::feed(
                    spec,
                    bytes,
                    feeder,
                    stats,
                    super::super::parquet::Rows::inserted(rows, &position_of, Some(&key)),
                )
                // An object that cannot be read is reported and passed.
                .unwrap_or_else(|e| {
                    stats.error(e.error);
                    true
                })
            }
        };
        if !fed || feeder.is_stopping() {
            return false;
        }
        // Read whole: the position moves past it.
        *at = S3Position {
            after: Some(key),
            reading: None,
        };
        let origin = Origin::at(
            &spec.name,
            serde_json::to_value(&*at).expect("keys and numbers"),
        );
        let Ok(schema) = feeder.schema(&spec.relation) else {
            return false;
        };
        feeder
            .feed_blocking(&spec.relation, ZSet::empty(schema), origin)
            .is_ok()
    }

    /// An object's bytes, whole (Parquet's index is at its end), retried
    /// until they come; `None` if the object is gone or the pipeline stops.
    fn fetch_whole(
        &self,
        object: &ObjectMeta,
        feeder: &Feeder,
        stats: &EndpointStats,
    ) -> Option<bytes::Bytes> {
        let mut failures = 0;
        loop {
            let store = Arc::clone(&self.store);
            let path = object.location.clone();
            match block_on(async move { store.get(&path).await?.bytes().await }) {
                Ok(b) => return Some(b),
                Err(object_store::Error::NotFound { .. }) => {
                    stats.error(format!("'{}' is gone before it was read", object.location));
                    return None;
                }
                Err(e) => {
                    stats.error(format!("reading '{}': {e}", object.location));
                    failures += 1;
                    if !sleep_unless_stopping(feeder, backoff(failures)) {
                        return None;
                    }
                }
            }
        }
    }
}

/// A text object read in ranges, from an offset, each range retried until
/// it comes (or the object is gone, or the pipeline stops: then the read
/// ends with an error).
struct ObjectReader<'a> {
    store: Arc<dyn ObjectStore>,
    object: ObjectMeta,
    offset: u64,
    buffer: bytes::Bytes,
    feeder: &'a Feeder,
    stats: &'a EndpointStats,
}

impl ObjectReader<'_> {
    fn fetch(&self, range: Range<u64>) -> std::io::Result<bytes::Bytes> {
        let mut failures = 0;
        loop {
            let store = Arc::clone(&self.store);
            let path = self.object.location.clone();
            let r = range.clone();
            match block_on(async move { store.get_range(&path, r).await }) {
                Ok(b) => return Ok(b),
                Err(object_store::Error::NotFound { .. }) => {
                    let e = format!("'{}' is gone while it was read", self.object.location);
                    return Err(std::io::Error::new(std::io::ErrorKind::NotFound, e));
                }
                Err(e) => {
                    self.stats
                        .error(format!("reading '{}': {e}", self.object.location));
                    failures += 1;
                    if !sleep_unless_stopping(self.feeder, backoff(failures)) {
                        // Not a failure of the stream: the reader sees the
                        // stop and ends without feeding a part of a line.
                        return Err(std::io::ErrorKind::Interrupted.into());
                    }
                }
            }
        }
    }
}

impl std::io::Read for ObjectReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.buffer.is_empty() {
            let size = self.object.size;
            if self.offset >= size {
                return Ok(0);
            }
            let end = (self.offset + RANGE_BYTES).min(size);
            self.buffer = self.fetch(self.offset..end)?;
            self.offset += self.buffer.len() as u64;
            if self.buffer.is_empty() {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.buffer.len());
        buf[..n].copy_from_slice(&self.buffer[..n]);
        let _ = self.buffer.split_to(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn positions_read_back() {
        let p = S3Position {
            after: Some("in/0001.json".into()),
            reading: Some(Reading {
                key: "in/0002.json".into(),
                text: Some(StreamPosition {
                    offset: 10,
                    line: 3,
                }),
                rows: None,
            }),
        };
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!({"after": "in/0001.json", "reading": {"key": "in/0002.json", "text": {"offset": 10, "line": 3}}})
        );
        assert_eq!(position::<S3Position>(Some(&v)).unwrap(), p);
        assert_eq!(position::<S3Position>(None).unwrap(), S3Position::default());
    }
}
