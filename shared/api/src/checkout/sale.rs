//! What is for sale (the offer, the 402), the answers that turn a buyer away or ask it
//! to come back, and the time kept for settlement.

use std::time::Duration;

use umpire_core::{ApiError, ErrorCode};
use umpire_x402::offers;
use umpire_x402::rails::{Offer, SolRate};
use umpire_x402::types::{Account, Network};
use umpire_x402::{
    FailureKind, FailureReason, PaymentFailure, PaymentRequired, PaymentRequirementsV1,
    ResourceInfo, SettlementResponse,
};

use crate::checkout::Product;
use crate::checkout::discovery;
use crate::checkout::payment;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Response};

use super::header::{AnswerHeader, settlement_header};

/// Where a payment was turned down: at verification, before any work (nothing was
/// held), or after the work, when its settlement failed and the purchase was voided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Refused,
    Voided,
}

/// What is for sale in this request: the product, at this moment's prices.
pub(super) struct Sale<'a> {
    pub(super) state: &'a AppState,
    pub(super) product: Product,
    pub(super) sol: Option<SolRate>,
}

impl<'a> Sale<'a> {
    /// What `product` sells for now; a server with no payment rail sells nothing
    /// (`Err`: the answer saying so).
    pub(super) async fn open(state: &'a AppState, product: Product) -> Result<Sale<'a>, Response> {
        if state.config.rails.rails.is_empty() {
            return Err(respond::error(&ApiError::new(
                ErrorCode::Unavailable,
                "this server takes no payments (no payment rail is configured)",
                "Nothing was charged. The operator names where payments go: on AWS the stack's EvmPayTo (or SolanaPayTo) and FacilitatorUrl parameters; locally UMPIRE_EVM_PAY_TO and a settlement mode (`make devnet` starts a local chain).",
            )));
        }
        Ok(Sale {
            state,
            product,
            sol: state.sol_rate().await,
        })
    }

    /// This moment's offer: the product's price, the SOL rate, and the key SOL quotes
    /// are sealed with (the signing key's; a function holding only the public key
    /// offers no SOL).
    pub(super) fn offer(&self) -> Offer<'_> {
        Offer {
            price: self.product.price,
            resource: &self.product.path,
            sol: self.sol,
            now: self.state.config.clock.now(),
            quote_key: Some(self.state.signer.as_ref()),
        }
    }

    /// The URL the product is sold at, as the 402, its offers and receipts name it.
    pub(super) fn resource_url(&self) -> String {
        format!("{}{}", self.state.config.issuer, self.product.path)
    }

    pub(super) fn resource(&self) -> ResourceInfo {
        ResourceInfo {
            url: self.resource_url(),
            description: self.product.listing.description.clone(),
            mime_type: "application/json".into(),
            service_name: Some(discovery::SERVICE_NAME.into()),
            tags: Some(discovery::TAGS.iter().map(|t| (*t).to_owned()).collect()),
        }
    }

    /// The v2 requirements, with what discovery and the payment-identifier extension
    /// need to know about the route.
    pub(super) fn required(&self, reason: &str) -> PaymentRequired {
        let mut required =
            self.state
                .config
                .rails
                .payment_required(&self.offer(), self.resource(), reason);
        required.extensions = discovery::extensions(&self.product.listing);
        // Signed offers: proof of these terms for a payer whose 402 came through
        // someone else (a mirror, a proxy, an agent framework). Each is good as long
        // as a payment signed now may be, and a SOL quote no longer than the quote.
        let now = self.state.config.clock.now();
        let offers = offers::offers(self.state.signer.as_ref(), &required, |accepted| {
            let window = now + accepted.max_timeout_seconds;
            accepted
                .extra
                .get("quote")
                .and_then(|q| q.get("expiresAt"))
                .and_then(serde_json::Value::as_u64)
                .map_or(window, |quote| quote.min(window))
        });
        required
            .extensions
            .insert(offers::OFFER_RECEIPT.into(), offers.to_serde());
        required
    }

    /// The `offer-receipt` receipt of a settled purchase of this sale, in `settlement`.
    pub(super) fn with_receipt(&self, settlement: SettlementResponse) -> SettlementResponse {
        receipted(self.state, &self.resource_url(), settlement)
    }

