//! The free routes' handlers: health, the key document, the quote, validation, the
//! OpenAPI document and the verify page.

use umpire_core::json::{ParseError, Value, parse};
use umpire_core::patterns::SPEC_REGEX_BYTES;
use umpire_core::product::{
    ALLOWED_PORTS, DOCUMENT_RETENTION_DAYS, FETCH_MAX_REDIRECTS, FETCH_READ_CAP_BYTES,
    FETCH_TIMEOUT_SECS, FETCH_USER_AGENT, MAX_BODY_BYTES, MAX_CHECKS, MAX_NETWORK_CHECKS,
    MAX_TEXT_BYTES, OPERATOR, RATE_LIMITS, REPUTATION_PRICE, SWORN_PASS2_DELAY_SECS, Tier,
};
use umpire_core::signer::key_document;
use umpire_core::spec::{
    CHECK_TYPES, MAX_PATTERN_CHARS, MAX_SCHEMA_PATH_BYTES, MAX_SCHEMA_VALUES, MAX_SPEC_BYTES,
    MAX_SPEC_PATTERN_CHARS, MAX_SPEC_PATTERNS, problems_value,
};
use umpire_core::{ApiError, ErrorCode};

use crate::paid::purchase::{Envelope, assess};
use crate::plumbing::respond;
use crate::{AppState, Keys, Request, Response};

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
        respond::json(200, &crate::erc8004::registration(state.config())),
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

pub async fn quote(state: &AppState, req: &Request) -> Response {
    if let Err(e) = crate::plumbing::limits::enforce_for(state, "quote", req).await {
        return respond::error(&e);
    }
    let tiers: Vec<Value> = Tier::ALL
        .iter()
        .map(|t| {
            let p = t.price();
            let limits = t.limits();
            Value::object()
                .with("tier", t.as_str())
                .with("endpoint", format!("POST /v1/verdicts/{}", t.as_str()))
                .with("price_usd", p.usd_decimal())
                .with("usdc_units", p.usdc_units.to_string())
                .with("description", t.description())
                .with(
                    "checks",
                    Value::object()
                        .with("min", 1u64)
                        .with("max", limits.max_checks)
                        .with("network_max", limits.max_network_checks),
                )
                .with(
                    "answer",
                    if *t == Tier::Sworn {
                        "202 with pass 1; final document at the webhook and GET /v1/verdicts/{id}"
                    } else {
                        "201 with the signed verdict document"
                    },
                )
        })
        .collect();
    let rate_limits = RATE_LIMITS.iter().fold(Value::object(), |v, (bucket, n)| {
        v.with(*bucket, u64::from(*n))
    });
    let body = Value::object()
        .with("issuer", state.config.issuer.as_str())
        .with("operator", OPERATOR)
        .with("currency", "USD")
        .with("tiers", Value::Array(tiers))
        .with(
            "reputation",
            Value::object()
                .with("endpoint", "GET /v1/reputation?merchant=0x...")
                .with("price_usd", REPUTATION_PRICE.usd_decimal())
                .with("usdc_units", REPUTATION_PRICE.usdc_units.to_string()),
        )
        .with(
            "payment",
            Value::object()
                .with("protocol", "x402")
                .with("versions", vec![Value::from(2u64), Value::from(1u64)])
                .with("request_headers", vec!["PAYMENT-SIGNATURE", "X-PAYMENT"])
                .with(
                    "idempotency_key",
                    "Idempotency-Key header, 16 to 128 characters, on paid POSTs",
                )
                .with("rails", state.config.rails_value()),
        )
        .with(
            "limits",
            Value::object()
                .with("checks_per_spec", MAX_CHECKS)
                .with("network_checks_per_verdict", MAX_NETWORK_CHECKS)
                .with(
                    "check_types",
                    CHECK_TYPES
                        .iter()
                        .map(|t| Value::from(*t))
                        .collect::<Vec<_>>(),
                )
                .with("deliverable_text_bytes", MAX_TEXT_BYTES)
                .with("request_body_bytes", MAX_BODY_BYTES)
                .with("json_depth", umpire_core::json::MAX_DEPTH)
                .with("pattern_chars", MAX_PATTERN_CHARS)
                .with("spec_patterns", MAX_SPEC_PATTERNS)
                .with("spec_pattern_chars", MAX_SPEC_PATTERN_CHARS)
                .with("spec_schema_values", MAX_SCHEMA_VALUES)
                .with("spec_schema_path_bytes", MAX_SCHEMA_PATH_BYTES)
                .with("spec_regex_bytes", SPEC_REGEX_BYTES)
                .with("spec_bytes", MAX_SPEC_BYTES)
                .with(
                    "check_time_limit_ms",
                    state.config.check_limit.as_millis() as u64,
                )
                .with("document_retention_days", DOCUMENT_RETENTION_DAYS)
                .with("sworn_pass2_delay_seconds", SWORN_PASS2_DELAY_SECS)
                .with(
                    "fetch",
                    Value::object()
                        .with(
                            "ports",
                            ALLOWED_PORTS
                                .iter()
                                .map(|p| Value::from(*p))
                                .collect::<Vec<_>>(),
                        )
                        .with("max_redirects", u64::from(FETCH_MAX_REDIRECTS))
                        .with("read_cap_bytes", FETCH_READ_CAP_BYTES)
                        .with("timeout_seconds", FETCH_TIMEOUT_SECS)
                        .with("user_agent", FETCH_USER_AGENT),
                ),
        )
        .with("rate_limits_per_minute", rate_limits);
    respond::cache(respond::json(200, &body), "public, max-age=60")
}

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

