//! The last step before the work: the Idempotency-Key claimed, then the payment itself
//! in the ledger, so one authorization pays for one purchase whatever key it arrives
//! under.

use umpire_store::PaymentState;
use umpire_x402::FailureReason;
use umpire_x402::PaymentFailure;
use umpire_x402::rails::Family;

use umpire_core::{ApiError, ErrorCode};

use crate::checkout::idempotency::{self, Decision, REPLAYED, RequestHash, ScopedKey};
use crate::checkout::ledger::{self, BoundKey, ClaimError, Hold, PaymentKey, Running};
use crate::plumbing::state::{AppState, ClientIp, Response};
use crate::plumbing::{limits, respond};

use super::Checkout;
use super::asking::Asking;
use super::header::withhold_secret;
use super::sale::{Refusal, Sale, payment_in_use};
use super::verify::Paying;

/// Claims the key and the payment for this request; `Err` is the answer instead (the
/// replay of the request the key completed, a wait for the twin holding the payment,
/// the resumption of this request's interrupted purchase, or a refusal), every claim
/// taken given back.
///
/// A key's replay carries the one-time secret only to a payment that proves the wallet
/// now (unspent: its signature is the payer's own and seen by no one else); the
/// original payment, public once settled, gets the answer without it. Nothing here
/// settles the payment: a replay takes nothing.
pub(super) async fn claim<'a>(
    sale: Sale<'a>,
    asking: &Asking<'_>,
    paying: Paying,
) -> Result<Checkout<'a>, Response> {
    let state = sale.state;
    let mut claims = Claims::new(state);
    if let Some(scoped) = &asking.scoped
        && let Err(refused) = claims
            .take_key(scoped, &asking.request_hash, &paying.payment_key)
            .await
    {
        return Err(key_refused(state, asking, scoped, &paying, refused).await);
    }
    let hold = match take_payment(state, asking, &paying).await {
        Ok(hold) => hold,
        // The purchase this payment bought for this very request: the key now names it.
        Err(Taken::Answered(r)) if r.status().is_success() => {
            claims.complete(&r).await;
            return Err(r);
        }
        Err(taken) => {
            claims.release().await;
            return Err(match taken {
                Taken::Answered(r) => r,
                Taken::Interrupted => asking.resume(&sale, &paying).await,
                Taken::Spent => sale.refused(
                    asking.answer_in,
                    Some(&paying.ctx.rail.network),
                    asking.wallet,
                    &PaymentFailure::invalid(
                        match paying.ctx.rail.family() {
                            Family::Evm => FailureReason::EvmNonceUsed,
                            Family::Svm => FailureReason::DuplicateSettlement,
                        },
                        "this payment was already used for another purchase",
                    ),
                    Refusal::Refused,
                ),
            });
        }
    };
    Ok(Checkout {
        answer_in: asking.answer_in,
        request_hash: asking.request_hash.clone(),
        unpaid_key: asking.unpaid.clone(),
        network: paying.ctx.rail.network.clone(),
        wallet: asking.wallet,
        payer: paying.payer,
        settled: paying.settled,
        ctx: paying.ctx,
        sale,
        claims,
        hold,
        deadline: asking.deadline,
        followed: false,
    })
}

/// The answer when the request's key is not free for it: the replay of the request it
/// completed (its one-time secret only to a payment that proves the wallet now), the
/// pending state of the purchase it is bound to (paid otherwise: this payment is not
/// taken), or the refusal.
async fn key_refused(
    state: &AppState,
    asking: &Asking<'_>,
    scoped: &ScopedKey,
    paying: &Paying,
    refused: KeyRefused,
) -> Response {
    let r = match refused {
        KeyRefused::Answer(r) => r,
        KeyRefused::PendingFor(p) => {
            return super::pending::answer_for(
                state,
                asking.answer_in,
                &p,
                Some((scoped, &asking.request_hash)),
            )
            .await;
        }
    };
    if r.headers().contains_key(REPLAYED) {
        // Every replay counts, as every lookup by payment does.
        if let Err(e) = limits::enforce(state, "replay", ClientIp::of(asking.req)).await {
            return respond::error(&e);
        }
        // The secret goes to a payment that proves the wallet now: unspent, and never
        // seen here before (a payment we claimed may sit in a public pool, where anyone
        // can copy it before it is mined). A proof signed for the purpose is both.
        if !paying.proves_wallet() || seen_before(state, &paying.payment_key).await {
            return withhold_secret(r);
        }
    }
    r
}

