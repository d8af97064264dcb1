//! Errors as OpenAI-style JSON bodies with the right HTTP status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::engine::EngineError;

/// An error answer: status plus `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong, for a person.
    pub message: String,
    /// The offending parameter, when one is to blame.
    pub param: Option<String>,
}

/// Every status the API answers an error with, and when: the table of the server reference
/// (`docs/src/reference/server.md`, checked current by `tests/docs_reference.rs`).
pub const ERROR_STATUSES: [(StatusCode, &str); 6] = [
    (
        StatusCode::BAD_REQUEST,
        "A body that is not JSON or does not fit the request type, a bad parameter, a \
         constraint that does not compile, a prompt longer than `max_model_len`, a request over \
         a per-request limit; `param` names the field to blame.",
    ),
    (
        StatusCode::UNAUTHORIZED,
        "`--api-key` is set and the request has no `Authorization: Bearer KEY` with it.",
    ),
    (StatusCode::NOT_FOUND, "`model` names another model than the one served (`param` is `model`)."),
    (StatusCode::PAYLOAD_TOO_LARGE, "The body is larger than `--max-request-body-bytes`."),
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        "The device failed the step that ran the request, or the request was still running when \
         a drain's `--shutdown-timeout` ran out.",
    ),
    (
        StatusCode::SERVICE_UNAVAILABLE,
        "The waiting queue is full (`--max-waiting-requests`), the server is draining after \
         SIGTERM, or the device was lost (also `/health`).",
    ),
];

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    param: Option<&'a str>,
    code: Option<u16>,
}

impl ApiError {
    /// A 400 blaming `param`.
    pub fn bad_request(message: impl Into<String>, param: &str) -> Self {
        Self { status: StatusCode::BAD_REQUEST, message: message.into(), param: Some(param.to_owned()) }
    }

    /// An error with `status` and no parameter to blame.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), param: None }
    }

    /// OpenAI's error type name for the status.
    fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::BAD_REQUEST | StatusCode::UNAUTHORIZED | StatusCode::PAYLOAD_TOO_LARGE => {
                "invalid_request_error"
            }
            StatusCode::NOT_FOUND => "not_found_error",
            StatusCode::SERVICE_UNAVAILABLE => "service_unavailable_error",
            _ => "server_error",
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let status = match &error {
            EngineError::Constraint(error) => {
                return Self::bad_request(error.to_string(), "structured_outputs");
            }
            EngineError::BiasOutOfVocab { .. } => return Self::bad_request(error.to_string(), "logit_bias"),
            EngineError::PromptLogprobsUnsupported => {
                return Self::bad_request(error.to_string(), "prompt_logprobs");
            }
            EngineError::InvalidParams(_)
            | EngineError::Rejected(_)
            | EngineError::TokenOutOfVocab { .. }
            | EngineError::Tokenizer(_)
            | EngineError::Chat(_)
            | EngineError::Lora(_) => StatusCode::BAD_REQUEST,
            EngineError::Overloaded { .. } | EngineError::DeviceLost(_) => StatusCode::SERVICE_UNAVAILABLE,
            EngineError::Model(_)
            | EngineError::Config(_)
            | EngineError::Executor(_)
            | EngineError::StepFailed { .. }
            | EngineError::Gpu(_)
            | EngineError::Sim(_)
            | EngineError::UnknownRequest(_)
            | EngineError::Stopped => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, error.to_string())
    }
}

impl ApiError {
    fn body(&self) -> ErrorBody<'_> {
        ErrorBody {
            error: ErrorDetail {
                message: &self.message,
                kind: self.kind(),
                param: self.param.as_deref(),
                code: Some(self.status.as_u16()),
            },
        }
    }

    /// The JSON body alone, e.g. for an error chunk in an event stream.
    pub fn to_json(&self) -> String {
        serde_json::to_string(&self.body()).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}
