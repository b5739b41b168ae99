//! The REST API, in the shape of Feldera's `/v0`: pipelines (define, start,
//! pause, stop, delete), HTTP ingress and egress, completion tokens, ad-hoc
//! queries, stats and metrics, and its own OpenAPI description. Every
//! endpoint but `/healthz`, `/v0/api-doc/openapi.json` and the console
//! (`/`, `/console/…`: see [`crate::console`]) requires
//! `Authorization: Bearer <key>` when the server has an API key. A panic in
//! a handler is answered with a 500 and logged; it never ends the process.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use futures::{FutureExt, StreamExt};
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, Semaphore};

mod circuit;
mod doc;
mod egress;
mod ingress;
mod logs;

use circuit::*;
use egress::*;
use ingress::*;
use logs::*;

use serde::Serialize;
use utoipa::{IntoParams, OpenApi, ToSchema};

use crate::checkpoints::CheckpointStatus;
use crate::descriptor::{Deployment, PipelineDescriptor};
use crate::error::{panic_message, ApiError, ApiResult, ErrorBody};
use crate::input::{parse_piece, Chunker, MAX_LINE_BYTES};
use crate::manager::{BootstrapPolicy, Manager, PipelineUpdate, Recover};
use crate::query::{self, EncodeError, QueryError, QueryFormat};
use crate::runner::{self, Claim, Origin, Output, Sink, SinkStatus};
use crate::stats::{pipeline_label, Exposition, StatsReport};
use eddy_io::format::FormatConfig;

/// Program checks that run at once; more wait (checking is CPU-bound, and a
/// hostile program may need a deep stack while its tree is dropped).
const CONCURRENT_CHECKS: usize = 4;

/// What the handlers share.
pub struct AppState {
    /// The pipelines.
    pub manager: Arc<Manager>,
    /// The API key, if any.
    pub api_key: Option<String>,
    egress_ids: AtomicU64,
    checks: Semaphore,
    /// When the server started (for its uptime).
    started: std::time::Instant,
}

impl AppState {
    /// Shared state over `manager`.
    pub fn new(manager: Arc<Manager>, api_key: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            manager,
            api_key,
            egress_ids: AtomicU64::new(0),
            checks: Semaphore::new(CONCURRENT_CHECKS),
            started: std::time::Instant::now(),
        })
    }
}

type St = State<Arc<AppState>>;

/// The router of the whole API.
pub fn router(state: Arc<AppState>) -> Router {
    let v0 = Router::new()
        .route("/config", get(config))
        .route("/pipelines", get(list).post(create))
        .route(
            "/pipelines/{name}",
            get(describe).put(put).patch(patch).delete(delete),
        )
        .route("/pipelines/{name}/start", post(start))
        .route("/pipelines/{name}/pause", post(pause))
        .route("/pipelines/{name}/approve", post(approve))
        .route("/pipelines/{name}/resume", post(resume))
        .route("/pipelines/{name}/stop", post(stop))
        .route("/pipelines/{name}/clear", post(clear))
        .route("/pipelines/{name}/checkpoint", post(checkpoint))
        .route(
            "/pipelines/{name}/checkpoint_status",
            get(checkpoint_status),
        )
        .route("/pipelines/{name}/dismiss_error", post(dismiss_error))
        .route("/pipelines/{name}/stats", get(stats))
        .route("/pipelines/{name}/metrics", get(metrics))
        .route("/pipelines/{name}/circuit", get(circuit))
        .route("/metrics", get(all_metrics))
        .route("/pipelines/{name}/ingress/{table}", post(ingress))
        .route("/pipelines/{name}/egress/{view}", post(egress))
        .route(
            "/pipelines/{name}/completion_status",
            get(completion_status),
        )
        .route("/pipelines/{name}/query", get(adhoc_query))
        .route("/pipelines/{name}/logs", get(logs))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), auth))
        // The API's description is public, like /healthz.
        .route("/api-doc/openapi.json", get(openapi));
    Router::new()
        .route("/healthz", get(healthz))
        .nest("/v0", v0)
        .merge(crate::console::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "NotFound", "no such endpoint") })
        .layer(middleware::from_fn(catch_panic))
        .layer(middleware::from_fn(log_request))
        .with_state(state)
}

