//! Exactly-once over at-least-once: every delayed job of a sworn verdict delivered three
//! times at once (and the pass-2 job once more, late) still yields one final document
//! and one successful webhook. On both stores: the embedded SQLite store with its
//! delayed jobs (run as `umpire serve`'s worker runs them) and DynamoDB + SQS on the
//! local AWS-compatible server (run through the worker Lambda's batch handler).
//!
//! `make test` starts that server and sets `UMPIRE_TEST_AWS_ENDPOINT`; without it the
//! AWS half fails loudly rather than skipping.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use umpire_api::products::verdict::sworn::{self, JOB_PASS2, webhook_signature};
use umpire_api::routes::jobs::run_job;
use umpire_api::{AppState, Config};
use umpire_blackbox::{Scripted, TempDir};
use umpire_checker::{CheckerPool, PoolConfig, WORKER_ARG};
use umpire_core::hash::sha256_hex;
use umpire_core::json::{Value, parse};
use umpire_core::product::Tier;
use umpire_core::signer::LocalSigner;
use umpire_core::spec::{parse_deliverable, parse_spec};
use umpire_fetch::{FetchConfig, Fetcher, Policy, StaticResolver};
use umpire_functions::aws_lambda_events::event::sqs::SqsEvent;
use umpire_functions::worker::handle_batch;
use umpire_store::dynamo::DynamoStore;
use umpire_store::sqlite::SqliteStore;
use umpire_store::sqs::SqsQueue;
use umpire_store::{
    Job, JobQueue, PaymentClaim, PaymentHold, PaymentMove, PaymentPhase, PaymentState, Store,
    StoredResponse, VerdictRecord, VerdictStatus,
};
use umpire_store::{LedgerStore, VerdictStore};

const SECRET: &str = "sec_exactly_once_test";

/// How each batch of received jobs is run.
#[derive(Clone, Copy)]
enum Runner {
    /// `routes::jobs::run_job` directly, as `umpire serve`'s worker does.
    Local,
    /// The worker Lambda's handler, given an SQS event.
    Lambda,
}

/// The checker function's binary, as the worker starts it locally.
const CHECKER: &str = env!("CARGO_BIN_EXE_checker");

fn state(store: Arc<dyn Store>, queue: Arc<dyn JobQueue>) -> AppState {
    state_with(store, queue, CHECKER, FetchConfig::default().timeout)
}

/// A worker whose checker is the program at `checker` (one that cannot start breaks
/// every pass 2) and whose fetcher (webhooks included) gives up after `fetch_timeout`.
fn state_with(
    store: Arc<dyn Store>,
    queue: Arc<dyn JobQueue>,
    checker: &str,
    fetch_timeout: Duration,
) -> AppState {
    let check_limit = Duration::from_secs(2);
    let checker = CheckerPool::new(PoolConfig {
        program: checker.into(),
        args: vec![WORKER_ARG.to_owned()],
        check_limit,
        max_workers: 4,
    });
    let fetcher = Fetcher::new(
        FetchConfig {
            policy: Policy {
                test_allow: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            },
            timeout: fetch_timeout,
            ..FetchConfig::default()
        },
        Arc::new(StaticResolver::default()),
    )
    .expect("fetcher");
    let config = Config {
        check_limit,
        webhook_retry_base: std::time::Duration::from_millis(50),
        ..Config::default()
    };
    let signer = LocalSigner::from_seed_hex(&"5e".repeat(32)).expect("seed");
    AppState::new(config, Arc::new(signer), store)
        .with_checker(Some(Arc::new(checker)))
        .with_queue(Some(queue))
        .with_fetcher(Some(Arc::new(fetcher)))
}

