//! Every recovery branch of the purchase path, in process and in milliseconds: the paid
//! route `GET /v1/reputation` (no checker, no fetch) bought with a real offline-signed
//! EIP-3009 authorization, settled by a scripted chain ([`FakeChain`]) on an adjustable
//! clock. The black-box fault tests (tests/payments.rs) attack the same branches on
//! anvil with real processes; these pin down each branch's ledger moves and call counts.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use umpire_store::channels::{
    ChannelChain, ChannelCharge, ChannelCommit, ChannelHold, ChannelRecord, ChannelTake,
};

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
    /// (verify) The authorization was executed already, to us: verifies as paid.
    PaidUs,
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
    /// Spent authorizations (their chain identity): the transaction that spent them,
    /// and when (on the shop's clock).
    spent: Mutex<HashMap<String, (String, u64)>>,
    /// The shop's clock and how old a transfer a lookup still credits: as the settler
    /// does (`umpire_x402::evm::SETTLEMENT_CREDIT_SECS`), on a chain whose logs reach
    /// back further (10,000 blocks are 33 hours on a 12-s chain).
    lookback: Mutex<Option<(Clock, u64)>>,
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

    fn now(&self) -> u64 {
        self.lookback
            .lock()
            .expect("lookback")
            .as_ref()
            .map_or(0, |(clock, _)| clock.now())
    }

    /// The transaction that spent the authorization, if the chain still shows it: a
    /// used nonce is for ever, but a lookup sees only the lookback's transfers.
    fn spent_by(&self, ctx: &PaymentContext) -> Option<String> {
        self.spent
            .lock()
            .expect("spent")
            .get(&identity(ctx))
            .map(|(tx, _)| tx.clone())
    }

    /// What a lookup of the transfer sees: the transaction, within the lookback.
    fn found(&self, ctx: &PaymentContext) -> Option<String> {
        let (tx, at) = self
            .spent
            .lock()
            .expect("spent")
            .get(&identity(ctx))?
            .clone();
        let reach = self
            .lookback
            .lock()
            .expect("lookback")
            .as_ref()
            .map(|(_, s)| *s);
        match reach {
            Some(secs) if at + secs <= self.now() => None,
            _ => Some(tx),
        }
    }

    /// Spends the authorization: its transaction.
    fn broadcast(&self, ctx: &PaymentContext) -> String {
        let now = self.now();
        let mut spent = self.spent.lock().expect("spent");
        let tx = format!("0x{:064x}", spent.len() + 0xabc);
        spent.insert(identity(ctx), (tx.clone(), now));
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
            extra: Default::default(),
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
            Step::PaidUs => {
                let tx = self.found(ctx).unwrap_or_else(|| self.broadcast(ctx));
                return Ok(Verified {
                    payer: ctx.claimed_payer().expect("the payment names its payer"),
                    settled: Some(Self::settlement(ctx, tx)),
                });
            }
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
            Step::Chain | Step::PaidUs => {}
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
        Ok(self.found(ctx).map(|tx| Self::settlement(ctx, tx)))
    }
}

const PATH: &str = "/v1/reputation?merchant=0x1111111111111111111111111111111111111111";

/// The embedded store, with writes that fail on demand (a store that falters for a
/// moment): `put_verdict` fails its next `fail_verdict_writes` calls.
struct FlakyStore {
    inner: Arc<SqliteStore>,
    fail_verdict_writes: AtomicUsize,
    /// Binding a key to a purchase fails (`pend_idempotency`).
    fail_binds: std::sync::atomic::AtomicBool,
}

fn faltering() -> umpire_store::StoreError {
    umpire_store::StoreError::Unavailable("the store faltered (test)".into())
}

#[async_trait]
impl umpire_store::VerdictStore for FlakyStore {
    async fn put_verdict(&self, rec: &umpire_store::VerdictRecord) -> umpire_store::Result<()> {
        let left = self.fail_verdict_writes.load(Ordering::SeqCst);
        if left > 0 {
            self.fail_verdict_writes.store(left - 1, Ordering::SeqCst);
            return Err(faltering());
        }
        self.inner.put_verdict(rec).await
    }
    async fn get_verdict(
        &self,
        id: &str,
        now: u64,
    ) -> umpire_store::Result<Option<umpire_store::VerdictRecord>> {
        self.inner.get_verdict(id, now).await
    }
    async fn finalize_verdict(
        &self,
        id: &str,
        document: &str,
    ) -> umpire_store::Result<umpire_store::Finalize> {
        self.inner.finalize_verdict(id, document).await
    }
    async fn delete_verdict(&self, id: &str) -> umpire_store::Result<()> {
        self.inner.delete_verdict(id).await
    }
    async fn forget_job_key(&self, id: &str) -> umpire_store::Result<()> {
        self.inner.forget_job_key(id).await
    }
    async fn claim_webhook_attempt(
        &self,
        id: &str,
        attempt: u32,
        now: u64,
        held_until: u64,
    ) -> umpire_store::Result<bool> {
        self.inner
            .claim_webhook_attempt(id, attempt, now, held_until)
            .await
    }
    async fn finish_webhook_attempt(&self, id: &str, attempt: u32) -> umpire_store::Result<()> {
        self.inner.finish_webhook_attempt(id, attempt).await
    }
    async fn record_webhook_outcome(
        &self,
        id: &str,
        outcome: umpire_store::WebhookOutcome,
    ) -> umpire_store::Result<()> {
        self.inner.record_webhook_outcome(id, outcome).await
    }
    async fn find_verdicts(
        &self,
        spec_hash: &str,
        webhook_url: &str,
        now: u64,
    ) -> umpire_store::Result<Vec<String>> {
        self.inner.find_verdicts(spec_hash, webhook_url, now).await
    }
}

