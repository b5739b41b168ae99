//! HTTP egress (`POST /v0/pipelines/{name}/egress/{view}`): a view's
//! changes streamed to the client as they are computed, one line per
//! step, with or without backpressure.

use super::*;

/// Chunks an egress stream holds before the pipeline waits (backpressure)
/// or drops them (no backpressure).
const EGRESS_CHUNKS: usize = 64;

/// The formats of HTTP input and output.
#[derive(ToSchema)]
#[allow(dead_code)]
#[schema(rename_all = "lowercase")]
enum TextFormat {
    Json,
    Csv,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct EgressParams {
    /// `json` (the default): changes in `json_data`; `csv`: the row's
    /// columns and its weight in `text_data`. Anything else is a 400.
    #[param(inline, value_type = Option<TextFormat>)]
    format: Option<String>,
    /// `true` (the default): a slow client slows the pipeline; `false`:
    /// its chunks are dropped (counted in `/stats`).
    backpressure: Option<bool>,
    /// Send the view's current contents first, as inserts.
    send_snapshot: Option<bool>,
    /// Accepted for Feldera's clients; only `false` is supported (`true`
    /// is a 400).
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

/// Stream a view's changes.
///
/// A chunked stream of newline-delimited JSON that lasts until the pipeline
/// stops: a first `{"sequence_number": n}` line, then for each step that
/// changed the view `{"sequence_number", "json_data": [{"insert": row},
/// {"delete": row}, …]}` (CSV: `text_data`), and after every step a
/// `{"sequence_number", "processed_steps"}` marker. A stopped pipeline is a
/// 400 `IllegalPipelineAction`.
#[utoipa::path(post, path = "/v0/pipelines/{name}/egress/{view}", tag = "HTTP input/output",
    params(PipelinePath, ViewPath, EgressParams),
    responses(
        (status = 200, description = "The stream (it ends when the pipeline stops).", body = String, content_type = "application/x-ndjson"),
        (status = 429, description = "The pipeline already has `--max-egress-streams` (default 16) egress streams open (`TooManyStreams`); close one first.", body = ErrorBody),
    ))]
pub(super) async fn egress(
    State(s): St,
    Path((name, view)): Path<(String, String)>,
    Query(q): Query<EgressParams>,
) -> ApiResult<Response> {
    let (_, views) = s.manager.relations(&name)?;
    let view =
        resolve(&view, &views).ok_or_else(|| ApiError::unknown_relation("view", &view, &name))?;
    let format = FormatConfig::from_query(q.format.as_deref().unwrap_or("json"), None, None, None)
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
