//! x402's `batch-settlement` on the devnet: our contract (infra/devnet/x402BatchSettlement.sol,
//! written from the scheme's spec and the reference's public interface) sits at the
//! address `@x402/evm` names, speaks the ABI the reference package calls it with, and
//! holds what a seller relies on when driven by the reference client's own code; and
//! Umpire's Rust side computes the same channel ids and accepts the same vouchers.

use serde_json::{Value, json};
use umpire_blackbox::chain::{Devnet, node_json, node_json_verdict};
use umpire_x402::batch::check::{Signer, Terms};
use umpire_x402::batch::wire::ChannelPayload;
use umpire_x402::batch::{
    BATCH_SETTLEMENT_ADDRESS, ERC3009_DEPOSIT_COLLECTOR_ADDRESS, IBatchSettlement,
};

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
    let terms = terms_of(&devnet);
    let read = payload(&v["channel_config"], &v["last_voucher"]);
    let id = terms
        .channel(read.config(), read.voucher())
        .expect("one of our channels");
    assert_eq!(id.to_string(), text(&v, "channel_id_on_chain"));
    assert_eq!(
        terms.signer(read.config(), read.voucher()),
        Ok(Signer::Verified)
    );
    let mut voucher = v["last_voucher"].clone();
    voucher["maxClaimableAmount"] = json!((6 * price).to_string());
    let altered = payload(&v["channel_config"], &voucher);
    assert!(terms.signer(altered.config(), altered.voucher()).is_err());
}

