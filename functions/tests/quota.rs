//! The stack on an account with little concurrency, as new AWS accounts have (a quota of
//! 10; a purchase takes two executions, the verdicts function and its checker). The
//! stack emulator refuses an invocation past the quota as Lambda does (429
//! TooManyRequestsException); here the quota is 2 and the account's other functions
//! hold one slot (`LocalStack::hold`):
//! - a purchase whose checker cannot run answers 503 with Retry-After and charges
//!   nothing; once capacity is back the same buyer is served;
//! - a sworn pass-2 job whose checker cannot run stays queued and is finished when
//!   capacity is back, not lost.
//!
//! `make test` starts the local AWS server and sets `UMPIRE_TEST_AWS_ENDPOINT`.

use std::time::Duration;

use umpire_blackbox::chain::{Devnet, FACILITATOR_TOKEN, Facilitator, buy_v2};
use umpire_blackbox::request;
use umpire_blackbox::stack::{LocalStack, StackOptions};

fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn throttled(stack: &LocalStack, function: &str) -> u64 {
    stack.stats()["throttled"][function].as_u64().unwrap_or(0)
}

/// The stack selling on `devnet` through `facilitator`, its functions run, on an account
/// whose concurrency quota is `quota`; pass 2 due `sworn_delay` seconds after pass 1.
fn facilitator_stack(
    devnet: &Devnet,
    facilitator: &Facilitator,
    sworn_delay: u32,
    quota: u32,
) -> LocalStack {
    tokio::task::block_in_place(|| {
        LocalStack::start(StackOptions {
            params: vec![
                ("EvmPayTo".to_owned(), devnet.get("pay_to")),
                ("EvmNetwork".to_owned(), devnet.get("network")),
                ("FacilitatorUrl".to_owned(), facilitator.url.clone()),
            ],
            secrets: vec![(
                "FacilitatorAuthSecretArn".to_owned(),
                format!("Bearer {FACILITATOR_TOKEN}"),
            )],
            env: vec![
                ("UMPIRE_EVM_ASSET".to_owned(), devnet.get("asset")),
                ("UMPIRE_EVM_ASSET_NAME".to_owned(), devnet.get("asset_name")),
                (
                    "UMPIRE_EVM_ASSET_VERSION".to_owned(),
                    devnet.get("asset_version"),
                ),
                (
                    "UMPIRE_SWORN_DELAY_SECONDS".to_owned(),
                    sworn_delay.to_string(),
                ),
            ],
            run_functions: true,
            concurrency: Some(quota),
            ..StackOptions::default()
        })
    })
}

const BASIC: &str =
    r#"{"spec":{"checks":[{"type":"length","min":1}]},"deliverable":{"text":"hello"}}"#;
const SWORN: &str = r#"{"spec":{"checks":[{"type":"regex","pattern":"^ready"}]},"deliverable":{"text":"ready to ship"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_accounts_quota_a_purchase_is_refused_free_and_pass_two_waits() {
    let devnet = Devnet::start();
    let facilitator = Facilitator::start(&devnet, None);
    // Long enough for the test to take its slot after the 202, whatever the machine's
    // load, before pass 2 is due.
    let stack = facilitator_stack(&devnet, &facilitator, 15, 2);
    let api = stack.api.expect("api");
    let url = |path: &str| format!("http://{api}{path}");
    let pay_to = devnet.get("pay_to");

    // One slot taken elsewhere in the account: the verdicts function runs, its checker
    // is throttled.
    stack.hold(1);
    let refused =
        tokio::task::block_in_place(|| buy_v2(&devnet, &url("/v1/verdicts/basic"), BASIC, None));
    assert_eq!(refused.status, 503, "{}", refused.body);
    let retry_after = refused
        .header("retry-after")
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("Retry-After on the 503: {:?}", refused.headers));
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert_eq!(
        refused
            .json()
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(|c| c.as_str()),
        Some("unavailable")
    );
    assert!(
        throttled(&stack, "CheckerFunction") >= 1,
        "{}",
        stack.stats()
    );
    assert_eq!(
        devnet.balance(&pay_to),
        0,
        "nothing charged for the refusal"
    );

    // Capacity back: the buyer is served.
    stack.hold(0);
    let served =
        tokio::task::block_in_place(|| buy_v2(&devnet, &url("/v1/verdicts/basic"), BASIC, None));
    assert_eq!(served.status, 201, "{}", served.body);
    let charged = devnet.balance(&pay_to);
    assert!(charged > 0, "the served purchase is paid");

    // Pass 2 past the quota: jobs come back quickly here (the queue's visibility, 540 s
    // in the template, is shortened), and keep failing while the checker is throttled.
    let admin = stack.admin_config().await;
    aws_sdk_sqs::Client::new(&admin)
        .set_queue_attributes()
        .queue_url(stack.name("JobsQueue"))
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            "2",
        )
        .send()
        .await
        .expect("a short visibility");
    let sworn =
        tokio::task::block_in_place(|| buy_v2(&devnet, &url("/v1/verdicts/sworn"), SWORN, None));
    assert_eq!(sworn.status, 202, "{}", sworn.body);
    let v = sworn.json();
    let field = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_else(|| panic!("no {k}: {}", sworn.body))
            .to_owned()
    };
    let (id, secret) = (field("verdict_id"), field("secret"));
    stack.hold(1);
    let before = throttled(&stack, "PassTwoCheckerFunction");
    tokio::task::block_in_place(|| {
        wait_until(
            "pass 2's checker throttled twice",
            Duration::from_secs(60),
            || throttled(&stack, "PassTwoCheckerFunction") >= before + 2,
        )
    });
    let status = || {
        let r = request(
            api,
            "GET",
            &format!("/v1/verdicts/{id}"),
            &[("Authorization", &format!("Bearer {secret}"))],
            None,
        );
        r.json()
            .get("status")
            .and_then(|s| s.as_str())
            .map(str::to_owned)
            .unwrap_or_default()
    };
    // Read where the status route would (the route itself needs a slot).
    let stored = aws_sdk_dynamodb::Client::new(&admin)
        .get_item()
        .table_name(stack.name("VerdictsTable"))
        .key(
            "verdict_id",
            aws_sdk_dynamodb::types::AttributeValue::S(id.clone()),
        )
        .send()
        .await
        .expect("the verdict");
    let pending = stored
        .item()
        .and_then(|i| i.get("status"))
        .and_then(|s| s.as_s().ok())
        .cloned();
    assert_eq!(
        pending.as_deref(),
        Some("pending"),
        "not finished while throttled"
    );
    stack.hold(0);
    tokio::task::block_in_place(|| {
        wait_until("the final sworn document", Duration::from_secs(120), || {
            status() == "final"
        })
    });
}

