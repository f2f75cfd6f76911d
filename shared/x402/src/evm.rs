//! The EVM `exact` scheme: an EIP-3009 `TransferWithAuthorization` signed by the payer.
//! Everything here uses alloy's `sol!` types and EIP-712 hashing; nothing hand-rolls
//! keccak or secp256k1.
//!
//! Verification in two parts. [`Eip3009Payment::check_offline`] needs no chain: the
//! signed fields against our requirements, the validity window with a margin, and (for
//! 65-byte signatures) the recovered signer. `umpire_pay::evm::EvmChain` reads what only
//! the chain knows: the nonce's state, the balance, and a simulation of the very
//! transfer that settlement will submit (which also checks smart-wallet signatures via
//! ERC-1271).

use alloy::primitives::{Address, B256, Bytes, Signature, U256};
use alloy::sol;
use alloy::sol_types::{Eip712Domain, SolCall, SolStruct};

use crate::rails::Rail;
use crate::reason::{FailureReason, PaymentFailure};
use crate::types::{Asset, EvmExactPayload, Network, PaymentRequirements};

sol! {
    /// EIP-3009's signed message (the EIP-712 primary type).
    #[derive(Debug, PartialEq, Eq)]
    struct TransferWithAuthorization {
        address from;
        address to;
        uint256 value;
        uint256 validAfter;
        uint256 validBefore;
        bytes32 nonce;
    }

    /// The parts of USDC (FiatToken v2.2) that x402 settlement uses.
    interface IEip3009 {
        function authorizationState(address authorizer, bytes32 nonce) external view returns (bool);
        function balanceOf(address account) external view returns (uint256);
        function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s) external;
        function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature) external;
        event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
        event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);
        event Transfer(address indexed from, address indexed to, uint256 value);
    }
}

/// A validity window must stay open at least this long past "now": settlement needs
/// time to land, and the token refuses an authorization at `validBefore`.
pub const VALID_BEFORE_MARGIN_SECS: u64 = 6;

/// How far past `maxTimeoutSeconds` an authorization's `validBefore` may reach (a
/// client's clock ahead of ours).
pub const VALID_BEFORE_SLACK_SECS: u64 = 300;

/// How far back settlement (`umpire_pay::evm::EvmChain::spent_by`) looks for the transfer that used an
/// authorization at most: about 5.5 hours of Base blocks, inside the 10,000-block range
/// most RPC providers allow for `eth_getLogs`.
pub const SETTLEMENT_LOOKBACK_BLOCKS: u64 = 10_000;

/// How old (by its block's timestamp) a transfer may be and still be credited as paying
/// for a purchase: the day the ledger remembers what a payment bought
/// ([`umpire_core::product::ANSWER_KEPT_SECS`]) less two hours (a purchase's entry may
/// start its day up to an authorization's longest window before its transfer lands,
/// and clocks differ). Older, the purchase it paid for may be forgotten, and crediting
/// it would sell one payment twice; a block count cannot bound this, since block times
/// differ by chain and by the hour.
pub const SETTLEMENT_CREDIT_SECS: u64 = umpire_core::product::ANSWER_KEPT_SECS - 2 * 3600;

/// Whether a transfer in a block stamped `block_timestamp` may be credited at `now`
/// (unix seconds; see [`SETTLEMENT_CREDIT_SECS`]).
pub fn credits_transfer_at(block_timestamp: u64, now: u64) -> bool {
    block_timestamp.saturating_add(SETTLEMENT_CREDIT_SECS) > now
}

/// A plain EOA signature: r, s and v.
const EOA_SIGNATURE_LEN: usize = 65;

/// A decoded `exact` EVM payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eip3009Payment {
    pub authorization: TransferWithAuthorization,
    pub signature: Bytes,
}

pub fn invalid(reason: FailureReason, message: impl Into<String>) -> PaymentFailure {
    PaymentFailure::invalid(reason, message)
}

fn bad_signature(e: impl std::fmt::Display) -> PaymentFailure {
    invalid(FailureReason::EvmSignature, format!("signature: {e}"))
}

/// The address whose key made `sig` over `prehash`, through libsecp256k1 (alloy's own
/// recovery uses k256, several times slower; a test holds the two equal).
pub(crate) fn recover_signer(sig: &Signature, prehash: &B256) -> Result<Address, PaymentFailure> {
    use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};
    static CONTEXT: std::sync::LazyLock<secp256k1::Secp256k1<secp256k1::VerifyOnly>> =
        std::sync::LazyLock::new(secp256k1::Secp256k1::verification_only);
    let mut compact = [0u8; 64];
    compact[..32].copy_from_slice(&sig.r().to_be_bytes::<32>());
    compact[32..].copy_from_slice(&sig.s().to_be_bytes::<32>());
    let recovery_id = RecoveryId::try_from(i32::from(sig.v())).map_err(bad_signature)?;
    let recoverable =
        RecoverableSignature::from_compact(&compact, recovery_id).map_err(bad_signature)?;
    let key = CONTEXT
        .recover_ecdsa(&secp256k1::Message::from_digest(prehash.0), &recoverable)
        .map_err(bad_signature)?;
    let uncompressed = key.serialize_uncompressed();
    Ok(Address::from_raw_public_key(&uncompressed[1..]))
}

