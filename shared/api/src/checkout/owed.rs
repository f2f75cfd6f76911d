//! Payments owed a purchase they already bought: the replay of a finished one, and the
//! completion of one interrupted after its answer was prepared (a crash, or a
//! settlement whose outcome was unknown), which the chain decides and which is never
//! judged again.
//!
//! Answers given here carry the one-time secret only when the payment presented proves
//! the wallet now (it verified unspent: our broadcast of it never landed). A payment
//! spent on chain is public and proves nothing about who presents it; the customer
//! gets the secret back by presenting a payment signed now (see `claim::claim`).

use umpire_core::ApiError;
use umpire_pay::PaymentContext;
use umpire_x402::{FailureKind, FailureReason, PaymentFailure, SettlementResponse};

use crate::checkout::idempotency::COMPLETED_SECS;
use crate::checkout::ledger::{self, Hold, PaymentKey, Prepared, Retake, Running};
use crate::plumbing::metrics::{self, Metric};
use crate::plumbing::state::{AppState, ClientIp, Response};
use crate::plumbing::{limits, respond};

use super::answer::{ANSWER_MARGIN, deliver};
use super::asking::Asking;
use super::claim::{Claims, KeyRefused, end_bound_keys};
use super::header::withhold_secret;
use super::pending::{self, PendingState};
use super::reconcile;
use super::sale::{Refusal, Sale, payment_in_use, receipted};
use super::verify::Paying;

/// How an interrupted purchase's payment is decided.
enum Decide<'p> {
    /// Already known to have paid us.
    Paid(&'p SettlementResponse),
    /// Still unspent: settle it now (resending our own broadcast, if it was ours).
    Settle,
    /// Refused by verification: only look whether it paid us.
    Find,
}

