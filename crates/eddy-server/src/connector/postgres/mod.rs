//! PostgreSQL: a view kept in a table by key or as a change log
//! ([`output`]), a table fed by a snapshot and then logical replication
//! ([`cdc`]) or once by a query ([`query`]). What they
//! share: the connection, run on the connectors' runtime, and errors and
//! names as PostgreSQL writes them.

pub mod cdc;
pub mod output;
pub mod pgoutput;
pub mod query;
pub mod rows;
pub mod text;

use std::sync::Arc;

use super::blocking::{block_on, spawn};

/// A SQL identifier, quoted.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A table name as SQL: `schema.table` parts quoted each.
pub fn table_sql(name: &str) -> String {
    name.split('.').map(quoted).collect::<Vec<_>>().join(".")
}

/// Refuses TLS settings (`given`: whether each of a connector's `ssl_*`
/// settings and `verify_hostname` is there): not supported yet.
pub fn refuse_tls(given: &[bool]) -> Result<(), String> {
    if given.iter().any(|g| *g) {
        return Err("TLS to PostgreSQL is not supported yet".into());
    }
    Ok(())
}

/// Connects, running the connection on the connectors' runtime.
pub fn connect(uri: &str) -> Result<Arc<tokio_postgres::Client>, String> {
    let uri = uri.to_string();
    let (client, connection) =
        block_on(async move { tokio_postgres::connect(&uri, tokio_postgres::NoTls).await })
            .map_err(|e| format!("connecting to PostgreSQL: {}", pg_error(&e)))?;
    spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a PostgreSQL connection ended");
        }
    });
    Ok(Arc::new(client))
}

/// An error as PostgreSQL said it: the server's message (and its detail
/// and hint) with its SQLSTATE, where `tokio_postgres` alone would say only
/// "db error".
pub fn pg_error(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return e.to_string();
    };
    let mut out = format!("{} (SQLSTATE {})", db.message(), db.code().code());
    if let Some(d) = db.detail() {
        out.push_str(&format!("; {d}"));
    }
    if let Some(h) = db.hint() {
        out.push_str(&format!("; hint: {h}"));
    }
    out
}

impl From<tokio_postgres::Error> for super::rounds::Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Retry(pg_error(&e))
    }
}
