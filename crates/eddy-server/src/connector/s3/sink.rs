//! `s3_output` (Eddy's; Feldera has none): a view's changes as objects
//! under a prefix of a bucket, one object per step that changed the view,
//! `<prefix>NNNNNNNN.<json|csv|parquet>` numbered from 1, in the
//! connector's format (a text format's lines, or a Parquet file with each
//! row's weight in a last column `__weight`). Summing the weights of each
//! row over the objects gives the view.
//!
//! Checkpoints: the position is how many objects the state's output holds;
//! a resumed output deletes the numbered objects after it (written after
//! the checkpoint, written again by the replay), and a fresh start deletes
//! every numbered object under the prefix. An object that cannot be put
//! waits in an [`Outbox`]: output is never skipped.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use eddy_dbsp::ZSet;
use eddy_io::format::{FormatKind, OutputFormat};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::source::refuse_unknown;
use super::{block_on, object_path, Bucket};
use crate::connector::outbox::Outbox;
use crate::connector::{position, CheckContext, ConnectorSpec, OutputContext, Transport};
use crate::runner::{Sink, SinkStatus};

/// `s3_output`'s configuration.
#[derive(Debug, Clone, Deserialize)]
pub struct S3Output {
    #[serde(flatten)]
    bucket: Bucket,
    /// Where the objects go (`""`: the bucket's top).
    #[serde(default)]
    prefix: String,
    /// Anything else: refused by name.
    #[serde(flatten)]
    unknown: BTreeMap<String, Value>,
}

impl S3Output {
    /// Where it writes: two outputs writing one place would delete and
    /// overwrite each other's objects.
    pub fn target(&self) -> String {
        format!(
            "{}/{}/{}",
            self.bucket.endpoint_url.as_deref().unwrap_or("s3"),
            self.bucket.bucket_name,
            self.prefix
        )
    }
}

impl Transport for S3Output {
    fn check(&self, spec: &ConnectorSpec, _cx: &CheckContext<'_>) -> Result<(), String> {
        refuse_unknown(&self.unknown)?;
        self.bucket.check()?;
        super::check_key("prefix", &self.prefix)?;
        if spec.format_kind() != Some(FormatKind::Parquet) {
            spec.output_format()?;
        }
        Ok(())
    }

    fn open_output(
        &self,
        spec: &ConnectorSpec,
        cx: OutputContext<'_>,
    ) -> Result<Box<dyn Sink>, String> {
        let encoding = match spec.format_kind() {
            Some(FormatKind::Parquet) => Encoding::Parquet,
            _ => Encoding::Text(spec.output_format()?),
        };
        let at: ObjectsPosition = position(cx.resume.map(|(_, p)| p))?;
        Ok(Box::new(S3Sink::open(
            self.bucket.store()?,
            self.prefix.clone(),
            encoding,
            at.objects,
        )?))
    }
}

/// How many objects the output holds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ObjectsPosition {
    objects: u64,
}

enum Encoding {
    Text(OutputFormat),
    Parquet,
}

impl Encoding {
    fn extension(&self) -> &'static str {
        match self {
            Self::Text(OutputFormat::Json(_)) => "json",
            Self::Text(OutputFormat::Csv) => "csv",
            Self::Parquet => "parquet",
        }
    }

    fn encode(&self, changes: &ZSet) -> Result<Vec<u8>, String> {
        match self {
            Self::Text(f) => f.encode(changes).map(String::into_bytes),
            Self::Parquet => eddy_io::parquet::write(changes, Vec::new()),
        }
    }
}

/// A view's changes as numbered objects.
struct S3Sink {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    encoding: Encoding,
    /// Objects numbered so far (put, or waiting).
    objects: u64,
    /// Objects not put yet.
    outbox: Outbox<(String, bytes::Bytes)>,
}

impl S3Sink {
    /// Opens the output holding `objects` objects: those numbered after
    /// are deleted, and those up to it must be there.
    fn open(
        store: Arc<dyn ObjectStore>,
        prefix: String,
        encoding: Encoding,
        objects: u64,
    ) -> Result<Self, String> {
        let listed: Vec<String> = block_on(super::list(Arc::clone(&store), prefix.clone(), None))
            .map(|objects| {
                objects
                    .into_iter()
                    .map(|m| m.location.as_ref().to_string())
                    .collect()
            })
            .map_err(|e| format!("listing '{prefix}': {e}"))?;
        let sink = Self {
            store,
            prefix,
            encoding,
            objects,
            outbox: Outbox::default(),
        };
        let mut found = 0;
        for key in listed {
            match sink.number(&key) {
                Some(n) if n > objects => {
                    let store = Arc::clone(&sink.store);
                    let path = object_path(&key);
                    block_on(async move { store.delete(&path).await }).map_err(|e| {
                        format!("deleting '{key}', written after the checkpoint: {e}")
                    })?;
                }
                Some(_) => found += 1,
                None => {}
            }
        }
        if found < objects {
            return Err(format!(
                "'{}' holds {found} of the {objects} objects the checkpoint recorded",
                sink.prefix
            ));
        }
        Ok(sink)
    }

    /// The number of an object of this output.
    fn number(&self, key: &str) -> Option<u64> {
        let name = key.strip_prefix(&self.prefix)?;
        let stem = name
            .strip_suffix(self.encoding.extension())?
            .strip_suffix('.')?;
        (stem.len() >= 8 && stem.bytes().all(|b| b.is_ascii_digit()))
            .then(|| stem.parse().ok())
            .flatten()
    }
}

/// Puts an object.
fn put(
    store: &Arc<dyn ObjectStore>,
) -> impl FnMut(&(String, bytes::Bytes)) -> Result<(), String> + '_ {
    move |(key, bytes)| {
        let store = Arc::clone(store);
        let path = object_path(key);
        let payload = PutPayload::from_bytes(bytes.clone());
        block_on(async move { store.put(&path, payload).await })
            .map(|_| ())
            .map_err(|e| format!("putting '{key}': {e}"))
    }
}

impl Sink for S3Sink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        let bytes = match self.encoding.encode(changes) {
            Ok(b) => b,
            Err(e) => return SinkStatus::Failed(e),
        };
        self.objects += 1;
        let key = format!(
            "{}{:08}.{}",
            self.prefix,
            self.objects,
            self.encoding.extension()
        );
        let (records, n) = (changes.len() as u64, bytes.len() as u64);
        let object = (key, bytes::Bytes::from(bytes));
        self.outbox.write(object, records, n, put(&self.store))
    }

    fn retry(&mut self) -> Option<SinkStatus> {
        self.outbox.retry(put(&self.store))
    }

    fn flush(&mut self) {
        if let Err(e) = self.outbox.send_all(put(&self.store)) {
            tracing::warn!(error = %e, "s3_output: objects not put at shutdown; a recovery from the last checkpoint writes them");
        }
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        self.outbox.send_all(put(&self.store))?;
        let at = ObjectsPosition {
            objects: self.objects,
        };
        Ok(Some(serde_json::to_value(at).map_err(|e| e.to_string())?))
    }
}
