//! A payment matched against our own requirements (never the client's copy), then
//! verified offline and by its settler. A payment refused here may still be owed a
//! purchase: the one it already bought for this very request.

use umpire_core::ErrorCode;
use umpire_pay::PaymentContext;
use umpire_pay::settle::VerifyTimes;
use umpire_store::PaymentState;
use umpire_x402::rails::{MatchError, Offer};
use umpire_x402::types::Account;
use umpire_x402::{PaymentFailure, PaymentRequirements, Rail, SettlementResponse};

use crate::checkout::idempotency::{self, Decision};
use crate::checkout::ledger::{self, PaymentKey};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Response};

use super::asking::Asking;
use super::front::KeyState;
use super::header::{PaymentHeader, withhold_secret};
use super::sale::{Refusal, Sale, settle_reserve};

/// A payment that matched and verified, not yet claimed.
pub(super) struct Paying {
    pub(super) ctx: PaymentContext,
    pub(super) payment_key: PaymentKey,
    /// The payer verification proved.
    pub(super) payer: Account,
    /// The payment already moved to us (a bystander executed it, or our own earlier
    /// broadcast landed): nothing is left to settle.
    pub(super) settled: Option<SettlementResponse>,
}

impl Paying {
    /// Whether the payment proves the wallet *now*: it verified unspent, so whoever sent
    /// it holds the payer's live signature. A payment already executed is public on
    /// chain and proves nothing about who presents it.
    pub(super) fn proves_wallet(&self) -> bool {
        self.settled.is_none()
    }
}

/// The payment verified against `ctx`, our requirements; `Err` is the answer instead
/// (a refusal, or the purchase the payment is owed).
pub(super) async fn verify(
    sale: &Sale<'_>,
    asking: &Asking<'_>,
    ctx: PaymentContext,
    key: KeyState,
) -> Result<Paying, Response> {
    let state = sale.state;
    // A replay under a completed key with the payment that bought it: the ledger knows
    // it paid, no chain call needed (a payment signed now goes on to the chain).
    if key == KeyState::Completed
        && let Some(paying) = settled_in_ledger(state, &ctx).await
    {
        return Ok(paying);
    }
    // The authorization must last until this request's last moment to settle; the
    // verification itself must leave the work and the settlement their time.
    let times = VerifyTimes {
        now: state.config.clock.now(),
        settles_by: asking.deadline,
        answer_by: asking
            .deadline
            .less(settle_reserve(state.config.request_budget)),
    };
    match state.payments.verify(&ctx, &times).await {
        Ok(verified) => Ok(Paying {
            payment_key: ledger::payment_key(&ctx),
            payer: verified.payer,
            settled: verified.settled,
            ctx,
        }),
        Err(f) => Err(refused(sale, asking, &ctx, &f).await),
    }
}

/// `ctx`'s payment as the ledger has it when a purchase of ours settled with it:
/// verified from the store alone. Only for the payer's own signature (checked offline):
/// a header naming the payer with another wallet's signature meets the same entry.
async fn settled_in_ledger(state: &AppState, ctx: &PaymentContext) -> Option<Paying> {
    if !ctx.signed_by_payer() {
        return None;
    }
    let payer = ctx.claimed_payer()?;
    let payment_key = ledger::payment_key(ctx);
    let now = state.config.clock.now();
    let entry = state.store.get_payment(&payment_key, now).await.ok()??;
    let PaymentState::Settled { transaction, .. } = entry.state else {
        return None;
    };
    Some(Paying {
        settled: Some(SettlementResponse {
            success: true,
            transaction,
            network: Some(ctx.rail.network.clone()),
            payer: Some(payer),
            error_reason: None,
            extensions: Default::default(),
            extra: Default::default(),
        }),
        payer,
        payment_key,
        ctx: ctx.clone(),
    })
}

/// The payment against our requirements at this moment's offer; `Err` is the refusal
/// (or, for a SOL quote that ran out, the purchase the payment is owed).
pub(super) async fn matched(
    sale: &Sale<'_>,
    asking: &Asking<'_>,
    header: &PaymentHeader,
) -> Result<PaymentContext, Response> {
    let rails = &sale.state.config.rails;
    let e = match rails.match_payment(&header.payment, &sale.offer()) {
        Ok((rail, requirements)) => return Ok(context(sale, header, rail, requirements)),
        Err(e) => e,
    };
    // A SOL quote that ran out while its purchase's settlement had an unknown outcome:
    // the payment may have bought this very request, and is owed it.
    if let MatchError::QuoteExpired { expired_at } = e {
        let then = Offer {
            now: expired_at,
            ..sale.offer()
        };
        if let Ok((rail, requirements)) = rails.match_payment(&header.payment, &then) {
            let ctx = context(sale, header, rail, requirements);
            if let Some(r) = asking.owed(sale.state, &ctx).await {
                return Err(r);
            }
        }
    }
    let f = PaymentFailure::invalid(e.reason(), e.to_string());
    Err(sale.refused(asking.answer_in, None, asking.wallet, &f, Refusal::Refused))
}

/// What settlement needs of a matched payment: ours in both versions' forms.
fn context(
    sale: &Sale<'_>,
    header: &PaymentHeader,
    rail: Rail,
    requirements: PaymentRequirements,
) -> PaymentContext {
    let requirements_v1 = sale
        .v1_accepts()
        .into_iter()
        .find(|r| Some(&r.network) == rail.v1_network.as_ref() && r.asset == rail.asset);
    PaymentContext {
        raw: header.raw.clone(),
        payment: header.payment.clone(),
        rail,
        requirements,
        requirements_v1,
        transaction: None,
        settled_before: false,
    }
}

/// The answer to a payment verification refused: the purchase it is owed, if any,
/// else the refusal.
async fn refused(
    sale: &Sale<'_>,
    asking: &Asking<'_>,
    ctx: &PaymentContext,
    failure: &PaymentFailure,
) -> Response {
    let state = sale.state;
    // A concurrent twin with the same key may have settled this very payment while we
    // verified it (the chain now says its nonce is used): the client is owed that
    // purchase's answer, not a refusal, if the payment is the payer's own (a forged
    // one gets nothing). The payment is spent, so public: no secret.
    if let Some(scoped) = asking.scoped.as_ref().filter(|_| ctx.signed_by_payer()) {
        match idempotency::check(state, scoped, &asking.request_hash).await {
            Ok(Decision::Replay(r)) => return withhold_secret(r),
            Err(e) if e.code == ErrorCode::InFlight => return respond::error(&e),
            _ => {}
        }
    }
    if let Some(r) = asking.owed(state, ctx).await {
        return r;
    }
    sale.refused(
        asking.answer_in,
        Some(&ctx.rail.network),
        asking.wallet,
        failure,
        Refusal::Refused,
    )
}
