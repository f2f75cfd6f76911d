//! What a settler is, whichever way it settles: the [`Settler`] trait, the payment on
//! its way through verify and settle ([`PaymentContext`]), what verification answers,
//! and the cadence of polls for an outcome. The settlers (`evm`, `solana`, the
//! facilitator client) and the choice between them (`settle`) build on this.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use umpire_host::Deadline;

use umpire_x402::evm::Eip3009Payment;
use umpire_x402::rails::{Family, Rail};
use umpire_x402::reason::{FailureReason, PaymentFailure};
use umpire_x402::svm;
use umpire_x402::types::{
    Account, EvmExactPayload, PaymentPayload, PaymentRequirements, PaymentRequirementsV1, Scheme,
    SettlementResponse,
};

/// Kept between a settlement's last wait and the request's deadline, to answer in.
pub(crate) const ANSWER_MARGIN: Duration = Duration::from_millis(500);

/// The pauses between polls for a transaction's outcome on a chain that decides every
/// `period` (a Solana slot, a Base flashblock): none until one has passed (nothing is
/// decided sooner), then every half period, so an outcome is seen at most half a
/// period late for two polls a period. On a chain that decides at once (`ZERO`):
/// polled at once, then after 5 ms doubling to 500 ms.
pub fn polls_every(period: Duration) -> impl Iterator<Item = Duration> {
    let mut pause = Duration::ZERO;
    let mut first = true;
    std::iter::from_fn(move || {
        let now = if !period.is_zero() {
            if first { period } else { period / 2 }
        } else if first {
            Duration::ZERO
        } else {
            pause = (pause * 2).clamp(Duration::from_millis(5), Duration::from_millis(500));
            pause
        };
        first = false;
        Some(now)
    })
}

/// One payment, matched against our requirements, on its way through verify and settle.
#[derive(Debug, Clone)]
pub struct PaymentContext {
    /// The client's payment JSON exactly as decoded from its header.
    pub raw: Value,
    pub payment: PaymentPayload,
    pub rail: Rail,
    /// Ours (never the client's copy).
    pub requirements: PaymentRequirements,
    /// Ours in v1 form, for v1 payments.
    pub requirements_v1: Option<PaymentRequirementsV1>,
    /// A transaction known to carry this payment (a facilitator named it in a pending
    /// answer): how a Solana payment whose signature is the facilitator's is found.
    pub transaction: Option<String>,
    /// A settlement of this payment was started before (the purchase is pending, or
    /// resumed): a refusal now is no proof that nothing moved.
    pub settled_before: bool,
}

impl PaymentContext {
    /// The EVM authorization, for `exact` payments on eip155 rails.
    pub fn eip3009(&self) -> Option<Result<Eip3009Payment, PaymentFailure>> {
        if !(self.rail.is_evm() && self.rail.scheme == Scheme::Exact) {
            return None;
        }
        Some(
            serde_json::from_value::<EvmExactPayload>(self.payment.scheme_payload().clone())
                .map_err(|e| {
                    PaymentFailure::invalid(
                        FailureReason::EvmPayload,
                        format!("payload is not an EIP-3009 authorization: {e}"),
                    )
                })
                .and_then(|p| Eip3009Payment::parse(&p)),
        )
    }

    /// What the chain dedupes this payment on, spelled one way whatever its encoding:
    /// for an EIP-3009 authorization the chain, the token, the payer and the nonce
    /// (`transferWithAuthorization` spends each (payer, nonce) once per token), read
    /// through the typed parse, so hex case, leading zeros and extra fields change
    /// nothing. `None` for payments that are not EIP-3009 or do not parse.
    ///
    /// A Solana payment is its transaction: the chain runs one transaction once, and
    /// its message (what every signature signs, fee payer's included) names it
    /// whoever has signed it so far and however the payload is spelled.
    pub fn chain_identity(&self) -> Option<String> {
        if let Some(tx) = self.svm_transaction() {
            let tx = tx.ok()?;
            return Some(format!(
                "svm|{}|{}",
                self.rail.network,
                tx.message_hash_hex()
            ));
        }
        let payment = self.eip3009()?.ok()?;
        let a = &payment.authorization;
        Some(format!(
            "eip3009|{}|{}|{:#x}|{:#x}",
            self.rail.network,
            self.rail.asset.to_string().to_ascii_lowercase(),
            a.from,
            a.nonce
        ))
    }

