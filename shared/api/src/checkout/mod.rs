//! One paid request, whatever it sells (a verdict, a reputation report), top-down:
//!
//! 1. [`begin`], in steps, each a function of its own that either goes on or answers
//!    instead:
//!    - [`Asking::read`]: the payment header and the Idempotency-Key the request carries;
//!      a request with no payment gets the 402;
//!    - [`verify::matched`]: the payment against our own requirements (never the
//!      client's copy);
//!    - [`front::check_key`]: a key used for another request, or still in use, is
//!      refused before the payment is looked at;
//!    - [`verify::verify`]: the payment verified, its authorization lasting through this
//!      request's deadline; one the chain shows already paid us (whoever executed it)
//!      verifies as paid. A payment refused because it already bought this very
//!      request is answered with that purchase, or with its prepared answer when its
//!      request was interrupted ([`Asking::owed`]);
//!    - [`claim::claim`]: the Idempotency-Key claimed (a completed identical request is
//!      replayed: no settlement, the one-time secret only to a payment that proves the
//!      wallet now), then the payment itself in the ledger ([`Hold::claim`]: one
//!      authorization pays for one purchase, whatever its encoding); this request's own
//!      interrupted purchase is resumed ([`Asking::resume`]), never judged again.
//! 2. The caller does its work before [`Checkout::work_deadline`].
//! 3. [`Checkout::settle`]: the answer written down in the ledger (`Prepared`), then
//!    the payment settled by this purchase's own broadcast or facilitator call; not
//!    started when the deadline leaves too little time.
//! 4. [`Checkout::finish`]: a settled purchase is delivered (its verdict stored, the
//!    settlement in body and header) and recorded (`Settled`, the key completed); a
//!    failed one is voided (`Voided`, the key released, nothing charged); one whose
//!    outcome is unknown stays prepared for the retry (`settlement_pending`).
//!
//! Crash safety: a process that dies after preparing its answer leaves it prepared, and
//! kept for that request while its payment can still land; the customer's retry (the
//! same request and payment) takes it back and the chain decides: the authorization's
//! transfer paid us (whoever broadcast it), and the prepared answer is given; it cannot
//! any more (canceled, expired unused), and the purchase is voided; still open, and it
//! is settled now. No settled payment without its document, no document without a
//! settled payment.
//!
//! [`Hold::claim`]: crate::checkout::ledger::Hold::claim

// Each step's `Err` is the HTTP answer itself (`Response`), given once per request:
// boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

mod answer;
mod asking;
pub mod channels;
mod claim;
pub mod discovery;
mod front;
mod header;
pub mod idempotency;
pub mod ledger;
mod owed;
pub mod payment;
mod pending;
pub mod reconcile;
mod sale;
pub mod secret;
mod verify;

pub use answer::Void;
pub use header::{AnswerHeader, carries_readable_payment, settlement_header};
pub use sale::{LANDING_MARGIN_SECS, Refusal, out_of_time, settle_reserve};

/// The prepared answer lives in the ledger entry; purchases build it here.
pub use crate::checkout::ledger::Prepared;

use umpire_core::ApiError;
use umpire_core::product::Price;
use umpire_host::Deadline;
use umpire_pay::PaymentContext;
use umpire_x402::types::{Account, Network};
use umpire_x402::{PaymentFailure, SettlementResponse};

use crate::checkout::discovery::Listing;
use crate::checkout::idempotency::{COMPLETED_SECS, RequestHash, ScopedKey};
use crate::checkout::ledger::{Hold, PendingSale};
use crate::plumbing::metrics::{self, Metric};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, ClientIp, Request, Response};

use answer::{deliver, settlement_unknown};
use asking::Asking;
use claim::Claims;
use sale::{SETTLE_MIN, Sale};

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

