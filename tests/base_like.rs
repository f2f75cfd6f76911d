//! Money on a chain that behaves like Base: anvil making a block every two seconds (or
//! only when the test says), a public window in which anyone holding a signed
//! authorization may execute it and its payer may cancel it, and an RPC whose answers
//! can be lost while the call goes through ([`RpcProxy`]). Every test ends by holding
//! the server's purchase ledger equal to what the chain shows: no payment kept without
//! its purchase, no purchase recorded without its payment.

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, U256};
use alloy::signers::SignerSync;
use alloy::signers::local::PrivateKeySigner;
use alloy::sol;
use alloy::sol_types::{Eip712Domain, SolCall, SolStruct};
use base64::Engine;
use serde_json::json;
use umpire_blackbox::chain::{
    Devnet, Fault, Mining, RpcProxy, Settlement, buy_v2, sign_payment, sign_payments,
};
use umpire_blackbox::{PRICE_BASIC, Reply, Server, decode_b64_json};
use umpire_core::json::Value;
use umpire_x402::evm::TransferWithAuthorization;

const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"}}"###;

sol! {
    struct CancelAuthorization {
        address authorizer;
        bytes32 nonce;
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s);
}

/// anvil behind a proxy, `umpire serve` selling through the proxy on two-second blocks.
struct Base {
    devnet: Devnet,
    proxy: RpcProxy,
    server: Arc<Server>,
    payer: String,
    payer0: u128,
}

impl Base {
    fn open(mining: Mining, extra: &[(&str, &str)]) -> Base {
        let devnet = Devnet::start();
        devnet.set_mining(mining);
        let proxy = RpcProxy::start(&devnet);
        let mut env = vec![
            ("UMPIRE_EVM_RPC_URL", proxy.url.as_str()),
            ("UMPIRE_EVM_BLOCK_TIME_MS", "2000"),
        ];
        env.extend_from_slice(extra);
        let server = Arc::new(devnet.serve(Settlement::SelfSettle, &env));
        let payer = devnet.get("payer");
        let payer0 = devnet.balance(&payer);
        Base {
            devnet,
            proxy,
            server,
            payer,
            payer0,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/v1/verdicts/basic", self.server.addr)
    }

    fn sign(&self) -> String {
        sign_payment(&self.devnet, &self.url(), BODY)
    }

    fn buy(&self, payment: &str, key: &str) -> Reply {
        self.server.buy("basic", BODY, payment, key)
    }

    fn buy_in_background(&self, payment: &str, key: &str) -> std::thread::JoinHandle<Reply> {
        let (server, payment, key) = (self.server.clone(), payment.to_owned(), key.to_owned());
        std::thread::spawn(move || server.buy("basic", BODY, &payment, &key))
    }

    fn charged(&self) -> u128 {
        self.payer0 - self.devnet.balance(&self.payer)
    }

    /// Waits until the server has sent `n` settlements in all.
    /// Waits until `n` broadcasts have reached the chain (not merely the proxy: a block
    /// mined between the two would not hold the transaction).
    fn await_broadcasts(&self, n: usize) {
        let started = Instant::now();
        while self.proxy.reached_chain("eth_sendRawTransaction") < n {
            assert!(started.elapsed() < Duration::from_secs(30), "no broadcast");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn domain(&self) -> Eip712Domain {
        Eip712Domain::new(
            Some(self.devnet.get("asset_name").into()),
            Some(self.devnet.get("asset_version").into()),
            Some(U256::from(
                self.devnet
                    .get("chain_id")
                    .parse::<u64>()
                    .expect("chain id"),
            )),
            Some(self.devnet.get("asset").parse().expect("token")),
            None,
        )
    }

    /// The payer cancels the authorization in `payment` (`cancelAuthorization`, signed
    /// by the payer, sent by `sender`); the transaction's hash.
    fn cancel(&self, payment: &str, sender: &str) -> String {
        let a = authorization(payment);
        let payer: PrivateKeySigner = self
            .devnet
            .get("payer_private_key")
            .parse()
            .expect("payer key");
        let nonce: B256 = a["nonce"].as_str().expect("nonce").parse().expect("nonce");
        let message = CancelAuthorization {
            authorizer: payer.address(),
            nonce,
        };
        let sig = payer
            .sign_hash_sync(&message.eip712_signing_hash(&self.domain()))
            .expect("sign");
        let data = cancelAuthorizationCall {
            authorizer: payer.address(),
            nonce,
            v: 27 + u8::from(sig.v()),
            r: sig.r().into(),
            s: sig.s().into(),
        }
        .abi_encode();
        self.devnet
            .rpc(
                "eth_sendTransaction",
                json!([{"from": sender, "to": self.devnet.get("asset"),
                        "data": format!("0x{}", hex::encode(data)), "gas": "0x30000"}]),
            )
            .as_str()
            .expect("hash")
            .to_owned()
    }

    /// The same authorization as `payment`'s, its signature made by `signer` instead of
    /// its payer: a header that names the payer but is not the payer's.
    fn forged(&self, payment: &str, signer: &PrivateKeySigner) -> String {
        let mut v = decode(payment);
        let a = &v["payload"]["authorization"];
        let word = |k: &str| -> U256 { a[k].as_str().expect(k).parse().expect(k) };
        let message = TransferWithAuthorization {
            from: a["from"].as_str().expect("from").parse().expect("from"),
            to: a["to"].as_str().expect("to").parse().expect("to"),
            value: word("value"),
            validAfter: word("validAfter"),
            validBefore: word("validBefore"),
            nonce: a["nonce"].as_str().expect("nonce").parse().expect("nonce"),
        };
        let sig = signer
            .sign_hash_sync(&message.eip712_signing_hash(&self.domain()))
            .expect("sign");
        v["payload"]["signature"] = json!(format!("0x{}", hex::encode(sig.as_bytes())));
        base64::engine::general_purpose::STANDARD.encode(v.to_string())
    }

    fn audit(&self) {
        self.devnet.assert_ledger_matches_chain(&self.server);
    }

    /// Buys with every payment at once, the first one's send held at the node until
    /// `paused` resumes, so the others are verified, judged and queued behind it: they
    /// go out together, as one batch.
    fn burst<'a>(&'a self, payments: &[String], keys: &[String]) -> Burst<'a> {
        let mut first = None;
        let paused = self.proxy.pause_next("eth_sendRawTransaction", || {
            first = Some(self.buy_in_background(&payments[0], &keys[0]));
        });
        let verified = self.proxy.calls_of("eth_call");
        let rest: Vec<_> = (1..payments.len())
            .map(|i| self.buy_in_background(&payments[i], &keys[i]))
            .collect();
        let started = Instant::now();
        while self.proxy.calls_of("eth_call") < verified + rest.len() {
            assert!(started.elapsed() < Duration::from_secs(30), "not verified");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Verified; judged and queued in a moment (the check is a regex and a word count).
        std::thread::sleep(Duration::from_millis(500));
        Burst {
            first: first.expect("started"),
            rest,
            paused,
            // The held call is counted already (as it came).
            sends: self.proxy.calls_of("eth_sendRawTransaction"),
        }
    }
}

/// Purchases in flight at once ([`Base::burst`]).
struct Burst<'a> {
    first: std::thread::JoinHandle<Reply>,
    rest: Vec<std::thread::JoinHandle<Reply>>,
    paused: umpire_blackbox::chain::Paused<'a>,
    sends: usize,
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|_| key()).collect()
}