#[async_trait]
impl umpire_store::IdempotencyStore for FlakyStore {
    async fn claim_idempotency(
        &self,
        key: &str,
        hash: &str,
        now: u64,
        until: u64,
        expires: u64,
    ) -> umpire_store::Result<umpire_store::Claim> {
        self.inner
            .claim_idempotency(key, hash, now, until, expires)
            .await
    }
    async fn complete_idempotency(
        &self,
        key: &str,
        hash: &str,
        response: &umpire_store::StoredResponse,
        expires: u64,
    ) -> umpire_store::Result<()> {
        self.inner
            .complete_idempotency(key, hash, response, expires)
            .await
    }
    async fn release_idempotency(&self, key: &str, hash: &str) -> umpire_store::Result<()> {
        self.inner.release_idempotency(key, hash).await
    }
    async fn pend_idempotency(
        &self,
        key: &str,
        hash: &str,
        payment: &str,
        expires: u64,
    ) -> umpire_store::Result<bool> {
        if self.fail_binds.load(Ordering::SeqCst) {
            return Err(faltering());
        }
        self.inner
            .pend_idempotency(key, hash, payment, expires)
            .await
    }
    async fn complete_bound_idempotency(
        &self,
        key: &str,
        hash: &str,
        payment: &str,
        response: &umpire_store::StoredResponse,
        expires: u64,
    ) -> umpire_store::Result<bool> {
        self.inner
            .complete_bound_idempotency(key, hash, payment, response, expires)
            .await
    }
    async fn release_bound_idempotency(
        &self,
        key: &str,
        hash: &str,
        payment: &str,
    ) -> umpire_store::Result<bool> {
        self.inner
            .release_bound_idempotency(key, hash, payment)
            .await
    }
    async fn get_idempotency(
        &self,
        key: &str,
        now: u64,
    ) -> umpire_store::Result<Option<umpire_store::IdempotencyRecord>> {
        self.inner.get_idempotency(key, now).await
    }
}

#[async_trait]
impl LedgerStore for FlakyStore {
    async fn claim_payment(
        &self,
        key: &str,
        hash: &str,
        hold: &umpire_store::PaymentHold,
    ) -> umpire_store::Result<umpire_store::PaymentClaim> {
        self.inner.claim_payment(key, hash, hold).await
    }
    async fn move_payment(
        &self,
        key: &str,
        hash: &str,
        step: &umpire_store::PaymentMove,
    ) -> umpire_store::Result<bool> {
        self.inner.move_payment(key, hash, step).await
    }
    async fn get_payment(
        &self,
        key: &str,
        now: u64,
    ) -> umpire_store::Result<Option<umpire_store::PaymentEntry>> {
        self.inner.get_payment(key, now).await
    }
}

#[async_trait]
impl umpire_store::RateStore for FlakyStore {
    async fn count_request(&self, bucket: &str, expires_at: u64) -> umpire_store::Result<u64> {
        self.inner.count_request(bucket, expires_at).await
    }
}

#[async_trait]
impl umpire_store::FeedbackStore for FlakyStore {
    async fn put_feedback(&self, row: &umpire_store::FeedbackRow) -> umpire_store::Result<()> {
        self.inner.put_feedback(row).await
    }
    async fn merchant_ledger(
        &self,
        merchant: &str,
        since: u64,
    ) -> umpire_store::Result<umpire_store::MerchantLedger> {
        self.inner.merchant_ledger(merchant, since).await
    }
    async fn load_feedback(&self, rows: &[umpire_store::FeedbackRow]) -> umpire_store::Result<()> {
        self.inner.load_feedback(rows).await
    }
}

#[async_trait]
impl umpire_store::ChannelStore for FlakyStore {
    async fn get_channel(&self, id: &str) -> umpire_store::Result<Option<ChannelRecord>> {
        self.inner.get_channel(id).await
    }
    async fn create_channel(&self, record: &ChannelRecord) -> umpire_store::Result<bool> {
        self.inner.create_channel(record).await
    }
    async fn take_channel(
        &self,
        id: &str,
        hold: &ChannelHold,
        now: u64,
    ) -> umpire_store::Result<ChannelTake> {
        self.inner.take_channel(id, hold, now).await
    }
    async fn commit_channel(
        &self,
        id: &str,
        hold_id: &str,
        base: u128,
        charge: &ChannelCharge,
    ) -> umpire_store::Result<ChannelCommit> {
        self.inner.commit_channel(id, hold_id, base, charge).await
    }
    async fn release_channel(&self, id: &str, hold_id: &str) -> umpire_store::Result<()> {
        self.inner.release_channel(id, hold_id).await
    }
    async fn mirror_channel(&self, id: &str, chain: &ChannelChain) -> umpire_store::Result<()> {
        self.inner.mirror_channel(id, chain).await
    }
    async fn unclaimed_channels(&self, limit: usize) -> umpire_store::Result<Vec<ChannelRecord>> {
        self.inner.unclaimed_channels(limit).await
    }
}

/// The isolated checker, stood in for: every check passes, unless the judge is told to
/// fail (the checker unreachable: our own failure).
#[derive(Default)]
struct Judging {
    fail: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl umpire_checker::Judge for Judging {
    async fn judge(
        &self,
        req: &umpire_checker::JudgeRequest,
    ) -> Result<Vec<umpire_core::eval::Outcome>, umpire_checker::CheckerError> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(umpire_checker::CheckerError::Unavailable);
        }
        let n = req
            .spec
            .get("checks")
            .and_then(|c| c.as_array())
            .map_or(0, Vec::len);
        Ok((0..n)
            .map(|_| umpire_core::eval::Outcome {
                passed: true,
                reason: "passed (test judge)".into(),
            })
            .collect())
    }
}

/// A basic verdict's purchase: one check on a short text.
const VERDICT_PATH: &str = "/v1/verdicts/basic";
const VERDICT_BODY: &str = r#"{"spec":{"checks":[{"type":"length","unit":"words","min":1}]},"deliverable":{"text":"all tests pass"}}"#;