/// Turns a panic in a handler into a 500 answer and a log line: one
/// request's bug must not take the server (and every pipeline) down.
pub async fn catch_panic(request: Request, next: Next) -> Response {
    let what = format!("{} {}", request.method(), request.uri().path());
    match AssertUnwindSafe(next.run(request)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            tracing::error!(request = %what, panic = %message, "a request handler panicked");
            ApiError::internal(format!("the server failed on this request: {message}"))
                .into_response()
        }
    }
}

/// The server is up.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `healthy`.
    status: &'static str,
}

/// Health check.
///
/// Never needs the API key.
#[utoipa::path(get, path = "/healthz", tag = "Health", security(()),
    responses((status = 200, description = "The server is up.", body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health { status: "healthy" })
}

/// This OpenAPI document.
///
/// Never needs the API key.
#[utoipa::path(get, path = "/v0/api-doc/openapi.json", tag = "Configuration",
    responses((status = 200, description = "The document.", body = Object)))]
async fn openapi() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let doc = DOC.get_or_init(|| {
        doc::ApiDoc::openapi()
            .to_json()
            .expect("the description is JSON")
    });
    ([(header::CONTENT_TYPE, "application/json")], doc.clone()).into_response()
}

/// Compares in time independent of where the strings differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn auth(State(state): St, request: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if !given.is_some_and(|g| same(g.trim().as_bytes(), key.as_bytes())) {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "missing or wrong API key: send 'Authorization: Bearer <key>'",
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// Edition and version, in the shape of Feldera's `/v0/config`.
#[derive(Serialize, ToSchema)]
pub struct Config {
    edition: &'static str,
    version: &'static str,
    revision: &'static str,
    runtime_revision: &'static str,
    changelog_url: &'static str,
    telemetry: &'static str,
}

/// Server configuration.
///
/// Edition and version, in the shape of Feldera's `/v0/config`.
#[utoipa::path(get, path = "/v0/config", tag = "Configuration",
    responses((status = 200, description = "Edition and version.", body = Config)))]
async fn config() -> Json<Config> {
    Json(Config {
        edition: "Open source",
        version: env!("CARGO_PKG_VERSION"),
        revision: "",
        runtime_revision: "",
        changelog_url: "",
        telemetry: "",
    })
}

/// Which fields of a descriptor to answer.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Selector {
    /// `all` (the default): the whole descriptor; `status`: without
    /// `program_code`, `udf_rust`, `udf_toml`, `program_config`,
    /// `runtime_config` and `program_info`. Anything else is a 400.
    #[param(inline, value_type = Option<SelectorValue>)]
    selector: Option<String>,
}

/// `selector`'s values.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase")]
enum SelectorValue {
    All,
    Status,
}

impl Selector {
    fn status_only(&self) -> ApiResult<bool> {
        match self.selector.as_deref() {
            None | Some("all") => Ok(false),
            Some("status") => Ok(true),
            Some(other) => Err(ApiError::bad_request(format!(
                "unknown selector '{other}' (all, status)"
            ))),
        }
    }
}

/// List pipelines.
///
/// Every pipeline's descriptor, sorted by name.
#[utoipa::path(get, path = "/v0/pipelines", tag = "Pipelines", params(Selector),
    responses((status = 200, description = "The descriptors.", body = Vec<PipelineDescriptor>)))]
async fn list(State(s): St, Query(q): Query<Selector>) -> ApiResult<Json<Vec<PipelineDescriptor>>> {
    Ok(Json(s.manager.list(q.status_only()?)))
}

/// Describe a pipeline.
///
/// Its descriptor.
#[utoipa::path(get, path = "/v0/pipelines/{name}", tag = "Pipelines", params(PipelinePath, Selector),
    responses((status = 200, description = "The descriptor.", body = PipelineDescriptor)))]
