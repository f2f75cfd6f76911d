//! A facilitator's /verify and /settle over HTTP, as the x402 facilitator API documents
//! them, with the chain read beside it: a facilitator's `success: false` does not
//! always mean that no money moved.
//!
//! How a `/settle` answer reads (docs/paying.md has the table): `success: true` is
//! settled; a refusal its verification gives before it sends anything (a bad
//! signature, a balance too low, an expired authorization, ...: the list below; not a
//! failed transaction, even naming none: its settle sends and fails in one call), naming
//! no transaction, on the payment's first `/settle`, is a refusal: nothing moved. Every
//! other answer is an **unknown outcome**: `settlement_pending`, a transaction that went
//! out and failed or reverted (perhaps because an earlier one of the payment landed), a
//! nonce already used or a duplicate settlement (perhaps by our own earlier `/settle`),
//! a reason we do not know, no answer at all, and any refusal after an earlier `/settle`
//! of the payment (our retry of a lost answer, or the purchase's before it went
//! pending), which may follow money that moved.
//!
//! An unknown outcome is decided on the chain ([`Settler::find_settlement`]: the EIP-3009
//! authorization's state and the token's logs, on `UMPIRE_EVM_RPC_URL`; a Solana
//! transaction's signature status on `UMPIRE_SOLANA_RPC_URL`), at once when the request
//! still has time, else by the purchase's reconciler.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use umpire_host::Deadline;

use crate::evm::EvmChain;
use crate::settle::own::SelfSettler;
use crate::settler::{ANSWER_MARGIN, PaymentContext, Settler, Verified};
use umpire_x402::reason::{FailureKind, FailureReason, PaymentFailure};
use umpire_x402::types::{Account, SettlementResponse};

/// A facilitator reached over HTTP.
#[derive(Debug, Clone)]
pub struct FacilitatorClient {
    pub(super) base: String,
    /// Sent as `Authorization` when set.
    auth: Option<String>,
    http: reqwest::Client,
    /// The EVM chain read (never written) to decide a settlement whose outcome the
    /// facilitator's answer leaves unknown.
    evm_reader: Option<SelfSettler>,
    /// The Solana node read likewise.
    svm_reader: Option<crate::solana::SolanaRpc>,
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
        Ok(FacilitatorClient {
            base,
            auth,
            http,
            evm_reader: None,
            svm_reader: None,
        })
    }

    /// Reads `chain` (no key: nothing is sent) to decide settlements whose outcome the
    /// facilitator's answer leaves unknown.
    pub fn with_evm_reader(mut self, chain: EvmChain) -> FacilitatorClient {
        self.evm_reader = Some(SelfSettler { chain });
        self
    }

    /// Reads `rpc` likewise for Solana payments.
    pub fn with_svm_reader(mut self, rpc: crate::solana::SolanaRpc) -> FacilitatorClient {
        self.svm_reader = Some(rpc);
        self
    }

    /// What the chain says of a settlement the facilitator's answer left unknown: paid
    /// us (`Ok`), or — on the payment's `first` `/settle`, so the transaction it names
    /// is the only one sent for it — refused for good when that transaction reverted
    /// and the authorization is still unused (nothing moved). `None` while the chain
    /// cannot say.
    async fn decide_on_chain(
        &self,
        ctx: &PaymentContext,
        failure: &PaymentFailure,
        first: bool,
    ) -> Option<Result<SettlementResponse, PaymentFailure>> {
        match self.find_settlement(ctx).await {
            Ok(Some(settled)) => return Some(Ok(settled)),
            // Canceled, or spent on something that did not pay us: the token's logs say.
            Err(f) if f.reason == FailureReason::EvmNonceUsed && f.kind == FailureKind::Invalid => {
                return Some(Err(f));
            }
            Err(_) => return None,
            Ok(None) => {}
        }
        let (true, Some(reader), Some(tx)) =
            (first, &self.evm_reader, failure.transaction.as_deref())
        else {
            return None;
        };
        let hash = tx.parse().ok()?;
        match reader.chain.reverted(hash).await.ok()? {
            Some(true) if matches!(self.find_settlement(ctx).await, Ok(None)) => {
                Some(Err(PaymentFailure::invalid(
                    FailureReason::SettlementFailed,
                    format!(
                        "the facilitator's transaction {tx} reverted and the payment did not move ({})",
                        failure.message
                    ),
                )))
            }
            _ => None,
        }
    }

    /// Whether settlements on `ctx`'s chain can be looked up here.
    pub fn reads_chain_of(&self, ctx: &PaymentContext) -> bool {
        if ctx.rail.is_evm() {
            self.evm_reader.is_some()
        } else {
            self.svm_reader.is_some()
        }
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
            (false, named) => {
                let refused = PaymentFailure::invalid(
                    a.invalid_reason
                        .clone()
                        .map_or(FailureReason::InvalidPayment, FailureReason::from),
                    a.invalid_message
                        .unwrap_or_else(|| "the facilitator refused the payment".into()),
                );
                // Used already, perhaps (the reference facilitator says so in several
                // words: a nonce used, a simulation reverting "authorization is used or
                // canceled"): by a transfer to us, if a bystander or the payer executed
                // it. The chain says (one read, on refusals only); paid us is made.
                if self.reads_chain_of(ctx)
                    && let Ok(Some(settled)) = self.find_settlement(ctx).await
                    && let Some(payer) = named.or_else(|| ctx.claimed_payer())
                {
                    return Ok(Verified {
                        payer,
                        settled: Some(settled),
                    });
                }
                Err(refused)
            }
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
        // A refusal proves nothing moved only when no earlier /settle of this payment
        // (ours, lost; or the purchase's before it went pending) may have acted.
        let mut first = !ctx.settled_before;
        let answer: SettleAnswer = match self.post("/settle", &body, wait()).await {
            Err(e) if e.kind == FailureKind::Unavailable && deadline.allows(SETTLE_RETRY_MIN) => {
                tracing::warn!(error = %e, "facilitator /settle failed; retrying once");
                first = false;
                self.post("/settle", &body, wait()).await?
            }
            other => other?,
        };
        if !answer.success {
            let failure = read_failure(&answer, first);
            if failure.kind != FailureKind::Unavailable {
                return Err(failure);
            }
            tracing::warn!(error = %failure, "the facilitator's settlement has no outcome yet; reading the chain");
            // The money may have moved: the chain says, while the request has time.
            if self.reads_chain_of(ctx) && deadline.allows(SETTLE_RETRY_MIN) {
                let decided = tokio::time::timeout(
                    deadline.remaining().saturating_sub(ANSWER_MARGIN),
                    self.decide_on_chain(ctx, &failure, first),
                )
                .await;
                if let Ok(Some(decided)) = decided {
                    return decided;
                }
            }
            return Err(failure);
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
            extra: Default::default(),
        })
    }

    /// The x402 facilitator API has no lookup: the chain is read instead (the
    /// authorization's state and the token's logs; a Solana transaction's status).
    async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        if ctx.rail.is_evm() {
            return match &self.evm_reader {
                Some(reader) => reader.find_settlement(ctx).await,
                None => Err(no_reader("UMPIRE_EVM_RPC_URL")),
            };
        }
        let Some(rpc) = &self.svm_reader else {
            return Err(no_reader("UMPIRE_SOLANA_RPC_URL"));
        };
        crate::solana::find_spl_settlement(rpc, ctx).await
    }
}

