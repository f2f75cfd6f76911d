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

use std::time::Duration;

use http::HeaderValue;
use umpire_core::product::{Price, REPUTATION_PRICE, Tier};
use umpire_core::{ApiError, ErrorCode, Value};
use umpire_host::Deadline;
use umpire_pay::evm::REASON_NONCE_USED;
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

/// Which header a settlement response goes back in: the one matching the header the
/// payment came in (`PAYMENT-SIGNATURE` → `PAYMENT-RESPONSE`, `X-PAYMENT` →
/// `X-PAYMENT-RESPONSE`), whatever x402 version the payload speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerHeader {
    PaymentResponse,
    XPaymentResponse,
}

impl AnswerHeader {
    fn name(self) -> &'static str {
        match self {
            AnswerHeader::PaymentResponse => HEADER_PAYMENT_RESPONSE,
            AnswerHeader::XPaymentResponse => HEADER_X_PAYMENT_RESPONSE,
        }
    }

    /// The header a request's payment (if any) is answered in.
    fn of(req: &Request) -> AnswerHeader {
        if req.headers().get(HEADER_PAYMENT_SIGNATURE).is_none()
            && req.headers().get(HEADER_X_PAYMENT).is_some()
        {
            AnswerHeader::XPaymentResponse
        } else {
            AnswerHeader::PaymentResponse
        }
    }
}

/// A payment header as the client sent it.
struct PaymentHeader {
    answer_in: AnswerHeader,
    raw: serde_json::Value,
    payment: PaymentPayload,
}

/// The payment of a request: `PAYMENT-SIGNATURE` (x402 v2's name) or `X-PAYMENT` (v1's,
/// which many clients send whatever they speak), each carrying a v1 or a v2 payload,
/// told apart by its `x402Version`.
fn read_payment_header(req: &Request) -> Result<Option<PaymentHeader>, PaymentFailure> {
    let (name, value) = match (
        req.headers().get(HEADER_PAYMENT_SIGNATURE),
        req.headers().get(HEADER_X_PAYMENT),
    ) {
        (Some(v), _) => (HEADER_PAYMENT_SIGNATURE, v),
        (None, Some(v)) => (HEADER_X_PAYMENT, v),
        (None, None) => return Ok(None),
    };
    let malformed = |why: String| {
        PaymentFailure::invalid(
            "invalid_payload",
            format!("the {name} header is not base64 x402 JSON: {why}"),
        )
    };
    let text = value
        .to_str()
        .map_err(|_| malformed("it is not ASCII".into()))?;
    let raw: serde_json::Value = decode_header(text).map_err(|e| malformed(e.to_string()))?;
    let payment = PaymentPayload::from_json(raw.clone()).map_err(malformed)?;
    Ok(Some(PaymentHeader {
        answer_in: AnswerHeader::of(req),
        raw,
        payment,
    }))
}

/// The request's idempotency key: the `Idempotency-Key` header, or the id a v2 payment
/// carries in its `payment-identifier` extension (reference clients using the
/// extension send no header), honored alike. Both present must agree.
fn request_key(
    req: &Request,
    header: Option<&PaymentHeader>,
) -> Result<Option<RequestKey>, ApiError> {
    let from_header = IdempotencyKey::from_headers(req.headers())?;
    let from_payment = match header {
        Some(h) => discovery::payment_id(&h.raw).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidIdempotencyKey,
                e.0,
                "Use a random id such as pay_7d5d747be160e280504c099d984bcfe0 (the extension's generatePaymentId makes one), and reuse it only to retry the identical request.",
            )
            .with_detail("reason", "payment_identifier")
        })?,
        None => None,
    };
    match (from_header, from_payment) {
        (Some(key), Some(id)) if key.as_str() != id => Err(ApiError::new(
            ErrorCode::InvalidIdempotencyKey,
            "the Idempotency-Key header and the payment's payment-identifier id differ; each names the purchase for replays, so they must agree",
            "Send one of them, or the same value in both. Nothing was charged.",
        )
        .with_detail("reason", "payment_identifier_mismatch")),
        (Some(key), _) => Ok(Some(RequestKey {
            key,
            from_payment: false,
        })),
        (None, Some(id)) => IdempotencyKey::parse(&id).map(|key| {
            Some(RequestKey {
                key,
                from_payment: true,
            })
        }),
        (None, None) => Ok(None),
    }
}

/// A request's idempotency key and where it came from.
struct RequestKey {
    key: IdempotencyKey,
    /// From the payment's payment-identifier: it travels inside the payment (to a
    /// facilitator, through MCP clients and proxies), so unlike the header it is no
    /// secret between the client and us. Its replays are given only to a verified
    /// payer, or with the one-time secret withheld.
    from_payment: bool,
}

