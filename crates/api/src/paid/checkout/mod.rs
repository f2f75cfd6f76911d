//! One paid request, whatever it sells (a verdict, a reputation report), top-down:
//!
//! 1. [`begin`]: idempotency in front of the paywall (a completed identical request is
//!    replayed) → the 402, or the payment matched against our own requirements and
//!    verified, its authorization lasting through this request's deadline → the
//!    Idempotency-Key claimed, then the payment itself in the ledger ([`Hold::claim`]:
//!    one authorization pays for one purchase, whatever its encoding). A payment that
//!    fails verification because it already bought this very request is answered with
//!    that purchase ([`replay_by_payment`]), or recovered from its prepared answer when
//!    its request was interrupted ([`recover`]).
//! 2. The caller does its work before [`Checkout::work_deadline`].
//! 3. [`Checkout::settle`]: the answer written down in the ledger (`Prepared`), then
//!    the payment settled by this purchase's own broadcast or facilitator call; not
//!    started when the deadline leaves too little time.
//! 4. [`Checkout::finish`]: a settled purchase is delivered (its verdict stored, the
//!    settlement in body and header) and recorded (`Settled`, the key completed); a
//!    failed one is voided (`Voided`, the key released, nothing charged); one whose
//!    outcome is unknown stays prepared for the retry.
//!
//! Crash safety: a process that dies after settling and before recording leaves the
//! prepared answer; the customer's retry (the same request and payment) is refused by
//! verification (the authorization is spent), retakes the entry, confirms on chain that
//! this very authorization paid us, and gets the prepared answer. A payment that still
//! verifies never settled: the retry is an ordinary purchase and replaces the entry.
//! No settled payment without its document, no document without a settled payment.

mod answer;
mod header;
mod recover;
mod sale;

pub use answer::{Prepared, Void};
pub use header::{AnswerHeader, settlement_header};
pub use sale::{out_of_time, settle_reserve};

use answer::{ANSWER_MARGIN, deliver};
use header::{read_payment_header, request_key, withhold_secret};
use recover::{Asking, replay_by_payment};
use sale::{Claims, SETTLE_MIN, Sale};

use std::time::Duration;

use http::HeaderValue;
use umpire_core::product::{Price, REPUTATION_PRICE, Tier};
use umpire_core::{ApiError, ErrorCode, Value};
use umpire_host::Deadline;
use umpire_pay::FailureReason;
use umpire_pay::rails::{Family, MatchError, Offer, SolRate};
use umpire_pay::settle::payer_named_in;
use umpire_pay::{
    FailureKind, HEADER_PAYMENT_RESPONSE, HEADER_PAYMENT_SIGNATURE, HEADER_X_PAYMENT,
    HEADER_X_PAYMENT_RESPONSE, PaymentContext, PaymentFailure, PaymentPayload, PaymentRequired,
    PaymentRequirementsV1, ResourceInfo, SettlementResponse, decode_header, encode_header,
};
use umpire_store::{StoreError, VerdictRecord};

use crate::discovery::{self, Listing};
use crate::idempotency::{self, Decision, IdempotencyKey};
use crate::ledger::{self, ClaimError, Hold, Retake, Running};
use crate::{AppState, ClientIp, Request, Response, limits, payment, respond};

/// What one paid request sells: a price and the resource it is charged for.
#[derive(Debug, Clone)]
pub struct Product {
    pub price: Price,
    /// The path of the resource, e.g. `/v1/verdicts/basic`.
    pub path: String,
    /// How the 402 names it, e.g. "a basic verdict".
    pub name: String,
    /// How discovery (x402 Bazaar) describes it.
    pub listing: Listing,
}

impl Product {
    pub fn verdict(tier: Tier) -> Product {
        Product {
            price: tier.price(),
            path: format!("/v1/verdicts/{}", tier.as_str()),
            name: format!("a {} verdict", tier.as_str()),
            listing: Listing::Verdict(tier),
        }
    }

    pub fn reputation() -> Product {
        Product {
            price: REPUTATION_PRICE,
            path: "/v1/reputation".into(),
            name: "a reputation report".into(),
            listing: Listing::Reputation,
        }
    }
}

