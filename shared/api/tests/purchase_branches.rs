//! Every recovery branch of the purchase path, in process and in milliseconds: the paid
//! route `GET /v1/reputation` (no checker, no fetch) bought with a real offline-signed
//! EIP-3009 authorization, settled by a scripted chain ([`FakeChain`]) on an adjustable
//! clock. The black-box fault tests (tests/payments.rs) attack the same branches on
//! anvil with real processes; these pin down each branch's ledger moves and call counts.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use alloy::signers::local::PrivateKeySigner;
use async_trait::async_trait;
use bytes::Bytes;
use umpire_api::{AppState, Config, Response};
use umpire_core::signer::LocalSigner;
use umpire_host::{Clock, Deadline};
use umpire_pay::settle::Verified;
use umpire_pay::{PaymentContext, Settler};
use umpire_store::LedgerStore;
use umpire_store::PaymentPhase;
use umpire_store::sqlite::SqliteStore;
use umpire_x402::FailureReason;
use umpire_x402::{
    FailureKind, HEADER_PAYMENT_REQUIRED, HEADER_PAYMENT_SIGNATURE, PaymentFailure,
    PaymentRequired, SettlementResponse,
};

/// One scripted answer of the fake chain; an empty script behaves as a chain does.
#[derive(Clone)]
enum Step {
    /// As a chain: verify passes while the authorization is unspent, settle spends it
    /// and answers with its transaction, find reports it.
    Chain,
    /// Waits, then behaves as a chain.
    After(Duration),
    /// Refuses, moving nothing.
    Fail(PaymentFailure),
    /// The transfer lands, and the answer never comes (the process dies, the RPC hangs).
    BroadcastThenHang,
    /// The transfer lands, and the answer is this failure (a receipt that came late).
    BroadcastThenFail(PaymentFailure),
}

#[derive(Default)]
struct Calls {
    verify: AtomicUsize,
    settle: AtomicUsize,
    find: AtomicUsize,
}

/// A chain with one token, scripted per call.
#[derive(Default)]
struct FakeChain {
    /// Spent authorizations (their chain identity) and the transaction that spent them.
    spent: Mutex<HashMap<String, String>>,
    verify: Mutex<VecDeque<Step>>,
    settle: Mutex<VecDeque<Step>>,
    find: Mutex<VecDeque<Step>>,
    calls: Calls,
    /// Told when a settlement starts.
    settling: tokio::sync::Notify,
}

fn identity(ctx: &PaymentContext) -> String {
    ctx.chain_identity().expect("an EIP-3009 payment")
}

fn nonce_used() -> PaymentFailure {
    PaymentFailure::invalid(
        FailureReason::EvmNonceUsed,
        "the authorization's nonce is used",
    )
}

impl FakeChain {
    fn script(queue: &Mutex<VecDeque<Step>>, steps: &[Step]) {
        queue.lock().expect("script").extend(steps.iter().cloned());
    }

    fn next(queue: &Mutex<VecDeque<Step>>) -> Step {
        queue
            .lock()
            .expect("script")
            .pop_front()
            .unwrap_or(Step::Chain)
    }

    fn spent_by(&self, ctx: &PaymentContext) -> Option<String> {
        self.spent
            .lock()
            .expect("spent")
            .get(&identity(ctx))
            .cloned()
    }

    /// Spends the authorization: its transaction.
    fn broadcast(&self, ctx: &PaymentContext) -> String {
        let mut spent = self.spent.lock().expect("spent");
        let tx = format!("0x{:064x}", spent.len() + 0xabc);
        spent.insert(identity(ctx), tx.clone());
        tx
    }

    fn settlement(ctx: &PaymentContext, tx: String) -> SettlementResponse {
        SettlementResponse {
            success: true,
            transaction: tx,
            network: Some(ctx.rail.network.clone()),
            payer: ctx.claimed_payer(),
            error_reason: None,
            extensions: Default::default(),
        }
    }