/// The service with its chain, its clock and a wallet to pay from.
struct Shop {
    state: Arc<AppState>,
    chain: Arc<FakeChain>,
    store: Arc<SqliteStore>,
    flaky: Arc<FlakyStore>,
    judging: Arc<Judging>,
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
    *chain.lookback.lock().expect("lookback") =
        Some((clock.clone(), umpire_x402::evm::SETTLEMENT_CREDIT_SECS));
    let store = Arc::new(SqliteStore::in_memory().expect("store"));
    let flaky = Arc::new(FlakyStore {
        inner: store.clone(),
        fail_verdict_writes: AtomicUsize::new(0),
        fail_binds: std::sync::atomic::AtomicBool::new(false),
    });
    let judging = Arc::new(Judging::default());
    let state = AppState::new(
        config,
        Arc::new(LocalSigner::from_seed([7u8; 32])),
        flaky.clone(),
    )
    .with_checker(Some(judging.clone()))
    .with_queue(Some(store.clone()))
    .with_payments(umpire_pay::Payments {
        evm: Some(chain.clone()),
        native_sol: None,
        facilitator: None,
    });
    Shop {
        state: Arc::new(state),
        chain,
        store,
        flaky,
        judging,
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

fn verdict_request(payment: Option<&str>, key: Option<&str>) -> umpire_api::Request {
    let mut b = http::Request::builder()
        .method("POST")
        .uri(VERDICT_PATH)
        .header("content-type", "application/json");
    if let Some(p) = payment {
        b = b.header(HEADER_PAYMENT_SIGNATURE, p);
    }
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(Bytes::from_static(VERDICT_BODY.as_bytes()))
        .expect("request")
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

    /// A basic verdict's purchase, paid with `payment`.
    async fn buy(&self, payment: Option<&str>, key: Option<&str>) -> Response {
        umpire_api::handle(&self.state, verdict_request(payment, key)).await
    }

    /// An authorization for a basic verdict, as its 402 asks.
    async fn pay_verdict(&self) -> String {
        let ask = self.buy(None, None).await;
        assert_eq!(ask.status(), 402, "{:?}", json(&ask));
        let text = ask
            .headers()
            .get(HEADER_PAYMENT_REQUIRED)
            .and_then(|v| v.to_str().ok())
            .expect("PAYMENT-REQUIRED");
        let required: PaymentRequired = umpire_x402::decode_header(text).expect("requirements");
        let accepted = umpire_x402::client::pick_evm(&required).expect("an EVM option");
        umpire_x402::client::sign_exact_evm(
            &self.wallet,
            &required,
            accepted,
            self.clock.now(),
            rand_nonce(),
        )
        .expect("signed")
    }

    /// The phase of a verdict's payment in the ledger.
    async fn verdict_phase(&self, payment: &str) -> Option<PaymentPhase> {
        let ctx = context_at(
            &self.state,
            payment,
            umpire_core::product::Tier::Basic.price(),
            VERDICT_PATH,
        );
        let key = umpire_api::checkout::ledger::payment_key(&ctx);
        self.store
            .get_payment(&key, self.clock.now())
            .await
            .expect("ledger")
            .map(|e| e.state.phase())
    }

    /// The verdict's status link, read with its secret.
    async fn status(&self, bought: &serde_json::Value) -> Response {
        let uri = format!(
            "/v1/verdicts/{}?secret={}",
            bought["verdict_id"].as_str().expect("verdict_id"),
            bought["secret"].as_str().expect("a secret")
        );
        let req = http::Request::builder()
            .method("GET")
            .uri(uri)
            .body(Bytes::new())
            .expect("request");
        umpire_api::handle(&self.state, req).await
    }

    fn calls(&self) -> (usize, usize, usize) {
        let c = &self.chain.calls;
        (
            c.verify.load(Ordering::SeqCst),
            c.settle.load(Ordering::SeqCst),
            c.find.load(Ordering::SeqCst),
        )
    }

    /// One round of the reconciler that follows a verdict's pending purchase.
    async fn reconcile_verdict(&self, payment: &str) -> umpire_api::checkout::reconcile::Round {
        let ctx = context_at(
            &self.state,
            payment,
            umpire_core::product::Tier::Basic.price(),
            VERDICT_PATH,
        );
        let job = umpire_api::checkout::reconcile::ReconcileJob {
            payment_key: umpire_api::checkout::ledger::payment_key(&ctx).to_string(),
            attempt: 1,
        };
        umpire_api::checkout::reconcile::run(&self.state, &job)
            .await
            .expect("a round")
    }

    /// One round of the reconciler that follows `payment`'s pending purchase.
    async fn reconcile(&self, payment: &str) -> umpire_api::checkout::reconcile::Round {
        let job = umpire_api::checkout::reconcile::ReconcileJob {
            payment_key: ledger_key(&self.state, payment),
            attempt: 1,
        };
        umpire_api::checkout::reconcile::run(&self.state, &job)
            .await
            .expect("a round")
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
    umpire_api::checkout::ledger::payment_key(&context(state, header)).to_string()
}

/// The payment in `header`, matched against the reputation route's price.
fn context(state: &AppState, header: &str) -> PaymentContext {
    context_at(
        state,
        header,
        umpire_core::product::REPUTATION_PRICE,
        "/v1/reputation",
    )
}

/// The payment in `header`, matched against `price` for `resource`.
fn context_at(
    state: &AppState,
    header: &str,
    price: umpire_core::product::Price,
    resource: &str,
) -> PaymentContext {
    let raw: serde_json::Value = umpire_x402::decode_header(header).expect("payment");
    let payment = umpire_x402::PaymentPayload::from_json(raw.clone()).expect("payload");
    let (rail, requirements) = state
        .config
        .rails
        .match_payment(&payment, &umpire_x402::rails::Offer::fixed(price, resource))
        .expect("matches");
    PaymentContext {
        raw,
        payment,
        rail,
        requirements,
        requirements_v1: None,
        transaction: None,
        settled_before: false,
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
/// expired: while a late block could still carry the transfer it stays pending (409
/// `in_flight` with x402's `settlement_pending`, never a 402 inviting a second payment);
/// past that margin it can never pay, and is voided and refused, nothing charged —
/// never left open for good.
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
    assert_eq!(open.status(), 409, "{:?}", json(&open));
    assert_eq!(error_code(&open), "in_flight");
    assert_eq!(
        json(&open)["error"]["reason"].as_str(),
        Some("settlement_pending")
    );
    assert!(open.headers().contains_key("retry-after"));
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));

    shop.clock
        .advance(umpire_api::checkout::LANDING_MARGIN_SECS);
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

fn settlement_header(r: &Response) -> serde_json::Value {
    let text = r
        .headers()
        .get("payment-response")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no PAYMENT-RESPONSE on {:?}", json(r)));
    umpire_x402::decode_header(text).expect("settlement response")
}

/// The pending answer: `409 in_flight`, x402's `settlement_pending` in PAYMENT-RESPONSE,
/// Retry-After, and nothing that asks for a payment.
fn assert_pending(r: &Response) {
    assert_eq!(r.status(), 409, "{:?}", json(r));
    assert_eq!(error_code(r), "in_flight");
    assert_eq!(
        json(r)["error"]["reason"],
        "settlement_pending",
        "{:?}",
        json(r)
    );
    assert_eq!(settlement_header(r)["errorReason"], "settlement_pending");
    assert_eq!(settlement_header(r)["success"], false);
    // docs/paying.md: the body says until when the payment can land, and the header
    // names the rail's network and the payer, as a settled answer would.
    let until = json(r)["error"]["pending_until"]
        .as_str()
        .map(str::to_owned);
    assert!(
        until
            .as_deref()
            .and_then(umpire_core::time::parse_rfc3339)
            .is_some(),
        "pending_until: {:?}",
        json(r)
    );
    let header = settlement_header(r);
    assert!(
        header["network"]
            .as_str()
            .is_some_and(|n| n.starts_with("eip155:") || n.starts_with("solana:")),
        "{header:?}"
    );
    assert!(
        header["payer"].as_str().is_some_and(|p| !p.is_empty()),
        "{header:?}"
    );
    assert!(r.headers().contains_key("retry-after"));
    assert!(
        !r.headers().contains_key(HEADER_PAYMENT_REQUIRED),
        "a pending purchase asks for no payment"
    );
}

/// A settlement with no outcome at the deadline leaves its purchase pending, bound to
/// its key: the customer's rerun — without a payment (as a client that starts over sends
/// it), or with a new authorization — is answered with the pending purchase, never a
/// 402 and never a second charge; the reconciler delivers it once the transfer lands,
/// and from then on the key replays it.
#[tokio::test]
async fn a_pending_purchase_keeps_its_key_and_never_takes_a_second_payment() {
    let shop = shop(|_| {});
    let tx = "0x00000000000000000000000000000000000000000000000000000000000fee01";
    let not_mined = || Step::Fail(PaymentFailure::pending(tx.into(), "not mined yet"));
    FakeChain::script(&shop.chain.settle, &[not_mined(), not_mined()]);
    const KEY: &str = "pending-key-000000001";
    let payment = shop.pay().await;
    let first = shop.send(Some(&payment), Some(KEY)).await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    assert_eq!(
        settlement_header(&first)["errorReason"],
        "settlement_pending"
    );
    assert_eq!(settlement_header(&first)["transaction"], tx);
    assert_eq!(json(&first)["error"]["transaction"], tx);
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));

    // The rerun starts over without a payment: the pending purchase, not a 402.
    let unpaid = shop.send(None, Some(KEY)).await;
    assert_pending(&unpaid);
    assert_eq!(settlement_header(&unpaid)["transaction"], tx);
    // A second authorization under the key is never looked at, let alone taken.
    let second = shop.pay().await;
    let calls = shop.calls();
    let with_second = shop.send(Some(&second), Some(KEY)).await;
    assert_pending(&with_second);
    assert_eq!(
        shop.calls(),
        calls,
        "the second payment is not even verified"
    );
    // The same payment re-encoded resumes the purchase (its transfer sent again): still
    // not mined, still pending.
    let resent = shop.send(Some(&re_encoded(&payment)), Some(KEY)).await;
    assert_pending(&resent);
    assert_eq!(settlement_header(&resent)["transaction"], tx);
    assert_eq!(shop.chain.charged(), 0);
    // Without the key an unpaid request is an ordinary 402 (nothing names the purchase).
    assert_eq!(shop.send(None, None).await.status(), 402);

    // The transfer lands; the reconciler finds it and delivers.
    let landed = shop.chain.broadcast(&context(&shop.state, &payment));
    assert_eq!(
        shop.reconcile(&payment).await,
        umpire_api::checkout::reconcile::Round::Done
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
    // The key replays the purchase: to the payment that bought it (spent, so public:
    // no secret), and to a payment signed now, which proves the wallet and is never
    // settled.
    let replay = shop.send(Some(&payment), Some(KEY)).await;
    assert_eq!(replay.status(), 200, "{:?}", json(&replay));
    assert_eq!(transaction(&replay), landed);
    let proof = shop.send(Some(&second), Some(KEY)).await;
    assert_eq!(proof.status(), 200, "{:?}", json(&proof));
    assert_eq!(transaction(&proof), landed);
    assert_eq!(shop.chain.charged(), 1, "one purchase, one transfer");
    assert_eq!(
        shop.phase(&second).await,
        None,
        "the second payment never reached the ledger"
    );
    // A second round finds nothing left to decide.
    assert_eq!(
        shop.reconcile(&payment).await,
        umpire_api::checkout::reconcile::Round::Done
    );
}

/// A pending purchase whose payment is still valid and unused (the broadcast was
/// dropped) is settled by its reconciler, not left to the customer: with the minute a
/// reference client signs for, well inside it.
#[tokio::test]
async fn the_reconciler_settles_a_pending_payment_that_can_still_land() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::Fail(PaymentFailure::unavailable("the RPC is down"))],
    );
    let payment = shop.sign(60).await;
    let first = shop
        .send(Some(&payment), Some("reconcile-settles-001"))
        .await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    // The chain cannot be read either, for a round: still pending, asked again.
    FakeChain::script(
        &shop.chain.find,
        &[Step::Fail(PaymentFailure::unavailable("still down"))],
    );
    assert_eq!(
        shop.reconcile(&payment).await,
        umpire_api::checkout::reconcile::Round::Again
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));
    assert_pending(&shop.send(None, Some("reconcile-settles-001")).await);
    // Back: unused and valid, so settled now, and delivered.
    assert_eq!(
        shop.reconcile(&payment).await,
        umpire_api::checkout::reconcile::Round::Done
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls(), (1, 2, 2), "(verify, settle, find)");
    let replay = shop
        .send(Some(&payment), Some("reconcile-settles-001"))
        .await;
    assert_eq!(replay.status(), 200, "{:?}", json(&replay));
}