impl Asking<'_> {
    /// The purchase `ctx`'s payment is owed, if any, once verification refused it: the
    /// one this very authorization already bought for this very request (its answer
    /// lost, or resent without an Idempotency-Key as @x402/fetch resends it), or one
    /// interrupted after its answer was prepared, delivered if the chain shows the
    /// payment went through. Only for a payment its payer signed: a header that names
    /// the payer with another wallet's signature gets nothing.
    pub(super) async fn owed(&self, state: &AppState, ctx: &PaymentContext) -> Option<Response> {
        if !ctx.signed_by_payer() {
            return None;
        }
        let payment_key = ledger::payment_key(ctx);
        if let Some(r) = self.replay_by_payment(state, ctx, &payment_key).await {
            return Some(r);
        }
        let (hold, prepared) = match self.retake(state, &payment_key).await? {
            Ok(taken) => taken,
            Err(r) => return Some(r),
        };
        match self.decide(state, ctx, hold, prepared, Decide::Find).await {
            Decided::Answer(r) => Some(r),
            // The chain shows it cannot pay: refused for what verification found.
            Decided::Voided(_) => None,
            // It may still land (our earlier broadcast in a pool): never a 402 that
            // invites a second payment while the first can still be taken.
            Decided::Pending(p) => Some(pending::answer(self.answer_in, &p)),
        }
    }

    /// The retry of this very request, interrupted after its answer was prepared, whose
    /// payment verified again (unspent, or already paid us): the prepared answer is
    /// delivered once the payment is settled, never a new verdict and never a request
    /// to pay again.
    pub(super) async fn resume(&self, sale: &Sale<'_>, paying: &Paying) -> Response {
        let state = sale.state;
        let (hold, prepared) = match self.retake(state, &paying.payment_key).await {
            Some(Ok(taken)) => taken,
            Some(Err(r)) => return r,
            // Settled or voided since: ask again.
            None => return respond::error(&payment_in_use()),
        };
        let how = match &paying.settled {
            Some(s) => Decide::Paid(s),
            None => Decide::Settle,
        };
        // Never the secret (see `decide`): a payment whose settlement started is in a
        // public pool (or on chain), where anyone can copy it; the wallet reads the
        // verdict by signing in, or gets the secret with a payment signed now (a
        // replay, never settled).
        match self.decide(state, &paying.ctx, hold, prepared, how).await {
            Decided::Answer(r) => r,
            Decided::Voided(f) => sale.refused(
                self.answer_in,
                Some(&paying.ctx.rail.network),
                self.wallet,
                &f,
                Refusal::Voided,
            ),
            Decided::Pending(p) => pending::answer(self.answer_in, &p),
        }
    }

    /// The answer for a payment that already bought (or is buying) this very request:
    /// its purchase replayed with the secret withheld, waited for while it runs
    /// (`in_flight` past a while). `None` when there is nothing to replay.
    pub(super) async fn replay_by_payment(
        &self,
        state: &AppState,
        ctx: &PaymentContext,
        payment_key: &PaymentKey,
    ) -> Option<Response> {
        if !ctx.signed_by_payer() {
            return None;
        }
        // Every lookup counts, hit or miss: a settled authorization is public on chain,
        // so whoever rebuilds its header may guess at the request it bought.
        if let Err(e) = limits::enforce(state, "replay", ClientIp::of(self.req)).await {
            return Some(respond::error(&e));
        }
        let running = ledger::await_purchase(
            state,
            payment_key,
            &self.request_hash,
            self.deadline,
            payment_in_use,
        )
        .await;
        match running {
            Running::Answered(r) => Some(r),
            Running::Gone => None,
        }
    }

    /// Takes back this request's prepared purchase: `None` when there is none, `Err`
    /// the answer when another retry holds it or the store failed.
    async fn retake(
        &self,
        state: &AppState,
        payment_key: &PaymentKey,
    ) -> Option<Result<(Hold, Prepared), Response>> {
        let err = |e: ApiError| Some(Err(respond::error(&e)));
        match Hold::retake(state, payment_key, &self.request_hash).await {
            Ok(Retake::Taken(hold, prepared)) => Some(Ok((hold, *prepared))),
            Ok(Retake::Busy) => err(payment_in_use()),
            Ok(Retake::Nothing) => None,
            Err(e) => err(e),
        }
    }

    /// Decides a retaken purchase: delivered (its secret withheld: the payment is
    /// public by now) when the payment paid us, left pending when the chain cannot say
    /// yet (or refuses it now while an earlier broadcast may still land), voided when
    /// it shows the payment cannot pay. The key is taken as the purchase itself would;
    /// a pending purchase's keys stay bound to it, and its reconciler follows it.
    async fn decide(
        &self,
        state: &AppState,
        ctx: &PaymentContext,
        hold: Hold,
        prepared: Prepared,
        how: Decide<'_>,
    ) -> Decided {
        let mut claims = Claims::new(state);
        if let Some(r) = self.take_key(state, &mut claims, hold.key()).await {
            hold.leave_unknown(state).await;
            return Decided::Answer(r);
        }
        let bound = prepared
            .sale
            .as_ref()
            .map(|s| s.keys.clone())
            .unwrap_or_default();
        match self.settlement(state, ctx, how).await {
            Ok(Some(settlement)) => {
                let r = self
                    .deliver_retaken(state, hold, prepared, settlement, claims, &bound)
                    .await;
                Decided::Answer(withhold_secret(r))
            }
            // Unused, and its window (with the margin for a late block) has passed: it
            // can never pay.
            Ok(None) if hold.lapsed(state.config.clock.now()) => {
                let f = PaymentFailure::invalid(
                    FailureReason::EvmValidBefore,
                    "the authorization expired unused: this payment can no longer land",
                );
                self.void_retaken(state, hold, claims, &bound, f).await
            }
            // Not settled (yet): the answer stays prepared in case a broadcast from
            // the interrupted purchase still lands.
            Ok(None) => Decided::Pending(self.still_pending(state, ctx, hold, claims, None).await),
            Err(f) if f.kind == FailureKind::Unavailable => {
                tracing::warn!(error = %f, "an interrupted purchase could not be decided");
                let tx = f.transaction.clone();
                Decided::Pending(self.still_pending(state, ctx, hold, claims, tx).await)
            }
            // The chain's evidence that it can never pay (canceled, used elsewhere).
            Err(f) if f.reason == FailureReason::EvmNonceUsed => {
                tracing::warn!(error = %f, "an interrupted purchase was not paid to us");
                self.void_retaken(state, hold, claims, &bound, f).await
            }
            // Refused now (the payer's balance, a revert) while an earlier broadcast
            // could still land if that changes: still pending, never a 402.
            Err(f) => {
                tracing::warn!(error = %f, "an interrupted purchase cannot be settled now");
                Decided::Pending(self.still_pending(state, ctx, hold, claims, None).await)
            }
        }
    }

    /// Takes this request's key for its retaken purchase paid with `payment`; `Some`
    /// is the answer instead (a replay without the secret, a reuse refused, another
    /// purchase's pending state).
    async fn take_key(
        &self,
        state: &AppState,
        claims: &mut Claims<'_>,
        payment: &PaymentKey,
    ) -> Option<Response> {
        let scoped = self.scoped.as_ref()?;
        match claims.take_key(scoped, &self.request_hash, payment).await {
            Ok(()) => None,
            Err(KeyRefused::Answer(r)) => Some(withhold_secret(r)),
            Err(KeyRefused::PendingFor(p)) => Some(
                pending::answer_for(
                    state,
                    self.answer_in,
                    &p,
                    Some((scoped, &self.request_hash)),
                )
                .await,
            ),
        }
    }

    /// Delivers a retaken purchase the chain shows paid: its verdict stored (or, should
    /// the store falter, stored by its reconciler), its keys completed, the ledger
    /// Settled once the verdict is stored.
    async fn deliver_retaken(
        &self,
        state: &AppState,
        hold: Hold,
        prepared: Prepared,
        settlement: SettlementResponse,
        mut claims: Claims<'_>,
        bound: &[crate::checkout::ledger::BoundKey],
    ) -> Response {
        tracing::warn!(
            transaction = settlement.transaction,
            "delivering a purchase interrupted after its answer was prepared"
        );
        metrics::record(Metric::Settlement);
        let payment = hold.key().clone();
        let settlement = receipted(state, &self.resource_url, settlement);
        let tx = settlement.transaction.clone();
        let (r, stored) = deliver(
            state,
            self.answer_in,
            prepared,
            &settlement,
            self.deadline,
            false,
        )
        .await;
        claims.complete(&r).await;
        end_bound_keys(state, bound, &self.request_hash, &payment, Some(&r)).await;
        if stored {
            hold.settled(state, &tx, &r).await;
        } else {
            let followed = reconcile::follow(state, &payment).await;
            hold.leave_pending(state, |sale| {
                sale.transaction = Some(tx);
                sale.paid = true;
                sale.followed |= followed;
            })
            .await;
        }
        r
    }

    /// Voids a retaken purchase the chain shows can never pay: nothing was taken, its
    /// keys free.
    async fn void_retaken(
        &self,
        state: &AppState,
        hold: Hold,
        mut claims: Claims<'_>,
        bound: &[crate::checkout::ledger::BoundKey],
        f: PaymentFailure,
    ) -> Decided {
        metrics::record(Metric::PendingVoided);
        let payment = hold.key().clone();
        hold.void(state, f.reason.as_str()).await;
        claims.unbind().await;
        end_bound_keys(state, bound, &self.request_hash, &payment, None).await;
        Decided::Voided(f)
    }

    /// Leaves a retaken purchase pending: this request's keys bound to it beside the
    /// ones already bound, a reconciler following it (unless one does already); what
    /// the answer says of it.
    async fn still_pending(
        &self,
        state: &AppState,
        ctx: &PaymentContext,
        hold: Hold,
        mut claims: Claims<'_>,
        transaction: Option<String>,
    ) -> PendingState {
        let now = state.config.clock.now();
        let until = hold.kept_until();
        let payment = hold.key().clone();
        let unpaid = self.unpaid.as_ref().map(|k| (k, &self.request_hash));
        let keys = claims
            .bind(
                &payment,
                unpaid,
                until.unwrap_or(now).max(now) + reconcile::PARK_AFTER_SECS + COMPLETED_SECS,
            )
            .await;
        claims.forget();
        let sale = hold.prepared().and_then(|p| p.sale);
        let followed = match &sale {
            Some(s) if s.followed => true,
            _ => reconcile::follow(state, &payment).await,
        };
        let known = transaction
            .clone()
            .or_else(|| sale.as_ref().and_then(|s| s.transaction.clone()));
        hold.leave_pending(state, |sale| {
            for k in keys {
                if !sale.keys.contains(&k) {
                    sale.keys.push(k);
                }
            }
            if transaction.is_some() {
                sale.transaction = transaction;
            }
            sale.followed = followed;
        })
        .await;
        PendingState {
            network: Some(ctx.rail.network.clone()),
            payer: ctx.claimed_payer(),
            transaction: known,
            until,
        }
    }
}

