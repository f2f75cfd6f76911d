//! A purchase whose settlement's outcome is not known yet is a state of its own: its
//! Idempotency-Key and its payment answer it, with or without a payment header, with
//! the original payment or a re-encoded copy, until the chain decides. The answer is
//! x402's `settlement_pending` (as `@x402/core` reports it in `PAYMENT-RESPONSE`:
//! `success: false`, `errorReason: "settlement_pending"`, the transaction on its way)
//! with `Retry-After`, under `409 in_flight` ("a retry while the original is still
//! settling"): never a `402`, which would invite a second payment while the first may
//! still land.

use umpire_core::{ApiError, ErrorCode};
use umpire_store::PaymentState;
use umpire_x402::types::{Account, Network};
use umpire_x402::{FailureReason, SettlementResponse};

use crate::checkout::idempotency::{self, RequestHash, ScopedKey};
use crate::checkout::ledger::{PaymentKey, Prepared};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Response};

use super::header::{AnswerHeader, settlement_header};
use super::sale::RETRY_AFTER_SECS;

/// What a pending purchase's answer says of it.
#[derive(Debug, Clone, Default)]
pub(super) struct PendingState {
    pub(super) network: Option<Network>,
    pub(super) payer: Option<Account>,
    /// The settlement's transaction, when one is known to be on its way.
    pub(super) transaction: Option<String>,
    /// The last moment (unix seconds) the payment could still land.
    pub(super) until: Option<u64>,
}

/// The answer to a request for a purchase whose settlement is pending.
pub(super) fn answer(answer_in: AnswerHeader, p: &PendingState) -> Response {
    let mut e = ApiError::new(
        ErrorCode::InFlight,
        match &p.transaction {
            Some(tx) => format!(
                "this request's purchase is paid with a payment whose transfer {tx} is not confirmed yet; Umpire follows it to its end"
            ),
            None => "this request's purchase is paid with a payment whose settlement is not confirmed yet; Umpire follows it to its end".to_owned(),
        },
        "Do not sign a new payment. After Retry-After, retry the identical request with the same payment (or, under the same Idempotency-Key, with none): once the chain confirms the transfer you get the purchase, and once the payment can no longer land (pending_until) it is voided and a new payment is asked for.",
    )
    .with_detail("reason", FailureReason::SettlementPending.as_str())
    .with_retry_after(RETRY_AFTER_SECS);
    if let Some(tx) = &p.transaction {
        e = e.with_detail("transaction", tx.as_str());
    }
    if let Some(until) = p.until {
        e = e.with_detail("pending_until", umpire_core::time::rfc3339(until));
    }
    let mut r = respond::error(&e);
    let pending = SettlementResponse {
        success: false,
        transaction: p.transaction.clone().unwrap_or_default(),
        network: p.network.clone(),
        payer: p.payer,
        error_reason: Some(FailureReason::SettlementPending),
        extensions: Default::default(),
        extra: Default::default(),
    };
    if let (name, Some(v)) = settlement_header(answer_in, &pending) {
        r.headers_mut().insert(name, v);
    }
    r
}

/// The pending state of the purchase paid with `payment_key`, as its ledger entry
/// says; `None` when it is not pending (any more).
pub(super) async fn state_of(state: &AppState, payment_key: &PaymentKey) -> Option<PendingState> {
    let now = state.config.clock.now();
    let entry = state.store.get_payment(payment_key, now).await.ok()??;
    let PaymentState::Prepared { answer, kept_until } = entry.state else {
        return None;
    };
    let prepared: Prepared = serde_json::from_str(&answer).ok()?;
    let mut p = PendingState {
        until: Some(kept_until),
        ..PendingState::default()
    };
    if let Some(sale) = prepared.sale {
        p.network = Some(sale.requirements.network.clone());
        p.transaction = sale.transaction;
        p.payer = umpire_x402::PaymentPayload::from_json(sale.payment)
            .ok()
            .and_then(|pay| umpire_pay::settle::payer_named_in(&pay));
    }
    Some(p)
}

/// The answer for a key bound to the purchase paid with `payment_key`: its pending
/// state, or, when it has ended meanwhile, a moment's wait. A key `bound` to a purchase
/// that ended without its key being ended (a store that failed then) is put right here
/// from the ledger: completed with the purchase's answer when it was delivered for that
/// very request, released when it was voided or is gone, so the retry finds it so.
pub(super) async fn answer_for(
    state: &AppState,
    answer_in: AnswerHeader,
    payment_key: &PaymentKey,
    bound: Option<(&ScopedKey, &RequestHash)>,
) -> Response {
    if let Some(p) = state_of(state, payment_key).await {
        return answer(answer_in, &p);
    }
    if let Some((key, hash)) = bound {
        let ended = end(state, payment_key, key, hash).await;
        if let Err(e) = ended {
            tracing::error!(error = %e.message, "could not put right a key whose purchase ended");
        }
    }
    respond::error(
        &ApiError::new(
            ErrorCode::InFlight,
            "this request's purchase has just been decided",
            "Retry the identical request in a second: you get its answer (or, if its payment could not land, a new 402).",
        )
        .with_retry_after(1),
    )
}

/// Ends `key`, bound to the purchase paid with `payment_key`, as the ledger shows that
/// purchase ended: completed with its stored answer (the secret's mark kept) when it
/// was delivered for this very request and the key is a paid request's; released when
/// it was voided, lapsed unprepared (nothing of ours was ever sent), is gone, or the
/// key is the unpaid copy (an unpaid request never gets a purchase's answer).
async fn end(
    state: &AppState,
    payment_key: &PaymentKey,
    key: &ScopedKey,
    hash: &RequestHash,
) -> Result<bool, ApiError> {
    let now = state.config.clock.now();
    let unpaid = key.as_str().starts_with(idempotency::UNPAID_SCOPE);
    let entry = state
        .store
        .get_payment(payment_key, now)
        .await
        .map_err(crate::plumbing::state::internal)?;
    match entry.map(|e| {
        (
            e.request_hash == hash.as_str(),
            e.held_until <= now,
            e.state,
        )
    }) {
        Some((true, _, PaymentState::Settled { response, .. })) if !unpaid => state
            .store
            .complete_bound_idempotency(
                key,
                hash,
                payment_key,
                &response,
                now + idempotency::COMPLETED_SECS,
            )
            .await
            .map_err(crate::plumbing::state::internal),
        // Prepared (pending) or claimed and still held: someone is on it.
        Some((_, false, PaymentState::Claimed | PaymentState::Prepared { .. }))
        | Some((_, _, PaymentState::Prepared { .. })) => Ok(false),
        _ => idempotency::release_bound(state, key, hash, payment_key).await,
    }
}
