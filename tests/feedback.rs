//! `POST /v1/feedback` on `umpire serve` against anvil, with the devnet token standing in
//! for USDC: real transfers, signatures made by the contract's Node recipe (viem) and by
//! alloy, a contract-wallet payer checked through ERC-1271, and every refusal.

use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use serde_json::json;
use umpire_blackbox::chain::{Devnet, Settlement, buy_get_v2, node_json};
use umpire_blackbox::{HOUR_WINDOW_MS, Reply, Server, TempDir, python_recipe_signature_only};
use umpire_core::json::Value;

const ONE_USDC: u128 = 1_000_000;

fn server(devnet: &Devnet, extra: &[(&str, &str)]) -> Server {
    let env = devnet.feedback_env();
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    all.extend_from_slice(extra);
    Server::start_with(&all)
}

/// The feedback fields, signed by `key` with the contract's Node recipe (viem).
fn signed_with_viem(key: &str, payer: &str, tx: &str, merchant: &str, outcome: &str) -> String {
    let s = node_json(
        "tests/js/sign_feedback.mjs",
        &[
            "--private-key",
            key,
            "--tx",
            tx,
            "--merchant",
            merchant,
            "--outcome",
            outcome,
        ],
    );
    json!({
        "merchant": merchant, "payer": payer, "tx_hash": tx, "outcome": outcome,
        "signature": s["signature"],
    })
    .to_string()
}

/// The same with alloy, with both optional fields.
fn signed_with_alloy(
    key: &PrivateKeySigner,
    payer: &str,
    tx: &str,
    merchant: &str,
    would_repeat: bool,
    latency_ms: u64,
) -> String {
    let message = format!(
        "umpire-feedback-v1\ntx:{}\nmerchant:{}\noutcome:partial\nwould_repeat:{would_repeat}\nlatency_ms:{latency_ms}",
        tx.to_lowercase(),
        merchant.to_lowercase()
    );
    let signature = key.sign_message_sync(message.as_bytes()).expect("sign");
    json!({
        "merchant": merchant, "payer": payer, "tx_hash": tx, "outcome": "partial",
        "would_repeat": would_repeat, "latency_ms": latency_ms,
        "signature": format!("0x{}", hex::encode(signature.as_bytes())),
    })
    .to_string()
}

