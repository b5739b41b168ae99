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
pub mod tls;

use std::sync::Arc;

use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::blocking::{block_on, spawn};
use super::FileAccess;
use tls::TlsSettings;

/// A SQL identifier, quoted.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A table name as SQL: `schema.table` parts quoted each.
pub fn table_sql(name: &str) -> String {
    name.split('.').map(quoted).collect::<Vec<_>>().join(".")
}

/// A connector's server: its connection string and its TLS, read once.
#[derive(Clone)]
pub struct Server {
    config: tokio_postgres::Config,
    tls: Option<MakeRustlsConnect>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("tls", &self.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Reads `uri` (a `postgres://` URL or `key=value` settings) and the
    /// TLS settings, reading the files they name.
    pub fn new(uri: &str, tls: &TlsSettings, files: &FileAccess) -> Result<Self, String> {
        let mut config = Self::check(uri, tls, files)?;
        let tls = tls.connector(files)?;
        // With TLS, never plain text: `prefer` (the default) would fall
        // back to it when the server declines.
        if tls.is_some() && config.get_ssl_mode() == SslMode::Prefer {
            config.ssl_mode(SslMode::Require);
        }
        Ok(Self { config, tls })
    }

    /// The same, giving up connecting after 10 seconds unless the URI says
    /// otherwise (for work nobody waits on, such as releasing a slot).
    pub fn with_timeout(mut self) -> Self {
        if self.config.get_connect_timeout().is_none() {
            self.config
                .connect_timeout(std::time::Duration::from_secs(10));
        }
        self
    }

    /// Checks `uri` and the TLS settings without reading files.
    pub fn check(
        uri: &str,
        tls: &TlsSettings,
        files: &FileAccess,
    ) -> Result<tokio_postgres::Config, String> {
        let config: tokio_postgres::Config = uri.parse().map_err(|e| format!("'uri': {e}"))?;
        tls.check(files)?;
        Ok(config)
    }
}

/// Connects, running the connection on the connectors' runtime.
pub fn connect(server: &Server) -> Result<Arc<tokio_postgres::Client>, String> {
    let config = server.config.clone();
    let fail = |e: tokio_postgres::Error| format!("connecting to PostgreSQL: {}", pg_error(&e));
    let client = match server.tls.clone() {
        None => {
            let (client, connection) =
                block_on(async move { config.connect(tokio_postgres::NoTls).await })
                    .map_err(fail)?;
            run(connection);
            client
        }
        Some(tls) => {
            let (client, connection) =
                block_on(async move { config.connect(tls).await }).map_err(fail)?;
            run(connection);
            client
        }
    };
    Ok(Arc::new(client))
}

/// Runs a connection until it ends.
fn run<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "a PostgreSQL connection ended");
        }
    });
}

/// An error as PostgreSQL said it: the server's message (and its detail
/// and hint) with its SQLSTATE, where `tokio_postgres` alone would say only
/// "db error"; any other error with its causes (a TLS handshake's says
/// which certificate check failed).
pub fn pg_error(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        let mut out = e.to_string();
        let mut cause = std::error::Error::source(e);
        while let Some(c) = cause {
            let text = c.to_string();
            if !out.contains(&text) {
                out.push_str(&format!(": {text}"));
            }
            cause = c.source();
        }
        return out;
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
