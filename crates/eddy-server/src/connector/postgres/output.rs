//! `postgres_output`: a view kept up to date in a PostgreSQL table by its
//! key, as Feldera's connector does in its `materialized` mode. The view
//! names its key with `CREATE INDEX name ON view(columns)` and the
//! connector with `"index": "name"`; the PostgreSQL table needs a unique
//! constraint (its primary key) on those columns.
//!
//! Each step's change is written in one transaction: per key, a row
//! inserted is an upsert (`INSERT … ON CONFLICT (key) DO UPDATE`, or `DO
//! NOTHING` with `on_conflict_do_nothing`) and a row only deleted is a
//! `DELETE`. Rows travel as one JSON array per statement, turned into the
//! table's types by PostgreSQL itself (`json_populate_recordset`), so the
//! table may use wider types than the view, and its columns the view lacks
//! keep their defaults.
//!
//! Exactly once: writes by key are idempotent, so the steps a recovery
//! replays after its checkpoint leave the table as they left it; a
//! transaction that fails (or takes over a minute) waits in an [`Outbox`],
//! so no change is skipped. A row whose key holds a NULL cannot be keyed in
//! PostgreSQL: it is counted as an error of the step, not written.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use eddy_dbsp::ZSet;
use serde::Deserialize;
use serde_json::Value;

use super::{connect, pg_error, quoted, table_sql};
use crate::connector::blocking::block_on;
use crate::connector::outbox::Outbox;
use crate::connector::{CheckContext, ConnectorSpec, OutputContext, Transport};
use crate::runner::{Sink, SinkStatus};

/// How long connecting, and one step's transaction, may take.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// `postgres_output`'s configuration (Feldera's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresOutput {
    /// A connection URL, `postgres://user:password@host:port/database`.
    uri: String,
    /// The table written (`schema.table` or `table`).
    table: String,
    /// `materialized` (the default; `cdc` is not supported yet).
    mode: Option<String>,
    /// Keep the row a conflicting insert finds.
    #[serde(default)]
    on_conflict_do_nothing: bool,
    // Feldera's buffer sizes and writer threads: a step is one transaction
    // of two statements here.
    #[serde(rename = "max_records_in_buffer")]
    _max_records_in_buffer: Option<u64>,
    #[serde(rename = "max_buffer_size_bytes")]
    _max_buffer_size_bytes: Option<u64>,
    #[serde(rename = "threads")]
    _threads: Option<u64>,
    // TLS (refused when given: not supported yet).
    ssl_ca_pem: Option<String>,
    ssl_ca_location: Option<String>,
    ssl_client_pem: Option<String>,
    ssl_client_location: Option<String>,
    ssl_client_key: Option<String>,
    ssl_client_key_location: Option<String>,
    ssl_certificate_chain_location: Option<String>,
    verify_hostname: Option<bool>,
    cdc_op_column: Option<String>,
    cdc_ts_column: Option<String>,
}

impl Transport for PostgresOutput {
    fn check(&self, spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        match self.mode.as_deref() {
            None | Some("materialized") => {}
            Some("cdc") => return Err("mode 'cdc' is not supported yet (materialized)".into()),
            Some(other) => return Err(format!("unknown mode '{other}' (materialized)")),
        }
        let tls = [
            &self.ssl_ca_pem,
            &self.ssl_ca_location,
            &self.ssl_client_pem,
            &self.ssl_client_location,
            &self.ssl_client_key,
            &self.ssl_client_key_location,
            &self.ssl_certificate_chain_location,
        ];
        if tls.iter().any(|s| s.is_some()) || self.verify_hostname.is_some() {
            return Err("TLS to PostgreSQL is not supported yet".into());
        }
        if self.cdc_op_column.is_some() || self.cdc_ts_column.is_some() {
            return Err("the cdc columns go with mode 'cdc', which is not supported yet".into());
        }
        self.uri
            .parse::<tokio_postgres::Config>()
            .map_err(|e| format!("'uri': {e}"))?;
        if self.table.is_empty() {
            return Err("'table' is empty".into());
        }
        let Some(index) = &spec.index else {
            return Err(format!(
                "writes by key: name the view's key with CREATE INDEX name ON {}(columns) and the connector's \"index\"",
                spec.relation
            ));
        };
        debug_assert!(index.columns.iter().all(|c| cx.columns.find(c).is_some()));
        Ok(())
    }