async fn describe(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<Selector>,
) -> ApiResult<Json<PipelineDescriptor>> {
    Ok(Json(s.manager.get(&name, q.status_only()?)?))
}

/// Reads a whole JSON body of at most `--max-body-bytes`, answering 413
/// when it is larger and 400 with serde's message when it is wrong (serde
/// refuses nesting deeper than 128 levels).
async fn json_body<T: serde::de::DeserializeOwned>(s: &AppState, body: Body) -> ApiResult<T> {
    let limit = s.manager.limits().max_body_bytes;
    let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            format!("the request body is larger than this server takes ({limit} bytes, --max-body-bytes)"),
        )
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request(format!("invalid request body: {e}")))
}

/// Runs a definition change (which checks the program) off the async
/// threads, a few at a time.
async fn define<T: Send + 'static>(
    s: &Arc<AppState>,
    f: impl FnOnce(&Manager) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let _slot = s
        .checks
        .acquire()
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let state = Arc::clone(s);
    match tokio::task::spawn_blocking(move || f(&state.manager)).await {
        Ok(result) => result,
        Err(e) if e.is_panic() => {
            let message = panic_message(e.into_panic().as_ref());
            tracing::error!(panic = %message, "checking a program panicked");
            Err(ApiError::internal(format!(
                "the server failed on this request: {message}"
            )))
        }
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}

/// A pipeline named in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct PipelinePath {
    /// Pipeline name: 1 to 100 ASCII letters, digits, `_` or `-`.
    /// Creating a pipeline under another name is a 400 `InvalidName`;
    /// looking one up is a 404 `UnknownPipelineName`.
    #[param(pattern = "^[A-Za-z0-9_-]{1,100}$")]
    name: String,
}

/// A table of the pipeline, in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct TablePath {
    /// A table of the pipeline's program. Unquoted names are
    /// case-insensitive; `"Quoted"` ones (with the double quotes,
    /// percent-encoded) are exact.
    table: String,
}

/// A view of the pipeline, in the path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
#[allow(dead_code)]
struct ViewPath {
    /// A view of the pipeline's program. Unquoted names are
    /// case-insensitive; `"Quoted"` ones (with the double quotes,
    /// percent-encoded) are exact.
    view: String,
}

/// Create a pipeline.
///
/// Creates the pipeline named by `name` in the body (a server holding
/// `--max-pipelines` already: 400 `TooManyPipelines`). The body needs
/// `name` and `program_code`. The program is checked at once. One that
/// does not check is stored as Feldera stores one that fails to compile:
/// `program_status` is `SqlError`, `program_error.sql_compilation.messages`
/// says what and where, and starting the pipeline is a 400 `ProgramError`
/// until the program is fixed. A body that is not a `PipelineDefinition` is
/// a 400 `BadRequest`; a bad name a 400 `InvalidName`.
#[utoipa::path(post, path = "/v0/pipelines", tag = "Pipelines", request_body = PipelineUpdate,
    responses(
        (status = 201, description = "Created; the full descriptor.", body = PipelineDescriptor),
        (status = 409, description = "A pipeline of that name already exists (`DuplicateName`).", body = ErrorBody),
    ))]
async fn create(State(s): St, body: Body) -> ApiResult<Response> {
    let update: PipelineUpdate = json_body(&s, body).await?;
    let name = update
        .name
        .clone()
        .ok_or_else(|| ApiError::bad_request("missing field 'name'"))?;
    let (v, _) = define(&s, move |m| m.put(&name, update, true)).await?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

/// Create or replace a pipeline.
///
/// Creates it (201; a server holding `--max-pipelines` already: 400
/// `TooManyPipelines`) or replaces the definition of a stopped one (200; a
/// running, paused or stopping one is a 400 `IllegalPipelineAction`). The
/// body needs `program_code`. The program is checked at once; one that does
/// not check is stored with `program_status` `SqlError` (see `POST
/// /v0/pipelines`).
#[utoipa::path(put, path = "/v0/pipelines/{name}", tag = "Pipelines", params(PipelinePath),
    request_body = PipelineUpdate,
    responses(
        (status = 200, description = "Replaced; the full descriptor.", body = PipelineDescriptor),
        (status = 201, description = "Created; the full descriptor.", body = PipelineDescriptor),
    ))]
