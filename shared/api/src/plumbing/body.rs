//! Request bodies read as JSON, with the contract's errors for what cannot be judged
//! faithfully (empty, not JSON, too deep, duplicate keys).

use umpire_core::json::{ParseError, Value, parse};
use umpire_core::{ApiError, ErrorCode};

use crate::plumbing::wire::Request;

/// Parses a JSON request body, refusing what cannot be judged faithfully.
pub fn json_body(req: &Request) -> Result<Value, ApiError> {
    json_bytes(req.body())
}

/// [`json_body`] for a body already taken out of its request.
pub fn json_bytes(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidJson,
            "the request body is empty",
            "Send a JSON object in the body with Content-Type: application/json.",
        ));
    }
    parse(body).map_err(|e: ParseError| {
        ApiError::new(
            ErrorCode::InvalidJson,
            format!("the body is not acceptable JSON: {e}"),
            e.hint,
        )
    })
}
