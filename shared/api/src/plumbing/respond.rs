//! Building responses: JSON bodies in stable JSON, error bodies from [`ApiError`].

use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use umpire_core::{ApiError, Value};

use crate::plumbing::wire::Response;

pub fn json(status: u16, body: &Value) -> Response {
    let mut r = http::Response::new(Bytes::from(body.to_canonical_vec()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

/// Sets Cache-Control.
pub fn cache(mut r: Response, policy: &'static str) -> Response {
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(policy));
    r
}

/// A handler's outcome: 200 with the value under `policy`, or the error body.
pub fn outcome(result: Result<Value, ApiError>, policy: Option<&'static str>) -> Response {
    match (result, policy) {
        (Ok(v), Some(p)) => cache(json(200, &v), p),
        (Ok(v), None) => json(200, &v),
        (Err(e), _) => error(&e),
    }
}

pub fn error(e: &ApiError) -> Response {
    // Errors describe one request; no cache may hand them to another.
    let mut r = cache(json(e.code.status(), &e.to_body()), "no-store");
    if let Some(seconds) = e.retry_after {
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    if e.code == umpire_core::ErrorCode::MethodNotAllowed
        && let Some(Value::String(allow)) =
            e.details.iter().find(|(k, _)| k == "allow").map(|(_, v)| v)
        && let Ok(v) = HeaderValue::from_str(allow)
    {
        r.headers_mut().insert(header::ALLOW, v);
    }
    r
}
