//! `iceberg_input`: a table fed from an Apache Iceberg table, read by
//! Eddy itself: the metadata file ([`metadata`]), the manifest list and
//! manifests (Avro, [`manifest`]), then the data files as Parquet straight
//! into Arrow ([`crate::connector::parquet`]), their columns matched by
//! Iceberg field id, so a renamed column still reads.
//!
//! Why not the `iceberg` crate: its releases (0.10) and its main branch
//! are built on arrow 58 while the workspace is on DataFusion's arrow 59,
//! and one arrow is the rule. The reader needs only the three file kinds
//! above, which the Iceberg specification fixes.
//!
//! Feldera's configuration: `metadata_location` names the table (a
//! `file://` URL or path under the file connectors' folders, or
//! `s3://bucket/key` with Feldera's `s3.*` FileIO settings), or a catalog
//! does (`catalog_type` `glue`, [`catalog`]); `mode` is `snapshot`,
//! `follow` or `snapshot_and_follow` (following needs a catalog: a
//! metadata file has only its own snapshots, and Feldera refuses it
//! too); `snapshot_id` or `datetime` pick the starting snapshot, the
//! current one by default; `end_snapshot_id` ends a followed input;
//! `snapshot_filter` keeps the rows for which it holds. The REST and S3
//! Tables catalogs, `timestamp_column` and a `transaction_mode` but
//! `none` are refused as not supported yet, by name.
//!
//! Following reads each later snapshot of the current one's lineage,
//! oldest first: the rows of the data files it added, and those of the
//! files it removed retracted (copy-on-write changes).
//!
//! Exactly once (Feldera's is at least once): the starting snapshot id is
//! pinned at the first read, and a checkpoint records the snapshot being
//! read (its rows, or its changes) with its files in the state (in path
//! order) and the rows of the one being read; a resumed pipeline goes on
//! from there. A snapshot with live merge-on-read delete files, or data
//! files not in Parquet, stops the connector with an error rather than
//! feed rows that were deleted. A file that cannot be read, or a catalog
//! that cannot be asked, is retried from where it stopped.
//!
//! Files written without field ids, as migrated tables have, are matched
//! through the table's name mapping (`schema.name-mapping.default`, which
//! keeps the old names of a renamed column), or by name without one.
//!
//! Not read yet: identity partition values that a file leaves out, and
//! field ids below the top level (nested fields match by name).

pub mod catalog;
pub mod manifest;
pub mod metadata;
pub mod source;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::{ObjectStore, ObjectStoreExt};
use serde_json::Value;
use url::Url;

use super::rounds::Failure;
use super::s3::{block_on, object_path};
use super::FileAccess;

/// Feldera's S3 FileIO settings (`s3.disable-ec2-metadata` is taken and
/// changes nothing: `object_store` asks the instance metadata service only
/// when no other credentials are found).
const S3_SETTINGS: &[&str] = &[
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.endpoint",
    "s3.region",
    "s3.session-token",
    "s3.allow-anonymous",
    "s3.disable-ec2-metadata",
];

/// Where the table's files are read from: the server's folders (by the
/// file connectors' rules) and S3 buckets (with the FileIO settings).
pub struct Files {
    access: FileAccess,
    s3: HashMap<String, String>,
    buckets: HashMap<String, Arc<dyn ObjectStore>>,
}

/// The settings given beside the connector's own, by family: the S3
/// FileIO's (`s3.*`) and the Glue catalog's (`glue.*`). Other catalogs
/// and Google Cloud Storage are refused as not supported yet, anything
/// else as unknown.
#[derive(Debug, Default)]
pub struct Settings {
    pub s3: BTreeMap<String, String>,
    pub glue: BTreeMap<String, String>,
}