fn decode(payment: &str) -> serde_json::Value {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(payment)
        .expect("base64");
    serde_json::from_slice(&raw).expect("payment JSON")
}

fn authorization(payment: &str) -> serde_json::Value {
    decode(payment)["payload"]["authorization"].clone()
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn key() -> String {
    umpire_host::random_id("base")
}

fn settlement(r: &Reply) -> serde_json::Value {
    decode_b64_json(r.header("payment-response").expect("PAYMENT-RESPONSE"))
}

/// The transaction a delivered purchase's settlement names.
fn settled_by(r: &Reply) -> String {
    settlement(r)["transaction"]
        .as_str()
        .expect("transaction")
        .to_owned()
}

/// (a) A bystander executes the authorization between our verification and our
/// settlement, on two-second blocks: the purchase is delivered with the bystander's
/// transaction, charged once, and the authorization buys no other request.
#[test]
fn a_bystander_executing_the_authorization_between_our_steps_still_buys_it_once() {
    let base = Base::open(Mining::Every(Duration::from_secs(2)), &[]);
    let payment = base.sign();
    let bystander = base.devnet.accounts()[7].clone();
    let mut purchase = None;
    let paused = base.proxy.pause_next("eth_sendRawTransaction", || {
        purchase = Some(base.buy_in_background(&payment, &key()));
    });
    // Verified and judged; our transaction is about to go out. The bystander's goes
    // first (sent straight to the chain, mined in the next block).
    let receipt = base.devnet.execute_authorization(&bystander, &payment);
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    paused.resume();
    let r = purchase.expect("started").join().expect("buyer");
    assert_eq!(r.status, 201, "{}", text(&r));
    let s = settlement(&r);
    assert_eq!(s["success"], true, "{s}");
    assert_eq!(
        s["transaction"].as_str().map(str::to_lowercase),
        receipt["transactionHash"].as_str().map(str::to_lowercase),
        "the settlement names the bystander's transaction"
    );
    assert!(r.json().get("secret").and_then(Value::as_str).is_some());
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");

    // The same authorization buys no other request.
    let other = base.server.buy(
        "basic",
        &BODY.replace("all tests pass", "all tests passed"),
        &payment,
        &key(),
    );
    assert_eq!(other.status, 402, "{}", text(&other));
    assert!(other.json().get("document").is_none());
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}

/// (a) The bystander was faster still: the authorization was executed before the
/// request arrived. The payment reached us, so the request buys with it.
#[test]
fn an_authorization_executed_before_its_request_arrives_still_buys_it() {
    let base = Base::open(Mining::Every(Duration::from_secs(2)), &[]);
    let payment = base.sign();
    let bystander = base.devnet.accounts()[6].clone();
    let receipt = base.devnet.execute_authorization(&bystander, &payment);
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let r = base.buy(&payment, &key());
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        settled_by(&r).to_lowercase(),
        receipt["transactionHash"]
            .as_str()
            .map(str::to_lowercase)
            .expect("hash")
    );
    assert_eq!(
        base.proxy.calls_of("eth_sendRawTransaction"),
        0,
        "nothing left to broadcast"
    );
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}

