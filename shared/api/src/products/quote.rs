//! `GET /v1/quote`: the price list of everything sold (each verdict tier, the
//! reputation report), how to pay, and the limits a purchase must keep.

use umpire_core::json::Value;
use umpire_core::patterns::SPEC_REGEX_BYTES;
use umpire_core::product::{
    ALLOWED_PORTS, DOCUMENT_RETENTION_DAYS, FETCH_MAX_REDIRECTS, FETCH_READ_CAP_BYTES,
    FETCH_TIMEOUT_SECS, FETCH_USER_AGENT, MAX_BODY_BYTES, MAX_CHECKS, MAX_NETWORK_CHECKS,
    MAX_TEXT_BYTES, OPERATOR, RATE_LIMITS, REPUTATION_PRICE, SWORN_PASS2_DELAY_SECS, Tier,
};
use umpire_core::spec::{
    CHECK_TYPES, MAX_PATTERN_CHARS, MAX_SCHEMA_PATH_BYTES, MAX_SCHEMA_VALUES, MAX_SPEC_BYTES,
    MAX_SPEC_PATTERN_CHARS, MAX_SPEC_PATTERNS,
};

use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};

/// `GET /v1/quote`.
pub async fn quote(state: &AppState, req: &Request) -> Response {
    if let Err(e) = crate::plumbing::limits::enforce_for(state, "quote", req).await {
        return respond::error(&e);
    }
    let rate_limits = RATE_LIMITS.iter().fold(Value::object(), |v, (bucket, n)| {
        v.with(*bucket, u64::from(*n))
    });
    let body = Value::object()
        .with("issuer", state.config.issuer.as_str())
        .with("operator", OPERATOR)
        .with("currency", "USD")
        .with("tiers", tiers())
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
        .with("limits", limits(state))
        .with("rate_limits_per_minute", rate_limits);
    respond::cache(respond::json(200, &body), "public, max-age=60")
}

/// Each tier: its endpoint, price, description, how many checks it takes and how it
/// answers.
fn tiers() -> Value {
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
    Value::Array(tiers)
}

/// The limits a purchase must keep, as the contract states them.
fn limits(state: &AppState) -> Value {
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
        )
}