fn expect(r: &Reply, status: u16, code: &str) {
    assert_eq!(
        (r.status, r.error_code().as_str()),
        (status, code),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

fn key_of(devnet: &Devnet, field: &str) -> PrivateKeySigner {
    devnet.get(field).parse().expect("private key")
}

#[test]
fn paid_and_signed_feedback_is_accepted_once() {
    let devnet = Devnet::start();
    let accounts = devnet.accounts();
    let payer = devnet.get("payer");
    let merchant = accounts[5].clone();
    let s = server(&devnet, &[]);

    // Signed with viem, as the recipe says.
    let tx1 = devnet.transfer(&payer, &merchant, ONE_USDC);
    let body = signed_with_viem(
        &devnet.get("payer_private_key"),
        &payer,
        &tx1,
        &merchant,
        "fulfilled",
    );
    let r = s.feedback(&body);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let row = r.json();
    let fb = row.get("feedback").expect("feedback");
    assert_eq!(
        fb.get("tx_hash").and_then(Value::as_str),
        Some(tx1.as_str())
    );
    assert_eq!(
        fb.get("merchant").and_then(Value::as_str),
        Some(merchant.to_lowercase().as_str())
    );
    assert_eq!(fb.get("amount_usdc").and_then(Value::as_str), Some("1"));
    assert_eq!(fb.get("would_repeat"), Some(&Value::Null));
    assert_eq!(
        row.get("signature_checked_by").and_then(Value::as_str),
        Some("ecrecover")
    );

    // One feedback per transaction.
    expect(&s.feedback(&body), 409, "duplicate_feedback");

    // Signed with alloy, both options given; two transfers in one transaction would
    // add up, here one of 0.25.
    let tx2 = devnet.transfer(&payer, &merchant, 250_000);
    let body = signed_with_alloy(
        &key_of(&devnet, "payer_private_key"),
        &payer,
        &tx2,
        &merchant,
        true,
        1200,
    );
    let r = s.feedback(&body);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let fb = r.json().get("feedback").cloned().expect("feedback");
    assert_eq!(fb.get("amount_usdc").and_then(Value::as_str), Some("0.25"));
    assert_eq!(fb.get("would_repeat"), Some(&Value::Bool(true)));
    assert_eq!(fb.get("latency_ms").and_then(Value::as_u64), Some(1200));
    assert_eq!(fb.get("outcome").and_then(Value::as_str), Some("partial"));

    // An EIP-7702 account (code = 0xef0100 ++ delegate) whose delegate has no
    // isValidSignature: its own key's signature still counts.
    let tx3 = devnet.transfer(&payer, &merchant, ONE_USDC);
    let delegation = format!("0xef0100{}", devnet.get("asset").trim_start_matches("0x"));
    devnet.rpc("anvil_setCode", json!([payer, delegation]));
    let r = s.post_json(
        "/v1/feedback",
        &signed_with_viem(
            &devnet.get("payer_private_key"),
            &payer,
            &tx3,
            &merchant,
            "fulfilled",
        ),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json().get("signature_checked_by").and_then(Value::as_str),
        Some("ecrecover (eip-7702 account)")
    );
}

/// Feedback waits for its payment's confirmations, 5 by default (the server here is
/// started without the variable): a transfer in the latest block is refused, saying how
/// many it has and to retry, still at 4, and the same body is accepted at 5. Would
/// catch: the confirmation rule skipped (every other test runs at 1, where it cannot
/// fail), or its default changed.
#[test]
fn feedback_waits_for_its_payments_confirmations() {
    let devnet = Devnet::start();
    let payer = devnet.get("payer");
    let merchant = devnet.accounts()[6].clone();
    let env: Vec<(String, String)> = devnet
        .feedback_env()
        .into_iter()
        .filter(|(k, _)| k != "UMPIRE_FEEDBACK_CONFIRMATIONS")
        .collect();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let s = Server::start_with(&env);
    let tx = devnet.transfer(&payer, &merchant, ONE_USDC);
    let body = signed_with_viem(
        &devnet.get("payer_private_key"),
        &payer,
        &tx,
        &merchant,
        "fulfilled",
    );
    let early = s.feedback(&body);
    expect(&early, 422, "payment_not_found");
    let message = early.error_message();
    assert!(message.contains("1 of the 5 confirmations"), "{message}");
    for _ in 0..3 {
        devnet.mine();
    }
    let four = s.feedback(&body);
    expect(&four, 422, "payment_not_found");
    assert!(
        four.error_message().contains("4 of the 5 confirmations"),
        "{}",
        four.error_message()
    );
    devnet.mine();
    let r = s.feedback(&body);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
}

#[test]
fn every_refusal_has_its_code() {
    let devnet = Devnet::start();
    let accounts = devnet.accounts();
    let payer = devnet.get("payer");
    let payer_key = devnet.get("payer_private_key");
    let merchant = accounts[5].clone();
    let other_merchant = accounts[6].clone();
    let other_payer = accounts[7].clone();
    let s = server(&devnet, &[]);
    let post = |body: &str| s.feedback(body);

    let paid = devnet.transfer(&payer, &merchant, ONE_USDC);
    // Wrong signer: a key that is not the payer's.
    let stranger = PrivateKeySigner::random();
    expect(
        &post(&signed_with_alloy(
            &stranger, &payer, &paid, &merchant, true, 5,
        )),
        401,
        "bad_signature",
    );
    // A signature over another outcome than the one submitted.
    let mut v: serde_json::Value = serde_json::from_str(&signed_with_viem(
        &payer_key, &payer, &paid, &merchant, "failed",
    ))
    .expect("json");
    v["outcome"] = json!("fulfilled");
    expect(&post(&v.to_string()), 401, "bad_signature");
    // A malformed body names every problem: each field once, where it is, in one answer.
    // Would catch: a parse that stops at the first problem, or one field left unchecked.
    let r = post(
        r#"{"merchant":"0x12","payer":"x","tx_hash":"0x1","outcome":"great","signature":"0x","note":"hi"}"#,
    );
    expect(&r, 422, "invalid_request");
    let error = r.json().get("error").cloned().expect("error");
    let field = |p: &Value, k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
    let mut named: Vec<(String, String)> = error
        .get("problems")
        .and_then(Value::as_array)
        .expect("problems")
        .iter()
        .filter_map(|p| field(p, "where").zip(field(p, "code")))
        .collect();
    named.sort();
    let expected = [
        ("merchant", "invalid_value"),
        ("note", "unknown_field"),
        ("outcome", "invalid_value"),
        ("payer", "invalid_value"),
        ("signature", "invalid_value"),
        ("tx_hash", "invalid_value"),
    ]
    .map(|(w, c)| (w.to_owned(), c.to_owned()));
    assert_eq!(named, expected, "{error:?}");
    assert_eq!(r.error_message(), "the feedback has 6 problems");
    // Self feedback.
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &paid,
            &payer,
            "fulfilled",
        )),
        422,
        "self_feedback",
    );

    // A transaction without a qualifying transfer: plain ETH.
    let eth = devnet.send(json!({"from": payer, "to": merchant, "value": "0x1"}));
    let eth = eth["transactionHash"].as_str().expect("hash").to_owned();
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &eth,
            &merchant,
            "fulfilled",
        )),
        422,
        "payment_not_found",
    );
    // A hash that is not on this chain at all.
    let nowhere = format!("0x{}", "ab".repeat(32));
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &nowhere,
            &merchant,
            "fulfilled",
        )),
        422,
        "payment_not_found",
    );
    // The payer paid another merchant.
    let elsewhere = devnet.transfer(&payer, &other_merchant, ONE_USDC);
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &elsewhere,
            &merchant,
            "fulfilled",
        )),
        422,
        "payment_not_found",
    );
    // Below the 0.01 floor.
    let dust = devnet.transfer(&payer, &merchant, 9_999);
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &dust,
            &merchant,
            "fulfilled",
        )),
        422,
        "amount_too_small",
    );
    // Someone else paid the merchant; the claimed payer signs.
    devnet.transfer(&payer, &other_payer, 2 * ONE_USDC);
    let theirs = devnet.transfer(&other_payer, &merchant, ONE_USDC);
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &theirs,
            &merchant,
            "fulfilled",
        )),
        422,
        "payer_mismatch",
    );
    // A reverted transfer (more than the payer holds), mined with a fixed gas limit.
    let reverted = devnet.try_transfer(&payer, &merchant, 10_000 * ONE_USDC, Some(100_000));
    assert_eq!(reverted["status"], "0x0", "{reverted}");
    let reverted = reverted["transactionHash"].as_str().expect("hash");
    let r = post(&signed_with_viem(
        &payer_key, &payer, reverted, &merchant, "failed",
    ));
    expect(&r, 422, "payment_not_found");
    assert!(
        String::from_utf8_lossy(&r.body).contains("reverted"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );

    // Too old: 91 days later on the chain's clock.
    devnet.rpc("evm_increaseTime", json!([91 * 86_400]));
    devnet.rpc("evm_mine", json!([]));
    expect(
        &post(&signed_with_viem(
            &payer_key,
            &payer,
            &paid,
            &merchant,
            "fulfilled",
        )),
        422,
        "receipt_too_old",
    );

    // Chain reading off, and an RPC that does not answer.
    let off = Server::start_with(&[]);
    expect(
        &off.post_json(
            "/v1/feedback",
            &signed_with_viem(&payer_key, &payer, &paid, &merchant, "fulfilled"),
        ),
        503,
        "receipts_off",
    );
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dead_rpc = format!("http://127.0.0.1:{dead_port}");
    let down = server(&devnet, &[("UMPIRE_FEEDBACK_RPC_URL", &dead_rpc)]);
    expect(
        &down.post_json(
            "/v1/feedback",
            &signed_with_viem(&payer_key, &payer, &paid, &merchant, "fulfilled"),
        ),
        502,
        "chain_unavailable",
    );
}