    fn open_output(
        &self,
        spec: &ConnectorSpec,
        cx: OutputContext<'_>,
    ) -> Result<Box<dyn Sink>, String> {
        let index = spec.index.as_ref().ok_or("no index")?;
        let columns: Vec<String> = cx.columns.iter().map(|f| f.name().clone()).collect();
        let key: Vec<usize> = index
            .columns
            .iter()
            .map(|k| {
                columns
                    .iter()
                    .position(|c| c == k)
                    .ok_or(format!("no column '{k}'"))
            })
            .collect::<Result<_, String>>()?;
        let statements = Statements::new(
            &self.table,
            &columns,
            &index.columns,
            self.on_conflict_do_nothing,
        );
        let client = connect(&self.uri)?;
        Ok(Box::new(PostgresSink {
            uri: self.uri.clone(),
            client: Some(client),
            statements,
            key,
            outbox: Outbox::default(),
        }))
    }
}

/// The statements of a table written by key: rows travel as a JSON array.
#[derive(Debug, Clone)]
struct Statements {
    upsert: String,
    delete: String,
}

impl Statements {
    fn new(table: &str, columns: &[String], key: &[String], do_nothing: bool) -> Self {
        let t = table_sql(table);
        let cols: Vec<String> = columns.iter().map(|c| quoted(c)).collect();
        let keys: Vec<String> = key.iter().map(|c| quoted(c)).collect();
        let rest: Vec<String> = cols
            .iter()
            .filter(|c| !keys.contains(c))
            .map(|c| format!("{c} = EXCLUDED.{c}"))
            .collect();
        let on_conflict = if do_nothing || rest.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", rest.join(", "))
        };
        let upsert = format!(
            "INSERT INTO {t} ({cols}) SELECT {cols} FROM json_populate_recordset(NULL::{t}, $1::text::json) ON CONFLICT ({keys}) {on_conflict}",
            cols = cols.join(", "),
            keys = keys.join(", "),
        );
        // Keys hold no NULL (checked), so `=` finds them, by the index.
        let matches: Vec<String> = keys.iter().map(|k| format!("x.{k} = d.{k}")).collect();
        let delete = format!(
            "DELETE FROM {t} AS x USING json_populate_recordset(NULL::{t}, $1::text::json) AS d WHERE {}",
            matches.join(" AND ")
        );
        Self { upsert, delete }
    }
}

/// One step's writes: the rows to upsert and the keys to delete, as JSON.
#[derive(Debug, Clone)]
struct Writes {
    /// Rows left out: their key holds a NULL.
    null_keys: usize,
    upserts: String,
    deletes: String,
    records: u64,
}

/// A view kept in a PostgreSQL table by key.
struct PostgresSink {
    uri: String,
    client: Option<Arc<tokio_postgres::Client>>,
    statements: Statements,
    /// The key's columns, by position.
    key: Vec<usize>,
    /// Steps not written yet.
    outbox: Outbox<Writes>,
}

impl PostgresSink {
    /// A step's change as writes by key: a key with a row inserted is
    /// upserted with it; a key only deleted is deleted.
    fn writes(&self, changes: &ZSet) -> Result<Writes, String> {
        let rows = eddy_io::json::encode_rows(changes.batch())?;
        // Per key: the row inserted, and a row deleted. A key of
        // PostgreSQL's cannot hold NULL: such rows are counted, not written.
        let mut by_key: BTreeMap<String, (Option<&Value>, Option<&Value>)> = BTreeMap::new();
        let mut null_keys = 0;
        for (row, &w) in rows.iter().zip(changes.weights()) {
            if key_values(row, &self.key).iter().any(|v| v.is_null()) {
                null_keys += 1;
                continue;
            }
            let entry = by_key.entry(key_text(row, &self.key)).or_default();
            if w > 0 {
                entry.0 = Some(row);
            } else if w < 0 && entry.1.is_none() {
                entry.1 = Some(row);
            }
        }
        let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
        for (inserted, deleted) in by_key.into_values() {
            match (inserted, deleted) {
                (Some(row), _) => upserts.push(row),
                (None, Some(row)) => deletes.push(row),
                (None, None) => {}
            }
        }
        Ok(Writes {
            null_keys,
            records: (upserts.len() + deletes.len()) as u64,
            upserts: serde_json::to_string(&upserts).map_err(|e| e.to_string())?,
            deletes: serde_json::to_string(&deletes).map_err(|e| e.to_string())?,
        })
    }
}

