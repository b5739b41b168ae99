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
//!
//! In `cdc` mode the table is an append-only change log instead: every
//! change is an `INSERT` of the row with an operation column (`i`, `d`, or
//! `u` for a key both deleted and inserted in a step, when the connector
//! names an index) and a time column (microseconds since 1970, rising with
//! every step). The log is exactly once as well: a checkpoint records the
//! last time written, and a pipeline resumed from it first deletes the log
//! rows written after it, which the steps it replays write again (so the
//! log table must be the connector's own: rows others write there after
//! the checkpoint's time would go too).

use std::path::Path;
use std::sync::Arc;

use eddy_dbsp::ZSet;
use serde::Deserialize;
use serde_json::Value;

use super::tls::TlsSettings;
use super::{connect, pg_error, quoted, table_sql, Server};
use crate::connector::blocking::block_on;
use crate::connector::changelog::{self, Op};
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
    /// `materialized` (the default) or `cdc`.
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
    // TLS (see [`TlsSettings`]).
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
            Some("cdc") => {}
            Some(other) => return Err(format!("unknown mode '{other}' (materialized, cdc)")),
        }
        Server::check(&self.uri, &self.tls(), cx.files)?;
        if self.table.is_empty() {
            return Err("'table' is empty".into());
        }
        let cdc = self.mode.as_deref() == Some("cdc");
        if !cdc && (self.cdc_op_column.is_some() || self.cdc_ts_column.is_some()) {
            return Err("the cdc columns go with mode 'cdc'".into());
        }
        if cdc {
            let (op, ts) = self.cdc_columns();
            if op == ts {
                return Err(format!(
                    "'cdc_op_column' and 'cdc_ts_column' are both '{op}'"
                ));
            }
            if let Some(c) = [op, ts].into_iter().find(|c| cx.columns.find(c).is_some()) {
                return Err(format!(
                    "the view has a column '{c}', which mode 'cdc' writes its metadata in"
                ));
            }
            return Ok(());
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
        let columns: Vec<String> = cx.columns.iter().map(|f| f.name().clone()).collect();
        let key = match &spec.index {
            Some(index) => Some(key_places(&columns, &index.columns)?),
            None => None,
        };
        let (statements, log) = if self.mode.as_deref() == Some("cdc") {
            let (op, ts) = self.cdc_columns();
            // Resumed exactly once: the log rows of the steps after the
            // checkpoint go, the replayed steps write them again.
            let resumed = cx
                .resume
                .filter(|_| cx.exactly_once)
                .and_then(|(_, p)| p.get("ts").and_then(Value::as_i64));
            let log = Log {
                op: op.to_string(),
                ts: ts.to_string(),
                // Times rise from now on: a checkpoint before the first
                // write records a time after every row written before.
                last_ts: resumed.unwrap_or(0).max(now_micros()),
                cleanup: resumed,
            };
            (Statements::log(&self.table, &columns, op, ts), Some(log))
        } else {
            let index = spec.index.as_ref().ok_or("no index")?;
            let statements = Statements::new(
                &self.table,
                &columns,
                &index.columns,
                self.on_conflict_do_nothing,
            );
            (statements, None)
        };
        let server = Server::new(&self.uri, &self.tls(), cx.files)?;
        Ok(Box::new(PostgresSink {
            client: Some(connect(&server)?),
            server,
            statements,
            key,
            log,
            outbox: Outbox::default(),
        }))
    }
}

impl PostgresOutput {
    /// The TLS settings given.
    fn tls(&self) -> TlsSettings {
        TlsSettings {
            ca_pem: self.ssl_ca_pem.clone(),
            ca_location: self.ssl_ca_location.clone(),
            client_pem: self.ssl_client_pem.clone(),
            client_location: self.ssl_client_location.clone(),
            client_key: self.ssl_client_key.clone(),
            client_key_location: self.ssl_client_key_location.clone(),
            chain_location: self.ssl_certificate_chain_location.clone(),
            verify_hostname: self.verify_hostname,
        }
    }

    /// The columns of `cdc` mode's operation and time.
    fn cdc_columns(&self) -> (&str, &str) {
        (
            self.cdc_op_column.as_deref().unwrap_or("__feldera_op"),
            self.cdc_ts_column.as_deref().unwrap_or("__feldera_ts"),
        )
    }
}

/// The places of a key's columns among the view's.
fn key_places(columns: &[String], key: &[String]) -> Result<Vec<usize>, String> {
    key.iter()
        .map(|k| {
            columns
                .iter()
                .position(|c| c == k)
                .ok_or(format!("no column '{k}'"))
        })
        .collect()
}

/// The statements of a table written by key: rows travel as a JSON array.
#[derive(Debug, Clone)]
struct Statements {
    upsert: String,
    delete: String,
}

impl Statements {
    /// A change log's: rows appended with their operation and time; the
    /// delete takes the rows after a time (`$1`).
    fn log(table: &str, columns: &[String], op: &str, ts: &str) -> Self {
        let t = table_sql(table);
        let cols: Vec<String> = columns
            .iter()
            .map(|c| c.as_str())
            .chain([op, ts])
            .map(quoted)
            .collect();
        Self {
            upsert: format!(
                "INSERT INTO {t} ({cols}) SELECT {cols} FROM json_populate_recordset(NULL::{t}, $1::text::json)",
                cols = cols.join(", ")
            ),
            delete: format!("DELETE FROM {t} WHERE {} > $1::text::bigint", quoted(ts)),
        }
    }
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
    /// Why rows were left out (a NULL in the key, a key that is not
    /// unique), to report once the others are written.
    left_out: Option<String>,
    /// The rows to insert (upsert), as a JSON array.
    upserts: String,
    /// The delete's argument: the rows to delete as a JSON array, or a
    /// change log's time to delete after (`None`: no delete).
    deletes: Option<String>,
    records: u64,
}

