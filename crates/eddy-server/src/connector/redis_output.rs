//! `redis_output`: a view kept up to date in Redis by its key, as Feldera's
//! connector does: the format is `json` with `key_fields`, the columns
//! whose values, joined by `key_separator` (`:`), make each row's Redis
//! key; the value is the row as a line of JSON.
//!
//! Each step's change is one atomic pipeline (`MULTI`/`EXEC`): per key, a
//! row inserted is a `SET`, a key only deleted a `DEL`. Writes by key are
//! idempotent, so the steps a recovery replays after its checkpoint leave
//! Redis as they left it; a step that cannot be written waits in an
//! [`Outbox`]. As in Feldera, keys are values joined by the separator: a
//! value holding the separator, or NULL beside the text `null`, can make
//! two rows one key, so the key fields must be unique as written.

use std::collections::BTreeMap;
use std::path::Path;

use eddy_dbsp::ZSet;
use eddy_io::format::FormatConfig;
use serde::Deserialize;
use serde_json::Value;

use super::outbox::Outbox;
use super::{CheckContext, ConnectorSpec, OutputContext, Transport};
use crate::runner::{Sink, SinkStatus};

/// How long connecting, and one read or write, may take.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// `redis_output`'s configuration (Feldera's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisOutput {
    /// `redis://[user][:password@]host[:port][/db]`.
    connection_string: String,
    /// Joins the key's parts (`:`).
    key_separator: Option<String>,
}

impl RedisOutput {
    /// The key's columns, by position among the view's.
    fn key(&self, spec: &ConnectorSpec, columns: &[String]) -> Result<Vec<usize>, String> {
        let fields = match &spec.format {
            Some(FormatConfig::Json(j)) => j.key_fields.clone().unwrap_or_default(),
            _ => Vec::new(),
        };
        if fields.is_empty() {
            return Err(
                "needs the json format with \"key_fields\", the columns of each row's key".into(),
            );
        }
        fields
            .iter()
            .map(|f| {
                columns
                    .iter()
                    .position(|c| c.eq_ignore_ascii_case(f))
                    .ok_or_else(|| {
                        format!(
                            "\"key_fields\": view '{}' has no column '{f}'",
                            spec.relation
                        )
                    })
            })
            .collect()
    }
}

impl Transport for RedisOutput {
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        redis::Client::open(self.connection_string.as_str())
            .map_err(|e| format!("'connection_string': {e}"))?;
        let columns: Vec<String> = cx.columns.iter().map(|f| f.name().clone()).collect();
        self.key(spec, &columns)?;
        spec.output_format()?;
        Ok(())
    }

    fn open_output(
        &self,
        spec: &ConnectorSpec,
        cx: OutputContext<'_>,
    ) -> Result<Box<dyn Sink>, String> {
        let columns: Vec<String> = cx.columns.iter().map(|f| f.name().clone()).collect();
        let client = redis::Client::open(self.connection_string.as_str())
            .map_err(|e| format!("'connection_string': {e}"))?;
        let connection = connect(&client)?;
        Ok(Box::new(RedisSink {
            client,
            connection: Some(connection),
            key: self.key(spec, &columns)?,
            separator: self.key_separator.clone().unwrap_or_else(|| ":".into()),
            outbox: Outbox::default(),
        }))
    }
}

/// A connection whose reads and writes time out (the client resets them
/// to none once connected).
fn connect(client: &redis::Client) -> Result<redis::Connection, String> {
    let c = client
        .get_connection_with_timeout(TIMEOUT)
        .map_err(|e| format!("connecting to Redis: {e}"))?;
    c.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    c.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    Ok(c)
}

/// One step's writes: keys set to values, keys deleted.
#[derive(Debug, Clone, Default)]
struct Writes {
    set: Vec<(String, String)>,
    del: Vec<String>,
}

/// A view kept in Redis by key.
struct RedisSink {
    client: redis::Client,
    connection: Option<redis::Connection>,
    key: Vec<usize>,
    separator: String,
    outbox: Outbox<Writes>,
}

/// A key part: a string as it is, anything else as its JSON text.
fn part(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl RedisSink {
    fn writes(&self, changes: &ZSet) -> Result<Writes, String> {
        let rows = eddy_io::json::encode_rows(changes.batch())?;
        let mut by_key: BTreeMap<String, (Option<&Value>, bool)> = BTreeMap::new();
        for (row, &w) in rows.iter().zip(changes.weights()) {
            let Value::Object(fields) = row else {
                return Err("a row is not a JSON object".into());
            };
            let values: Vec<&Value> = fields.values().collect();
            let key: Vec<String> = self.key.iter().map(|&i| part(values[i])).collect();
            let entry = by_key.entry(key.join(&self.separator)).or_default();
            if w > 0 {
                entry.0 = Some(row);
            } else if w < 0 {
                entry.1 = true;
            }
        }
        let mut out = Writes::default();
        for (key, (inserted, deleted)) in by_key {
            match (inserted, deleted) {
                (Some(row), _) => out.set.push((key, format!("{row}\n"))),
                (None, true) => out.del.push(key),
                (None, false) => {}
            }
        }
        Ok(out)
    }
}

/// Writes one step atomically, making a broken connection again.
fn sender<'a>(
    client: &'a redis::Client,
    connection: &'a mut Option<redis::Connection>,
) -> impl FnMut(&Writes) -> Result<(), String> + 'a {
    move |w| {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (k, v) in &w.set {
            pipe.set(k, v).ignore();
        }
        for k in &w.del {
            pipe.del(k).ignore();
        }
        let c = match connection {
            Some(c) => c,
            None => connection.insert(connect(client)?),
        };
        pipe.query::<()>(c).map_err(|e| {
            // Made again at the next try.
            *connection = None;
            format!("writing to Redis: {e}")
        })
    }
}

impl Sink for RedisSink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        let writes = match self.writes(changes) {
            Ok(w) => w,
            Err(e) => return SinkStatus::Failed(e),
        };
        let records = (writes.set.len() + writes.del.len()) as u64;
        let bytes = writes
            .set
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum::<usize>()
            + writes.del.iter().map(String::len).sum::<usize>();
        let send = sender(&self.client, &mut self.connection);
        self.outbox.write(writes, records, bytes as u64, send)
    }

    fn retry(&mut self) -> Option<SinkStatus> {
        self.outbox
            .retry(sender(&self.client, &mut self.connection))
    }

    fn flush(&mut self) {
        if let Err(e) = self
            .outbox
            .send_all(sender(&self.client, &mut self.connection))
        {
            tracing::warn!(error = %e, "redis_output: steps not written at shutdown; a recovery from the last checkpoint writes them");
        }
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        self.outbox
            .send_all(sender(&self.client, &mut self.connection))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_parts_are_values_as_text() {
        assert_eq!(part(&json!("first")), "first");
        assert_eq!(part(&json!(1)), "1");
        assert_eq!(part(&Value::Null), "null");
    }
}
