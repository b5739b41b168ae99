//! `eddy-server`: Eddy as a service. One process runs many pipelines,
//! controlled over a REST API in the shape of Feldera's `/v0`
//! ([`api`]), each on its own worker thread ([`runner`]), fed by HTTP
//! requests and connectors declared in SQL ([`connector`]) and drained by
//! HTTP streams and output connectors. Definitions are kept in a data
//! directory across restarts ([`manager`]).

pub mod api;
pub mod bootstrap;
pub mod checked;
pub mod checkpoints;
pub mod connector;
pub mod console;
pub mod definition;
pub mod deploy;
pub mod descriptor;
pub mod error;
pub mod input;
pub mod journal;
pub mod limits;
pub mod logs;
pub mod manager;
pub mod pg;
pub mod query;
pub mod runner;
pub mod runtime_config;
pub mod stats;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use error::{ApiError, ApiResult};
pub use limits::Limits;

/// How a server is set up.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Where pipeline definitions are kept.
    pub data_dir: PathBuf,
    /// When set, every endpoint but `/healthz` requires this bearer key.
    pub api_key: Option<String>,
    /// What one client may ask of the server.
    pub limits: Limits,
    /// Folders outside the data directory that `file_input` and
    /// `file_output` connectors may use.
    pub file_dirs: Vec<PathBuf>,
    /// Where to serve PostgreSQL's wire protocol (off when `None`).
    pub pg_bind: Option<SocketAddr>,
}

/// Whether the server would listen beyond loopback without an API key
/// (it warns at start).
pub fn exposed_without_key(config: &ServerConfig) -> bool {
    config.api_key.is_none() && !config.bind.ip().is_loopback()
}

/// Errors starting a server.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The data directory could not be opened.
    #[error("data directory '{0}': {1}")]
    DataDir(PathBuf, std::io::Error),
    /// The address could not be bound.
    #[error("binding {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
    /// The server failed.
    #[error("server: {0}")]
    Serve(std::io::Error),
}

/// Runs the server until `shutdown` resolves; then stops accepting
/// requests, stops every pipeline (each finishes its current step and
/// flushes its outputs) and returns. `ready` receives the bound address.
pub async fn serve(
    config: ServerConfig,
    ready: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let files = connector::FileAccess::new(&config.data_dir, &config.file_dirs)
        .map_err(|e| ServeError::DataDir(config.data_dir.clone(), e))?;
    let manager = manager::Manager::open(&config.data_dir, config.limits.clone(), files)
        .map_err(|e| ServeError::DataDir(config.data_dir.clone(), e))?;
    // Pipelines that were running when the server last stopped (or
    // crashed) start again, each from its latest checkpoint, before the
    // server reports that it is ready.
    let recovering = Arc::clone(&manager);
    tokio::task::spawn_blocking(move || recovering.recover())
        .await
        .map_err(|e| ServeError::Serve(std::io::Error::other(e.to_string())))?;
    let state = api::AppState::new(manager, config.api_key.clone());
    if exposed_without_key(&config) {
        tracing::warn!(
            bind = %config.bind,
            "listening on a non-loopback address without an API key: anyone who can reach \
             this address controls every pipeline; set --api-key or EDDY_API_KEY"
        );
    }
    if let Some(pg_bind) = config.pg_bind {
        if config.api_key.is_none() && !pg_bind.ip().is_loopback() {
            tracing::warn!(
                bind = %pg_bind,
                "serving PostgreSQL on a non-loopback address without an API key: anyone who \
                 can reach it reads and changes every pipeline's tables; set --api-key"
            );
        }
    }
    let listener = tokio::net::TcpListener::bind(config.bind)
        .await
        .map_err(|e| ServeError::Bind(config.bind, e))?;
    let addr = listener.local_addr().map_err(ServeError::Serve)?;
    tracing::info!(%addr, data_dir = %config.data_dir.display(), auth = config.api_key.is_some(), "eddy server listening");
    let pg = match config.pg_bind {
        Some(pg_bind) => {
            let pg_listener = tokio::net::TcpListener::bind(pg_bind)
                .await
                .map_err(|e| ServeError::Bind(pg_bind, e))?;
            let pg_addr = pg_listener.local_addr().map_err(ServeError::Serve)?;
            tracing::info!(addr = %pg_addr, "PostgreSQL wire protocol listening");
            Some(tokio::spawn(pg::serve(
                pg_listener,
                Arc::clone(&state.manager),
                config.api_key.clone(),
            )))
        }
        None => None,
    };
    ready(addr);
    let app = api::router(Arc::clone(&state));
    let stopper = Arc::clone(&state);
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            tracing::info!("shutting down: stopping pipelines");
            // Stopping the pipelines ends their egress streams, so that
            // open connections can drain.
            stopper.manager.shutdown().await;
        })
        .await
        .map_err(ServeError::Serve)?;
    if let Some(pg) = pg {
        pg.abort();
    }
    tracing::info!("server stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listening_beyond_loopback_without_a_key_is_flagged() {
        let config = |bind: &str, key: Option<&str>| ServerConfig {
            bind: bind.parse().unwrap(),
            data_dir: PathBuf::from("."),
            api_key: key.map(str::to_string),
            limits: Limits::default(),
            file_dirs: Vec::new(),
            pg_bind: None,
        };
        assert!(exposed_without_key(&config("0.0.0.0:8080", None)));
        assert!(exposed_without_key(&config("[::]:8080", None)));
        assert!(exposed_without_key(&config("10.1.2.3:8080", None)));
        assert!(!exposed_without_key(&config("0.0.0.0:8080", Some("k"))));
        assert!(!exposed_without_key(&config("127.0.0.1:8080", None)));
        assert!(!exposed_without_key(&config("[::1]:8080", None)));
    }
}
