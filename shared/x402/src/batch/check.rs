//! What a batch-settlement payment must satisfy before any channel state is read: the
//! channel is one of ours (the scheme's rules 1–5: the config hashes to the voucher's
//! channel id, pays our receiver in our token, names our receiver authorizer and our
//! withdrawal delay, which the contract allows), and the voucher is signed by the
//! channel's payer authorizer (rule 6), checked here with one recovery when the channel
//! names one. Against our own terms, never the client's copy of the requirements.

use alloy::primitives::{Address, B256, Signature};

use super::wire::SignedVoucher;
use super::{
    ChannelConfig, MAX_WITHDRAW_DELAY_SECS, MIN_WITHDRAW_DELAY_SECS, channel_id, voucher_digest,
};
use crate::evm::recover_signer;
use crate::reason::{FailureReason, PaymentFailure};

/// Our side of every channel we accept: what our 402 offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    pub chain_id: u64,
    /// The settlement contract (its address is in every digest).
    pub contract: Address,
    pub token: Address,
    /// Our `payTo`.
    pub receiver: Address,
    pub receiver_authorizer: Address,
    pub withdraw_delay_secs: u64,
}

/// How a voucher's signature stands after the offline check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signer {
    /// Recovered to the channel's payer authorizer.
    Verified,
    /// The channel names no payer authorizer: the payer (a smart wallet, say) must
    /// accept `digest` through ERC-1271 on chain, as the contract will ask it.
    OnChain { payer: Address, digest: B256 },
}

fn refuse(reason: FailureReason, message: String) -> PaymentFailure {
    PaymentFailure::invalid(reason, message)
}

impl Terms {
    /// The channel `config` names, if it is one of ours and is `voucher`'s channel.
    pub fn channel(
        &self,
        config: &ChannelConfig,
        voucher: &SignedVoucher,
    ) -> Result<B256, PaymentFailure> {
        let id = channel_id(config, self.chain_id, self.contract);
        if id != voucher.channel {
            return Err(refuse(
                FailureReason::BatchChannelIdMismatch,
                format!(
                    "channelConfig hashes to {id}, not to the voucher's channelId {}",
                    voucher.channel
                ),
            ));
        }
        if config.receiver != self.receiver {
            return Err(refuse(
                FailureReason::BatchReceiverMismatch,
                format!(
                    "the channel pays {}, not our payTo {}",
                    config.receiver, self.receiver
                ),
            ));
        }
        if config.receiverAuthorizer != self.receiver_authorizer {
            return Err(refuse(
                FailureReason::BatchReceiverAuthorizerMismatch,
                format!(
                    "the channel's receiverAuthorizer is {}, ours is {}",
                    config.receiverAuthorizer, self.receiver_authorizer
                ),
            ));
        }
        if config.token != self.token {
            return Err(refuse(
                FailureReason::BatchTokenMismatch,
                format!("the channel is in {}, we take {}", config.token, self.token),
            ));
        }
        let delay = u64::try_from(config.withdrawDelay).unwrap_or(u64::MAX);
        if !(MIN_WITHDRAW_DELAY_SECS..=MAX_WITHDRAW_DELAY_SECS).contains(&delay) {
            return Err(refuse(
                FailureReason::BatchWithdrawDelayOutOfRange,
                format!(
                    "withdrawDelay {delay} s is outside {MIN_WITHDRAW_DELAY_SECS}..={MAX_WITHDRAW_DELAY_SECS}"
                ),
            ));
        }
        if delay != self.withdraw_delay_secs {
            return Err(refuse(
                FailureReason::BatchWithdrawDelayMismatch,
                format!(
                    "withdrawDelay {delay} s; we offer {} s",
                    self.withdraw_delay_secs
                ),
            ));
        }
        Ok(id)
    }

    /// The voucher's signature: recovered offline when the channel names a payer
    /// authorizer (the contract then accepts a plain ECDSA signature only, low-s); left
    /// to the chain when it names none.
    pub fn signer(
        &self,
        config: &ChannelConfig,
        voucher: &SignedVoucher,
    ) -> Result<Signer, PaymentFailure> {
        let digest = voucher_digest(
            voucher.channel,
            voucher.max_claimable,
            self.chain_id,
            self.contract,
        );
        if config.payerAuthorizer == Address::ZERO {
            return Ok(Signer::OnChain {
                payer: config.payer,
                digest,
            });
        }
        let bad = |why: String| refuse(FailureReason::BatchVoucherSignature, why);
        // The contract's ECDSA (OpenZeppelin's recoverCalldata) hands v to ecrecover as
        // it is: only 27 and 28 recover. A voucher with v = 0/1 (or an EIP-155 v)
        // recovers here and not at claim time, where it would revert the whole batch.
        let v = voucher.signature.last().copied();
        if voucher.signature.len() != 65 || !matches!(v, Some(27 | 28)) {
            return Err(bad(format!(
                "the voucher's signature must be 65 bytes ending in v = 27 or 28 (the contract's ECDSA), not {} bytes ending in {v:?}",
                voucher.signature.len()
            )));
        }
        let sig = Signature::from_raw(&voucher.signature).map_err(|e| {
            bad(format!(
                "the voucher's signature is not a 65-byte ECDSA signature: {e}"
            ))
        })?;
        if sig.normalize_s().is_some() {
            return Err(bad(
                "the voucher's signature has a high s value (the contract refuses it)".into(),
            ));
        }
        let signer = recover_signer(&sig, &digest).map_err(|f| bad(f.message))?;
        if signer != config.payerAuthorizer {
            return Err(bad(format!(
                "the voucher was signed by {signer}, not by the channel's payerAuthorizer {}",
                config.payerAuthorizer
            )));
        }
        Ok(Signer::Verified)
    }
}