    pub(super) fn v1_accepts(&self) -> Vec<PaymentRequirementsV1> {
        self.state
            .config
            .rails
            .accepts_v1(&self.offer(), &self.resource())
    }

    pub(super) fn ask_for_payment(&self) -> Response {
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
    pub(super) fn refused(
        &self,
        answer_in: AnswerHeader,
        network: Option<&Network>,
        payer: Option<Account>,
        failure: &PaymentFailure,
        refusal: Refusal,
    ) -> Response {
        let voided = refusal == Refusal::Voided;
        if failure.kind == FailureKind::Config {
            return respond::error(&crate::plumbing::state::internal(failure));
        }
        if failure.kind == FailureKind::Unavailable && !voided {
            tracing::warn!(error = %failure, "payment could not be verified");
            return respond::error(&chain_unavailable());
        }
        let spent = matches!(
            failure.reason,
            FailureReason::EvmNonceUsed | FailureReason::DuplicateSettlement
        );
        let (message, hint) = if voided && spent {
            (
                "the authorization was canceled, or spent on a transfer that did not pay us, before this purchase settled it, so the purchase was voided: nothing was delivered or kept".to_owned(),
                "This purchase took no money: the chain shows the authorization used by something other than a payment to us (a cancellation, or another transfer). Sign a new payment and retry.",
            )
        } else if spent {
            (
                format!(
                    "the payment was refused ({}): {}",
                    failure.reason, failure.message
                ),
                "This request took nothing: that authorization was used already (it bought another purchase, or was canceled). Sign a new payment against the requirements in PAYMENT-REQUIRED and retry.",
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
            &self.required(failure.reason.as_str()),
            &self.v1_accepts(),
            &message,
            hint,
        );
        let settlement = SettlementResponse {
            success: false,
            transaction: String::new(),
            network: network.cloned(),
            payer,
            error_reason: Some(failure.reason.clone()),
            extensions: Default::default(),
            extra: Default::default(),
        };
        if let (name, Some(v)) = settlement_header(answer_in, &settlement) {
            r.headers_mut().insert(name, v);
        }
        r
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
pub(super) const SETTLE_MIN: Duration = Duration::from_millis(700);

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

/// How long past a payment's own last moment to land (an authorization's `validBefore`)
/// its prepared answer is kept for its request: room for a block timestamp ahead of
/// our clock, and for the last block to be seen.
pub const LANDING_MARGIN_SECS: u64 = 60;

/// What a 502 `chain_unavailable` or a busy payment asks the client to wait.
pub(super) const RETRY_AFTER_SECS: u64 = 2;

/// The chain (or facilitator) could not be asked about a payment: nothing charged.
pub(super) fn chain_unavailable() -> ApiError {
    ApiError::new(
        ErrorCode::ChainUnavailable,
        "the payment could not be checked right now (chain or facilitator unreachable)",
        "Retry the identical request with the same payment in a few seconds: if it has paid, you get its purchase; you are never charged twice.",
    )
    .with_retry_after(RETRY_AFTER_SECS)
}

/// Another request holds the payment right now.
pub(super) fn payment_in_use() -> ApiError {
    ApiError::new(
        ErrorCode::InFlight,
        "this payment is being used by another request right now",
        "Resend the identical request with the same payment (and Idempotency-Key, if you sent one) in a few seconds: once that request ends you get its answer, and you are never charged twice.",
    )
    .with_retry_after(RETRY_AFTER_SECS)
}

/// `settlement` with the signed `offer-receipt` receipt of a delivered purchase of
/// `resource_url` (nothing added to a failed settlement or one naming no payer).
pub(super) fn receipted(
    state: &AppState,
    resource_url: &str,
    mut settlement: SettlementResponse,
) -> SettlementResponse {
    let (true, Some(payer), Some(network)) =
        (settlement.success, &settlement.payer, &settlement.network)
    else {
        return settlement;
    };
    let payload = offers::ReceiptPayload {
        network: network.as_str().to_owned(),
        resource_url: resource_url.to_owned(),
        payer: payer.to_string(),
        issued_at: state.config.clock.now(),
        transaction: Some(settlement.transaction.clone()),
    };
    settlement.extensions.insert(
        offers::OFFER_RECEIPT.into(),
        offers::receipt(state.signer.as_ref(), &payload).to_serde(),
    );
    settlement
}
