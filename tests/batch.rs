//! x402's `batch-settlement` on the devnet: our contract (infra/devnet/x402BatchSettlement.sol,
//! written from the scheme's spec and the reference's public interface) sits at the
//! address `@x402/evm` names, speaks the ABI the reference package calls it with, and
//! holds what a seller relies on when driven by the reference client's own code; and
//! Umpire's Rust side computes the same channel ids and accepts the same vouchers.

use serde_json::{Value, json};
use umpire_blackbox::chain::{Devnet, node_json, node_json_verdict};
use umpire_x402::batch::check::{Signer, Terms};
use umpire_x402::batch::wire::ChannelPayload;
use umpire_x402::batch::{BATCH_SETTLEMENT_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ADDRESS};

fn text<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn our_contract_speaks_the_abi_the_reference_package_calls() {
    let (ok, v) = node_json_verdict("tests/js/batch_channel.mjs", &["abi"]);
    assert!(ok, "ABI differs from @x402/evm's: {v}");
    assert_eq!(v["entries"], 19, "the reference ABI as read: {v}");
    assert_eq!(v["missing"], json!([]));
    assert_eq!(v["differing"], json!([]));
}

#[test]
fn a_payer_who_withdraws_right_after_buying_takes_back_only_what_was_not_claimed() {
    let devnet = Devnet::start();
    assert_eq!(
        text(&devnet.info, "batch_settlement")
            .parse::<alloy::primitives::Address>()
            .ok(),
        Some(BATCH_SETTLEMENT_ADDRESS)
    );
    assert_eq!(
        text(&devnet.info, "erc3009_deposit_collector")
            .parse::<alloy::primitives::Address>()
            .ok(),
        Some(ERC3009_DEPOSIT_COLLECTOR_ADDRESS)
    );
    let price = 1_000_000u64;
    let v = node_json(
        "tests/js/batch_channel.mjs",
        &[
            "lifecycle",
            "--devnet",
            &devnet.devnet_json(),
            "--price",
            &price.to_string(),
            "--purchases",
            "5",
        ],
    );
    // One deposit for seven purchases; five bought.
    assert_eq!(v["deposited"], (7 * price).to_string(), "{v}");
    assert_eq!(v["balance"], (7 * price).to_string(), "{v}");
    // The payer asked for all seven back at once; the delay held, the receiver claimed
    // the five it was owed inside it, and the withdrawal paid out only the other two.
    assert_eq!(v["early_finalize"], "WithdrawDelayNotElapsed", "{v}");
    assert_eq!(v["total_claimed"], (5 * price).to_string(), "{v}");
    assert_eq!(v["pay_to_gained"], (5 * price).to_string(), "{v}");
    assert_eq!(v["payer_lost"], (5 * price).to_string(), "{v}");
    assert_eq!(v["balance_after"], (5 * price).to_string(), "{v}");
    // Claims the contract refuses, and one it ignores.
    assert_eq!(v["forged_voucher"], "InvalidSignature", "{v}");
    assert_eq!(v["over_balance"], "ClaimExceedsBalance", "{v}");
    assert_eq!(v["claim_logs"], 1, "one Claimed event: {v}");
    assert_eq!(v["replay_logs"], 0, "a replayed claim moves nothing: {v}");

    // Our Rust side: the same channel id the contract computes, the reference client's
    // voucher accepted, and refused once its amount is changed.
    let terms = Terms {
        chain_id: devnet.info["chain_id"].as_u64().expect("chain_id"),
        contract: BATCH_SETTLEMENT_ADDRESS,
        token: text(&devnet.info, "asset").parse().expect("asset"),
        receiver: text(&devnet.info, "pay_to").parse().expect("pay_to"),
        receiver_authorizer: text(&devnet.info, "receiver_authorizer")
            .parse()
            .expect("authorizer"),
        withdraw_delay_secs: 900,
    };
    let payload = json!({"type": "voucher", "channelConfig": v["channel_config"], "voucher": v["last_voucher"]});
    let read = ChannelPayload::from_json(&payload).expect("the reference client's voucher reads");
    let id = terms
        .channel(read.config(), read.voucher())
        .expect("one of our channels");
    assert_eq!(id.to_string(), text(&v, "channel_id_on_chain"));
    assert_eq!(
        terms.signer(read.config(), read.voucher()),
        Ok(Signer::Verified)
    );
    let mut altered = payload.clone();
    altered["voucher"]["maxClaimableAmount"] = json!((6 * price).to_string());
    let altered = ChannelPayload::from_json(&altered).expect("reads");
    assert!(terms.signer(altered.config(), altered.voucher()).is_err());
}
