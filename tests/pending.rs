//! Charged once however long the chain takes: a settlement whose outcome is not known
//! by the request's deadline (anvil's mining stopped, as a congested block or a stalled
//! sequencer would) is a pending purchase, bound to its payment and its key until the
//! chain decides, and followed to its end by the service itself. Self-settlement and the
//! reference facilitator (whose `/settle` answers `settlement_pending` when its receipt
//! wait ends first), with our own client (`umpire buy`, killed at the first pending
//! answer and rerun with the key it printed) and with `@x402/fetch`. Every test ends by
//! holding the ledger's Settled entries equal to the transfers the chain shows.

use std::time::{Duration, Instant};

use serde_json::json;
use umpire_blackbox::chain::{Devnet, Facilitator, Mining, Settlement, buy_v2, sign_payment};
use umpire_blackbox::cli::{Customer, finished, read_until};
use umpire_blackbox::{PRICE_BASIC, Reply, Server, decode_b64_json};

const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"}}"###;

/// A request's budget short enough that a stopped chain outlasts it.
const BUDGET_MS: &str = "6000";

/// anvil with mining stopped, `umpire serve` selling on it by `settlement`.
struct Stalled {
    devnet: Devnet,
    server: Server,
    payer: String,
    payer0: u128,
    /// Kept alive as long as the server uses it.
    _facilitator: Option<Facilitator>,
}

impl Stalled {
    fn self_settled() -> Stalled {
        let devnet = Devnet::start();
        let server = devnet.serve(
            Settlement::SelfSettle,
            &[
                ("UMPIRE_REQUEST_BUDGET_MS", BUDGET_MS),
                ("UMPIRE_EVM_BLOCK_TIME_MS", "2000"),
            ],
        );
        Stalled::around(devnet, server, None)
    }

    /// Through the reference facilitator, whose receipt wait (3 s) ends inside our
    /// request's budget; the chain is read beside it (`UMPIRE_EVM_RPC_URL`).
    fn through_facilitator() -> Stalled {
        let devnet = Devnet::start();
        let facilitator = Facilitator::start_confirming_within(&devnet, Duration::from_secs(3));
        let rpc = devnet.get("rpc_url");
        let server = devnet.serve(
            Settlement::Facilitator(facilitator.url.clone()),
            &[
                ("UMPIRE_REQUEST_BUDGET_MS", "8000"),
                ("UMPIRE_EVM_RPC_URL", rpc.as_str()),
                ("UMPIRE_EVM_BLOCK_TIME_MS", "2000"),
            ],
        );
        Stalled::around(devnet, server, Some(facilitator))
    }

    fn around(devnet: Devnet, server: Server, facilitator: Option<Facilitator>) -> Stalled {
        let payer = devnet.get("payer");
        let payer0 = devnet.balance(&payer);
        // Stopped from the first purchase on: nothing is mined until the test says.
        devnet.set_mining(Mining::Manual);
        Stalled {
            devnet,
            server,
            payer,
            payer0,
            _facilitator: facilitator,
        }
    }

    fn url(&self) -> String {
        format!("http://{}/v1/verdicts/basic", self.server.addr)
    }

    fn charged(&self) -> u128 {
        self.payer0 - self.devnet.balance(&self.payer)
    }

    /// Blocks again, every two seconds, as Base makes them.
    fn resume_mining(&self) {
        self.devnet
            .set_mining(Mining::Every(Duration::from_secs(2)));
    }

    fn audit(&self) {
        self.devnet.assert_ledger_matches_chain(&self.server);
    }