/// `r` with its one-time `secret` withheld (null), for replays to a requester who has
/// not proven to be the payer.
fn withhold_secret(r: Response) -> Response {
    let (parts, body) = r.into_parts();
    let body = match umpire_core::json::parse(&body) {
        Ok(v) if v.get("secret").is_some() => {
            bytes::Bytes::from(v.with("secret", Value::Null).to_canonical_vec())
        }
        _ => body,
    };
    let mut r = http::Response::from_parts(parts, body);
    r.headers_mut().remove(http::header::CONTENT_LENGTH);
    r
}

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

/// What is for sale in this request: the product, at this moment's prices.
struct Sale<'a> {
    state: &'a AppState,
    product: Product,
    sol: Option<SolRate>,
}

impl Sale<'_> {
    /// This moment's offer: the product's price, the SOL rate, and the key SOL quotes
    /// are sealed with (the signing key's; a function holding only the public key
    /// offers no SOL).
    fn offer(&self) -> Offer<'_> {
        Offer {
            price: self.product.price,
            resource: &self.product.path,
            sol: self.sol,
            now: self.state.config.clock.now(),
            quote_key: Some(self.state.signer.as_ref()),
        }
    }

    fn resource(&self) -> ResourceInfo {
        ResourceInfo {
            url: format!("{}{}", self.state.config.issuer, self.product.path),
            description: self.product.listing.description(),
            mime_type: "application/json".into(),
            service_name: Some(discovery::SERVICE_NAME.into()),
            tags: Some(discovery::TAGS.iter().map(|t| (*t).to_owned()).collect()),
        }
    }

    /// The v2 requirements, with what discovery and the payment-identifier extension
    /// need to know about the route.
    fn required(&self, reason: &str) -> PaymentRequired {
        let mut required =
            self.state
                .config
                .rails
                .payment_required(&self.offer(), self.resource(), reason);
        required.extensions = discovery::extensions(self.product.listing);
        required
    }

    fn v1_accepts(&self) -> Vec<PaymentRequirementsV1> {
        self.state
            .config
            .rails
            .accepts_v1(&self.offer(), &self.resource())
    }

    fn ask_for_payment(&self) -> Response {
        payment::payment_required_response(
            &self.required("payment required"),
            &self.v1_accepts(),
            &format!(
                "{} costs ${}; pay with x402",
                self.product.name,
                self.product.price.usd_decimal()
            ),
            "Retry the identical request with a PAYMENT-SIGNATURE (or X-PAYMENT) header (x402; @x402/fetch does this for you) and an Idempotency-Key. The PAYMENT-REQUIRED header lists every accepted rail, most preferred first.",
        )
    }

    /// A refused payment: 402 with our requirements again (so the client can pay
    /// correctly) and a `success:false` settlement response naming the reason.
    fn refused(
        &self,
        answer_in: AnswerHeader,
        network: &str,
        payer: Option<String>,
        failure: &PaymentFailure,
        voided: bool,
    ) -> Response {
        if failure.kind == FailureKind::Config {
            return respond::error(&crate::internal(failure));
        }
        if failure.kind == FailureKind::Unavailable && !voided {
            tracing::warn!(error = %failure, "payment could not be verified");
            return respond::error(&chain_unavailable());
        }
        let (message, hint) = if voided && failure.reason == REASON_NONCE_USED {
            (
                "the authorization was executed by another transaction before this purchase settled it, so the purchase was voided: nothing was delivered or kept".to_owned(),
                "This purchase took no money: a transfer it did not make spent the authorization (your own, or one by whoever saw the payment header). Sign a new payment and retry.",
            )
        } else if voided {
            (
                format!(
                    "settlement failed, so the purchase was voided: nothing was delivered or kept ({}: {})",
                    failure.reason, failure.message
                ),
                "Nothing was charged. Fix the cause (for example the wallet's balance) and retry with a new payment; the same Idempotency-Key may be used again.",
            )
        } else {
            (
                format!(
                    "the payment was refused ({}): {}",
                    failure.reason, failure.message
                ),
                "Nothing was charged. Sign a new payment against the requirements in PAYMENT-REQUIRED and retry.",
            )
        };
        let mut r = payment::payment_required_response(
            &self.required(&failure.reason),
            &self.v1_accepts(),
            &message,
            hint,
        );
        let settlement = SettlementResponse {
            success: false,
            transaction: String::new(),
            network: network.to_owned(),
            payer,
            error_reason: Some(failure.reason.clone()),
        };
        if let (name, Some(v)) = settlement_header(answer_in, &settlement) {
            r.headers_mut().insert(name, v);
        }
        r
    }
}

