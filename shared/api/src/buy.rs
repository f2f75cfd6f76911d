//! `POST /v1/verdicts/{tier}`: the paid verdict path, in the order DESIGN.md fixes:
//! validate → idempotency → 402 or verify → claim → judge (isolated checker) → sign →
//! settle → persist and answer 201. Refusals come before any payment is asked for; a
//! settlement that fails after the checks ran voids the purchase (no document kept,
//! no record, the key reusable) and answers 402 with `PAYMENT-RESPONSE success:false`.

use std::time::Duration;

use http::HeaderValue;
use umpire_core::document::CheckResult;
use umpire_core::hash::{random_bytes, random_id, sha256_hex};
use umpire_core::json::{Value, parse};
use umpire_core::product::{DOCUMENT_RETENTION_DAYS, Tier};
use umpire_core::{ApiError, ErrorCode};
use umpire_pay::rails::SolRate;
use umpire_pay::settle::payer_named_in;
use umpire_pay::{
    FailureKind, HEADER_PAYMENT_RESPONSE, HEADER_PAYMENT_SIGNATURE, HEADER_X_PAYMENT,
    HEADER_X_PAYMENT_RESPONSE, PaymentContext, PaymentFailure, PaymentPayload, PaymentRequired,
    PaymentRequirementsV1, ResourceInfo, SettlementResponse, decode_header, encode_header,
};
use umpire_store::{Claim, IdempotencyState, VerdictRecord, VerdictStatus};

use crate::handlers::json_body;
use crate::idempotency::{self, Decision, IdempotencyKey};
use crate::purchase::{Envelope, Purchase, assess};
use crate::{AppState, ClientIp, Request, Response, limits, payment, respond, sworn, verdict};

/// Tries to persist a settled verdict before giving up on the status link (the
/// customer paid: the document is answered even if it cannot be stored).
const PERSIST_ATTEMPTS: u32 = 3;

/// A payment header as the client sent it.
struct PaymentHeader {
    version: u32,
    raw: serde_json::Value,
    payment: PaymentPayload,
}

fn tier_of(req: &Request) -> Result<Tier, ApiError> {
    let name = crate::routes::last_segment(req);
    let tiers = Tier::ALL.map(Tier::as_str).join(", ");
    Tier::parse(name).ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownTier,
            format!("there is no tier {name:?}"),
            format!("Buy one of: {tiers} (POST /v1/verdicts/<tier>). GET /v1/quote lists prices."),
        )
    })
}

/// The purchase in the body, or the corrective refusal (nothing asked, nothing charged).
async fn purchase_of(state: &AppState, tier: Tier, req: &Request) -> Result<Purchase, ApiError> {
    let body = json_body(req)?;
    let Some(obj) = body.as_object() else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the body must be a JSON object, not {}", body.type_name()),
            "Send {\"spec\":{\"checks\":[...]},\"deliverable\":{\"text\":\"...\"}}.",
        ));
    };
    let mut assessment = assess(tier, obj, Envelope::Purchase, &state.fetch_policy());
    let needs_fetch = !assessment.urls.is_empty();
    match &state.fetcher {
        Some(f) => assessment.resolve_urls(f).await,
        None if needs_fetch => {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                "this process fetches no URLs, so url_probe and content_hash on a url cannot be judged here",
                "Judge text or JSON you already have with the basic tier; nothing was charged.",
            ));
        }
        None => {}
    }
    let purchase = assessment.into_purchase(tier)?;
    if tier == Tier::Sworn {
        sworn::check_job_size(&purchase)?;
        if state.queue.is_none() {
            return Err(ApiError::new(
                ErrorCode::Unavailable,
                "this process cannot schedule pass 2, so it does not sell sworn verdicts",
                "Buy a probe verdict, or use a deployment with a job queue; nothing was charged.",
            ));
        }
    }
    Ok(purchase)
}

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
    let version = payment.version();
    if (version == 2) != (name == HEADER_PAYMENT_SIGNATURE) {
        return Err(malformed(format!(
            "x402Version {version} does not belong in {name} (v2 uses PAYMENT-SIGNATURE, v1 X-PAYMENT)"
        )));
    }
    Ok(Some(PaymentHeader {
        version,
        raw,
        payment,
    }))
}

/// What is for sale in this request: the tier, at this moment's prices.
struct Sale<'a> {
    state: &'a AppState,
    tier: Tier,
    sol: Option<SolRate>,
}