async fn put(State(s): St, Path(name): Path<String>, body: Body) -> ApiResult<Response> {
    let update: PipelineUpdate = json_body(&s, body).await?;
    let (v, created) = define(&s, move |m| m.put(&name, update, false)).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(v)).into_response())
}

/// Change some fields of a pipeline.
///
/// Changes the fields given and not null of a stopped pipeline (otherwise
/// a 400 `IllegalPipelineAction`); renaming is a 400. A changed program is
/// checked at once; one that does not check is stored with
/// `program_status` `SqlError`.
#[utoipa::path(patch, path = "/v0/pipelines/{name}", tag = "Pipelines", params(PipelinePath),
    request_body = PipelineUpdate,
    responses((status = 200, description = "Changed; the full descriptor.", body = PipelineDescriptor)))]
async fn patch(
    State(s): St,
    Path(name): Path<String>,
    body: Body,
) -> ApiResult<Json<PipelineDescriptor>> {
    let update: PipelineUpdate = json_body(&s, body).await?;
    Ok(Json(define(&s, move |m| m.patch(&name, update)).await?))
}

/// Delete a stopped pipeline (otherwise a 400 `IllegalPipelineAction`).
#[utoipa::path(delete, path = "/v0/pipelines/{name}", tag = "Pipelines", params(PipelinePath),
    responses((status = 200, description = "Deleted; the body is empty.")))]
async fn delete(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.delete(&name)?;
    Ok(StatusCode::OK.into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct StartParams {
    /// The state to start in; anything else is a 400.
    #[param(inline, value_type = Option<Initial>)]
    initial: Option<String>,
    /// What to do when the program changed since the checkpoint the
    /// pipeline would resume from: `allow` keeps what did not change and
    /// computes the rest, `reject` refuses, `await_approval` (the default)
    /// waits (stopped) for `POST /approve`. Anything else is a 400.
    #[param(inline, value_type = Option<Policy>)]
    bootstrap_policy: Option<String>,
    /// What to do when a checkpoint or the input journal the start needs
    /// does not read whole (see the server guide): `refuse` (the default)
    /// refuses with `StartFailed` naming the damaged files and what would
    /// be lost, `accept_loss` starts from the newest checkpoint that reads
    /// whole and what the journal still holds after it, `from_scratch`
    /// removes the checkpoints and journal and starts empty. Anything else
    /// is a 400.
    #[param(inline, value_type = Option<RecoverValue>)]
    recover: Option<String>,
}

/// `initial`'s values.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase")]
enum Initial {
    Running,
    Paused,
}

/// `bootstrap_policy`'s values.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "snake_case")]
enum Policy {
    Allow,
    Reject,
    AwaitApproval,
}

/// `recover`'s values.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "snake_case")]
enum RecoverValue {
    Refuse,
    AcceptLoss,
    FromScratch,
}

/// The answer to a state change: `{}`.
#[derive(Serialize, ToSchema)]
pub struct Empty {}

fn accepted() -> Response {
    (StatusCode::ACCEPTED, Json(Empty {})).into_response()
}

/// Start or resume a pipeline.
///
/// Starts a stopped pipeline, running or (with `initial=paused`) paused; a
/// running or paused one is set to the requested state. A stopping pipeline
/// is a 400 `IllegalPipelineAction`; one whose program has an error a 400
/// `ProgramError` (with `details.line` and `details.column`); a connector
/// that fails to open a 400 `StartFailed` (also kept in
/// `deployment_error`).
#[utoipa::path(post, path = "/v0/pipelines/{name}/start", tag = "Pipeline lifecycle",
    params(PipelinePath, StartParams),
    responses((status = 202, description = "Accepted.", body = Empty)))]