/// A pending purchase whose authorization expires unused is voided by its reconciler:
/// its key is free again and the customer is asked for a new payment, nothing charged.
#[tokio::test]
async fn the_reconciler_voids_a_pending_payment_that_can_no_longer_land() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::Fail(PaymentFailure::unavailable("the RPC is down"))],
    );
    let payment = shop.sign(120).await;
    let first = shop
        .send(Some(&payment), Some("reconcile-voids-00001"))
        .await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    assert_pending(&shop.send(None, Some("reconcile-voids-00001")).await);
    shop.clock
        .advance(120 + umpire_api::checkout::LANDING_MARGIN_SECS + 1);
    assert_eq!(
        shop.reconcile(&payment).await,
        umpire_api::checkout::reconcile::Round::Done
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Voided));
    assert_eq!(shop.chain.charged(), 0);
    // Only now is a new payment asked for.
    assert_eq!(
        shop.send(None, Some("reconcile-voids-00001"))
            .await
            .status(),
        402
    );
    assert_eq!(shop.calls(), (1, 1, 1), "(verify, settle, find)");
}

/// A payment someone else executed to us before our own work failed was charged: the
/// answer never says "nothing was charged", it names the transaction and how to get
/// the purchase, and the same payment buys it for nothing more.
#[tokio::test]
async fn a_paid_payment_whose_work_fails_is_owned_up_to_and_buys_on_the_retry() {
    let shop = shop(|_| {});
    let payment = shop.pay_verdict().await;
    FakeChain::script(&shop.chain.verify, &[Step::PaidUs, Step::PaidUs]);
    shop.judging.fail.store(true, Ordering::SeqCst);
    let failed = shop
        .buy(Some(&payment), Some("paid-work-fails-00001"))
        .await;
    let body = json(&failed);
    assert_ne!(failed.status(), 402, "{body}");
    assert!(failed.status().is_server_error(), "{body}");
    let (message, hint) = (
        body["error"]["message"].as_str().unwrap_or_default(),
        body["error"]["hint"].as_str().unwrap_or_default(),
    );
    assert!(message.contains("reached us"), "{body}");
    assert!(
        !hint.to_ascii_lowercase().contains("nothing was charged"),
        "{body}"
    );
    assert!(hint.contains("same payment"), "{body}");
    assert_eq!(body["error"]["charged"], true, "{body}");
    let tx = body["error"]["transaction"]
        .as_str()
        .expect("the transaction")
        .to_owned();
    assert_eq!(shop.chain.charged(), 1);
    // Sent again as the answer says: bought, with the transaction that paid.
    shop.judging.fail.store(false, Ordering::SeqCst);
    let bought = shop
        .buy(Some(&payment), Some("paid-work-fails-00001"))
        .await;
    assert_eq!(bought.status(), 201, "{:?}", json(&bought));
    assert_eq!(json(&bought)["settlement"]["transaction"], tx.as_str());
    assert_eq!(
        shop.verdict_phase(&payment).await,
        Some(PaymentPhase::Settled)
    );
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls().1, 0, "nothing of ours was ever settled");
}

