//! Fault tests: `umpire serve` killed with SIGKILL in the middle of purchases, and the
//! chain RPC lost before, during and after settlement. Whatever happens, every payment
//! that settled has its document, every document has its settled payment, nothing is
//! charged twice, and what failed says it is safe to retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use umpire_blackbox::chain::{Devnet, Fault, RpcProxy, Settlement, sign_payments};
use umpire_blackbox::{
    HOUR_WINDOW_MS, PRICE_BASIC, PRICE_SWORN, Reply, Scripted, Server, decode_b64_json, post_paid,
    python, urlencode,
};
use umpire_core::json::Value;

const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"}}"###;
/// How long a crashed purchase holds its key and payment in these tests.
const IN_PROGRESS_SECS: u64 = 8;
/// A request budget inside [`IN_PROGRESS_SECS`] (a claim must outlive its purchase),
/// roomy enough for a debug build on a loaded machine.
const BUDGET_MS: &str = "7000";

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

/// The stored document of a purchase, read back through its status URL and secret.
fn stored_document(server: &Server, purchase: &Value) -> Value {
    let id = purchase
        .get("verdict_id")
        .and_then(Value::as_str)
        .expect("id");
    let secret = purchase
        .get("secret")
        .and_then(Value::as_str)
        .expect("secret");
    let r = server.verdict_status(id, secret);
    assert_eq!(r.status, 200, "{}", text(&r));
    r.json().get("document").cloned().expect("a final document")
}

/// The purchase `key` completed, asked again with a payment signed now (a new nonce):
/// it proves the wallet, so the replay carries the one-time secret, and it is never
/// settled (a replay takes nothing).
fn replay_with_fresh_payment(devnet: &Devnet, server: &Server, key: &str) -> Value {
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let fresh = sign_payments(devnet, &url, BODY, 1).remove(0);
    let r = server.buy("basic", BODY, &fresh, key);
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(
        r.header("idempotent-replayed"),
        Some("true"),
        "{}",
        text(&r)
    );
    let purchase = r.json();
    assert!(
        purchase.get("secret").and_then(Value::as_str).is_some(),
        "a payment signed now proves the wallet: {}",
        text(&r)
    );
    purchase
}

/// How many verdicts the embedded store holds (read with Python's sqlite3 while no
/// server runs on it).
fn verdicts_in_store(data: &std::path::Path) -> usize {
    let db = data.join(umpire_store::sqlite::FILE_NAME);
    let out = std::process::Command::new(python())
        .args([
            "-c",
            "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM verdicts').fetchone()[0])",
        ])
        .arg(&db)
        .output()
        .expect("python");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)))
}