impl Settings {
    pub fn split(settings: &BTreeMap<String, Value>) -> Result<Self, String> {
        let mut out = Self::default();
        for (key, value) in settings {
            let family = match key.split('.').next().unwrap_or("") {
                "s3" if S3_SETTINGS.contains(&key.as_str()) => &mut out.s3,
                "glue" => &mut out.glue,
                "rest" | "s3tables" => {
                    return Err(format!(
                        "'{key}': the REST and S3 Tables catalogs are not supported yet (the Glue catalog is, and 'metadata_location' without one)"
                    ))
                }
                "gcs" => return Err(format!("'{key}': Google Cloud Storage is not supported yet")),
                _ => return Err(format!("unknown field `{key}`")),
            };
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Bool(b) => b.to_string(),
                other => return Err(format!("'{key}': a string, not {other}")),
            };
            family.insert(key.clone(), value);
        }
        Ok(out)
    }
}

impl Files {
    /// Reads with the S3 FileIO settings `s3` (checked by
    /// [`Settings::split`]).
    pub fn new(access: FileAccess, s3: &BTreeMap<String, String>) -> Result<Self, String> {
        if let Some(e) = s3.get("s3.endpoint") {
            match Url::parse(e) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                _ => return Err(format!("'s3.endpoint' {e} is not an http(s) URL")),
            }
        }
        Ok(Self {
            access,
            s3: s3.clone().into_iter().collect(),
            buckets: HashMap::new(),
        })
    }

    /// Checks a location by its text (the metadata file's, before any
    /// read).
    pub fn check(&self, location: &str) -> Result<(), String> {
        match Place::of(location)? {
            Place::Local(path) => self.access.check(&path).map(|_| ()),
            Place::S3 { .. } => Ok(()),
        }
    }

    /// The bytes of a file the table names. A file that cannot be read
    /// is tried again; one that cannot be named is an error for good.
    pub fn get(&mut self, location: &str) -> Result<Bytes, Failure> {
        let place = Place::of(location).map_err(Failure::Fatal)?;
        match place {
            Place::Local(path) => {
                let path = self.access.resolve(&path).map_err(Failure::Fatal)?;
                std::fs::read(&path)
                    .map(Bytes::from)
                    .map_err(|e| Failure::Retry(format!("reading '{location}': {e}")))
            }
            Place::S3 { bucket, key } => {
                let store = self.bucket(&bucket).map_err(Failure::Fatal)?;
                let path = object_path(&key);
                block_on(async move { store.get(&path).await?.bytes().await })
                    .map_err(|e| Failure::Retry(format!("reading '{location}': {e}")))
            }
        }
    }

    fn bucket(&mut self, name: &str) -> Result<Arc<dyn ObjectStore>, String> {
        if let Some(s) = self.buckets.get(name) {
            return Ok(Arc::clone(s));
        }
        let setting = |k: &str| self.s3.get(k).map(String::as_str);
        let mut b = AmazonS3Builder::from_env().with_bucket_name(name);
        if let Some(r) = setting("s3.region") {
            b = b.with_region(r);
        }
        if let Some(e) = setting("s3.endpoint") {
            b = b.with_endpoint(e).with_allow_http(e.starts_with("http://"));
        }
        if let Some(k) = setting("s3.access-key-id") {
            b = b.with_access_key_id(k);
        }
        if let Some(k) = setting("s3.secret-access-key") {
            b = b.with_secret_access_key(k);
        }
        if let Some(t) = setting("s3.session-token") {
            b = b.with_token(t);
        }
        if setting("s3.allow-anonymous") == Some("true") {
            b = b.with_skip_signature(true);
        }
        let store: Arc<dyn ObjectStore> =
            Arc::new(b.build().map_err(|e| format!("bucket '{name}': {e}"))?);
        self.buckets.insert(name.to_string(), Arc::clone(&store));
        Ok(store)
    }
}

/// Where a location is.
#[derive(Debug, PartialEq)]
enum Place {
    /// A path of the server.
    Local(String),
    /// An object.
    S3 { bucket: String, key: String },
}

