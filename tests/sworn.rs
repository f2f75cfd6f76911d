//! Sworn verdicts end to end on `umpire serve` (embedded store and its delayed jobs):
//! bought on the devnet, pass 2 a second later, the final document at the status link
//! and at a webhook receiver whose signature check is the contract's Node recipe.

use std::time::{Duration, Instant};

use umpire_blackbox::chain::{Devnet, Settlement, buy_v2, node_json, node_json_verdict};
use umpire_blackbox::{Scripted, Server, TempDir, python_recipe, urlencode};
use umpire_core::json::{Value, parse};

const FAST: &[(&str, &str)] = &[
    ("UMPIRE_SWORN_DELAY_SECONDS", "1"),
    ("UMPIRE_WEBHOOK_RETRY_BASE_MS", "100"),
    ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"),
];

fn key() -> String {
    umpire_host::random_id("idem")
}

fn sworn_body(page: &Scripted, hook: &Scripted) -> String {
    format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200,"keyword":"up"}}}},{{"type":"regex","pattern":"^ready"}}]}},"deliverable":{{"text":"ready to ship"}},"webhook_url":"http://{}/hook","job_ref":"job-7"}}"#,
        page.addr, hook.addr
    )
}

/// Polls the status link until the verdict is final.
fn final_status(server: &Server, id: &str, secret: &str, within: Duration) -> Value {
    let started = Instant::now();
    loop {
        let r = server.verdict_status(id, secret);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        if v.get("status").and_then(Value::as_str) == Some("final") {
            return v;
        }
        assert!(
            started.elapsed() < within,
            "still pending after {within:?}: {v:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Waits until `done` says the receiver has seen enough.
fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no {k} in {v:?}"))
}

#[test]
fn a_sworn_verdict_reaches_the_webhook_and_the_status_link() {
    let page = Scripted::start(vec![(200, "service up")]);
    let hook = Scripted::start(vec![(200, "thanks")]);
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, FAST);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let body = sworn_body(&page, &hook);
    let bought = buy_v2(
        &devnet,
        &format!("http://{}/v1/verdicts/sworn", server.addr),
        &body,
        Some(&key()),
    );
    assert_eq!(bought.status, 202, "{}", bought.body);
    assert_eq!(
        devnet.balance(&payer),
        payer0 - umpire_blackbox::PRICE_SWORN,
        "sworn costs $5"
    );
    let answered_at = umpire_host::Clock::system().now();
    let answer = bought.json();
    assert_eq!(str_of(&answer, "status"), "pending");
    let pass1 = answer.get("pass1").expect("pass 1 results");
    assert_eq!(str_of(pass1, "verdict_so_far"), "pass");
    let id = str_of(&answer, "verdict_id").to_owned();
    // docs/sworn.md: the 202 carries its status link and when pass 2 is due, the
    // pass-2 delay (1 s here) after the answer (give or take the request's seconds).
    assert!(
        str_of(&answer, "status_url").ends_with(&format!("/v1/verdicts/{id}")),
        "{answer}"
    );
    let due = umpire_core::time::parse_rfc3339(str_of(&answer, "final_due_at"))
        .expect("final_due_at is an RFC 3339 time");
    assert!(
        (answered_at.saturating_sub(30)..=answered_at + 2).contains(&due),
        "final_due_at {due} is the 1 s delay after the answer at {answered_at}"
    );
    let secret = str_of(&answer, "secret").to_owned();

    let status = final_status(&server, &id, &secret, Duration::from_secs(30));
    let document = status.get("document").cloned().expect("final document");
    assert_eq!(str_of(&document, "verdict"), "pass");
    assert_eq!(str_of(&document, "tier"), "sworn");
    assert_eq!(str_of(&document, "job_ref"), "job-7");
    let probe = &document
        .get("results")
        .and_then(Value::as_array)
        .expect("results")[0];
    assert_eq!(
        probe
            .get("observations")
            .and_then(Value::as_array)
            .map(Vec::len),
        Some(2),
        "one observation per pass"
    );
    assert_eq!(
        page.received().len(),
        2,
        "the page was fetched once per pass"
    );

    // The webhook: one delivery of exactly the final document, signed as the contract says.
    // Recorded as delivered once the receiver took it; nothing is sent after that.
    wait_for("the webhook recorded", Duration::from_secs(20), || {
        final_status(&server, &id, &secret, Duration::from_secs(1))
            .get("webhook_delivery")
            .and_then(Value::as_str)
            == Some("delivered")
    });
    let deliveries = hook.received();
    assert_eq!(deliveries.len(), 1, "delivered once");
    let d = &deliveries[0];
    assert_eq!(d.method, "POST");
    assert_eq!(parse(&d.body).expect("JSON body"), document);
    let tmp = TempDir::new("webhook");
    let raw = tmp.write("body.json", &d.body);
    let signature = d
        .header("x-umpire-signature")
        .expect("X-Umpire-Signature")
        .to_owned();
    // The contract's delivery headers: which verdict, which attempt.
    assert_eq!(d.header("x-umpire-verdict-id"), Some(id.as_str()));
    assert_eq!(d.header("x-umpire-delivery-attempt"), Some("1"));
    let check = node_json(
        "tests/js/verify_webhook.mjs",
        &[
            "--secret",
            &secret,
            "--body",
            raw.to_str().expect("path"),
            "--signature",
            &signature,
        ],
    );
    assert_eq!(
        check["ok"], true,
        "the Node recipe rejects the signature: {check}"
    );
    let (verified, forged) = node_json_verdict(
        "tests/js/verify_webhook.mjs",
        &[
            "--secret",
            "sec_wrong",
            "--body",
            raw.to_str().expect("path"),
            "--signature",
            &signature,
        ],
    );
    assert_eq!(forged["ok"], false, "a wrong secret must not verify");
    assert!(
        !verified,
        "the recipe exits non-zero on a signature that does not verify"
    );

    // The document verifies offline, and find recovers the id.
    let keys = tmp.write(
        "keys.json",
        &server.get("/.well-known/umpire-key.json").body,
    );
    let doc_path = tmp.write("doc.json", &document.to_canonical_vec());
    let deliverable = tmp.write("deliverable.json", br#"{"text":"ready to ship"}"#);
    let (ok, said) = python_recipe(&doc_path, &keys, &deliverable);
    assert!(ok, "{said}");
    let webhook = format!("http://{}/hook", hook.addr);
    let found = server
        .get(&format!(
            "/v1/find?spec_hash={}&webhook={}",
            str_of(&document, "spec_hash"),
            urlencode(&webhook)
        ))
        .json();
    assert_eq!(
        found.get("verdict_ids"),
        Some(&Value::Array(vec![Value::from(id.as_str())]))
    );
    let again = final_status(&server, &id, &secret, Duration::from_secs(1));
    assert_eq!(str_of(&again, "webhook_delivery"), "delivered");
}

/// docs/sworn.md: a sworn settlement that fails after pass 1 (the payer's funds left
/// between verification and settlement) voids the purchase: the pending verdict is
/// deleted (find knows no id for the spec and webhook), and the pass 2 queued before
/// the settlement runs and does nothing (the webhook is never called), nothing
/// charged. Would catch: a pending verdict left behind for a sale that never
/// happened, or pass 2 finishing (and signing, and calling the webhook) unpaid.
#[test]
fn a_sworn_settlement_that_fails_leaves_no_verdict_and_pass_two_does_nothing() {
    let page = umpire_blackbox::Held::start("service up");
    let hook = Scripted::start(vec![(200, "thanks")]);
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, FAST);
    let webhook = format!("http://{}/hook", hook.addr);
    let spec = format!(
        r#"{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200,"keyword":"up"}}}}]}}"#,
        page.addr
    );
    let body =
        format!(r#"{{"spec":{spec},"deliverable":{{"text":"ready"}},"webhook_url":"{webhook}"}}"#);
    let spec_hash = server
        .validate(&format!(r#"{{"tier":"sworn","spec":{spec}}}"#))
        .json()
        .get("spec_hash")
        .and_then(Value::as_str)
        .expect("spec_hash")
        .to_owned();
    let payer = devnet.get("payer");
    let elsewhere = devnet.get("settler");
    let payer0 = devnet.balance(&payer);
    let pay_to = devnet.get("pay_to");
    let earned0 = devnet.balance(&pay_to);
    let url = format!("http://{}/v1/verdicts/sworn", server.addr);
    let payment = umpire_blackbox::chain::sign_payment(&devnet, &url, &body);
    let purchase = umpire_blackbox::pay_in_background(
        server.addr,
        "/v1/verdicts/sworn",
        &body,
        &payment,
        Some(&key()),
    );
    // Pass 1 is fetching: the funds leave before the settlement.
    page.wait_for_request(Duration::from_secs(30));
    devnet.transfer(&payer, &elsewhere, payer0);
    page.release();
    let voided = purchase.join().expect("purchase thread");
    assert_eq!(
        voided.status,
        402,
        "{}",
        String::from_utf8_lossy(&voided.body)
    );
    // Past pass 2's delay (1 s here) and then some: nothing ran on its account.
    std::thread::sleep(Duration::from_secs(4));
    let found = server
        .get(&format!(
            "/v1/find?spec_hash={spec_hash}&webhook={}",
            urlencode(&webhook)
        ))
        .json();
    assert_eq!(
        found.get("verdict_ids"),
        Some(&Value::Array(Vec::new())),
        "the pending verdict is gone: {found:?}"
    );
    assert!(
        hook.received().is_empty(),
        "no webhook for a voided purchase"
    );
    assert_eq!(devnet.balance(&pay_to), earned0, "nothing charged");
}

#[test]
fn a_check_that_fails_in_pass_two_fails_the_verdict() {
    // Up for pass 1, down for pass 2.
    let page = Scripted::start(vec![(200, "service up"), (503, "down")]);
    let hook = Scripted::start(vec![(200, "thanks")]);
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, FAST);
    let bought = buy_v2(
        &devnet,
        &format!("http://{}/v1/verdicts/sworn", server.addr),
        &sworn_body(&page, &hook),
        Some(&key()),
    );
    assert_eq!(bought.status, 202, "{}", bought.body);
    let answer = bought.json();
    assert_eq!(
        str_of(answer.get("pass1").expect("pass1"), "verdict_so_far"),
        "pass"
    );
    let status = final_status(
        &server,
        str_of(&answer, "verdict_id"),
        str_of(&answer, "secret"),
        Duration::from_secs(30),
    );
    let document = status.get("document").expect("document");
    assert_eq!(str_of(document, "verdict"), "fail");
    let probe = &document
        .get("results")
        .and_then(Value::as_array)
        .expect("results")[0];
    assert_eq!(probe.get("passed"), Some(&Value::Bool(false)));
    assert!(str_of(probe, "reason").contains("pass 2"), "{probe:?}");
}

#[test]
fn webhooks_retry_with_backoff_then_stop() {
    // Fails 4 times then takes it: 5 attempts. Always fails: 6 attempts, then stop.
    let flaky = Scripted::start(vec![
        (500, "no"),
        (500, "no"),
        (502, "no"),
        (503, "no"),
        (200, "ok"),
    ]);
    let dead = Scripted::start(vec![(500, "no")]);
    let page = Scripted::start(vec![(200, "service up")]);
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, FAST);
    let url = format!("http://{}/v1/verdicts/sworn", server.addr);
    let a = buy_v2(&devnet, &url, &sworn_body(&page, &flaky), Some(&key()));
    assert_eq!(a.status, 202, "{}", a.body);
    let b = buy_v2(&devnet, &url, &sworn_body(&page, &dead), Some(&key()));
    assert_eq!(b.status, 202, "{}", b.body);
    // Back-off 100, 200, 400, 800, 1600 ms after the first attempt. The status link says
    // when each receiver is done with for good (delivered, or failed after the last
    // retry), so the counts are read once nothing more can be sent.
    let delivery = |r: &umpire_blackbox::chain::Bought| {
        let v = r.json();
        let status = server.verdict_status(str_of(&v, "verdict_id"), str_of(&v, "secret"));
        status
            .json()
            .get("webhook_delivery")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    wait_for(
        "the dead receiver given up",
        Duration::from_secs(60),
        || delivery(&b).as_deref() == Some("failed"),
    );
    wait_for("the flaky receiver served", Duration::from_secs(60), || {
        delivery(&a).as_deref() == Some("delivered")
    });
    assert_eq!(
        dead.received().len(),
        6,
        "the first attempt and 5 retries, no more"
    );
    assert_eq!(
        flaky.received().len(),
        5,
        "delivered on the 5th attempt, then never again"
    );
    let attempts: Vec<String> = flaky
        .received()
        .iter()
        .map(|r| {
            r.header("x-umpire-delivery-attempt")
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(attempts, vec!["1", "2", "3", "4", "5"]);
    let b = b.json();
    let status = final_status(
        &server,
        str_of(&b, "verdict_id"),
        str_of(&b, "secret"),
        Duration::from_secs(1),
    );
    assert_eq!(str_of(&status, "webhook_delivery"), "failed");
    assert!(
        status.get("document").is_some(),
        "the document stays at the status link"
    );
}

#[test]
fn a_refused_webhook_is_invalid_webhook_before_payment() {
    let page = Scripted::start(vec![(200, "service up")]);
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, FAST);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let with_hook = |tier: &str, hook: &str| {
        let spec = if tier == "sworn" {
            format!(
                r#"{{"checks":[{{"type":"url_probe","url":"http://{}/status"}}]}}"#,
                page.addr
            )
        } else {
            r#"{"checks":[{"type":"regex","pattern":"^ready"}]}"#.to_owned()
        };
        format!(r#"{{"spec":{spec},"deliverable":{{"text":"ready"}},"webhook_url":"{hook}"}}"#)
    };
    for (hook, problem) in [
        ("http://10.1.2.3/hook", "blocked_host"),
        ("https://hooks.example.com:2222/hook", "blocked_port"),
        ("ftp://hooks.example.com/hook", "invalid_scheme"),
        (
            "https://user:pw@hooks.example.com/hook",
            "credentials_in_url",
        ),
    ] {
        let r = server.post_json("/v1/verdicts/sworn", &with_hook("sworn", hook));
        assert_eq!(
            r.status,
            422,
            "{hook}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.error_code(), "invalid_webhook", "{hook}");
        assert!(r.header("payment-required").is_none(), "no price asked");
        let problems = r.json();
        let first = &problems
            .get("error")
            .and_then(|e| e.get("problems"))
            .and_then(Value::as_array)
            .expect("problems")[0];
        assert_eq!(str_of(first, "where"), "webhook_url", "{hook}");
        assert_eq!(str_of(first, "code"), problem, "{hook}");
    }
    // The reference client, payment ready, is refused the same way and pays nothing.
    let url = format!("http://{}/v1/verdicts/sworn", server.addr);
    let bought = buy_v2(
        &devnet,
        &url,
        &with_hook("sworn", "http://10.1.2.3/hook"),
        Some(&key()),
    );
    assert_eq!(bought.status, 422, "{}", bought.body);
    // A webhook on a tier that never calls one is the webhook's problem too.
    let basic = server.post_json(
        "/v1/verdicts/basic",
        &with_hook("basic", "https://hooks.example.com/x"),
    );
    assert_eq!(basic.status, 422);
    assert_eq!(basic.error_code(), "invalid_webhook");
    assert_eq!(devnet.balance(&payer), payer0, "nothing was charged");
}

/// Every file under `dir` (the embedded store, its write-ahead log, the server's log),
/// as bytes.
fn all_bytes(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(all_bytes(&path));
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.push((path.display().to_string(), bytes));
        }
    }
    out
}

/// The contract's promise, held on the embedded store: once a verdict is issued (sworn:
/// after pass 2) nothing of its deliverable remains — in no table, no job (queued,
/// retried or dead), no free page or write-ahead log of the store file, and no log line
/// (at debug level) holds its text or any 16-byte piece of it. Failing checks, whose
/// reasons once quoted the value, are part of the purchase.
#[test]
fn nothing_of_a_deliverable_outlives_its_verdict() {
    let devnet = Devnet::start();
    let mut env = devnet.server_env(Settlement::SelfSettle);
    env.extend(FAST.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_logged(&env);
    let text = format!(
        "ready {}",
        umpire_host::random_id("confidential").replace('_', "-")
    );
    let body = |extra: &str| {
        format!(
            r#"{{"spec":{{"checks":[{{"type":"regex","pattern":"^ready"}},{{"type":"json_path","path":"title","op":"eq","value":"public"}},{{"type":"json_schema","schema":{{"type":"object","properties":{{"title":{{"maxLength":3}}}}}}}}]}},"deliverable":{{"text":"{text}","json":{{"title":"{text}"}}}}{extra}}}"#
        )
    };
    let basic = buy_v2(
        &devnet,
        &format!("http://{}/v1/verdicts/basic", server.addr),
        &body(""),
        Some(&key()),
    );
    assert_eq!(basic.status, 201, "{}", basic.body);
    let sworn = buy_v2(
        &devnet,
        &format!("http://{}/v1/verdicts/sworn", server.addr),
        &body(r#","job_ref":"keep-nothing""#),
        Some(&key()),
    );
    assert_eq!(sworn.status, 202, "{}", sworn.body);
    let answer = sworn.json();
    let status = final_status(
        &server,
        str_of(&answer, "verdict_id"),
        str_of(&answer, "secret"),
        Duration::from_secs(30),
    );
    let document = status.get("document").expect("final");
    assert_eq!(
        str_of(document, "verdict"),
        "fail",
        "the failing checks ran"
    );

    let windows: Vec<&str> = (0..=text.len() - 16).map(|i| &text[i..i + 16]).collect();
    let mut files = all_bytes(server.data.path());
    files.push(("the log".into(), server.logs().into_bytes()));
    assert!(
        files.iter().any(|(name, _)| name.contains("sqlite")),
        "{:?}",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    for (name, bytes) in &files {
        for w in &windows {
            assert!(
                !bytes.windows(16).any(|b| b == w.as_bytes()),
                "{name} holds {w:?} of the deliverable"
            );
        }
    }
}

/// A sworn purchase whose pass-2 job would not fit a queue message (SQS's 256 KB, less
/// room for the envelope) is refused before any price is asked, naming the limit, so
/// nobody pays for a purchase that cannot finish; one a little smaller is offered its
/// 402. Would catch: the size check dropped or run after payment (the purchase paid,
/// then pass 2 never queued).
#[test]
fn a_sworn_job_too_big_for_the_queue_is_refused_before_payment() {
    // A rail, so a purchase that fits is priced (the facilitator is never reached
    // before a payment arrives).
    let server = Server::start_with(&[
        (
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        ),
        ("UMPIRE_FACILITATOR_URL", "http://127.0.0.1:9"),
    ]);
    let body = |blob_bytes: usize| {
        format!(
            r#"{{"spec":{{"checks":[{{"type":"json_path","path":"$.blob","op":"exists"}}]}},"deliverable":{{"json":{{"blob":"{}"}}}}}}"#,
            "a".repeat(blob_bytes)
        )
    };
    let limit = umpire_api::products::verdict::sworn::PASS2_JOB_MAX_BYTES;
    // The job carries the deliverable sealed and base64-encoded: 4/3 of its bytes.
    let too_big = server.post_json("/v1/verdicts/sworn", &body(limit * 3 / 4 + 4096));
    assert_eq!(
        too_big.status,
        422,
        "{} {}",
        too_big.status,
        String::from_utf8_lossy(&too_big.body)
    );
    assert_eq!(too_big.error_code(), "invalid_request");
    assert!(
        too_big.header("payment-required").is_none(),
        "no price asked"
    );
    let message = too_big.error_message();
    assert!(message.contains(&limit.to_string()), "{message}");
    let fits = server.post_json("/v1/verdicts/sworn", &body(limit * 3 / 4 - 8 * 1024));
    assert_eq!(fits.status, 402, "{}", String::from_utf8_lossy(&fits.body));
}

/// Webhook deliveries that get no HTTP answer at all are retried as 5xx ones are: a
/// receiver that accepts the connection and closes it without a word is tried six times
/// (the first attempt and five retries) and then given up, and so is a port where
/// nothing listens. Would catch: a transport error taken as final (no retry) or retried
/// without end.
#[test]
fn webhooks_retry_after_a_hang_up_and_a_refused_connection() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // Accepts, counts, and hangs up.
    let hangup = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let hangup_addr = hangup.local_addr().expect("addr");
    let accepted = std::sync::Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    std::thread::spawn(move || {
        for conn in hangup.incoming() {
            count.fetch_add(1, Ordering::SeqCst);
            drop(conn);
        }
    });
    // Nothing listens here once the listener is dropped.
    let refused_addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let page = Scripted::start(vec![(200, "service up")]);
    let devnet = Devnet::start();
    let server = devnet.serve_logged(Settlement::SelfSettle, FAST);
    let url = format!("http://{}/v1/verdicts/sworn", server.addr);
    let body = |hook: std::net::SocketAddr| {
        format!(
            r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200,"keyword":"up"}}}}]}},"deliverable":{{"text":"ready"}},"webhook_url":"http://{hook}/hook"}}"#,
            page.addr
        )
    };
    let bought: Vec<_> = [hangup_addr, refused_addr]
        .into_iter()
        .map(|hook| {
            let r = buy_v2(&devnet, &url, &body(hook), Some(&key()));
            assert_eq!(r.status, 202, "{}", r.body);
            r.json()
        })
        .collect();
    let delivery = |v: &Value| {
        server
            .verdict_status(str_of(v, "verdict_id"), str_of(v, "secret"))
            .json()
            .get("webhook_delivery")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    for (v, which) in bought.iter().zip(["hang-up", "refused"]) {
        wait_for(
            &format!("the {which} receiver given up"),
            Duration::from_secs(90),
            || delivery(v).as_deref() == Some("failed"),
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        6,
        "the first attempt and 5 retries, no more"
    );
    // Nothing listens at the refused port, so its attempts are counted in the server's
    // own log: five retries scheduled, then given up, as for the hang-up.
    let refused_id = str_of(&bought[1], "verdict_id");
    let logs = server.logs();
    let lines = |what: &str| {
        logs.lines()
            .filter(|l| l.contains(refused_id) && l.contains(what))
            .count()
    };
    assert_eq!(lines("webhook failed; retrying"), 5, "{logs}");
    assert_eq!(lines("webhook failed for the last time"), 1, "{logs}");
}