/// Writes one step in one transaction, making a broken connection again.
fn sender<'a>(
    uri: &'a str,
    statements: &'a Statements,
    client: &'a mut Option<Arc<tokio_postgres::Client>>,
) -> impl FnMut(&Writes) -> Result<(), String> + 'a {
    move |w| {
        let c = match client.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => Arc::clone(c),
            None => {
                let c = connect(uri)?;
                *client = Some(Arc::clone(&c));
                c
            }
        };
        let (st, writes) = (statements.clone(), w.clone());
        block_on(async move {
            tokio::time::timeout(TIMEOUT, transact(&c, &st, &writes))
                .await
                .map_err(|_| format!("a step's transaction took over {TIMEOUT:?}"))?
                .map_err(|e| format!("writing to PostgreSQL: {}", pg_error(&e)))
        })
    }
}

/// The key's values of a JSON row (its fields in the view's column order).
fn key_values<'a>(row: &'a Value, key: &[usize]) -> Vec<&'a Value> {
    let Value::Object(fields) = row else {
        return Vec::new();
    };
    let values: Vec<&Value> = fields.values().collect();
    key.iter().filter_map(|&i| values.get(i).copied()).collect()
}

/// The key of a JSON row as text.
fn key_text(row: &Value, key: &[usize]) -> String {
    serde_json::to_string(&key_values(row, key)).unwrap_or_default()
}

/// One step in one transaction: deletes, then upserts.
async fn transact(
    client: &tokio_postgres::Client,
    st: &Statements,
    w: &Writes,
) -> Result<(), tokio_postgres::Error> {
    client.batch_execute("BEGIN").await?;
    let result = async {
        if w.deletes != "[]" {
            client.execute(st.delete.as_str(), &[&w.deletes]).await?;
        }
        if w.upserts != "[]" {
            client.execute(st.upsert.as_str(), &[&w.upserts]).await?;
        }
        client.batch_execute("COMMIT").await
    }
    .await;
    if result.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    result
}

impl Sink for PostgresSink {
    fn write(&mut self, _sequence: u64, changes: &ZSet) -> SinkStatus {
        let writes = match self.writes(changes) {
            Ok(w) => w,
            Err(e) => return SinkStatus::Failed(e),
        };
        let (records, bytes) = (
            writes.records,
            (writes.upserts.len() + writes.deletes.len()) as u64,
        );
        let null_keys = writes.null_keys;
        let send = sender(&self.uri, &self.statements, &mut self.client);
        match self.outbox.write(writes, records, bytes, send) {
            SinkStatus::Written { .. } if null_keys > 0 => SinkStatus::Failed(format!(
                "{null_keys} rows hold a NULL in the key, which PostgreSQL cannot key: they are not written (the others are)"
            )),
            status => status,
        }
    }

    fn retry(&mut self) -> Option<SinkStatus> {
        let send = sender(&self.uri, &self.statements, &mut self.client);
        self.outbox.retry(send)
    }

    fn flush(&mut self) {
        let send = sender(&self.uri, &self.statements, &mut self.client);
        if let Err(e) = self.outbox.send_all(send) {
            tracing::warn!(error = %e, "postgres_output: steps not written at shutdown; a recovery from the last checkpoint writes them");
        }
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        let send = sender(&self.uri, &self.statements, &mut self.client);
        self.outbox.send_all(send)?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_write_by_key() {
        let st = Statements::new(
            "public.Out",
            &["id".into(), "name".into()],
            &["id".into()],
            false,
        );
        assert_eq!(
            st.upsert,
            "INSERT INTO \"public\".\"Out\" (\"id\", \"name\") SELECT \"id\", \"name\" FROM json_populate_recordset(NULL::\"public\".\"Out\", $1::text::json) ON CONFLICT (\"id\") DO UPDATE SET \"name\" = EXCLUDED.\"name\""
        );
        assert!(
            st.delete.ends_with("AS d WHERE x.\"id\" = d.\"id\""),
            "{}",
            st.delete
        );
        let keep = Statements::new("t", &["id".into()], &["id".into()], false);
        assert!(keep.upsert.ends_with("ON CONFLICT (\"id\") DO NOTHING"));
    }
}