/// What a product does around its sale that checkout does not know: follow-up work
/// put in place before the money moves (a sworn verdict's pending record and pass 2,
/// the answer to a validation request), so no crash between the two loses it, and
/// undone when the sale is voided. Follow-ups wait for the sale to be known (they ask
/// the ledger), so a purchase still pending keeps them.
#[async_trait::async_trait]
pub trait AfterSale: Send + Sync {
    /// Puts the follow-ups in place for the purchase paid by `payment_key` (the
    /// ledger's key, which they ask); `Err` voids the purchase before any money moves.
    async fn before_settling(&self, payment_key: &str) -> Result<(), Void>;
    /// The sale was voided, nothing charged: undo what `before_settling` left.
    async fn voided(&self) {}
}

/// A product with nothing to do around its sale (the reputation report: its answer is
/// the whole of it).
pub struct NothingAfter;

#[async_trait::async_trait]
impl AfterSale for NothingAfter {
    async fn before_settling(&self, _payment_key: &str) -> Result<(), Void> {
        Ok(())
    }
}

/// The span every log line of one purchase is written in: what was bought, and once
/// known the payment's key (a hash) and the verdict's id. Ids and hashes only: nothing
/// secret, nothing from the deliverable.
pub fn purchase_span(product: &'static str) -> tracing::Span {
    tracing::info_span!(
        "purchase",
        product,
        tier = tracing::field::Empty,
        payment_key = tracing::field::Empty,
        verdict_id = tracing::field::Empty,
    )
}

/// Counts a request to a paid route that carries no payment in the `unpaid` bucket: its
/// checks (and its URLs' lookups) before the 402 are work nobody has paid for. A request
/// with a payment is limited by its payment; a header that does not even read as one
/// is no payment.
pub async fn enforce_unpaid(state: &AppState, req: &Request) -> Result<(), ApiError> {
    if carries_readable_payment(req) {
        return Ok(());
    }
    crate::plumbing::limits::enforce(state, "unpaid", ClientIp::of(req)).await
}

/// Everything up to a verified, claimed payment; `Err` is the answer to give instead
/// (the 402, a refusal, or the replay of a completed identical request).
/// Whether the request may be (or lead to) a retry of a purchase already made: it
/// carries a payment header (the paid round, which [`begin`] answers with a replay, a
/// refusal or a fresh claim) or an Idempotency-Key (its unpaid round is answered 402,
/// and the paid one may replay). Checks that a purchase made since would fail belong
/// after [`begin`] for these.
pub fn may_be_a_retry(req: &Request) -> bool {
    req.headers()
        .contains_key(umpire_x402::HEADER_PAYMENT_SIGNATURE)
        || req.headers().contains_key(umpire_x402::HEADER_X_PAYMENT)
        || req.headers().contains_key("idempotency-key")
}

pub async fn begin<'a>(
    state: &'a AppState,
    req: &Request,
    product: Product,
    deadline: Deadline,
) -> Result<Checkout<'a>, Response> {
    let sale = Sale::open(state, product).await?;
    let asking = Asking::read(&sale, req, deadline)?;
    let Some(header) = &asking.header else {
        // A rerun of a purchase still settling is answered with it, never a 402.
        if let Some(r) = front::pending_unpaid(state, &asking).await {
            return Err(r);
        }
        return Err(sale.ask_for_payment());
    };
    let ctx = verify::matched(&sale, &asking, header).await?;
    let key = front::check_key(state, &asking, &ctx).await?;
    let paying = verify::verify(&sale, &asking, ctx, key).await?;
    let checkout = claim::claim(sale, &asking, paying).await?;
    tracing::Span::current().record("payment_key", checkout.payment_key());
    tracing::info!(network = %checkout.network, "payment verified and held");
    Ok(checkout)
}