/// The seller's side against the devnet, with what the reference client signs: one
/// deposit for ten purchases, vouchers checked locally against the channel as we keep
/// it (the chain read once), one request at a time per channel, the charge committed
/// only by the holder (its retry recognised), and every voucher that should not buy
/// refused: replayed (with the corrective state), signed by another key, over the
/// balance, for a channel paying someone else or authorized by someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn vouchers_buy_one_at_a_time_and_every_forgery_is_refused() {
    use umpire_api::checkout::channels::Take;
    use umpire_store::channels::ChannelCommit;
    use umpire_x402::reason::FailureReason;

    let devnet = tokio::task::spawn_blocking(Devnet::start)
        .await
        .expect("devnet");
    let price = 1_000_000u128;
    let v = vouchers(&devnet, 10).await;
    let (seller, store) = seller_on(&devnet).await;
    let now = umpire_host::Clock::system().now();
    let ours = |k: usize| payload(&v["channel_config"], &v["vouchers"][k]);
    let reason = |t: &Take| match t {
        Take::Refused(f) | Take::Corrective { failure: f, .. } | Take::Busy { failure: f, .. } => {
            Some(f.reason.clone())
        }
        Take::Held(_) => None,
    };

    // The first purchase: held, charged with the answer, its retry not charged again.
    let Take::Held(first) = seller.take(&ours(0), price, "p1", now + 30, now).await else {
        panic!("the first voucher buys")
    };
    assert_eq!(
        seller.commit(&first).await.expect("commit"),
        ChannelCommit::Committed
    );
    assert_eq!(
        seller.commit(&first).await.expect("retry"),
        ChannelCommit::Already
    );
    let answer = serde_json::to_value(seller.response(&first)).expect("json");
    assert_eq!(answer["transaction"], "");
    assert_eq!(answer["extra"]["chargedAmount"], price.to_string());
    assert_eq!(
        answer["extra"]["channelState"]["chargedCumulativeAmount"],
        price.to_string()
    );
    assert_eq!(
        answer["extra"]["channelState"]["balance"],
        text(&v, "deposited")
    );

    // Replayed: the channel has moved on; the corrective state says where it stands and
    // proves it with the payer's own last voucher.
    let replay = seller
        .take(&ours(0), price, "p1-again", now + 30, now)
        .await;
    assert_eq!(
        reason(&replay),
        Some(FailureReason::BatchCumulativeMismatch)
    );
    let Take::Corrective { extra, .. } = &replay else {
        panic!("{replay:?}")
    };
    assert_eq!(
        extra["channelState"]["chargedCumulativeAmount"],
        price.to_string()
    );
    assert_eq!(
        extra["voucherState"]["signature"],
        v["vouchers"][0]["signature"]
    );
    assert_eq!(
        extra["voucherState"]["signedMaxClaimable"],
        price.to_string()
    );

    // Twenty requests with the next voucher at once: one holds the channel, the others
    // are told it is busy and when to come back.
    let tasks: Vec<_> = (0..20)
        .map(|i| {
            let (s, p) = (seller.clone(), ours(1));
            tokio::spawn(async move { s.take(&p, price, &format!("p2-{i}"), now + 30, now).await })
        })
        .collect();
    let mut held = Vec::new();
    for t in tasks {
        match t.await.expect("join") {
            Take::Held(h) => held.push(h),
            Take::Busy {
                retry_after_secs,
                failure,
            } => {
                assert_eq!(failure.reason, FailureReason::BatchChannelBusy);
                assert!((1..=30).contains(&retry_after_secs), "{retry_after_secs}");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(held.len(), 1, "one holder");
    assert_eq!(
        seller.commit(&held[0]).await.expect("commit"),
        ChannelCommit::Committed
    );
    // A holder whose request failed charges nothing: the next voucher is still the third.
    let Take::Held(third) = seller.take(&ours(2), price, "p3", now + 30, now).await else {
        panic!("the third voucher buys")
    };
    seller.release(&third).await.expect("release");
    assert_eq!(
        store
            .get_channel(text(&v, "channel_id"))
            .await
            .expect("get")
            .expect("kept")
            .charge
            .charged,
        2 * price
    );

    // Forgeries and vouchers for channels that are not ours.
    let other_key = seller
        .take(
            &payload(&v["channel_config"], &v["other_key"]),
            price,
            "x1",
            now + 30,
            now,
        )
        .await;
    assert_eq!(
        reason(&other_key),
        Some(FailureReason::BatchVoucherSignature)
    );
    let other_receiver = &v["other_receiver"];
    let t = seller
        .take(
            &payload(&other_receiver["channelConfig"], &other_receiver["voucher"]),
            price,
            "x2",
            now + 30,
            now,
        )
        .await;
    assert_eq!(reason(&t), Some(FailureReason::BatchReceiverMismatch));
    let other_authorizer = &v["other_authorizer"];
    let t = seller
        .take(
            &payload(
                &other_authorizer["channelConfig"],
                &other_authorizer["voucher"],
            ),
            price,
            "x3",
            now + 30,
            now,
        )
        .await;
    assert_eq!(
        reason(&t),
        Some(FailureReason::BatchReceiverAuthorizerMismatch)
    );
    // A voucher for another channel's id with our config: refused before any state.
    let mut swapped = v["vouchers"][2].clone();
    swapped["channelId"] = other_receiver["voucher"]["channelId"].clone();
    let t = seller
        .take(
            &payload(&v["channel_config"], &swapped),
            price,
            "x4",
            now + 30,
            now,
        )
        .await;
    assert_eq!(reason(&t), Some(FailureReason::BatchChannelIdMismatch));

    // The rest of the deposit bought, then one past it.
    for k in 2..10 {
        let Take::Held(h) = seller
            .take(&ours(k), price, &format!("p{}", k + 1), now + 30, now)
            .await
        else {
            panic!("voucher {k} buys")
        };
        assert_eq!(
            seller.commit(&h).await.expect("commit"),
            ChannelCommit::Committed
        );
    }
    let over = seller
        .take(
            &payload(&v["channel_config"], &v["over_balance"]),
            price,
            "x5",
            now + 30,
            now,
        )
        .await;
    assert_eq!(
        reason(&over),
        Some(FailureReason::BatchCumulativeExceedsBalance)
    );
    let kept = store
        .get_channel(text(&v, "channel_id"))
        .await
        .expect("get")
        .expect("kept");
    assert_eq!(kept.charge.charged, 10 * price);
    assert_eq!(kept.unclaimed(), 10 * price, "what a claim will take");
    assert_eq!(kept.charge.signature, text(&v["vouchers"][9], "signature"));
}

/// A deposit of ten purchases and the reference client's vouchers for the first
/// `count` (tests/js/batch_channel.mjs vouchers).
async fn vouchers(devnet: &Devnet, count: u32) -> Value {
    let dn = devnet.devnet_json();
    tokio::task::spawn_blocking(move || {
        let count = count.to_string();
        node_json(
            "tests/js/batch_channel.mjs",
            &[
                "vouchers", "--devnet", &dn, "--price", "1000000", "--units", "10", "--count",
                &count,
            ],
        )
    })
    .await
    .expect("vouchers")
}

/// A seller of the devnet's channels to its pay-to, on an embedded store.
async fn seller_on(
    devnet: &Devnet,
) -> (
    std::sync::Arc<umpire_api::checkout::channels::ChannelSeller>,
    std::sync::Arc<dyn umpire_store::channels::ChannelStore>,
) {
    use std::sync::Arc;
    use umpire_api::checkout::channels::{ChannelSeller, ContractReader};
    let chain_id = devnet.info["chain_id"].as_u64().expect("chain_id");
    let chain = umpire_pay::evm::EvmChain::connect(
        text(&devnet.info, "rpc_url"),
        chain_id,
        None,
        std::time::Duration::from_secs(10),
        std::time::Duration::ZERO,
    )
    .await
    .expect("rpc");
    let store: Arc<dyn umpire_store::channels::ChannelStore> =
        Arc::new(umpire_store::sqlite::SqliteStore::in_memory().expect("store"));
    let seller = Arc::new(ChannelSeller {
        terms: terms_of(devnet),
        network: text(&devnet.info, "network").to_owned(),
        store: store.clone(),
        chain: Arc::new(ContractReader {
            chain,
            contract: BATCH_SETTLEMENT_ADDRESS,
        }),
        fresh_secs: 60,
    });
    (seller, store)
}

/// A payer who starts a timed withdrawal gets nothing more on the channel: the next
/// voucher, once the chain is read again (at most a minute later), is refused, so
/// everything sold is sold before the withdrawal and can be claimed inside its delay.
/// And a hold that would be born lapsed, or last past a request, is not taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_started_stops_the_sales_on_its_channel() {
    use alloy::sol_types::SolCall;
    use umpire_api::checkout::channels::{MAX_HOLD_SECS, Take};
    use umpire_x402::reason::{FailureKind, FailureReason};

    let devnet = tokio::task::spawn_blocking(Devnet::start)
        .await
        .expect("devnet");
    let price = 1_000_000u128;
    let v = vouchers(&devnet, 3).await;
    let (seller, _) = seller_on(&devnet).await;
    let now = umpire_host::Clock::system().now();
    let ours = |k: usize| payload(&v["channel_config"], &v["vouchers"][k]);
    for until in [now, now + MAX_HOLD_SECS + 1] {
        let t = seller.take(&ours(0), price, "bad-hold", until, now).await;
        assert!(
            matches!(&t, Take::Refused(f) if f.kind == FailureKind::Config),
            "{t:?}"
        );
    }
    let Take::Held(first) = seller.take(&ours(0), price, "p1", now + 30, now).await else {
        panic!("the first voucher buys")
    };
    seller.commit(&first).await.expect("commit");
    // The payer (an unlocked devnet account) starts withdrawing what is left.
    let call = IBatchSettlement::initiateWithdrawCall {
        config: ours(0).config().clone(),
        amount: 9 * price,
    };
    let data = format!("0x{}", hex::encode(call.abi_encode()));
    let tx = devnet.rpc(
        "eth_sendTransaction",
        json!([{"from": text(&devnet.info, "payer"), "to": BATCH_SETTLEMENT_ADDRESS.to_string(), "data": data}]),
    );
    let mut receipt = Value::Null;
    for _ in 0..100 {
        receipt = devnet.rpc("eth_getTransactionReceipt", json!([tx]));
        if !receipt.is_null() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(receipt["status"], "0x1", "initiateWithdraw {tx}: {receipt}");
    // Within the freshness bound the record is believed; past it the chain is read
    // again and the withdrawal seen.
    let later = now + 61;
    let t = seller.take(&ours(1), price, "p2", later + 30, later).await;
    assert!(
        matches!(&t, Take::Refused(f) if f.reason == FailureReason::BatchWithdrawalPending),
        "{t:?}"
    );
}

/// A voucher payload as the reference client sends it.
fn payload(config: &Value, voucher: &Value) -> ChannelPayload {
    ChannelPayload::from_json(
        &json!({"type": "voucher", "channelConfig": config, "voucher": voucher}),
    )
    .expect("the reference client's voucher reads")
}

/// Our terms for the devnet's channels: its chain, the contract at the reference
/// address, its token, pay-to and receiver authorizer, a 15-minute delay.
fn terms_of(devnet: &Devnet) -> Terms {
    Terms {
        chain_id: devnet.info["chain_id"].as_u64().expect("chain_id"),
        contract: BATCH_SETTLEMENT_ADDRESS,
        token: text(&devnet.info, "asset").parse().expect("asset"),
        receiver: text(&devnet.info, "pay_to").parse().expect("pay_to"),
        receiver_authorizer: text(&devnet.info, "receiver_authorizer")
            .parse()
            .expect("authorizer"),
        withdraw_delay_secs: 900,
    }
}
