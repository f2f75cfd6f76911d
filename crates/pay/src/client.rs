//! The paying side of x402 `exact` on EVM chains: what `umpire buy` and
//! `umpire reputation` sign. One EIP-3009 `TransferWithAuthorization` per purchase,
//! shaped as the reference client shapes it (validAfter = now - 600, validBefore =
//! now + maxTimeoutSeconds, a random 32-byte nonce).

use alloy::primitives::{Address, B256, U256};
use alloy::signers::SignerSync as _;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::SolStruct as _;
use serde_json::json;

use crate::evm::{TransferWithAuthorization, chain_id, token_domain};
use crate::types::{PaymentRequired, PaymentRequirements};

/// How far back `validAfter` is set, as the reference client does (clock skew).
const VALID_AFTER_SLACK_SECS: u64 = 600;

/// The first `exact` EVM option we can pay, in the server's order of preference.
pub fn pick_evm(required: &PaymentRequired) -> Option<&PaymentRequirements> {
    required.accepts.iter().find(|r| {
        r.scheme == "exact"
            && chain_id(&r.network).is_some()
            && r.extra.get("name").and_then(|v| v.as_str()).is_some()
            && r.extra.get("version").and_then(|v| v.as_str()).is_some()
    })
}

/// The `PAYMENT-SIGNATURE` header value (x402 v2) paying `accepted` from `signer`.
pub fn sign_exact_evm(
    signer: &PrivateKeySigner,
    required: &PaymentRequired,
    accepted: &PaymentRequirements,
    now: u64,
    nonce: [u8; 32],
) -> Result<String, String> {
    let domain = token_domain(&accepted.network, &accepted.asset, &accepted.extra)
        .map_err(|e| format!("cannot pay these requirements: {e}"))?;
    let pay_to: Address = accepted
        .pay_to
        .parse()
        .map_err(|_| format!("payTo {} is not an address", accepted.pay_to))?;
    let value = U256::from_str_radix(&accepted.amount, 10)
        .map_err(|_| format!("amount {} is not an integer", accepted.amount))?;
    let valid_after = now.saturating_sub(VALID_AFTER_SLACK_SECS);
    let valid_before = now + accepted.max_timeout_seconds;
    let authorization = TransferWithAuthorization {
        from: signer.address(),
        to: pay_to,
        value,
        validAfter: U256::from(valid_after),
        validBefore: U256::from(valid_before),
        nonce: B256::from(nonce),
    };
    let signature = signer
        .sign_hash_sync(&authorization.eip712_signing_hash(&domain))
        .map_err(|e| format!("signing failed: {e}"))?;
    let payload = json!({
        "x402Version": 2,
        "resource": required.resource,
        "accepted": accepted,
        "payload": {
            "signature": alloy::primitives::hex::encode_prefixed(signature.as_bytes()),
            "authorization": {
                "from": signer.address().to_checksum(None),
                "to": pay_to.to_checksum(None),
                "value": value.to_string(),
                "validAfter": valid_after.to_string(),
                "validBefore": valid_before.to_string(),
                "nonce": alloy::primitives::hex::encode_prefixed(nonce),
            }
        }
    });
    Ok(crate::encode_header(&payload))
}