/// (b) Our broadcast's answer is lost (and the server cannot see the chain until the
/// request's deadline); blocks are mined only when the test says. The customer retries
/// before the block: one verdict, charged once, no 402, no second signature asked.
#[test]
fn our_lost_broadcast_and_a_retry_before_the_block_charge_once() {
    let base = Base::open(Mining::Manual, &[("UMPIRE_REQUEST_BUDGET_MS", "6000")]);
    let payment = base.sign();
    let key = key();
    let mut purchase = None;
    let paused = base.proxy.pause_next("eth_sendRawTransaction", || {
        purchase = Some(base.buy_in_background(&payment, &key))
    });
    base.proxy.blind();
    paused.resume();
    let first = purchase.expect("started").join().expect("buyer");
    assert_eq!(first.status, 502, "{}", text(&first));
    let pending = settlement(&first);
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    assert!(
        first.json().get("document").is_none(),
        "nothing delivered unpaid"
    );
    assert_eq!(base.charged(), 0, "not mined yet");
    let broadcasts = base.proxy.calls_of("eth_sendRawTransaction");

    // The retry, before any block: it waits for the chain; the block comes meanwhile.
    base.proxy.see_again();
    let retry = base.buy_in_background(&payment, &key);
    std::thread::sleep(Duration::from_millis(500));
    base.devnet.mine();
    let r = retry.join().expect("retry");
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        settlement(&r)["transaction"],
        pending["transaction"],
        "paid by the broadcast that was lost"
    );
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    // The same bytes were resent, never a second transfer signed.
    base.devnet.mine();
    let settler = base.devnet.get("settler");
    assert_eq!(
        base.devnet.transactions_sent(&settler),
        1,
        "one transaction from the settler"
    );
    assert!(base.proxy.calls_of("eth_sendRawTransaction") > broadcasts);
    base.audit();
}

/// (c) The payer cancels the authorization while our broadcast waits in the pool (here:
/// behind a nonce gap, so it cannot be mined): no document is delivered for it, and the
/// purchase that opened the gap is still delivered once the gap fills.
#[test]
fn an_authorization_canceled_while_our_broadcast_waits_delivers_nothing() {
    let base = Base::open(Mining::Manual, &[("UMPIRE_REQUEST_BUDGET_MS", "8000")]);
    let payments = sign_payments(&base.devnet, &base.url(), BODY, 2);
    let (first_key, second_key) = (key(), key());
    let settler = base.devnet.get("settler");

    // The first purchase's transaction leaves the pool unmined: its nonce is a gap.
    let first = base.buy_in_background(&payments[0], &first_key);
    base.await_broadcasts(1);
    std::thread::sleep(Duration::from_millis(200));
    for hash in base.devnet.pending_from(&settler) {
        base.devnet.drop_pending(&hash);
    }
    // The second's waits behind it; its payer cancels meanwhile, and a block is made.
    let second = base.buy_in_background(&payments[1], &second_key);
    base.await_broadcasts(2);
    let canceled = base.cancel(&payments[1], &base.devnet.accounts()[9]);
    base.devnet.mine();
    let receipt = base
        .devnet
        .rpc("eth_getTransactionReceipt", json!([canceled]));
    assert_eq!(receipt["status"], "0x1", "canceled: {receipt}");

    let second = second.join().expect("second");
    assert_eq!(second.status, 402, "{}", text(&second));
    assert!(second.json().get("document").is_none(), "{}", text(&second));
    assert_eq!(
        settlement(&second)["errorReason"],
        "invalid_exact_evm_payload_authorization_nonce_used"
    );
    let first = first.join().expect("first");
    assert_eq!(
        first.status,
        502,
        "the gap left it pending: {}",
        text(&first)
    );
    assert_eq!(base.charged(), 0);

    // Its retry resends the transaction that was lost: the gap fills, it is delivered.
    let retry = base.buy_in_background(&payments[0], &first_key);
    std::thread::sleep(Duration::from_millis(500));
    base.devnet.mine();
    let r = retry.join().expect("retry");
    assert_eq!(r.status, 201, "{}", text(&r));
    base.devnet.mine();
    assert_eq!(
        base.charged(),
        PRICE_BASIC,
        "only the first purchase was paid"
    );
    base.audit();
}

