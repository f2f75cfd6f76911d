//! A payment matched against our own requirements (never the client's copy), then
//! verified offline and by its settler. A payment refused here may still be owed a
//! purchase: the one it already bought for this very request.

use umpire_core::ErrorCode;
use umpire_pay::rails::{MatchError, Offer};
use umpire_pay::settle::VerifyTimes;
use umpire_pay::types::Account;
use umpire_pay::{PaymentContext, PaymentFailure, PaymentRequirements, Rail};

use crate::Response;
use crate::paid::idempotency::{self, Decision};
use crate::paid::ledger::{self, PaymentKey};
use crate::plumbing::respond;

use super::asking::Asking;
use super::header::PaymentHeader;
use super::sale::{Refusal, Sale, settle_reserve};

/// A payment that matched and verified, not yet claimed.
pub(super) struct Paying {
    pub(super) ctx: PaymentContext,
    pub(super) payment_key: PaymentKey,
    /// The payer verification proved.
    pub(super) payer: Account,
}

/// The payment matched and verified; `Err` is the answer instead (a refusal, or the
/// purchase the payment is owed).
pub(super) async fn match_and_verify(
    sale: &Sale<'_>,
    asking: &Asking<'_>,
    header: &PaymentHeader,
) -> Result<Paying, Response> {
    let state = sale.state;
    let ctx = matched(sale, asking, header).await?;
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
            ctx,
        }),
        Err(f) => Err(refused(sale, asking, &ctx, &f).await),
    }
}

/// The payment against our requirements at this moment's offer.
async fn matched(
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
    // purchase's answer, not a refusal.
    if let Some(scoped) = &asking.scoped {
        match idempotency::check(state, scoped, &asking.request_hash).await {
            Ok(Decision::Replay(r)) => return asking.seal(r),
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
