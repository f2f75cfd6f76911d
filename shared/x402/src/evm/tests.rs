use super::*;
use crate::types::Scheme;
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use serde_json::{Map, json};

use crate::rails::RailPricing;
use crate::types::EvmAuthorization;

/// No transfer is credited once the ledger may have forgotten what it bought: would
/// catch a credit window as long as (or longer than) the ledger's day, which sells a
/// payment twice wherever a chain read still finds its transfer (10,000 blocks are
/// 33 hours on a 12-s chain).
#[test]
fn no_transfer_is_credited_past_the_ledgers_memory() {
    let kept = umpire_core::product::ANSWER_KEPT_SECS;
    let now = 1_800_000_000;
    assert!(credits_transfer_at(now, now));
    assert!(
        credits_transfer_at(now + 60, now),
        "a clock behind the chain's"
    );
    assert!(credits_transfer_at(now - SETTLEMENT_CREDIT_SECS + 1, now));
    assert!(!credits_transfer_at(now - SETTLEMENT_CREDIT_SECS, now));
    assert!(!credits_transfer_at(now - kept, now));
    assert!(!credits_transfer_at(0, now));
    // Room for an authorization's longest window (an hour, and the slack) and clocks.
    assert!(SETTLEMENT_CREDIT_SECS + 3600 + VALID_BEFORE_SLACK_SECS < kept);
}

const PAY_TO: &str = "0x1111111111111111111111111111111111111111";

fn rail() -> Rail {
    let mut extra = Map::new();
    extra.insert("name".into(), json!("USD Coin"));
    extra.insert("version".into(), json!("2"));
    Rail {
        scheme: Scheme::Exact,
        network: "eip155:8453".parse().expect("valid fixture"),
        v1_network: Some("base".into()),
        asset: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
            .parse()
            .expect("valid fixture"),
        pay_to: PAY_TO.parse().expect("valid fixture"),
        extra,
        pricing: RailPricing::Stablecoin { decimals: 6 },
    }
}

fn requirements() -> PaymentRequirements {
    PaymentRequirements {
        scheme: Scheme::Exact,
        network: "eip155:8453".parse().expect("valid fixture"),
        amount: "1000000".parse().expect("valid fixture"),
        asset: rail().asset,
        pay_to: PAY_TO.parse().expect("valid fixture"),
        max_timeout_seconds: 60,
        extra: rail().extra,
    }
}

#[test]
fn libsecp256k1_recovers_the_signer_alloy_recovers() {
    for i in 1u8..=16 {
        let signer = PrivateKeySigner::random();
        let hash = B256::repeat_byte(i);
        let sig = signer.sign_hash_sync(&hash).expect("signs");
        let ours = recover_signer(&sig, &hash).expect("recovers");
        assert_eq!(ours, signer.address());
        assert_eq!(ours, sig.recover_address_from_prehash(&hash).expect("k256"));
        // Another message recovers another address.
        let other = recover_signer(&sig, &B256::repeat_byte(i + 100)).ok();
        assert_ne!(other, Some(signer.address()));
    }
}

fn signed(signer: &PrivateKeySigner, value: &str, valid_before: u64) -> EvmExactPayload {
    let auth = EvmAuthorization {
        from: signer.address().to_string(),
        to: PAY_TO.into(),
        value: value.into(),
        valid_after: "0".into(),
        valid_before: valid_before.to_string(),
        nonce: format!("0x{}", "ab".repeat(32)),
    };
    let unsigned = EvmExactPayload {
        signature: format!("0x{}", "00".repeat(65)),
        authorization: auth,
    };
    let p = Eip3009Payment::parse(&unsigned).expect("parses");
    let hash = p.signing_hash(&domain(&rail()).expect("domain"));
    let sig = signer.sign_hash_sync(&hash).expect("signs");
    EvmExactPayload {
        signature: format!("0x{}", alloy::hex::encode(sig.as_bytes())),
        ..unsigned
    }
}

#[test]
fn a_correctly_signed_authorization_passes_offline_checks() {
    let signer = PrivateKeySigner::random();
    let now = 1_700_000_000;
    let p = Eip3009Payment::parse(&signed(&signer, "1000000", now + 60)).expect("parses");
    assert_eq!(p.check_offline(&rail(), &requirements(), now), Ok(()));
    assert_eq!(p.payer(), signer.address());
    // The (v, r, s) overload is chosen for an EOA signature.
    let data = p.transfer_calldata().expect("calldata");
    assert_eq!(&data[..4], &[0xe3, 0xee, 0x16, 0x0e]);
}

#[test]
fn tampering_with_any_signed_field_fails_the_signature() {
    let signer = PrivateKeySigner::random();
    let now = 1_700_000_000;
    let mut payload = signed(&signer, "1000000", now + 60);
    payload.authorization.valid_before = (now + 61).to_string();
    let p = Eip3009Payment::parse(&payload).expect("parses");
    let e = p
        .check_offline(&rail(), &requirements(), now)
        .expect_err("tampered");
    assert_eq!(e.reason, "invalid_exact_evm_payload_signature");
}