/// No settled purchase without its stored verdict: a verdict whose store writes fail
/// after its payment settled is answered (with the secret for its status link) and
/// left pending in the ledger, not Settled; its reconciler stores it from the prepared
/// answer, and the status link then reads it.
#[tokio::test]
async fn a_verdict_whose_store_write_fails_is_stored_by_its_reconciler() {
    let shop = shop(|_| {});
    let payment = shop.pay_verdict().await;
    shop.flaky.fail_verdict_writes.store(100, Ordering::SeqCst);
    let bought = shop
        .buy(Some(&payment), Some("store-fails-000000001"))
        .await;
    assert_eq!(bought.status(), 201, "{:?}", json(&bought));
    let bought = json(&bought);
    assert!(bought["secret"].is_string(), "{bought}");
    assert_eq!(shop.chain.charged(), 1);
    // Paid, not stored: the ledger does not say Settled yet.
    assert_eq!(
        shop.verdict_phase(&payment).await,
        Some(PaymentPhase::Prepared)
    );
    assert_eq!(shop.status(&bought).await.status(), 404);
    // A round while the store still fails stores nothing and asks again.
    assert_eq!(
        shop.reconcile_verdict(&payment).await,
        umpire_api::checkout::reconcile::Round::Again
    );
    shop.flaky.fail_verdict_writes.store(0, Ordering::SeqCst);
    assert_eq!(
        shop.reconcile_verdict(&payment).await,
        umpire_api::checkout::reconcile::Round::Done
    );
    assert_eq!(
        shop.verdict_phase(&payment).await,
        Some(PaymentPhase::Settled)
    );
    let status = shop.status(&bought).await;
    assert_eq!(status.status(), 200, "{:?}", json(&status));
    assert_eq!(json(&status)["document"], bought["document"]);
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(
        shop.calls(),
        (1, 1, 0),
        "(verify, settle, find): the chain is not asked again"
    );
}

/// A process that dies while its settlement is on its way leaves the purchase's key bound
/// to it (bound before any money moved): long after the claim's hold lapses, a rerun
/// under the key — without a payment, or with a new one — is answered with the pending
/// purchase, never a 402, and the new payment is never taken.
#[tokio::test]
async fn a_crash_mid_settlement_leaves_the_key_bound_to_the_purchase() {
    let shop = shop(|_| {});
    FakeChain::script(&shop.chain.settle, &[Step::BroadcastThenHang]);
    const KEY: &str = "crash-bound-key-00001";
    let payment = shop.pay().await;
    let state = shop.state.clone();
    let p = payment.clone();
    let running =
        tokio::spawn(async move { umpire_api::handle(&state, request(Some(&p), Some(KEY))).await });
    shop.chain.settling.notified().await;
    running.abort();
    assert!(running.await.is_err_and(|e| e.is_cancelled()));
    // Hours later than any claim's hold.
    shop.clock.advance(3 * 3600);
    let unpaid = shop.send(None, Some(KEY)).await;
    assert_pending(&unpaid);
    let second = shop.pay().await;
    let calls = shop.calls();
    assert_pending(&shop.send(Some(&second), Some(KEY)).await);
    assert_eq!(shop.calls(), calls, "the new payment is not even verified");
    assert_eq!(shop.phase(&second).await, None);
    assert_eq!(shop.chain.charged(), 1, "only the first payment moved");
}