/// (d) A header that names the payer but is signed by another wallet, sent under the
/// payer's Idempotency-Key, gets neither the answer nor the secret. The payer's own
/// spent payment, rebuilt from the chain by anyone, gets the answer without the
/// secret; only a payment the payer signs now (never charged) gets the secret.
#[test]
fn a_replay_needs_the_payers_own_signature_and_the_secret_a_fresh_one() {
    let base = Base::open(Mining::Instant, &[]);
    let payment = base.sign();
    let key = key();
    let bought = base.buy(&payment, &key);
    assert_eq!(bought.status, 201, "{}", text(&bought));
    let secret = bought
        .json()
        .get("secret")
        .and_then(Value::as_str)
        .expect("secret")
        .to_owned();

    let stranger = PrivateKeySigner::random();
    let forged = base.forged(&payment, &stranger);
    let r = base.buy(&forged, &key);
    assert_ne!(r.status, 201, "{}", text(&r));
    assert!(r.json().get("document").is_none(), "{}", text(&r));
    assert!(
        !text(&r).contains(&secret),
        "the secret leaked: {}",
        text(&r)
    );
    assert!(
        r.header("idempotent-replayed").is_none(),
        "no replay for a forged payment"
    );

    let rebuilt = base.buy(&payment, &key);
    assert_eq!(rebuilt.status, 201, "{}", text(&rebuilt));
    assert_eq!(
        rebuilt.json().get("verdict_id"),
        bought.json().get("verdict_id")
    );
    assert_eq!(rebuilt.json().get("secret"), Some(&Value::Null));

    let fresh = base.sign();
    let proven = base.buy(&fresh, &key);
    assert_eq!(proven.status, 201, "{}", text(&proven));
    assert_eq!(
        proven.json().get("secret").and_then(Value::as_str),
        Some(secret.as_str())
    );
    let nonce: B256 = authorization(&fresh)["nonce"]
        .as_str()
        .expect("nonce")
        .parse()
        .expect("nonce");
    let payer: Address = base.payer.parse().expect("payer");
    let used = base.devnet.rpc(
        "eth_call",
        json!([{"to": base.devnet.get("asset"),
                "data": format!("0xe94a0102{:0>64}{}", hex::encode(payer), hex::encode(nonce))}, "latest"]),
    );
    assert_eq!(
        used.as_str().map(|u| u.ends_with('0')),
        Some(true),
        "the proving payment was never executed: {used}"
    );
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}

/// The reference client `@x402/fetch` buys on two-second blocks while the RPC's
/// receipts lag past the request's deadline: the token's logs prove the transfer, so
/// it ends with exactly one 201 and one charge.
#[test]
fn the_reference_client_buys_on_two_second_blocks_with_receipts_that_never_come() {
    let base = Base::open(Mining::Every(Duration::from_secs(2)), &[]);
    base.proxy.late_receipts(Duration::from_secs(120));
    let bought = buy_v2(&base.devnet, &base.url(), BODY, None);
    assert_eq!(bought.status, 201, "{}", bought.body);
    let s = bought.header("payment-response").expect("PAYMENT-RESPONSE");
    assert_eq!(decode_b64_json(&s)["success"], true);
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}

/// The audit every test here ends with fails when it should: the chain shows a
/// transfer by authorization that no purchase recorded.
#[test]
fn the_ledger_audit_catches_a_payment_kept_without_its_purchase() {
    // Positive control: a transfer by authorization that no purchase recorded.
    let base = Base::open(Mining::Instant, &[]);
    let payment = base.sign();
    base.devnet
        .execute_authorization(&base.devnet.accounts()[5], &payment);
    let audit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| base.audit()));
    assert!(
        audit.is_err(),
        "the audit must fail when the chain shows an unrecorded payment"
    );
}

/// A node whose logs lag its state: the token says the authorization is used, the logs
/// do not show by what. That is neither a payment nor a refusal: `502` to retry (never
/// "nothing was taken"), and once the logs catch up the same request buys with the
/// transfer that paid.
#[test]
fn logs_that_lag_are_an_unknown_never_a_refusal() {
    let base = Base::open(Mining::Instant, &[]);
    let payment = base.sign();
    let receipt = base
        .devnet
        .execute_authorization(&base.devnet.accounts()[6], &payment);
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    base.proxy
        .fault("eth_getLogs", Fault::Result(json!([])), None);
    let key = key();
    let r = base.buy(&payment, &key);
    assert_eq!(r.status, 502, "{}", text(&r));
    assert_eq!(r.error_code(), "chain_unavailable");
    assert!(
        !text(&r).to_lowercase().contains("nothing was charged"),
        "the money moved: {}",
        text(&r)
    );
    base.proxy.see_again();
    let r = base.buy(&payment, &key);
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        settled_by(&r).to_lowercase(),
        receipt["transactionHash"]
            .as_str()
            .map(str::to_lowercase)
            .expect("hash")
    );
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}

/// Fees cached for a block go stale when the base fee jumps: the node refuses the
/// transfer, the fees are read again and it is signed again; the purchase settles.
#[test]
fn a_jump_in_fees_between_purchases_is_read_again_and_settles() {
    // Blocks as the test makes them, and fees cached for 4 s (the block time the
    // server is told).
    let base = Base::open(Mining::Instant, &[("UMPIRE_EVM_BLOCK_TIME_MS", "4000")]);
    let first = base.buy(&base.sign(), &key());
    assert_eq!(first.status, 201, "{}", text(&first));
    // 500 gwei from the next block on: far above twice what was cached.
    base.devnet
        .rpc("anvil_setNextBlockBaseFeePerGas", json!(["0x746a528800"]));
    base.devnet.mine();
    let second = base.buy(&base.sign(), &key());
    assert_eq!(second.status, 201, "{}", text(&second));
    assert_eq!(
        base.proxy.calls_of("eth_feeHistory"),
        2,
        "read once, then again after the refusal"
    );
    assert_eq!(base.charged(), 2 * PRICE_BASIC);
    base.audit();
}