    fn charged(&self) -> usize {
        self.spent.lock().expect("spent").len()
    }
}

#[async_trait]
impl Settler for FakeChain {
    async fn verify(&self, ctx: &PaymentContext) -> Result<Verified, PaymentFailure> {
        self.calls.verify.fetch_add(1, Ordering::SeqCst);
        match Self::next(&self.verify) {
            Step::Fail(f) => return Err(f),
            Step::After(d) => tokio::time::sleep(d).await,
            _ => {}
        }
        match self.spent_by(ctx) {
            Some(_) => Err(nonce_used()),
            None => Ok(Verified {
                payer: ctx.claimed_payer().expect("the payment names its payer"),
                settled: None,
            }),
        }
    }

    async fn settle(
        &self,
        ctx: &PaymentContext,
        _deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure> {
        self.calls.settle.fetch_add(1, Ordering::SeqCst);
        self.settling.notify_one();
        match Self::next(&self.settle) {
            Step::Fail(f) => return Err(f),
            Step::After(d) => tokio::time::sleep(d).await,
            Step::BroadcastThenHang => {
                self.broadcast(ctx);
                return std::future::pending().await;
            }
            Step::BroadcastThenFail(f) => {
                self.broadcast(ctx);
                return Err(f);
            }
            Step::Chain => {}
        }
        if self.spent_by(ctx).is_some() {
            return Err(nonce_used());
        }
        Ok(Self::settlement(ctx, self.broadcast(ctx)))
    }

    async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        self.calls.find.fetch_add(1, Ordering::SeqCst);
        if let Step::Fail(f) = Self::next(&self.find) {
            return Err(f);
        }
        Ok(self.spent_by(ctx).map(|tx| Self::settlement(ctx, tx)))
    }
}

const PATH: &str = "/v1/reputation?merchant=0x1111111111111111111111111111111111111111";

/// The service with its chain, its clock and a wallet to pay from.
struct Shop {
    state: Arc<AppState>,
    chain: Arc<FakeChain>,
    store: Arc<SqliteStore>,
    clock: Clock,
    wallet: PrivateKeySigner,
}

