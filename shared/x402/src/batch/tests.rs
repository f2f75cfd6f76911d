use alloy::primitives::aliases::U40;
use alloy::primitives::{Address, B256, Bytes, U256, address, b256, bytes};
use serde_json::json;

use super::check::{Signer, Terms};
use super::wire::{ChannelPayload, SignedVoucher};
use super::*;
use crate::reason::FailureReason;

// Vectors computed with the reference package (`@x402/evm` 2.27: `computeChannelId`,
// viem's `hashTypedData` over its `voucherTypes`, `claimBatchTypes`, `refundTypes`) on
// chain 31337 at the reference address; the payer is anvil's account 1, whose well-known
// key signed `VOUCHER_SIGNATURE`.
const PAYER: Address = address!("0x70997970C51812dc3A010C7d01b50e0d17dc79C8");
const RECEIVER: Address = address!("0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC");
const AUTHORIZER: Address = address!("0x90F79bf6EB2c4f870365E785982E1f101E93b906");
const TOKEN: Address = address!("0x5FbDB2315678afecb367f032d93F642f64180aa3");
const CHANNEL: B256 = b256!("0x131199c102cc9b1157c6302da139c0069feeb4d31892f518b0557b37acddbc08");
const VOUCHER_SIGNATURE: Bytes = bytes!(
    "0xd651d90c199ab39a82945623f73c313bd4919a0f580359d3acc1a258212160814d3df5c8d9454f5794877b1d8fe630a676e94779e2e60d3cfc80f3c641eaf2371c"
);

fn config() -> ChannelConfig {
    ChannelConfig {
        payer: PAYER,
        payerAuthorizer: PAYER,
        receiver: RECEIVER,
        receiverAuthorizer: AUTHORIZER,
        token: TOKEN,
        withdrawDelay: U40::from(900u64),
        salt: B256::ZERO,
    }
}

fn terms() -> Terms {
    Terms {
        chain_id: 31337,
        contract: BATCH_SETTLEMENT_ADDRESS,
        token: TOKEN,
        receiver: RECEIVER,
        receiver_authorizer: AUTHORIZER,
        withdraw_delay_secs: 900,
    }
}

fn voucher() -> SignedVoucher {
    SignedVoucher {
        channel: CHANNEL,
        max_claimable: 1000,
        signature: VOUCHER_SIGNATURE,
    }
}

#[test]
fn digests_match_the_reference_package() {
    let (chain, at) = (31337, BATCH_SETTLEMENT_ADDRESS);
    assert_eq!(channel_id(&config(), chain, at), CHANNEL);
    assert_eq!(
        voucher_digest(CHANNEL, 1000, chain, at),
        b256!("0xd1231a660452d5a328ab92b5378f36609c5882c7eb8fb41513f7db1e6ff44f92")
    );
    let entry = ClaimEntry {
        channelId: CHANNEL,
        maxClaimableAmount: 1000,
        totalClaimed: 1000,
    };
    assert_eq!(
        claim_batch_digest(vec![entry], chain, at),
        b256!("0x525d04207c95d22ea2b71a30ebec0f5b9d28fd13c4e1e818433837ff99f6729b")
    );
    assert_eq!(
        refund_digest(CHANNEL, U256::ZERO, 500, chain, at),
        b256!("0x5fee39482c62b2d2fd3ae49442476b4132aaf21ace5e6f9a289afde723b5273f")
    );
    let salt = U256::from_be_bytes([0x11; 32]);
    assert_eq!(
        deposit_nonce(CHANNEL, salt),
        b256!("0x9e2c39f52de2e33ce1a981ccbff8ea294100a746ad7a5f1a272021e06c9922dd")
    );
    // Bound to the chain and to the contract's address.
    assert_ne!(channel_id(&config(), 8453, at), CHANNEL);
    assert_ne!(
        channel_id(&config(), chain, ERC3009_DEPOSIT_COLLECTOR_ADDRESS),
        CHANNEL
    );
}