/// `POST /v1/validate`: every problem of a would-be purchase, the URL-policy verdict
/// of each URL, the normalized spec and its spec_hash. Nothing is fetched or charged.
pub async fn validate(state: &AppState, req: &Request) -> Response {
    if let Err(e) = crate::plumbing::limits::enforce_for(state, "validate", req).await {
        return respond::error(&e);
    }
    let (body, policy) = (req.body().clone(), state.fetch_policy());
    let (tier, mut a) =
        match crate::plumbing::cpu::off_thread(move || validate_assess(&body, &policy)).await {
            Ok(assessed) => assessed,
            Err(e) => return respond::error(&e),
        };
    if let Some(f) = &state.fetcher {
        let until = state.config.clock.deadline(umpire_fetch::LOOKUP_TIMEOUT);
        a.resolve_urls(f, until).await;
    }
    // The answer echoes the normalized spec and hashes the deliverable: as large as
    // the request, so built (and the assessment dropped) off the async threads too.
    crate::plumbing::cpu::off_thread(move || respond::json(200, &validate_answer(tier, &a))).await
}

/// The CPU part of validate: the body read and assessed, nothing looked up.
fn validate_assess(
    body: &[u8],
    policy: &umpire_fetch::Policy,
) -> Result<(Tier, crate::paid::purchase::Assessment), ApiError> {
    let body = json_bytes(body)?;
    let Some(obj) = body.as_object() else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the body must be a JSON object, not {}", body.type_name()),
            "Send {\"tier\":\"basic\",\"spec\":{\"checks\":[...]},\"deliverable\":{...}}.",
        ));
    };
    let tier_names = Tier::ALL.map(Tier::as_str).join(", ");
    let tier = match obj.get("tier") {
        Some(Value::String(t)) => Tier::parse(t).ok_or_else(|| {
            ApiError::new(
                ErrorCode::UnknownTier,
                format!("there is no tier {t:?}"),
                format!("Use one of: {tier_names}."),
            )
        })?,
        Some(other) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("tier must be a string, not {}", other.type_name()),
                format!("Set \"tier\" to one of: {tier_names}."),
            ));
        }
        None => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "tier is required",
                format!("Add \"tier\": one of {tier_names}."),
            ));
        }
    };
    Ok((tier, assess(tier, obj, Envelope::Validate, policy)))
}

fn validate_answer(tier: Tier, a: &crate::paid::purchase::Assessment) -> Value {
    let price = tier.price();
    Value::object()
        .with("valid", a.problems.is_empty())
        .with("tier", tier.as_str())
        .with(
            "price",
            Value::object()
                .with("usd", price.usd_decimal())
                .with("usdc_units", price.usdc_units.to_string()),
        )
        .with("problems", problems_value(&a.problems))
        .with("spec_hash", a.spec.as_ref().map(|s| s.hash.clone()))
        .with(
            "normalized_spec",
            a.spec.as_ref().map(|s| s.normalized.clone()),
        )
        .with("deliverable_hash", a.deliverable.as_ref().map(|d| d.hash()))
        .with(
            "urls",
            Value::Array(a.urls.iter().map(|u| u.to_value()).collect()),
        )
        .with("fetched", false)
}

/// The OpenAPI 3.1 description, kept beside the handlers it describes (a test checks
/// real responses against it, and schemathesis runs against `umpire serve` in make test).
pub const OPENAPI: &str = include_str!("../openapi.json");

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