fn address(field: &str, s: &str) -> Result<Address, PaymentFailure> {
    s.parse::<Address>().map_err(|_| {
        invalid(
            FailureReason::EvmPayload,
            format!("authorization.{field} is not a 20-byte 0x address: {s:?}"),
        )
    })
}

fn uint(field: &str, s: &str) -> Result<U256, PaymentFailure> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(
            FailureReason::EvmPayload,
            format!("authorization.{field} must be a decimal integer string, got {s:?}"),
        ));
    }
    U256::from_str_radix(s, 10).map_err(|_| {
        invalid(
            FailureReason::EvmPayload,
            format!("authorization.{field} does not fit in uint256"),
        )
    })
}

/// The EIP-712 domain of a rail's token: name and version from `extra`, the chain from
/// the CAIP-2 network, the token as verifying contract.
pub fn domain(rail: &Rail) -> Result<Eip712Domain, PaymentFailure> {
    token_domain(&rail.network, &rail.asset, &rail.extra).map_err(PaymentFailure::config)
}

/// [`domain`] from the parts of a rail or of a requirements entry (what a payer signs).
pub fn token_domain(
    network: &Network,
    asset: &Asset,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<Eip712Domain, String> {
    let chain_id = network
        .chain_id()
        .ok_or_else(|| format!("{network} is not eip155:<id>"))?;
    let text = |k: &str| {
        extra
            .get(k)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("extra.{k} is missing"))
    };
    let verifying_contract = asset
        .evm()
        .ok_or_else(|| format!("asset {asset} is not a token address"))?;
    Ok(Eip712Domain::new(
        Some(text("name")?.into()),
        Some(text("version")?.into()),
        Some(U256::from(chain_id)),
        Some(verifying_contract),
        None,
    ))
}

impl Eip3009Payment {
    pub fn parse(payload: &EvmExactPayload) -> Result<Eip3009Payment, PaymentFailure> {
        let a = &payload.authorization;
        let nonce = a.nonce.parse::<B256>().map_err(|_| {
            invalid(
                FailureReason::EvmPayload,
                "authorization.nonce must be 0x followed by 32 bytes of hex",
            )
        })?;
        let signature = payload.signature.parse::<Bytes>().map_err(|_| {
            invalid(
                FailureReason::EvmSignature,
                "signature must be 0x-prefixed hex",
            )
        })?;
        if signature.len() < EOA_SIGNATURE_LEN {
            return Err(invalid(
                FailureReason::EvmSignature,
                format!(
                    "signature has {} bytes; an EOA signature has 65",
                    signature.len()
                ),
            ));
        }
        Ok(Eip3009Payment {
            authorization: TransferWithAuthorization {
                from: address("from", &a.from)?,
                to: address("to", &a.to)?,
                value: uint("value", &a.value)?,
                validAfter: uint("validAfter", &a.valid_after)?,
                validBefore: uint("validBefore", &a.valid_before)?,
                nonce,
            },
            signature,
        })
    }

    pub fn payer(&self) -> Address {
        self.authorization.from
    }

    /// Whether `authorization.from` itself signed this authorization (an EOA signature
    /// that recovers to it), checked offline whatever the authorization's validity
    /// window: what proves that whoever presents it holds the payer's signature.
    /// Smart-wallet signatures cannot be checked without a chain: false.
    pub fn signed_by_payer(&self, rail: &Rail) -> bool {
        if !self.is_eoa_signature() {
            return false;
        }
        let (Ok(sig), Ok(domain)) = (self.eoa_signature(), domain(rail)) else {
            return false;
        };
        sig.normalize_s().is_none()
            && recover_signer(&sig, &self.signing_hash(&domain))
                .is_ok_and(|signer| signer == self.authorization.from)
    }

    /// Smart-wallet signatures (ERC-1271, ERC-6492) are longer than 65 bytes and can
    /// only be checked on chain.
    pub fn is_eoa_signature(&self) -> bool {
        self.signature.len() == EOA_SIGNATURE_LEN
    }

    fn eoa_signature(&self) -> Result<Signature, PaymentFailure> {
        Signature::from_raw(&self.signature).map_err(bad_signature)
    }

    /// The EIP-712 hash the payer signed.
    pub fn signing_hash(&self, domain: &Eip712Domain) -> B256 {
        self.authorization.eip712_signing_hash(domain)
    }