fn no_reader(variable: &str) -> PaymentFailure {
    PaymentFailure::unavailable(format!(
        "a settlement through the facilitator is decided on the chain, and no RPC is configured to read it ({variable})"
    ))
}

/// Reasons a facilitator gives when it refused a payment before broadcasting anything:
/// its verification's (the reference facilitator's `exact` EVM and SVM codes, and the
/// spec's generic ones). Only these, on a payment's first `/settle` and naming no
/// transaction, are refusals; every other answer may follow money that moved (see the
/// module notes) and is an unknown outcome, which the chain decides.
const REFUSED_BEFORE_SENDING: &[&str] = &[
    "invalid_exact_evm_scheme",
    "invalid_exact_evm_network_mismatch",
    "invalid_exact_evm_missing_eip712_domain",
    "invalid_exact_evm_recipient_mismatch",
    "invalid_exact_evm_signature",
    "invalid_exact_evm_payload_signature",
    "invalid_exact_evm_payload_authorization_valid_before",
    "invalid_exact_evm_payload_authorization_valid_after",
    "invalid_exact_evm_authorization_value",
    "invalid_exact_evm_payload_authorization_value",
    "invalid_exact_evm_payload_authorization_value_mismatch",
    "invalid_exact_evm_payload_recipient_mismatch",
    "invalid_exact_evm_token_name_mismatch",
    "invalid_exact_evm_token_version_mismatch",
    "invalid_exact_evm_eip3009_not_supported",
    "invalid_exact_evm_insufficient_balance",
    "invalid_exact_evm_transaction_simulation_failed",
    "invalid_exact_evm_failed_to_parse_signature",
    "asset_not_deployed_contract",
    "eip6492_factory_not_allowed",
    "smart_wallet_deployment_failed",
    "unsupported_payload_type",
    "invalid_exact_svm_network_mismatch",
    "invalid_exact_svm_unsupported_scheme",
    "invalid_exact_svm_transaction_simulation_failed",
    "invalid_exact_svm_verification_failed",
    "transaction_simulation_failed",
    "insufficient_funds",
    "invalid_payload",
    "invalid_payment_requirements",
    "invalid_payment",
    "unsupported_scheme",
    "invalid_network",
];