    /// The transaction of a Solana payment (`None` on other chains).
    pub fn svm_transaction(&self) -> Option<Result<svm::Transaction, svm::Refusal>> {
        (self.rail.family() == Family::Svm)
            .then(|| svm::payload_transaction(self.payment.scheme_payload()))
    }

    /// Whether the payment carries its own payer's signature (offline): an EIP-3009
    /// authorization signed by its `from` ([`Eip3009Payment::signed_by_payer`]); a
    /// Solana transaction signed by whoever authorizes its transfer.
    pub fn signed_by_payer(&self) -> bool {
        if let Some(tx) = self.svm_transaction() {
            return match tx {
                Ok(tx) if self.rail.is_native_sol() => svm::native_transfer(&tx).is_ok(),
                Ok(tx) => svm::spl_transfer(&tx).is_some_and(|t| t.signed),
                Err(_) => false,
            };
        }
        matches!(self.eip3009(), Some(Ok(p)) if p.signed_by_payer(&self.rail))
    }

    /// The last moment (unix seconds) the payment can still land on chain, if the
    /// payment says: an EIP-3009 authorization's `validBefore`.
    pub fn lands_by(&self) -> Option<u64> {
        let payment = self.eip3009()?.ok()?;
        Some(u64::try_from(payment.authorization.validBefore).unwrap_or(u64::MAX))
    }

    /// The paying wallet, when the payment names one before any verification.
    pub fn claimed_payer(&self) -> Option<Account> {
        payer_named_in(&self.payment)
    }

    pub(crate) fn requirements_json(&self) -> Value {
        match (&self.payment, &self.requirements_v1) {
            (PaymentPayload::V1 { .. }, Some(v1)) => serde_json::to_value(v1),
            _ => serde_json::to_value(&self.requirements),
        }
        .unwrap_or(Value::Null)
    }
}

/// The wallet a payment says it comes from (`authorization.from` on EVM; on Solana the
/// owner authorizing the token transfer, or for native SOL the fee payer, who is the
/// payer). Only a claim until verified.
pub fn payer_named_in(payment: &PaymentPayload) -> Option<Account> {
    let payload = payment.scheme_payload();
    if payload.get("transaction").is_some() {
        let tx = svm::payload_transaction(payload).ok()?;
        return Some(Account::Solana(match svm::spl_transfer(&tx) {
            Some(t) => t.authority,
            None => tx.message.fee_payer(),
        }));
    }
    payload
        .get("authorization")?
        .get("from")?
        .as_str()?
        .parse()
        .ok()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub payer: Account,
    /// The payment already moved: the chain shows this authorization's transfer paid us
    /// (a bystander executed it, or our own earlier broadcast landed). Nothing is left
    /// to settle; the purchase is paid by this.
    pub settled: Option<SettlementResponse>,
}

#[async_trait]
pub trait Settler: Send + Sync {
    /// Whether this payment would settle now (no state changes), or already paid us.
    async fn verify(&self, ctx: &PaymentContext) -> Result<Verified, PaymentFailure>;
    /// Moves the money, answering by `deadline`: `Ok` only with proof that the payment
    /// paid us (whoever's transaction moved it), a refusal when the chain shows it
    /// cannot, and otherwise `Unavailable` (outcome unknown; with the transaction when
    /// one was broadcast, [`PaymentFailure::pending`]).
    async fn settle(
        &self,
        ctx: &PaymentContext,
        deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure>;
    /// The settlement of this payment if it already happened (`None` if not): for a
    /// purchase whose process died between settling and recording.
    async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure>;
}

/// The moments one verification works with.
#[derive(Debug, Clone, Copy)]
pub struct VerifyTimes {
    /// Unix seconds now: the authorization's window is checked against it.
    pub now: u64,
    /// The last moment this request may still be settling the payment: the
    /// authorization must stay valid until then.
    pub settles_by: Deadline,
    /// When verification itself must have answered, leaving the work and the
    /// settlement their time.
    pub answer_by: Deadline,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_follow_the_period_or_double_at_once() {
        let ms = |d: Duration| d.as_millis();
        let slots: Vec<u128> = polls_every(Duration::from_millis(400))
            .take(4)
            .map(ms)
            .collect();
        assert_eq!(slots, [400, 200, 200, 200]);
        let at_once: Vec<u128> = polls_every(Duration::ZERO).take(10).map(ms).collect();
        assert_eq!(at_once, [0, 5, 10, 20, 40, 80, 160, 320, 500, 500]);
    }
}
