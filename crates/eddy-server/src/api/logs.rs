//! The API's side of logging: each request logged when answered, and a
//! pipeline's log streamed (`GET /v0/pipelines/{name}/logs`, Feldera's).

use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderValue, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::sync::broadcast::error::RecvError;
use tracing::{Instrument, Span};

use super::{PipelinePath, St};
use crate::error::{ApiError, ApiResult};

/// The pipeline a request's path names (`/v0/pipelines/{name}/…`).
fn pipeline_of(path: &str) -> Option<&str> {
    let mut parts = path.split('/').skip(1);
    match (parts.next(), parts.next(), parts.next()) {
        (Some("v0"), Some("pipelines"), Some(name)) if !name.is_empty() => Some(name),
        _ => None,
    }
}

/// Logs each request when it is answered: method, path, status and time
/// to the answer's head. Requests that change something and those that
/// fail are logged at info; successful reads, polls and ingress (which
/// can come thousands a second) at debug. A request naming a pipeline is
/// in that pipeline's log too.
pub async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let started = Instant::now();
    // What the handler logs (rows it rejected) is the pipeline's too.
    let span = match pipeline_of(&path) {
        Some(p) => tracing::info_span!("request", pipeline = %p),
        None => Span::none(),
    };
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    let millis = started.elapsed().as_millis() as u64;
    let routine = status < 400 && (method == Method::GET || path.contains("/ingress/"));
    // A request without the key is not the pipeline's: it goes to the
    // server's log only (no handler ran, so nothing else was logged in
    // the span).
    let span = if status == 401 { Span::none() } else { span };
    span.in_scope(|| match routine {
        false => tracing::info!(%method, %path, status, millis, "request"),
        true => tracing::debug!(%method, %path, status, millis, "request"),
    });
    response
}

/// Stream a pipeline's log.
///
/// The pipeline's log lines kept so far (the last 2,000: requests that
/// name it, program checks, starts and stops, checkpoints, its
/// connectors' errors and rejected rows), then each new one as it is
/// written, one per line, as the server's text log writes them. The
/// stream ends when the pipeline is deleted.
#[utoipa::path(get, path = "/v0/pipelines/{name}/logs", tag = "Pipelines", params(PipelinePath),
    responses((status = 200, description = "The log, then its new lines as they come (it does not end while the pipeline exists).", body = String, content_type = "text/plain")))]
pub(super) async fn logs(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.get(&name, true)?;
    let (kept, rx) = crate::logs::follow(&name).ok_or_else(|| ApiError::unknown_pipeline(&name))?;
    let line = |l: String| Ok::<_, std::convert::Infallible>(Bytes::from(l + "\n"));
    let head = futures::stream::iter(kept.into_iter().map(line));
    let tail = futures::stream::unfold(rx, move |mut rx| async move {
        let text = match rx.recv().await {
            Ok(l) => l,
            Err(RecvError::Lagged(n)) => {
                format!("… {n} lines not sent: this reader fell behind")
            }
            Err(RecvError::Closed) => return None,
        };
        Some((line(text), rx))
    });
    let mut response = Body::from_stream(head.chain(tail)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_their_pipeline() {
        assert_eq!(pipeline_of("/v0/pipelines/p/start"), Some("p"));
        assert_eq!(pipeline_of("/v0/pipelines/p"), Some("p"));
        assert_eq!(pipeline_of("/v0/pipelines"), None);
        assert_eq!(pipeline_of("/v0/pipelines/"), None);
        assert_eq!(pipeline_of("/healthz"), None);
    }
}