fn shop(tweak: impl FnOnce(&mut Config)) -> Shop {
    let env: HashMap<&str, &str> = [
        (
            "UMPIRE_EVM_PAY_TO",
            "0x2222222222222222222222222222222222222222",
        ),
        ("UMPIRE_EVM_NETWORK", "eip155:31337"),
        (
            "UMPIRE_EVM_ASSET",
            "0x3333333333333333333333333333333333333333",
        ),
        // Long enough that moving the clock past a hold leaves the authorization valid.
        ("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "900"),
    ]
    .into_iter()
    .collect();
    let rails =
        umpire_pay::config::rails_from(|k| env.get(k).map(|v| (*v).to_owned())).expect("rails");
    let clock = Clock::adjustable();
    let mut config = Config {
        rails,
        rate_limits: None,
        clock: clock.clone(),
        ..Config::default()
    };
    tweak(&mut config);
    let chain = Arc::new(FakeChain::default());
    let store = Arc::new(SqliteStore::in_memory().expect("store"));
    let state = AppState::new(
        config,
        Arc::new(LocalSigner::from_seed([7u8; 32])),
        store.clone(),
    )
    .with_payments(umpire_pay::Payments {
        evm: Some(chain.clone()),
        native_sol: None,
        facilitator: None,
    });
    Shop {
        state: Arc::new(state),
        chain,
        store,
        clock,
        wallet: PrivateKeySigner::random(),
    }
}

fn request(payment: Option<&str>, key: Option<&str>) -> umpire_api::Request {
    let mut b = http::Request::builder().method("GET").uri(PATH);
    if let Some(p) = payment {
        b = b.header(HEADER_PAYMENT_SIGNATURE, p);
    }
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(Bytes::new()).expect("request")
}

fn json(r: &Response) -> serde_json::Value {
    serde_json::from_slice(r.body()).unwrap_or_else(|_| {
        panic!(
            "{} with a body that is not JSON: {:?}",
            r.status(),
            String::from_utf8_lossy(r.body())
        )
    })
}

fn transaction(r: &Response) -> String {
    let body = json(r);
    body["receipt"]["settlement"]["transaction"]
        .as_str()
        .unwrap_or_else(|| panic!("no settlement in {body}"))
        .to_owned()
}

fn error_code(r: &Response) -> String {
    json(r)["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

impl Shop {
    async fn send(&self, payment: Option<&str>, key: Option<&str>) -> Response {
        umpire_api::handle(&self.state, request(payment, key)).await
    }

    /// A fresh authorization for the price the 402 asks, signed by the wallet, valid
    /// from now (on the shop's clock) for `valid_secs`.
    async fn sign(&self, valid_secs: u64) -> String {
        let ask = self.send(None, None).await;
        assert_eq!(ask.status(), 402);
        let text = ask
            .headers()
            .get(HEADER_PAYMENT_REQUIRED)
            .and_then(|v| v.to_str().ok())
            .expect("PAYMENT-REQUIRED");
        let required: PaymentRequired = umpire_x402::decode_header(text).expect("requirements");
        let mut accepted = umpire_x402::client::pick_evm(&required)
            .expect("an EVM option")
            .clone();
        accepted.max_timeout_seconds = valid_secs;
        let nonce: [u8; 32] = rand_nonce();
        umpire_x402::client::sign_exact_evm(
            &self.wallet,
            &required,
            &accepted,
            self.clock.now(),
            nonce,
        )
        .expect("signed")
    }

    async fn pay(&self) -> String {
        self.sign(900).await
    }

    fn calls(&self) -> (usize, usize, usize) {
        let c = &self.chain.calls;
        (
            c.verify.load(Ordering::SeqCst),
            c.settle.load(Ordering::SeqCst),
            c.find.load(Ordering::SeqCst),
        )
    }

    /// The phase of the only payment in the ledger.
    async fn phase(&self, payment: &str) -> Option<PaymentPhase> {
        let key = ledger_key(&self.state, payment);
        self.store
            .get_payment(&key, self.clock.now())
            .await
            .expect("ledger")
            .map(|e| e.state.phase())
    }
}

/// A nonce no other authorization in this test run has (each shop's wallet is new,
/// so uniqueness within the run is all the chain asks).
fn rand_nonce() -> [u8; 32] {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let mut nonce = [0xa5u8; 32];
    nonce[24..].copy_from_slice(&NEXT.fetch_add(1, Ordering::SeqCst).to_be_bytes());
    nonce
}

/// The ledger key of a payment header, as the purchase path computes it.
fn ledger_key(state: &AppState, header: &str) -> String {
    umpire_api::paid::ledger::payment_key(&context(state, header)).to_string()
}

/// The payment in `header`, matched against the reputation route's price.
fn context(state: &AppState, header: &str) -> PaymentContext {
    let raw: serde_json::Value = umpire_x402::decode_header(header).expect("payment");
    let payment = umpire_x402::PaymentPayload::from_json(raw.clone()).expect("payload");
    let (rail, requirements) = state
        .config
        .rails
        .match_payment(
            &payment,
            &umpire_x402::rails::Offer::fixed(
                umpire_core::product::REPUTATION_PRICE,
                "/v1/reputation",
            ),
        )
        .expect("matches");
    PaymentContext {
        raw,
        payment,
        rail,
        requirements,
        requirements_v1: None,
    }
}

/// The same authorization spelled another way: nonce and signature in upper-case hex.
fn re_encoded(header: &str) -> String {
    let mut raw: serde_json::Value = umpire_x402::decode_header(header).expect("payment");
    for field in ["signature", "authorization"] {
        let v = &mut raw["payload"][field];
        if field == "signature" {
            *v = upper_hex(v);
        } else {
            v["nonce"] = upper_hex(&v["nonce"]);
            v["from"] =
                serde_json::Value::String(v["from"].as_str().expect("from").to_ascii_lowercase());
        }
    }
    umpire_x402::encode_header(&raw)
}

fn upper_hex(v: &serde_json::Value) -> serde_json::Value {
    let s = v.as_str().expect("hex");
    serde_json::Value::String(format!("0x{}", s[2..].to_ascii_uppercase()))
}

#[tokio::test]
async fn a_lost_answer_is_bought_back_by_resending_the_payment() {
    let shop = shop(|_| {});
    let payment = shop.pay().await;
    let first = shop.send(Some(&payment), None).await;
    assert_eq!(first.status(), 200, "{:?}", json(&first));
    let tx = transaction(&first);
    // The answer is lost; the client resends the payment, as it is and re-encoded,
    // with and without an Idempotency-Key: the chain refuses it as spent, and the
    // purchase it bought is the answer.
    for (header, key) in [
        (payment.clone(), None),
        (re_encoded(&payment), None),
        (re_encoded(&payment), Some("lost-answer-key-0001")),
    ] {
        let again = shop.send(Some(&header), key).await;
        assert_eq!(again.status(), 200, "{:?}", json(&again));
        assert_eq!(transaction(&again), tx);
        assert_eq!(json(&again)["report"], json(&first)["report"]);
        assert_eq!(
            again
                .headers()
                .get("idempotent-replayed")
                .and_then(|v| v.to_str().ok()),
            Some("true")
        );
    }
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls(), (4, 1, 0), "(verify, settle, find)");
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
}

#[tokio::test]
async fn a_crash_between_broadcast_and_record_is_delivered_on_the_retry() {
    let shop = shop(|_| {});
    FakeChain::script(&shop.chain.settle, &[Step::BroadcastThenHang]);
    let payment = shop.pay().await;
    let state = shop.state.clone();
    let p = payment.clone();
    let running = tokio::spawn(async move {
        umpire_api::handle(&state, request(Some(&p), Some("crash-key-00000001"))).await
    });
    shop.chain.settling.notified().await;
    // The process dies with the transfer broadcast and nothing recorded but the
    // prepared answer.
    running.abort();
    assert!(running.await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));
    // Once its hold lapses, the identical retry finds the payment spent, asks the chain
    // who spent it, and is delivered the prepared answer.
    shop.clock
        .advance(u64::from(shop.state.config.in_progress_secs) + 1);
    let retry = shop.send(Some(&payment), Some("crash-key-00000001")).await;
    assert_eq!(retry.status(), 200, "{:?}", json(&retry));
    let tx = transaction(&retry);
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
    // And again, now a plain replay.
    let replay = shop.send(Some(&payment), None).await;
    assert_eq!(replay.status(), 200);
    assert_eq!(transaction(&replay), tx);
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls(), (3, 1, 1), "(verify, settle, find)");
}

