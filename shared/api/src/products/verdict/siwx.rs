//! A verdict read by the wallet that paid for it, in place of the one-time secret:
//! x402's sign-in-with-x. A status read without a usable credential declares the
//! challenge (`extensions["sign-in-with-x"]`, in the body and in a `PAYMENT-REQUIRED`
//! header with no payment options, as x402 tooling reads it); a proof signed for our
//! domain and for that verdict's URI, fresh, unused, verifying, and from the verdict's
//! payer opens it. Any other wallet is told what an unknown id is told.

use http::HeaderValue;
use umpire_core::json::Value;
use umpire_core::{ApiError, ErrorCode};
use umpire_store::VerdictRecord;
use umpire_x402::siwx::{self, Expected, Proof, SIGN_IN_WITH_X};
use umpire_x402::types::{Account, Network};

use super::denied::{Denied, not_found, stored_verdict};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};

/// The issuer's host (and port), as a sign-in message names the domain.
fn domain(issuer: &str) -> String {
    siwx::domain_of(issuer).unwrap_or_default()
}

fn verdict_uri(state: &AppState, id: &str) -> String {
    format!("{}/v1/verdicts/{id}", state.config.issuer)
}

/// The verdict `id`, if `header` holds a valid proof from the wallet that paid for it.
pub(super) async fn proven(
    state: &AppState,
    id: &str,
    header: &HeaderValue,
) -> Result<VerdictRecord, Denied> {
    let refused = |e: siwx::Refused| {
        Denied::Challenging(
            ApiError::new(
                ErrorCode::BadSignature,
                format!("the sign-in-with-x proof was refused ({}): {}", e.reason, e.message),
                "Sign the fresh challenge in this answer (extensions[\"sign-in-with-x\"]: a new nonce, valid 5 minutes) with the wallet that paid for the verdict and send it in the SIGN-IN-WITH-X header, or send the one-time secret as Authorization: Bearer <secret>.",
            )
            .with_detail("reason", e.reason),
        )
    };
    let proof = header
        .to_str()
        .map_err(|_| siwx::Refused {
            reason: "invalid_siwx_payload",
            message: "the header is not ASCII".into(),
        })
        .and_then(Proof::from_header)
        .map_err(refused)?;
    let now = state.config.clock.now();
    let expected = Expected {
        domain: &domain(&state.config.issuer),
        uri: &verdict_uri(state, id),
        now,
    };
    let wallet = siwx::verify(&proof, &expected).map_err(refused)?;
    // Single use, counted once the proof verifies (nobody else can spend the nonce):
    // the count lives as long as the proof could.
    let nonce = proof.nonce().unwrap_or_default();
    let uses = state
        .store
        .count_request(&format!("siwx:{nonce}"), proof.expires_at())
        .await
        .map_err(crate::plumbing::state::internal)?;
    if uses > 1 {
        return Err(refused(siwx::Refused {
            reason: "invalid_siwx_nonce",
            message: "this proof's nonce was used already".into(),
        }));
    }
    let rec = stored_verdict(state, id).await?;
    let paid_by = rec.payer.as_deref().and_then(|p| p.parse::<Account>().ok());
    if paid_by != Some(wallet) {
        return Err(not_found().into());
    }
    Ok(rec)
}

/// `e` as answered with a sign-in-with-x challenge for the verdict asked about.
pub(super) fn challenge(state: &AppState, req: &Request, e: &ApiError) -> Response {
    let id = crate::plumbing::routes::last_segment(req);
    let uri = verdict_uri(state, id);
    let mut networks: Vec<Network> = Vec::new();
    for rail in &state.config.rails.rails {
        if !networks.contains(&rail.network) {
            networks.push(rail.network.clone());
        }
    }
    let nonce = hex::encode(umpire_host::random_bytes::<16>());
    let declaration = siwx::declaration(
        &domain(&state.config.issuer),
        &uri,
        &networks,
        &nonce,
        state.config.clock.now(),
    );
    let extensions = Value::object().with(SIGN_IN_WITH_X, Value::from(declaration.clone()));
    let mut r = respond::error(&e.clone().with_detail("extensions", extensions));
    // The shape x402 tooling reads challenges from: a PaymentRequired with no way to
    // pay, only to sign in.
    let required = serde_json::json!({
        "x402Version": 2,
        "error": e.message,
        "resource": {"url": uri, "description": "a verdict's status and document", "mimeType": "application/json"},
        "accepts": [],
        "extensions": {SIGN_IN_WITH_X: declaration},
    });
    if let Ok(v) = HeaderValue::from_str(&umpire_x402::encode_header(&required)) {
        r.headers_mut()
            .insert(umpire_x402::HEADER_PAYMENT_REQUIRED, v);
    }
    r
}