/// A verified payment, claimed for this request.
pub struct Checkout<'a> {
    sale: Sale<'a>,
    /// The header the settlement is answered in.
    answer_in: AnswerHeader,
    /// What identifies the request.
    request_hash: RequestHash,
    /// Its Idempotency-Key as an unpaid rerun presents it.
    unpaid_key: Option<ScopedKey>,
    network: Network,
    /// The wallet the payment names.
    wallet: Option<Account>,
    /// What settlement needs.
    pub ctx: PaymentContext,
    /// The verified payer.
    pub payer: Account,
    /// The payment already moved to us: settling it is only recording it.
    settled: Option<SettlementResponse>,
    /// The Idempotency-Key claimed, if the request came with one.
    claims: Claims<'a>,
    /// The payment's ledger entry, held for this request.
    hold: Hold,
    /// When this request must have answered.
    deadline: Deadline,
    /// A reconciler job follows the purchase (queued as its settlement started).
    followed: bool,
}

impl Checkout<'_> {
    /// The 402 for a payment refused (or a purchase voided) after verification.
    pub fn refused(&self, failure: &PaymentFailure, refusal: Refusal) -> Response {
        self.sale.refused(
            self.answer_in,
            Some(&self.network),
            self.wallet,
            failure,
            refusal,
        )
    }

    /// Gives every claim back after our own failure: nothing was settled by us. A
    /// payment that had already moved to us (a bystander, or its payer, executed the
    /// authorization) was charged all the same: the answer says so, names the
    /// transaction and tells how to get the purchase (the identical request with the
    /// same payment buys it; it is charged nothing more), never "nothing was charged".
    pub async fn abandon(mut self, e: ApiError) -> Response {
        self.hold.void(self.claims.state, e.code.as_str()).await;
        self.claims.unbind().await;
        match &self.settled {
            Some(paid) => respond::error(&paid_but_not_delivered(e, paid)),
            None => respond::error(&e),
        }
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
        metrics::record(Metric::Void);
        tracing::warn!(
            budget_ms = budget.as_millis() as u64,
            "a purchase overran its time budget; voided"
        );
        self.abandon(out_of_time(budget)).await
    }

    /// Sells: the product's follow-ups put in place ([`AfterSale::before_settling`]),
    /// then [`Checkout::settle`]. A sale voided for certain (nothing charged) undoes
    /// them ([`AfterSale::voided`]); one whose outcome is unknown keeps them, and they
    /// wait for the chain's decision as the purchase does.
    pub async fn sell(
        &mut self,
        prepared: &Prepared,
        after: &dyn AfterSale,
    ) -> Result<SettlementResponse, Void> {
        after.before_settling(self.payment_key()).await?;
        match self.settle(prepared).await {
            Ok(settlement) => Ok(settlement),
            Err(void) if void.outcome_unknown() => Err(void),
            Err(void) => {
                after.voided().await;
                Err(void)
            }
        }
    }

    /// Writes the answer down, then settles: a crash from here on leaves what the
    /// customer's retry needs (see the module notes). Not started when the deadline
    /// leaves too little time to settle (voided, nothing charged; a payment already
    /// moved to us is delivered instead: it has nothing left to settle).
    async fn settle(&mut self, prepared: &Prepared) -> Result<SettlementResponse, Void> {
        let state = self.claims.state;
        if !self.deadline.allows(SETTLE_MIN) && self.settled.is_none() {
            return Err(Void::Internal(out_of_time(state.config.request_budget)));
        }
        // Kept for this request while the payment may still land.
        let now = state.config.clock.now();
        let kept_until = self.kept_until(now);
        // The request's keys are bound to the purchase before any money moves: from here
        // until it ends, whatever happens to this process, a rerun under them (paid or
        // not) is answered with it, never asked for a second payment.
        let payment = self.hold.key().clone();
        let unpaid = self.unpaid_key.as_ref().map(|k| (k, &self.request_hash));
        let expires = kept_until.max(now) + reconcile::PARK_AFTER_SECS + COMPLETED_SECS;
        let keys = match self.claims.bind_all(&payment, unpaid, expires).await {
            Ok(keys) => keys,
            // A payment already paid to us has nothing left to move: delivered all the
            // same (its keys are completed with the answer where they could be bound).
            Err(_) if self.settled.is_some() => self.claims.keys(),
            Err(e) => return Err(Void::Internal(e)),
        };
        let prepared = &Prepared {
            sale: Some(self.pending_sale(keys)),
            ..prepared.clone()
        };
        self.hold
            .prepare(state, prepared, kept_until)
            .await
            .map_err(Void::Internal)?;
        if let Some(settled) = self.settled.take() {
            return Ok(settled);
        }
        // Followed from before any money moves: should this process die, or its store
        // falter, before the outcome is recorded, its reconciler decides it (and stores
        // its verdict). A queue that refuses leaves the customer's retry to decide it.
        // (Bounded: a slow queue must not eat the settlement's time.)
        self.followed = tokio::time::timeout(
            FOLLOW_WITHIN,
            reconcile::follow_after(state, self.hold.key(), self.deadline.remaining()),
        )
        .await
        .unwrap_or(false);
        state
            .payments
            .settle(&self.ctx, self.deadline)
            .await
            .map_err(Void::Settlement)
    }

    /// What this purchase's reconciler needs, should its settlement's outcome not be
    /// known in time.
    fn pending_sale(&self, keys: Vec<crate::checkout::ledger::BoundKey>) -> PendingSale {
        PendingSale {
            payment: self.ctx.raw.clone(),
            requirements: self.ctx.requirements.clone(),
            requirements_v1: self.ctx.requirements_v1.clone(),
            answer_in: self.answer_in.name().to_owned(),
            resource_url: self.sale.resource_url(),
            keys,
            transaction: None,
            followed: false,
            paid: false,
        }
    }

    /// The ledger key of this purchase's payment (pass 2 of a sworn verdict asks it
    /// whether the purchase went through).
    pub fn payment_key(&self) -> &str {
        self.hold.key()
    }

    /// Whether the payment had already moved to us (a purchase resumed after its
    /// settlement): what it buys is owed, whatever a check would now say.
    pub fn already_settled(&self) -> bool {
        self.settled.is_some()
    }

    /// Answers a settled purchase and records it in the ledger and for replays, or
    /// voids a purchase that took nothing and releases its key, or leaves one whose
    /// outcome is unknown pending: its keys bound to it, its reconciler following it.
    pub async fn finish(
        mut self,
        answer: Result<(Prepared, SettlementResponse), Void>,
    ) -> Response {
        let state = self.claims.state;
        match answer {
            Err(v) if v.outcome_unknown() => {
                // The transfer may have gone through with its answer lost: the answer
                // stays prepared and the purchase pending until the chain decides.
                let transaction = match &v {
                    Void::Settlement(f) => f.transaction.clone(),
                    Void::Internal(_) => None,
                };
                let r = match &v {
                    Void::Settlement(f) => {
                        tracing::warn!(error = %f, "settlement outcome unknown; the purchase is pending");
                        let until = self.kept_until(state.config.clock.now());
                        settlement_unknown(self.answer_in, &self.ctx, f, until)
                    }
                    Void::Internal(e) => respond::error(e),
                };
                self.pend(transaction).await;
                r
            }
            Ok((prepared, settlement)) => self.delivered(prepared, settlement).await,
            Err(Void::Settlement(f)) => {
                metrics::record(Metric::Void);
                tracing::warn!(error = %f, "settlement failed; purchase voided");
                let r = self.refused(&f, Refusal::Voided);
                self.hold.void(state, f.reason.as_str()).await;
                self.claims.unbind().await;
                r
            }
            Err(Void::Internal(e)) => {
                // Our own failure before any settlement of ours. A payment that had
                // moved to us already is not voided as "nothing charged".
                metrics::record(Metric::Void);
                tracing::warn!(
                    code = e.code.as_str(),
                    "purchase voided; nothing charged by us"
                );
                self.abandon(e).await
            }
        }
    }

    /// Answers a settled purchase: its verdict stored, its keys completed, the ledger
    /// Settled once the verdict is stored (a verdict the store would not take yet is
    /// stored by the purchase's reconciler from the prepared answer: its secret goes
    /// out only when one follows it).
    async fn delivered(mut self, prepared: Prepared, settlement: SettlementResponse) -> Response {
        let state = self.claims.state;
        // Every delivered purchase was settled first.
        metrics::record(Metric::Settlement);
        let settlement = self.sale.with_receipt(settlement);
        let (r, stored) = deliver(
            state,
            self.answer_in,
            prepared,
            &settlement,
            self.deadline,
            self.followed,
        )
        .await;
        tracing::info!(
            transaction = %settlement.transaction,
            status = r.status().as_u16(),
            "purchase settled and answered"
        );
        self.claims.complete(&r).await;
        if stored {
            self.hold.settled(state, &settlement.transaction, &r).await;
            return r;
        }
        tracing::error!(
            transaction = %settlement.transaction,
            "a settled purchase's verdict could not be stored yet; its reconciler stores it"
        );
        let tx = settlement.transaction.clone();
        let followed = self.followed || reconcile::follow(state, self.hold.key()).await;
        self.hold
            .leave_pending(state, |sale| {
                sale.transaction = Some(tx);
                sale.paid = true;
                sale.followed = followed;
            })
            .await;
        r
    }

    /// Leaves this purchase pending: its answer prepared, its keys bound to it since
    /// before it settled, and a reconciler following it to its end.
    async fn pend(mut self, transaction: Option<String>) {
        let state = self.claims.state;
        metrics::record(Metric::PurchasePending);
        let followed = self.followed || reconcile::follow(state, self.hold.key()).await;
        // The keys stay bound: dropped here unreleased.
        self.claims.forget();
        self.hold
            .leave_pending(state, |sale| {
                if transaction.is_some() {
                    sale.transaction = transaction;
                }
                sale.followed = followed;
            })
            .await;
    }

    /// Until when this purchase's payment may still land: the authorization's
    /// `validBefore` and a margin, no later than the window we offered allows (a
    /// payment found already paid may say it is valid for ages; both stores keep a
    /// number they can write); a payment that does not say (a Solana transaction) is
    /// kept for two holds.
    fn kept_until(&self, now: u64) -> u64 {
        let state = self.claims.state;
        let longest = now
            .saturating_add(self.ctx.requirements.max_timeout_seconds)
            .saturating_add(umpire_x402::evm::VALID_BEFORE_SLACK_SECS);
        match self.ctx.lands_by() {
            Some(t) => t.min(longest).saturating_add(LANDING_MARGIN_SECS),
            None => now + 2 * u64::from(state.config.in_progress_secs),
        }
    }
}

/// How long the reconciler's queueing may hold a purchase's settlement back.
const FOLLOW_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// The answer when our own failure ends a purchase whose payment had already moved to
/// us (whoever executed it): it was charged, and buys this very request when it is
/// sent again with the same payment, for nothing more.
fn paid_but_not_delivered(e: ApiError, paid: &SettlementResponse) -> ApiError {
    let mut out = ApiError::new(
        e.code,
        format!(
            "your payment reached us (transaction {}), but this purchase could not be completed: {}",
            paid.transaction, e.message
        ),
        "You were charged once and are owed this purchase: send the identical request again with the same payment (the same PAYMENT-SIGNATURE header, and Idempotency-Key if you used one). It is answered with the purchase and never charged again. Do not sign a new payment.",
    )
    .with_detail("transaction", paid.transaction.as_str())
    .with_detail("charged", true);
    if let Some(secs) = e.retry_after {
        out = out.with_retry_after(secs);
    }
    out
}
