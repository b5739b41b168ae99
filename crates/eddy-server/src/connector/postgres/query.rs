//! `postgres_input`: a table fed once with the rows of a PostgreSQL query,
//! as Feldera's connector (`uri`, `query`). Columns are matched to the
//! table's by name (rename them in the query: `age AS the_age`), values
//! read from their text as `postgres_cdc_input` reads them.
//!
//! The query runs in a `REPEATABLE READ` transaction through a cursor, a
//! piece of rows at a time; its rows enter the state whole (checkpoints
//! wait while they are read), so a checkpoint holds all of them or none,
//! and a pipeline resumed from one that holds them does not run the query
//! again: exactly once, where Feldera's connector has no fault tolerance.
//! A server or query that fails before any row is fed is an error in the
//! connector's status, tried again with backoff.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use super::rows::{simple, Target, SESSION};
use super::tls::TlsSettings;
use super::{connect, Server};
use crate::connector::blocking::block_on;
use crate::connector::rounds::{self, Failure, Round, Rounds};
use crate::connector::{position, CheckContext, ConnectorSpec, InputContext, InputRun, Transport};

/// How long to wait before trying a failed query again, at least.
const POLL: Duration = Duration::from_secs(1);

/// `postgres_input`'s configuration (Feldera's).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresInput {
    /// A connection URL.
    uri: String,
    /// A `SELECT` whose rows are inserted.
    query: String,
    // TLS (see [`TlsSettings`]).
    ssl_ca_pem: Option<String>,
    ssl_ca_location: Option<String>,
    ssl_client_pem: Option<String>,
    ssl_client_location: Option<String>,
    ssl_client_key: Option<String>,
    ssl_client_key_location: Option<String>,
    ssl_certificate_chain_location: Option<String>,
    verify_hostname: Option<bool>,
}

impl PostgresInput {
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

    /// The query without the semicolons and blanks that may end it.
    fn select(&self) -> &str {
        self.query
            .trim_end_matches(|c: char| c == ';' || c.is_whitespace())
    }
}

impl Transport for PostgresInput {
    fn check(&self, _spec: &ConnectorSpec, cx: &CheckContext<'_>) -> Result<(), String> {
        Server::check(&self.uri, &self.tls(), cx.files)?;
        if self.select().trim().is_empty() {
            return Err("'query' is empty".into());
        }
        Ok(())
    }

    fn start_input(
        &self,
        spec: &ConnectorSpec,
        cx: InputContext<'_>,
    ) -> Result<Option<InputRun>, String> {
        let at: QueryPosition = position(cx.position)?;
        let target = Target::new(spec, cx.feeder, cx.stats, "the query")?;
        let server = Server::new(&self.uri, &self.tls(), cx.files)?;
        let mut input = QueryInput {
            server,
            config: self.clone(),
            target,
            done: at.done,
        };
        Ok(Some(Box::new(move || {
            let (feeder, stats) = (
                Arc::clone(&input.target.feeder),
                Arc::clone(&input.target.stats),
            );
            rounds::run(&mut input, &feeder, &stats, "postgres_input", POLL);
        })))
    }
}

/// Whether the state holds the query's rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueryPosition {
    #[serde(default)]
    done: bool,
}

/// A running connector.
struct QueryInput {
    server: Server,
    config: PostgresInput,
    target: Target,
    done: bool,
}

impl Rounds for QueryInput {
    fn round(&mut self) -> Result<Round, Failure> {
        if self.done {
            return Ok(Round::Ended);
        }
        let client = connect(&self.server).map_err(Failure::Retry)?;
        simple(&client, SESSION)?;
        // Prepared first: its columns' names and types, and a statement
        // that is one query (a prepared statement cannot hold two).
        let (c, query) = (Arc::clone(&client), self.config.select().to_string());
        let columns: Vec<(String, u32)> = block_on(async move {
            let statement = c.prepare(&query).await?;
            Ok::<_, tokio_postgres::Error>(
                statement
                    .columns()
                    .iter()
                    .map(|col| (col.name().to_string(), col.type_().oid()))
                    .collect(),
            )
        })?;
        self.target
            .match_columns(&columns)
            .map_err(Failure::Retry)?;
        let fed = read(&client, &self.target, self.config.select());
        if fed? {
            self.done = true;
            return Ok(Round::Ended);
        }
        Ok(Round::Stopped)
    }
}

/// Reads the query's rows through a cursor in a snapshot of the database.
fn read(client: &Arc<Client>, target: &Target, query: &str) -> Result<bool, Failure> {
    simple(client, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
    let read = simple(
        client,
        &format!("DECLARE eddy_query NO SCROLL CURSOR FOR {query}"),
    )
    .and_then(|_| {
        let position = serde_json::to_value(QueryPosition { done: true }).expect("a position");
        target.read_cursor(client, "eddy_query", "the query", position)
    });
    let _ = simple(client, "ROLLBACK");
    read
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_ends_at_its_last_clause() {
        let c: PostgresInput = serde_json::from_value(serde_json::json!({
            "uri": "postgres://u@h/db", "query": "select 1 ;\n; "
        }))
        .unwrap();
        assert_eq!(c.select(), "select 1");
    }
}
