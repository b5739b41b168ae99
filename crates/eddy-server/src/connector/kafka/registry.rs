//! Confluent's schema registry, as Avro connectors of Kafka reach it: its
//! REST API (`GET /schemas/ids/{id}`, `POST /subjects/{subject}/versions`)
//! over each configured URL in turn, with basic or bearer authentication.

use std::time::Duration;

use apache_avro::Schema;
use eddy_io::avro::{AvroConfig, SchemaSource};
use serde_json::{json, Value};

/// A schema registry (Confluent's REST API: `GET /schemas/ids/{id}`,
/// `POST /subjects/{subject}/versions`).
#[derive(Debug, Clone)]
pub struct Registry {
    urls: Vec<String>,
    auth: Option<String>,
    timeout: Duration,
}

impl Registry {
    /// The registry an Avro configuration names, if any, its URLs and
    /// authentication checked.
    pub fn new(config: &AvroConfig) -> Result<Option<Self>, String> {
        let urls: Vec<String> = config
            .registry_urls
            .iter()
            .map(|u| {
                let parsed = url::Url::parse(u).map_err(|e| format!("registry url '{u}': {e}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("registry url '{u}' is not http(s)"));
                }
                Ok(u.trim_end_matches('/').to_string())
            })
            .collect::<Result<_, String>>()?;
        if urls.is_empty() {
            return Ok(None);
        }
        let auth = match (
            config.registry_username.as_deref(),
            config.registry_password.as_deref(),
            config.registry_authorization_token.as_deref(),
        ) {
            (Some(_), _, Some(_)) => {
                return Err(
                    "'registry_username' and 'registry_authorization_token' exclude each other"
                        .into(),
                )
            }
            (Some(user), password, None) => Some(format!(
                "Basic {}",
                base64(format!("{user}:{}", password.unwrap_or("")).as_bytes())
            )),
            (None, _, Some(token)) => Some(format!("Bearer {token}")),
            (None, _, None) => None,
        };
        let timeout = config.registry_timeout_secs.unwrap_or(10);
        Ok(Some(Self {
            urls,
            auth,
            timeout: Duration::from_secs(timeout.clamp(1, 300)),
        }))
    }

    /// Sends a request to each URL in turn until one answers.
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value, String> {
        let mut last = String::new();
        for base in &self.urls {
            let mut request = ureq::request(method, &format!("{base}{path}"))
                .timeout(self.timeout)
                .set(
                    "Accept",
                    "application/vnd.schemaregistry.v1+json, application/json",
                );
            if let Some(auth) = &self.auth {
                request = request.set("Authorization", auth);
            }
            let answer = match body {
                Some(b) => request
                    .set("Content-Type", "application/vnd.schemaregistry.v1+json")
                    .send_string(&b.to_string()),
                None => request.call(),
            };
            match answer {
                Ok(r) => {
                    return r
                        .into_string()
                        .map_err(|e| e.to_string())
                        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                        .map_err(|e| format!("schema registry {base}: {e}"))
                }
                Err(ureq::Error::Status(code, r)) => {
                    let text = r.into_string().unwrap_or_default();
                    last = format!("schema registry {base}{path}: {code} {}", text.trim());
                }
                Err(e) => last = format!("schema registry {base}: {e}"),
            }
        }
        Err(last)
    }
}

impl SchemaSource for Registry {
    fn schema(&self, id: u32) -> Result<Schema, String> {
        let answer = self.call("GET", &format!("/schemas/ids/{id}"), None)?;
        let text = answer
            .get("schema")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("schema registry: no schema in the answer for id {id}"))?;
        Schema::parse_str(text).map_err(|e| format!("schema {id} from the registry: {e}"))
    }

    fn register(&self, subject: &str, schema: &str) -> Result<u32, String> {
        let body = json!({"schema": schema});
        let answer = self.call(
            "POST",
            &format!("/subjects/{}/versions", url_segment(subject)),
            Some(&body),
        )?;
        answer
            .get("id")
            .and_then(Value::as_u64)
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| format!("schema registry: no id in the answer {answer}"))
    }
}

fn url_segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_authentication_are_checked() {
        let config = |v: Value| serde_json::from_value::<AvroConfig>(v).unwrap();
        assert!(Registry::new(&config(json!({"registry_urls": ["ftp://x"]}))).is_err());
        let both = json!({"registry_urls": ["http://r"], "registry_username": "u", "registry_authorization_token": "t"});
        assert!(Registry::new(&config(both)).is_err());
        let basic = json!({"registry_urls": ["http://r/"], "registry_username": "eddy", "registry_password": "k"});
        let r = Registry::new(&config(basic)).unwrap().unwrap();
        assert_eq!(r.urls, ["http://r"]);
        assert_eq!(r.auth.as_deref(), Some("Basic ZWRkeTpr"));
        assert!(Registry::new(&config(json!({}))).unwrap().is_none());
    }
}