    /// The transfers to us the chain shows.
    fn transfers(&self) -> usize {
        self.devnet.authorization_payments().len()
    }
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn settlement(r: &Reply) -> serde_json::Value {
    decode_b64_json(r.header("payment-response").expect("PAYMENT-RESPONSE"))
}

/// (a) The chain stalls past the request's deadline; the customer stops `umpire buy` at
/// its first pending answer and reruns it with the key it printed; the chain resumes.
/// One verdict, charged once, and the rerun ends with the first purchase's document.
fn a_rerun_with_the_printed_key_is_charged_once(stalled: &Stalled) {
    let customer = Customer::new(
        &format!("http://{}", stalled.server.addr),
        &stalled.devnet.get("payer_private_key"),
        BODY,
    );
    let mut first = customer.buy(None);
    let (key, said) = read_until(&mut first, "settlement is pending", Duration::from_secs(60));
    assert!(!key.is_empty(), "no key printed: {said:#?}");
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(
        customer.held(),
        1,
        "the signed payment is held for the rerun"
    );
    assert_eq!(stalled.charged(), 0);

    // The rerun: the same payment, never a second one; it waits out the pending answer.
    let rerun = customer.buy(Some(&key));
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        stalled.transfers(),
        0,
        "nothing mined while the chain is stopped"
    );
    stalled.resume_mining();
    let (code, bought, stderr) = finished(rerun, Duration::from_secs(120));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("resuming this purchase with the payment signed for it earlier"),
        "{stderr}"
    );
    assert_eq!(bought["status"], "final", "{bought}");
    assert!(bought["document"]["signature"].is_object(), "{bought}");
    assert_eq!(stalled.charged(), PRICE_BASIC, "charged once");
    assert_eq!(stalled.transfers(), 1);
    assert_eq!(customer.held(), 0, "answered: nothing held any more");
    // The purchase's own verdict, the one stored (the only one), is what the rerun
    // printed (its payment was public on chain by then, so its answer may withhold the
    // secret: the paying wallet reads the verdict with `umpire status`).
    let verdict_id = bought["verdict_id"].as_str().expect("verdict_id");
    assert_eq!(
        stored_verdicts(&stalled.server),
        vec![verdict_id.to_owned()]
    );
    stalled.audit();
}

#[test]
fn self_settled_a_rerun_with_the_printed_key_is_charged_once() {
    a_rerun_with_the_printed_key_is_charged_once(&Stalled::self_settled());
}

#[test]
fn through_the_facilitator_a_rerun_with_the_printed_key_is_charged_once() {
    a_rerun_with_the_printed_key_is_charged_once(&Stalled::through_facilitator());
}

