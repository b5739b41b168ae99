//! HTTP ingress (`POST /v0/pipelines/{name}/ingress/{table}`): a body in
//! a text format (or raw bytes) parsed in bounded pieces and fed to a
//! table, applied whole or not at all where the request asks for it (an
//! idempotency key makes a resent request answered, not applied twice),
//! and the completion tokens that say when what was fed is in the views.

use super::*;

/// Largest ingress body read whole (a JSON array, a raw blob); other
/// formats stream in bounded pieces.
const WHOLE_BODY_LIMIT: usize = 256 << 20;

/// Rejected rows listed in an ingress answer (all are counted).
const MAX_LISTED_ERRORS: usize = 100;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct IngressParams {
    /// The body's format (default `json`); anything else is a 400.
    /// `raw`: the body as one row (or, with `mode=lines`, each line as a
    /// row) of the table's one VARCHAR or VARBINARY column.
    #[param(inline, value_type = Option<IngressFormat>)]
    format: Option<String>,
    /// How JSON changes are written (default `insert_delete`; `debezium`:
    /// Debezium change events, bare or under `payload`); `csv` takes only
    /// `raw` and `insert_delete` (both mean insert). Anything else is a 400.
    #[param(inline, value_type = Option<UpdateFormat>)]
    update_format: Option<String>,
    /// JSON only: the body is one JSON array of changes.
    array: Option<bool>,
    /// Raw only: `blob` (default, the body is a row) or `lines`.
    #[param(inline, value_type = Option<RawMode>)]
    mode: Option<String>,
}

/// The formats of HTTP input.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase")]
enum IngressFormat {
    Json,
    Csv,
    Raw,
}

/// How raw input is cut into rows.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase")]
enum RawMode {
    Blob,
    Lines,
}

/// How JSON changes are written.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "snake_case")]
enum UpdateFormat {
    InsertDelete,
    Raw,
    Weighted,
    Debezium,
}

/// An ingress request applied whole.
#[derive(Serialize, ToSchema)]
pub struct IngressResult {
    /// Completion token: pass it to `completion_status`.
    #[schema(pattern = "^[0-9]+$")]
    token: String,
    /// Records accepted.
    accepted: u64,
    /// Set when a request with this `Idempotency-Key` was applied before
    /// (and this one was not).
    #[serde(skip_serializing_if = "Option::is_none")]
    duplicate: Option<bool>,
}

/// `details` of a 400 `ParseErrors` from ingress: the other records of the
/// request were applied.
#[derive(Serialize, ToSchema)]
pub struct ParseErrorsDetails {
    /// Completion token of the request.
    token: String,
    accepted: u64,
    #[schema(minimum = 1)]
    rejected: u64,
    /// The first 100 rejected records.
    #[schema(max_items = 100)]
    errors: Vec<RejectedRecord>,
}

/// A record that was not applied, and why.
#[derive(Serialize, ToSchema)]
pub struct RejectedRecord {
    /// Its line in the body, from 1.
    line: u64,
    reason: String,
}

/// The changes of an ingress body.
const INGRESS_BODY: &str = "Changes, one per line: with `format=json`, `{\"insert\": row}` / `{\"delete\": row}` (`insert_delete`), a bare row (`raw`) or `{\"weight\": w, \"data\": row}` (`weighted`), or with `array=true` one JSON array of them; with `format=csv`, one row to insert per line, columns in table order (a first line equal to the column names is skipped); with `format=raw`, the bytes as one row (or with `mode=lines` each line as a row) of the table's VARCHAR or VARBINARY column. The Content-Type is not looked at.";

/// Push changes into a table.
///
/// Into a table of a running or paused pipeline (a stopped one is a 400
/// `IllegalPipelineAction`). The body streams through in pieces of whole lines and its size is not
/// limited, except a JSON array (`array=true`), read whole, up to 256 MiB
/// (413 `PayloadTooLarge`). If records were rejected, the answer is a 400
/// `ParseErrors` whose `details` are `ParseErrorsDetails`; the other
/// records were applied. A failed pipeline is a 500; one that stops while
/// the body is read a 503.
#[utoipa::path(post, path = "/v0/pipelines/{name}/ingress/{table}", tag = "HTTP input/output",
    params(
        PipelinePath, TablePath, IngressParams,
        ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$",
         description = "Makes a resend safe: a request whose key was applied before is answered 200 with `duplicate: true` and not applied again; one whose key is being applied now is a 409. 1 to 255 visible ASCII characters; anything else is a 400."),
    ),
    request_body(description = INGRESS_BODY, content(
        (String = "text/plain"), (String = "application/json"),
    )),
    responses(
        (status = 200, description = "Every record was accepted.", body = IngressResult),
        (status = 409, description = "A request with the same `Idempotency-Key` is being applied now (`DuplicateRequest`).", body = ErrorBody),
        (status = 503, description = "The pipeline stopped while the request was being read (`PipelineStopped`), or its input cannot be journaled (`InputNotDurable`); `details` say what of the request was applied.", body = ErrorBody),
    ))]
pub(super) async fn ingress(
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
        q.mode.as_deref(),
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
        return Ok(Json(IngressResult {
            token: feeder.token().to_string(),
            accepted: rows,
            duplicate: Some(true),
        })
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
                if !format.line_oriented() && chunker.pending() + bytes.len() > WHOLE_BODY_LIMIT {
                    let message = if format.takes_bytes() {
                        format!("a raw blob body may hold at most {WHOLE_BODY_LIMIT} bytes; send smaller blobs, or mode=lines")
                    } else {
                        format!("a JSON array body may hold at most {WHOLE_BODY_LIMIT} bytes; send newline-delimited changes instead")
                    };
                    return Err(unit.refused(ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "PayloadTooLarge",
                        message,
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
                    listed.push(RejectedRecord {
                        line: e.line as u64,
                        reason: e.reason,
                    });
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
            ApiError::new(StatusCode::BAD_REQUEST, "ParseErrors", message).with_details(
                serde_json::to_value(ParseErrorsDetails {
                    token,
                    accepted,
                    rejected,
                    errors: listed,
                })
                .expect("details are JSON"),
            ),
        );
    }
    Ok(Json(IngressResult {
        token,
        accepted,
        duplicate: None,
    })
    .into_response())
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

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct TokenParams {
    /// A token from an ingress answer.
    #[param(pattern = "^[0-9]{1,20}$")]
    token: String,
}

/// Whether what was sent before a token is processed.
#[derive(Serialize, ToSchema)]
pub struct CompletionStatus {
    status: Completion,
    /// Steps taken.
    step: u64,
}

/// `complete` once processed.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
enum Completion {
    Complete,
    InProgress,
}

/// Whether an input is processed.
///
/// `complete` once everything sent before the token was processed and is
/// visible in every output. A token that is not a number, or was not issued
/// by this run of the pipeline, is a 400; a missing one a plain-text 400. A
/// stopped pipeline is a 400 `IllegalPipelineAction`.
#[utoipa::path(get, path = "/v0/pipelines/{name}/completion_status", tag = "HTTP input/output",
    params(PipelinePath, TokenParams),
    responses((status = 200, description = "The token's status.", body = CompletionStatus)))]
pub(super) async fn completion_status(
    State(s): St,
    Path(name): Path<String>,
    Query(q): Query<TokenParams>,
) -> ApiResult<Json<CompletionStatus>> {
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
    Ok(Json(CompletionStatus {
        status: if done {
            Completion::Complete
        } else {
            Completion::InProgress
        },
        step: feeder.stats.steps.load(Ordering::Relaxed),
    }))
}