async fn start(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<StartParams>,
) -> ApiResult<Response> {
    let paused = match q.initial.as_deref() {
        None | Some("running") => false,
        Some("paused") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unknown initial state '{other}' (running, paused)"
            )))
        }
    };
    let policy = match q.bootstrap_policy.as_deref() {
        None => BootstrapPolicy::AwaitApproval,
        Some(p) => p.parse().map_err(ApiError::bad_request)?,
    };
    let recover = match q.recover.as_deref() {
        None => Recover::Refuse,
        Some(r) => r.parse().map_err(ApiError::bad_request)?,
    };
    s.manager.launch(&name, paused, policy, recover).await?;
    Ok(accepted())
}

/// Approve a changed program.
///
/// Starts a pipeline whose changed program awaits approval
/// (`deployment_runtime_status` `AwaitingApproval`), keeping the state of
/// what did not change, as `start?bootstrap_policy=allow` does. A pipeline
/// not awaiting approval is a 400 `IllegalPipelineAction`.
#[utoipa::path(post, path = "/v0/pipelines/{name}/approve", tag = "Pipeline lifecycle",
    params(PipelinePath), responses((status = 202, description = "Accepted.", body = Empty)))]
async fn approve(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.approve(&name).await?;
    Ok(accepted())
}

/// Pause a pipeline.
///
/// It stops taking steps; input is still accepted and buffered. A stopped
/// pipeline is a 400 `IllegalPipelineAction`.
#[utoipa::path(post, path = "/v0/pipelines/{name}/pause", tag = "Pipeline lifecycle",
    params(PipelinePath), responses((status = 202, description = "Accepted.", body = Empty)))]
async fn pause(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.pause(&name)?;
    Ok(accepted())
}

/// Resume a pipeline.
///
/// It takes steps again. A stopped pipeline is a 400
/// `IllegalPipelineAction`; a failed one a 500.
#[utoipa::path(post, path = "/v0/pipelines/{name}/resume", tag = "Pipeline lifecycle",
    params(PipelinePath), responses((status = 202, description = "Accepted.", body = Empty)))]
async fn resume(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.runner(&name)?;
    s.manager.start(
        &name,
        false,
        BootstrapPolicy::AwaitApproval,
        Recover::Refuse,
    )?;
    Ok(accepted())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct StopParams {
    /// Stop after the current step, without processing buffered input
    /// (default false). Not `true`/`false`: a plain-text 400.
    force: Option<bool>,
}

/// Stop a pipeline and drop its state.
///
/// After processing the input already accepted, or with `force=true` after
/// the current step. The answer comes once it has stopped. Stopping a
/// stopped pipeline is accepted and does nothing.
#[utoipa::path(post, path = "/v0/pipelines/{name}/stop", tag = "Pipeline lifecycle",
    params(PipelinePath, StopParams),
    responses((status = 202, description = "Accepted.", body = Empty)))]

async fn stop(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<StopParams>,
) -> ApiResult<Response> {
    s.manager.stop(&name, q.force.unwrap_or(false)).await?;
    Ok(accepted())
}

/// Clear a pipeline's storage.
///
/// Deletes its storage folder, its checkpoints and state batches. The
/// pipeline must be stopped (otherwise a 400 `IllegalPipelineAction`); the
/// next start begins from nothing.
#[utoipa::path(post, path = "/v0/pipelines/{name}/clear", tag = "Pipeline lifecycle",
    params(PipelinePath), responses((status = 202, description = "Accepted.", body = Empty)))]
async fn clear(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.clear(&name)?;
    Ok(accepted())
}

/// A checkpoint written.
#[derive(Serialize, ToSchema)]
pub struct CheckpointResponse {
    /// The checkpoint's sequence number.
    #[schema(minimum = 1)]
    checkpoint_sequence_number: u64,
}

/// Checkpoint a running pipeline.
///
/// Writes a checkpoint of every operator's state at a cut between two steps
/// into the pipeline's storage folder and returns its sequence number once
/// it is durable. Steps wait while it is written. The last two checkpoints
/// are kept; `start` resumes from the latest. A pipeline whose
/// `runtime_config.storage` is false cannot checkpoint (400).
#[utoipa::path(post, path = "/v0/pipelines/{name}/checkpoint", tag = "Pipeline lifecycle",
    params(PipelinePath),
    responses((status = 200, description = "The checkpoint is written.", body = CheckpointResponse)))]