    /// Everything that can be checked without a chain. `now` is unix seconds.
    pub fn check_offline(
        &self,
        rail: &Rail,
        requirements: &PaymentRequirements,
        now: u64,
    ) -> Result<(), PaymentFailure> {
        let a = &self.authorization;
        let pay_to = requirements.pay_to.evm().ok_or_else(|| {
            PaymentFailure::config(format!(
                "payTo {} is not an EVM address",
                requirements.pay_to
            ))
        })?;
        if a.to != pay_to {
            return Err(invalid(
                FailureReason::EvmRecipient,
                format!("the authorization pays {}, not {pay_to}", a.to),
            ));
        }
        if a.value != requirements.amount.0 {
            return Err(invalid(
                FailureReason::EvmValue,
                format!(
                    "the authorization is for {} base units, the price is {}",
                    a.value, requirements.amount
                ),
            ));
        }
        self.check_validity_window(requirements, now)?;
        if self.is_eoa_signature() {
            self.check_eoa_signer(rail)?;
        }
        Ok(())
    }

    /// Whether the window is usable at `now`, in this order: already open, not reaching past
    /// the payment window we offered (plus slack), open [`VALID_BEFORE_MARGIN_SECS`] longer.
    fn check_validity_window(
        &self,
        requirements: &PaymentRequirements,
        now: u64,
    ) -> Result<(), PaymentFailure> {
        let a = &self.authorization;
        if a.validAfter >= U256::from(now) {
            return Err(invalid(
                FailureReason::EvmValidAfter,
                format!(
                    "the authorization is not valid until {} (now {now})",
                    a.validAfter
                ),
            ));
        }
        // No longer than the window we offered (and a margin for a client's clock): a
        // payment's prepared purchase is kept for its request until the payment can no
        // longer land, which must be soon.
        let longest = now
            .saturating_add(requirements.max_timeout_seconds)
            .saturating_add(VALID_BEFORE_SLACK_SECS);
        if a.validBefore > U256::from(longest) {
            return Err(invalid(
                FailureReason::EvmValidBefore,
                format!(
                    "the authorization is valid until {}, longer than the {} s this payment window offers (now {now})",
                    a.validBefore, requirements.max_timeout_seconds
                ),
            ));
        }
        if a.validBefore < U256::from(now + VALID_BEFORE_MARGIN_SECS) {
            return Err(invalid(
                FailureReason::EvmValidBefore,
                format!(
                    "the authorization expires at {} (now {now}); it must stay valid at least {VALID_BEFORE_MARGIN_SECS} s longer",
                    a.validBefore
                ),
            ));
        }
        Ok(())
    }

    /// For an EOA signature: whether it is low-s and recovers, over the rail's EIP-712
    /// domain, to `authorization.from` (a bad domain is a config error, checked after low-s).
    fn check_eoa_signer(&self, rail: &Rail) -> Result<(), PaymentFailure> {
        let sig = self.eoa_signature()?;
        // A high-s twin of a valid signature is refused by the token; refuse it here too.
        if sig.normalize_s().is_some() {
            return Err(invalid(
                FailureReason::EvmSignature,
                "signature has a high s value (malleable form)",
            ));
        }
        let signer = recover_signer(&sig, &self.signing_hash(&domain(rail)?))?;
        if signer != self.authorization.from {
            return Err(invalid(
                FailureReason::EvmSignature,
                format!(
                    "the signature was made by {signer}, not by authorization.from {}",
                    self.authorization.from
                ),
            ));
        }
        Ok(())
    }

    /// Refuses an authorization that lapses before `until` (unix seconds) plus the
    /// margin: the moment this request may still be settling it. Checked before any
    /// work, so an authorization that cannot last the purchase costs nothing.
    pub fn check_lasts_until(&self, until: u64) -> Result<(), PaymentFailure> {
        let need = until.saturating_add(VALID_BEFORE_MARGIN_SECS);
        if self.authorization.validBefore < U256::from(need) {
            return Err(invalid(
                FailureReason::EvmValidBefore,
                format!(
                    "the authorization expires at {}, but this purchase may still be settling it at {until}: it must stay valid until at least {need}",
                    self.authorization.validBefore
                ),
            ));
        }
        Ok(())
    }

    /// The calldata that settles this payment: the (v, r, s) overload for EOA
    /// signatures, the `bytes` overload for smart wallets.
    pub fn transfer_calldata(&self) -> Result<Bytes, PaymentFailure> {
        let a = &self.authorization;
        if self.is_eoa_signature() {
            let sig = self.eoa_signature()?;
            Ok(IEip3009::transferWithAuthorization_0Call {
                from: a.from,
                to: a.to,
                value: a.value,
                validAfter: a.validAfter,
                validBefore: a.validBefore,
                nonce: a.nonce,
                v: 27 + u8::from(sig.v()),
                r: sig.r().into(),
                s: sig.s().into(),
            }
            .abi_encode()
            .into())
        } else {
            Ok(IEip3009::transferWithAuthorization_1Call {
                from: a.from,
                to: a.to,
                value: a.value,
                validAfter: a.validAfter,
                validBefore: a.validBefore,
                nonce: a.nonce,
                signature: self.signature.clone(),
            }
            .abi_encode()
            .into())
        }
    }
}

#[cfg(test)]
mod tests;