/// A pending purchase whose settlement attempt is refused (a facilitator that answers
/// "expired", a balance that went away) is not voided on that word: only the chain's
/// own evidence voids it, since the refusal may follow a transfer that landed.
#[tokio::test]
async fn the_reconciler_voids_only_on_the_chains_evidence() {
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[
            Step::Fail(PaymentFailure::unavailable("the RPC is down")),
            Step::Fail(PaymentFailure::invalid(
                FailureReason::EvmValidBefore,
                "the authorization is expired",
            )),
            Step::Fail(PaymentFailure::invalid(
                FailureReason::InsufficientFunds,
                "the wallet holds too little",
            )),
        ],
    );
    let payment = shop.pay().await;
    let first = shop
        .send(Some(&payment), Some("evidence-key-000000001"))
        .await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    for _ in 0..2 {
        assert_eq!(
            shop.reconcile(&payment).await,
            umpire_api::checkout::reconcile::Round::Again
        );
        assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));
    }
    assert_pending(&shop.send(None, Some("evidence-key-000000001")).await);
    // The chain shows the transfer landed after all (the earlier broadcast): delivered.
    shop.chain.broadcast(&context(&shop.state, &payment));
    assert_eq!(
        shop.reconcile(&payment).await,
        umpire_api::checkout::reconcile::Round::Done
    );
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
    assert_eq!(shop.chain.charged(), 1);
}

/// A purchase whose key cannot be bound to it (the store falters) is stopped before
/// any money moves: a rerun under an unbound key could buy again while the first
/// payment lands. Nothing is charged, and the same payment and key buy once the store
/// is back.
#[tokio::test]
async fn a_key_that_cannot_be_bound_stops_the_purchase_before_money_moves() {
    let shop = shop(|_| {});
    let payment = shop.pay().await;
    shop.flaky.fail_binds.store(true, Ordering::SeqCst);
    let stopped = shop
        .send(Some(&payment), Some("unbindable-key-000001"))
        .await;
    assert_eq!(stopped.status(), 503, "{:?}", json(&stopped));
    assert_eq!(shop.calls().1, 0, "no settlement started");
    assert_eq!(shop.chain.charged(), 0);
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Voided));
    shop.flaky.fail_binds.store(false, Ordering::SeqCst);
    let bought = shop
        .send(Some(&payment), Some("unbindable-key-000001"))
        .await;
    assert_eq!(bought.status(), 200, "{:?}", json(&bought));
    assert_eq!(shop.chain.charged(), 1);
}

/// The metrics recorded on this thread: outside Lambda a metric is a `tracing` event
/// with a `metric` field (`umpire_api::plumbing::metrics::record`), the same call that
/// writes the EMF line an operator's alarm reads on AWS.
#[derive(Clone, Default)]
struct Metrics(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Metrics {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Named(Option<String>);
        impl tracing::field::Visit for Named {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                if field.name() == "metric" {
                    self.0 = Some(value.to_owned());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut named = Named(None);
        event.record(&mut named);
        if let Some(metric) = named.0 {
            self.0.lock().expect("metrics").push(metric);
        }
    }
}

impl Metrics {
    /// Records every metric of this thread (a `#[tokio::test]` runs its tasks on it)
    /// until the guard drops.
    fn watch() -> (Metrics, tracing::subscriber::DefaultGuard) {
        use tracing_subscriber::layer::SubscriberExt;
        let metrics = Metrics::default();
        let guard =
            tracing::subscriber::set_default(tracing_subscriber::registry().with(metrics.clone()));
        (metrics, guard)
    }

    fn count(&self, name: &str) -> usize {
        self.0
            .lock()
            .expect("metrics")
            .iter()
            .filter(|m| *m == name)
            .count()
    }
}

/// docs/paying.md: a purchase whose chain cannot be read is followed past the last
/// moment its payment could land, each such round counting `PendingOverdue` (what the
/// AWS alarm reads); six hours past it the reconciler parks it (no more rounds) and
/// the customer's own retry still decides it. Would catch: an overdue purchase no alarm
/// counts (or one counted before it is overdue), a reconciler that runs for ever or
/// gives up early, a parked purchase voided or lost, `PurchasesPending` not recorded.
#[tokio::test]
async fn an_undecidable_pending_purchase_is_counted_overdue_then_parked() {
    use umpire_api::checkout::reconcile::Round;
    let (metrics, _guard) = Metrics::watch();
    let shop = shop(|_| {});
    FakeChain::script(
        &shop.chain.settle,
        &[Step::Fail(PaymentFailure::unavailable("the RPC is down"))],
    );
    const KEY: &str = "overdue-key-000000001";
    let payment = shop.sign(120).await;
    let first = shop.send(Some(&payment), Some(KEY)).await;
    assert_eq!(first.status(), 502, "{:?}", json(&first));
    assert_eq!(metrics.count("PurchasesPending"), 1);
    let unreadable = || Step::Fail(PaymentFailure::unavailable("the chain cannot be read"));

    // Before its payment's last moment: undecided, not overdue.
    FakeChain::script(&shop.chain.find, &[unreadable()]);
    assert_eq!(shop.reconcile(&payment).await, Round::Again);
    assert_eq!(metrics.count("PendingOverdue"), 0, "not overdue yet");

    // Past it (validBefore and the landing margin), still unreadable: each round counts.
    shop.clock
        .advance(120 + umpire_api::checkout::LANDING_MARGIN_SECS + 1);
    FakeChain::script(&shop.chain.find, &[unreadable(), unreadable()]);
    for round in 1..=2 {
        assert_eq!(shop.reconcile(&payment).await, Round::Again);
        assert_eq!(metrics.count("PendingOverdue"), round);
    }
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));

    // Six hours past it: parked, without another read of the chain; still pending.
    shop.clock.advance(6 * 3600);
    let finds = shop.calls().2;
    assert_eq!(shop.reconcile(&payment).await, Round::Done, "parked");
    assert_eq!(metrics.count("PendingOverdue"), 3);
    assert_eq!(shop.calls().2, finds, "a parked purchase is not read again");
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Prepared));
    assert_pending(&shop.send(None, Some(KEY)).await);

    // The chain is readable again and shows the transfer landed (the first broadcast,
    // mined late): the customer's own retry decides it, charged once.
    let landed = shop.chain.broadcast(&context(&shop.state, &payment));
    let delivered = shop.send(Some(&payment), Some(KEY)).await;
    assert_eq!(delivered.status(), 200, "{:?}", json(&delivered));
    assert_eq!(transaction(&delivered), landed);
    assert_eq!(shop.phase(&payment).await, Some(PaymentPhase::Settled));
    assert_eq!(shop.chain.charged(), 1);
}