async fn checkpoint(State(s): St, Path(name): Path<String>) -> ApiResult<Json<CheckpointResponse>> {
    let n = s.manager.checkpoint(&name).await?;
    Ok(Json(CheckpointResponse {
        checkpoint_sequence_number: n,
    }))
}

/// What became of the checkpoints requested.
///
/// The last success and the last failure.
#[utoipa::path(get, path = "/v0/pipelines/{name}/checkpoint_status", tag = "Pipeline lifecycle",
    params(PipelinePath),
    responses((status = 200, description = "The last success and the last failure.", body = CheckpointStatus)))]
async fn checkpoint_status(
    State(s): St,
    Path(name): Path<String>,
) -> ApiResult<Json<CheckpointStatus>> {
    Ok(Json(s.manager.checkpoint_status(&name)?))
}

/// Forget the deployment error.
///
/// Clears `deployment_error`.
#[utoipa::path(post, path = "/v0/pipelines/{name}/dismiss_error", tag = "Pipeline lifecycle",
    params(PipelinePath), responses((status = 202, description = "Accepted.", body = Empty)))]
async fn dismiss_error(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.dismiss_error(&name)?;
    Ok(accepted())
}

/// Pipeline counters.
///
/// Those of a running or paused pipeline, in Feldera's shape. A stopped
/// pipeline is a 400 `IllegalPipelineAction`; a failed one a 500.
#[utoipa::path(get, path = "/v0/pipelines/{name}/stats", tag = "Metrics", params(PipelinePath),
    responses((status = 200, description = "The counters.", body = StatsReport)))]
async fn stats(State(s): St, Path(name): Path<String>) -> ApiResult<Json<StatsReport>> {
    let runner = s.manager.runner(&name)?;
    Ok(Json(runner.feeder.stats.report(s.manager.is_paused(&name))))
}

/// Pipeline metrics.
///
/// The counters in Prometheus' text format (`text/plain; version=0.0.4`). A
/// stopped pipeline is a 400 `IllegalPipelineAction`; a failed one a 500.
#[utoipa::path(get, path = "/v0/pipelines/{name}/metrics", tag = "Metrics", params(PipelinePath),
    responses((status = 200, description = "Prometheus text.", body = String, content_type = "text/plain")))]
async fn metrics(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    let runner = s.manager.runner(&name)?;
    let text = runner.feeder.stats.to_prometheus(&name);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

/// Every pipeline's metrics.
///
/// The server's and every pipeline's series in Prometheus' text format, one
/// scrape for the whole server: each pipeline's status (stopped ones
/// included), and the counters of each running or paused one, labelled
/// with its name.
#[utoipa::path(get, path = "/v0/metrics", tag = "Metrics",
    responses((status = 200, description = "Prometheus text.", body = String, content_type = "text/plain")))]