/// Families of the reference SVM facilitator's verification codes (the transaction's
/// shape, its fee payer, a smart wallet's checks): refused before sending too.
const REFUSED_BEFORE_SENDING_PREFIXES: &[&str] = &[
    "invalid_exact_svm_payload_",
    "invalid_exact_svm_fee_payer_",
    "invalid_exact_svm_smart_wallet_",
];

fn refused_before_sending(reason: &str) -> bool {
    REFUSED_BEFORE_SENDING.contains(&reason)
        || REFUSED_BEFORE_SENDING_PREFIXES
            .iter()
            .any(|p| reason.starts_with(p))
}

/// A `success: false` settlement answer, read as what it means: the facilitator's
/// refusal when it refused before sending anything on the payment's `first` `/settle`;
/// otherwise an unknown outcome (the money may have moved).
pub(super) fn read_failure(answer: &SettleAnswer, first: bool) -> PaymentFailure {
    let reason = answer.error_reason.as_deref().unwrap_or_default();
    let tx = Some(answer.transaction.as_str()).filter(|t| !t.is_empty());
    let message = answer
        .error_message
        .clone()
        .unwrap_or_else(|| "the facilitator could not settle the payment".into());
    if first && tx.is_none() && refused_before_sending(reason) {
        return PaymentFailure::invalid(
            answer
                .error_reason
                .clone()
                .map_or(FailureReason::SettlementFailed, FailureReason::from),
            message,
        );
    }
    let mut f = match tx {
        Some(tx) => PaymentFailure::pending(
            tx.to_owned(),
            format!("the facilitator answered {reason}: {message}"),
        ),
        None => {
            PaymentFailure::unavailable(format!("the facilitator answered {reason}: {message}"))
        }
    };
    f.reason = FailureReason::SettlementPending;
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(reason: &str, tx: &str) -> SettleAnswer {
        SettleAnswer {
            success: false,
            error_reason: Some(reason.into()),
            error_message: None,
            payer: None,
            transaction: tx.into(),
        }
    }

    #[test]
    fn a_failure_that_may_have_moved_money_is_unknown_never_a_refusal() {
        let tx = "0xabababababababababababababababababababababababababababababababab";
        for (reason, with_tx) in [
            ("settlement_pending", tx),
            ("invalid_transaction_state", tx),
            ("invalid_exact_evm_transaction_failed", tx),
            ("invalid_exact_svm_transaction_failed", tx),
            ("invalid_exact_evm_nonce_already_used", ""),
            ("duplicate_settlement", ""),
            ("invalid_exact_evm_transfer_event_mismatch", tx),
            // The spec's generic settle error: a public facilitator's RPC timeout after
            // it broadcast.
            ("unexpected_settle_error", ""),
            ("something_new", ""),
            ("something_new", tx),
            // A reason that refuses before sending, but naming a transaction: sent.
            ("invalid_exact_evm_insufficient_balance", tx),
            // Its call failed, perhaps after the broadcast left (writeContract sends; an
            // RPC answer lost then is this too).
            ("invalid_exact_evm_transaction_failed", ""),
            ("invalid_exact_svm_transaction_failed", ""),
        ] {
            let f = read_failure(&answer(reason, with_tx), true);
            assert_eq!(f.kind, FailureKind::Unavailable, "{reason}");
            assert_eq!(f.reason, FailureReason::SettlementPending, "{reason}");
            assert_eq!(
                f.transaction.as_deref(),
                Some(with_tx).filter(|t| !t.is_empty()),
                "{reason}"
            );
        }
        for reason in [
            "invalid_exact_evm_signature",
            "invalid_exact_evm_insufficient_balance",
            "invalid_exact_evm_payload_authorization_valid_before",
            "invalid_exact_svm_payload_amount_mismatch",
            "invalid_exact_svm_fee_payer_mismatch",
        ] {
            let f = read_failure(&answer(reason, ""), true);
            assert_eq!(f.kind, FailureKind::Invalid, "{reason}");
            assert_eq!(f.reason.as_str(), reason);
            // After an earlier /settle of the payment (its answer lost, or the purchase
            // pending), the same refusal may follow money that moved: unknown.
            let again = read_failure(&answer(reason, ""), false);
            assert_eq!(again.kind, FailureKind::Unavailable, "{reason}, not first");
        }
    }
}
