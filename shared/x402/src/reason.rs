//! Why a payment was refused or failed to settle: the x402 `invalidReason` /
//! `errorReason` codes, as one enum. The codes we emit are variants; a facilitator may
//! answer with codes of its own, which pass through unchanged as [`FailureReason::Other`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! reasons {
    ($($(#[$doc:meta])* $variant:ident => $code:literal,)*) => {
        /// An x402 failure reason code.
        #[derive(Debug, Clone, PartialEq, Eq, Hash)]
        pub enum FailureReason {
            $($(#[$doc])* $variant,)*
            /// A code we do not emit ourselves (a facilitator's), kept as it was spelled.
            Other(String),
        }

        impl FailureReason {
            /// Every code we emit, for tests and docs.
            pub const KNOWN: &'static [FailureReason] = &[$(FailureReason::$variant,)*];

            /// The code as it goes on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $(FailureReason::$variant => $code,)*
                    FailureReason::Other(code) => code,
                }
            }

            /// Reads a code: ours become their variant, anything else is kept as `Other`.
            pub fn parse(code: &str) -> FailureReason {
                match code {
                    $($code => FailureReason::$variant,)*
                    other => FailureReason::Other(other.to_owned()),
                }
            }
        }
    };
}

reasons! {
    /// The payer's balance is below the amount.
    InsufficientFunds => "insufficient_funds",
    /// No rail of ours has this scheme on this network.
    UnsupportedScheme => "unsupported_scheme",
    /// The payment's JSON is not a payment of its scheme.
    InvalidPayload => "invalid_payload",
    /// A facilitator refused without naming a reason.
    InvalidPayment => "invalid_payment",
    /// A facilitator could not settle and did not say why.
    SettlementFailed => "settlement_failed",
    /// Something failed on our side or the chain's; nothing was charged.
    UnexpectedError => "unexpected_error",
    /// The EVM payload is not an EIP-3009 authorization.
    EvmPayload => "invalid_exact_evm_payload",
    /// The EIP-3009 signature does not recover to the payer.
    EvmSignature => "invalid_exact_evm_payload_signature",
    /// The authorization moves a different amount.
    EvmValue => "invalid_exact_evm_payload_authorization_value",
    /// The authorization is not valid yet.
    EvmValidAfter => "invalid_exact_evm_payload_authorization_valid_after",
    /// The authorization has expired, or would before it settles.
    EvmValidBefore => "invalid_exact_evm_payload_authorization_valid_before",
    /// The token already marked the authorization's nonce used.
    EvmNonceUsed => "invalid_exact_evm_payload_authorization_nonce_used",
    /// The authorization pays someone else.
    EvmRecipient => "invalid_exact_evm_payload_recipient_mismatch",
    /// The payment is for another token.
    EvmAsset => "invalid_exact_evm_payload_asset_mismatch",
    /// The transfer would revert.
    EvmSimulation => "invalid_exact_evm_payload_simulation_failed",
    /// Settling the payment would take more gas than a settlement may (a smart wallet
    /// whose signature check is costly).
    EvmGasCap => "invalid_exact_evm_settlement_gas_too_high",
    /// The payer's last settled payment reverted on chain: refused for a while.
    EvmPayerCoolingOff => "invalid_exact_evm_payer_reverted_recently",
    /// The Solana payload is not a transaction.
    SvmTransaction => "invalid_exact_svm_payload_transaction",
    /// A required signature is missing or does not verify.
    SvmSignature => "invalid_exact_svm_payload_signature_invalid",
    /// The transaction runs instructions a payment may not.
    SvmInstructions => "invalid_exact_svm_payload_transaction_instructions",
    /// The transaction transfers nothing.
    SvmNoTransfer => "invalid_exact_svm_payload_no_transfer_instruction",
    /// The transfer pays someone else.
    SvmRecipient => "invalid_exact_svm_payload_recipient_mismatch",
    /// The transfer moves a different amount.
    SvmAmount => "invalid_exact_svm_payload_amount_mismatch",
    /// The transfer is of another mint.
    SvmMint => "invalid_exact_svm_payload_mint_mismatch",
    /// The transaction fails in simulation.
    SvmSimulation => "invalid_exact_svm_transaction_simulation_failed",
    /// The transaction failed on chain.
    SvmFailed => "invalid_exact_svm_transaction_failed",
    /// A transaction that already paid for a purchase (the reference facilitator's word).
    DuplicateSettlement => "duplicate_settlement",
    /// A native SOL quote that has run out: pay the fresh one.
    SolQuoteExpired => "sol_quote_expired",
    /// A SOL payment whose quote we did not issue (or that was altered).
    SolQuoteInvalid => "sol_quote_invalid",
    /// The transfer was broadcast and is not confirmed yet (x402's word since
    /// `@x402/core` 2.24): neither paid nor refused, the transaction names it.
    SettlementPending => "settlement_pending",
    /// batch-settlement: `payload.type` is none of deposit, voucher, refund.
    BatchPayloadType => "invalid_batch_settlement_evm_payload_type",
    /// batch-settlement: the channel config or voucher does not read.
    BatchVoucherPayload => "invalid_batch_settlement_evm_voucher_payload",
    /// batch-settlement: the deposit part does not read.
    BatchDepositPayload => "invalid_batch_settlement_evm_deposit_payload",
    /// batch-settlement: the refund part does not read.
    BatchRefundPayload => "invalid_batch_settlement_evm_refund_payload",
    /// batch-settlement: the config does not hash to the voucher's channel id.
    BatchChannelIdMismatch => "invalid_batch_settlement_evm_channel_id_mismatch",
    /// batch-settlement: the channel pays someone else.
    BatchReceiverMismatch => "invalid_batch_settlement_evm_receiver_mismatch",
    /// batch-settlement: the channel names another receiver authorizer.
    BatchReceiverAuthorizerMismatch => "invalid_batch_settlement_evm_receiver_authorizer_mismatch",
    /// batch-settlement: the channel is in another token.
    BatchTokenMismatch => "invalid_batch_settlement_evm_token_mismatch",
    /// batch-settlement: the channel's withdrawal delay is not the one we offer.
    BatchWithdrawDelayMismatch => "invalid_batch_settlement_evm_withdraw_delay_mismatch",
    /// batch-settlement: the withdrawal delay is outside the contract's 15 min – 30 days.
    BatchWithdrawDelayOutOfRange => "invalid_batch_settlement_evm_withdraw_delay_out_of_range",
    /// batch-settlement: a deposit authorized otherwise than by EIP-3009 (we offer that only).
    BatchErc3009Required => "invalid_batch_settlement_evm_erc3009_authorization_required",
    /// batch-settlement: the voucher's ceiling is not what the channel has charged plus
    /// this price (the corrective 402 says what it has charged).
    BatchCumulativeMismatch => "invalid_batch_settlement_evm_cumulative_amount_mismatch",
    /// batch-settlement: the voucher asks more than the channel holds.
    BatchCumulativeExceedsBalance => "invalid_batch_settlement_evm_cumulative_exceeds_balance",
    /// batch-settlement: the voucher is at or below what was already claimed on chain.
    BatchCumulativeBelowClaimed => "invalid_batch_settlement_evm_cumulative_below_claimed",
    /// batch-settlement: another request on the channel is being answered.
    BatchChannelBusy => "invalid_batch_settlement_evm_channel_busy",
    /// batch-settlement: the payer started a timed withdrawal; nothing more is sold on
    /// the channel (our own code: the scheme names none).
    BatchWithdrawalPending => "invalid_batch_settlement_evm_withdrawal_pending",
    /// batch-settlement: nothing was deposited in the channel.
    BatchChannelNotFound => "invalid_batch_settlement_evm_channel_not_found",
    /// batch-settlement: the voucher's signature is not the payer authorizer's.
    BatchVoucherSignature => "invalid_batch_settlement_evm_voucher_signature",
}

impl From<&str> for FailureReason {
    fn from(code: &str) -> FailureReason {
        FailureReason::parse(code)
    }
}

impl From<String> for FailureReason {
    fn from(code: String) -> FailureReason {
        FailureReason::parse(&code)
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for FailureReason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl Serialize for FailureReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for FailureReason {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<FailureReason, D::Error> {
        String::deserialize(d).map(FailureReason::from)
    }
}

/// Whose fault a failed payment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The payment itself is wrong (signature, amount, nonce, funds): the payer can fix it.
    Invalid,
    /// The chain or the facilitator could not be asked, or did not answer in time: at
    /// verification nothing was charged; at settlement the outcome is unknown.
    Unavailable,
    /// Our own configuration is wrong.
    Config,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct PaymentFailure {
    pub kind: FailureKind,
    /// The x402 `invalidReason` / `errorReason` code.
    pub reason: FailureReason,
    pub message: String,
    /// A settlement broadcast whose outcome is not known yet: its transaction.
    pub transaction: Option<String>,
}

impl PaymentFailure {
    pub fn invalid(reason: FailureReason, message: impl Into<String>) -> PaymentFailure {
        PaymentFailure {
            kind: FailureKind::Invalid,
            reason,
            message: message.into(),
            transaction: None,
        }
    }

    pub fn unavailable(message: impl Into<String>) -> PaymentFailure {
        PaymentFailure {
            kind: FailureKind::Unavailable,
            reason: FailureReason::UnexpectedError,
            message: message.into(),
            transaction: None,
        }
    }

    /// A transfer broadcast as `transaction` whose outcome is not known yet.
    pub fn pending(transaction: String, message: impl Into<String>) -> PaymentFailure {
        PaymentFailure {
            kind: FailureKind::Unavailable,
            reason: FailureReason::SettlementPending,
            message: message.into(),
            transaction: Some(transaction),
        }
    }

    pub fn config(message: impl Into<String>) -> PaymentFailure {
        PaymentFailure {
            kind: FailureKind::Config,
            reason: FailureReason::UnexpectedError,
            message: message.into(),
            transaction: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_code_reads_back_as_itself_and_others_pass_through() {
        for r in FailureReason::KNOWN {
            assert_eq!(&FailureReason::parse(r.as_str()), r);
            assert!(!matches!(r, FailureReason::Other(_)));
        }
        let mut codes: Vec<&str> = FailureReason::KNOWN.iter().map(|r| r.as_str()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(
            codes.len(),
            FailureReason::KNOWN.len(),
            "a code is listed twice"
        );

        let theirs = FailureReason::parse("permit2_allowance_required");
        assert_eq!(
            theirs,
            FailureReason::Other("permit2_allowance_required".into())
        );
        let json = serde_json::to_value(&theirs).expect("json");
        assert_eq!(json, "permit2_allowance_required");
        let back: FailureReason = serde_json::from_value(json).expect("reads");
        assert_eq!(back, theirs);
        let ours: FailureReason =
            serde_json::from_value(serde_json::json!("insufficient_funds")).expect("reads");
        assert_eq!(ours, FailureReason::InsufficientFunds);
    }
}