/// (b) The same with `@x402/fetch`, which signs whenever it sees a 402: its rerun while
/// the purchase is pending gets the pending answer (409 `in_flight`, x402's
/// `settlement_pending`) and signs nothing; once the chain resumes, the service
/// delivers the purchase by itself, and a rerun gets the first purchase's document
/// (the authorization it then signs only proves the wallet: never settled).
fn a_reference_client_rerun_is_charged_once(stalled: &Stalled) {
    let key = umpire_host::random_id("pending-fetch");
    let first = buy_v2(&stalled.devnet, &stalled.url(), BODY, Some(&key));
    assert_eq!(first.status, 502, "{}", first.body);
    let pending = decode_b64_json(&first.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    let tx = pending["transaction"]
        .as_str()
        .expect("the transaction")
        .to_owned();
    assert!(tx.starts_with("0x"), "{pending}");

    let rerun = buy_v2(&stalled.devnet, &stalled.url(), BODY, Some(&key));
    assert_eq!(rerun.status, 409, "{}", rerun.body);
    assert_eq!(
        rerun
            .json()
            .get("error")
            .and_then(|e| e.get("reason"))
            .and_then(|r| r.as_str()),
        Some("settlement_pending")
    );
    assert!(
        rerun.header("payment-required").is_none(),
        "no payment asked for"
    );
    assert_eq!(stalled.charged(), 0);

    stalled.resume_mining();
    // Delivered by the service itself: the ledger shows it settled with that transaction.
    let started = Instant::now();
    while stalled.transfers() == 0 || !settled_in_ledger(&stalled.server, &tx) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the pending purchase was not delivered by the service"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let again = buy_v2(&stalled.devnet, &stalled.url(), BODY, Some(&key));
    assert_eq!(again.status, 201, "{}", again.body);
    let s = decode_b64_json(&again.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(
        s["transaction"].as_str().map(str::to_lowercase),
        Some(tx.to_lowercase())
    );
    assert_eq!(stalled.charged(), PRICE_BASIC, "charged once");
    assert_eq!(stalled.transfers(), 1);
    stalled.audit();
}

#[test]
fn self_settled_a_reference_client_rerun_is_charged_once() {
    a_reference_client_rerun_is_charged_once(&Stalled::self_settled());
}

#[test]
fn through_the_facilitator_a_reference_client_rerun_is_charged_once() {
    a_reference_client_rerun_is_charged_once(&Stalled::through_facilitator());
}

/// The ids of the verdicts the server stored.
fn stored_verdicts(server: &Server) -> Vec<String> {
    let db = server.data.path().join("umpire.sqlite3");
    let conn = rusqlite::Connection::open(&db).expect("open the server's store");
    let mut st = conn
        .prepare("SELECT verdict_id FROM verdicts")
        .expect("query");
    st.query_map([], |r| r.get::<_, String>(0))
        .expect("rows")
        .map(|r| r.expect("row"))
        .collect()
}

/// The documented JS client (`docs/examples/buy-once.mjs`, the reference x402 client
/// libraries holding the payment under its key): a run that gives up waiting on a
/// pending purchase holds its payment; its rerun with the key sends that payment and
/// signs nothing; charged once.
fn the_documented_js_client_is_charged_once(stalled: &Stalled) {
    let hold = umpire_blackbox::TempDir::new("buy-once");
    let hold_dir = hold.path().to_string_lossy().into_owned();
    let key = umpire_host::random_id("buy-once");
    let (url, network, asset, wallet) = (
        stalled.url(),
        stalled.devnet.get("network"),
        stalled.devnet.get("asset"),
        stalled.devnet.get("payer_private_key"),
    );
    let run = |wait: &str| {
        umpire_blackbox::chain::node_json(
            "docs/examples/buy-once.mjs",
            &[
                "--url",
                &url,
                "--body",
                BODY,
                "--key",
                &key,
                "--private-key",
                &wallet,
                "--network",
                &network,
                "--asset",
                &asset,
                "--hold-dir",
                &hold_dir,
                "--max-wait-seconds",
                wait,
            ],
        )
    };
    let first = run("8");
    assert_eq!(first["signed"], 1, "{first}");
    assert!(
        first["status"] == 502 || first["status"] == 409,
        "still pending when it gave up: {first}"
    );
    assert_eq!(
        std::fs::read_dir(hold.path())
            .map(|d| d.count())
            .unwrap_or(0),
        1,
        "held"
    );
    stalled.resume_mining();
    let rerun = run("120");
    assert_eq!(rerun["status"], 201, "{rerun}");
    assert_eq!(rerun["signed"], 0, "nothing new signed: {rerun}");
    assert_eq!(rerun["resent"], true, "{rerun}");
    assert_eq!(
        std::fs::read_dir(hold.path())
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "let go"
    );
    assert_eq!(stalled.charged(), PRICE_BASIC, "charged once");
    stalled.audit();
}

#[test]
fn self_settled_the_documented_js_client_is_charged_once() {
    the_documented_js_client_is_charged_once(&Stalled::self_settled());
}

#[test]
fn through_the_facilitator_the_documented_js_client_is_charged_once() {
    the_documented_js_client_is_charged_once(&Stalled::through_facilitator());
}

/// Whether the server's ledger records `tx` as a settled payment.
fn settled_in_ledger(server: &Server, tx: &str) -> bool {
    let db = server.data.path().join("umpire.sqlite3");
    let Ok(conn) = rusqlite::Connection::open(&db) else {
        return false;
    };
    conn.prepare("SELECT tx_hash FROM payments WHERE phase = 'settled'")
        .and_then(|mut st| {
            st.query_map([], |r| r.get::<_, String>(0))
                .map(|rows| rows.flatten().any(|t| t.eq_ignore_ascii_case(tx)))
        })
        .unwrap_or(false)
}

/// (c) The facilitator answers `settlement_pending` (its receipt wait ended before the
/// block) and the transfer lands later: the purchase is pending, not voided (never a
/// 402 "nothing was charged"), and is delivered once, by the service, when the chain
/// shows the transfer; the identical retry gets it.
#[test]
fn a_facilitators_pending_answer_is_delivered_once_when_the_transfer_lands() {
    let stalled = Stalled::through_facilitator();
    let payment = sign_payment(&stalled.devnet, &stalled.url(), BODY);
    let key = umpire_host::random_id("pending-facilitator");
    let first = stalled.server.buy("basic", BODY, &payment, &key);
    assert_eq!(first.status, 502, "{}", text(&first));
    let pending = settlement(&first);
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    let tx = pending["transaction"]
        .as_str()
        .expect("the facilitator's transaction")
        .to_owned();
    assert!(
        first.json().get("document").is_none(),
        "nothing delivered yet"
    );

    // Retried while still pending: the pending answer, never a 402.
    let retry = stalled.server.buy("basic", BODY, &payment, &key);
    assert_eq!(retry.status, 409, "{}", text(&retry));
    assert_eq!(settlement(&retry)["errorReason"], "settlement_pending");

    stalled.resume_mining();
    let started = Instant::now();
    while !settled_in_ledger(&stalled.server, &tx) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the pending purchase was not delivered by the service"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let delivered = stalled.server.buy("basic", BODY, &payment, &key);
    assert_eq!(delivered.status, 201, "{}", text(&delivered));
    assert_eq!(
        settlement(&delivered)["transaction"]
            .as_str()
            .map(str::to_lowercase),
        Some(tx.to_lowercase())
    );
    assert_eq!(stalled.charged(), PRICE_BASIC, "charged once");
    assert_eq!(stalled.transfers(), 1);
    stalled.audit();
}

/// A base-fee spike while 20 purchases wait for their block: every settlement priced
/// below what the chain now takes is replaced at its own nonce with higher fees (never
/// at another nonce), and every purchase settles: none voided, none left pending for
/// a stall, each charged once.
#[test]
fn a_base_fee_spike_under_twenty_purchases_replaces_the_stuck_and_settles_all() {
    const N: usize = 20;
    let devnet = Devnet::start();
    let server = std::sync::Arc::new(devnet.serve(
        Settlement::SelfSettle,
        &[
            ("UMPIRE_REQUEST_BUDGET_MS", "20000"),
            ("UMPIRE_EVM_BLOCK_TIME_MS", "2000"),
            // Room above the spike for the replacements.
            ("UMPIRE_EVM_MAX_FEE_GWEI", "200"),
        ],
    ));
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let settler = devnet.get("settler");
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let payments = umpire_blackbox::chain::sign_payments(&devnet, &url, BODY, N);
    devnet.set_mining(Mining::Manual);
    let buyers: Vec<_> = payments
        .into_iter()
        .map(|p| {
            let server = server.clone();
            std::thread::spawn(move || {
                server.buy("basic", BODY, &p, &umpire_host::random_id("spike"))
            })
        })
        .collect();
    // Every settlement is in the pool at the fees of the moment, when the next block's
    // base fee jumps far above them (40 gwei; the chain's was about 1).
    let started = Instant::now();
    while devnet.pending_from(&settler).len() < N {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "not all broadcast"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let signed_at: Vec<String> = devnet.pending_from(&settler);
    devnet.rpc("anvil_setNextBlockBaseFeePerGas", json!(["0x9502f9000"]));
    devnet.set_mining(Mining::Every(Duration::from_secs(2)));

    let mut txs = Vec::new();
    for b in buyers {
        let r = b.join().expect("buyer");
        assert_eq!(r.status, 201, "{}", text(&r));
        txs.push(
            settlement(&r)["transaction"]
                .as_str()
                .expect("tx")
                .to_owned(),
        );
    }
    assert_eq!(
        payer0 - devnet.balance(&payer),
        N as u128 * PRICE_BASIC,
        "each charged once"
    );
    assert_eq!(devnet.authorization_payments().len(), N);
    // Replaced, not re-sent at new nonces: the settler used exactly N nonces, and the
    // transactions that landed are not the ones first signed.
    assert_eq!(
        devnet.transactions_sent(&settler),
        N as u64,
        "one nonce per settlement"
    );
    let replaced = txs
        .iter()
        .filter(|t| !signed_at.iter().any(|s| s.eq_ignore_ascii_case(t)))
        .count();
    assert!(replaced > 0, "the stuck settlements were replaced");
    for t in &txs {
        let mined = devnet.rpc("eth_getTransactionByHash", json!([t]));
        let max_fee = u128::from_str_radix(
            mined["maxFeePerGas"]
                .as_str()
                .expect("fee")
                .trim_start_matches("0x"),
            16,
        )
        .expect("hex");
        let block = devnet.rpc("eth_getBlockByNumber", json!([mined["blockNumber"], false]));
        let base = u128::from_str_radix(
            block["baseFeePerGas"]
                .as_str()
                .expect("base fee")
                .trim_start_matches("0x"),
            16,
        )
        .expect("hex");
        assert!(max_fee >= base, "{t} paid its block's base fee");
    }
    devnet.assert_ledger_matches_chain(&server);
}

/// (d) A bystander executes the payment (to us) before its request arrives, and our own
/// work then fails (the probe's page holds its answer past the work's deadline): the
/// customer is never told "nothing was charged" — the answer names the transaction,
/// says it was charged, and that the same payment buys the purchase — and the same
/// payment sent again buys it, for nothing more.
fn a_bystanders_payment_whose_work_fails_is_owned_up_to(through_facilitator: bool) {
    let devnet = Devnet::start();
    let facilitator = through_facilitator.then(|| Facilitator::start(&devnet, None));
    let rpc = devnet.get("rpc_url");
    let mut env = vec![
        ("UMPIRE_REQUEST_BUDGET_MS", "6000"),
        ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"),
    ];
    let how = match &facilitator {
        Some(f) => {
            env.push(("UMPIRE_EVM_RPC_URL", rpc.as_str()));
            Settlement::Facilitator(f.url.clone())
        }
        None => Settlement::SelfSettle,
    };
    let server = devnet.serve(how, &env);
    let page = umpire_blackbox::Held::start("service up");
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200,"keyword":"up"}}}}]}},"deliverable":{{"text":"deployed"}}}}"#,
        page.addr
    );
    let url = format!("http://{}/v1/verdicts/probe", server.addr);
    let payment = sign_payment(&devnet, &url, &body);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let bystander = devnet.accounts()[7].clone();
    let receipt = devnet.execute_authorization(&bystander, &payment);
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let tx = receipt["transactionHash"]
        .as_str()
        .expect("hash")
        .to_lowercase();
    let key = umpire_host::random_id("paid-work-fails");

    let failed = server.buy("probe", &body, &payment, &key);
    assert!(failed.status >= 500, "{}", text(&failed));
    let e = failed.json().get("error").cloned().expect("an error");
    let field = |k: &str| {
        e.get(k)
            .and_then(umpire_core::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    assert!(field("message").contains("reached us"), "{}", text(&failed));
    assert!(
        !field("hint").to_lowercase().contains("nothing was charged"),
        "{}",
        text(&failed)
    );
    assert_eq!(field("transaction").to_lowercase(), tx);
    assert_eq!(e.get("charged"), Some(&umpire_core::Value::Bool(true)));

    page.release();
    let bought = server.buy("probe", &body, &payment, &key);
    assert_eq!(bought.status, 201, "{}", text(&bought));
    assert_eq!(
        settlement(&bought)["transaction"]
            .as_str()
            .map(str::to_lowercase),
        Some(tx)
    );
    assert_eq!(
        payer0 - devnet.balance(&payer),
        umpire_blackbox::PRICE_PROBE,
        "charged once"
    );
    devnet.assert_ledger_matches_chain(&server);
}

#[test]
fn self_settled_a_bystanders_payment_whose_work_fails_is_owned_up_to() {
    a_bystanders_payment_whose_work_fails_is_owned_up_to(false);
}

#[test]
fn through_the_facilitator_a_bystanders_payment_whose_work_fails_is_owned_up_to() {
    a_bystanders_payment_whose_work_fails_is_owned_up_to(true);
}
