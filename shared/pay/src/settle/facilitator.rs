//! A facilitator's /verify and /settle over HTTP, as the x402 facilitator API documents
//! them.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use umpire_host::Deadline;

use crate::settle::{ANSWER_MARGIN, PaymentContext, Settler, Verified};
use umpire_x402::reason::{FailureKind, FailureReason, PaymentFailure};
use umpire_x402::types::{Account, SettlementResponse};

/// A facilitator reached over HTTP.
#[derive(Debug, Clone)]
pub struct FacilitatorClient {
    pub(super) base: String,
    /// Sent as `Authorization` when set.
    auth: Option<String>,
    http: reqwest::Client,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct VerifyAnswer {
    is_valid: bool,
    #[serde(default)]
    invalid_reason: Option<String>,
    #[serde(default)]
    invalid_message: Option<String>,
    #[serde(default)]
    payer: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SettleAnswer {
    success: bool,
    #[serde(default)]
    error_reason: Option<String>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    payer: Option<String>,
    #[serde(default)]
    transaction: String,
}

/// The payer a facilitator names, or else the one the payment names.
fn payer_of(named: Option<&str>, ctx: &PaymentContext) -> Option<Account> {
    named
        .and_then(|p| p.parse().ok())
        .or_else(|| ctx.claimed_payer())
}

/// One kind of payment a facilitator supports (`GET /supported`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportedKind {
    pub x402_version: u32,
    pub scheme: String,
    pub network: String,
    #[serde(default)]
    pub extra: Option<Value>,
}

pub(super) const VERIFY_TIMEOUT: Duration = Duration::from_secs(15);

pub(super) const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A facilitator `/settle` is retried only when at least this much time is left.
pub(super) const SETTLE_RETRY_MIN: Duration = Duration::from_secs(1);

impl FacilitatorClient {
    pub fn new(base: &str, auth: Option<String>) -> Result<FacilitatorClient, PaymentFailure> {
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(PaymentFailure::config(format!(
                "facilitator URL {base:?} must be http(s)"
            )));
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| PaymentFailure::config(format!("HTTP client: {e}")))?;
        Ok(FacilitatorClient { base, auth, http })
    }

    async fn post<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
    ) -> Result<T, PaymentFailure> {
        let mut req = self
            .http
            .post(format!("{}{path}", self.base))
            .timeout(timeout)
            .json(body);
        if let Some(a) = &self.auth {
            req = req.header("authorization", a);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| PaymentFailure::unavailable(format!("facilitator {path}: {e}")))?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| PaymentFailure::unavailable(format!("facilitator {path}: {e}")))?;
        serde_json::from_str(&text).map_err(|_| {
            PaymentFailure::unavailable(format!(
                "facilitator {path} answered {status}: {}",
                text.chars().take(300).collect::<String>()
            ))
        })
    }

    fn body(ctx: &PaymentContext) -> Value {
        json!({
            "x402Version": ctx.payment.version(),
            "paymentPayload": ctx.raw,
            "paymentRequirements": ctx.requirements_json(),
        })
    }

    pub async fn supported(&self) -> Result<Vec<SupportedKind>, PaymentFailure> {
        #[derive(Deserialize)]
        struct Answer {
            kinds: Vec<SupportedKind>,
        }
        let mut req = self
            .http
            .get(format!("{}/supported", self.base))
            .timeout(VERIFY_TIMEOUT);
        if let Some(a) = &self.auth {
            req = req.header("authorization", a);
        }
        let answer: Answer = req
            .send()
            .await
            .map_err(|e| PaymentFailure::unavailable(format!("facilitator /supported: {e}")))?
            .json()
            .await
            .map_err(|e| PaymentFailure::unavailable(format!("facilitator /supported: {e}")))?;
        Ok(answer.kinds)
    }
}

#[async_trait]
impl Settler for FacilitatorClient {
    async fn verify(&self, ctx: &PaymentContext) -> Result<Verified, PaymentFailure> {
        let a: VerifyAnswer = self
            .post("/verify", &Self::body(ctx), VERIFY_TIMEOUT)
            .await?;
        match (a.is_valid, payer_of(a.payer.as_deref(), ctx)) {
            (true, Some(payer)) => Ok(Verified {
                payer,
                settled: None,
            }),
            (true, None) => Err(PaymentFailure::invalid(
                FailureReason::InvalidPayload,
                "the facilitator verified the payment but neither it nor the payment names a payer",
            )),
            (false, _) => Err(PaymentFailure::invalid(
                a.invalid_reason
                    .map_or(FailureReason::InvalidPayment, FailureReason::from),
                a.invalid_message
                    .unwrap_or_else(|| "the facilitator refused the payment".into()),
            )),
        }
    }

    async fn settle(
        &self,
        ctx: &PaymentContext,
        deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure> {
        let body = Self::body(ctx);
        let wait = || SETTLE_TIMEOUT.min(deadline.remaining().saturating_sub(ANSWER_MARGIN));
        // One retry on a lost answer, while the deadline allows: the facilitator
        // reconciles a repeated settle of the same payload against the transfer it
        // already broadcast.
        let answer: SettleAnswer = match self.post("/settle", &body, wait()).await {
            Err(e) if e.kind == FailureKind::Unavailable && deadline.allows(SETTLE_RETRY_MIN) => {
                tracing::warn!(error = %e, "facilitator /settle failed; retrying once");
                self.post("/settle", &body, wait()).await?
            }
            other => other?,
        };
        if !answer.success {
            return Err(PaymentFailure::invalid(
                answer
                    .error_reason
                    .map_or(FailureReason::SettlementFailed, FailureReason::from),
                answer
                    .error_message
                    .unwrap_or_else(|| "the facilitator could not settle the payment".into()),
            ));
        }
        // The network is the rail the payment matched (a facilitator may answer a v1
        // payment with v1's name for it).
        Ok(SettlementResponse {
            success: true,
            transaction: answer.transaction,
            network: Some(ctx.rail.network.clone()),
            payer: payer_of(answer.payer.as_deref(), ctx),
            error_reason: None,
            extensions: Default::default(),
        })
    }

    /// The x402 facilitator API has no lookup, and this deployment reads no chain.
    async fn find_settlement(
        &self,
        _ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        Err(PaymentFailure::unavailable(
            "an interrupted purchase settled through the facilitator cannot be looked up (no chain access here)",
        ))
    }
}