impl Place {
    /// Where `location` is, taken as text: Iceberg's paths are not
    /// encoded URLs (a partition folder `ts=2024-01-01T05%3A33%3A23` is
    /// named so), so nothing is decoded. A path without a scheme is the
    /// server's, relative to the file connectors' first folder.
    fn of(location: &str) -> Result<Self, String> {
        let (scheme, rest) = match location.split_once("://") {
            Some((scheme, rest)) => (scheme, rest),
            None if location.contains(':') && !location.starts_with('/') => {
                let scheme = location.split(':').next().unwrap_or_default();
                return Err(format!(
                    "'{location}': scheme '{scheme}' is not supported (s3://, file:// or a path)"
                ));
            }
            None => return Ok(Self::Local(location.to_string())),
        };
        match scheme {
            // `file:///path`; a host other than none or localhost is not this server.
            "file" => match rest.strip_prefix("localhost").unwrap_or(rest) {
                path if path.starts_with('/') => Ok(Self::Local(path.to_string())),
                _ => Err(format!("'{location}' is not a local path")),
            },
            "s3" | "s3a" => {
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() || key.is_empty() {
                    return Err(format!("'{location}' names no object"));
                }
                Ok(Self::S3 {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                })
            }
            other => Err(format!(
                "'{location}': scheme '{other}' is not supported (s3://, file:// or a path)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_name_local_files_or_objects() {
        assert_eq!(
            Place::of("file:///w/t/metadata/v1.json").unwrap(),
            Place::Local("/w/t/metadata/v1.json".into())
        );
        assert_eq!(Place::of("/w/x").unwrap(), Place::Local("/w/x".into()));
        // Not decoded: the key is the text.
        assert_eq!(
            Place::of("s3a://bkt/t/data/ts=2024-01-01T05%3A33%3A23/a b#1.parquet").unwrap(),
            Place::S3 {
                bucket: "bkt".into(),
                key: "t/data/ts=2024-01-01T05%3A33%3A23/a b#1.parquet".into()
            }
        );
        assert_eq!(
            Place::of("file:///w/p=%C3%A9/x.parquet").unwrap(),
            Place::Local("/w/p=%C3%A9/x.parquet".into())
        );
        assert!(Place::of("gs://b/k").unwrap_err().contains("not supported"));
        assert!(Place::of("http:x").unwrap_err().contains("not supported"));
        assert!(Place::of("s3://bkt").is_err());
        assert!(Place::of("file://host/x").is_err());
        assert_eq!(
            Place::of("lake/m.json").unwrap(),
            Place::Local("lake/m.json".into())
        );
    }

    #[test]
    fn settings_are_checked_by_name() {
        let dir = std::env::temp_dir().join(format!("eddy-iceberg-{}", std::process::id()));
        let access = FileAccess::new(&dir, &[]).unwrap();
        let mut s = BTreeMap::new();
        s.insert(
            "s3.endpoint".to_string(),
            Value::from("http://127.0.0.1:9000"),
        );
        s.insert("s3.allow-anonymous".to_string(), Value::from(true));
        s.insert("glue.region".to_string(), Value::from("eu-west-1"));
        let split = Settings::split(&s).unwrap();
        assert_eq!(split.s3.len(), 2);
        assert_eq!(split.glue["glue.region"], "eu-west-1");
        assert!(Files::new(access.clone(), &split.s3).is_ok());
        s.insert("rest.uri".to_string(), Value::from("http://x"));
        let e = Settings::split(&s).err().unwrap();
        assert!(
            e.contains("REST and S3 Tables catalogs are not supported"),
            "{e}"
        );
        let mut s = BTreeMap::new();
        s.insert("s3.endpont".to_string(), Value::from("x"));
        assert!(Settings::split(&s).err().unwrap().contains("unknown field"));
        let mut bad = BTreeMap::new();
        bad.insert("s3.endpoint".to_string(), "ftp://x".to_string());
        assert!(Files::new(access.clone(), &bad).is_err());
        let files = Files::new(access, &BTreeMap::new()).unwrap();
        assert!(files.check("file:///etc/t/v1.metadata.json").is_err());
        assert!(files.check("s3://b/t/v1.metadata.json").is_ok());
        let _ = std::fs::remove_dir_all(dir);
    }
}