/// Retries the identical purchase (`send`) until it is answered for good; `in_flight`
/// is allowed only until the crashed claim's expiry (plus slack for a slow machine).
fn retry_until_answered(deadline: Instant, send: impl Fn() -> Reply) -> Reply {
    loop {
        let r = send();
        if r.status != 409 {
            return r;
        }
        assert_eq!(r.error_code(), "in_flight", "{}", text(&r));
        assert!(
            Instant::now() < deadline,
            "still in flight past its in-progress expiry: {}",
            text(&r)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn kill_9_in_the_middle_of_purchases_then_restart_loses_no_payment_and_no_document() {
    const N: usize = 12;
    // Receipts are held until the crash: the budget (and with it the receipt wait)
    // must outlast the time it takes half the purchases to reach settlement.
    const IN_PROGRESS_SECS: u64 = 20;
    let devnet = Devnet::start();
    let proxy = RpcProxy::start(&devnet);
    let in_progress = IN_PROGRESS_SECS.to_string();
    let env = [
        ("UMPIRE_EVM_RPC_URL", proxy.url.as_str()),
        ("UMPIRE_IN_PROGRESS_SECONDS", in_progress.as_str()),
        ("UMPIRE_REQUEST_BUDGET_MS", "19000"),
        // The retries after the restart come up to ~45 s after signing on a loaded
        // machine; a payment whose window no longer holds a whole request budget is not
        // settled by a resumed purchase (it stays prepared until it can no longer land).
        ("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "120"),
    ];
    let server = devnet.serve(Settlement::SelfSettle, &env);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let payments = sign_payments(&devnet, &url, BODY, N);
    let keys: Vec<String> = (0..N).map(|_| umpire_host::random_id("crash")).collect();

    // Settlements go out and are mined, their receipts are held: the server is between
    // moving the money and recording the purchase when it dies.
    proxy.delay_receipts(Duration::from_secs(30));
    // And the token's logs, which would prove the transfers without receipts.
    proxy.fault("eth_getLogs", Fault::Delay(Duration::from_secs(30)), None);
    let addr = server.addr;
    let inflight: Vec<_> = payments
        .iter()
        .zip(&keys)
        .map(|(p, k)| {
            let (p, k) = (p.clone(), k.clone());
            std::thread::spawn(move || {
                // The connection dies with the server; no answer is expected.
                std::panic::catch_unwind(|| post_paid(addr, "/v1/verdicts/basic", BODY, &p, &k))
                    .ok()
                    .map(|r| r.status)
            })
        })
        .collect();
    let waited = Instant::now();
    while proxy.calls_of("eth_getTransactionReceipt") < N / 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "settlements did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let data = server.crash();
    let crashed_at = Instant::now();
    for t in inflight {
        let answered = t.join().expect("thread");
        assert!(
            answered.is_none(),
            "a purchase was answered before the crash: {answered:?}"
        );
    }
    let settled_at_crash = (payer0 - devnet.balance(&payer)) / PRICE_BASIC;
    eprintln!("{settled_at_crash} of {N} payments had settled when the server was killed");
    assert!(settled_at_crash >= (N / 2) as u128);
    assert_eq!(verdicts_in_store(data.path()), 0, "nothing was recorded");

    proxy.delay_receipts(Duration::ZERO);
    proxy.see_again();
    let server = devnet.serve_in(data, Settlement::SelfSettle, &env);
    let deadline = crashed_at + Duration::from_secs(IN_PROGRESS_SECS + 10);
    let mut verdict_ids = Vec::new();
    for (payment, key) in payments.iter().zip(&keys) {
        let r = retry_until_answered(deadline, || server.buy("basic", BODY, payment, key));
        assert_eq!(r.status, 201, "{}", text(&r));
        let purchase = r.json();
        let document = purchase.get("document").cloned().expect("document");
        // Its secret: given with it when the payment was still unspent (settled by this
        // retry), else to a payment signed now.
        let proven = match purchase.get("secret").and_then(Value::as_str) {
            Some(_) => purchase.clone(),
            None => replay_with_fresh_payment(&devnet, &server, key),
        };
        assert_eq!(
            stored_document(&server, &proven),
            document,
            "the answered document is the stored one"
        );
        verdict_ids.push(
            purchase
                .get("verdict_id")
                .and_then(Value::as_str)
                .expect("id")
                .to_owned(),
        );
        // Asked again, the purchase replays.
        let again = server.buy("basic", BODY, payment, key);
        assert_eq!(again.status, 201);
        assert_eq!(again.json().get("verdict_id"), purchase.get("verdict_id"));
        assert_eq!(again.json().get("document"), purchase.get("document"));
    }
    assert_eq!(
        devnet.balance(&payer),
        payer0 - PRICE_BASIC * N as u128,
        "every payment settled exactly once"
    );
    verdict_ids.sort();
    verdict_ids.dedup();
    assert_eq!(verdict_ids.len(), N, "one verdict per purchase");
    let data = server.crash();
    assert_eq!(
        verdicts_in_store(data.path()),
        N,
        "no document without its settled payment"
    );
}

/// One basic purchase about to be made: anvil behind an [`RpcProxy`], `umpire serve`
/// selling through that proxy, one payment signed by the reference client, one key.
struct Shop {
    devnet: Devnet,
    proxy: RpcProxy,
    server: Arc<Server>,
    payer: String,
    payer0: u128,
    payment: String,
    key: String,
}

impl Shop {
    fn open(extra: &[(&str, &str)]) -> Shop {
        let devnet = Devnet::start();
        let proxy = RpcProxy::start(&devnet);
        let mut env = vec![("UMPIRE_EVM_RPC_URL", proxy.url.as_str())];
        env.extend_from_slice(extra);
        let server = Arc::new(devnet.serve(Settlement::SelfSettle, &env));
        let payer = devnet.get("payer");
        let payer0 = devnet.balance(&payer);
        let url = format!("http://{}/v1/verdicts/basic", server.addr);
        let payment = sign_payments(&devnet, &url, BODY, 1).remove(0);
        Shop {
            payer,
            payer0,
            payment,
            key: umpire_host::random_id("shop"),
            server,
            proxy,
            devnet,
        }
    }

    fn buy(&self) -> Reply {
        self.server.buy("basic", BODY, &self.payment, &self.key)
    }

    /// The purchase in a thread, so the test can act while the server is mid-request.
    fn buy_in_background(&self) -> std::thread::JoinHandle<Reply> {
        let (server, payment, key) = (self.server.clone(), self.payment.clone(), self.key.clone());
        std::thread::spawn(move || server.buy("basic", BODY, &payment, &key))
    }

    /// Buys, taking the store's write lock away just as the purchase sends `method` to
    /// the chain; the answer, and the lock (dropping it gives the store back).
    fn buy_losing_the_store_at(&self, method: &str) -> (Reply, StoreWriteLock) {
        let mut purchase = None;
        let paused = self.proxy.pause_next(method, || {
            purchase = Some(self.buy_in_background());
        });
        let lock = StoreWriteLock::take(self.server.data.path());
        paused.resume();
        let answer = purchase.expect("started").join().expect("buyer");
        (answer, lock)
    }

    /// What the payer paid so far, read from the chain.
    fn charged(&self) -> u128 {
        self.payer0 - self.devnet.balance(&self.payer)
    }
}

#[test]
fn the_chain_unreachable_before_settlement_is_a_502_to_retry_and_nothing_is_charged() {
    let shop = Shop::open(&[]);

    shop.proxy.set_down(true);
    let r = shop.buy();
    assert_eq!(r.status, 502, "{}", text(&r));
    assert_eq!(r.error_code(), "chain_unavailable");
    assert!(r.header("retry-after").is_some(), "says when to retry");
    assert_eq!(shop.charged(), 0, "nothing charged");

    shop.proxy.set_down(false);
    let r = shop.buy();
    assert_eq!(r.status, 201, "the key was left free: {}", text(&r));
    assert_eq!(shop.charged(), PRICE_BASIC);
}

/// The broadcast's answer is lost while the transaction goes through: the server sends
/// the same bytes again and confirms on chain, so the customer gets the purchase at
/// once, charged once.
#[test]
fn a_settlement_whose_answer_is_lost_is_confirmed_on_chain_and_charged_once() {
    let shop = Shop::open(&[]);

    // The transfer reaches the chain; no answer to it (or to its resends) comes back.
    shop.proxy.lose_answers_of(Some("eth_sendRawTransaction"));
    let r = shop.buy();
    assert_eq!(r.status, 201, "{}", text(&r));
    let purchase = r.json();
    let tx = purchase
        .get("settlement")
        .and_then(|s| s.get("transaction"))
        .and_then(Value::as_str)
        .expect("transaction")
        .to_owned();
    let receipt = shop
        .devnet
        .rpc("eth_getTransactionReceipt", serde_json::json!([tx]));
    assert_eq!(receipt["status"], "0x1", "the settlement named is on chain");
    assert!(purchase.get("secret").and_then(Value::as_str).is_some());
    assert_eq!(shop.charged(), PRICE_BASIC, "charged once");
    shop.devnet.assert_ledger_matches_chain(&shop.server);
}

/// The broadcast's answer is lost and the chain cannot be read until the deadline: the
/// outcome is unknown, so the answer is a 502 naming the pending transaction
/// (`settlement_pending`), never a 402 and never a verdict; the identical retry gets
/// the prepared purchase once the chain shows the transfer, charged once, no second
/// signature asked.
#[test]
fn a_settlement_the_server_cannot_see_land_is_delivered_on_the_retry_and_charged_once() {
    let shop = Shop::open(&[("UMPIRE_REQUEST_BUDGET_MS", BUDGET_MS)]);

    let mut purchase = None;
    let paused = shop.proxy.pause_next("eth_sendRawTransaction", || {
        purchase = Some(shop.buy_in_background())
    });
    shop.proxy.blind();
    paused.resume();
    let r = purchase.expect("started").join().expect("buyer");
    assert_eq!(r.status, 502, "{}", text(&r));
    assert_eq!(r.error_code(), "chain_unavailable");
    assert!(r.header("retry-after").is_some());
    assert!(
        r.json().get("document").is_none(),
        "nothing delivered unpaid"
    );
    let pending = decode_b64_json(r.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(pending["success"], false);
    assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
    let tx = pending["transaction"]
        .as_str()
        .expect("the pending transaction")
        .to_owned();
    let waited = Instant::now();
    while shop.charged() == 0 && waited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(shop.charged(), PRICE_BASIC, "the money moved unseen");

    // The identical retry: the prepared purchase, with the transaction that paid.
    shop.proxy.see_again();
    let r = shop.buy();
    assert_eq!(r.status, 201, "{}", text(&r));
    let purchase = r.json();
    let settlement = purchase.get("settlement").expect("settlement");
    assert_eq!(
        settlement.get("transaction").and_then(Value::as_str),
        Some(tx.as_str())
    );
    // The spent payment proves nothing about who resends it: no secret with it. One
    // signed now (never charged) gets it.
    assert_eq!(purchase.get("secret"), Some(&Value::Null));
    let proven = replay_with_fresh_payment(&shop.devnet, &shop.server, &shop.key);
    assert_eq!(proven.get("verdict_id"), purchase.get("verdict_id"));
    let document = purchase.get("document").cloned().expect("document");
    assert_eq!(stored_document(&shop.server, &proven), document);
    assert_eq!(shop.charged(), PRICE_BASIC, "charged once");

    // Under another key the spent payment buys nothing more: it is that purchase again.
    let other = shop.server.buy(
        "basic",
        BODY,
        &shop.payment,
        &umpire_host::random_id("lost"),
    );
    assert_eq!(other.status, 201, "{}", text(&other));
    assert_eq!(other.json().get("verdict_id"), purchase.get("verdict_id"));
    assert_eq!(
        other.json().get("secret"),
        Some(&Value::Null),
        "a replay earned by the (public) payment withholds the secret"
    );
    assert_eq!(shop.charged(), PRICE_BASIC, "charged once");
    shop.devnet.assert_ledger_matches_chain(&shop.server);
}

/// Receipts never come (the provider has not caught up): the token's logs show the
/// authorization's transfer paid us, so the purchase is delivered on that proof, not
/// on a broadcast. A retry with the spent payment replays it, without the secret.
#[test]
fn receipts_that_never_come_are_confirmed_from_the_tokens_logs() {
    let shop = Shop::open(&[("UMPIRE_SETTLEMENT_TIMEOUT_SECONDS", "5")]);

    shop.proxy
        .lose_answers_of(Some("eth_getTransactionReceipt"));
    let r = shop.buy();
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(shop.charged(), PRICE_BASIC);
    shop.proxy.lose_answers_of(None);
    let again = shop.buy();
    assert_eq!(again.status, 201, "{}", text(&again));
    assert_eq!(
        again.json().get("verdict_id"),
        r.json().get("verdict_id"),
        "replayed"
    );
    assert_eq!(again.json().get("secret"), Some(&Value::Null));
    assert_eq!(shop.charged(), PRICE_BASIC, "charged once");
    shop.devnet.assert_ledger_matches_chain(&shop.server);
}

#[test]
fn a_failing_rate_limit_counter_lets_free_requests_through_and_says_so() {
    let server = Server::start_logged(&[
        ("UMPIRE_RATE_LIMITS", "on"),
        ("UMPIRE_RATE_LIMIT_VALIDATE", "1"),
        ("UMPIRE_RATE_LIMIT_WINDOW_MS", HOUR_WINDOW_MS),
    ]);
    let body = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    assert_eq!(server.validate(body).status, 200, "the one allowed");
    // The counter cannot be written now: the request that would be over the limit is
    // let through uncounted (fail-open), and the metric says so.
    let lock = StoreWriteLock::take(server.data.path());
    let through = server.validate(body);
    drop(lock);
    assert_eq!(through.status, 200, "{}", text(&through));
    let logs = server.logs();
    assert!(
        logs.contains("rate-limit counter unavailable") && logs.contains("RateLimitStoreFailures"),
        "logged and counted: {logs}"
    );
    assert_eq!(
        server.validate(body).status,
        429,
        "counted again once the store is back"
    );
}

/// Another process holding the embedded store's write lock: every write of the server
/// fails after its busy timeout (reads go on, as WAL allows). Released on drop.
struct StoreWriteLock(std::process::Child);

impl StoreWriteLock {
    fn take(data: &std::path::Path) -> StoreWriteLock {
        use std::io::BufRead;
        let db = data.join(umpire_store::sqlite::FILE_NAME);
        let mut child = std::process::Command::new(python())
            .args([
                "-c",
                "import sqlite3,sys; c=sqlite3.connect(sys.argv[1], isolation_level=None); c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); sys.stdin.read()",
            ])
            .arg(&db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("lock line");
        assert_eq!(line.trim(), "locked");
        StoreWriteLock(child)
    }
}

impl Drop for StoreWriteLock {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_store_lost_before_the_claim_is_a_500_to_retry_and_nothing_is_charged() {
    let shop = Shop::open(&[]);

    // The key was looked up; the payment is being verified when the store goes.
    let (r, store_lock) = shop.buy_losing_the_store_at("eth_call");
    assert_eq!(r.status, 500, "{}", text(&r));
    assert_eq!(r.error_code(), "internal");
    assert!(r.header("retry-after").is_some(), "marked safe to retry");
    assert_eq!(shop.charged(), 0, "nothing charged");

    drop(store_lock);
    let r = shop.buy();
    assert_eq!(r.status, 201, "{}", text(&r));
    assert_eq!(shop.charged(), PRICE_BASIC);
}

#[test]
fn the_store_lost_during_settlement_still_delivers_and_its_reconciler_stores_it() {
    let in_progress = IN_PROGRESS_SECS.to_string();
    let shop = Shop::open(&[
        ("UMPIRE_IN_PROGRESS_SECONDS", &in_progress),
        ("UMPIRE_REQUEST_BUDGET_MS", BUDGET_MS),
    ]);

    // The money moves while the store is gone: the customer paid and gets the
    // document with its secret. The purchase's reconciler, queued before the money
    // moved, stores the verdict once the store is back (the ledger does not call the
    // payment Settled before that).
    let (r, store_lock) = shop.buy_losing_the_store_at("eth_sendRawTransaction");
    assert_eq!(r.status, 201, "{}", text(&r));
    let first = r.json();
    assert!(
        first.get("secret").and_then(Value::as_str).is_some(),
        "{}",
        text(&r)
    );
    assert_eq!(shop.charged(), PRICE_BASIC);

    // The store is back: without any retry, the status link comes to read the verdict.
    drop(store_lock);
    let id = first.get("verdict_id").and_then(Value::as_str).expect("id");
    let secret = first.get("secret").and_then(Value::as_str).expect("secret");
    let stored_by = Instant::now() + Duration::from_secs(60);
    while shop.server.verdict_status(id, secret).status != 200 {
        assert!(
            Instant::now() < stored_by,
            "the reconciler did not store the verdict"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(
        stored_document(&shop.server, &first),
        first.get("document").cloned().expect("document")
    );
    // The identical retry gets the same verdict (its secret goes to a payment signed
    // now: the spent one is public on chain).
    let deadline = Instant::now() + Duration::from_secs(IN_PROGRESS_SECS + 10);
    let r = retry_until_answered(deadline, || {
        shop.server.buy("basic", BODY, &shop.payment, &shop.key)
    });
    assert_eq!(r.status, 201, "{}", text(&r));
    let second = r.json();
    assert_eq!(second.get("verdict_id"), first.get("verdict_id"));
    assert_eq!(second.get("document"), first.get("document"));
    let document = second.get("document").cloned().expect("document");
    let proven = replay_with_fresh_payment(&shop.devnet, &shop.server, &shop.key);
    assert_eq!(stored_document(&shop.server, &proven), document);
    assert_eq!(shop.charged(), PRICE_BASIC, "charged once");
    shop.devnet.assert_ledger_matches_chain(&shop.server);
}

/// A sworn purchase killed after pass 2 was queued and before its payment went out:
/// pass 2 waits instead of finishing a verdict nobody paid for; the customer's retry
/// buys afresh, and only the verdict sold is finished, delivered and found.
#[test]
fn a_sworn_purchase_killed_before_settling_finishes_only_the_verdict_sold() {
    let hook = Scripted::start(vec![(200, "thanks")]);
    let devnet = Devnet::start();
    let proxy = RpcProxy::start(&devnet);
    let in_progress = IN_PROGRESS_SECS.to_string();
    let env = [
        ("UMPIRE_EVM_RPC_URL", proxy.url.as_str()),
        ("UMPIRE_IN_PROGRESS_SECONDS", in_progress.as_str()),
        ("UMPIRE_REQUEST_BUDGET_MS", BUDGET_MS),
        ("UMPIRE_SWORN_DELAY_SECONDS", "1"),
        ("UMPIRE_WEBHOOK_RETRY_BASE_MS", "100"),
        ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"),
    ];
    let server = devnet.serve(Settlement::SelfSettle, &env);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let webhook = format!("http://{}/hook", hook.addr);
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"regex","pattern":"^ready"}}]}},"deliverable":{{"text":"ready to ship"}},"webhook_url":"{webhook}"}}"#
    );
    let url = format!("http://{}/v1/verdicts/sworn", server.addr);
    let payment = sign_payments(&devnet, &url, &body, 1).remove(0);
    let key = umpire_host::random_id("sworn");
    let send = |server: &Server| server.buy("sworn", &body, &payment, &key);

    // Killed with the settlement on its way to the chain; it never arrives.
    let addr = server.addr;
    let paused = proxy.pause_next("eth_sendRawTransaction", || {
        let (payment, key, body) = (payment.clone(), key.clone(), body.clone());
        std::thread::spawn(move || {
            std::panic::catch_unwind(|| {
                post_paid(addr, "/v1/verdicts/sworn", &body, &payment, &key)
            })
        });
    });
    let data = server.crash();
    let crashed_at = Instant::now();
    proxy.set_down(true);
    paused.resume();
    std::thread::sleep(Duration::from_millis(200));
    proxy.set_down(false);
    assert_eq!(devnet.balance(&payer), payer0, "nothing settled");

    // Restarted: the queued pass 2 of the unsold verdict comes due and waits.
    let server = devnet.serve_in(data, Settlement::SelfSettle, &env);
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        hook.received().is_empty(),
        "no webhook for an unsold verdict"
    );

    // The customer retries: a new purchase, paid once.
    let deadline = crashed_at + Duration::from_secs(IN_PROGRESS_SECS + 10);
    let r = retry_until_answered(deadline, || send(&server));
    assert_eq!(r.status, 202, "{}", text(&r));
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_SWORN, "paid once");
    let sold = r
        .json()
        .get("verdict_id")
        .and_then(Value::as_str)
        .expect("id")
        .to_owned();
    // Its secret: with it when the retry bought afresh; when it resumed the purchase
    // (whose payment is public by then), to a payment signed now, a replay never
    // settled.
    let secret = match r.json().get("secret").and_then(Value::as_str) {
        Some(s) => s.to_owned(),
        None => {
            let url = format!("http://{}/v1/verdicts/sworn", server.addr);
            let fresh = sign_payments(&devnet, &url, &body, 1).remove(0);
            let proven = server.buy("sworn", &body, &fresh, &key);
            assert_eq!(proven.status, 202, "{}", text(&proven));
            assert_eq!(proven.header("idempotent-replayed"), Some("true"));
            proven
                .json()
                .get("secret")
                .and_then(Value::as_str)
                .expect("a payment signed now proves the wallet")
                .to_owned()
        }
    };
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_SWORN, "paid once");

    // Exactly one webhook delivery, for the verdict sold; the other was deleted.
    let started = Instant::now();
    while hook.received().is_empty() {
        assert!(started.elapsed() < Duration::from_secs(30), "no webhook");
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(4));
    let deliveries = hook.received();
    assert_eq!(deliveries.len(), 1, "{deliveries:?}");
    let delivered = umpire_core::json::parse(&deliveries[0].body).expect("webhook JSON");
    assert_eq!(
        delivered.get("verdict_id").and_then(Value::as_str),
        Some(sold.as_str()),
        "{delivered:?}"
    );
    let status = server.verdict_status(&sold, &secret).json();
    let spec_hash = status
        .get("document")
        .and_then(|d| d.get("spec_hash"))
        .and_then(Value::as_str)
        .expect("final document")
        .to_owned();
    let found = server
        .get(&format!(
            "/v1/find?spec_hash={spec_hash}&webhook={}",
            urlencode(&webhook)
        ))
        .json();
    assert_eq!(
        found.get("verdict_ids"),
        Some(&Value::Array(vec![Value::from(sold.as_str())])),
        "only the verdict sold exists"
    );
}