/// A view kept in a PostgreSQL table, by key or as a change log.
struct PostgresSink {
    server: Server,
    client: Option<Arc<tokio_postgres::Client>>,
    statements: Statements,
    /// The key's columns, by position (always, but in `cdc` mode without
    /// an index).
    key: Option<Vec<usize>>,
    /// `cdc` mode's log.
    log: Option<Log>,
    /// Steps not written yet.
    outbox: Outbox<Writes>,
}

/// A change log's columns and times.
struct Log {
    /// The operation's and the time's columns.
    op: String,
    ts: String,
    /// The time of the last step written.
    last_ts: i64,
    /// Resumed: the checkpoint's time, after which the log is cut back
    /// before the first step is written.
    cleanup: Option<i64>,
}

impl PostgresSink {
    /// A step's change as writes ([`changelog::entries`]): by key, a key
    /// inserted or updated is upserted with its row, a key only deleted is
    /// deleted; as a log, every entry is a row with its operation and the
    /// step's time.
    fn writes(&mut self, changes: &ZSet) -> Result<Writes, String> {
        let rows = eddy_io::json::encode_rows(changes.batch())?;
        let entries = changelog::entries(changes, self.key.as_deref())?;
        let duplicates = entries.duplicates_error();
        let entries = entries.entries;
        if let Some(log) = &mut self.log {
            log.last_ts = now_micros().max(log.last_ts + 1);
            let out: Vec<Value> = entries
                .into_iter()
                .map(|(i, op)| {
                    let mut row = rows[i].clone();
                    if let Value::Object(m) = &mut row {
                        m.insert(log.op.clone(), Value::from(op.letter()));
                        m.insert(log.ts.clone(), Value::from(log.last_ts));
                    }
                    row
                })
                .collect();
            return Ok(Writes {
                left_out: duplicates,
                records: out.len() as u64,
                upserts: serde_json::to_string(&out).map_err(|e| e.to_string())?,
                deletes: log.cleanup.take().map(|t| t.to_string()),
            });
        }
        // A key of PostgreSQL's cannot hold NULL: such rows are counted,
        // not written.
        let key = self.key.as_deref().ok_or("writes by key without a key")?;
        let batch = changes.batch();
        let null_key = |i: usize| key.iter().any(|&k| batch.column(k).is_null(i));
        let null_keys = (0..batch.num_rows()).filter(|&i| null_key(i)).count();
        let (mut upserts, mut deletes) = (Vec::new(), Vec::new());
        for (i, op) in entries {
            if null_key(i) {
                continue;
            }
            match op {
                Op::Insert | Op::Update => upserts.push(&rows[i]),
                Op::Delete => deletes.push(&rows[i]),
            }
        }
        let null_keys = (null_keys > 0).then(|| format!(
            "{null_keys} rows hold a NULL in the key, which PostgreSQL cannot key: they are not written (the others are)"
        ));
        let left_out = match (null_keys, duplicates) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        Ok(Writes {
            left_out,
            records: (upserts.len() + deletes.len()) as u64,
            upserts: serde_json::to_string(&upserts).map_err(|e| e.to_string())?,
            deletes: match deletes.is_empty() {
                true => None,
                false => Some(serde_json::to_string(&deletes).map_err(|e| e.to_string())?),
            },
        })
    }
}

/// Writes one step in one transaction, making a broken connection again.
fn sender<'a>(
    server: &'a Server,
    statements: &'a Statements,
    client: &'a mut Option<Arc<tokio_postgres::Client>>,
) -> impl FnMut(&Writes) -> Result<(), String> + 'a {
    move |w| {
        let c = match client.as_ref().filter(|c| !c.is_closed()) {
            Some(c) => Arc::clone(c),
            None => {
                let c = connect(server)?;
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

/// One step in one transaction: deletes, then upserts.
async fn transact(
    client: &tokio_postgres::Client,
    st: &Statements,
    w: &Writes,
) -> Result<(), tokio_postgres::Error> {
    client.batch_execute("BEGIN").await?;
    let result = async {
        if let Some(d) = &w.deletes {
            client.execute(st.delete.as_str(), &[d]).await?;
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
            (writes.upserts.len() + writes.deletes.as_ref().map_or(0, String::len)) as u64,
        );
        let left_out = writes.left_out.clone();
        let send = sender(&self.server, &self.statements, &mut self.client);
        match (self.outbox.write(writes, records, bytes, send), left_out) {
            (SinkStatus::Written { .. }, Some(e)) => SinkStatus::Failed(e),
            (status, _) => status,
        }
    }

    fn retry(&mut self) -> Option<SinkStatus> {
        let send = sender(&self.server, &self.statements, &mut self.client);
        self.outbox.retry(send)
    }

    fn flush(&mut self) {
        let send = sender(&self.server, &self.statements, &mut self.client);
        if let Err(e) = self.outbox.send_all(send) {
            tracing::warn!(error = %e, "postgres_output: steps not written at shutdown; a recovery from the last checkpoint writes them");
        }
    }

    fn checkpoint(&mut self, _spool: &Path) -> Result<Option<Value>, String> {
        let send = sender(&self.server, &self.statements, &mut self.client);
        self.outbox.send_all(send)?;
        Ok(self
            .log
            .as_ref()
            .map(|l| serde_json::json!({ "ts": l.last_ts })))
    }
}

/// Microseconds since 1970.
fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
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