#[test]
fn our_channel_with_the_payers_voucher_passes() {
    let t = terms();
    assert_eq!(t.channel(&config(), &voucher()), Ok(CHANNEL));
    assert_eq!(t.signer(&config(), &voucher()), Ok(Signer::Verified));
}

#[test]
fn every_term_of_the_channel_is_ours_or_refused() {
    let t = terms();
    let other = address!("0x1111111111111111111111111111111111111111");
    type Edit = fn(&mut ChannelConfig, Address);
    let cases: [(Edit, FailureReason); 4] = [
        (|c, a| c.receiver = a, FailureReason::BatchReceiverMismatch),
        (
            |c, a| c.receiverAuthorizer = a,
            FailureReason::BatchReceiverAuthorizerMismatch,
        ),
        (|c, a| c.token = a, FailureReason::BatchTokenMismatch),
        (|c, a| c.payer = a, FailureReason::BatchChannelIdMismatch),
    ];
    for (edit, reason) in cases {
        let mut c = config();
        edit(&mut c, other);
        // The voucher names the edited config's channel, so the id check passes and
        // the term itself is what is refused (the payer is no term of ours: the id is).
        let v = SignedVoucher {
            channel: if reason == FailureReason::BatchChannelIdMismatch {
                CHANNEL
            } else {
                channel_id(&c, 31337, BATCH_SETTLEMENT_ADDRESS)
            },
            ..voucher()
        };
        assert_eq!(t.channel(&c, &v).map_err(|f| f.reason), Err(reason));
    }
    for (delay, reason) in [
        (60u64, FailureReason::BatchWithdrawDelayOutOfRange),
        (31 * 24 * 3600, FailureReason::BatchWithdrawDelayOutOfRange),
        (3600, FailureReason::BatchWithdrawDelayMismatch),
    ] {
        let mut c = config();
        c.withdrawDelay = U40::from(delay);
        let v = SignedVoucher {
            channel: channel_id(&c, 31337, BATCH_SETTLEMENT_ADDRESS),
            ..voucher()
        };
        assert_eq!(t.channel(&c, &v).map_err(|f| f.reason), Err(reason));
    }
}

#[test]
fn a_voucher_not_signed_by_the_payer_authorizer_is_refused() {
    let t = terms();
    let refused = |v: SignedVoucher| t.signer(&config(), &v).map_err(|f| f.reason);
    let sig = FailureReason::BatchVoucherSignature;
    // Another amount than was signed.
    assert_eq!(
        refused(SignedVoucher {
            max_claimable: 1001,
            ..voucher()
        }),
        Err(sig.clone())
    );
    // The high-s twin of the payer's own signature: valid to ecrecover, refused on chain.
    let s = Signature::from_raw(&VOUCHER_SIGNATURE).expect("signature");
    let n = U256::from_str_radix(
        "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141",
        16,
    )
    .expect("n");
    let twin = Signature::new(s.r(), n - s.s(), !s.v());
    assert_eq!(
        refused(SignedVoucher {
            signature: Bytes::from(twin.as_bytes().to_vec()),
            ..voucher()
        }),
        Err(sig.clone())
    );
    // The same signature with v = 0/1: recovers to the payer, refused by the
    // contract's ECDSA at claim time, so refused here.
    let mut zero_one = VOUCHER_SIGNATURE.to_vec();
    zero_one[64] -= 27;
    assert_eq!(
        refused(SignedVoucher {
            signature: Bytes::from(zero_one),
            ..voucher()
        }),
        Err(sig.clone())
    );
    // Not a signature at all.
    assert_eq!(
        refused(SignedVoucher {
            signature: bytes!("0x00"),
            ..voucher()
        }),
        Err(sig)
    );
    // No payer authorizer: the chain decides (ERC-1271), with the digest to ask about.
    let mut c = config();
    c.payerAuthorizer = Address::ZERO;
    assert!(matches!(
        t.signer(&c, &voucher()),
        Ok(Signer::OnChain { payer: PAYER, .. })
    ));
}