#[test]
fn a_contract_wallet_payer_signs_through_its_owner() {
    let devnet = Devnet::start();
    let merchant = devnet.accounts()[5].clone();
    let paid = node_json(
        "tests/js/wallet.mjs",
        &[
            "--devnet",
            &devnet.devnet_json(),
            "--merchant",
            &merchant,
            "--amount",
            "500000",
        ],
    );
    let wallet = paid["wallet"].as_str().expect("wallet").to_owned();
    let tx = paid["tx"].as_str().expect("tx").to_owned();
    let owner_key = paid["owner_private_key"].as_str().expect("owner key");
    let s = server(&devnet, &[]);

    // Someone other than the owner signs for the wallet: refused by isValidSignature.
    let stranger = PrivateKeySigner::random();
    expect(
        &s.post_json(
            "/v1/feedback",
            &signed_with_alloy(&stranger, &wallet, &tx, &merchant, false, 10),
        ),
        401,
        "bad_signature",
    );
    // The owner signs (viem, the recipe): accepted through ERC-1271.
    let r = s.post_json(
        "/v1/feedback",
        &signed_with_viem(owner_key, &wallet, &tx, &merchant, "fulfilled"),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(
        v.get("signature_checked_by").and_then(Value::as_str),
        Some("erc1271")
    );
    assert_eq!(
        v.get("feedback")
            .and_then(|f| f.get("payer"))
            .and_then(Value::as_str),
        Some(wallet.to_lowercase().as_str())
    );
}

/// Funds sent to the merchant and back in one transaction attest only their net: a
/// merchant cycling the same money (or a flash loan) buys no volume. A full round trip
/// is under the floor; a partial one attests what stayed.
#[test]
fn a_round_trip_in_one_transaction_attests_only_its_net() {
    let devnet = Devnet::start();
    let merchant = devnet.accounts()[5].clone();
    let s = server(&devnet, &[]);
    let dn = devnet.devnet_json();
    let round_trip_to = |amount: &str, back: &str, owner_index: &str, to: Option<&str>| {
        let mut args = vec![
            "--devnet",
            &dn,
            "--merchant",
            &merchant,
            "--amount",
            amount,
            "--back",
            back,
            "--merchant-index",
            "5",
            "--owner-index",
            owner_index,
        ];
        if let Some(to) = to {
            args.extend(["--back-to", to]);
        }
        node_json("tests/js/wallet.mjs", &args)
    };
    let round_trip = |amount: &str, back: &str, owner_index: &str| {
        round_trip_to(amount, back, owner_index, None)
    };
    let feedback = |paid: &serde_json::Value| {
        let wallet = paid["wallet"].as_str().expect("wallet");
        let tx = paid["tx"].as_str().expect("tx");
        let owner_key = paid["owner_private_key"].as_str().expect("owner key");
        s.post_json(
            "/v1/feedback",
            &signed_with_viem(owner_key, wallet, tx, &merchant, "fulfilled"),
        )
    };

    // 5 USDC in, 5 back: nothing moved.
    let full = round_trip("5000000", "5000000", "8");
    let r = feedback(&full);
    expect(&r, 422, "amount_too_small");
    assert!(
        String::from_utf8_lossy(&r.body).contains("out again in the same transaction"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // 4 USDC in, 4 sent on to someone else in the same transaction (a flash loan
    // repaid): what the merchant kept is nothing.
    let elsewhere = devnet.accounts()[7].clone();
    let on = round_trip_to("4000000", "4000000", "7", Some(&elsewhere));
    expect(&feedback(&on), 422, "amount_too_small");
    // 3 USDC in, 2 back: 1 USDC attested.
    let partial = round_trip("3000000", "2000000", "9");
    let r = feedback(&partial);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json()
            .get("feedback")
            .and_then(|f| f.get("amount_usdc"))
            .and_then(Value::as_str),
        Some("1")
    );
}

#[test]
fn the_report_is_bought_with_x402_and_verifies_offline() {
    let devnet = Devnet::start();
    let accounts = devnet.accounts();
    let payer = devnet.get("payer");
    let merchant = accounts[5].clone();
    let quiet_merchant = accounts[6].clone();
    let env = devnet.feedback_env();
    let extra: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let s = devnet.serve(Settlement::SelfSettle, &extra);

    // Two feedbacks from the payer: 1 USDC fulfilled (viem), 0.25 partial (alloy).
    let tx1 = devnet.transfer(&payer, &merchant, ONE_USDC);
    let r = s.post_json(
        "/v1/feedback",
        &signed_with_viem(
            &devnet.get("payer_private_key"),
            &payer,
            &tx1,
            &merchant,
            "fulfilled",
        ),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let tx2 = devnet.transfer(&payer, &merchant, 250_000);
    let r = s.post_json(
        "/v1/feedback",
        &signed_with_alloy(
            &key_of(&devnet, "payer_private_key"),
            &payer,
            &tx2,
            &merchant,
            true,
            800,
        ),
    );
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));

    // Unpaid: 402 at $0.01. A bad merchant is refused before any price is asked.
    let path = format!("/v1/reputation?merchant={merchant}");
    let unpaid = s.get(&path);
    assert_eq!(unpaid.status, 402);
    let required = unpaid.json();
    let amount = required
        .get("requirements")
        .and_then(|r| r.get("accepts"))
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(|a| a.get("amount"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    assert_eq!(amount.as_deref(), Some("10000"), "{required:?}");
    expect(
        &s.get("/v1/reputation?merchant=0x1234"),
        422,
        "invalid_request",
    );
    expect(&s.get("/v1/reputation"), 422, "invalid_request");

    // Bought with the reference client: the report, the receipt, $0.01 moved.
    let before = devnet.balance(&payer);
    let bought = buy_get_v2(&devnet, &format!("http://{}{path}", s.addr));
    assert_eq!(bought.status, 200, "{}", bought.body);
    assert_eq!(devnet.balance(&payer), before - 10_000);
    assert!(bought.header("payment-response").is_some());
    let answer = bought.json();
    let report = answer.get("report").cloned().expect("report");
    let text = |k: &str| report.get(k).and_then(Value::as_str).map(str::to_owned);
    assert_eq!(text("document").as_deref(), Some("umpire.reputation.v1"));
    assert_eq!(text("merchant"), Some(merchant.to_lowercase()));
    assert_eq!(
        report.get("feedback_count").and_then(Value::as_u64),
        Some(2)
    );
    assert_eq!(report.get("unique_payers").and_then(Value::as_u64), Some(1));
    assert_eq!(text("usdc_volume_attested").as_deref(), Some("1.25"));
    assert_eq!(text("min_feedback_usdc").as_deref(), Some("0.01"));
    assert_eq!(
        report.get("chain_id").and_then(Value::as_u64),
        devnet.get("chain_id").parse().ok()
    );
    assert_eq!(
        answer
            .get("receipt")
            .and_then(|r| r.get("payer"))
            .and_then(Value::as_str)
            .map(str::to_lowercase),
        Some(payer.to_lowercase())
    );
    let tmp = TempDir::new("report");
    let keys = tmp.write("keys.json", &s.get("/.well-known/umpire-key.json").body);
    let doc = tmp.write("report.json", &report.to_canonical_vec());
    let (ok, said) = python_recipe_signature_only(&doc, &keys);
    assert!(ok, "{said}");

    // A merchant nobody reviewed: a valid signed report of zeros.
    let empty = buy_get_v2(
        &devnet,
        &format!("http://{}/v1/reputation?merchant={quiet_merchant}", s.addr),
    );
    assert_eq!(empty.status, 200, "{}", empty.body);
    let report = empty.json().get("report").cloned().expect("report");
    assert_eq!(
        report.get("feedback_count").and_then(Value::as_u64),
        Some(0)
    );
    let doc = tmp.write("empty.json", &report.to_canonical_vec());
    let (ok, said) = python_recipe_signature_only(&doc, &keys);
    assert!(ok, "{said}");
}

/// docs/reputation.md: the anchors default to this deployment's EVM `pay_to`,
/// `UMPIRE_REPUTATION_ANCHORS` names others, the report lists them, and a row records
/// whether its merchant was an anchor when it was written. A payer reviews the
/// deployment's own `pay_to` and a merchant: the report lists the `pay_to` and counts
/// the payer anchored. The server comes back on the same data with another list (a
/// well-known merchant): its report lists that one, the first payer is still anchored
/// by its row written under the old list, a newcomer's row for the former anchor
/// anchors nothing, and a row for the named merchant does. Would catch: the default
/// lost, a named list not reaching the rows or the report, or a row's flag read from
/// today's list.
#[test]
fn a_rows_anchor_flag_is_fixed_when_written() {
    let devnet = Devnet::start();
    let accounts = devnet.accounts();
    let payer = devnet.get("payer");
    let payer_key = devnet.get("payer_private_key");
    let pay_to = devnet.get("pay_to");
    let merchant = accounts[5].clone();
    let well_known = accounts[8].clone();
    let env = devnet.feedback_env();
    let feedback_env: Vec<(&str, &str)> =
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let review = |s: &Server, key: &str, from: &str, to: &str| {
        let tx = devnet.transfer(from, to, ONE_USDC);
        let r = s.post_json(
            "/v1/feedback",
            &signed_with_viem(key, from, &tx, to, "fulfilled"),
        );
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    };
    let independence = |s: &Server| -> Value {
        let bought = buy_get_v2(
            &devnet,
            &format!("http://{}/v1/reputation?merchant={merchant}", s.addr),
        );
        assert_eq!(bought.status, 200, "{}", bought.body);
        bought
            .json()
            .get("report")
            .and_then(|r| r.get("independence"))
            .cloned()
            .expect("independence")
    };
    let anchors = |v: &Value| -> Vec<String> {
        v.get("anchors")
            .and_then(Value::as_array)
            .expect("anchors")
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    };
    let count = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);

    // No UMPIRE_REPUTATION_ANCHORS: the deployment's own pay_to is the anchor.
    let s = devnet.serve(Settlement::SelfSettle, &feedback_env);
    review(&s, &payer_key, &payer, &pay_to);
    review(&s, &payer_key, &payer, &merchant);
    let before = independence(&s);
    assert_eq!(anchors(&before), vec![pay_to.to_lowercase()], "{before:?}");
    assert_eq!(count(&before, "anchored_payers"), Some(1), "{before:?}");

    // Another list, on the same data: a well-known merchant, and no longer the pay_to.
    let data = s.crash();
    let mut named = feedback_env.clone();
    named.push(("UMPIRE_REPUTATION_ANCHORS", well_known.as_str()));
    let s = devnet.serve_in(data, Settlement::SelfSettle, &named);
    let newcomer = devnet.get("escrow_provider");
    let newcomer_key = devnet.get("escrow_provider_private_key");
    let customer = devnet.get("escrow_client");
    let customer_key = devnet.get("escrow_client_private_key");
    for wallet in [&newcomer, &customer] {
        devnet.transfer(&payer, wallet, 2 * ONE_USDC);
    }
    review(&s, &newcomer_key, &newcomer, &pay_to);
    review(&s, &newcomer_key, &newcomer, &merchant);
    review(&s, &customer_key, &customer, &well_known);
    review(&s, &customer_key, &customer, &merchant);
    let after = independence(&s);
    assert_eq!(
        anchors(&after),
        vec![well_known.to_lowercase()],
        "{after:?}"
    );
    // The payer (its pay_to row, flagged when written) and the customer (the named
    // anchor); not the newcomer, whose pay_to row came after the list changed.
    assert_eq!(count(&after, "anchored_payers"), Some(2), "{after:?}");
    assert_eq!(count(&after, "anchored_rows"), Some(2), "{after:?}");
    assert_eq!(
        after.get("anchored_payer_share").and_then(Value::as_f64),
        Some(0.6667),
        "{after:?}"
    );
}

#[test]
fn feedback_is_rate_limited_per_ip() {
    let s = Server::start_with(&[
        ("UMPIRE_RATE_LIMITS", "on"),
        ("UMPIRE_RATE_LIMIT_WINDOW_MS", HOUR_WINDOW_MS),
        ("UMPIRE_RATE_LIMIT_FEEDBACK", "1"),
    ]);
    let body = r#"{"merchant":"0x1111111111111111111111111111111111111111"}"#;
    expect(&s.feedback(body), 422, "invalid_request");
    let limited = s.feedback(body);
    expect(&limited, 429, "rate_limited");
    assert!(limited.header("retry-after").is_some());
}