pub fn settlement_header(
    answer_in: AnswerHeader,
    s: &SettlementResponse,
) -> (&'static str, Option<HeaderValue>) {
    (
        answer_in.name(),
        HeaderValue::from_str(&encode_header(s)).ok(),
    )
}

/// Releases every claim this request holds (a voided or failed purchase).
struct Claims<'a> {
    state: &'a AppState,
    held: Vec<(String, String)>,
}

impl Claims<'_> {
    async fn release(&mut self) {
        for (key, hash) in self.held.drain(..) {
            if let Err(e) = idempotency::release(self.state, &key, &hash).await {
                tracing::error!(error = %e.message, key, "could not release a claim");
            }
        }
    }

    async fn complete(&mut self, response: &Response) {
        for (key, hash) in self.held.drain(..) {
            if let Err(e) = idempotency::complete(self.state, &key, &hash, response).await {
                tracing::error!(error = %e.message, key, "could not record a completed purchase");
            }
        }
    }
}

/// The share of a paid request's time budget kept for settlement: the work (verify,
/// fetches, checks, ledger reads) must end this long before the deadline. Two fifths
/// of the budget, at most 10 s (a self-settled receipt normally comes in 1–2 s; the
/// facilitator's `/settle` in a few).
pub fn settle_reserve(budget: Duration) -> Duration {
    (budget * 2 / 5).min(Duration::from_secs(10))
}

/// Settlement is not started with less than this left before the deadline: it could
/// not answer in time, so the purchase is voided instead (nothing charged).
const SETTLE_MIN: Duration = Duration::from_millis(700);

/// The answer when a purchase's work used up its time budget: nothing charged.
pub fn out_of_time(budget: Duration) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "the purchase could not be completed within this request's time budget ({} ms), so it was voided: nothing was charged or kept",
            budget.as_millis()
        ),
        "Retry with the same payment if it is still valid (or a new one): slow fetch targets or a slow chain make this happen; fewer URLs or faster ones help.",
    )
    .with_detail("reason", "time_budget")
    .with_retry_after(RETRY_AFTER_SECS)
}

/// Tries to persist a settled verdict before giving up on the status link (the
/// customer paid: the answer is given even if the record cannot be stored).
const PERSIST_ATTEMPTS: u32 = 3;

/// A purchase's answer as it will be given, written down before the payment settles:
/// the response without its settlement, and the verdict to store once paid.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Prepared {
    pub status: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// The body without the settlement (stable JSON text).
    pub body: String,
    /// Where the settlement goes in the body, e.g. `["settlement"]`.
    pub settlement_at: Vec<String>,
    /// A verdict to store once the payment settled. The body's `secret` is null here
    /// and given on delivery once the verdict is stored (see `secret`).
    pub record: Option<VerdictRecord>,
}

impl Prepared {
    pub fn new(status: u16, body: &Value, settlement_at: &[&str]) -> Prepared {
        Prepared {
            status,
            location: None,
            body: String::from_utf8_lossy(&body.to_canonical_vec()).into_owned(),
            settlement_at: settlement_at.iter().map(|s| (*s).to_owned()).collect(),
            record: None,
        }
    }
}