/// A verified payment, claimed for this request.
pub struct Checkout<'a> {
    sale: Sale<'a>,
    /// The header the settlement is answered in.
    answer_in: AnswerHeader,
    network: String,
    wallet: Option<String>,
    /// What settlement needs.
    pub ctx: PaymentContext,
    /// The verified payer.
    pub payer: String,
    /// The Idempotency-Key claimed, if the request came with one.
    claims: Claims<'a>,
    /// The payment's ledger entry, held for this request.
    hold: Hold,
    /// When this request must have answered.
    deadline: Deadline,
}

impl Checkout<'_> {
    /// The 402 for a payment refused (or a purchase voided) after verification.
    pub fn refused(&self, failure: &PaymentFailure, voided: bool) -> Response {
        self.sale.refused(
            self.answer_in,
            &self.network,
            self.wallet.clone(),
            failure,
            voided,
        )
    }

    /// Gives every claim back after our own failure: nothing was settled.
    pub async fn abandon(mut self, e: ApiError) -> Response {
        self.hold.void(self.claims.state, e.code.as_str()).await;
        self.claims.release().await;
        respond::error(&e)
    }

    /// When the work (fetches, checks, reads) must be done, leaving settlement its
    /// share of the budget.
    pub fn work_deadline(&self) -> Deadline {
        self.deadline
            .less(settle_reserve(self.claims.state.config.request_budget))
    }

    /// The answer when the work overran [`Checkout::work_deadline`]: claims released,
    /// nothing charged.
    pub async fn out_of_time(self) -> Response {
        let budget = self.claims.state.config.request_budget;
        crate::metrics::record(crate::metrics::Metric::Void);
        tracing::warn!(
            budget_ms = budget.as_millis() as u64,
            "a purchase overran its time budget; voided"
        );
        self.abandon(out_of_time(budget)).await
    }

    /// Writes the answer down, then settles: a crash from here on leaves what the
    /// customer's retry needs (see the module notes). Not started when the deadline
    /// leaves too little time to settle (voided, nothing charged).
    pub async fn settle(&mut self, prepared: &Prepared) -> Result<SettlementResponse, Void> {
        if !self.deadline.allows(SETTLE_MIN) {
            return Err(Void::Internal(out_of_time(
                self.claims.state.config.request_budget,
            )));
        }
        self.hold
            .prepare(self.claims.state, prepared)
            .await
            .map_err(Void::Internal)?;
        self.claims
            .state
            .payments
            .settle(&self.ctx, self.deadline)
            .await
            .map_err(Void::Settlement)
    }

    /// The store key of this purchase's payment (pass 2 of a sworn verdict asks it
    /// whether the purchase went through).
    pub fn payment_key(&self) -> &str {
        self.hold.key()
    }

    /// Answers a settled purchase and records it in the ledger and for replays, or
    /// voids a purchase that took nothing and releases its key.
    pub async fn finish(
        mut self,
        answer: Result<(Prepared, SettlementResponse), Void>,
    ) -> Response {
        let state = self.claims.state;
        match answer {
            Err(v) if v.outcome_unknown() => {
                // The transfer may have gone through with its answer lost: keep the
                // prepared answer, so the identical retry either finds the payment
                // spent and gets it, or finds it unspent and buys afresh.
                if let Void::Settlement(f) = &v {
                    tracing::warn!(error = %f, "settlement outcome unknown");
                }
                self.hold.leave_unknown(state).await;
                self.claims.release().await;
                respond::error(&ApiError::new(
                    ErrorCode::ChainUnavailable,
                    "the payment could not be settled right now (chain or facilitator unreachable)",
                    "Retry the identical request (same body, payment and Idempotency-Key) in a few seconds: if the payment went through you get its verdict, otherwise it is settled then; you are never charged twice.",
                )
                .with_retry_after(RETRY_AFTER_SECS))
            }
            Ok((prepared, settlement)) => {
                // Every delivered purchase was settled first.
                crate::metrics::record(crate::metrics::Metric::Settlement);
                let r = deliver(state, self.answer_in, prepared, &settlement, self.deadline).await;
                self.hold.settled(state, &settlement.transaction, &r).await;
                self.claims.complete(&r).await;
                r
            }
            Err(Void::Settlement(f)) => {
                crate::metrics::record(crate::metrics::Metric::Void);
                tracing::warn!(error = %f, "settlement failed; purchase voided");
                let r = self.refused(&f, true);
                self.hold.void(state, f.reason.as_str()).await;
                self.claims.release().await;
                r
            }
            Err(Void::Internal(e)) => {
                crate::metrics::record(crate::metrics::Metric::Void);
                self.hold.void(state, e.code.as_str()).await;
                self.claims.release().await;
                respond::error(&e)
            }
        }
    }
}
fn chain_unavailable() -> ApiError {
    ApiError::new(
        ErrorCode::ChainUnavailable,
        "the payment could not be checked right now (chain or facilitator unreachable)",
        "Retry the identical request in a few seconds; nothing was charged.",
    )
    .with_retry_after(RETRY_AFTER_SECS)
}

