//! Asynchronous clients (object storage, PostgreSQL) from the synchronous
//! places connectors run in: an input's own thread, the step worker, a
//! blocking task of the server's runtime. Their calls run on one small
//! runtime kept for the whole process, and the caller waits on a channel,
//! so no caller ever enters (or drops) a runtime of its own.

use std::future::Future;
use std::sync::OnceLock;

/// The runtime the connectors' asynchronous clients run on.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("eddy-connector-io")
            .enable_all()
            .build()
            .expect("a runtime for the connectors' clients")
    })
}

/// Runs `f` on the connectors' runtime and waits for it, from any
/// thread (it never enters a runtime of the caller's).
pub fn block_on<F>(f: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    runtime().spawn(async move {
        let _ = tx.send(f.await);
    });
    rx.recv()
        .expect("the connectors' runtime runs every task it is given")
}

/// Runs `f` on the connectors' runtime in the background (a client's
/// connection task).
pub fn spawn<F>(f: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    runtime().spawn(f);
}