async fn all_metrics(State(s): St) -> Response {
    let mut out = Exposition::default();
    out.add(
        "eddy_server_uptime_seconds",
        "Seconds since the server started.",
        "gauge",
        &[(String::new(), s.started.elapsed().as_secs())],
    );
    out.add(
        "eddy_rss_bytes",
        "Resident memory of the server process (all its pipelines).",
        "gauge",
        &[(String::new(), crate::stats::rss_bytes())],
    );
    let pipelines = s.manager.list(true);
    let statuses: Vec<(String, u8)> = pipelines
        .iter()
        .flat_map(|d| {
            let now = status_name(d);
            let p = pipeline_label(&d.name);
            STATUSES
                .iter()
                .map(move |status| (format!("{p},status=\"{status}\""), u8::from(*status == now)))
        })
        .collect();
    out.add(
        "eddy_pipeline_status",
        "1 for a pipeline's status now, 0 for the others.",
        "gauge",
        &statuses,
    );
    for d in &pipelines {
        if let Ok(runner) = s.manager.runner(&d.name) {
            runner.feeder.stats.expose(&d.name, &mut out);
        }
    }
    let text = out.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// The statuses `eddy_pipeline_status` sets: the deployment statuses, a
/// changed program awaiting approval, and a pipeline whose start, a step
/// or its worker failed.
const STATUSES: [&str; 7] = [
    "Stopped",
    "Running",
    "Replaying",
    "Paused",
    "Stopping",
    "AwaitingApproval",
    "Failed",
];

/// A pipeline's status among [`STATUSES`].
fn status_name(d: &PipelineDescriptor) -> &'static str {
    if d.deployment_runtime_status.as_deref() == Some("AwaitingApproval") {
        return "AwaitingApproval";
    }
    // A pipeline whose step or worker failed stays Running (or Paused)
    // with its error until stopped; one that failed to start is Stopped.
    if d.deployment_error.is_some() && d.deployment_status != Deployment::Stopping {
        return "Failed";
    }
    match d.deployment_status {
        Deployment::Stopped => "Stopped",
        Deployment::Running => "Running",
        Deployment::Replaying => "Replaying",
        Deployment::Paused => "Paused",
        Deployment::Stopping => "Stopping",
    }
}

/// Resolves a table or view name as SQL would: unquoted names are
/// case-insensitive, `"Quoted"` ones exact.
fn resolve(name: &str, known: &[String]) -> Option<String> {
    if let Some(q) = name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        return known.iter().find(|k| *k == q).cloned();
    }
    known
        .iter()
        .find(|k| *k == name)
        .or_else(|| known.iter().find(|k| **k == name.to_lowercase()))
        .cloned()
}

/// The answer to a query that failed.
fn query_error(s: &AppState, name: &str, e: QueryError) -> ApiError {
    match e {
        QueryError::Invalid(e) => {
            let e = s.manager.explain_query_error(name, e);
            ApiError::new(StatusCode::BAD_REQUEST, "QueryError", e)
        }
        QueryError::Timeout(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "QueryTimeout", e.to_string())
        }
        QueryError::Memory(_) => {
            ApiError::new(StatusCode::BAD_REQUEST, "QueryOutOfMemory", e.to_string())
        }
        QueryError::Internal(_) => ApiError::internal(e.to_string()),
    }
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct QueryParams {
    /// The query.
    sql: String,
    /// `text` (the default): a table (`text/plain`); `json`: one object
    /// per line; `csv`; `arrow_ipc`: an Arrow IPC stream; `parquet`: a
    /// Parquet file. Anything else is a 400.
    #[param(inline, value_type = Option<AnswerFormat>)]
    format: Option<String>,
}

/// The formats of an ad-hoc query's answer.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "snake_case")]
enum AnswerFormat {
    Text,
    Json,
    Csv,
    ArrowIpc,
    Parquet,
}

/// Ad-hoc query.
///
/// Runs a SELECT over one consistent snapshot of the materialized tables
/// and of all views of a running or paused pipeline (a stopped one is a 400
/// `IllegalPipelineAction`). Only queries run (SELECT, WITH, VALUES,
/// EXPLAIN, SHOW, DESCRIBE). A bad, refused or too long (over
/// `--max-program-bytes`) query is a 400 `QueryError`; one past its time or
/// memory limit a 400 `QueryTimeout` or `QueryOutOfMemory`; a missing `sql`
/// a plain-text 400.
#[utoipa::path(get, path = "/v0/pipelines/{name}/query", tag = "HTTP input/output",
    params(PipelinePath, QueryParams),
    responses((status = 200, description = "The result, in the requested format.", content(
        (String = "text/plain"), (String = "application/x-ndjson"), (String = "text/csv"),
        (Vec<u8> = "application/vnd.apache.arrow.stream"),
        (Vec<u8> = "application/vnd.apache.parquet"),
    ))))]
