//! Payments that failed verification but are owed a purchase: the replay of the one they
//! bought, or the recovery of one interrupted after its answer was prepared.

use umpire_core::ApiError;
use umpire_pay::{FailureKind, PaymentContext, PaymentFailure};

use crate::paid::ledger::{self, Hold, PaymentKey, Retake, Running};
use crate::plumbing::metrics::{self, Metric};
use crate::plumbing::{limits, respond};
use crate::{AppState, ClientIp, Response};

use super::answer::{ANSWER_MARGIN, deliver};
use super::asking::Asking;
use super::claim::Claims;
use super::sale::{chain_unavailable, payment_in_use};

impl Asking<'_> {
    /// The purchase `ctx`'s payment is owed, if any: the one this very authorization
    /// already bought for this very request (its answer lost, or resent without an
    /// Idempotency-Key as @x402/fetch resends it), or one interrupted after its answer
    /// was prepared, delivered if the chain shows the payment went through. Never a
    /// refusal of a payment that paid.
    pub(super) async fn owed(&self, state: &AppState, ctx: &PaymentContext) -> Option<Response> {
        let payment_key = ledger::payment_key(ctx);
        if let Some(r) = self.replay_by_payment(state, ctx, &payment_key).await {
            return Some(r);
        }
        self.recover(state, ctx, &payment_key).await
    }

    /// The answer for a payment that already bought (or is buying) this very request:
    /// its purchase replayed with the secret withheld, waited for while it runs
    /// (`in_flight` past a while). Only for whoever holds the payer's own signature
    /// over the authorization (checked offline: cheap, and it is what scopes the
    /// replay to the wallet that paid); `None` when there is nothing to replay.
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

    /// A retry refused by verification, of a purchase whose process died (or lost its
    /// answer) after preparing it: if `ctx`'s payment has a prepared answer for this
    /// very request and the chain shows that authorization paid us, the answer (stored
    /// and recorded now); `None` when there is nothing to recover and the refusal
    /// stands.
    async fn recover(
        &self,
        state: &AppState,
        ctx: &PaymentContext,
        payment_key: &PaymentKey,
    ) -> Option<Response> {
        let err = |e: ApiError| Some(respond::error(&e));
        // Take the payment back, and the key, as the purchase itself would.
        let (hold, prepared) = match Hold::retake(state, payment_key, &self.request_hash).await {
            Ok(Retake::Taken(hold, prepared)) => (hold, *prepared),
            Ok(Retake::Busy) => return err(payment_in_use()),
            Ok(Retake::Nothing) => return None,
            Err(e) => return err(e),
        };
        let mut claims = Claims::new(state);
        if let Some(scoped) = &self.scoped
            && let Err(r) = claims.take_key(scoped, &self.request_hash).await
        {
            hold.leave_unknown(state).await;
            return Some(self.seal(r));
        }
        let found = tokio::time::timeout_at(
            self.deadline.less(ANSWER_MARGIN).instant().into(),
            state.payments.find_settlement(ctx),
        )
        .await
        .unwrap_or_else(|_| {
            Err(PaymentFailure::unavailable(
                "the chain did not answer within this request's time budget",
            ))
        });
        match found {
            Ok(Some(settlement)) => {
                tracing::warn!(
                    transaction = settlement.transaction,
                    "delivering a purchase interrupted after settlement"
                );
                metrics::record(Metric::Settlement);
                let r = deliver(state, self.answer_in, prepared, &settlement, self.deadline).await;
                hold.settled(state, &settlement.transaction, &r).await;
                claims.complete(&r).await;
                Some(r)
            }
            Ok(None) => {
                // Not settled (yet): refused for what verification found; the answer
                // stays prepared in case a broadcast from the interrupted purchase
                // still lands.
                hold.leave_unknown(state).await;
                claims.release().await;
                None
            }
            Err(f) if f.kind == FailureKind::Unavailable => {
                // No lookup (a facilitator settles, or the chain is unreachable).
                tracing::warn!(error = %f, "an interrupted purchase could not be looked up");
                hold.leave_unknown(state).await;
                claims.release().await;
                err(chain_unavailable())
            }
            Err(f) => {
                tracing::warn!(error = %f, "an interrupted purchase was not paid to us");
                hold.void(state, f.reason.as_str()).await;
                claims.release().await;
                None
            }
        }
    }
}