/// The customer comes back after the payment's own validity window closed (the
/// authorization is spent and expired): the interrupted purchase is still theirs.
/// Signed here with the client `umpire buy` uses, so the 10-second window starts at once.
#[test]
fn an_interrupted_purchase_is_delivered_after_its_authorization_expired() {
    use alloy::signers::local::PrivateKeySigner;
    use umpire_x402::client::{pick_evm, sign_exact_evm};

    let devnet = Devnet::start();
    let proxy = RpcProxy::start(&devnet);
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[
            ("UMPIRE_EVM_RPC_URL", proxy.url.as_str()),
            // The shortest validity that covers a 5 s budget, the settlement margin
            // and the time a client takes to sign and send.
            ("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "14"),
            ("UMPIRE_REQUEST_BUDGET_MS", "5000"),
        ],
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let unpaid = server.post_json("/v1/verdicts/basic", BODY);
    assert_eq!(unpaid.status, 402);
    let required: umpire_x402::PaymentRequired =
        umpire_x402::decode_header(unpaid.header("payment-required").expect("PAYMENT-REQUIRED"))
            .expect("requirements");
    let accepted = pick_evm(&required).expect("an EVM rail");
    let signer: PrivateKeySigner = devnet.get("payer_private_key").parse().expect("payer key");
    let now = umpire_host::Clock::system().now();
    let payment = sign_exact_evm(
        &signer,
        &required,
        accepted,
        now,
        umpire_host::random_bytes::<32>(),
    )
    .expect("signed");
    let key = umpire_host::random_id("late");

    let mut purchase = None;
    let paused = proxy.pause_next("eth_sendRawTransaction", || {
        let (addr, payment, key) = (server.addr, payment.clone(), key.clone());
        purchase = Some(std::thread::spawn(move || {
            umpire_blackbox::post_paid(addr, "/v1/verdicts/basic", BODY, &payment, &key)
        }));
    });
    proxy.blind();
    paused.resume();
    let r = purchase.expect("started").join().expect("buyer");
    assert_eq!(r.status, 502, "{}", text(&r));
    let waited = Instant::now();
    while devnet.balance(&payer) == payer0 && waited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
    proxy.see_again();

    // Past validBefore (now + 14 s): the payment would not verify any more.
    let expired = now + 15;
    while umpire_host::Clock::system().now() <= expired {
        std::thread::sleep(Duration::from_millis(250));
    }
    let r = server.buy("basic", BODY, &payment, &key);
    assert_eq!(r.status, 201, "{}", text(&r));
    let purchase = r.json();
    let proven = replay_with_fresh_payment(&devnet, &server, &key);
    assert_eq!(
        stored_document(&server, &proven),
        purchase.get("document").cloned().expect("document")
    );
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC, "charged once");
    devnet.assert_ledger_matches_chain(&server);
}