use alloy::primitives::Signature;

fn wire_config() -> serde_json::Value {
    json!({
        "payer": PAYER.to_string().to_lowercase(),
        "payerAuthorizer": PAYER.to_string(),
        "receiver": RECEIVER.to_string(),
        "receiverAuthorizer": AUTHORIZER.to_string(),
        "token": TOKEN.to_string().to_lowercase(),
        "withdrawDelay": 900,
        "salt": B256::ZERO.to_string(),
    })
}

fn wire_voucher() -> serde_json::Value {
    json!({"channelId": CHANNEL.to_string(), "maxClaimableAmount": "1000", "signature": VOUCHER_SIGNATURE.to_string()})
}

#[test]
fn the_reference_clients_payloads_read() {
    let v = ChannelPayload::from_json(
        &json!({"type": "voucher", "channelConfig": wire_config(), "voucher": wire_voucher()}),
    )
    .expect("voucher");
    assert_eq!(v.config(), &config());
    assert_eq!(v.voucher(), &voucher());
    let d = ChannelPayload::from_json(&json!({
        "type": "deposit", "channelConfig": wire_config(), "voucher": wire_voucher(),
        "deposit": {"amount": "7000", "authorization": {"erc3009Authorization": {
            "validAfter": "0", "validBefore": "1770000000", "salt": format!("0x{}", "11".repeat(32)), "signature": "0x1234"}}}
    }))
    .expect("deposit");
    assert!(matches!(d, ChannelPayload::Deposit { amount: 7000, .. }));
    let r = ChannelPayload::from_json(
        &json!({"type": "refund", "channelConfig": wire_config(), "voucher": wire_voucher()}),
    )
    .expect("refund");
    assert!(matches!(r, ChannelPayload::Refund { amount: None, .. }));
}

#[test]
fn malformed_payloads_name_what_does_not_read() {
    let refused = |v: serde_json::Value| {
        ChannelPayload::from_json(&v)
            .map(|_| ())
            .map_err(|f| f.reason)
    };
    assert_eq!(
        refused(json!({"type": "claim"})),
        Err(FailureReason::BatchPayloadType)
    );
    assert_eq!(
        refused(json!({"channelConfig": wire_config()})),
        Err(FailureReason::BatchPayloadType)
    );
    let mut big = wire_voucher();
    big["maxClaimableAmount"] = json!("340282366920938463463374607431768211456"); // 2^128
    assert_eq!(
        refused(json!({"type": "voucher", "channelConfig": wire_config(), "voucher": big})),
        Err(FailureReason::BatchVoucherPayload)
    );
    let mut neg = wire_voucher();
    neg["maxClaimableAmount"] = json!("-1");
    assert_eq!(
        refused(json!({"type": "voucher", "channelConfig": wire_config(), "voucher": neg})),
        Err(FailureReason::BatchVoucherPayload)
    );
    let mut delay = wire_config();
    delay["withdrawDelay"] = json!(1u64 << 41);
    assert_eq!(
        refused(json!({"type": "voucher", "channelConfig": delay, "voucher": wire_voucher()})),
        Err(FailureReason::BatchVoucherPayload)
    );
    let mut long = wire_voucher();
    long["signature"] = json!(format!("0x{}", "ab".repeat(5000)));
    assert_eq!(
        refused(json!({"type": "voucher", "channelConfig": wire_config(), "voucher": long})),
        Err(FailureReason::BatchVoucherPayload)
    );
    assert_eq!(
        refused(
            json!({"type": "deposit", "channelConfig": wire_config(), "voucher": wire_voucher(),
            "deposit": {"amount": "1", "authorization": {"permit2Authorization": {}}}})
        ),
        Err(FailureReason::BatchErc3009Required)
    );
    assert_eq!(
        refused(
            json!({"type": "refund", "channelConfig": wire_config(), "voucher": wire_voucher(), "amount": "0"})
        ),
        Err(FailureReason::BatchRefundPayload)
    );
}
