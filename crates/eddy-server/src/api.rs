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
use serde_json::{json, Value};
use tokio::sync::{mpsc, Semaphore};

use crate::error::{panic_message, ApiError, ApiResult};
use crate::input::{parse_piece, Chunker, MAX_LINE_BYTES};
use crate::manager::{BootstrapPolicy, Manager, PipelineUpdate, Recover};
use crate::query::{self, EncodeError, QueryError, QueryFormat};
use crate::runner::{self, Claim, Origin, Output, Sink, SinkStatus};
use eddy_io::format::FormatConfig;

/// Largest JSON-array ingress body (an array must be read whole; other
/// formats stream in bounded pieces).
const ARRAY_BODY_LIMIT: usize = 256 << 20;

/// Program checks that run at once; more wait (checking is CPU-bound, and a
/// hostile program may need a deep stack while its tree is dropped).
const CONCURRENT_CHECKS: usize = 4;

/// Rejected rows listed in an ingress answer (all are counted).
const MAX_LISTED_ERRORS: usize = 100;

/// Chunks an egress stream holds before the pipeline waits (backpressure)
/// or drops them (no backpressure).
const EGRESS_CHUNKS: usize = 64;

/// What the handlers share.
pub struct AppState {
    /// The pipelines.
    pub manager: Arc<Manager>,
    /// The API key, if any.
    pub api_key: Option<String>,
    egress_ids: AtomicU64,
    checks: Semaphore,
}

impl AppState {
    /// Shared state over `manager`.
    pub fn new(manager: Arc<Manager>, api_key: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            manager,
            api_key,
            egress_ids: AtomicU64::new(0),
            checks: Semaphore::new(CONCURRENT_CHECKS),
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
        .route("/pipelines/{name}/ingress/{table}", post(ingress))
        .route("/pipelines/{name}/egress/{view}", post(egress))
        .route(
            "/pipelines/{name}/completion_status",
            get(completion_status),
        )
        .route("/pipelines/{name}/query", get(adhoc_query))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), auth))
        // The API's description is public, like /healthz.
        .route("/api-doc/openapi.json", get(openapi));
    Router::new()
        .route(
            "/healthz",
            get(|| async { Json(json!({"status": "healthy"})) }),
        )
        .nest("/v0", v0)
        .merge(crate::console::routes())
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "NotFound", "no such endpoint") })
        .layer(middleware::from_fn(catch_panic))
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