/// What a 502 `chain_unavailable` or a busy payment asks the client to wait.
const RETRY_AFTER_SECS: u64 = 2;

fn payment_in_use() -> ApiError {
    ApiError::new(
        ErrorCode::InFlight,
        "this payment is being used by another request right now",
        "Resend the identical request with the same payment (and Idempotency-Key, if you sent one) in a few seconds: once that request ends you get its answer, and you are never charged twice.",
    )
    .with_retry_after(RETRY_AFTER_SECS)
}

/// Everything up to a verified, claimed payment; `Err` is the answer to give instead
/// (the 402, a refusal, or the replay of a completed identical request).
pub async fn begin<'a>(
    state: &'a AppState,
    req: &Request,
    product: Product,
    deadline: Deadline,
) -> Result<Checkout<'a>, Response> {
    let err = |e: ApiError| respond::error(&e);
    if state.config.rails.rails.is_empty() {
        return Err(err(ApiError::new(
            ErrorCode::Unavailable,
            "this server takes no payments (no payment rail is configured)",
            "Run `make devnet` for a local chain, or set UMPIRE_EVM_PAY_TO and a settlement mode; nothing was charged.",
        )));
    }
    let sale = Sale {
        state,
        product,
        sol: state.sol_rate().await,
    };
    let header = read_payment_header(req)
        .map_err(|f| sale.refused(AnswerHeader::of(req), "", None, &f, false))?;
    let key = request_key(req, header.as_ref()).map_err(err)?;
    let reveal = !key.as_ref().is_some_and(|k| k.from_payment);
    let seal = move |r: Response| if reveal { r } else { withhold_secret(r) };
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path(), |p| p.as_str());
    let request_hash = idempotency::request_hash(req.method(), target, req.body());

    // A completed identical request is answered in front of the paywall.
    let wallet = header.as_ref().and_then(|h| payer_named_in(&h.payment));
    let scoped = key.as_ref().map(|k| k.key.scoped(wallet.as_deref()));
    // A key from the header replays in front of the paywall; one from the payment only
    // once the payment verified (the claim below), or sealed (see `RequestKey`).
    if let Some(scoped) = scoped.as_ref().filter(|_| reveal) {
        match idempotency::check(state, scoped, &request_hash).await {
            Ok(Decision::Proceed) => {}
            Ok(Decision::Replay(r)) => {
                limits::enforce(state, "replay", ClientIp::of(req))
                    .await
                    .map_err(err)?;
                return Err(r);
            }
            Err(e) => return Err(err(e)),
        }
    }

    // No payment: ask for one.
    let Some(header) = header else {
        return Err(sale.ask_for_payment());
    };

    let asking = Asking {
        req,
        request_hash: &request_hash,
        scoped: scoped.as_ref(),
        reveal,
        answer_in: header.answer_in,
        deadline,
    };
    // Match against our own requirements, then verify.
    let context = |rail: umpire_pay::Rail, requirements| {
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
    };
    let (rail, requirements) = match state
        .config
        .rails
        .match_payment(&header.payment, &sale.offer())
    {
        Ok(matched) => matched,
        Err(e) => {
            // A SOL quote that ran out while its purchase's settlement had an unknown
            // outcome: the payment may have bought this very request, and is owed it.
            if let MatchError::QuoteExpired { expired_at } = e {
                let then = Offer {
                    now: expired_at,
                    ..sale.offer()
                };
                if let Ok((rail, requirements)) =
                    state.config.rails.match_payment(&header.payment, &then)
                {
                    let ctx = context(rail, requirements);
                    if let Some(r) = asking.owed(state, &ctx).await {
                        return Err(r);
                    }
                }
            }
            let f = PaymentFailure::invalid(e.reason(), e.to_string());
            return Err(sale.refused(header.answer_in, "", wallet.clone(), &f, false));
        }
    };
    let network = rail.network.to_string();
    let ctx = context(rail, requirements);
    let payment_key = ledger::payment_key(&ctx);
    let now = state.config.clock.now();
    // The authorization must last until this request's last moment to settle; the
    // verification itself must leave the work and the settlement their time.
    let work_deadline = deadline.less(settle_reserve(state.config.request_budget));
    let verified = match state
        .payments
        .verify(&ctx, now, deadline, work_deadline)
        .await
    {
        Ok(v) => v,
        Err(f) => {
            // A concurrent twin with the same key may have settled this very payment
            // while we verified it (the chain now says its nonce is used): the client
            // is owed that purchase's answer, not a refusal.
            if let Some(scoped) = &scoped {
                match idempotency::check(state, scoped, &request_hash).await {
                    Ok(Decision::Replay(r)) => return Err(seal(r)),
                    Err(e) if e.code == ErrorCode::InFlight => return Err(err(e)),
                    _ => {}
                }
            }
            if let Some(r) = asking.owed(state, &ctx).await {
                return Err(r);
            }
            return Err(sale.refused(header.answer_in, &network, wallet, &f, false));
        }
    };

    // Claim the key, then the payment itself: one authorization pays for one
    // purchase, whatever key it arrives under.
    let mut claims = Claims {
        state,
        held: Vec::new(),
    };
    if let Some(scoped) = &scoped {
        match idempotency::claim(state, scoped, &request_hash).await {
            Ok(Decision::Proceed) => claims.held.push((scoped.clone(), request_hash.clone())),
            Ok(Decision::Replay(r)) => return Err(r),
            Err(e) => return Err(err(e)),
        }
    }
    let mut claimed = Hold::claim(state, &payment_key, &request_hash).await;
    if let Err(ClaimError::InUse) = claimed {
        // Its twin is running (the same payment resent while its first request works):
        // answer with that purchase once it ends; if it ended without buying, try again
        // (a claim held for another request stays in use).
        if let Err(e) = limits::enforce(state, "replay", ClientIp::of(req)).await {
            claims.release().await;
            return Err(err(e));
        }
        match ledger::await_purchase(state, &payment_key, &request_hash, deadline, payment_in_use)
            .await
        {
            Running::Answered(r) => {
                claims.release().await;
                return Err(r);
            }
            Running::Gone => claimed = Hold::claim(state, &payment_key, &request_hash).await,
        }
    }
    let hold = match claimed {
        Ok(hold) => hold,
        Err(f) => {
            claims.release().await;
            // A payment the chain would still take (a Solana transaction simulates
            // whether or not it landed) that already bought this very request: that
            // purchase again.
            if let ClaimError::Spent = f
                && let Some(r) =
                    replay_by_payment(state, req, &ctx, &payment_key, &request_hash, deadline).await
            {
                return Err(r);
            }
            return Err(match f {
                ClaimError::Spent => sale.refused(
                    header.answer_in,
                    &network,
                    wallet,
                    &PaymentFailure::invalid(
                        match ctx.rail.family() {
                            Family::Evm => FailureReason::EvmNonceUsed,
                            Family::Svm => FailureReason::DuplicateSettlement,
                        },
                        "this payment was already used for another purchase",
                    ),
                    false,
                ),
                ClaimError::InUse => err(payment_in_use()),
                ClaimError::Store(e) => err(e),
            });
        }
    };
    Ok(Checkout {
        sale,
        answer_in: header.answer_in,
        network,
        wallet,
        ctx,
        payer: verified.payer,
        claims,
        hold,
        deadline,
    })
}
