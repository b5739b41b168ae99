//! Delta Lake tables, through delta-rs (`deltalake-core`, on the workspace's
//! arrow and `object_store`): `delta_table_input` feeds a table from one
//! ([`source`]), `delta_table_output` appends a view's changes to one as a
//! change log ([`sink`]).
//!
//! A table is named by its `uri`: `s3://bucket/path` (with `object_store`'s
//! S3 settings, `aws_access_key_id`, `aws_endpoint`, `aws_allow_http`, …,
//! beside the connector's own, as Feldera writes them), or a folder of the
//! server (`file:///path` or a path), which follows the rule of file
//! connectors: inside the data directory's `files/` or a `--file-dir`.
//! Settings that are neither the connector's nor the store's are refused
//! by name.
//!
//! delta-rs is asynchronous and connectors run on their own threads (or
//! the step worker): each call runs on the connectors' runtime
//! ([`super::blocking`]).

mod cdc;
mod deletion;
mod mapping;
pub mod sink;
pub mod source;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, Fields, TimeUnit};
use deltalake_core::logstore::object_store::aws::AmazonS3ConfigKey;
use deltalake_core::logstore::object_store::local::LocalFileSystem;
use deltalake_core::logstore::object_store::prefix::PrefixStore;
use deltalake_core::logstore::object_store::ObjectStore;
use deltalake_core::logstore::{default_logstore, LogStoreRef, StorageConfig};
use serde_json::Value;
use url::Url;

use super::FileAccess;

/// Where a table is: its URL and the object store settings given.
#[derive(Debug, Clone)]
pub struct Location {
    /// The table's URL (`s3://…` or `file://…`).
    pub url: Url,
    /// `object_store`'s settings for S3.
    options: HashMap<String, String>,
}

impl Location {
    /// Reads `uri` and the settings beside the connector's own; a local
    /// table is checked against the file rules (by its text).
    pub fn read(
        uri: &str,
        settings: &BTreeMap<String, Value>,
        files: &FileAccess,
    ) -> Result<Self, String> {
        let url = match Url::parse(uri) {
            Ok(u) if u.scheme() == "s3" || u.scheme() == "s3a" => u,
            Ok(u) if u.scheme() == "file" => {
                let path = u
                    .to_file_path()
                    .map_err(|_| format!("'uri': '{uri}' is not a local path"))?;
                Self::local(&path.to_string_lossy(), files)?
            }
            Ok(u) if u.scheme().len() > 1 => {
                return Err(format!(
                    "'uri': scheme '{}' is not supported (s3://, file:// or a path)",
                    u.scheme()
                ))
            }
            // A path (a one-letter "scheme" is a Windows drive).
            _ => Self::local(uri, files)?,
        };
        let mut options = HashMap::new();
        for (key, value) in settings {
            if url.scheme() == "file" {
                return Err(format!(
                    "unknown field `{key}` (a local table takes no storage settings)"
                ));
            }
            key.parse::<AmazonS3ConfigKey>()
                .map_err(|_| format!("unknown field `{key}` (neither the connector's nor an S3 setting of object_store)"))?;
            let value = match value {
                Value::String(s) => s.clone(),
                Value::Bool(_) | Value::Number(_) => value.to_string(),
                other => return Err(format!("'{key}': a string, not {other}")),
            };
            options.insert(key.clone(), value);
        }
        Ok(Self { url, options })
    }

    fn local(path: &str, files: &FileAccess) -> Result<Url, String> {
        let path = files.check(path)?;
        Url::from_directory_path(&path)
            .map_err(|_| format!("'{}' is not a folder path", path.display()))
    }

    /// The table's log store (connects to nothing yet). A local folder is
    /// created and checked again, its links resolved.
    pub fn log_store(&self, files: &FileAccess) -> Result<LogStoreRef, String> {
        let (root, prefix): (Arc<dyn ObjectStore>, _) = if self.url.scheme() == "file" {
            let path = self.url.to_file_path().map_err(|_| "not a local path")?;
            std::fs::create_dir_all(&path)
                .map_err(|e| format!("creating '{}': {e}", path.display()))?;
            let path = files.resolve(&path.to_string_lossy())?;
            (
                Arc::new(LocalFileSystem::new()),
                deltalake_core::logstore::object_store::path::Path::from_absolute_path(&path)
                    .map_err(|e| e.to_string())?,
            )
        } else {
            let (store, prefix) = deltalake_core::logstore::object_store::parse_url_opts(
                &self.url,
                self.options.iter(),
            )
            .map_err(|e| format!("'uri': {e}"))?;
            (Arc::from(store), prefix)
        };
        let prefixed: Arc<dyn ObjectStore> = Arc::new(PrefixStore::new(Arc::clone(&root), prefix));
        Ok(default_logstore(
            prefixed,
            root,
            &self.url,
            &StorageConfig::default(),
        ))
    }
}