/// Another sender uses the settler's key (a second process, an operator's manual
/// transaction): the nonce counted here is stale, the node says so, the nonce is read
/// again and the purchase settles.
#[test]
fn a_nonce_taken_by_another_sender_is_read_again() {
    let base = Base::open(Mining::Instant, &[]);
    let first = base.buy(&base.sign(), &key());
    assert_eq!(first.status, 201, "{}", text(&first));
    let settler = base.devnet.get("settler");
    base.devnet
        .send(json!({"from": settler, "to": settler, "value": "0x0"}));
    let second = base.buy(&base.sign(), &key());
    assert_eq!(second.status, 201, "{}", text(&second));
    assert!(base.proxy.calls_of("eth_getTransactionCount") >= 2);
    assert_eq!(base.charged(), 2 * PRICE_BASIC);
    base.audit();
}

/// No gas estimate is made for an EOA-signed transfer: one that would have failed it
/// (the payer emptied the wallet while we judged) is sent, reverts on chain, and the
/// purchase is refused without delivery, nothing taken.
#[test]
fn a_transfer_that_would_have_failed_its_estimate_reverts_and_delivers_nothing() {
    let page = umpire_blackbox::Held::start("service up");
    let base = Base::open(Mining::Instant, &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")]);
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200}}}}]}},"deliverable":{{"text":"deployed"}}}}"#,
        page.addr
    );
    let url = format!("http://{}/v1/verdicts/probe", base.server.addr);
    let payment = sign_payment(&base.devnet, &url, &body);
    let purchase = {
        let (server, body, payment) = (base.server.clone(), body.clone(), payment.clone());
        std::thread::spawn(move || server.buy("probe", &body, &payment, &key()))
    };
    page.wait_for_request(Duration::from_secs(30));
    // Verified; now the payer empties the wallet.
    let held = base.devnet.balance(&base.payer);
    let elsewhere = base.devnet.accounts()[8].clone();
    base.devnet.transfer(&base.payer, &elsewhere, held);
    page.release();
    let r = purchase.join().expect("buyer");
    assert_eq!(r.status, 402, "{}", text(&r));
    assert!(r.json().get("document").is_none(), "{}", text(&r));
    assert_eq!(settlement(&r)["errorReason"], "insufficient_funds");
    assert_eq!(
        base.proxy.calls_of("eth_estimateGas"),
        0,
        "no estimate made"
    );
    assert_eq!(
        base.devnet.transactions_sent(&base.devnet.get("settler")),
        1,
        "the transfer was sent and reverted"
    );
    base.audit();
}

/// Preconfirmations (`UMPIRE_EVM_PRECONFIRMATIONS=on`) against an RPC that streams
/// flashblocks: the purchase is answered on the preconfirmed receipt, before any block
/// holds the transfer, and the block then seals it. Off, the same RPC's preconfirmed
/// receipt is not enough: the answer waits for the block.
#[test]
fn preconfirmations_answer_before_the_block_and_off_waits_for_it() {
    let on = Base::open(Mining::Manual, &[("UMPIRE_EVM_PRECONFIRMATIONS", "on")]);
    on.proxy.preconfirm(Some(Duration::from_millis(200)));
    let r = on.buy(&on.sign(), &key());
    assert_eq!(r.status, 201, "{}", text(&r));
    let tx = settled_by(&r);
    assert_eq!(
        on.devnet.rpc("eth_getTransactionReceipt", json!([tx])),
        serde_json::Value::Null,
        "answered before any block held the transfer"
    );
    assert_eq!(on.charged(), 0);
    on.devnet.mine();
    assert_eq!(on.charged(), PRICE_BASIC);
    on.audit();

    let off = Base::open(Mining::Manual, &[]);
    off.proxy.preconfirm(Some(Duration::from_millis(200)));
    let purchase = off.buy_in_background(&off.sign(), &key());
    off.await_broadcasts(1);
    // The server has read the preconfirmed receipt (twice, so not a race with its
    // first look), and still waits for the block.
    let started = Instant::now();
    while off.proxy.preconfirmed_answers() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "off: the server never asked for the receipt"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !purchase.is_finished(),
        "off: a preconfirmed receipt does not answer the purchase"
    );
    off.devnet.mine();
    let r = purchase.join().expect("buyer");
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(off.charged(), PRICE_BASIC);
    off.audit();
}

/// A preconfirmation the block does not include: the purchase was answered on it, the
/// transaction left the pool, and the process that answered sends it again (the
/// authorization is still valid), so the payment lands after all.
#[test]
fn a_preconfirmation_not_included_is_sent_again_and_lands() {
    let base = Base::open(Mining::Manual, &[("UMPIRE_EVM_PRECONFIRMATIONS", "on")]);
    base.proxy.preconfirm(Some(Duration::from_millis(200)));
    base.proxy.drop_preconfirmed(true);
    let r = base.buy(&base.sign(), &key());
    assert_eq!(r.status, 201, "{}", text(&r));
    base.proxy.drop_preconfirmed(false);
    let tx = settled_by(&r);
    assert_eq!(
        base.devnet.rpc("eth_getTransactionByHash", json!([tx])),
        serde_json::Value::Null,
        "the preconfirmed transfer left the pool"
    );
    // The answering process notices (receipts two blocks late) and sends it again.
    let started = Instant::now();
    while base
        .devnet
        .rpc("eth_getTransactionByHash", json!([tx]))
        .is_null()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the dropped transfer was never sent again"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    base.devnet.mine();
    assert_eq!(base.charged(), PRICE_BASIC, "paid after all, once");
    base.audit();
}