/// docs/paying.md: the reconciler records `PendingDelivered` when it delivers a pending
/// purchase and `PendingVoided` when it voids one. Would catch either metric renamed,
/// dropped, or recorded for the other outcome.
#[tokio::test]
async fn the_reconcilers_outcomes_are_counted() {
    use umpire_api::checkout::reconcile::Round;
    let (metrics, _guard) = Metrics::watch();
    let shop = shop(|_| {});
    let down = || Step::Fail(PaymentFailure::unavailable("the RPC is down"));
    FakeChain::script(&shop.chain.settle, &[down(), down()]);
    let landing = shop.sign(120).await;
    let expiring = shop.sign(120).await;
    for payment in [&landing, &expiring] {
        assert_eq!(shop.send(Some(payment), None).await.status(), 502);
    }
    assert_eq!(metrics.count("PurchasesPending"), 2);
    shop.chain.broadcast(&context(&shop.state, &landing));
    assert_eq!(shop.reconcile(&landing).await, Round::Done);
    assert_eq!(shop.phase(&landing).await, Some(PaymentPhase::Settled));
    assert_eq!(
        (
            metrics.count("PendingDelivered"),
            metrics.count("PendingVoided")
        ),
        (1, 0)
    );
    shop.clock
        .advance(120 + umpire_api::checkout::LANDING_MARGIN_SECS + 1);
    assert_eq!(shop.reconcile(&expiring).await, Round::Done);
    assert_eq!(shop.phase(&expiring).await, Some(PaymentPhase::Voided));
    assert_eq!(
        (
            metrics.count("PendingDelivered"),
            metrics.count("PendingVoided")
        ),
        (1, 1)
    );
    assert_eq!(metrics.count("PendingOverdue"), 0);
}

/// docs/paying.md: a settled purchase's answer is kept a day for replays by payment,
/// then it is gone: the same payment a day later buys nothing (it is spent) and is not
/// settled again. Would catch a replay window shorter than a day, and a payment that
/// buys a second purchase once its first answer has expired.
#[tokio::test]
async fn a_settled_answer_is_replayed_for_a_day_then_gone() {
    let shop = shop(|_| {});
    let payment = shop.pay().await;
    let bought = shop.send(Some(&payment), None).await;
    assert_eq!(bought.status(), 200, "{:?}", json(&bought));
    let tx = transaction(&bought);
    // A moment short of a day: replayed.
    shop.clock
        .advance(umpire_api::checkout::idempotency::COMPLETED_SECS - 60);
    let replay = shop.send(Some(&payment), None).await;
    assert_eq!(replay.status(), 200, "{:?}", json(&replay));
    assert_eq!(transaction(&replay), tx);
    assert!(replay.headers().contains_key("idempotent-replayed"));
    // Past the day: no replay, no second purchase; the payment is spent.
    shop.clock.advance(61);
    let gone = shop.send(Some(&payment), None).await;
    assert_eq!(gone.status(), 402, "{:?}", json(&gone));
    assert!(!gone.headers().contains_key("idempotent-replayed"));
    assert_eq!(shop.chain.charged(), 1);
    assert_eq!(shop.calls().1, 1, "settled once");
}

/// docs/paying.md: a resend of a payment whose purchase is still running waits for it
/// up to 20 s, then answers `409 in_flight` with Retry-After (inside API Gateway's
/// 30 s). Would catch a resend answered at once (a client left to retry by hand while
/// its purchase was about to finish), or one that waits past the gateway.
#[tokio::test]
async fn a_resend_waits_twenty_seconds_for_the_running_purchase_then_is_in_flight() {
    let shop = shop(|_| {});
    // A settlement that outlasts the resend's wait.
    FakeChain::script(&shop.chain.settle, &[Step::After(Duration::from_secs(60))]);
    let payment = shop.pay().await;
    let state = shop.state.clone();
    let p = payment.clone();
    let running =
        tokio::spawn(async move { umpire_api::handle(&state, request(Some(&p), None)).await });
    shop.chain.settling.notified().await;
    let started = tokio::time::Instant::now();
    let resend = shop.send(Some(&payment), None).await;
    let waited = started.elapsed();
    assert_eq!(resend.status(), 409, "{:?}", json(&resend));
    assert_eq!(error_code(&resend), "in_flight");
    assert!(resend.headers().contains_key("retry-after"));
    assert!(
        waited >= Duration::from_secs(20) && waited < Duration::from_secs(29),
        "waited {waited:?}"
    );
    running.abort();
    assert_eq!(shop.calls().1, 1, "the resend started no settlement");
}

/// A facilitator whose first `/settle` answer is lost (the connection closes with no
/// answer) and whose second settles: every body it was sent, in order.
async fn forgetful_facilitator() -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            // One request per connection: its head, then its Content-Length body.
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let body = loop {
                let Ok(n) = socket.read(&mut chunk).await else {
                    break None;
                };
                if n == 0 {
                    break None;
                }
                buf.extend_from_slice(&chunk[..n]);
                let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + length {
                    break Some(buf[end + 4..end + 4 + length].to_vec());
                }
            };
            let Some(body) = body else { continue };
            let value: serde_json::Value =
                serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
            let n = {
                let mut seen = seen.lock().expect("bodies");
                seen.push(value);
                seen.len()
            };
            if n == 1 {
                // The answer is lost: the connection closes without one.
                drop(socket);
                continue;
            }
            let answer = serde_json::json!({
                "success": true,
                "transaction": "0x00000000000000000000000000000000000000000000000000000000000f0ac1",
                "network": "eip155:31337",
            })
            .to_string();
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}",
                answer.len()
            );
            let _ = socket.write_all(reply.as_bytes()).await;
            let _ = socket.shutdown().await;
        }
    });
    (base, bodies)
}