/// docs/sworn.md, aws.md: on a new account's quota of 10, a burst of 20 pass-2 jobs, all
/// due at once, runs within the jobs' share (a worker and its checker per job,
/// `WorkerConcurrency` of them at once: 4 executions) while the free routes answer:
/// nothing anywhere is throttled, `/healthz` answers 200 throughout, and every job ends
/// final; the account's peak stays within the jobs' share and one `/healthz`. What it
/// cannot show here: a batch of 5 jobs run side by side (the old trigger) peaked at 4
/// too, as the local server answers one request at a time and staggers the jobs' reads,
/// so their checker calls hardly overlap; the template test holds the batch size at 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_pass_two_jobs_stays_within_a_new_accounts_quota() {
    const JOBS: usize = 20;
    let devnet = Devnet::start();
    let facilitator = Facilitator::start(&devnet, None);
    let stack = facilitator_stack(&devnet, &facilitator, 1, 10);
    let api = stack.api.expect("api");
    let url = format!("http://{api}/v1/verdicts/sworn");
    // The jobs pile up while the trigger is paused, then all come due together.
    stack.pause_triggers(true);
    for n in 0..JOBS {
        let bought = tokio::task::block_in_place(|| buy_v2(&devnet, &url, SWORN, None));
        assert_eq!(bought.status, 202, "purchase {n}: {}", bought.body);
    }
    std::thread::sleep(Duration::from_secs(2));
    stack.pause_triggers(false);

    let admin = stack.admin_config().await;
    let db = aws_sdk_dynamodb::Client::new(&admin);
    let table = stack.name("VerdictsTable");
    let finals = || async {
        let items = db
            .scan()
            .table_name(&table)
            .send()
            .await
            .expect("scan the verdicts");
        items
            .items()
            .iter()
            .filter(|i| {
                i.get("status")
                    .and_then(|s| s.as_s().ok())
                    .map(String::as_str)
                    == Some("final")
            })
            .count()
    };
    let started = std::time::Instant::now();
    let mut health_checks = 0;
    while finals().await < JOBS {
        assert!(
            started.elapsed() < Duration::from_secs(240),
            "every pass 2 done: {} of {JOBS}, {}",
            finals().await,
            stack.stats()
        );
        let health = tokio::task::block_in_place(|| request(api, "GET", "/healthz", &[], None));
        assert_eq!(
            health.status,
            200,
            "/healthz during the burst: {}",
            String::from_utf8_lossy(&health.body)
        );
        health_checks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(health_checks > 0, "the burst was watched");
    let stats = stack.stats();
    let peak = stats["peak_in_flight"].as_u64().unwrap_or(u64::MAX);
    eprintln!("the burst's peak: {peak} executions at once");
    // Two workers, each with its checker, and the test's one /healthz at a time.
    assert!(peak <= 5, "the jobs' share and /healthz: {stats}");
    assert_eq!(
        stats["throttled"],
        serde_json::json!({}),
        "nothing throttled: {stats}"
    );
}
