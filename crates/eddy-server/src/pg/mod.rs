//! The PostgreSQL door: `eddy serve --pg-bind ADDR` speaks PostgreSQL's
//! wire protocol (through the `pgwire` crate), so `psql`, drivers and BI
//! tools query a running pipeline.
//!
//! ```text
//! client ─► login (user eddy, the API key as password, database = pipeline)
//!        ─► statement::parse ─┬─ query ──► query::run_request (checked, read-only,
//!                             │            over the pipeline's snapshot + catalog)
//!                             ├─ INSERT/DELETE ─► dml: rows ─► Feeder (as /ingress)
//!                             └─ BEGIN/COMMIT/ROLLBACK/SET/SHOW: the session's
//! ```
//!
//! Every statement runs through the same guard as `/query`; a bad one gets
//! an error response with a SQLSTATE and the connection stays usable. TLS is
//! not offered (clients fall back to plain connections).

pub mod auth;
pub mod catalog;
pub mod dml;
pub mod encode;
pub mod error;
mod functions;
pub mod handler;
pub mod statement;

use std::sync::Arc;

use pgwire::api::auth::StartupHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::PgWireServerHandlers;
use tokio::net::TcpListener;

use crate::manager::Manager;

/// Most connections served at once; more wait in the listen queue.
const MAX_CONNECTIONS: usize = 256;

/// The handlers of every connection.
struct Handlers {
    handler: Arc<handler::Handler>,
    startup: Arc<auth::Login>,
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.handler)
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.handler)
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::clone(&self.startup)
    }
}

/// Serves PostgreSQL connections on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, manager: Arc<Manager>, api_key: Option<String>) {
    let handlers = Arc::new(Handlers {
        handler: Arc::new(handler::Handler::new(Arc::clone(&manager))),
        startup: Arc::new(auth::Login::new(manager, api_key)),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let (socket, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "accepting a PostgreSQL connection");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let handlers = Arc::clone(&handlers);
        tokio::spawn(async move {
            if let Err(e) = pgwire::tokio::process_socket(socket, None, handlers).await {
                tracing::debug!(%peer, error = %e, "PostgreSQL connection ended");
            }
            drop(permit);
        });
    }
}