/// Why the payment could not be held for this request.
enum Taken {
    /// Settled for another purchase.
    Spent,
    /// The answer to give: the purchase the payment bought, a wait that ran out, or
    /// our own failure.
    Answered(Response),
    /// This very request prepared its answer before and was interrupted.
    Interrupted,
}

/// The payment's ledger entry, held for this request.
/// Whether the ledger knows this payment (any entry, or a store that cannot say).
async fn seen_before(state: &AppState, key: &PaymentKey) -> bool {
    let now = state.config.clock.now();
    !matches!(state.store.get_payment(key, now).await, Ok(None))
}

async fn take_payment(
    state: &AppState,
    asking: &Asking<'_>,
    paying: &Paying,
) -> Result<Hold, Taken> {
    let answered = |e| Taken::Answered(respond::error(&e));
    let (key, hash) = (&paying.payment_key, &asking.request_hash);
    if paying.settled.is_some() {
        // Paid already: the payment bought the purchase that prepared its answer, even
        // one whose hold and keep have lapsed (its record of the sale may have failed).
        let now = state.config.clock.now();
        // (A purchase still running holds it: waited for below, as any twin is.)
        if let Ok(Some(entry)) = state.store.get_payment(key, now).await
            && matches!(entry.state, PaymentState::Prepared { .. })
            && entry.held_until <= now
        {
            return Err(if entry.request_hash == hash.as_str() {
                Taken::Interrupted
            } else {
                Taken::Spent
            });
        }
    }
    let mut claimed = Hold::claim(state, key, hash).await;
    if let Err(ClaimError::InUse) = claimed {
        // Its twin is running (the same payment resent while its first request works):
        // answer with that purchase once it ends; if it ended without buying, try again
        // (a claim held for another request stays in use).
        limits::enforce(state, "replay", ClientIp::of(asking.req))
            .await
            .map_err(answered)?;
        match ledger::await_purchase(state, key, hash, asking.deadline, payment_in_use).await {
            Running::Answered(r) => return Err(Taken::Answered(r)),
            Running::Gone => claimed = Hold::claim(state, key, hash).await,
        }
    }
    match claimed {
        Ok(hold) => Ok(hold),
        // A payment the chain would still take (a Solana transaction simulates whether
        // or not it landed) that already bought this very request: that purchase again.
        Err(ClaimError::Spent) => match asking.replay_by_payment(state, &paying.ctx, key).await {
            Some(r) => Err(Taken::Answered(r)),
            None => Err(Taken::Spent),
        },
        Err(ClaimError::InUse) => Err(answered(payment_in_use())),
        Err(ClaimError::Interrupted) => Err(Taken::Interrupted),
        Err(ClaimError::Store(e)) => Err(answered(e)),
    }
}

/// The Idempotency-Keys a request holds: claimed (in progress) for it, then bound to its
/// purchase (pending, with its payment) before any money moves, and finally completed
/// with the purchase's answer or released when it is voided.
pub(super) struct Claims<'a> {
    pub(super) state: &'a AppState,
    held: Vec<HeldKey>,
    /// The payment the bound keys are bound to.
    payment: Option<PaymentKey>,
}

struct HeldKey {
    key: ScopedKey,
    hash: RequestHash,
    /// Bound to the purchase (pending, with its payment): found so, or bound here.
    bound: bool,
    /// The customer's key as an unpaid rerun presents it: released when the purchase
    /// ends, never completed (an unpaid request never gets a purchase's answer).
    unpaid: bool,
}

