//! One paid request, whatever it sells (a verdict, a reputation report): idempotency
//! in front of the paywall → 402 or the payment matched against our own requirements
//! and verified → the key claimed, then the payment itself (one authorization pays for
//! one purchase). The caller then does its work, settles through [`Checkout::ctx`], and
//! hands its answer to [`Checkout::finish`], which records it for replays, or releases
//! every claim when the purchase was voided.

use http::HeaderValue;
use umpire_core::hash::sha256_hex;
use umpire_core::product::Price;
use umpire_core::{ApiError, ErrorCode, Value};
use umpire_pay::rails::SolRate;
use umpire_pay::settle::payer_named_in;
use umpire_pay::{
    FailureKind, HEADER_PAYMENT_RESPONSE, HEADER_PAYMENT_SIGNATURE, HEADER_X_PAYMENT,
    HEADER_X_PAYMENT_RESPONSE, PaymentContext, PaymentFailure, PaymentPayload, PaymentRequired,
    PaymentRequirementsV1, ResourceInfo, SettlementResponse, decode_header, encode_header,
};
use umpire_store::{Claim, IdempotencyState};

use crate::idempotency::{self, Decision, IdempotencyKey};
use crate::{AppState, ClientIp, Request, Response, limits, payment, respond};

/// A payment header as the client sent it.
struct PaymentHeader {
    version: u32,
    raw: serde_json::Value,
    payment: PaymentPayload,
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

/// What one paid request sells: a price and the resource it is charged for.
#[derive(Debug, Clone)]
pub struct Product {
    pub price: Price,
    /// The path of the resource, e.g. `/v1/verdicts/basic`.
    pub path: String,
    /// How the 402 names it, e.g. "a basic verdict".
    pub name: String,
}

/// What is for sale in this request: the product, at this moment's prices.
struct Sale<'a> {
    state: &'a AppState,
    product: Product,
    sol: Option<SolRate>,
}