/// The OpenAPI description of this API (kept by hand beside this file,
/// checked against the server by the Schemathesis test), with this
/// build's version.
async fn openapi() -> Response {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let doc = DOC.get_or_init(|| {
        let mut doc: Value =
            serde_json::from_str(include_str!("openapi.json")).expect("openapi.json is JSON");
        doc["info"]["version"] = env!("CARGO_PKG_VERSION").into();
        doc.to_string()
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

async fn config() -> Json<Value> {
    Json(json!({
        "edition": "Open source",
        "version": env!("CARGO_PKG_VERSION"),
        "revision": "",
        "runtime_revision": "",
        "changelog_url": "",
        "telemetry": "",
    }))
}

#[derive(Deserialize)]
struct Selector {
    selector: Option<String>,
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

async fn list(State(s): St, Query(q): Query<Selector>) -> ApiResult<Json<Value>> {
    Ok(Json(Value::Array(s.manager.list(q.status_only()?))))
}

async fn describe(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<Selector>,
) -> ApiResult<Json<Value>> {
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

async fn create(State(s): St, body: Body) -> ApiResult<Response> {
    let update: PipelineUpdate = json_body(&s, body).await?;
    let name = update
        .name
        .clone()
        .ok_or_else(|| ApiError::bad_request("missing field 'name'"))?;
    let (v, _) = define(&s, move |m| m.put(&name, update, true)).await?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

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

async fn patch(State(s): St, Path(name): Path<String>, body: Body) -> ApiResult<Json<Value>> {
    let update: PipelineUpdate = json_body(&s, body).await?;
    Ok(Json(define(&s, move |m| m.patch(&name, update)).await?))
}

async fn delete(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.delete(&name)?;
    Ok(StatusCode::OK.into_response())
}

#[derive(Deserialize)]
struct StartParams {
    initial: Option<String>,
    bootstrap_policy: Option<String>,
    recover: Option<String>,
}

fn accepted() -> Response {
    (StatusCode::ACCEPTED, Json(json!({}))).into_response()
}

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

async fn approve(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.approve(&name).await?;
    Ok(accepted())
}

async fn pause(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.pause(&name)?;
    Ok(accepted())
}

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

#[derive(Deserialize)]
struct StopParams {
    force: Option<bool>,
}

async fn stop(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<StopParams>,
) -> ApiResult<Response> {
    s.manager.stop(&name, q.force.unwrap_or(false)).await?;
    Ok(accepted())
}

async fn clear(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.clear(&name)?;
    Ok(accepted())
}

async fn checkpoint(State(s): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let n = s.manager.checkpoint(&name).await?;
    Ok(Json(json!({"checkpoint_sequence_number": n})))
}

async fn checkpoint_status(State(s): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(s.manager.checkpoint_status(&name)?))
}

async fn dismiss_error(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    s.manager.dismiss_error(&name)?;
    Ok(accepted())
}

async fn stats(State(s): St, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    let runner = s.manager.runner(&name)?;
    Ok(Json(
        runner.feeder.stats.to_json(s.manager.is_paused(&name)),
    ))
}

async fn metrics(State(s): St, Path(name): Path<String>) -> ApiResult<Response> {
    let runner = s.manager.runner(&name)?;
    let text = runner.feeder.stats.to_prometheus(&name);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
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

#[derive(Deserialize)]
struct IngressParams {
    format: Option<String>,
    update_format: Option<String>,
    array: Option<bool>,
}

async fn ingress(
    State(s): St,
    Path((name, table)): Path<(String, String)>,
    Query(q): Query<IngressParams>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let (tables, _) = s.manager.relations(&name)?;
    let table = resolve(&table, &tables)
        .ok_or_else(|| ApiError::unknown_relation("table", &table, &name))?;
    let format = FormatConfig::from_query(
        q.format.as_deref().unwrap_or("json"),
        q.update_format.as_deref(),
        q.array,
    )
    .and_then(|f| f.text_input())
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let runner = s.manager.runner(&name)?;
    let feeder = &runner.feeder;
    let schema = Arc::clone(
        feeder
            .schema(&table)
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
    );
    let endpoint = feeder
        .stats
        .input(&format!("{}{table}", crate::stats::INGRESS_PREFIX), &table);
    // A resent request whose key was applied is answered, not applied.
    let mut key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => match v.to_str().ok().filter(|k| runner::keys_valid(k)) {
            Some(k) => Some(KeyClaim::new(feeder, k)?),
            None => {
                return Err(ApiError::bad_request(
                    "an Idempotency-Key is 1 to 255 visible ASCII characters",
                ))
            }
        },
    };
    if let Some(rows) = key.as_ref().and_then(|k| k.applied) {
        return Ok(Json(json!({
            "token": feeder.token().to_string(),
            "accepted": rows,
            "duplicate": true,
        }))
        .into_response());
    }
    let mut chunker = Chunker::new(&format);
    let mut stream = body.into_data_stream();
    let mut accepted = 0u64;
    let mut rejected = 0u64;
    let mut listed = Vec::new();
    let mut token = None;
    // Parsed pieces wait here until the body ends (or a unit is full), then
    // enter the journal and the pipeline as one change.
    let mut unit = Unit::default();
    loop {
        let (piece, last) = match stream.next().await {
            Some(Ok(bytes)) => {
                if !format.line_oriented() && chunker.pending() + bytes.len() > ARRAY_BODY_LIMIT {
                    return Err(unit.refused(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "PayloadTooLarge",
                        format!("a JSON array body may hold at most {ARRAY_BODY_LIMIT} bytes; send newline-delimited changes instead"),
                    )));
                }
                let piece = chunker.push(&bytes);
                if chunker.line_too_long() {
                    return Err(unit.refused(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "PayloadTooLarge",
                        format!("a line of the body is longer than {MAX_LINE_BYTES} bytes"),
                    )));
                }
                (piece, false)
            }
            Some(Err(e)) => {
                return Err(unit.refused(ApiError::bad_request(format!(
                    "reading the request body: {e}"
                ))))
            }
            None => (chunker.finish(), true),
        };
        if let Some(piece) = piece {
            let bytes = piece.bytes as u64;
            let (changes, errors) = parse_piece(&format, piece, &schema, &endpoint);
            accepted += changes.len() as u64;
            rejected += errors.len() as u64;
            for e in errors {
                if listed.len() < MAX_LISTED_ERRORS {
                    listed.push(json!({"line": e.line, "reason": e.reason}));
                }
            }
            unit.hold(changes, bytes);
        }
        if last || unit.bytes >= ATOMIC_BODY_BYTES {
            // The key goes with the request's last unit.
            let claim = if last { key.as_mut() } else { None };
            if let Some(t) = unit.apply(feeder, &table, &schema, claim).await? {
                token = Some(t);
            }
        }
        if last {
            break;
        }
    }
    let token = token.unwrap_or_else(|| feeder.token()).to_string();
    if rejected > 0 {
        let message = format!("{rejected} record(s) rejected, {accepted} accepted");
        return Err(
            ApiError::new(StatusCode::BAD_REQUEST, "ParseErrors", message).with_details(json!({
                "token": token,
                "accepted": accepted,
                "rejected": rejected,
                "errors": listed,
            })),
        );
    }
    Ok(Json(json!({"token": token, "accepted": accepted})).into_response())
}

/// Body bytes applied as one whole: a request up to this size is applied
/// wholly or not at all (journaled as one record, entered as one change);
/// a longer one in whole units of this size, each said in the answer of a
/// request that fails after it (docs/server.md, "Ingress").
const ATOMIC_BODY_BYTES: u64 = 64 << 20;

/// What an ingress request has parsed and not yet applied, and what it
/// has applied.
#[derive(Default)]
struct Unit {
    held: Vec<ZSet>,
    /// Body bytes of what is held.
    bytes: u64,
    /// Rows and body bytes applied by earlier units of this request.
    applied_rows: u64,
    applied_bytes: u64,
}

impl Unit {
    fn hold(&mut self, changes: ZSet, bytes: u64) {
        self.bytes += bytes;
        if !changes.is_empty() {
            self.held.push(changes);
        }
    }

    /// Journals and enters what is held as one change; returns its
    /// completion token (none when nothing was held).
    async fn apply(
        &mut self,
        feeder: &Arc<crate::runner::Feeder>,
        table: &str,
        schema: &SchemaRef,
        claim: Option<&mut KeyClaim>,
    ) -> ApiResult<Option<u64>> {
        let key = claim.as_ref().map(|c| c.key.clone());
        let held = std::mem::take(&mut self.held);
        let bytes = std::mem::take(&mut self.bytes);
        // A keyed request that holds no rows is still remembered, so that
        // the answer to a resend is the same.
        let changes = match held.len() {
            0 if key.is_none() => {
                self.applied_bytes += bytes;
                return Ok(None);
            }
            0 => ZSet::empty(schema),
            1 => held.into_iter().next().expect("one change"),
            _ => ZSet::concat(schema, &held).map_err(|e| ApiError::internal(e.to_string()))?,
        };
        let rows = changes.len() as u64;
        let origin = Origin {
            journal: true,
            key,
            ..Origin::default()
        };
        let fed = if feeder.journaled() {
            // The journal syncs to disk: not on the runtime's threads. The
            // blocking feed goes on if the client goes: it, not the
            // handler, then remembers or releases the key.
            if let Some(claim) = claim {
                claim.handed = true;
            }
            let (feeder, table) = (Arc::clone(feeder), table.to_string());
            tokio::task::spawn_blocking(move || feeder.feed_blocking(&table, changes, origin))
                .await
                .map_err(|e| ApiError::internal(e.to_string()))?
        } else {
            feeder.feed(table, changes, origin).await
        };
        let token = fed.map_err(|e| self.refused(feed_error(e)))?;
        self.applied_rows += rows;
        self.applied_bytes += bytes;
        Ok(Some(token))
    }

    /// An error answer that says what of the request was applied (nothing,
    /// unless it was longer than one unit).
    fn refused(&self, e: ApiError) -> ApiError {
        let what = match self.applied_bytes {
            0 => "none of the request was applied".to_string(),
            b => format!(
                "the first {b} bytes of the body ({} rows) were applied, the rest not",
                self.applied_rows
            ),
        };
        let mut e = e.with_details(json!({
            "applied_rows": self.applied_rows,
            "applied_bytes": self.applied_bytes,
        }));
        e.message = format!("{}; {what}", e.message);
        e
    }
}

/// The idempotency key of a request being applied: released unless the
/// request was applied (the feeder then remembers it).
struct KeyClaim {
    key: String,
    feeder: Arc<crate::runner::Feeder>,
    /// Rows applied by an earlier request with the key.
    applied: Option<u64>,
    /// Handed to a feed that remembers or releases it itself.
    handed: bool,
}

impl KeyClaim {
    fn new(feeder: &Arc<crate::runner::Feeder>, key: &str) -> ApiResult<Self> {
        let applied = match feeder.keys.lock().unwrap().claim(key) {
            Claim::New => None,
            Claim::Applied(rows) => Some(rows),
            Claim::InFlight => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "DuplicateRequest",
                    format!("a request with Idempotency-Key '{key}' is being applied now"),
                ))
            }
        };
        Ok(Self {
            key: key.to_string(),
            feeder: Arc::clone(feeder),
            applied,
            handed: false,
        })
    }
}

