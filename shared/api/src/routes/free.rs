//! The free routes that publish what we are: health, the key document, the ERC-8004
//! registration file, the OpenAPI document and the verify page. None stores, charges
//! or judges anything.

use umpire_core::json::Value;
use umpire_core::signer::key_document;
use umpire_core::{ApiError, ErrorCode};

use crate::plumbing::protocol::OPENAPI;
use crate::plumbing::respond;
use crate::plumbing::state::{Keys, Response};
use crate::products::verdict::erc8004::registration;

pub fn health(state: &impl Keys) -> Response {
    respond::json(
        200,
        &Value::object()
            .with("status", "ok")
            .with("service", "umpire")
            .with("version", env!("CARGO_PKG_VERSION"))
            // Null until the operator makes the key (`umpire keygen`): the stack is up,
            // its paid routes refuse (503) until then.
            .with(
                "key_id",
                if state.signer().keyed() {
                    Value::from(state.signer().key_id())
                } else {
                    Value::Null
                },
            )
            .with(
                "time",
                umpire_core::time::rfc3339(state.config().clock.now()),
            ),
    )
}

/// The published key document: the active key, then the retired ones.
fn published_keys(state: &impl Keys) -> Value {
    key_document(
        &state.config().issuer,
        state.active_key().as_ref(),
        state.next_key(),
        state.retired_keys(),
    )
}

pub fn key(state: &impl Keys) -> Response {
    if state.public_keys().is_empty() {
        return respond::error(&not_keyed());
    }
    respond::cache(
        respond::json(200, &published_keys(state)),
        "public, max-age=300",
    )
}

/// `/.well-known/agent-registration.json`: Umpire as an ERC-8004 agent (its endpoints,
/// x402 support, and the validator it answers validation requests with).
pub fn agent_registration(state: &impl Keys) -> Response {
    respond::cache(
        respond::json(200, &registration(state.config())),
        "public, max-age=300",
    )
}

/// The refusal of a deployment that has no signing key yet: nothing to publish, nothing
/// to sign with, nothing charged.
pub fn not_keyed() -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        "This deployment has no signing key yet: it publishes no key and sells nothing.",
        "The operator runs `umpire keygen --kms-key-id <the stack's SigningKeyId output>` and deploys again with the SigningSeedCiphertext and SigningPublicKey it prints (docs/aws.md). Nothing was charged.",
    )
}

/// `GET /openapi.json`.
pub fn openapi() -> Response {
    let mut r = http::Response::new(bytes::Bytes::from_static(OPENAPI.as_bytes()));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json; charset=utf-8"),
    );
    respond::cache(r, "public, max-age=300")
}

/// The verification page; the published keys are written into it, so a saved copy
/// verifies offline against the keys of the day it was fetched.
const VERIFY_PAGE: &str = include_str!("../verify.html");

/// `GET /verify`: one self-contained HTML page (no external assets, no network).
pub fn verify_page(state: &impl Keys) -> Response {
    let keys = published_keys(state).to_canonical_string();
    let validator = match &state.config().validator {
        Some(v) => Value::object()
            .with("validator", v.validator.to_checksum(None))
            .with("registry", v.registry.to_string()),
        None => Value::Null,
    }
    .to_canonical_string();
    // Inside <script>, "</" could end the element; "<\/" is the same JSON string.
    let page = VERIFY_PAGE
        .replace("__PUBLISHED_KEYS__", &keys.replace("</", "<\\/"))
        .replace("__PUBLISHED_VALIDATOR__", &validator.replace("</", "<\\/"));
    let mut r = http::Response::new(bytes::Bytes::from(page));
    let headers = r.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // The page needs nothing from anywhere: no outside scripts or styles, and no fetch
    // but the one a user asks for (an RPC URL they type, to read an ERC-8004 answer).
    headers.insert(
        http::header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src https: http://127.0.0.1:* http://localhost:*; base-uri 'none'; form-action 'none'",
        ),
    );
    respond::cache(r, "public, max-age=300")
}
