//! Where an Iceberg table's current metadata file is: a fixed
//! `metadata_location` (one set of snapshots, never a newer one), or a
//! catalog asked on every round, so that the connector sees the commits
//! made since (`follow`).
//!
//! The catalog read is AWS Glue (Feldera's `glue.*` settings): a table is
//! a Glue table whose `metadata_location` parameter names the current
//! metadata file, as Iceberg's Glue catalog (Java, PyIceberg) keeps it.
//! Its API is one signed JSON call (`AWSGlue.GetTable`); the request is
//! signed by `object_store`'s SigV4 signer and sent by its HTTP client
//! (reqwest with rustls), the ones the S3 reads use.

use std::collections::BTreeMap;

use object_store::aws::{AwsAuthorizer, AwsCredential};
use object_store::client::{HttpClient, HttpConnector, HttpRequest, ReqwestConnector};
use object_store::ClientOptions;
use serde::Deserialize;
use url::Url;

use super::super::blocking::block_on;
use super::super::rounds::Failure;

/// The `glue.*` settings read; `glue.warehouse` is where a writer puts new
/// tables, which a reader never needs.
const GLUE_SETTINGS: &[&str] = &[
    "glue.endpoint",
    "glue.access-key-id",
    "glue.secret-access-key",
    "glue.session-token",
    "glue.region",
    "glue.id",
    "glue.warehouse",
];

/// Where the table's metadata is found.
pub enum Catalog {
    /// This file, always.
    Fixed(String),
    /// The table as a Glue catalog has it now.
    Glue(Box<Glue>),
}

impl Catalog {
    /// The location of the table's current metadata file.
    pub fn metadata_location(&self) -> Result<String, Failure> {
        match self {
            Self::Fixed(location) => Ok(location.clone()),
            Self::Glue(glue) => glue.metadata_location(),
        }
    }
}

/// A table of an AWS Glue catalog.
pub struct Glue {
    endpoint: Url,
    region: String,
    credential: AwsCredential,
    catalog_id: Option<String>,
    database: String,
    table: String,
    client: HttpClient,
}

/// The part of Glue's `GetTable` answer read.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GetTable {
    table: GlueTable,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GlueTable {
    #[serde(default)]
    parameters: BTreeMap<String, String>,
}

/// Glue's error answer.
#[derive(Deserialize)]
struct GlueError {
    #[serde(rename = "__type", default)]
    kind: String,
    #[serde(alias = "message", rename = "Message", default)]
    message: String,
}

impl Glue {
    /// The table `table_name` (`namespace.table`, the namespace being the
    /// Glue database) with the `glue.*` settings; credentials and region
    /// not given there come from the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`).
    pub fn new(table_name: &str, settings: &BTreeMap<String, String>) -> Result<Self, String> {
        if let Some(key) = settings
            .keys()
            .find(|k| !GLUE_SETTINGS.contains(&k.as_str()))
        {
            return Err(match key.as_str() {
                "glue.profile-name" => {
                    "'glue.profile-name' is not supported yet (give 'glue.access-key-id' and 'glue.secret-access-key')".into()
                }
                _ => format!("unknown field `{key}`"),
            });
        }
        let (database, table) = table_name
            .rsplit_once('.')
            .filter(|(d, t)| !d.is_empty() && !t.is_empty())
            .ok_or_else(|| format!("'table_name' {table_name:?} is not 'namespace.table'"))?;
        let setting = |key: &str, env: &[&str]| {
            settings.get(key).cloned().or_else(|| {
                env.iter()
                    .find_map(|e| std::env::var(e).ok().filter(|v| !v.is_empty()))
            })
        };
        let region = setting("glue.region", &["AWS_REGION", "AWS_DEFAULT_REGION"])
            .ok_or("'glue.region' is required (or AWS_REGION in the server's environment)")?;
        let key_id = setting("glue.access-key-id", &["AWS_ACCESS_KEY_ID"]);
        let secret = setting("glue.secret-access-key", &["AWS_SECRET_ACCESS_KEY"]);
        let (Some(key_id), Some(secret_key)) = (key_id, secret) else {
            return Err("the Glue catalog needs 'glue.access-key-id' and 'glue.secret-access-key' (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the server's environment)".into());
        };
        let endpoint = match settings.get("glue.endpoint") {
            Some(e) => e.clone(),
            // AWS's China regions have a domain of their own.
            None if region.starts_with("cn-") => format!("https://glue.{region}.amazonaws.com.cn"),
            None => format!("https://glue.{region}.amazonaws.com"),
        };
        let endpoint = Url::parse(&endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| format!("'glue.endpoint' {endpoint} is not an http(s) URL"))?;
        let client = ReqwestConnector::default()
            .connect(&ClientOptions::new().with_allow_http(endpoint.scheme() == "http"))
            .map_err(|e| format!("the Glue catalog's HTTP client: {e}"))?;
        Ok(Self {
            endpoint,
            region,
            credential: AwsCredential {
                key_id,
                secret_key,
                token: setting("glue.session-token", &["AWS_SESSION_TOKEN"]),
            },
            catalog_id: settings.get("glue.id").cloned(),
            database: database.to_string(),
            table: table.to_string(),
            client,
        })
    }