/// A paid sworn verdict as the purchase leaves it: pending, pass 1 judged, pass 2 queued.
/// `setup` writes what the verdicts function would have written (its own role's work).
async fn bought(
    state: &AppState,
    setup: &dyn Store,
    page: &Scripted,
    hook: std::net::SocketAddr,
) -> (String, Job) {
    let spec = parse(
        format!(
            r#"{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200,"keyword":"up"}}}},{{"type":"regex","pattern":"^ready"}}]}}"#,
            page.addr
        )
        .as_bytes(),
    )
    .expect("spec JSON");
    let purchase = umpire_api::products::verdict::purchase::Purchase {
        tier: Tier::Sworn,
        spec: parse_spec(&spec, Some(Tier::Sworn)).expect("spec"),
        deliverable: parse_deliverable(
            &parse(format!(r#"{{"text":"{DELIVERABLE}"}}"#).as_bytes()).expect("deliverable JSON"),
            "deliverable",
        )
        .expect("deliverable"),
        webhook_url: Some(format!("http://{hook}/hook")),
        job_ref: Some(Value::from("job-once")),
    };
    let pass1 = umpire_api::products::verdict::judge::judge(state, &purchase)
        .await
        .expect("pass 1");
    let verdict_id = umpire_host::random_id("vrd");
    let now = umpire_host::Clock::system().now();
    let preview = sworn::preview(&pass1, now);
    let key = umpire_core::seal::DataKey::from_bytes(umpire_host::random_bytes());
    setup
        .put_verdict(&VerdictRecord {
            verdict_id: verdict_id.clone(),
            tier: umpire_core::product::Tier::Sworn,
            status: VerdictStatus::Pending,
            document: None,
            preview: Some(String::from_utf8_lossy(&preview.to_canonical_vec()).into_owned()),
            secret_hash: sha256_hex(SECRET.as_bytes()),
            spec_hash: purchase.spec.hash.clone(),
            webhook_url: purchase.webhook_url.clone(),
            created_at: now,
            expires_at: now + 86_400,
            webhook_outcome: None,
            job_key: Some(key.to_hex()),
            payer: None,
        })
        .await
        .expect("put verdict");
    // The purchase that sold it, as the paid path records it (pass 2 asks).
    let payment_key = umpire_api::checkout::ledger::raw_payment_key(
        &serde_json::json!({ "payload": verdict_id }),
    );
    assert_eq!(
        setup
            .claim_payment(
                &payment_key,
                "h",
                &PaymentHold {
                    now,
                    held_until: now + 60,
                    expires_at: now + 86_400
                }
            )
            .await
            .expect("claim the payment"),
        PaymentClaim::Won
    );
    for to in [
        PaymentState::Prepared {
            answer: "{}".into(),
            kept_until: 0,
        },
        PaymentState::Settled {
            transaction: "0xfeed".into(),
            response: StoredResponse {
                status: 202,
                headers: Vec::new(),
                body: format!(r#"{{"verdict_id":"{verdict_id}"}}"#),
            },
        },
    ] {
        let step = PaymentMove {
            from: if matches!(to, PaymentState::Prepared { .. }) {
                PaymentPhase::Claimed
            } else {
                PaymentPhase::Prepared
            },
            lapsed_at: None,
            to,
            held_until: now + 60,
            expires_at: now + 86_400,
        };
        assert!(
            setup
                .move_payment(&payment_key, "h", &step)
                .await
                .expect("record the sale")
        );
    }
    let job = sworn::pass2_job(
        &verdict_id,
        &key,
        &purchase,
        &pass1,
        now,
        sworn::Sold {
            payment_key: &payment_key,
            wait_until: now + 60,
            answers_request: false,
        },
    )
    .expect("job");
    (verdict_id, job)
}

/// Runs `copies` copies of every job at once; true per job when every copy succeeded.
async fn run_copies(state: &AppState, runner: Runner, jobs: &[Job], copies: usize) -> Vec<bool> {
    match runner {
        Runner::Local => {
            let runs = jobs
                .iter()
                .flat_map(|job| std::iter::repeat_n(job, copies))
                .map(|job| run_job(state, job));
            let done = futures::future::join_all(runs).await;
            done.chunks(copies)
                .map(|c| c.iter().all(Result::is_ok))
                .collect()
        }
        Runner::Lambda => {
            let records: Vec<serde_json::Value> = jobs
                .iter()
                .enumerate()
                .flat_map(|(i, job)| {
                    (0..copies).map(move |c| {
                        serde_json::json!({
                            "messageId": format!("m{i}-{c}"),
                            "receiptHandle": format!("r{i}-{c}"),
                            "body": SqsQueue::encode(job).expect("encode"),
                            "attributes": {"ApproximateReceiveCount": (c + 1).to_string()},
                            "messageAttributes": {},
                            "eventSource": "aws:sqs",
                        })
                    })
                })
                .collect();
            let event: SqsEvent =
                serde_json::from_value(serde_json::json!({ "Records": records })).expect("event");
            let response = handle_batch(state, event).await;
            let failed: Vec<&str> = response
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.as_str())
                .collect();
            (0..jobs.len())
                .map(|i| !failed.iter().any(|id| id.starts_with(&format!("m{i}-"))))
                .collect()
        }
    }
}

/// Receives jobs until the queue stays empty for a while, running every one three
/// times at once; acknowledges what succeeded. Returns how many jobs it received.
async fn drain(state: &AppState, runner: Runner) -> usize {
    let queue = state.queue.clone().expect("queue");
    let mut received = 0;
    let mut idle_since = Instant::now();
    while idle_since.elapsed() < Duration::from_secs(3) {
        let deliveries = queue.receive(10, 60).await.expect("receive");
        if deliveries.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        received += deliveries.len();
        let jobs: Vec<Job> = deliveries.iter().map(|d| d.job.clone()).collect();
        let done = run_copies(state, runner, &jobs, 3).await;
        for (d, ok) in deliveries.iter().zip(done) {
            assert!(ok, "job {} failed", d.job.kind);
            queue.ack(&d.receipt).await.expect("ack");
        }
        idle_since = Instant::now();
    }
    received
}

/// The sworn deliverable of these tests: long enough that any 16-byte piece of it is
/// its own.
const DELIVERABLE: &str = "ready to ship build 7f3c-91ab-keep-this-private";

/// No 16-byte piece of [`DELIVERABLE`] in `bytes`.
fn holds_no_deliverable(bytes: &[u8]) -> bool {
    let d = DELIVERABLE.as_bytes();
    !d.windows(16).any(|w| bytes.windows(16).any(|b| b == w))
}

async fn exactly_once(
    setup: Arc<dyn Store>,
    store: Arc<dyn Store>,
    queue: Arc<dyn JobQueue>,
    runner: Runner,
) -> Job {
    let page = Scripted::start(vec![(200, "service up")]);
    let hook = Scripted::start(vec![(200, "thanks")]);
    let state = state(store, queue.clone());
    let (verdict_id, pass2) = bought(&state, setup.as_ref(), &page, hook.addr).await;
    assert_eq!(pass2.kind, JOB_PASS2);
    // The job carries the deliverable sealed; what an operator needs stays readable.
    assert!(
        holds_no_deliverable(pass2.payload.as_bytes()),
        "{}",
        pass2.payload
    );
    assert!(pass2.payload.contains("deliverable_hash"));
    queue
        .enqueue(&pass2, std::time::Duration::ZERO)
        .await
        .expect("enqueue pass 2");

    let received = drain(&state, runner).await;
    assert!(
        received >= 2,
        "pass 2 and at least one webhook job were queued"
    );
    let record = state
        .store
        .get_verdict(&verdict_id, umpire_host::Clock::system().now())
        .await
        .expect("get")
        .expect("verdict");
    assert_eq!(record.status, VerdictStatus::Final);
    let document = record.document.clone().expect("final document");
    let parsed = parse(document.as_bytes()).expect("document JSON");
    assert_eq!(
        parsed.get("verdict").and_then(Value::as_str),
        Some("pass"),
        "{document}"
    );

    // A late redelivery of pass 2, after everything is done, changes nothing.
    assert_eq!(
        run_copies(&state, runner, std::slice::from_ref(&pass2), 1).await,
        vec![true]
    );
    drain(&state, runner).await;
    let again = state
        .store
        .get_verdict(&verdict_id, umpire_host::Clock::system().now())
        .await
        .expect("get")
        .expect("verdict");
    assert_eq!(
        again.document.as_deref(),
        Some(document.as_str()),
        "one final document"
    );

    let deliveries = hook.received();
    assert_eq!(deliveries.len(), 1, "one webhook, whatever the queue did");
    let d = &deliveries[0];
    assert_eq!(d.body, document.as_bytes(), "the stored document was sent");
    assert_eq!(
        d.header("x-umpire-signature"),
        Some(webhook_signature(&sha256_hex(SECRET.as_bytes()), &d.body).as_str())
    );
    let now = umpire_host::Clock::system().now();
    let record = state
        .store
        .get_verdict(&verdict_id, now)
        .await
        .expect("read verdict")
        .expect("verdict");
    assert_eq!(sworn::webhook_status(&record), "delivered");
    assert!(
        page.received().len() >= 2,
        "pass 1 and pass 2 fetched the page"
    );
    // Final: the job's key is gone with the pending state, so any copy of the job left
    // anywhere (a retry, the dead-letter queue) can no longer be opened.
    assert_eq!(record.job_key, None);
    pass2
}

/// Runs one delivery as `runner` runs it (its receive count included); true when done.
async fn run_delivered(state: &AppState, runner: Runner, d: &umpire_store::Delivery) -> bool {
    match runner {
        // As `umpire serve`'s worker runs it (no dead-letter queue, no last receive).
        Runner::Local => run_job(state, &d.job).await.is_ok(),
        Runner::Lambda => {
            let event: SqsEvent = serde_json::from_value(serde_json::json!({ "Records": [{
                "messageId": "m",
                "receiptHandle": d.receipt,
                "body": SqsQueue::encode(&d.job).expect("encode"),
                "attributes": {"ApproximateReceiveCount": d.receive_count.to_string()},
                "messageAttributes": {},
                "eventSource": "aws:sqs",
            }]}))
            .expect("event");
            handle_batch(state, event)
                .await
                .batch_item_failures
                .is_empty()
        }
    }
}

/// A paid pass 2 whose every run fails (its checker cannot start), received as the
/// queue hands it out (a 1 s visibility timeout standing in for the queue's own) until
/// the queue stops handing it out, or `most` times; what succeeded is acknowledged.
/// Returns the verdict, the job, and each receive's (count, done, key still there).
async fn failing_pass2(
    setup: Arc<dyn Store>,
    store: Arc<dyn Store>,
    queue: Arc<dyn JobQueue>,
    runner: Runner,
    page: &Scripted,
    hook: &Scripted,
    most: usize,
) -> (String, Job, Vec<(u32, bool, bool)>) {
    let working = state(store.clone(), queue.clone());
    let (verdict_id, pass2) = bought(&working, setup.as_ref(), page, hook.addr).await;
    queue
        .enqueue(&pass2, Duration::ZERO)
        .await
        .expect("enqueue pass 2");
    let broken = state_with(
        store.clone(),
        queue.clone(),
        "/nonexistent/checker",
        FetchConfig::default().timeout,
    );
    let mut receives = Vec::new();
    let mut idle_since = Instant::now();
    while idle_since.elapsed() < Duration::from_secs(3) && receives.len() < most {
        let deliveries = queue.receive(10, 1).await.expect("receive");
        if deliveries.is_empty() {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        for d in deliveries {
            let done = run_delivered(&broken, runner, &d).await;
            let record = broken
                .store
                .get_verdict(&verdict_id, umpire_host::Clock::system().now())
                .await
                .expect("get")
                .expect("the verdict stays");
            assert_eq!(record.status, VerdictStatus::Pending, "never finished");
            if done {
                queue.ack(&d.receipt).await.expect("ack");
            }
            receives.push((d.receive_count, done, record.job_key.is_some()));
        }
        idle_since = Instant::now();
    }
    assert!(hook.received().is_empty(), "no document, no webhook");
    (verdict_id, pass2, receives)
}

/// A webhook receiver that accepts the connection, reads the request and never answers
/// is retried as a 5xx one is: each attempt ends at the fetcher's deadline (300 ms here,
/// 12 s in service), the next is queued, and after the sixth the failure is recorded.
/// Would catch: a timeout taken as final, or retried without end.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_webhook_that_times_out_is_retried_then_given_up() {
    use std::io::Read as _;
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let hook = silent.local_addr().expect("addr");
    let attempts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = attempts.clone();
    std::thread::spawn(move || {
        for mut conn in silent.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).is_ok_and(|n| n == 1) {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                let attempt = head
                    .lines()
                    .find_map(|l| l.strip_prefix("x-umpire-delivery-attempt:"))
                    .and_then(|v| v.trim().parse::<u32>().ok());
                seen.lock().unwrap_or_else(|p| p.into_inner()).push(attempt);
                // Never a word back; the connection held well past the deadline.
                std::thread::sleep(Duration::from_secs(10));
                drop(conn);
            });
        }
    });
    let dir = TempDir::new("worker-sqlite");
    let store = Arc::new(SqliteStore::open_in(dir.path()).expect("sqlite"));
    let page = Scripted::start(vec![(200, "service up")]);
    let state = state_with(
        store.clone(),
        store.clone(),
        CHECKER,
        Duration::from_millis(300),
    );
    let (verdict_id, pass2) = bought(&state, store.as_ref(), &page, hook).await;
    store
        .enqueue(&pass2, Duration::ZERO)
        .await
        .expect("enqueue pass 2");
    drain(&state, Runner::Local).await;
    let record = store
        .get_verdict(&verdict_id, umpire_host::Clock::system().now())
        .await
        .expect("get")
        .expect("verdict");
    assert_eq!(record.status, VerdictStatus::Final);
    assert_eq!(sworn::webhook_status(&record), "failed", "given up");
    let attempts = attempts.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        attempts,
        (1..=sworn::WEBHOOK_MAX_ATTEMPTS)
            .map(Some)
            .collect::<Vec<_>>(),
        "the first attempt and five retries, each once, no more"
    );
}

