//! Object storage over S3's API (AWS, or any S3-compatible service named
//! by `endpoint_url`), through the `object_store` crate DataFusion uses:
//! `s3_input` reads objects into a table ([`source`]), `s3_output` writes a
//! view's changes as objects ([`sink`]).
//!
//! The settings of the bucket are Feldera's (`bucket_name`, `region`,
//! `endpoint_url`, `aws_access_key_id`, `aws_secret_access_key`,
//! `no_sign_request`); without keys, the standard `AWS_*` environment
//! variables of the server are used, as Feldera does for IRSA.
//!
//! `object_store` is asynchronous and connectors run on their own threads:
//! each call runs on the connectors' runtime ([`super::blocking`]).

pub mod sink;
pub mod source;

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectMeta, ObjectStore};
use serde::Deserialize;

/// Where the bucket is and how to reach it (Feldera's settings).
#[derive(Debug, Clone, Deserialize)]
pub struct Bucket {
    /// The bucket.
    pub bucket_name: String,
    /// Its region.
    pub region: Option<String>,
    /// An S3-compatible service's URL instead of AWS's.
    pub endpoint_url: Option<String>,
    /// Access key (with the secret).
    pub aws_access_key_id: Option<String>,
    /// Secret access key.
    pub aws_secret_access_key: Option<String>,
    /// Send requests unsigned (a public bucket).
    #[serde(default)]
    pub no_sign_request: bool,
}

impl Bucket {
    /// Checks the settings that need no request.
    pub fn check(&self) -> Result<(), String> {
        if self.bucket_name.is_empty() {
            return Err("'bucket_name' is empty".into());
        }
        match (&self.aws_access_key_id, &self.aws_secret_access_key) {
            (Some(_), None) | (None, Some(_)) => {
                return Err("'aws_access_key_id' and 'aws_secret_access_key' go together".into())
            }
            (Some(_), Some(_)) if self.no_sign_request => {
                return Err("'no_sign_request' excludes access keys".into())
            }
            _ => {}
        }
        if let Some(url) = &self.endpoint_url {
            let parsed = url::Url::parse(url).map_err(|e| format!("'endpoint_url' {url}: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(format!("'endpoint_url' {url} is not http(s)"));
            }
        }
        Ok(())
    }

    /// The object store of the bucket.
    pub fn store(&self) -> Result<Arc<dyn ObjectStore>, String> {
        self.check()?;
        let mut b = AmazonS3Builder::from_env().with_bucket_name(&self.bucket_name);
        if let Some(r) = &self.region {
            b = b.with_region(r);
        }
        if let Some(url) = &self.endpoint_url {
            b = b
                .with_endpoint(url)
                .with_allow_http(url.starts_with("http://"));
        }
        if let (Some(id), Some(secret)) = (&self.aws_access_key_id, &self.aws_secret_access_key) {
            b = b.with_access_key_id(id).with_secret_access_key(secret);
        }
        if self.no_sign_request {
            b = b.with_skip_signature(true);
        }
        let store = b
            .build()
            .map_err(|e| format!("bucket '{}': {e}", self.bucket_name))?;
        Ok(Arc::new(store))
    }
}

/// The object path of a key, taken as written where `object_store`
/// accepts it (its `From` would encode some characters, naming another
/// object).
pub fn object_path(key: &str) -> ObjectPath {
    ObjectPath::parse(key).unwrap_or_else(|_| ObjectPath::from(key))
}

/// Refuses a key or prefix that `object_store` would name differently (a
/// leading `/`, an empty segment, `.` or `..`): its listing would never
/// find what is written under it.
pub fn check_key(what: &str, key: &str) -> Result<(), String> {
    let trimmed = key.strip_suffix('/').unwrap_or(key);
    if trimmed.is_empty() {
        return Ok(());
    }
    match ObjectPath::parse(trimmed) {
        Ok(p) if p.as_ref() == trimmed => Ok(()),
        _ => Err(format!(
            "{what} '{key}' cannot be named in object storage: no leading '/', empty segments, '.' or '..'"
        )),
    }
}

/// The objects whose keys start with `prefix`, as S3 means a prefix (any
/// text, not only whole folders), in key order; only those after `after`
/// when it is given (S3 lists from there, so a followed prefix is not
/// listed whole every time). The folder the prefix is in is listed: keys
/// there that object storage cannot name fail the listing.
pub async fn list(
    store: Arc<dyn ObjectStore>,
    prefix: String,
    after: Option<String>,
) -> Result<Vec<ObjectMeta>, object_store::Error> {
    // `object_store` lists whole path segments: list the folder the
    // prefix is in, and keep what starts with it.
    let folder = prefix.rfind('/').map(|i| &prefix[..i]).unwrap_or("");
    let folder = (!folder.is_empty()).then(|| object_path(folder));
    let listed = match &after {
        Some(a) => store.list_with_offset(folder.as_ref(), &object_path(a)),
        None => store.list(folder.as_ref()),
    };
    let mut objects: Vec<ObjectMeta> = listed
        .try_filter(|o| std::future::ready(o.location.as_ref().starts_with(prefix.as_str())))
        .try_collect()
        .await?;
    objects.sort_by(|a, b| a.location.cmp(&b.location));
    Ok(objects)
}

pub use super::blocking::block_on;

pub use super::outbox::backoff;