/// docs/paying.md: a facilitator's lost `/settle` answer is asked for once more, with
/// the same body, and that body carries our requirements, never the client's copy of
/// them (here the client's copy gives itself 60 s where ours say 900). Would catch no
/// retry (a purchase left pending that one more call would have settled), a retry
/// built from the client's copy, or more than one retry.
#[tokio::test]
async fn a_lost_settle_answer_is_asked_again_once_with_our_requirements() {
    use umpire_pay::Settler;
    let shop = shop(|_| {});
    let payment = shop.sign(60).await;
    let ctx = context(&shop.state, &payment);
    let ours = serde_json::to_value(&ctx.requirements).expect("requirements");
    let theirs = ctx.raw["accepted"].clone();
    assert_ne!(ours, theirs, "the client's copy differs from ours");
    let (base, bodies) = forgetful_facilitator().await;
    let facilitator = umpire_pay::settle::FacilitatorClient::new(&base, None).expect("client");
    let settled = facilitator
        .settle(&ctx, Deadline::after(Duration::from_secs(20)))
        .await
        .expect("settled on the retry");
    assert!(settled.success);
    let bodies = bodies.lock().expect("bodies").clone();
    assert_eq!(bodies.len(), 2, "one retry: {bodies:?}");
    assert_eq!(bodies[0], bodies[1], "the retry is the same request");
    assert_eq!(bodies[0]["paymentRequirements"], ours);
    assert_eq!(bodies[0]["paymentPayload"], ctx.raw);
}

// ---- What the purchase buys: the report's window and its anchors (docs/reputation.md).

/// The merchant `PATH` asks about.
const REPORT_MERCHANT: &str = "0x1111111111111111111111111111111111111111";
const DAY: u64 = 86_400;

fn payer(i: u64) -> String {
    format!("0x{:040x}", 0xb000 + i)
}

/// Feedback number `n` for `merchant` from `payer`: its payment's block time, when the
/// row was written, and whether `merchant` was an anchor then.
fn feedback_row(
    n: u64,
    merchant: &str,
    payer: &str,
    block_time: u64,
    created_at: u64,
    anchor: bool,
) -> umpire_store::FeedbackRow {
    umpire_store::FeedbackRow {
        tx_hash: format!("0x{n:064x}"),
        merchant: merchant.into(),
        payer: payer.into(),
        outcome: "fulfilled".into(),
        would_repeat: None,
        latency_ms: None,
        amount_units: "10000".into(),
        block_time,
        created_at,
        anchor,
    }
}

/// The report `PATH` buys, paid.
async fn bought_report(shop: &Shop) -> serde_json::Value {
    let payment = shop.pay().await;
    let bought = shop.send(Some(&payment), None).await;
    assert_eq!(bought.status(), 200, "{:?}", json(&bought));
    json(&bought)["report"].clone()
}

/// docs/reputation.md: the report covers the 90 days before `issued_at` by the block
/// time of the payments, and says so in `window {days, from, to}`. A payment 91 days
/// old on the chain is left out although its row was written two days ago (the payment
/// was 89 days old then, so feedback took it); one 89 days old counts. Would catch: a
/// window read by created_at, a window of another length, or window fields that are not
/// the window the route read.
#[tokio::test]
async fn the_report_reads_the_90_days_before_its_issue_by_block_time() {
    use umpire_store::FeedbackStore as _;
    let shop = shop(|_| {});
    let now = shop.clock.now();
    let old = feedback_row(
        1,
        REPORT_MERCHANT,
        &payer(1),
        now - 91 * DAY,
        now - 2 * DAY,
        false,
    );
    let inside = feedback_row(
        2,
        REPORT_MERCHANT,
        &payer(2),
        now - 89 * DAY,
        now - DAY,
        false,
    );
    for r in [&old, &inside] {
        shop.store.put_feedback(r).await.expect("put feedback");
    }
    let report = bought_report(&shop).await;
    assert_eq!(report["feedback_count"].as_u64(), Some(1), "{report}");
    assert_eq!(
        report["payer_concentration"]["payers_examined"].as_u64(),
        Some(1),
        "the old row's payer is out of the window too: {report}"
    );
    let inside_at = umpire_core::time::rfc3339(inside.block_time);
    assert_eq!(report["first_seen"].as_str(), Some(inside_at.as_str()));
    assert_eq!(report["last_seen"].as_str(), Some(inside_at.as_str()));
    let issued_at = report["issued_at"].as_str().expect("issued_at");
    let issued = umpire_core::time::parse_rfc3339(issued_at).expect("an RFC 3339 time");
    assert!(
        (now..now + 60).contains(&issued),
        "issued at {issued}, bought at {now}"
    );
    let window = &report["window"];
    assert_eq!(window["days"].as_u64(), Some(90), "{window}");
    assert_eq!(window["to"].as_str(), Some(issued_at), "{window}");
    assert_eq!(
        window["from"].as_str(),
        Some(umpire_core::time::rfc3339(issued - 90 * DAY).as_str()),
        "{window}"
    );
}

/// docs/reputation.md: the report lists the anchors in force (`independence.anchors`),
/// and a row records whether its merchant was an anchor when it was written, so
/// changing the list changes the meaning of later rows only. Here the list names NAMED
/// alone: a payer whose row for FORMER was written while FORMER was an anchor stays
/// anchored, and a payer whose row for NAMED was written before NAMED was named is not.
/// Would catch: a report that judges old rows by today's list (both payers would swap),
/// or one that lists anything but the list in force.
#[tokio::test]
async fn the_report_lists_the_anchors_in_force_and_reads_each_rows_own_flag() {
    use umpire_store::FeedbackStore as _;
    const FORMER: &str = "0x4444444444444444444444444444444444444444";
    const NAMED: &str = "0x5555555555555555555555555555555555555555";
    let shop = shop(|c| c.reputation_anchors = vec![NAMED.to_owned()]);
    let now = shop.clock.now();
    let (early, later) = (now - 10 * DAY, now - 5 * DAY);
    let (flagged, unflagged) = (payer(1), payer(2));
    for r in [
        feedback_row(1, FORMER, &flagged, early, early, true),
        feedback_row(2, REPORT_MERCHANT, &flagged, later, later, false),
        feedback_row(3, NAMED, &unflagged, early, early, false),
        feedback_row(4, REPORT_MERCHANT, &unflagged, later, later, false),
    ] {
        shop.store.put_feedback(&r).await.expect("put feedback");
    }
    let report = bought_report(&shop).await;
    let independence = &report["independence"];
    assert_eq!(
        independence["anchors"],
        serde_json::json!([NAMED]),
        "{independence}"
    );
    assert_eq!(
        independence["anchored_payers"].as_u64(),
        Some(1),
        "{independence}"
    );
    assert_eq!(
        independence["anchored_rows"].as_u64(),
        Some(1),
        "{independence}"
    );
    assert_eq!(
        independence["anchored_payer_share"].as_f64(),
        Some(0.5),
        "{independence}"
    );
}