impl Sale<'_> {
    fn resource(&self) -> ResourceInfo {
        ResourceInfo {
            url: format!(
                "{}/v1/verdicts/{}",
                self.state.config.issuer,
                self.tier.as_str()
            ),
            description: format!("Umpire {} verdict", self.tier.as_str()),
            mime_type: "application/json".into(),
        }
    }

    fn required(&self, reason: &str) -> PaymentRequired {
        self.state.config.rails.payment_required(
            self.tier.price(),
            self.sol,
            self.resource(),
            reason,
        )
    }

    fn v1_accepts(&self) -> Vec<PaymentRequirementsV1> {
        self.state
            .config
            .rails
            .accepts_v1(self.tier.price(), self.sol, &self.resource())
    }

    fn ask_for_payment(&self) -> Response {
        payment::payment_required_response(
            &self.required("payment required"),
            &self.v1_accepts(),
            &format!(
                "a {} verdict costs ${}; pay with x402",
                self.tier.as_str(),
                self.tier.price().usd_decimal()
            ),
            "Retry the identical request with a PAYMENT-SIGNATURE header (x402 v2; @x402/fetch does this for you) and an Idempotency-Key. The PAYMENT-REQUIRED header lists every accepted rail, most preferred first.",
        )
    }

    /// A refused payment: 402 with our requirements again (so the client can pay
    /// correctly) and a `success:false` settlement response naming the reason.
    fn refused(
        &self,
        version: u32,
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
            return respond::error(&ApiError::new(
                ErrorCode::ChainUnavailable,
                "the payment could not be checked right now (chain or facilitator unreachable)",
                "Retry the identical request in a few seconds; nothing was charged.",
            ));
        }
        let (message, hint) = if voided {
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
        if let (name, Some(v)) = settlement_header(version, &settlement) {
            r.headers_mut().insert(name, v);
        }
        r
    }
}

fn settlement_header(version: u32, s: &SettlementResponse) -> (&'static str, Option<HeaderValue>) {
    let name = if version == 1 {
        HEADER_X_PAYMENT_RESPONSE
    } else {
        HEADER_PAYMENT_RESPONSE
    };
    (name, HeaderValue::from_str(&encode_header(s)).ok())
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

pub async fn buy(state: &AppState, req: &Request) -> Response {
    match buy_inner(state, req).await {
        Ok(r) | Err(r) => r,
    }
}

async fn buy_inner(state: &AppState, req: &Request) -> Result<Response, Response> {
    let err = |e: ApiError| respond::error(&e);
    // 1. Refusals before anything is asked for.
    let tier = tier_of(req).map_err(err)?;
    let purchase = purchase_of(state, tier, req).await.map_err(err)?;
    if state.config.rails.rails.is_empty() {
        return Err(err(ApiError::new(
            ErrorCode::Unavailable,
            "this server takes no payments (no payment rail is configured)",
            "Run `make devnet` for a local chain, or set UMPIRE_EVM_PAY_TO and a settlement mode; nothing was charged.",
        )));
    }
    let key = IdempotencyKey::from_headers(req.headers()).map_err(err)?;
    let sale = Sale {
        state,
        tier,
        sol: state.sol_rate().await,
    };
    let header = read_payment_header(req).map_err(|f| sale.refused(2, "", None, &f, false))?;
    let request_hash = idempotency::request_hash(req.method(), req.uri().path(), req.body());

    // 2. A completed identical request is answered in front of the paywall.
    let wallet = header.as_ref().and_then(|h| payer_named_in(&h.payment));
    let scoped = key.as_ref().map(|k| k.scoped(wallet.as_deref()));
    if let Some(scoped) = &scoped {
        match idempotency::check(state, scoped, &request_hash).await {
            Ok(Decision::Proceed) => {}
            Ok(Decision::Replay(r)) => {
                limits::enforce(state, "replay", ClientIp::of(req))
                    .await
                    .map_err(err)?;
                return Ok(r);
            }
            Err(e) => return Err(err(e)),
        }
    }

    // 3. No payment: ask for one.
    let Some(header) = header else {
        return Ok(sale.ask_for_payment());
    };

    // 4. Match against our own requirements, then verify.
    let (rail, requirements) = state
        .config
        .rails
        .match_payment(&header.payment, tier.price(), sale.sol)
        .map_err(|e| {
            let f = PaymentFailure::invalid(e.reason(), e.to_string());
            sale.refused(header.version, "", wallet.clone(), &f, false)
        })?;
    let requirements_v1 = sale
        .v1_accepts()
        .into_iter()
        .find(|r| Some(&r.network) == rail.v1_network.as_ref() && r.asset == rail.asset);
    let network = rail.network.clone();
    let ctx = PaymentContext {
        raw: header.raw.clone(),
        payment: header.payment.clone(),
        rail,
        requirements,
        requirements_v1,
    };
    let refused = |f: &PaymentFailure, voided: bool| {
        sale.refused(header.version, &network, wallet.clone(), f, voided)
    };
    let now = umpire_core::time::now_unix();
    let verified = state
        .payments
        .verify(&ctx, now)
        .await
        .map_err(|f| refused(&f, false))?;

    // 5. Claim the key, then the payment itself: one authorization pays for one
    //    purchase, whatever key it arrives under.
    let mut claims = Claims {
        state,
        held: Vec::new(),
    };
    if let Some(scoped) = &scoped {
        match idempotency::claim(state, scoped, &request_hash).await {
            Ok(Decision::Proceed) => claims.held.push((scoped.clone(), request_hash.clone())),
            Ok(Decision::Replay(r)) => return Ok(r),
            Err(e) => return Err(err(e)),
        }
    }
    let payment_key = format!(
        "payment|{}",
        sha256_hex(
            &umpire_core::Value::from(header.raw.get("payload").cloned().unwrap_or_default())
                .to_canonical_vec()
        )
    );
    match claim_payment(state, &payment_key, &request_hash).await {
        Ok(()) => claims.held.push((payment_key, request_hash.clone())),
        Err(f) => {
            claims.release().await;
            return Err(match f {
                PaymentClaimError::Spent => refused(
                    &PaymentFailure::invalid(
                        "invalid_exact_evm_payload_authorization_nonce_used",
                        "this payment was already used for another purchase",
                    ),
                    false,
                ),
                PaymentClaimError::InUse => err(ApiError::new(
                    ErrorCode::InFlight,
                    "this payment is being used by another request right now",
                    "Wait a few seconds and retry with the same Idempotency-Key to get that request's response.",
                )
                .with_detail("retry_after_seconds", 2u64)),
                PaymentClaimError::Store(e) => err(e),
            });
        }
    }

    // 6. Judge in the isolated checker (pass 1 of a sworn verdict).
    let results = match verdict::judge(state, &purchase).await {
        Ok(r) => r,
        Err(e) => {
            claims.release().await;
            return Err(err(crate::internal(e)));
        }
    };
    let verdict_id = random_id("vrd");
    let secret = format!("sec_{}", hex::encode(random_bytes::<32>()));
    let status_url = format!("{}/v1/verdicts/{verdict_id}", state.config.issuer);
    let paid = Paid {
        state,
        verdict_id: &verdict_id,
        secret: &secret,
        status_url: &status_url,
        payer: &verified.payer,
        version: header.version,
    };
    let answer = if tier == Tier::Sworn {
        paid.sworn(&purchase, &results, &ctx).await
    } else {
        paid.immediate(&purchase, &results, &ctx).await
    };
    match answer {
        Ok(r) => {
            claims.complete(&r).await;
            Ok(r)
        }
        Err(Void::Settlement(f)) => {
            tracing::warn!(error = %f, %verdict_id, "settlement failed; purchase voided");
            claims.release().await;
            Err(refused(&f, true))
        }
        Err(Void::Internal(e)) => {
            claims.release().await;
            Err(err(e))
        }
    }
}

/// Why a judged purchase was voided (nothing kept, claims released).
enum Void {
    Settlement(PaymentFailure),
    Internal(ApiError),
}

/// A judged purchase on its way to settlement and an answer.
struct Paid<'a> {
    state: &'a AppState,
    verdict_id: &'a str,
    secret: &'a str,
    status_url: &'a str,
    payer: &'a str,
    version: u32,
}

