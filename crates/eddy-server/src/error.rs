//! API errors: an HTTP status and a JSON body in the shape of Feldera's
//! (`{"message", "error_code", "details"}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use serde_json::{json, Value};
use utoipa::ToSchema;

/// An error answered to an API client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable, machine-readable code.
    pub error_code: &'static str,
    /// What went wrong, for people.
    pub message: String,
    /// Structured details (locations, rejected rows, …).
    pub details: Value,
}

/// Results of API handlers.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with a status, a code and a message.
    pub fn new(status: StatusCode, error_code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            error_code,
            message: message.into(),
            details: json!({}),
        }
    }

    /// Adds details.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// 400: the request is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 404 for an unknown pipeline.
    pub fn unknown_pipeline(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "UnknownPipelineName",
            format!("unknown pipeline name '{name}'"),
        )
    }

    /// 404 for an unknown table or view of a pipeline.
    pub fn unknown_relation(kind: &str, name: &str, pipeline: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "UnknownInputOutput",
            format!("pipeline '{pipeline}' has no {kind} named '{name}'"),
        )
    }

    /// 400: the pipeline is not in a state that allows the action.
    pub fn state(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "IllegalPipelineAction", message)
    }

    /// 500: something failed inside the server.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "InternalError", message)
    }
}

/// Every error Eddy itself answers, in the shape of Feldera's.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(as = Error)]
pub struct ErrorBody {
    /// What went wrong, for people.
    pub message: String,
    /// A stable code: `BadRequest`, `InvalidName`, `ProgramError`,
    /// `DuplicateName`, `UnknownPipelineName`, `UnknownInputOutput`,
    /// `IllegalPipelineAction`, `StartFailed`, `ParseErrors`, `QueryError`,
    /// `QueryTimeout`, `QueryOutOfMemory`, `PipelineStopped`,
    /// `InputNotDurable`, `DuplicateRequest`, `PayloadTooLarge`,
    /// `TooManyPipelines`, `TooManyStreams`, `Unauthorized`, `NotFound`,
    /// `InternalError`.
    pub error_code: String,
    /// Structured details; `{}` unless said otherwise. `ProgramError`:
    /// `ProgramErrorDetails`; `ParseErrors`: `ParseErrorsDetails`.
    #[schema(value_type = Object)]
    pub details: Value,
}

impl ErrorBody {
    /// An error with a code and a message, without details.
    pub fn new(error_code: &str, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            error_code: error_code.to_string(),
            details: json!({}),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            message: self.message,
            error_code: self.error_code.to_string(),
            details: self.details,
        };
        (self.status, Json(body)).into_response()
    }
}

/// The text of a panic's payload.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "panic".into())
}
