//! The `payload` of a batch-settlement payment as clients send it (the reference client's
//! JSON: amounts as decimal strings, `withdrawDelay` a number, hex for ids, salts and
//! signatures), read into the contract's types. A field that does not read is refused
//! with the part it belongs to named, never guessed.

use alloy::primitives::{Address, B256, Bytes, U256};
use serde::Deserialize;
use serde_json::Value;

use super::ChannelConfig;
use crate::reason::{FailureReason, PaymentFailure};

/// A payer's voucher: the channel, the cumulative ceiling, the signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedVoucher {
    pub channel: B256,
    pub max_claimable: u128,
    pub signature: Bytes,
}

/// An EIP-3009 `receiveWithAuthorization` to the deposit collector; its nonce is
/// `keccak256(abi.encode(channelId, salt))`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Erc3009Deposit {
    pub valid_after: U256,
    pub valid_before: U256,
    pub salt: U256,
    pub signature: Bytes,
}

/// What a client sends: a deposit (first purchase or top-up) with its voucher, a voucher
/// alone, or a cooperative refund request (a voucher that charges nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelPayload {
    Deposit {
        config: ChannelConfig,
        voucher: SignedVoucher,
        amount: u128,
        authorization: Erc3009Deposit,
    },
    Voucher {
        config: ChannelConfig,
        voucher: SignedVoucher,
    },
    Refund {
        config: ChannelConfig,
        voucher: SignedVoucher,
        /// None: everything not yet charged.
        amount: Option<u128>,
    },
}

impl ChannelPayload {
    pub fn config(&self) -> &ChannelConfig {
        match self {
            ChannelPayload::Deposit { config, .. }
            | ChannelPayload::Voucher { config, .. }
            | ChannelPayload::Refund { config, .. } => config,
        }
    }

    pub fn voucher(&self) -> &SignedVoucher {
        match self {
            ChannelPayload::Deposit { voucher, .. }
            | ChannelPayload::Voucher { voucher, .. }
            | ChannelPayload::Refund { voucher, .. } => voucher,
        }
    }

