//! `POST /v1/validate`: a would-be verdict purchase assessed as the paid route would,
//! without fetching, judging or charging.

use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_core::spec::problems_value;
use umpire_core::{ApiError, ErrorCode};

use crate::plumbing::body::json_bytes;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};
use crate::products::verdict::purchase::{Assessment, Envelope, assess};

/// `POST /v1/validate`: every problem of a would-be purchase, the URL-policy verdict
/// of each URL, the normalized spec and its spec_hash. Nothing is fetched or charged.
pub async fn validate(state: &AppState, req: &Request) -> Response {
    if let Err(e) = crate::plumbing::limits::enforce_for(state, "validate", req).await {
        return respond::error(&e);
    }
    let (body, policy) = (req.body().clone(), state.fetch_policy());
    let assessed = crate::plumbing::cpu::off_thread(move || {
        json_bytes(&body).and_then(|body| validate_assess(&body, &policy))
    })
    .await;
    answer(state, assessed).await
}

/// The MCP `validate` tool: the same, from its arguments as the MCP route parsed them
/// (serializing them to parse them again would double the cost of a large body).
pub async fn validate_parsed(state: &AppState, req: &Request, body: Value) -> Response {
    if let Err(e) = crate::plumbing::limits::enforce_for(state, "validate", req).await {
        return respond::error(&e);
    }
    let policy = state.fetch_policy();
    let assessed = crate::plumbing::cpu::off_thread(move || validate_assess(&body, &policy)).await;
    answer(state, assessed).await
}

async fn answer(state: &AppState, assessed: Result<(Tier, Assessment), ApiError>) -> Response {
    let (tier, mut a) = match assessed {
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

/// The CPU part of validate: the body assessed, nothing looked up. Takes the body so
/// that it is dropped here, off the async threads.
fn validate_assess(
    body: &Value,
    policy: &umpire_fetch::Policy,
) -> Result<(Tier, Assessment), ApiError> {
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

fn validate_answer(tier: Tier, a: &Assessment) -> Value {
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