impl Paid<'_> {
    fn record(&self, purchase: &Purchase, now: u64) -> VerdictRecord {
        VerdictRecord {
            verdict_id: self.verdict_id.to_owned(),
            tier: purchase.tier.as_str().to_owned(),
            status: VerdictStatus::Final,
            document: None,
            preview: None,
            secret_hash: sha256_hex(self.secret.as_bytes()),
            spec_hash: purchase.spec.hash.clone(),
            webhook_url: purchase.webhook_url.clone(),
            created_at: now,
            expires_at: now + DOCUMENT_RETENTION_DAYS * 86_400,
        }
    }

    fn respond(&self, status: u16, body: Value, settlement: &SettlementResponse) -> Response {
        let mut r = respond::cache(respond::json(status, &body), "no-store");
        if let (name, Some(v)) = settlement_header(self.version, settlement) {
            r.headers_mut().insert(name, v);
        }
        if let Ok(v) = HeaderValue::from_str(self.status_url) {
            r.headers_mut().insert(http::header::LOCATION, v);
        }
        r
    }

    /// witness, basic, probe: sign, settle, store, answer 201 with the document.
    async fn immediate(
        &self,
        purchase: &Purchase,
        results: &[CheckResult],
        ctx: &PaymentContext,
    ) -> Result<Response, Void> {
        let document = verdict::signed_verdict(self.state, purchase, self.verdict_id, results);
        let settlement = self
            .state
            .payments
            .settle(ctx)
            .await
            .map_err(Void::Settlement)?;
        let now = umpire_core::time::now_unix();
        let record = VerdictRecord {
            document: Some(String::from_utf8_lossy(&document.to_canonical_vec()).into_owned()),
            ..self.record(purchase, now)
        };
        let stored = persist(self.state, &record).await;
        let body = Value::object()
            .with("verdict_id", self.verdict_id)
            .with("tier", purchase.tier.as_str())
            .with("status", "final")
            .with(
                "verdict",
                document.get("verdict").cloned().unwrap_or(Value::Null),
            )
            .with("document", document)
            .with("status_url", self.status_url)
            .with(
                "secret",
                if stored {
                    Value::from(self.secret)
                } else {
                    Value::Null
                },
            )
            .with("expires_at", umpire_core::time::rfc3339(record.expires_at))
            .with("payer", self.payer)
            .with("settlement", settlement_value(&settlement));
        Ok(self.respond(201, body, &settlement))
    }

    /// sworn: store the pending verdict and queue pass 2 before settling (so a paid
    /// verdict always has its pass 2), then settle; a failed settlement deletes the
    /// record, and the queued pass 2 finds nothing and ends. 202 with pass 1.
    async fn sworn(
        &self,
        purchase: &Purchase,
        results: &[CheckResult],
        ctx: &PaymentContext,
    ) -> Result<Response, Void> {
        let queue = self
            .state
            .queue
            .as_ref()
            .ok_or_else(|| Void::Internal(crate::internal("sworn needs a job queue")))?;
        let now = umpire_core::time::now_unix();
        let delay = self.state.config.sworn_delay_secs;
        let due = now + u64::from(delay);
        let preview = sworn::preview(results, due);
        let record = VerdictRecord {
            status: VerdictStatus::Pending,
            preview: Some(String::from_utf8_lossy(&preview.to_canonical_vec()).into_owned()),
            ..self.record(purchase, now)
        };
        self.state
            .store
            .put_verdict(&record)
            .await
            .map_err(|e| Void::Internal(crate::internal(e)))?;
        let job = sworn::pass2_job(self.verdict_id, purchase, results, now);
        if let Err(e) = queue.enqueue(&job, delay).await {
            self.forget(self.verdict_id).await;
            return Err(Void::Internal(crate::internal(e)));
        }
        let settlement = match self.state.payments.settle(ctx).await {
            Ok(s) => s,
            Err(f) => {
                self.forget(self.verdict_id).await;
                return Err(Void::Settlement(f));
            }
        };
        let body = Value::object()
            .with("verdict_id", self.verdict_id)
            .with("tier", "sworn")
            .with("status", "pending")
            .with("pass1", preview)
            .with("status_url", self.status_url)
            .with("secret", self.secret)
            .with("webhook_url", purchase.webhook_url.clone())
            .with("final_due_at", umpire_core::time::rfc3339(due))
            .with("expires_at", umpire_core::time::rfc3339(record.expires_at))
            .with("payer", self.payer)
            .with("settlement", settlement_value(&settlement));
        Ok(self.respond(202, body, &settlement))
    }

    async fn forget(&self, verdict_id: &str) {
        if let Err(e) = self.state.store.delete_verdict(verdict_id).await {
            tracing::error!(error = %e, verdict_id, "could not delete a voided sworn verdict");
        }
    }
}