/// The Delta Lake type a column is written as: a timestamp as
/// microseconds (Delta's precision) in UTC, strings and binaries as their
/// plain Arrow types; types Delta Lake has no place for are refused.
pub fn delta_type(t: &DataType) -> Result<DataType, String> {
    Ok(match t {
        DataType::Boolean
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::Float32
        | DataType::Float64
        | DataType::Date32
        | DataType::Utf8
        | DataType::Binary => t.clone(),
        DataType::Decimal128(p, _) if *p <= 38 => t.clone(),
        DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::BinaryView | DataType::FixedSizeBinary(_) => DataType::Binary,
        DataType::Timestamp(_, None) => {
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        }
        DataType::List(f) | DataType::LargeList(f) => DataType::List(Arc::new(delta_field(f)?)),
        DataType::Struct(fields) => DataType::Struct(delta_fields(fields)?),
        DataType::Map(f, sorted) => DataType::Map(Arc::new(delta_field(f)?), *sorted),
        DataType::Time64(_) | DataType::Time32(_) => {
            return Err(
                "TIME has no Delta Lake type (cast it to VARCHAR or BIGINT in the view)".into(),
            )
        }
        DataType::LargeBinary => {
            return Err(
                "VARIANT is not written to Delta Lake yet (cast it to VARCHAR in the view)".into(),
            )
        }
        other => return Err(format!("{other} has no Delta Lake type")),
    })
}

fn delta_field(f: &Field) -> Result<Field, String> {
    delta_type(f.data_type())
        .map(|t| Field::new(f.name(), t, f.is_nullable()))
        .map_err(|e| format!("column '{}': {e}", f.name()))
}

/// Columns as Delta Lake types.
pub fn delta_fields(fields: &Fields) -> Result<Fields, String> {
    fields.iter().map(|f| delta_field(f)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> (FileAccess, std::path::PathBuf) {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("eddy-delta-{}-{n}", std::process::id()));
        (FileAccess::new(&dir, &[]).unwrap(), dir)
    }

    #[test]
    fn locations_follow_the_file_rules_and_refuse_unknown_settings() {
        let (files, dir) = files();
        let none = BTreeMap::new();
        let l = Location::read("tables/t", &none, &files).unwrap();
        assert_eq!(l.url.scheme(), "file");
        assert!(l.url.path().ends_with("/files/tables/t/"), "{}", l.url);
        assert!(Location::read("/etc/t", &none, &files).is_err());
        assert!(Location::read("file:///etc/t", &none, &files).is_err());
        assert!(Location::read("../t", &none, &files).is_err());
        assert!(Location::read("gs://b/t", &none, &files)
            .unwrap_err()
            .contains("not supported"));
        let mut s3 = BTreeMap::new();
        s3.insert(
            "aws_endpoint".to_string(),
            Value::from("http://127.0.0.1:9"),
        );
        s3.insert("aws_allow_http".to_string(), Value::from(true));
        let l = Location::read("s3://b/t", &s3, &files).unwrap();
        assert_eq!(l.options["aws_allow_http"], "true");
        s3.insert("bucket_nme".to_string(), Value::from("x"));
        assert!(Location::read("s3://b/t", &s3, &files)
            .unwrap_err()
            .contains("`bucket_nme`"));
        assert!(Location::read("tables/t", &s3, &files).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn columns_take_delta_lake_types() {
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
        assert_eq!(
            delta_type(&ts).unwrap(),
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
        let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8View, true)));
        assert_eq!(
            delta_type(&list).unwrap(),
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
        );
        assert!(delta_type(&DataType::Time64(TimeUnit::Microsecond))
            .unwrap_err()
            .contains("TIME"));
    }
}
