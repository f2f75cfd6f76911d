//! The public routes: one Lambda each in AWS, all of them in `umpire serve`.

use http::Method;
use umpire_core::{ApiError, ErrorCode};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Health,
    Key,
    Quote,
    Validate,
    Status,
    Find,
    /// `POST /v1/verdicts/{tier}`: a paid verdict.
    Buy,
    /// `POST /v1/feedback`: free, proven by a payment and the payer's signature.
    Feedback,
    /// `GET /v1/reputation?merchant=`: the paid, signed reputation report.
    Reputation,
    /// `POST /mcp`: the Model Context Protocol (streamable HTTP).
    Mcp,
    /// `GET /openapi.json`: the OpenAPI 3.1 description of every route.
    OpenApi,
    /// `GET /verify`: a self-contained page that runs the verification recipe.
    VerifyPage,
    /// `GET /.well-known/agent-registration.json`: Umpire as an ERC-8004 agent.
    AgentRegistration,
}

/// (method, path, route): the routing table, also what `not_found` lists.
pub const TABLE: &[(&str, &str, Route)] = &[
    ("GET", "/healthz", Route::Health),
    ("GET", "/.well-known/umpire-key.json", Route::Key),
    ("GET", "/v1/quote", Route::Quote),
    ("POST", "/v1/validate", Route::Validate),
    ("GET", "/v1/verdicts/{id}", Route::Status),
    ("POST", "/v1/verdicts/{tier}", Route::Buy),
    ("GET", "/v1/find", Route::Find),
    ("POST", "/v1/feedback", Route::Feedback),
    ("GET", "/v1/reputation", Route::Reputation),
    ("POST", "/mcp", Route::Mcp),
    ("GET", "/openapi.json", Route::OpenApi),
    ("GET", "/verify", Route::VerifyPage),
    (
        "GET",
        "/.well-known/agent-registration.json",
        Route::AgentRegistration,
    ),
];

/// Whether a concrete path matches a table path (`{id}` matches one segment).
fn matches(pattern: &str, path: &str) -> bool {
    let (mut p, mut q) = (pattern.split('/'), path.split('/'));
    loop {
        match (p.next(), q.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if a.starts_with('{') && !b.is_empty() => {}
            (Some(a), Some(b)) if a == b => {}
            _ => return false,
        }
    }
}

/// The last path segment: the `{id}` or `{tier}` of the routes that take one.
pub fn last_segment(req: &crate::plumbing::wire::Request) -> &str {
    req.uri()
        .path()
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
}

pub fn route_for(method: &Method, path: &str) -> Result<Route, ApiError> {
    let path = if path.len() > 1 {
        path.trim_end_matches('/')
    } else {
        path
    };
    let mut allowed = Vec::new();
    for (m, p, r) in TABLE {
        if matches(p, path) {
            if method.as_str() == *m || (method == Method::HEAD && *m == "GET") {
                return Ok(*r);
            }
            allowed.push(*m);
        }
    }
    if !allowed.is_empty() {
        return Err(ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("{method} is not served at {path}"),
            format!("Use {} {path}.", allowed.join(" or ")),
        )
        .with_detail("allow", allowed.join(", ")));
    }
    Err(ApiError::new(
        ErrorCode::NotFound,
        format!("nothing is served at {path}"),
        format!(
            "Routes: {}. GET /v1/quote lists prices and limits.",
            TABLE
                .iter()
                .map(|(m, p, _)| format!("{m} {p}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}