fn settlement_value(s: &SettlementResponse) -> Value {
    serde_json::to_value(s)
        .map(Value::from)
        .unwrap_or(Value::Null)
}

async fn persist(state: &AppState, record: &VerdictRecord) -> bool {
    for attempt in 1..=PERSIST_ATTEMPTS {
        match state.store.put_verdict(record).await {
            Ok(()) => return true,
            Err(e) => {
                tracing::error!(error = %e, attempt, verdict_id = record.verdict_id, "could not store a settled verdict");
                tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
            }
        }
    }
    false
}

enum PaymentClaimError {
    /// The payment completed a purchase already.
    Spent,
    /// Another request holds it now.
    InUse,
    Store(ApiError),
}

async fn claim_payment(
    state: &AppState,
    payment_key: &str,
    request_hash: &str,
) -> Result<(), PaymentClaimError> {
    let now = umpire_core::time::now_unix();
    match state
        .store
        .claim_idempotency(
            payment_key,
            request_hash,
            now,
            now + idempotency::IN_PROGRESS_SECS,
            now + idempotency::COMPLETED_SECS,
        )
        .await
        .map_err(|e| PaymentClaimError::Store(crate::internal(e)))?
    {
        Claim::Won => Ok(()),
        Claim::Held(rec) => match rec.state {
            IdempotencyState::Completed(_) => Err(PaymentClaimError::Spent),
            IdempotencyState::InProgress { .. } => Err(PaymentClaimError::InUse),
        },
    }
}

/// The stored document back as a value (for tests and replays).
pub fn document_of(response_body: &[u8]) -> Option<Value> {
    parse(response_body).ok()?.get("document").cloned()
}