impl Drop for KeyClaim {
    fn drop(&mut self) {
        if self.applied.is_none() && !self.handed {
            // A no-op once the request was applied and remembered.
            self.feeder.keys.lock().unwrap().release(&self.key);
        }
    }
}

/// A change the pipeline did not take, as an answer.
fn feed_error(e: crate::runner::FeedError) -> ApiError {
    use crate::runner::FeedError;
    match e {
        FeedError::Stopped => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "PipelineStopped",
            e.to_string(),
        ),
        FeedError::Journal(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "InputNotDurable",
            e.to_string(),
        ),
        FeedError::NoSuchTable(_) => ApiError::bad_request(e.to_string()),
    }
}

#[derive(Deserialize)]
struct TokenParams {
    token: String,
}

async fn completion_status(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<TokenParams>,
) -> ApiResult<Json<Value>> {
    let runner = s.manager.runner(&name)?;
    let token: u64 = q
        .token
        .parse()
        .map_err(|_| ApiError::bad_request(format!("invalid completion token '{}'", q.token)))?;
    let feeder = &runner.feeder;
    if token > feeder.token() {
        return Err(ApiError::bad_request(format!(
            "completion token '{token}' was not issued by this run of the pipeline"
        )));
    }
    let done = feeder.processed() >= token;
    Ok(Json(json!({
        "status": if done { "complete" } else { "inprogress" },
        "step": feeder.stats.steps.load(Ordering::Relaxed),
    })))
}