#[tokio::test]
async fn a_late_receipt_is_an_unknown_outcome_that_the_retry_settles() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::BroadcastThenFail(PaymentFailure::unavailable(
            "the receipt did not come in time",
        ))],
    );
    let payment = shop.pay().await;
    let first = shop.send(Some(&payment), None).await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    assert_eq!(error_code(&first), "chain_unavailable");
    // The answer stays prepared, its hold lapsed at once: the retry needs no wait.
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));
    let retry = shop.send(Some(&payment), None).await;
    assert_eq!(retry.status(), 200, "{:?}", json(&retry));
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls(), (2, 1, 1), "(verify, settle, find)");
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
}

#[tokio::test]
async fn an_unknown_outcome_that_never_landed_is_bought_afresh() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::Fail(PaymentFailure::unavailable("the RPC is down"))],
    );
    let payment = shop.pay().await;
    let first = shop.send(Some(&payment), None).await;
    assert_eq!(first.status(), 502);
    // The payment still verifies (nothing moved): the retry is an ordinary purchase.
    let retry = shop.send(Some(&payment), None).await;
    assert_eq!(retry.status(), 200, "{:?}", json(&retry));
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls(), (2, 2, 0), "(verify, settle, find)");
}

#[tokio::test]
async fn a_refused_settlement_voids_and_the_same_payment_may_buy_again() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::Fail(PaymentFailure::invalid(
            FailureReason::InsufficientFunds,
            "the wallet holds too little",
        ))],
    );
    let payment = shop.pay().await;
    let refused = shop.send(Some(&payment), Some("refused-key-000001")).await;
    assert_eq!(refused.status(), 402, "{:?}", json(&refused));
    assert!(
        json(&refused)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("voided")),
        "{:?}",
        json(&refused)
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Voided));
    assert_eq!(shop.chain.charged(), 0);
    // Funded now, the same payment and key buy.
    let bought = shop.send(Some(&payment), Some("refused-key-000001")).await;
    assert_eq!(bought.status(), 200, "{:?}", json(&bought));
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls(), (2, 2, 0), "(verify, settle, find)");
}

