//! The gate in front of `/v1/*`, `/tokenize` and `/detokenize`: the API key, then the drain.
//! A request that passes counts as being admitted until its handler returns (by then the
//! engine holds it), so a drain that starts meanwhile waits for it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ServerState;
use super::error::ApiError;

/// Answers 401 without the right `Authorization: Bearer` key and 503 while draining;
/// runs the handler otherwise.
pub(super) async fn gate(State(state): State<Arc<ServerState>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        if !given.is_some_and(|given| same_bytes(given.as_bytes(), key.as_bytes())) {
            return ApiError::new(StatusCode::UNAUTHORIZED, "invalid or missing API key").into_response();
        }
    }
    let _admitting = Admitting::enter(&state);
    if state.is_draining() {
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down").into_response();
    }
    next.run(request).await
}

/// Counts a request as being admitted while alive. It is counted before the drain flag is
/// read (both sequentially consistent), so either the request sees the drain or the drain
/// sees the request.
struct Admitting<'a>(&'a ServerState);

impl<'a> Admitting<'a> {
    fn enter(state: &'a ServerState) -> Self {
        state.admitting.fetch_add(1, Ordering::SeqCst);
        Self(state)
    }
}

impl Drop for Admitting<'_> {
    fn drop(&mut self) {
        self.0.admitting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Compares in time that depends on the lengths only.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    #[test]
    fn compares_keys_exactly() {
        assert!(same_bytes(b"key", b"key"));
        assert!(!same_bytes(b"key", b"kez"));
        assert!(!same_bytes(b"key", b"keys"));
        assert!(!same_bytes(b"", b"k"));
    }
}
