//! A purchase's answer: prepared before settlement, delivered (stored, with its settlement)
//! after, or voided.

use std::time::Duration;

use http::HeaderValue;
use umpire_core::{ApiError, ErrorCode, Value};
use umpire_host::Deadline;
use umpire_pay::PaymentContext;
use umpire_store::{StoreError, VerdictRecord};
use umpire_x402::{FailureKind, FailureReason, PaymentFailure, SettlementResponse};

use crate::checkout::ledger::Prepared;
use crate::checkout::secret;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Response};

use super::header::{AnswerHeader, settlement_header};
use super::sale::RETRY_AFTER_SECS;

/// Tries to persist a settled verdict before giving up on the status link (the
/// customer paid: the answer is given even if the record cannot be stored).
pub(super) const PERSIST_ATTEMPTS: u32 = 3;

/// Stores a settled verdict, a few times if the store falters and the deadline allows;
/// `true` once it is there (also when an earlier attempt stored it and lost the
/// answer). Past the deadline the paid answer goes out rather than being cut off by
/// the platform; the purchase's reconciler stores it.
pub(super) async fn persist(state: &AppState, record: &VerdictRecord, deadline: Deadline) -> bool {
    let until = deadline.less(ANSWER_MARGIN);
    for attempt in 1..=PERSIST_ATTEMPTS {
        if !until.allows(Duration::from_millis(50)) {
            break;
        }
        let put =
            tokio::time::timeout_at(until.instant().into(), state.store.put_verdict(record)).await;
        match put {
            Ok(Ok(()) | Err(StoreError::AlreadyExists)) => return true,
            Ok(Err(e)) => {
                tracing::error!(error = %e, attempt, verdict_id = record.verdict_id, "could not store a settled verdict");
                tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(attempt)))
                    .await;
            }
            Err(_) => {
                tracing::error!(
                    verdict_id = record.verdict_id,
                    "storing a settled verdict overran the deadline"
                );
                break;
            }
        }
    }
    false
}

/// Kept between the last store write and the deadline, to answer in.
pub(super) const ANSWER_MARGIN: Duration = Duration::from_millis(300);

/// The answer of a settled purchase, its settlement in the body and in the x402
/// header, and whether its verdict is stored. The one-time secret is given with a
/// stored verdict, and with one not stored yet when `followed`: its reconciler stores
/// it from the prepared answer (the ledger does not say Settled before it is), so its
/// status link works moments later. Otherwise it is withheld (there may never be a
/// status to use it on); the customer's retry stores the verdict, and a payment
/// signed now gets the secret.
pub(super) async fn deliver(
    state: &AppState,
    answer_in: AnswerHeader,
    prepared: Prepared,
    settlement: &SettlementResponse,
    deadline: Deadline,
    followed: bool,
) -> (Response, bool) {
    let stored = match &prepared.record {
        Some(record) => persist(state, record, deadline).await,
        None => true,
    };
    let mut body = umpire_core::json::parse(prepared.body.as_bytes()).unwrap_or(Value::Null);
    // The secret is derived, never written down (see `secret`).
    if stored || followed {
        body = secret::reveal(state.signer.as_ref(), body);
    }
    body = set_at(body, &prepared.settlement_at, settlement_value(settlement));
    let mut r = respond::cache(respond::json(prepared.status, &body), "no-store");
    if let Some(v) = prepared
        .location
        .as_deref()
        .and_then(|l| HeaderValue::from_str(l).ok())
    {
        r.headers_mut().insert(http::header::LOCATION, v);
    }
    if let (name, Some(v)) = settlement_header(answer_in, settlement) {
        r.headers_mut().insert(name, v);
    }
    (r, stored)
}

/// `value` placed at `path` inside `body` (objects along the way).
pub(super) fn set_at(body: Value, path: &[String], value: Value) -> Value {
    match path {
        [] => value,
        [last] => body.with(last.as_str(), value),
        [first, rest @ ..] => {
            let inner = body.get(first).cloned().unwrap_or_else(Value::object);
            body.with(first.as_str(), set_at(inner, rest, value))
        }
    }
}

/// Why a judged purchase was voided (nothing kept, claims released).
pub enum Void {
    Settlement(PaymentFailure),
    Internal(ApiError),
}

impl Void {
    /// The settlement could not be completed nor refused (the chain or facilitator
    /// was unreachable): the money may have moved, so nothing paid for may be undone.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, Void::Settlement(f) if f.kind == FailureKind::Unavailable)
    }
}

/// A settlement as the body of an answer shows it.
pub(super) fn settlement_value(s: &SettlementResponse) -> Value {
    serde_json::to_value(s)
        .map(Value::from)
        .unwrap_or(Value::Null)
}

/// The answer when a purchase's settlement has no outcome by its deadline (the chain or
/// the facilitator did not answer, or our transfer is broadcast and not confirmed): `502
/// chain_unavailable` to retry, never a `402`, since the money may be moving. Its
/// `PAYMENT-RESPONSE` says `settlement_pending` (with the transaction when one is known),
/// as x402's servers say it. The purchase is pending from here: the service follows it
/// to its end, and the identical retry, with the same payment or none, is answered with
/// it (see `pending`), never charged twice.
pub(super) fn settlement_unknown(
    answer_in: AnswerHeader,
    ctx: &PaymentContext,
    failure: &PaymentFailure,
    until: u64,
) -> Response {
    let mut e = ApiError::new(
        ErrorCode::ChainUnavailable,
        match &failure.transaction {
            Some(tx) => format!(
                "the payment's transfer {tx} is broadcast and not confirmed yet, so the purchase is not answered yet; it is pending, and Umpire follows it to its end"
            ),
            None => "the payment's settlement has no outcome yet (chain or facilitator slow or unreachable); the purchase is pending, and Umpire follows it to its end"
                .to_owned(),
        },
        "Do not sign a new payment. After Retry-After, retry the identical request with the same payment (or, under the same Idempotency-Key, with none; without a key, a request with no payment is asked to pay again): once the chain confirms the transfer you get the purchase, and once the payment can no longer land (pending_until) it is voided and a new payment is asked for. You are never charged twice for it.",
    )
    .with_detail("reason", FailureReason::SettlementPending.as_str())
    .with_detail("pending_until", umpire_core::time::rfc3339(until))
    .with_retry_after(RETRY_AFTER_SECS);
    if let Some(tx) = &failure.transaction {
        e = e.with_detail("transaction", tx.as_str());
    }
    let mut r = respond::error(&e);
    let pending = SettlementResponse {
        success: false,
        transaction: failure.transaction.clone().unwrap_or_default(),
        network: Some(ctx.rail.network.clone()),
        payer: ctx.claimed_payer(),
        error_reason: Some(FailureReason::SettlementPending),
        extensions: Default::default(),
        extra: Default::default(),
    };
    if let (name, Some(v)) = settlement_header(answer_in, &pending) {
        r.headers_mut().insert(name, v);
    }
    r
}