#[tokio::test]
async fn a_nonce_used_otherwise_is_a_refusal_not_a_sale() {
    let shop = shop(|_| {});
    let payment = shop.pay().await;
    // The payer cancels the authorization before our settlement lands: the settler
    // reports its nonce used, not by a payment to us (a transfer to us by someone else
    // would be a settlement, tests/base_like.rs).
    FakeChain::script(&shop.chain.settle, &[Step::BroadcastThenFail(nonce_used())]);
    let refused = shop.send(Some(&payment), None).await;
    assert_eq!(refused.status(), 402, "{:?}", json(&refused));
    assert!(
        json(&refused)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("spent on a transfer that did not pay us")),
        "{:?}",
        json(&refused)
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Voided));
    // The retry is refused too (spent, and not by a purchase of ours): no lookup
    // credits it with the other transaction.
    let retry = shop.send(Some(&payment), None).await;
    assert_eq!(retry.status(), 402, "{:?}", json(&retry));
    assert_eq!(shop.calls(), (2, 1, 0), "(verify, settle, find)");
}

#[tokio::test]
async fn an_exhausted_budget_voids_before_settlement() {
    // 1 s budget: the work must end by 600 ms, settlement needs 700 ms left. A
    // verification of 450 ms leaves the work in time and settlement without.
    let shop = shop(|c| c.request_budget = Duration::from_millis(1000));
    FakeChain::script(
        &shop.chain.verify,
        &[Step::After(Duration::from_millis(450))],
    );
    let payment = shop.pay().await;
    let late = shop.send(Some(&payment), None).await;
    assert_eq!(late.status(), 503, "{:?}", json(&late));
    assert_eq!(json(&late)["error"]["reason"], "time_budget");
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Voided));
    // A verification that overruns the work's share is cut off: not even claimed.
    FakeChain::script(&shop.chain.verify, &[Step::After(Duration::from_secs(5))]);
    let other = shop.sign(900).await;
    let cut = shop.send(Some(&other), None).await;
    assert_eq!(cut.status(), 502, "{:?}", json(&cut));
    assert_eq!(shop.phase(&other).await, None);
    assert_eq!(shop.chain.charged(), 0);
    assert_eq!(shop.calls(), (2, 0, 0), "(verify, settle, find)");
    // Nothing was charged: the first payment still buys.
    let bought = shop.send(Some(&payment), None).await;
    assert_eq!(bought.status(), 200, "{:?}", json(&bought));
}