/// The node refuses our own settlement transaction every time it is signed (its nonce,
/// as when another process shares the settler key): the payer's side is sound, so the
/// purchase is not voided or blamed on the payer (no 402): it stays open (502) and the
/// retry settles it, charged once.
#[test]
fn a_node_refusing_our_transaction_leaves_the_purchase_open_not_refused() {
    let base = Base::open(Mining::Instant, &[]);
    base.proxy.fault(
        "eth_sendRawTransaction",
        Fault::Fail("nonce too low: next nonce 7, tx nonce 3".into()),
        Some(3),
    );
    let payment = base.sign();
    let key = key();
    let first = base.buy(&payment, &key);
    assert_eq!(first.status, 502, "{}", text(&first));
    assert_eq!(
        first.json().get("document"),
        None,
        "nothing delivered unpaid"
    );
    assert_eq!(base.charged(), 0);
    let retry = base.buy(&payment, &key);
    assert_eq!(retry.status, 201, "{}", text(&retry));
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}

/// The RPC refuses the verification's simulation for its own reasons (a rate limit):
/// that says nothing of the payment, so it is no refusal of it (502, not a 402 blaming
/// the payer), and the same payment buys on the retry.
#[test]
fn an_rpc_error_while_verifying_is_not_the_payments_fault() {
    let base = Base::open(Mining::Instant, &[]);
    let payment = base.sign();
    let key = key();
    base.proxy.fault(
        "eth_call",
        Fault::Fail("rate limited: too many requests, retry later".into()),
        Some(1),
    );
    let first = base.buy(&payment, &key);
    assert_eq!(first.status, 502, "{}", text(&first));
    assert_eq!(base.charged(), 0);
    let retry = base.buy(&payment, &key);
    assert_eq!(retry.status, 201, "{}", text(&retry));
    assert_eq!(base.charged(), PRICE_BASIC);
    base.audit();
}

/// A payment whose purchase is still running sits unmined in the pool, public, and
/// still verifies unspent. Copied from there and presented under the key of another
/// purchase of the same wallet, it gets that purchase's answer without the one-time
/// secret: only a payment signed for the purpose, never seen before (and never
/// charged), proves the wallet.
#[test]
fn a_payment_copied_from_the_pool_gets_no_secret() {
    let base = Base::open(Mining::Manual, &[]);
    let key = key();
    let first = base.buy_in_background(&base.sign(), &key);
    base.await_broadcasts(1);
    base.devnet.mine();
    let bought = first.join().expect("buyer");
    assert_eq!(bought.status, 201, "{}", text(&bought));
    let secret = bought.json().get("secret").cloned();
    assert!(
        matches!(secret, Some(Value::String(_))),
        "{}",
        text(&bought)
    );

    // Another purchase of the same wallet, its transfer in the pool.
    let pending = base.sign();
    let other = base.buy_in_background(&pending, &self::key());
    base.await_broadcasts(2);

    let copied = base.buy(&pending, &key);
    assert_eq!(copied.status, 201, "{}", text(&copied));
    assert_eq!(
        copied.json().get("verdict_id"),
        bought.json().get("verdict_id")
    );
    assert_eq!(
        copied.json().get("secret"),
        Some(&Value::Null),
        "{}",
        text(&copied)
    );

    base.devnet.mine();
    let other = other.join().expect("buyer");
    assert_eq!(other.status, 201, "{}", text(&other));
    let fresh = base.buy(&base.sign(), &key);
    assert_eq!(fresh.status, 201, "{}", text(&fresh));
    assert_eq!(fresh.json().get("secret").cloned(), secret);
    assert_eq!(
        base.charged(),
        2 * PRICE_BASIC,
        "two purchases, two charges"
    );
    base.audit();
}