    /// The table's current metadata file, as Glue has it now. A failed
    /// call (the network, a table not found) is tried again.
    fn metadata_location(&self) -> Result<String, Failure> {
        let name = format!("Glue table {}.{}", self.database, self.table);
        let mut body = serde_json::json!({"DatabaseName": self.database, "Name": self.table});
        if let Some(id) = &self.catalog_id {
            body["CatalogId"] = id.clone().into();
        }
        let mut request: HttpRequest = http::Request::post(self.endpoint.as_str())
            .header("content-type", "application/x-amz-json-1.1")
            .header("x-amz-target", "AWSGlue.GetTable")
            .body(body.to_string().into())
            .map_err(|e| Failure::Fatal(format!("{name}: {e}")))?;
        AwsAuthorizer::new(&self.credential, "glue", &self.region).authorize(&mut request, None);
        let client = self.client.clone();
        let answer = block_on(async move {
            let response = client.execute(request).await?;
            let status = response.status();
            let bytes = response.into_body().bytes().await?;
            Ok::<_, object_store::client::HttpError>((status, bytes))
        });
        let (status, bytes) = answer.map_err(|e| Failure::Retry(format!("{name}: {e}")))?;
        if !status.is_success() {
            let why = match serde_json::from_slice::<GlueError>(&bytes) {
                Ok(e) => {
                    let kind = e.kind.rsplit('#').next().unwrap_or_default().to_string();
                    format!("{kind}: {}", e.message)
                }
                Err(_) => String::from_utf8_lossy(&bytes).chars().take(200).collect(),
            };
            return Err(Failure::Retry(format!("{name}: {status} {why}")));
        }
        let table: GetTable = serde_json::from_slice(&bytes)
            .map_err(|e| Failure::Retry(format!("{name}: Glue's answer: {e}")))?;
        let parameters = table.table.parameters;
        let iceberg = parameters
            .get("table_type")
            .is_some_and(|t| t.eq_ignore_ascii_case("iceberg"));
        match parameters.get("metadata_location") {
            Some(location) if iceberg => Ok(location.clone()),
            _ => Err(Failure::Fatal(format!(
                "{name} is not an Iceberg table (its parameters have no 'table_type' ICEBERG and 'metadata_location')"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn glue_settings_are_checked() {
        let ok = [
            ("glue.region", "us-east-1"),
            ("glue.access-key-id", "k"),
            ("glue.secret-access-key", "s"),
        ];
        let g = Glue::new("ns.items", &settings(&ok)).unwrap();
        assert_eq!(g.endpoint.as_str(), "https://glue.us-east-1.amazonaws.com/");
        let mut china = settings(&ok);
        china.insert("glue.region".into(), "cn-north-1".into());
        let g = Glue::new("ns.items", &china).unwrap();
        assert_eq!(
            g.endpoint.as_str(),
            "https://glue.cn-north-1.amazonaws.com.cn/"
        );
        assert_eq!((g.database.as_str(), g.table.as_str()), ("ns", "items"));
        for name in ["items", ".items", "ns."] {
            let e = Glue::new(name, &settings(&ok)).err().unwrap();
            assert!(e.contains("not 'namespace.table'"), "{e}");
        }
        let mut bad = settings(&ok);
        bad.insert("glue.endpoint".into(), "ftp://x".into());
        assert!(Glue::new("a.b", &bad)
            .err()
            .unwrap()
            .contains("not an http"));
        let mut bad = settings(&ok);
        bad.insert("glue.regoin".into(), "x".into());
        assert!(Glue::new("a.b", &bad)
            .err()
            .unwrap()
            .contains("unknown field `glue.regoin`"));
        let mut bad = settings(&ok);
        bad.insert("glue.profile-name".into(), "p".into());
        assert!(Glue::new("a.b", &bad)
            .err()
            .unwrap()
            .contains("not supported yet"));
    }
}