/// The embedded store has no dead-letter queue, so nothing to shred: a failing pass 2
/// keeps coming back with its key, past the receive that would dead-letter it on SQS,
/// and would still finish once its cause is fixed. Would catch: the local worker giving
/// a paid verdict up after a few minutes of trouble.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store_keeps_a_failing_pass2_and_its_key() {
    let dir = TempDir::new("worker-sqlite");
    let store = Arc::new(SqliteStore::open_in(dir.path()).expect("sqlite"));
    let (page, hook) = (
        Scripted::start(vec![(200, "service up")]),
        Scripted::start(vec![(200, "thanks")]),
    );
    let most = umpire_store::JOB_MAX_RECEIVES as usize + 2;
    let (verdict_id, _, receives) = failing_pass2(
        store.clone(),
        store.clone(),
        store.clone(),
        Runner::Local,
        &page,
        &hook,
        most,
    )
    .await;
    assert_eq!(
        receives,
        (1..=most as u32)
            .map(|n| (n, false, true))
            .collect::<Vec<_>>()
    );
    // Fixed: the next receive finishes it.
    let working = state(store.clone(), store.clone());
    drain(&working, Runner::Local).await;
    let record = store
        .get_verdict(&verdict_id, umpire_host::Clock::system().now())
        .await
        .expect("get")
        .expect("verdict");
    assert_eq!(record.status, VerdictStatus::Final);
    assert_eq!(record.job_key, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_store_one_document_one_webhook() {
    let dir = TempDir::new("worker-sqlite");
    let store = Arc::new(SqliteStore::open_in(dir.path()).expect("sqlite"));
    exactly_once(store.clone(), store.clone(), store, Runner::Local).await;
    // Nothing of the deliverable in the store file, its free pages or its log.
    for entry in std::fs::read_dir(dir.path()).expect("dir").flatten() {
        let bytes = std::fs::read(entry.path()).expect("read");
        assert!(holds_no_deliverable(&bytes), "{}", entry.path().display());
    }
}

mod aws {
    //! On the stack's own tables and queue (created from template.yaml), the worker
    //! acting under its own role: every call it makes passes the IAM gate with exactly
    //! the WorkerFunction policies, or the test fails.
    use super::*;
    use umpire_blackbox::stack::{LocalStack, StackOptions};

    /// The stack, the verdicts function's store (to set up what a purchase leaves), and
    /// the worker's store and queue.
    async fn aws() -> (
        LocalStack,
        Arc<DynamoStore>,
        Arc<DynamoStore>,
        Arc<SqsQueue>,
    ) {
        let stack = tokio::task::spawn_blocking(|| LocalStack::start(StackOptions::default()))
            .await
            .expect("the stack");
        let names = stack.table_names();
        let buyer = stack.sdk_config("VerdictsFunction").await;
        let worker = stack.sdk_config("WorkerFunction").await;
        let setup = DynamoStore::new(aws_sdk_dynamodb::Client::new(&buyer), names.clone());
        let store = DynamoStore::new(aws_sdk_dynamodb::Client::new(&worker), names);
        let queue = SqsQueue::new(aws_sdk_sqs::Client::new(&worker), stack.name("JobsQueue"));
        (stack, Arc::new(setup), Arc::new(store), Arc::new(queue))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn dynamodb_and_sqs_one_document_one_webhook() {
        let (stack, setup, store, queue) = aws().await;
        let pass2 = exactly_once(setup, store, queue, Runner::Lambda).await;
        // A copy of the pass-2 job forced into the dead-letter queue (as five failed
        // receives put it there): its bytes there hold nothing of the deliverable, and
        // its key went with the verdict's pending state.
        let admin = aws_sdk_sqs::Client::new(&stack.admin_config().await);
        let dlq = stack.name("JobsDeadLetterQueue");
        admin
            .send_message()
            .queue_url(&dlq)
            .message_body(SqsQueue::encode(&pass2).expect("encode"))
            .send()
            .await
            .expect("into the DLQ");
        let kept = admin
            .receive_message()
            .queue_url(&dlq)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("read the DLQ");
        let bodies: Vec<&str> = kept.messages().iter().filter_map(|m| m.body()).collect();
        assert!(!bodies.is_empty(), "the DLQ holds the copy");
        for body in bodies {
            assert!(holds_no_deliverable(body.as_bytes()), "{body}");
        }
        let denied = tokio::task::block_in_place(|| stack.denied());
        assert!(denied.is_empty(), "refused: {denied:?}");
    }

    /// The real route to the dead-letter queue: the worker Lambda fails a paid pass 2 on
    /// five receives and SQS moves it on the sixth. On the fifth the job's key is
    /// forgotten, so the copy in the DLQ (kept 14 days) cannot be opened; an operator's
    /// redrive then ends cleanly (acknowledged, nothing judged or sent) and the verdict
    /// stays pending for a refund. Without the shredding the key would outlive the job.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_pass2_failing_five_receives_rests_unreadable_in_the_dlq() {
        let (stack, setup, store, queue) = aws().await;
        let (page, hook) = (
            Scripted::start(vec![(200, "service up")]),
            Scripted::start(vec![(200, "thanks")]),
        );
        let (verdict_id, _, receives) = failing_pass2(
            setup,
            store.clone(),
            queue.clone(),
            Runner::Lambda,
            &page,
            &hook,
            10,
        )
        .await;
        // The key kept through every failed receive but the last, and gone after it.
        let last = umpire_store::JOB_MAX_RECEIVES;
        assert_eq!(
            receives,
            (1..=last).map(|n| (n, false, n < last)).collect::<Vec<_>>(),
            "five failed receives, then SQS keeps it from the worker"
        );
        // SQS moved it to the dead-letter queue; the operator reads it there.
        let admin = aws_sdk_sqs::Client::new(&stack.admin_config().await);
        let dlq = stack.name("JobsDeadLetterQueue");
        let kept = admin
            .receive_message()
            .queue_url(&dlq)
            .max_number_of_messages(10)
            .send()
            .await
            .expect("read the DLQ");
        let [message] = kept.messages() else {
            panic!("the DLQ holds the job once: {kept:?}");
        };
        let body = message.body().expect("body");
        assert!(body.contains(&verdict_id), "it names its verdict: {body}");
        assert!(holds_no_deliverable(body.as_bytes()), "{body}");
        // The operator's redrive (what start-message-move-task does): back to the jobs
        // queue, out of the DLQ.
        admin
            .send_message()
            .queue_url(stack.name("JobsQueue"))
            .message_body(body)
            .send()
            .await
            .expect("redrive");
        admin
            .delete_message()
            .queue_url(&dlq)
            .receipt_handle(message.receipt_handle().expect("handle"))
            .send()
            .await
            .expect("out of the DLQ");
        let working = state(store.clone(), queue.clone());
        let fetched = page.received().len();
        assert_eq!(drain_once(&working, queue.as_ref()).await, 1, "redriven");
        assert_eq!(page.received().len(), fetched, "nothing judged again");
        let record = store
            .get_verdict(&verdict_id, umpire_host::Clock::system().now())
            .await
            .expect("get")
            .expect("verdict");
        assert_eq!(record.status, VerdictStatus::Pending);
        assert!(hook.received().is_empty(), "no document, no webhook");
        let denied = tokio::task::block_in_place(|| stack.denied());
        assert!(denied.is_empty(), "refused: {denied:?}");
    }

    /// Receives once (after waiting up to 5 s for something) and runs each job through
    /// the Lambda handler; each must succeed and is acknowledged. How many there were.
    async fn drain_once(state: &AppState, queue: &dyn JobQueue) -> usize {
        let started = Instant::now();
        loop {
            let deliveries = queue.receive(10, 30).await.expect("receive");
            if deliveries.is_empty() && started.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
            for d in &deliveries {
                assert!(run_delivered(state, Runner::Lambda, d).await, "done");
                queue.ack(&d.receipt).await.expect("ack");
            }
            return deliveries.len();
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_lambda_reports_only_the_failed_messages() {
        let (_stack, _, store, queue) = aws().await;
        let state = state(store, queue);
        let gone = Job {
            kind: JOB_PASS2.into(),
            payload: r#"{"verdict_id":"vrd_voided"}"#.into(),
        };
        let event: SqsEvent = serde_json::from_value(serde_json::json!({ "Records": [
            // Pass 2 of a voided purchase: nothing to do, done.
            {"messageId": "done", "body": SqsQueue::encode(&gone).expect("encode")},
            // Not a job at all: reported, so it ends in the dead-letter queue.
            {"messageId": "garbage", "body": "not json"},
            // A job whose payload is unreadable: reported for another try.
            {"messageId": "broken", "body": SqsQueue::encode(&Job {
                kind: JOB_PASS2.into(),
                payload: "{".into(),
            }).expect("encode")},
        ]}))
        .expect("event");
        let response = handle_batch(&state, event).await;
        let failed: Vec<&str> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.as_str())
            .collect();
        assert_eq!(failed, vec!["garbage", "broken"]);
        // The wire shape Lambda reads.
        assert_eq!(
            serde_json::to_value(&response).expect("json"),
            serde_json::json!({"batchItemFailures": [
                {"itemIdentifier": "garbage"}, {"itemIdentifier": "broken"}
            ]})
        );
    }
}

/// Pass 2 of a purchase whose settlement is pending (its answer prepared, the outcome
/// not known in time): it waits a pass-2 delay at a time, counting its hops, however
/// long the chain takes — five minutes past the hold it once gave up at, still waiting,
/// its deliverable still readable — and runs once the purchase's reconciler delivers
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_two_waits_for_a_pending_purchase_however_long_then_runs() {
    let dir = TempDir::new("worker-unresolved");
    let store = Arc::new(SqliteStore::open_in(dir.path()).expect("sqlite"));
    let mut state = state(store.clone(), store.clone());
    state.config.sworn_delay_secs = 0;
    let now = umpire_host::Clock::system().now();
    let verdict_id = umpire_host::random_id("vrd");
    let key = umpire_core::seal::DataKey::from_bytes(umpire_host::random_bytes());
    store
        .put_verdict(&VerdictRecord {
            verdict_id: verdict_id.clone(),
            tier: umpire_core::product::Tier::Sworn,
            status: VerdictStatus::Pending,
            document: None,
            preview: None,
            secret_hash: sha256_hex(SECRET.as_bytes()),
            spec_hash: "0".repeat(64),
            webhook_url: None,
            created_at: now,
            expires_at: now + 3600,
            webhook_outcome: None,
            job_key: Some(key.to_hex()),
            payer: None,
        })
        .await
        .expect("a pending verdict");
    // Its purchase: claimed, its answer prepared, the settlement's outcome never heard.
    let payment_key =
        umpire_api::checkout::ledger::raw_payment_key(&serde_json::json!({"payload": "lost"}));
    assert_eq!(
        store
            .claim_payment(
                &payment_key,
                "h",
                &PaymentHold {
                    now,
                    held_until: now + 600,
                    expires_at: now + 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Won
    );
    let prepared = umpire_api::checkout::Prepared::new(
        202,
        &Value::object().with("verdict_id", verdict_id.as_str()),
        &[],
    );
    assert!(
        store
            .move_payment(
                &payment_key,
                "h",
                &PaymentMove {
                    from: PaymentPhase::Claimed,
                    lapsed_at: None,
                    to: PaymentState::Prepared {
                        answer: serde_json::to_string(&prepared).expect("json"),
                        kept_until: 0,
                    },
                    held_until: now + 600,
                    expires_at: now + 86_400,
                },
            )
            .await
            .expect("prepare")
    );
    let spec = parse_spec(
        &parse(br#"{"checks":[{"type":"length","min":1}]}"#).expect("json"),
        Some(Tier::Sworn),
    )
    .expect("spec");
    let purchase = umpire_api::products::verdict::purchase::Purchase {
        tier: Tier::Sworn,
        spec,
        deliverable: parse_deliverable(&parse(br#"{"text":"x"}"#).expect("json"), "d")
            .expect("deliverable"),
        webhook_url: None,
        job_ref: None,
    };

    // Before the hold lapses: queued again, one hop more.
    let job = sworn::pass2_job(
        &verdict_id,
        &key,
        &purchase,
        &[],
        now,
        sworn::Sold {
            payment_key: &payment_key,
            wait_until: now + 600,
            answers_request: false,
        },
    )
    .expect("job");
    run_job(&state, &job).await.expect("waits");
    let again = store.receive(10, 60).await.expect("receive");
    assert_eq!(again.len(), 1, "pass 2 asked again");
    let payload = parse(again[0].job.payload.as_bytes()).expect("payload");
    assert_eq!(payload.get("hops").and_then(Value::as_u64), Some(1));

    // Five minutes past the hold it once gave up at: still waiting, one hop more, the
    // deliverable still readable.
    let late = sworn::pass2_job(
        &verdict_id,
        &key,
        &purchase,
        &[],
        now,
        sworn::Sold {
            payment_key: &payment_key,
            wait_until: now - 300,
            answers_request: false,
        },
    )
    .expect("job");
    run_job(&state, &late).await.expect("waits");
    store.ack(&again[0].receipt).await.expect("ack");
    let waiting = store.receive(10, 60).await.expect("receive");
    assert_eq!(waiting.len(), 1, "pass 2 asked again");
    let record = store
        .get_verdict(&verdict_id, umpire_host::Clock::system().now())
        .await
        .expect("get")
        .expect("still there");
    assert_eq!(record.status, VerdictStatus::Pending);
    assert!(
        record.job_key.is_some(),
        "its deliverable is still readable"
    );

    // The reconciler delivers the purchase: the next hop runs pass 2.
    assert!(
        store
            .move_payment(
                &payment_key,
                "h",
                &PaymentMove {
                    from: PaymentPhase::Prepared,
                    lapsed_at: None,
                    to: PaymentState::Settled {
                        transaction: format!("0x{}", "ab".repeat(32)),
                        response: umpire_store::StoredResponse {
                            status: 202,
                            headers: Vec::new(),
                            body: Value::object()
                                .with("verdict_id", verdict_id.as_str())
                                .to_canonical_string(),
                        },
                    },
                    held_until: now,
                    expires_at: now + 86_400,
                },
            )
            .await
            .expect("settled")
    );
    run_job(&state, &waiting[0].job).await.expect("pass 2 runs");
    store.ack(&waiting[0].receipt).await.expect("ack");
    let record = store
        .get_verdict(&verdict_id, umpire_host::Clock::system().now())
        .await
        .expect("get")
        .expect("still there");
    assert_eq!(record.status, VerdictStatus::Final, "pass 2 ran");
    assert!(record.document.is_some());
    assert_eq!(record.job_key, None, "its deliverable is gone with pass 2");
}

/// The fields of every event logged while a future runs, as (name, value) pairs: what an
/// operator reads in the logs (a verdict id, a metric's name outside Lambda).
#[derive(Clone, Default)]
struct Logged(Arc<std::sync::Mutex<Vec<LoggedEvent>>>);

/// One event's fields, in the order it recorded them.
type LoggedEvent = Vec<(String, String)>;

impl Logged {
    fn events(&self) -> Vec<LoggedEvent> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// How many events carried `name` = `value`.
    fn count(&self, name: &str, value: &str) -> usize {
        self.events()
            .iter()
            .filter(|fields| fields.iter().any(|(n, v)| n == name && v == value))
            .count()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Logged {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        struct Fields(Vec<(String, String)>);
        impl tracing::field::Visit for Fields {
            fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
                self.0.push((field.name().to_owned(), value.to_owned()));
            }
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                self.0.push((field.name().to_owned(), format!("{value:?}")));
            }
        }
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(fields.0);
    }
}

/// docs/sworn.md: pass 2 of a purchase still being worked on (claimed, never prepared;
/// here the customer's retry took the payment over as the first request's hold lapsed,
/// and is itself still running) waits until the purchase's hold and one hold more
/// (`wait_until`, as the purchase sets it: its hold twice), then gives up: no hop
/// carries the deliverable on, the job's key is forgotten (no copy of the job opens
/// any more), the verdict id is logged, `SwornUnresolved` is recorded, and the verdict
/// stays pending for an operator. Would catch: giving up at the lapse itself (racing
/// the retry), deleting a verdict whose payment may still settle, waiting for ever
/// with the deliverable readable, or giving up without a word to the alarm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pass_two_gives_up_on_a_claimed_purchase_after_its_hold_and_one_more() {
    use tracing::instrument::WithSubscriber as _;
    use tracing_subscriber::layer::SubscriberExt as _;

    let dir = TempDir::new("worker-claimed");
    let store = Arc::new(SqliteStore::open_in(dir.path()).expect("sqlite"));
    let mut state = state(store.clone(), store.clone());
    state.config.sworn_delay_secs = 0;
    // A clock the test moves, stopped otherwise: holds lapse when the test says, and a
    // slow machine cannot carry a step past the moment it is about.
    let clock = umpire_host::Clock::stopped_at(umpire_host::Clock::system().now_ms());
    state.config.clock = clock.clone();
    let hold = u64::from(state.config.in_progress_secs);
    let t0 = clock.now();
    let verdict_id = umpire_host::random_id("vrd");
    let key = umpire_core::seal::DataKey::from_bytes(umpire_host::random_bytes());
    store
        .put_verdict(&VerdictRecord {
            verdict_id: verdict_id.clone(),
            tier: umpire_core::product::Tier::Sworn,
            status: VerdictStatus::Pending,
            document: None,
            preview: None,
            secret_hash: sha256_hex(SECRET.as_bytes()),
            spec_hash: "0".repeat(64),
            webhook_url: None,
            created_at: t0,
            expires_at: t0 + 86_400,
            webhook_outcome: None,
            job_key: Some(key.to_hex()),
            payer: None,
        })
        .await
        .expect("a pending verdict");
    // Its purchase: claimed by its request, which never got as far as preparing.
    let payment_key =
        umpire_api::checkout::ledger::raw_payment_key(&serde_json::json!({"payload": "claimed"}));
    assert_eq!(
        store
            .claim_payment(
                &payment_key,
                "first",
                &PaymentHold {
                    now: t0,
                    held_until: t0 + hold,
                    expires_at: t0 + 86_400
                }
            )
            .await
            .expect("claim"),
        PaymentClaim::Won
    );
    let spec = parse_spec(
        &parse(br#"{"checks":[{"type":"length","min":1}]}"#).expect("json"),
        Some(Tier::Sworn),
    )
    .expect("spec");
    let purchase = umpire_api::products::verdict::purchase::Purchase {
        tier: Tier::Sworn,
        spec,
        deliverable: parse_deliverable(&parse(br#"{"text":"x"}"#).expect("json"), "d")
            .expect("deliverable"),
        webhook_url: None,
        job_ref: None,
    };
    let job = sworn::pass2_job(
        &verdict_id,
        &key,
        &purchase,
        &[],
        t0,
        sworn::Sold {
            payment_key: &payment_key,
            wait_until: t0 + 2 * hold,
            answers_request: false,
        },
    )
    .expect("job");
    let hops = |d: &umpire_store::Delivery| {
        parse(d.job.payload.as_bytes())
            .expect("payload")
            .get("hops")
            .and_then(Value::as_u64)
    };

    // While the purchase is held: asked again, one hop more.
    run_job(&state, &job).await.expect("waits");
    let first = store.receive(10, 60).await.expect("receive");
    assert_eq!(first.len(), 1, "pass 2 asked again");
    assert_eq!(hops(&first[0]), Some(1));
    store.ack(&first[0].receipt).await.expect("ack");

    // The first request's hold lapsed; the customer's retry took the payment over and
    // is still at it. Past the hold, short of one hold more: still waiting, the
    // verdict and its key kept.
    clock.advance(hold + 10);
    assert_eq!(
        store
            .claim_payment(
                &payment_key,
                "retry",
                &PaymentHold {
                    now: clock.now(),
                    held_until: clock.now() + hold,
                    expires_at: t0 + 86_400
                }
            )
            .await
            .expect("the retry's claim"),
        PaymentClaim::Won
    );
    run_job(&state, &first[0].job).await.expect("waits");
    let second = store.receive(10, 60).await.expect("receive");
    assert_eq!(second.len(), 1, "pass 2 asked again past the hold");
    assert_eq!(hops(&second[0]), Some(2));
    let record = store
        .get_verdict(&verdict_id, clock.now())
        .await
        .expect("get")
        .expect("kept past the hold");
    assert!(
        record.job_key.is_some(),
        "still readable short of one hold more"
    );

    // The hold and one hold more have passed, the purchase still claimed: given up.
    clock.advance(hold - 10);
    assert_eq!(clock.now(), t0 + 2 * hold);
    let logged = Logged::default();
    run_job(&state, &second[0].job)
        .with_subscriber(tracing_subscriber::registry().with(logged.clone()))
        .await
        .expect("given up, not failed");
    store.ack(&second[0].receipt).await.expect("ack");
    assert!(
        store.receive(10, 60).await.expect("receive").is_empty(),
        "no hop carries the deliverable on"
    );
    let record = store
        .get_verdict(&verdict_id, clock.now())
        .await
        .expect("get")
        .expect("the verdict stays for an operator");
    assert_eq!(record.status, VerdictStatus::Pending);
    assert_eq!(record.document, None);
    assert_eq!(record.job_key, None, "no copy of the job opens any more");
    assert_eq!(
        logged.count("metric", "SwornUnresolved"),
        1,
        "{:?}",
        logged.events()
    );
    assert!(
        logged.events().iter().any(|fields| {
            fields
                .iter()
                .any(|(n, v)| n == "verdict_id" && *v == verdict_id)
                && fields
                    .iter()
                    .any(|(n, v)| n == "message" && v.contains("gave up"))
        }),
        "the verdict id logged with the giving up: {:?}",
        logged.events()
    );
}