#[derive(Deserialize)]
struct EgressParams {
    format: Option<String>,
    backpressure: Option<bool>,
    send_snapshot: Option<bool>,
    array: Option<bool>,
}

/// An HTTP egress stream: one line per step.
struct HttpSink {
    tx: mpsc::Sender<Bytes>,
    format: eddy_io::format::OutputFormat,
    backpressure: bool,
    /// Without backpressure: a chunk was dropped and the client has not
    /// been told yet. The next line it gets is `{"dropped": true}`, so a
    /// client that keeps the view's contents knows to start again.
    lost: bool,
}

impl Sink for HttpSink {
    fn write(&mut self, sequence: u64, changes: &ZSet) -> SinkStatus {
        let chunk = match self.format.egress_chunk(sequence, changes) {
            Ok(c) => Bytes::from(c),
            Err(e) => return SinkStatus::Failed(e),
        };
        self.send(chunk, changes.len() as u64)
    }

    fn step_done(&mut self, sequence: u64, step: u64) -> SinkStatus {
        let marker = json!({"sequence_number": sequence, "processed_steps": step});
        self.send(Bytes::from(format!("{marker}\n")), 0)
    }
}

impl HttpSink {
    fn send(&mut self, chunk: Bytes, records: u64) -> SinkStatus {
        let bytes = chunk.len() as u64;
        let try_send = |tx: &mpsc::Sender<Bytes>, chunk: Bytes| {
            tx.try_send(chunk)
                .map_err(|e| matches!(e, mpsc::error::TrySendError::Closed(_)))
        };
        let sent = if self.backpressure {
            self.tx.blocking_send(chunk).map_err(|_| true)
        } else if self.lost {
            try_send(&self.tx, Bytes::from_static(b"{\"dropped\":true}\n")).and_then(|()| {
                self.lost = false;
                try_send(&self.tx, chunk)
            })
        } else {
            try_send(&self.tx, chunk)
        };
        if sent == Err(false) {
            self.lost = true;
        }
        match sent {
            Ok(()) => SinkStatus::Written { records, bytes },
            Err(true) => SinkStatus::Closed,
            Err(false) => SinkStatus::Dropped,
        }
    }
}