impl Asking<'_> {
    /// What the chain says of an interrupted purchase's payment, decided `how`.
    async fn settlement(
        &self,
        state: &AppState,
        ctx: &PaymentContext,
        how: Decide<'_>,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        match how {
            Decide::Paid(s) => Ok(Some(s.clone())),
            // A purchase whose settlement started before: a refusal now may follow a
            // transfer that landed, so it is no proof that nothing moved.
            Decide::Settle => {
                let ctx = PaymentContext {
                    settled_before: true,
                    ..ctx.clone()
                };
                state.payments.settle(&ctx, self.deadline).await.map(Some)
            }
            Decide::Find => tokio::time::timeout_at(
                self.deadline.less(ANSWER_MARGIN).instant().into(),
                state.payments.find_settlement(ctx),
            )
            .await
            .unwrap_or_else(|_| {
                Err(PaymentFailure::unavailable(
                    "the chain did not answer within this request's time budget",
                ))
            }),
        }
    }
}

/// What [`Asking::decide`] came to.
enum Decided {
    /// The answer to give.
    Answer(Response),
    /// The chain shows the payment can never pay; the purchase is voided.
    Voided(PaymentFailure),
    /// Not paid yet, and it may still land: pending, followed by its reconciler.
    Pending(PendingState),
}
