//! The last step before the work: the Idempotency-Key claimed, then the payment itself
//! in the ledger, so one authorization pays for one purchase whatever key it arrives
//! under.

use umpire_store::PaymentState;
use umpire_x402::FailureReason;
use umpire_x402::PaymentFailure;
use umpire_x402::rails::Family;

use crate::paid::idempotency::{self, Decision, REPLAYED, RequestHash, ScopedKey};
use crate::paid::ledger::{self, BoundKey, ClaimError, Hold, PaymentKey, Running};
use crate::plumbing::{limits, respond};
use crate::{AppState, ClientIp, Response};

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
        let r = match refused {
            KeyRefused::Answer(r) => r,
            // The key's purchase is pending with another payment: this one is not taken.
            KeyRefused::PendingFor(p) => {
                return Err(super::pending::answer_for(state, asking.answer_in, &p).await);
            }
        };
        if r.headers().contains_key(REPLAYED) {
            // Every replay counts, as every lookup by payment does.
            if let Err(e) = limits::enforce(state, "replay", ClientIp::of(asking.req)).await {
                return Err(respond::error(&e));
            }
            // The secret goes to a payment that proves the wallet now: unspent, and
            // never seen here before (a payment we claimed may sit in a public pool, where
            // anyone can copy it before it is mined). A proof signed for the purpose is
            // both.
            if !paying.proves_wallet() || seen_before(state, &paying.payment_key).await {
                return Err(withhold_secret(r));
            }
        }
        return Err(r);
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

/// The Idempotency-Keys a request holds, released when its purchase is voided or
/// completed with its answer, or bound to it while its settlement is pending.
pub(super) struct Claims<'a> {
    pub(super) state: &'a AppState,
    held: Vec<HeldKey>,
}

struct HeldKey {
    key: ScopedKey,
    hash: RequestHash,
    /// Bound to the pending purchase already (found so, not claimed by this request):
    /// it stays bound unless the purchase ends.
    bound: bool,
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
        }
    }

    /// Takes `key` for this request, paying with `payment`; a key bound to this very
    /// payment's pending purchase is taken as it stands (the purchase is this request's).
    pub(super) async fn take_key(
        &mut self,
        key: &ScopedKey,
        hash: &RequestHash,
        payment: &PaymentKey,
    ) -> Result<(), KeyRefused> {
        match idempotency::claim(self.state, key, hash).await {
            Ok(Decision::Proceed) => {
                self.held.push(HeldKey {
                    key: key.clone(),
                    hash: hash.clone(),
                    bound: false,
                });
                Ok(())
            }
            Ok(Decision::Pending(p)) if &p == payment => {
                self.held.push(HeldKey {
                    key: key.clone(),
                    hash: hash.clone(),
                    bound: true,
                });
                Ok(())
            }
            Ok(Decision::Pending(p)) => Err(KeyRefused::PendingFor(p)),
            Ok(Decision::Replay(r)) => Err(KeyRefused::Answer(r)),
            Err(e) => Err(KeyRefused::Answer(respond::error(&e))),
        }
    }

    /// The keys this request holds, and `unpaid` (the customer's key as an unpaid rerun
    /// presents it): what the purchase's reconciler ends with it, should the request
    /// not (a crash, an outcome not known in time).
    pub(super) fn keys(&self, unpaid: Option<&ScopedKey>) -> Vec<BoundKey> {
        let mut keys: Vec<BoundKey> = self
            .held
            .iter()
            .map(|h| BoundKey {
                key: h.key.as_str().to_owned(),
                unpaid: false,
            })
            .collect();
        if let Some(u) = unpaid
            && keys.iter().all(|k| k.key != u.as_str())
        {
            keys.push(BoundKey {
                key: u.as_str().to_owned(),
                unpaid: true,
            });
        }
        keys
    }

    /// Gives back the claims this request took; keys bound to a pending purchase stay
    /// bound (the purchase is left as it was found).
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
        for held in self.held.drain(..) {
            if let Err(e) = idempotency::release(self.state, &held.key, &held.hash).await {
                tracing::error!(error = %e.message, key = %held.key, "could not release a claim");
            }
        }
    }

    /// The purchase was delivered: every key replays `response`.
    pub(super) async fn complete(&mut self, response: &Response) {
        for held in self.held.drain(..) {
            if let Err(e) = idempotency::complete(self.state, &held.key, &held.hash, response).await
            {
                tracing::error!(error = %e.message, key = %held.key, "could not record a completed purchase");
            }
        }
    }

    /// The purchase's settlement is pending: every key this request holds is bound to
    /// it (paid with `payment`) until `expires_at`, and so is `unpaid`, the customer's
    /// key as a rerun that has not paid yet presents it. The keys bound, for the
    /// purchase's reconciler.
    pub(super) async fn pend(
        &mut self,
        payment: &PaymentKey,
        unpaid: Option<(&ScopedKey, &RequestHash)>,
        expires_at: u64,
    ) -> Vec<BoundKey> {
        let state = self.state;
        let mut bound = Vec::new();
        for held in self.held.drain(..) {
            let ok = held.bound
                || match idempotency::pend(state, &held.key, &held.hash, payment, expires_at).await
                {
                    Ok(ok) => ok,
                    Err(e) => {
                        tracing::error!(error = %e.message, key = %held.key, "could not bind a key to its pending purchase");
                        false
                    }
                };
            if ok {
                bound.push(BoundKey {
                    key: held.key.as_str().to_owned(),
                    unpaid: false,
                });
            }
        }
        if let Some((key, hash)) = unpaid
            && bound.iter().all(|b| b.key != key.as_str())
        {
            // Best effort: a key string another purchase uses already keeps that one.
            let mut marker = Claims::new(state);
            if marker.take_key(key, hash, payment).await.is_ok()
                && let Some(held) = marker.held.pop()
            {
                let ok = held.bound
                    || idempotency::pend(state, key, hash, payment, expires_at)
                        .await
                        .unwrap_or(false);
                if ok {
                    bound.push(BoundKey {
                        key: key.as_str().to_owned(),
                        unpaid: true,
                    });
                }
            }
        }
        bound
    }
}

/// Ends the keys bound to a purchase that was pending, as its reconciler decided it:
/// delivered (`Some`, each key of a paid request replays it; the unpaid copy is
/// released, since an unpaid request never gets a purchase's answer), or voided
/// (`None`, every key free).
pub(super) async fn end_bound_keys(
    state: &AppState,
    keys: &[BoundKey],
    hash: &RequestHash,
    delivered: Option<&Response>,
) {
    for k in keys {
        let key = ScopedKey::from_stored(k.key.clone());
        let done = match delivered {
            Some(r) if !k.unpaid => idempotency::complete(state, &key, hash, r).await,
            _ => idempotency::release(state, &key, hash).await,
        };
        if let Err(e) = done {
            tracing::error!(error = %e.message, key = %key, "could not end a key bound to a pending purchase");
        }
    }
}