impl Sale<'_> {
    fn resource(&self) -> ResourceInfo {
        ResourceInfo {
            url: format!("{}{}", self.state.config.issuer, self.product.path),
            description: format!("Umpire: {}", self.product.name),
            mime_type: "application/json".into(),
        }
    }

    fn required(&self, reason: &str) -> PaymentRequired {
        self.state.config.rails.payment_required(
            self.product.price,
            self.sol,
            self.resource(),
            reason,
        )
    }

    fn v1_accepts(&self) -> Vec<PaymentRequirementsV1> {
        self.state
            .config
            .rails
            .accepts_v1(self.product.price, self.sol, &self.resource())
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

pub fn settlement_header(
    version: u32,
    s: &SettlementResponse,
) -> (&'static str, Option<HeaderValue>) {
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

/// Why a judged purchase was voided (nothing kept, claims released).
pub enum Void {
    Settlement(PaymentFailure),
    Internal(ApiError),
}

/// A judged purchase on its way to settlement and an answer.
pub fn settlement_value(s: &SettlementResponse) -> Value {
    serde_json::to_value(s)
        .map(Value::from)
        .unwrap_or(Value::Null)
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

/// A verified payment, claimed for this request.
pub struct Checkout<'a> {
    sale: Sale<'a>,
    /// The x402 version the client paid with (and is answered in).
    pub version: u32,
    network: String,
    wallet: Option<String>,
    /// What settlement needs.
    pub ctx: PaymentContext,
    /// The verified payer.
    pub payer: String,
    claims: Claims<'a>,
}

impl Checkout<'_> {
    /// The 402 for a payment refused (or a purchase voided) after verification.
    pub fn refused(&self, failure: &PaymentFailure, voided: bool) -> Response {
        self.sale.refused(
            self.version,
            &self.network,
            self.wallet.clone(),
            failure,
            voided,
        )
    }

    /// Adds the `PAYMENT-RESPONSE` (or v1 `X-PAYMENT-RESPONSE`) header of a settlement.
    pub fn with_settlement(&self, mut r: Response, settlement: &SettlementResponse) -> Response {
        if let (name, Some(v)) = settlement_header(self.version, settlement) {
            r.headers_mut().insert(name, v);
        }
        r
    }

    /// Gives every claim back after our own failure: nothing was settled.
    pub async fn abandon(mut self, e: ApiError) -> Response {
        self.claims.release().await;
        respond::error(&e)
    }

    /// Records a delivered answer for replays, or releases the claims of a voided one.
    pub async fn finish(mut self, answer: Result<Response, Void>) -> Response {
        match answer {
            Ok(r) => {
                // Every delivered purchase was settled first.
                crate::metrics::record(crate::metrics::Metric::Settlement);
                self.claims.complete(&r).await;
                r
            }
            Err(Void::Settlement(f)) => {
                crate::metrics::record(crate::metrics::Metric::Void);
                tracing::warn!(error = %f, "settlement failed; purchase voided");
                self.claims.release().await;
                self.refused(&f, true)
            }
            Err(Void::Internal(e)) => {
                crate::metrics::record(crate::metrics::Metric::Void);
                self.claims.release().await;
                respond::error(&e)
            }
        }
    }
}

/// Everything up to a verified, claimed payment; `Err` is the answer to give instead
/// (the 402, a refusal, or the replay of a completed identical request).
pub async fn begin<'a>(
    state: &'a AppState,
    req: &Request,
    product: Product,
) -> Result<Checkout<'a>, Response> {
    let err = |e: ApiError| respond::error(&e);
    if state.config.rails.rails.is_empty() {
        return Err(err(ApiError::new(
            ErrorCode::Unavailable,
            "this server takes no payments (no payment rail is configured)",
            "Run `make devnet` for a local chain, or set UMPIRE_EVM_PAY_TO and a settlement mode; nothing was charged.",
        )));
    }
    let price = product.price;
    let key = IdempotencyKey::from_headers(req.headers()).map_err(err)?;
    let sale = Sale {
        state,
        product,
        sol: state.sol_rate().await,
    };
    let header = read_payment_header(req).map_err(|f| sale.refused(2, "", None, &f, false))?;
    let target = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path(), |p| p.as_str());
    let request_hash = idempotency::request_hash(req.method(), target, req.body());

    // A completed identical request is answered in front of the paywall.
    let wallet = header.as_ref().and_then(|h| payer_named_in(&h.payment));
    let scoped = key.as_ref().map(|k| k.scoped(wallet.as_deref()));
    if let Some(scoped) = &scoped {
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

    // Match against our own requirements, then verify.
    let (rail, requirements) = state
        .config
        .rails
        .match_payment(&header.payment, price, sale.sol)
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
    let now = umpire_core::time::now_unix();
    let verified = match state.payments.verify(&ctx, now).await {
        Ok(v) => v,
        Err(f) => {
            // A concurrent twin with the same key may have settled this very payment
            // while we verified it (the chain now says its nonce is used): the client
            // is owed that purchase's answer, not a refusal.
            if let Some(scoped) = &scoped {
                match idempotency::check(state, scoped, &request_hash).await {
                    Ok(Decision::Replay(r)) => return Err(r),
                    Err(e) if e.code == ErrorCode::InFlight => return Err(err(e)),
                    _ => {}
                }
            }
            return Err(sale.refused(header.version, &network, wallet, &f, false));
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
    let payment_key = format!(
        "payment|{}",
        sha256_hex(
            &Value::from(header.raw.get("payload").cloned().unwrap_or_default()).to_canonical_vec()
        )
    );
    if let Err(f) = claim_payment(state, &payment_key, &request_hash).await {
        claims.release().await;
        return Err(match f {
            PaymentClaimError::Spent => sale.refused(
                header.version,
                &network,
                wallet,
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
    claims.held.push((payment_key, request_hash));
    Ok(Checkout {
        sale,
        version: header.version,
        network,
        wallet,
        ctx,
        payer: verified.payer,
        claims,
    })
}