/// Purchases that arrive together settle in one batch (one round trip under the send
/// lock); the node refusing one in the middle leaves no gap the ones behind it wait on:
/// its nonce is filled at once, the purchase behind it lands in the same block as the
/// one before, and the refused purchase (nothing charged) settles on its retry.
#[test]
fn a_refusal_in_the_middle_of_a_batch_leaves_no_gap_behind_it() {
    let base = Base::open(Mining::Every(Duration::from_secs(2)), &[]);
    let (payments, keys) = (sign_payments(&base.devnet, &base.url(), BODY, 4), keys(4));
    let Burst {
        first,
        rest,
        paused,
        sends,
    } = base.burst(&payments, &keys);
    // The held call, then the batch's first transaction, pass; the second is refused.
    base.proxy.fault_after(
        "eth_sendRawTransaction",
        2,
        Fault::Fail("exceeds block gas limit".into()),
        Some(1),
    );
    paused.resume();
    let first = first.join().expect("buyer");
    assert_eq!(first.status, 201, "{}", text(&first));
    let replies: Vec<Reply> = rest.into_iter().map(|h| h.join().expect("buyer")).collect();
    // After the held call (counted as it came): one batch of three and one filler.
    let batch_and_filler = base.proxy.calls_of("eth_sendRawTransaction") - sends;
    assert_eq!(batch_and_filler, 3 + 1, "{:?}", base.proxy.counts());
    let refused: Vec<usize> = (0..3).filter(|i| replies[*i].status == 502).collect();
    assert_eq!(
        refused.len(),
        1,
        "{:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let paid: Vec<&Reply> = replies.iter().filter(|r| r.status == 201).collect();
    assert_eq!(
        paid.len(),
        2,
        "{}",
        replies.iter().map(text).collect::<Vec<_>>().join("\n")
    );
    // Both batch transactions in one block: the later one did not wait on the gap.
    let block = |r: &Reply| {
        let tx = settlement(r)["transaction"]
            .as_str()
            .expect("tx")
            .to_owned();
        base.devnet.rpc("eth_getTransactionReceipt", json!([tx]))["blockNumber"].clone()
    };
    assert_eq!(block(paid[0]), block(paid[1]));
    assert_eq!(
        base.charged(),
        3 * PRICE_BASIC,
        "the refused purchase charged nothing"
    );
    // The refused purchase, asked again, settles.
    let i = refused[0] + 1;
    let retry = base.buy(&payments[i], &keys[i]);
    assert_eq!(retry.status, 201, "{}", text(&retry));
    assert_eq!(base.charged(), 4 * PRICE_BASIC);
    base.audit();
}

/// The answer to a whole batch lost for longer than a block (3.5 s, so a 2 s block seals
/// meanwhile even a second late): by the time the same bytes go out again they are
/// mined, and the node calls them "nonce too low". Taken for a refusal, they would be
/// signed again at new nonces (two more sends, and transactions that revert); the node
/// knows them by their hash, so each purchase settles on its own.
#[test]
fn a_batch_mined_while_its_answer_was_lost_is_not_signed_again() {
    let refusals = lost_batch_answer(Fault::LoseAnswerAfter(Duration::from_millis(3_500)));
    // The path this test is about: the resent bytes were already mined, and the node
    // said so (the sibling below never meets this answer).
    assert!(
        refusals.iter().any(|e| e.contains("nonce too low")),
        "the resend met mined transactions: {refusals:?}"
    );
}

/// The answer to a whole batch lost while its transactions went through: the same bytes
/// go out again as a batch (the node knows them), and every purchase settles once.
#[test]
fn a_batch_whose_answer_is_lost_is_sent_again_and_charges_each_once() {
    // Resent at once: usually still pending at the node (a block may seal them
    // meanwhile; the sibling above holds that path for certain).
    lost_batch_answer(Fault::LoseAnswer);
}

/// Four purchases at once, the first held at its send; in the batch of the other three,
/// the second call goes through and its answer is lost (`fault`), which loses the batch's
/// whole answer. The batch goes out once more, nothing is signed again, and every
/// purchase is charged once. Returns the chain's refusals of sends, which tell the
/// two paths apart.
fn lost_batch_answer(fault: Fault) -> Vec<String> {
    let base = Base::open(Mining::Every(Duration::from_secs(2)), &[]);
    let (payments, keys) = (sign_payments(&base.devnet, &base.url(), BODY, 4), keys(4));
    let Burst {
        first,
        rest,
        paused,
        sends,
    } = base.burst(&payments, &keys);
    base.proxy
        .fault_after("eth_sendRawTransaction", 2, fault, Some(1));
    paused.resume();
    assert_eq!(first.join().expect("buyer").status, 201);
    for h in rest {
        let r = h.join().expect("buyer");
        assert_eq!(r.status, 201, "{}", text(&r));
    }
    // The batch of three, then the same three again.
    assert_eq!(
        base.proxy.calls_of("eth_sendRawTransaction") - sends,
        3 + 3,
        "the batch and its resend, nothing signed again: {:?}",
        base.proxy.counts()
    );
    assert_eq!(
        base.charged(),
        4 * PRICE_BASIC,
        "each purchase charged once"
    );
    base.audit();
    base.proxy.refusals_of("eth_sendRawTransaction")
}

/// A smart-wallet payment: `tests/js/costly_wallet.mjs` deploys a contract wallet whose
/// ERC-1271 check burns `burn` rounds of hashing on the settler's gas, funds it, and
/// signs `count` payments from it for `url`'s 402: the wallet and the headers.
fn costly_wallet(devnet: &Devnet, url: &str, burn: u64, count: usize) -> (String, Vec<String>) {
    let dn = devnet.devnet_json();
    let (burn, count) = (burn.to_string(), count.to_string());
    let v = umpire_blackbox::chain::node_json(
        "tests/js/costly_wallet.mjs",
        &[
            "--devnet", &dn, "--url", url, "--body", BODY, "--burn", &burn, "--count", &count,
        ],
    );
    let headers = v["headers"]
        .as_array()
        .unwrap_or_else(|| panic!("no headers: {v}"))
        .iter()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    (v["wallet"].as_str().expect("wallet").to_owned(), headers)
}

/// Our gas is not the attacker's: a smart wallet whose signature check would cost more
/// than one settlement may use is refused at verification, before any work and with
/// nothing broadcast; a cheap one pays as any payer does.
#[test]
fn a_smart_wallet_costlier_than_the_gas_cap_is_refused_before_any_work() {
    let base = Base::open(Mining::Instant, &[]);
    let (_, costly) = costly_wallet(&base.devnet, &base.url(), 20_000, 1);
    let r = base.buy(&costly[0], &key());
    assert_eq!(r.status, 402, "{}", text(&r));
    assert_eq!(
        settlement(&r)["errorReason"],
        "invalid_exact_evm_settlement_gas_too_high",
        "{}",
        text(&r)
    );
    assert_eq!(
        base.proxy.calls_of("eth_sendRawTransaction"),
        0,
        "nothing sent"
    );
    let (_, cheap) = costly_wallet(&base.devnet, &base.url(), 0, 1);
    let r = base.buy(&cheap[0], &key());
    assert_eq!(r.status, 201, "{}", text(&r));
    base.audit();
}

/// A payer whose payment passed verification and then made our settlement revert on
/// chain (its smart wallet turned its check off between our verification and the
/// block, on our gas) is refused for a while: its next payment is turned away before
/// any work, with nothing broadcast.
#[test]
fn a_payer_whose_settlement_reverted_on_our_gas_is_refused_for_a_while() {
    let base = Base::open(Mining::Instant, &[]);
    let (wallet, headers) = costly_wallet(&base.devnet, &base.url(), 0, 2);
    let mut purchase = None;
    let paused = base.proxy.pause_next("eth_sendRawTransaction", || {
        purchase = Some(base.buy_in_background(&headers[0], &key()));
    });
    // Verified and judged; our transaction is about to go out: the owner arms the
    // wallet, whose check refuses from now on.
    let dn = base.devnet.devnet_json();
    let armed = umpire_blackbox::chain::node_json(
        "tests/js/costly_wallet.mjs",
        &["--devnet", &dn, "--arm", &wallet],
    );
    assert_eq!(armed["armed"], true, "{armed}");
    paused.resume();
    let r = purchase.expect("started").join().expect("buyer");
    assert_eq!(r.status, 402, "voided, nothing moved: {}", text(&r));
    let sends = base.proxy.calls_of("eth_sendRawTransaction");
    let again = base.buy(&headers[1], &key());
    assert_eq!(again.status, 402, "{}", text(&again));
    assert_eq!(
        settlement(&again)["errorReason"],
        "invalid_exact_evm_payer_reverted_recently",
        "{}",
        text(&again)
    );
    assert_eq!(
        base.proxy.calls_of("eth_sendRawTransaction"),
        sends,
        "nothing more sent on its account"
    );
    base.audit();
}

/// docs/paying.md: smart-wallet (ERC-1271) payments are not replayed by payment: the
/// header's signature cannot be tied to its payer offline, so a copy of it (public in
/// the pool, then on chain) must not fetch the purchase back. The same payment sent
/// again is refused as spent, with no document and no replay. Would catch a replay
/// handed to whoever holds a copy of a contract wallet's payment, and a second charge.
#[test]
fn a_smart_wallet_payment_is_not_replayed_by_payment() {
    let base = Base::open(Mining::Instant, &[]);
    let (wallet, payments) = costly_wallet(&base.devnet, &base.url(), 0, 1);
    let wallet0 = base.devnet.balance(&wallet);
    let bought = base.buy(&payments[0], &key());
    assert_eq!(bought.status, 201, "{}", text(&bought));
    for k in [key(), key()] {
        let again = base.buy(&payments[0], &k);
        assert_eq!(again.status, 402, "{}", text(&again));
        assert!(
            again.header("idempotent-replayed").is_none(),
            "{}",
            text(&again)
        );
        assert!(again.json().get("document").is_none(), "{}", text(&again));
    }
    assert_eq!(
        base.proxy.calls_of("eth_sendRawTransaction"),
        1,
        "settled once"
    );
    assert_eq!(
        wallet0 - base.devnet.balance(&wallet),
        PRICE_BASIC,
        "charged once"
    );
    base.audit();
}

/// docs/paying.md: an authorization already expired when its request arrives, that a
/// bystander executed to us while it was valid, paid us: it buys (`201`, settled by the
/// bystander's transaction, nothing broadcast by us). Would catch an expiry check that
/// refuses a payment we were paid (money kept without its purchase).
#[test]
fn an_expired_authorization_a_bystander_executed_in_time_still_buys() {
    let base = Base::open(
        Mining::Every(Duration::from_secs(2)),
        // The shortest window a request budget of 3 s allows: expired a few blocks later.
        &[
            ("UMPIRE_REQUEST_BUDGET_MS", "3000"),
            ("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "12"),
        ],
    );
    let payment = base.sign();
    let bystander = base.devnet.accounts()[6].clone();
    let receipt = base.devnet.execute_authorization(&bystander, &payment);
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let valid_before: u64 = authorization(&payment)["validBefore"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("validBefore");
    // Until the authorization has expired by our clock (and by the chain's).
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    while now() <= valid_before + 1 {
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = base.buy(&payment, &key());
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        settled_by(&r).to_lowercase(),
        receipt["transactionHash"]
            .as_str()
            .map(str::to_lowercase)
            .expect("hash")
    );
    assert_eq!(
        base.proxy.calls_of("eth_sendRawTransaction"),
        0,
        "nothing left to broadcast"
    );
    assert_eq!(base.charged(), PRICE_BASIC, "charged once");
    base.audit();
}