    /// Reads a payment's `payload` object.
    pub fn from_json(v: &Value) -> Result<ChannelPayload, PaymentFailure> {
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let bad = |reason: FailureReason, part: &str, e: String| {
            PaymentFailure::invalid(reason, format!("payload.{part}: {e}"))
        };
        let common = |reason: FailureReason| -> Result<_, PaymentFailure> {
            let w: CommonWire = serde_json::from_value(v.clone())
                .map_err(|e| bad(reason.clone(), "", e.to_string()))?;
            let config = w
                .channel_config
                .parse()
                .map_err(|e| bad(reason.clone(), "channelConfig", e))?;
            let voucher = w.voucher.parse().map_err(|e| bad(reason, "voucher", e))?;
            Ok((config, voucher))
        };
        match kind {
            "voucher" => {
                let (config, voucher) = common(FailureReason::BatchVoucherPayload)?;
                Ok(ChannelPayload::Voucher { config, voucher })
            }
            "deposit" => {
                let reason = FailureReason::BatchDepositPayload;
                let (config, voucher) = common(reason.clone())?;
                let d: DepositWire = v
                    .get("deposit")
                    .cloned()
                    .ok_or_else(|| bad(reason.clone(), "deposit", "missing".into()))
                    .and_then(|d| {
                        serde_json::from_value(d)
                            .map_err(|e| bad(reason.clone(), "deposit", e.to_string()))
                    })?;
                let amount =
                    amount(&d.amount).map_err(|e| bad(reason.clone(), "deposit.amount", e))?;
                let Some(a) = d.authorization.erc3009_authorization else {
                    return Err(PaymentFailure::invalid(
                        FailureReason::BatchErc3009Required,
                        "payload.deposit.authorization: only erc3009Authorization deposits are accepted here",
                    ));
                };
                let authorization = a
                    .parse()
                    .map_err(|e| bad(reason, "deposit.authorization.erc3009Authorization", e))?;
                Ok(ChannelPayload::Deposit {
                    config,
                    voucher,
                    amount,
                    authorization,
                })
            }
            "refund" => {
                let reason = FailureReason::BatchRefundPayload;
                let (config, voucher) = common(reason.clone())?;
                let amount = match v.get("amount") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => {
                        Some(amount(s).ok().filter(|a| *a > 0).ok_or_else(|| {
                            bad(reason, "amount", format!("{s:?} is not a positive integer"))
                        })?)
                    }
                    Some(other) => {
                        return Err(bad(reason, "amount", format!("{other} is not a string")));
                    }
                };
                Ok(ChannelPayload::Refund {
                    config,
                    voucher,
                    amount,
                })
            }
            other => Err(PaymentFailure::invalid(
                FailureReason::BatchPayloadType,
                format!("payload.type {other:?} is none of deposit, voucher, refund"),
            )),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommonWire {
    channel_config: ConfigWire,
    voucher: VoucherWire,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConfigWire {
    payer: String,
    payer_authorizer: String,
    receiver: String,
    receiver_authorizer: String,
    token: String,
    withdraw_delay: u64,
    salt: String,
}

impl ConfigWire {
    fn parse(&self) -> Result<ChannelConfig, String> {
        let withdraw_delay = alloy::primitives::aliases::U40::try_from(self.withdraw_delay)
            .map_err(|_| {
                format!(
                    "withdrawDelay {} does not fit in uint40",
                    self.withdraw_delay
                )
            })?;
        Ok(ChannelConfig {
            payer: addr("payer", &self.payer)?,
            payerAuthorizer: addr("payerAuthorizer", &self.payer_authorizer)?,
            receiver: addr("receiver", &self.receiver)?,
            receiverAuthorizer: addr("receiverAuthorizer", &self.receiver_authorizer)?,
            token: addr("token", &self.token)?,
            withdrawDelay: withdraw_delay,
            salt: word("salt", &self.salt)?,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VoucherWire {
    channel_id: String,
    max_claimable_amount: String,
    signature: String,
}

impl VoucherWire {
    fn parse(&self) -> Result<SignedVoucher, String> {
        Ok(SignedVoucher {
            channel: word("channelId", &self.channel_id)?,
            max_claimable: amount(&self.max_claimable_amount)
                .map_err(|e| format!("maxClaimableAmount {e}"))?,
            signature: hex_bytes("signature", &self.signature)?,
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DepositWire {
    amount: String,
    authorization: AuthorizationWire,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AuthorizationWire {
    #[serde(default)]
    erc3009_authorization: Option<Erc3009Wire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Erc3009Wire {
    valid_after: String,
    valid_before: String,
    salt: String,
    signature: String,
}

impl Erc3009Wire {
    fn parse(&self) -> Result<Erc3009Deposit, String> {
        let uint = |field: &str, s: &str| {
            decimal(s)
                .and_then(|s| U256::from_str_radix(s, 10).ok())
                .ok_or_else(|| format!("{field} {s:?} is not a decimal uint256"))
        };
        Ok(Erc3009Deposit {
            valid_after: uint("validAfter", &self.valid_after)?,
            valid_before: uint("validBefore", &self.valid_before)?,
            salt: U256::from_be_bytes(word("salt", &self.salt)?.0),
            signature: hex_bytes("signature", &self.signature)?,
        })
    }
}

fn decimal(s: &str) -> Option<&str> {
    (!s.is_empty() && s.len() <= 78 && s.bytes().all(|b| b.is_ascii_digit())).then_some(s)
}

/// A uint128 amount written as a decimal string.
fn amount(s: &str) -> Result<u128, String> {
    decimal(s)
        .and_then(|s| s.parse::<u128>().ok())
        .ok_or_else(|| format!("{s:?} is not a decimal uint128"))
}

fn addr(field: &str, s: &str) -> Result<Address, String> {
    s.parse::<Address>()
        .map_err(|_| format!("{field} is not a 20-byte 0x address: {s:?}"))
}

fn word(field: &str, s: &str) -> Result<B256, String> {
    s.parse::<B256>()
        .map_err(|_| format!("{field} must be 0x and 64 hex digits"))
}

/// A signature's hex, bounded: a plain signature is 65 bytes; a smart wallet's may be
/// longer, but not without end (it is hashed and may be sent on chain).
fn hex_bytes(field: &str, s: &str) -> Result<Bytes, String> {
    const MAX_SIGNATURE_BYTES: usize = 4096;
    let b = s
        .parse::<Bytes>()
        .map_err(|_| format!("{field} is not 0x hex"))?;
    if b.is_empty() || b.len() > MAX_SIGNATURE_BYTES {
        return Err(format!(
            "{field} must be 1 to {MAX_SIGNATURE_BYTES} bytes, not {}",
            b.len()
        ));
    }
    Ok(b)
}
