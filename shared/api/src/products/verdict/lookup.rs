//! `GET /v1/verdicts/{id}` (status, pass-1 preview, final document, behind the
//! one-time secret) and `GET /v1/find` (sworn verdict ids by spec_hash + webhook).

use umpire_core::json::{Value, parse};
use umpire_core::{ApiError, ErrorCode};

use crate::plumbing::limits;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};
use crate::products::verdict::denied::{Denied, not_found, stored_verdict};
use crate::products::verdict::siwx;

/// Query parameters, percent-decoded; the last of a repeated name wins.
pub fn query_param(req: &Request, name: &str) -> Option<String> {
    let q = req.uri().query()?;
    url::form_urlencoded::parse(q.as_bytes())
        .filter(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
        .last()
}

pub async fn status(state: &AppState, req: &Request) -> Response {
    match status_inner(state, req).await {
        Ok(v) => respond::outcome(Ok(v), Some("no-store")),
        Err(Denied::Plainly(e)) => respond::error(&e),
        Err(Denied::Challenging(e)) => siwx::challenge(state, req, &e),
    }
}

async fn status_inner(state: &AppState, req: &Request) -> Result<Value, Denied> {
    limits::enforce_for(state, "status", req).await?;
    let id = crate::plumbing::routes::last_segment(req);
    if let Some(proof) = req.headers().get(umpire_x402::siwx::SIGN_IN_WITH_X) {
        let rec = siwx::proven(state, id, proof).await?;
        return Ok(status_body(&rec)?);
    }
    let bearer = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(|s| s.trim().to_owned());
    let Some(secret) = bearer
        .or_else(|| query_param(req, "secret"))
        .filter(|s| !s.is_empty())
    else {
        // A verdict bought to answer an ERC-8004 validation request is public: its
        // buyer chose a public registry, whose answer links here (responseURI).
        if let Some(rec) = public_verdict(state, id).await? {
            return Ok(public_body(&status_body(&rec)?));
        }
        return Err(Denied::Challenging(ApiError::new(
            ErrorCode::InvalidRequest,
            "the verdict's secret (or a proof from the wallet that paid) is required",
            "Send the one-time secret from the purchase response as Authorization: Bearer <secret> (or ?secret=), or sign the sign-in-with-x challenge in this answer with the wallet that paid and send it in the SIGN-IN-WITH-X header.",
        )));
    };
    let rec = stored_verdict(state, id).await?;
    if !crate::checkout::secret::matches(&rec.secret_hash, &secret) {
        return Err(not_found().into());
    }
    Ok(status_body(&rec)?)
}

/// The verdict `id`, if its signed document answers a validation request (its
/// `job_ref` names one); None for every other verdict, whether it exists or not.
async fn public_verdict(
    state: &AppState,
    id: &str,
) -> Result<Option<umpire_store::VerdictRecord>, Denied> {
    if !crate::products::verdict::denied::is_verdict_id(id) {
        return Ok(None);
    }
    let now = state.config.clock.now();
    let rec = match state.store.get_verdict(id, now).await {
        Ok(Some(rec)) => rec,
        Ok(None) => return Ok(None),
        Err(e) => return Err(crate::plumbing::state::internal(e).into()),
    };
    let public = rec
        .document
        .as_deref()
        .and_then(|t| parse(t.as_bytes()).ok())
        .and_then(|d| d.get("job_ref").and_then(Value::as_str).map(str::to_owned))
        .is_some_and(|r| r.starts_with(umpire_escrow::validation::VALIDATION_REF_PREFIX));
    Ok(public.then_some(rec))
}

/// The public view of a verdict: what its status read shows, less the webhook's fate
/// (the buyer's business).
fn public_body(full: &Value) -> Value {
    let mut v = full.clone();
    if let Value::Object(o) = &mut v {
        o.remove("webhook_delivery");
    }
    v.with("public", true)
}

/// What a verdict's status read shows.
fn status_body(rec: &umpire_store::VerdictRecord) -> Result<Value, ApiError> {
    let embed = |text: &Option<String>| -> Result<Value, ApiError> {
        match text {
            None => Ok(Value::Null),
            Some(t) => parse(t.as_bytes()).map_err(|e| {
                crate::plumbing::state::internal(format!("stored document unreadable: {e}"))
            }),
        }
    };
    Ok(Value::object()
        .with("verdict_id", rec.verdict_id.as_str())
        .with("tier", rec.tier.as_str())
        .with("status", rec.status.as_str())
        .with("created_at", umpire_core::time::rfc3339(rec.created_at))
        .with("expires_at", umpire_core::time::rfc3339(rec.expires_at))
        .with("preview", embed(&rec.preview)?)
        .with("document", embed(&rec.document)?)
        .with(
            "webhook_delivery",
            match (&rec.webhook_url, &rec.document) {
                (Some(_), Some(_)) => Some(crate::products::verdict::sworn::webhook_status(rec)),
                _ => None,
            },
        ))
}

pub async fn find(state: &AppState, req: &Request) -> Response {
    respond::outcome(find_inner(state, req).await, Some("no-store"))
}

async fn find_inner(state: &AppState, req: &Request) -> Result<Value, ApiError> {
    limits::enforce_for(state, "find", req).await?;
    let hint = "Send GET /v1/find?spec_hash=<64 hex>&webhook=<the exact webhook_url of the purchase, URL-encoded>.";
    let spec_hash = query_param(req, "spec_hash")
        .map(|s| s.to_ascii_lowercase())
        .filter(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                "spec_hash must be 64 hex characters",
                hint,
            )
        })?;
    let webhook = query_param(req, "webhook")
        .filter(|w| !w.is_empty() && w.chars().count() <= umpire_fetch::policy::MAX_URL_CHARS)
        .ok_or_else(|| ApiError::new(ErrorCode::InvalidRequest, "webhook is required", hint))?;
    let now = state.config.clock.now();
    let ids = state
        .store
        .find_verdicts(&spec_hash, &webhook, now)
        .await
        .map_err(crate::plumbing::state::internal)?;
    Ok(Value::object()
        .with("spec_hash", spec_hash)
        .with("webhook", webhook)
        .with("verdict_ids", ids))
}