/// One open egress stream, counted until dropped.
struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn egress(
    State(s): St,
    Path((name, view)): Path<(String, String)>,
    Query(q): Query<EgressParams>,
) -> ApiResult<Response> {
    let (_, views) = s.manager.relations(&name)?;
    let view =
        resolve(&view, &views).ok_or_else(|| ApiError::unknown_relation("view", &view, &name))?;
    let format = FormatConfig::from_query(q.format.as_deref().unwrap_or("json"), None, None)
        .and_then(|f| f.text_output())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if q.array == Some(true) {
        return Err(ApiError::bad_request(
            "array=true is not supported for egress streams",
        ));
    }
    if q.send_snapshot == Some(true) {
        if let Some(r) = s
            .manager
            .unmaterialized(&name)
            .into_iter()
            .find(|r| r.view && r.name == view)
        {
            return Err(ApiError::bad_request(format!(
                "send_snapshot=true sends the view's current rows, and {}",
                r.reason()
            )));
        }
    }
    let runner = s.manager.runner(&name)?;
    let max_streams = s.manager.limits().max_egress_streams;
    let open = Arc::clone(&runner.egress_streams);
    if open.fetch_add(1, Ordering::SeqCst) >= max_streams {
        open.fetch_sub(1, Ordering::SeqCst);
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyStreams",
            format!("pipeline '{name}' has {max_streams} egress streams open, the most this server allows (--max-egress-streams); close one first"),
        ));
    }
    // Counts the stream as open until the response body is dropped (the
    // client went away, or the pipeline stopped).
    let guard = StreamGuard(open);
    let (tx, rx) = mpsc::channel::<Bytes>(EGRESS_CHUNKS);
    // A first line right away, so clients know the stream is open.
    let _ = tx.try_send(Bytes::from(format!(
        "{}\n",
        json!({"sequence_number": runner.feeder.processed()})
    )));
    let id = s.egress_ids.fetch_add(1, Ordering::Relaxed);
    let stats = runner
        .feeder
        .stats
        .add_output(&format!("api-egress-{view}-{id}"), &view);
    runner
        .attach(Output {
            view,
            sink: Box::new(HttpSink {
                tx,
                format,
                backpressure: q.backpressure.unwrap_or(true),
                lost: false,
            }),
            stats,
            snapshot: q.send_snapshot.unwrap_or(false),
        })
        .map_err(|e| ApiError::state(e.to_string()))?;
    let stream = futures::stream::unfold((rx, guard), |(mut rx, guard)| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, std::io::Error>(b), (rx, guard)))
    });
    let mut response = Body::from_stream(stream).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    Ok(response)
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

#[derive(Deserialize)]
struct QueryParams {
    sql: String,
    format: Option<String>,
}

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
        let source = include_str!("api.rs");
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
        let doc: Value = serde_json::from_str(include_str!("openapi.json")).unwrap();
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
        assert!(
            missing.is_empty(),
            "routes not in openapi.json: {missing:?}"
        );
        assert!(
            extra.is_empty(),
            "openapi.json describes no such route: {extra:?}"
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
