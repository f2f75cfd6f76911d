//! The paywall's front door: what a request's Idempotency-Key decides before its payment
//! is looked at.

use umpire_pay::PaymentContext;

use crate::checkout::idempotency::{self, Decision};
use crate::checkout::ledger;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Response};

use super::asking::Asking;

/// What the request's key says before its payment is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyState {
    /// No key, or a key free for this request.
    Fresh,
    /// The key completed this very request: the request is a replay.
    Completed,
    /// The key is bound to this very payment's pending purchase: the request resumes it.
    Pending,
}

/// `Err` with the refusal when the key was used for another request (`409
/// idempotency_key_reuse`) or its request is still running (`409 in_flight`): nothing
/// about the original is revealed. A completed identical request is not replayed
/// here: its answer goes only to a payment that proves the wallet now (see
/// `claim::claim`), never to a header that merely names it. A key bound to a pending
/// purchase paid otherwise answers that purchase's pending state, and the payment
/// presented is not looked at: it is never taken.
pub(super) async fn check_key(
    state: &AppState,
    asking: &Asking<'_>,
    ctx: &PaymentContext,
) -> Result<KeyState, Response> {
    let Some(scoped) = &asking.scoped else {
        return Ok(KeyState::Fresh);
    };
    match idempotency::check(state, scoped, &asking.request_hash).await {
        Ok(Decision::Replay(_)) => Ok(KeyState::Completed),
        Ok(Decision::Proceed) => Ok(KeyState::Fresh),
        Ok(Decision::Pending(p)) if p == ledger::payment_key(ctx).as_str() => Ok(KeyState::Pending),
        Ok(Decision::Pending(p)) => Err(super::pending::answer_for(
            state,
            asking.answer_in,
            &ledger::PaymentKey::from_stored(p),
            Some((scoped, &asking.request_hash)),
        )
        .await),
        Err(e) => Err(respond::error(&e)),
    }
}

/// The answer to a request with no payment whose key is bound to a pending purchase
/// (a rerun of a purchase whose settlement's outcome is not known yet): its pending
/// state, never a 402 asking for a second payment. `None` for any other request.
pub(super) async fn pending_unpaid(state: &AppState, asking: &Asking<'_>) -> Option<Response> {
    let scoped = asking.scoped.as_ref()?;
    let now = state.config.clock.now();
    let rec = state.store.get_idempotency(scoped, now).await.ok()??;
    match rec.state {
        umpire_store::IdempotencyState::Pending { payment_key }
            if rec.request_hash == asking.request_hash.as_str() =>
        {
            let p = ledger::PaymentKey::from_stored(payment_key);
            Some(
                super::pending::answer_for(
                    state,
                    asking.answer_in,
                    &p,
                    Some((scoped, &asking.request_hash)),
                )
                .await,
            )
        }
        _ => None,
    }
}