/// Why a key could not be taken for a request.
pub(super) enum KeyRefused {
    /// The answer instead: the replay of the request it completed, `in_flight`, or a
    /// reuse refused.
    Answer(Response),
    /// Bound to the pending purchase paid with this other payment: that purchase is
    /// the request's, and the payment presented now is not taken.
    PendingFor(PaymentKey),
}

impl<'a> Claims<'a> {
    pub(super) fn new(state: &'a AppState) -> Claims<'a> {
        Claims {
            state,
            held: Vec::new(),
            payment: None,
        }
    }

    /// Takes `key` for this request, paying with `payment`; a key bound to this very
    /// payment's purchase is taken as it stands (the purchase is this request's).
    pub(super) async fn take_key(
        &mut self,
        key: &ScopedKey,
        hash: &RequestHash,
        payment: &PaymentKey,
    ) -> Result<(), KeyRefused> {
        let bound = match idempotency::claim(self.state, key, hash).await {
            Ok(Decision::Proceed) => false,
            Ok(Decision::Pending(p)) if p == payment.as_str() => true,
            Ok(Decision::Pending(p)) => {
                return Err(KeyRefused::PendingFor(PaymentKey::from_stored(p)));
            }
            Ok(Decision::Replay(r)) => return Err(KeyRefused::Answer(r)),
            Err(e) => return Err(KeyRefused::Answer(respond::error(&e))),
        };
        self.payment = Some(payment.clone());
        self.held.push(HeldKey {
            key: key.clone(),
            hash: hash.clone(),
            bound,
            unpaid: false,
        });
        Ok(())
    }

    /// Binds every key this request holds to its purchase, paid with `payment`, until
    /// `expires_at`, and `unpaid` too (the customer's key as a rerun with no payment
    /// presents it, best effort): from now until the purchase ends, they answer it,
    /// never a new 402 and never a second purchase. The keys bound, for the purchase's
    /// reconciler; `Err` when a key of the request could not be bound (the store
    /// faltered): no money may move then, since a rerun under it could buy again.
    pub(super) async fn bind_all(
        &mut self,
        payment: &PaymentKey,
        unpaid: Option<(&ScopedKey, &RequestHash)>,
        expires_at: u64,
    ) -> Result<Vec<BoundKey>, ApiError> {
        let keys = self.bind(payment, unpaid, expires_at).await;
        if self.held.iter().all(|h| h.bound) {
            return Ok(keys);
        }
        Err(ApiError::new(
            ErrorCode::Unavailable,
            "the purchase could not be recorded before its payment moved (our store faltered), so it was stopped: nothing was charged",
            "Retry the identical request with the same payment in a few seconds.",
        )
        .with_retry_after(2))
    }

    /// [`Claims::bind_all`], best effort: a key that cannot be bound is left claimed.
    pub(super) async fn bind(
        &mut self,
        payment: &PaymentKey,
        unpaid: Option<(&ScopedKey, &RequestHash)>,
        expires_at: u64,
    ) -> Vec<BoundKey> {
        let state = self.state;
        self.payment = Some(payment.clone());
        for held in self.held.iter_mut().filter(|h| !h.bound) {
            match idempotency::pend(state, &held.key, &held.hash, payment, expires_at).await {
                Ok(ok) => held.bound = ok,
                Err(e) => {
                    tracing::error!(error = %e.message, key = %held.key, "could not bind a key to its purchase")
                }
            }
        }
        if let Some((key, hash)) = unpaid
            && self.held.iter().all(|h| h.key != *key)
        {
            // Best effort: a key string another purchase uses already keeps that one.
            let claimed = matches!(
                idempotency::claim(state, key, hash).await,
                Ok(Decision::Proceed)
            );
            let bound = claimed
                && idempotency::pend(state, key, hash, payment, expires_at)
                    .await
                    .unwrap_or(false);
            if claimed && !bound {
                let _ = idempotency::release(state, key, hash).await;
            }
            if bound
                || matches!(idempotency::check(state, key, hash).await, Ok(Decision::Pending(p)) if p == payment.as_str())
            {
                self.held.push(HeldKey {
                    key: key.clone(),
                    hash: hash.clone(),
                    bound: true,
                    unpaid: true,
                });
            }
        }
        self.keys()
    }

    /// The keys bound to the purchase, as its reconciler ends them.
    pub(super) fn keys(&self) -> Vec<BoundKey> {
        self.held
            .iter()
            .filter(|h| h.bound)
            .map(|h| BoundKey {
                key: h.key.as_str().to_owned(),
                unpaid: h.unpaid,
            })
            .collect()
    }

    /// Lets go of every key as it stands (a purchase left pending: its keys stay bound).
    pub(super) fn forget(&mut self) {
        self.held.clear();
    }

    /// Gives back the claims this request took and did not bind; bound keys stay bound
    /// (the purchase is left as it was found: pending, or decided by another).
    pub(super) async fn release(&mut self) {
        for held in self.held.drain(..) {
            if held.bound {
                continue;
            }
            if let Err(e) = idempotency::release(self.state, &held.key, &held.hash).await {
                tracing::error!(error = %e.message, key = %held.key, "could not release a claim");
            }
        }
    }

    /// The purchase is voided: every key is free again, bound ones included.
    pub(super) async fn unbind(&mut self) {
        let payment = self.payment.clone();
        for held in self.held.drain(..) {
            let done = match (&payment, held.bound) {
                (Some(p), true) => idempotency::release_bound(self.state, &held.key, &held.hash, p)
                    .await
                    .map(|_| ()),
                _ => idempotency::release(self.state, &held.key, &held.hash).await,
            };
            if let Err(e) = done {
                tracing::error!(error = %e.message, key = %held.key, "could not release a claim");
            }
        }
    }

    /// The purchase was delivered: every key of a paid request replays `response`; the
    /// unpaid copy is released.
    pub(super) async fn complete(&mut self, response: &Response) {
        let payment = self.payment.clone();
        for held in self.held.drain(..) {
            let done = match (&payment, held.bound, held.unpaid) {
                (Some(p), true, true) => {
                    idempotency::release_bound(self.state, &held.key, &held.hash, p)
                        .await
                        .map(|_| ())
                }
                (Some(p), true, false) => {
                    idempotency::complete_bound(self.state, &held.key, &held.hash, p, response)
                        .await
                        .map(|_| ())
                }
                _ => idempotency::complete(self.state, &held.key, &held.hash, response).await,
            };
            if let Err(e) = done {
                tracing::error!(error = %e.message, key = %held.key, "could not record a completed purchase");
            }
        }
    }
}

/// Ends the keys bound to the purchase paid with `payment`, as its reconciler (or a
/// retry) decided it: delivered (`Some`, each key of a paid request replays it; the
/// unpaid copy is released), or voided (`None`, every key free). Only keys bound to
/// this very purchase are touched: a key since bound to another, or ended, is not.
pub(super) async fn end_bound_keys(
    state: &AppState,
    keys: &[BoundKey],
    hash: &RequestHash,
    payment: &PaymentKey,
    delivered: Option<&Response>,
) {
    for k in keys {
        let key = ScopedKey::from_stored(k.key.clone());
        let done = match delivered {
            Some(r) if !k.unpaid => idempotency::complete_bound(state, &key, hash, payment, r)
                .await
                .map(|_| ()),
            _ => idempotency::release_bound(state, &key, hash, payment)
                .await
                .map(|_| ()),
        };
        if let Err(e) = done {
            tracing::error!(error = %e.message, key = %key, "could not end a key bound to a pending purchase");
        }
    }
}