/// Stores a settled verdict, a few times if the store falters and the deadline allows;
/// `true` once it is there (also when an earlier attempt stored it and lost the
/// answer). Past the deadline the paid answer goes out without its status link
/// rather than being cut off by the platform; the retry stores it.
async fn persist(state: &AppState, record: &VerdictRecord, deadline: Deadline) -> bool {
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
const ANSWER_MARGIN: Duration = Duration::from_millis(300);

/// The answer of a settled purchase: its verdict stored, the settlement in the body
/// and in the x402 header.
async fn deliver(
    state: &AppState,
    answer_in: AnswerHeader,
    prepared: Prepared,
    settlement: &SettlementResponse,
    deadline: Deadline,
) -> Response {
    let stored = match &prepared.record {
        Some(record) => persist(state, record, deadline).await,
        None => true,
    };
    let mut body = umpire_core::json::parse(prepared.body.as_bytes()).unwrap_or(Value::Null);
    // The secret is derived, never written down: given only with a stored verdict
    // (without one there is no status to use it on).
    if stored {
        body = crate::secret::reveal(state.signer.as_ref(), body);
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
    r
}

/// `value` placed at `path` inside `body` (objects along the way).
fn set_at(body: Value, path: &[String], value: Value) -> Value {
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
fn settlement_value(s: &SettlementResponse) -> Value {
    serde_json::to_value(s)
        .map(Value::from)
        .unwrap_or(Value::Null)
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
                self.hold.void(state, &f.reason).await;
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
/// The answer for a payment that already bought (or is buying) this very request: its
/// purchase replayed with the secret withheld, waited for while it runs (`in_flight`
/// past a while). Only for whoever holds the payer's
/// own signature over the authorization (checked offline: cheap, and it is what scopes
/// the replay to the wallet that paid); `None` when there is nothing to replay.
async fn replay_by_payment(
    state: &AppState,
    req: &Request,
    ctx: &PaymentContext,
    payment_key: &str,
    request_hash: &str,
    deadline: Deadline,
) -> Option<Response> {
    if !ctx.signed_by_payer() {
        return None;
    }
    // Every lookup counts, hit or miss: a settled authorization is public on chain, so
    // whoever rebuilds its header may guess at the request it bought.
    if let Err(e) = limits::enforce(state, "replay", ClientIp::of(req)).await {
        return Some(respond::error(&e));
    }
    match ledger::await_purchase(state, payment_key, request_hash, deadline, payment_in_use).await {
        Running::Answered(r) => Some(r),
        Running::Gone => None,
    }
}
/// A retry refused by verification, of a purchase whose process died (or lost its
/// answer) after preparing it: if `ctx`'s payment has a prepared answer for this very
/// request and the chain shows that authorization paid us, the answer (stored and
/// recorded now); `None` when there is nothing to recover and the refusal stands.
async fn recover(
    state: &AppState,
    (scoped, reveal): (Option<&String>, bool),
    payment_key: &str,
    request_hash: &str,
    ctx: &PaymentContext,
    answer_in: AnswerHeader,
    deadline: Deadline,
) -> Option<Response> {
    let err = |e: ApiError| Some(respond::error(&e));
    // Take the payment back, and the key, as the purchase itself would.
    let (hold, prepared) = match Hold::retake(state, payment_key, request_hash).await {
        Ok(Retake::Taken(hold, prepared)) => (hold, *prepared),
        Ok(Retake::Busy) => return err(payment_in_use()),
        Ok(Retake::Nothing) => return None,
        Err(e) => return err(e),
    };
    let mut claims = Claims {
        state,
        held: Vec::new(),
    };
    if let Some(scoped) = scoped {
        match idempotency::claim(state, scoped, request_hash).await {
            Ok(Decision::Proceed) => claims.held.push((scoped.clone(), request_hash.to_owned())),
            Ok(Decision::Replay(r)) => {
                hold.leave_unknown(state).await;
                return Some(if reveal { r } else { withhold_secret(r) });
            }
            Err(e) => {
                hold.leave_unknown(state).await;
                return err(e);
            }
        }
    }
    let found = tokio::time::timeout_at(
        deadline.less(ANSWER_MARGIN).instant().into(),
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
            crate::metrics::record(crate::metrics::Metric::Settlement);
            let r = deliver(state, answer_in, prepared, &settlement, deadline).await;
            hold.settled(state, &settlement.transaction, &r).await;
            claims.complete(&r).await;
            Some(r)
        }
        Ok(None) => {
            // Not settled (yet): refused for what verification found; the answer stays
            // prepared in case a broadcast from the interrupted purchase still lands.
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
            hold.void(state, &f.reason).await;
            claims.release().await;
            None
        }
    }
}

/// A request whose payment failed verification, as the paths that may still owe it a
/// purchase need it.
struct Asking<'a> {
    req: &'a Request,
    request_hash: &'a str,
    /// The idempotency key it came with, scoped to the wallet its payment names.
    scoped: Option<&'a String>,
    /// Whether a replay may carry the one-time secret (see `RequestKey`).
    reveal: bool,
    answer_in: AnswerHeader,
    deadline: Deadline,
}

impl Asking<'_> {
    /// The purchase `ctx`'s payment is owed, if any: the one this very authorization
    /// already bought for this very request (its answer lost, or resent without an
    /// Idempotency-Key as @x402/fetch resends it), or one interrupted after its answer
    /// was prepared, delivered if the chain shows the payment went through. Never a
    /// refusal of a payment that paid.
    async fn owed(&self, state: &AppState, ctx: &PaymentContext) -> Option<Response> {
        let payment_key = ledger::payment_key(ctx);
        if let Some(r) = replay_by_payment(
            state,
            self.req,
            ctx,
            &payment_key,
            self.request_hash,
            self.deadline,
        )
        .await
        {
            return Some(r);
        }
        recover(
            state,
            (self.scoped, self.reveal),
            &payment_key,
            self.request_hash,
            ctx,
            self.answer_in,
            self.deadline,
        )
        .await
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
    let network = rail.network.clone();
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
                            Family::Evm => REASON_NONCE_USED,
                            Family::Svm => umpire_pay::svm::REASON_DUPLICATE,
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