#[test]
fn window_amount_and_recipient_are_checked() {
    let signer = PrivateKeySigner::random();
    let now = 1_700_000_000;
    let expiring = Eip3009Payment::parse(&signed(&signer, "1000000", now + 3)).expect("parses");
    assert_eq!(
        expiring
            .check_offline(&rail(), &requirements(), now)
            .map_err(|e| e.reason),
        Err("invalid_exact_evm_payload_authorization_valid_before".into())
    );
    let cheap = Eip3009Payment::parse(&signed(&signer, "999999", now + 60)).expect("parses");
    assert_eq!(
        cheap
            .check_offline(&rail(), &requirements(), now)
            .map_err(|e| e.reason),
        Err("invalid_exact_evm_payload_authorization_value".into())
    );
    let mut elsewhere = signed(&signer, "1000000", now + 60);
    elsewhere.authorization.to = "0x9999999999999999999999999999999999999999".into();
    assert_eq!(
        Eip3009Payment::parse(&elsewhere)
            .expect("parses")
            .check_offline(&rail(), &requirements(), now)
            .map_err(|e| e.reason),
        Err("invalid_exact_evm_payload_recipient_mismatch".into())
    );
}

/// The EIP-3009 window opens after `validAfter`: an authorization not valid yet (or
/// valid only from this very second) is refused with its reason, one valid since a
/// second ago passes. Would catch: the `validAfter` check dropped or made `>`.
#[test]
fn an_authorization_not_valid_yet_is_refused() {
    let signer = PrivateKeySigner::random();
    let now = 1_700_000_000;
    let after = |valid_after: u64| {
        let mut p = signed(&signer, "1000000", now + 60);
        p.authorization.valid_after = valid_after.to_string();
        // Signed again over the new window.
        let unsigned = Eip3009Payment::parse(&p).expect("parses");
        let hash = unsigned.signing_hash(&domain(&rail()).expect("domain"));
        let sig = signer.sign_hash_sync(&hash).expect("signs");
        p.signature = format!("0x{}", alloy::hex::encode(sig.as_bytes()));
        Eip3009Payment::parse(&p)
            .expect("parses")
            .check_offline(&rail(), &requirements(), now)
            .map_err(|e| e.reason)
    };
    let not_yet = Err("invalid_exact_evm_payload_authorization_valid_after".into());
    assert_eq!(after(now + 30), not_yet);
    assert_eq!(after(now), not_yet);
    assert_eq!(after(now - 1), Ok(()));
}

/// A signature's high-s twin recovers the same signer, and the token refuses it:
/// refused here too, before anything is asked of the chain. Would catch: the
/// `normalize_s` check dropped (the twin would pass offline and fail on chain).
#[test]
fn the_high_s_twin_of_a_valid_signature_is_refused() {
    let signer = PrivateKeySigner::random();
    let now = 1_700_000_000;
    let good = signed(&signer, "1000000", now + 60);
    let p = Eip3009Payment::parse(&good).expect("parses");
    assert_eq!(p.check_offline(&rail(), &requirements(), now), Ok(()));
    let sig = p.eoa_signature().expect("an EOA signature");
    // secp256k1's group order: s and n - s both verify, with the other parity.
    let n = U256::from_str_radix(
        "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141",
        16,
    )
    .expect("n");
    let twin = Signature::new(sig.r(), n - sig.s(), !sig.v());
    let hash = p.signing_hash(&domain(&rail()).expect("domain"));
    assert_eq!(
        twin.recover_address_from_prehash(&hash).ok(),
        Some(signer.address()),
        "the twin is a valid signature of the same message"
    );
    let malleable = EvmExactPayload {
        signature: format!("0x{}", alloy::hex::encode(twin.as_bytes())),
        ..good
    };
    let e = Eip3009Payment::parse(&malleable)
        .expect("parses")
        .check_offline(&rail(), &requirements(), now)
        .expect_err("refused");
    assert_eq!(e.reason, "invalid_exact_evm_payload_signature");
    assert!(e.message.contains("high s"), "{}", e.message);
}

#[test]
fn malformed_fields_are_named() {
    let signer = PrivateKeySigner::random();
    let mut p = signed(&signer, "1000000", 2_000_000_000);
    p.authorization.value = "1e6".into();
    let e = Eip3009Payment::parse(&p).expect_err("bad value");
    assert!(e.message.contains("authorization.value"), "{}", e.message);
    let mut p = signed(&signer, "1000000", 2_000_000_000);
    p.signature = "0x1234".into();
    assert_eq!(
        Eip3009Payment::parse(&p).map(|_| ()).map_err(|e| e.reason),
        Err("invalid_exact_evm_payload_signature".into())
    );
}

#[test]
fn the_domain_matches_usdc_on_base() {
    // The same domain hashed by viem's `domainSeparator` (an independent
    // implementation); it is also what USDC on Base returns from DOMAIN_SEPARATOR().
    let d = domain(&rail()).expect("domain");
    assert_eq!(
        d.separator().to_string(),
        "0x02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"
    );
}
