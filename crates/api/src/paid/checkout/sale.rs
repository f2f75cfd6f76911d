//! What is for sale (the offer, the 402), the claims a request holds, and the time kept for
//! settlement.

use super::*;

/// What is for sale in this request: the product, at this moment's prices.
pub(super) struct Sale<'a> {
    pub(super) state: &'a AppState,
    pub(super) product: Product,
    pub(super) sol: Option<SolRate>,
}

impl Sale<'_> {
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

    pub(super) fn resource(&self) -> ResourceInfo {
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
    pub(super) fn required(&self, reason: &str) -> PaymentRequired {
        let mut required =
            self.state
                .config
                .rails
                .payment_required(&self.offer(), self.resource(), reason);
        required.extensions = discovery::extensions(self.product.listing);
        required
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
        let (message, hint) = if voided && failure.reason == FailureReason::EvmNonceUsed {
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
            &self.required(failure.reason.as_str()),
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

/// Releases every claim this request holds (a voided or failed purchase).
pub(super) struct Claims<'a> {
    pub(super) state: &'a AppState,
    pub(super) held: Vec<(String, String)>,
}

impl Claims<'_> {
    pub(super) async fn release(&mut self) {
        for (key, hash) in self.held.drain(..) {
            if let Err(e) = idempotency::release(self.state, &key, &hash).await {
                tracing::error!(error = %e.message, key, "could not release a claim");
            }
        }
    }

    pub(super) async fn complete(&mut self, response: &Response) {
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