#[tokio::test]
async fn an_authorization_too_short_for_the_work_is_refused_before_any() {
    let shop = shop(|_| {});
    // Valid for 20 s: less than the 25 s this purchase may still be settling.
    let short = shop.sign(20).await;
    let refused = shop.send(Some(&short), None).await;
    assert_eq!(refused.status(), 402, "{:?}", json(&refused));
    assert!(
        json(&refused)["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("may still be settling")),
        "{:?}",
        json(&refused)
    );
    // No verification, no settlement: one look at whether someone already executed it
    // (it would have paid us, and be owed its purchase), before saying nothing moved.
    assert_eq!(shop.calls(), (0, 0, 1), "(verify, settle, find)");
    assert_eq!(shop.phase(&short).await, None);
}

#[tokio::test]
async fn twins_of_one_authorization_at_once_buy_one_purchase() {
    let shop = shop(|_| {});
    // A settlement slow enough that every twin verifies before it lands.
    FakeChain::script(
        &shop.chain.settle,
        &[Step::After(Duration::from_millis(200))],
    );
    let payment = shop.pay().await;
    let mut twins = Vec::new();
    for i in 0..8 {
        let state = shop.state.clone();
        let header = if i % 2 == 0 {
            payment.clone()
        } else {
            re_encoded(&payment)
        };
        let key = (i < 4).then(|| format!("twin-key-{i:010}"));
        twins.push(tokio::spawn(async move {
            umpire_api::handle(&state, request(Some(&header), key.as_deref())).await
        }));
    }
    let mut txs = Vec::new();
    for twin in twins {
        let r = twin.await.expect("twin");
        match r.status().as_u16() {
            200 => txs.push(transaction(&r)),
            s => assert!((400..500).contains(&s), "{s}: {:?}", json(&r)),
        }
    }
    assert!(!txs.is_empty());
    assert!(txs.iter().all(|t| *t == txs[0]), "{txs:?}");
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls().1, 1, "settled once");
}

/// The failure kinds are the settler's to choose; a config failure is our own (500).
#[tokio::test]
async fn a_misconfigured_settler_is_our_error_and_charges_nothing() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.verify,
        &[Step::Fail(PaymentFailure {
            kind: FailureKind::Config,
            reason: "unexpected_error".into(),
            message: "no settler key".into(),
            transaction: None,
        })],
    );
    let payment = shop.pay().await;
    let r = shop.send(Some(&payment), None).await;
    assert_eq!(r.status(), 500, "{:?}", json(&r));
    assert_eq!(shop.chain.charged(), 0);
}

/// A purchase interrupted before its transfer went out, retried after its authorization
/// expired: while a late block could still carry the transfer it stays open (502, never
/// a 402 inviting a second payment); past that margin it can never pay, and is voided
/// and refused, nothing charged — never left open for good.
#[tokio::test]
async fn an_interrupted_purchase_whose_authorization_expired_unused_is_voided() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::Fail(PaymentFailure::unavailable("the RPC is down"))],
    );
    let payment = shop.sign(120).await;
    let first = shop.send(Some(&payment), None).await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));

    shop.clock.advance(125);
    let open = shop.send(Some(&payment), None).await;
    assert_eq!(open.status(), 502, "{:?}", json(&open));
    assert_eq!(error_code(&open), "chain_unavailable");
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));

    shop.clock
        .advance(umpire_api::paid::checkout::LANDING_MARGIN_SECS);
    let refused = shop.send(Some(&payment), None).await;
    assert_eq!(refused.status(), 402, "{:?}", json(&refused));
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Voided));
    assert_eq!(shop.chain.charged(), 0);
}

/// An authorization valid for ages (far past the window offered) that a bystander
/// executed to us: it paid, so it buys; its entry is kept for the window offered, not
/// until the end of time (a moment no store could write).
#[tokio::test]
async fn a_paid_authorization_valid_for_ages_buys_once() {
    let shop = shop(|_| {});
    let payment = shop.sign(u64::MAX - shop.clock.now() - 1).await;
    shop.chain.broadcast(&context(&shop.state, &payment));
    let r = shop.send(Some(&payment), None).await;
    assert_eq!(r.status(), 200, "{:?}", json(&r));
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
    let again = shop.send(Some(&payment), None).await;
    assert_eq!(again.status(), 200, "{:?}", json(&again));
    assert_eq!(shop.chain.charged(), 1);
}