async fn adhoc_query(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<QueryParams>,
) -> ApiResult<Response> {
    let format =
        QueryFormat::new(q.format.as_deref().unwrap_or("text")).map_err(ApiError::bad_request)?;
    let runner = s.manager.runner(&name)?;
    let limits = s.manager.query_limits(&name)?;
    let snapshot = runner.snapshot().await.map_err(ApiError::state)?;
    let max_bytes = limits.memory_bytes;
    let (batches, schema) = query::run(snapshot, q.sql, limits)
        .await
        .map_err(|e| query_error(&s, &name, e))?;
    // An answer that cannot be written in the format asked for (nested
    // values in CSV, intervals in Parquet) is the request's problem.
    let body =
        tokio::task::spawn_blocking(move || query::encode(format, &schema, &batches, max_bytes))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(|e| match e {
                EncodeError::TooLarge(m) => {
                    ApiError::new(StatusCode::BAD_REQUEST, "QueryOutOfMemory", m)
                }
                EncodeError::Shape(m) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "QueryError",
                    format!("the answer cannot be written as {}: {m}", format.name()),
                ),
            })?;
    let content_type = match format {
        // Feldera's clients read `text/plain` (exactly) as text.
        QueryFormat::Text => "text/plain",
        other => other.content_type(),
    };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// The routes `router` declares, as (path, method), read from its
    /// source: every `.route("path", handlers)` call, `/v0` added to all
    /// but `/healthz`.
    fn declared_routes() -> std::collections::BTreeSet<(String, String)> {
        let source = include_str!("mod.rs");
        let start = source.find("pub fn router(").unwrap();
        let body = &source[start..start + source[start..].find("\n}\n").unwrap()];
        let mut routes = std::collections::BTreeSet::new();
        let mut rest = body;
        while let Some(i) = rest.find(".route(") {
            rest = &rest[i + ".route(".len()..];
            let open = rest.find('"').unwrap();
            let close = open + 1 + rest[open + 1..].find('"').unwrap();
            let path = &rest[open + 1..close];
            let mut depth = 1;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '(' => 1,
                        ')' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .unwrap()
                .0;
            let handlers = &rest[close + 1..end];
            let path = if path == "/healthz" {
                path.to_string()
            } else {
                format!("/v0{path}")
            };
            for method in ["get", "post", "put", "patch", "delete"] {
                if handlers.contains(&format!("{method}(")) {
                    routes.insert((path.clone(), method.to_string()));
                }
            }
        }
        routes
    }

    /// The served OpenAPI description covers every route with its methods,
    /// and describes none that does not exist.
    #[test]
    fn every_route_is_described() {
        let declared = declared_routes();
        assert!(declared.len() > 20, "{declared:?}");
        let doc: serde_json::Value =
            serde_json::from_str(&doc::ApiDoc::openapi().to_json().unwrap()).unwrap();
        let described: std::collections::BTreeSet<(String, String)> = doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .flat_map(|(path, item)| {
                item.as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| *k != "parameters")
                    .map(move |m| (path.clone(), m.clone()))
            })
            .collect();
        let missing: Vec<_> = declared.difference(&described).collect();
        let extra: Vec<_> = described.difference(&declared).collect();
        assert!(missing.is_empty(), "routes not described: {missing:?}");
        assert!(
            extra.is_empty(),
            "the description has no such route: {extra:?}"
        );
    }

    /// Sends a raw HTTP/1.1 GET and returns the whole answer.
    fn http_get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn a_panicking_handler_is_a_500_and_the_server_goes_on() {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app: Router = Router::new()
            .route(
                "/boom",
                get(|| async {
                    if true {
                        panic!("boom at the handler");
                    }
                    "unreachable"
                }),
            )
            .route("/fine", get(|| async { "fine" }))
            .layer(middleware::from_fn(catch_panic));
        runtime.spawn(async move { axum::serve(listener, app).await });
        let answer = http_get(addr, "/boom");
        assert!(answer.starts_with("HTTP/1.1 500"), "{answer}");
        assert!(answer.contains("InternalError"), "{answer}");
        assert!(answer.contains("boom at the handler"), "{answer}");
        let answer = http_get(addr, "/fine");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}
