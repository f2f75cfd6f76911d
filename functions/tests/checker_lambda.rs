//! The checker function in a Lambda sandbox (the local emulator: AWS's Invoke and
//! Runtime APIs, and a timeout that kills the sandbox): a pass is judged in one
//! invocation; a hostile pattern that gets past the guard is killed at the function's
//! timeout and fails alone, while the other checks of its pass keep their true outcome.

use std::time::{Duration, Instant};

use umpire_blackbox::lambda::LambdaEmulator;
use umpire_blackbox::stack::{LocalStack, StackOptions};
use umpire_checker::{Judge, JudgeRequest};
use umpire_core::json::parse_str;
use umpire_core::spec::Deliverable;
use umpire_functions::checker::LambdaChecker;

/// Passes the guard; quadratic on a long run of `a` (see tests/hostile.rs).
const HOSTILE: &str = "a(?=a*$)b";

async fn client(endpoint: &str) -> aws_sdk_lambda::Client {
    let config = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_lambda::config::Credentials::new(
            "test", "test", None, None, "test",
        ))
        .endpoint_url(endpoint)
        .load()
        .await;
    aws_sdk_lambda::Client::new(&config)
}

/// The checker binary as the stack's CheckerFunction with timeout `limit`, and a client
/// for it acting as the verdicts function: its invocations pass the IAM gate under that
/// role (lambda:InvokeFunction on the checker, nothing else) on their way to the emulator.
async fn checker_function(limit: Duration) -> (LocalStack, LambdaEmulator, LambdaChecker) {
    let stack = tokio::task::spawn_blocking(|| LocalStack::start(StackOptions::default()))
        .await
        .expect("the stack");
    let name = stack.name("CheckerFunction");
    let lambda = LambdaEmulator::start(&name, env!("CARGO_BIN_EXE_checker").as_ref(), limit, &[]);
    // What the verdicts function is configured to call: the checker's alias.
    let name = stack.function("VerdictsFunction")["environment"]["UMPIRE_CHECKER_FUNCTION"]
        .as_str()
        .expect("the checker's alias")
        .to_owned();
    let endpoint = lambda.endpoint();
    tokio::task::block_in_place(|| stack.route("lambda", &endpoint));
    let checker = LambdaChecker::new(
        aws_sdk_lambda::Client::new(&stack.sdk_config("VerdictsFunction").await),
        name,
        limit,
    );
    (stack, lambda, checker)
}

/// A request as the API sends it: the spec normalized (left as it is when it does not
/// parse, to see the function refuse it).
fn request(checks: &str, text: &str) -> JudgeRequest {
    let raw = parse_str(&format!(r#"{{"checks":{checks}}}"#)).expect("spec json");
    let spec = umpire_core::spec::parse_spec(&raw, None).map_or(raw, |s| s.normalized);
    let n = spec
        .get("checks")
        .and_then(umpire_core::Value::as_array)
        .map_or(0, Vec::len);
    JudgeRequest {
        spec,
        deliverable: Deliverable {
            text: Some(text.to_owned()),
            json: None,
        },
        fetched: vec![None; n],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_is_judged_in_the_checker_function_and_a_hostile_check_dies_alone() {
    assert!(umpire_core::guard::check_pattern(HOSTILE).is_ok());
    let limit = Duration::from_millis(1500);
    let (_stack, lambda, checker) = checker_function(limit).await;

    // An ordinary pass: one invocation, exact outcomes, exact numbers.
    let ordinary = request(
        r#"[{"type":"regex","pattern":"^hello"},{"type":"length","unit":"chars","min":1,"max":3},{"type":"regex","pattern":"world$"}]"#,
        "hello world",
    );
    let outcomes = checker.judge(&ordinary).await.expect("judged");
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes[0].passed, "{}", outcomes[0].reason);
    assert!(!outcomes[1].passed, "11 chars is more than 3");
    assert!(outcomes[2].passed, "{}", outcomes[2].reason);
    assert_eq!(lambda.kills(), 0);

    // A hostile check between two ordinary ones over 200 KB.
    let text = "a".repeat(200_000);
    let hostile = request(
        &format!(
            r#"[{{"type":"length","min":1}},{{"type":"regex","pattern":"{HOSTILE}"}},{{"type":"regex","pattern":"^a+$"}}]"#
        ),
        &text,
    );
    let started = Instant::now();
    let outcomes = checker.judge(&hostile).await.expect("judged");
    let took = started.elapsed();
    assert!(outcomes[0].passed, "{}", outcomes[0].reason);
    assert!(!outcomes[1].passed);
    assert!(
        outcomes[1].reason.contains("time limit"),
        "{}",
        outcomes[1].reason
    );
    assert!(outcomes[2].passed, "{}", outcomes[2].reason);
    // Killed twice: the whole pass, then the hostile check alone.
    assert_eq!(lambda.kills(), 2, "the sandbox is killed at the timeout");
    assert!(
        took < limit * 2 + Duration::from_secs(10),
        "the pass ended near its limits, not when the pattern finished ({took:?})"
    );

    // The fresh sandbox judges the next pass normally.
    let outcomes = checker.judge(&ordinary).await.expect("judged after a kill");
    assert!(outcomes[0].passed);
}

#[tokio::test]
async fn an_unreachable_checker_is_an_error_not_a_verdict() {
    let checker = LambdaChecker::new(
        client("http://127.0.0.1:9").await,
        "checker".into(),
        Duration::from_secs(1),
    );
    let err = checker
        .judge(&request(r#"[{"type":"length","min":1}]"#, "x"))
        .await
        .expect_err("no checker, no outcomes");
    assert!(err.to_string().contains("could not be invoked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_function_cannot_read_is_an_error_not_a_failed_check() {
    let limit = Duration::from_secs(2);
    let (_stack, _lambda, checker) = checker_function(limit).await;
    let err = checker
        .judge(&request(r#"[{"type":"no_such_check"}]"#, "x"))
        .await
        .expect_err("a refused request");
    assert!(err.to_string().contains("unknown_check_type"), "{err}");
}

#[test]
fn the_handler_answers_in_the_worker_protocol_and_refuses_garbage() {
    let req = request(
        r#"[{"type":"length","min":1},{"type":"length","min":5}]"#,
        "abc",
    );
    let line = String::from_utf8(req.line_for(1, 2)).expect("utf-8");
    let answer = umpire_functions::checker::handle_event(&serde_json::json!({ "request": line }));
    let answers = answer["answers"].as_str().expect("answers");
    assert_eq!(
        answers.lines().count(),
        1,
        "only the asked range: {answers}"
    );
    let (i, o) = umpire_checker::parse_answer(answers.trim()).expect("an answer line");
    assert_eq!(i, 1);
    assert!(!o.passed);
    for garbage in [
        serde_json::json!({}),
        serde_json::json!({ "request": "{]" }),
    ] {
        let refused = umpire_functions::checker::handle_event(&garbage);
        assert!(refused["error"].is_string(), "{refused}");
    }
}

/// `n` bytes that do not compress (sha256 in counter mode), as a hostile body would be.
fn noise(n: usize, seed: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 32);
    let mut i = 0u64;
    while out.len() < n {
        let mut block = vec![seed];
        block.extend_from_slice(&i.to_le_bytes());
        out.extend_from_slice(&umpire_core::hash::sha256(&block));
        i += 1;
    }
    out.truncate(n);
    out
}

/// The largest legal probe: three URL checks, each reading a 2 MB body (the read cap),
/// beside a check on the largest deliverable a 1 MiB request can carry once it is in
/// stable JSON: 200,000 numbers written `1e15`, which Python's form spells
/// `1000000000000000.0` (3.7 MB); or, not `heavy`, a small one. `bodies` says which body
/// each URL check reads.
fn largest_probe(
    bodies: [&std::sync::Arc<umpire_core::eval::FetchedBody>; 3],
    heavy: bool,
) -> JudgeRequest {
    let sha = |b: &umpire_core::eval::FetchedBody| umpire_core::hash::sha256_hex(&b.body);
    let mut req = request(
        &format!(
            r#"[{{"type":"content_hash","target":"url","url":"https://a.example/x","sha256":"{}"}},{{"type":"url_probe","url":"https://b.example/x","expect":{{"status":200}}}},{{"type":"content_hash","target":"url","url":"https://c.example/x","sha256":"{}"}},{{"type":"json_path","path":"[-1]","op":"eq","value":1e15}}]"#,
            sha(bodies[0]),
            sha(bodies[2]),
        ),
        "",
    );
    let count = if heavy { 200_000 } else { 200 };
    let numbers = format!("[{}1e15]", "1e15,".repeat(count - 1));
    req.deliverable.json = Some(parse_str(&numbers).expect("numbers"));
    req.fetched = vec![
        Some(bodies[0].clone()),
        Some(bodies[1].clone()),
        Some(bodies[2].clone()),
        None,
    ];
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_legal_probe_fits_the_checker_functions_payload_limit() {
    use umpire_functions::checker::{MAX_INVOKE_PAYLOAD_BYTES, batches, event};
    let cap = usize::try_from(umpire_core::product::FETCH_READ_CAP_BYTES).expect("cap");
    let body = |seed| {
        std::sync::Arc::new(umpire_core::eval::FetchedBody {
            status: 200,
            body: noise(cap, seed),
            truncated: false,
        })
    };
    let (one, two, three) = (body(1), body(2), body(3));
    let (_stack, lambda, checker) = checker_function(Duration::from_secs(10)).await;

    // The emulator refuses what AWS refuses: a payload of 6 MB ("must be smaller than")
    // never reaches the function.
    let refused = client(&lambda.endpoint())
        .await
        .invoke()
        .function_name("CheckerFunction")
        .payload(aws_sdk_lambda::primitives::Blob::new(vec![
            b' ';
            MAX_INVOKE_PAYLOAD_BYTES
        ]))
        .send()
        .await
        .expect_err("too large");
    assert!(
        format!("{}", aws_sdk_lambda::error::DisplayErrorContext(&refused))
            .contains("RequestEntityTooLarge"),
        "{refused:?}"
    );
    assert_eq!(lambda.invocations(), 0);

    // Three checks on one 2 MB body: it travels once, the pass is one invocation.
    let shared = largest_probe([&one, &one, &one], false);
    let whole = event(&shared, 0, 4).len();
    assert!(
        whole < MAX_INVOKE_PAYLOAD_BYTES,
        "{whole} bytes for three checks on one body"
    );
    let outcomes = checker.judge(&shared).await.expect("judged");
    assert!(
        outcomes.iter().all(|o| o.passed),
        "{:?}",
        outcomes.iter().map(|o| &o.reason).collect::<Vec<_>>()
    );
    assert_eq!(lambda.invocations(), 1, "one round trip");

    // Three different 2 MB bodies cannot travel together (8 MB in base64), nor with a
    // deliverable of 3.7 MB: the pass is cut where each event fits, and every check
    // keeps its true outcome.
    let distinct = largest_probe([&one, &two, &three], true);
    assert!(event(&distinct, 0, 4).len() > MAX_INVOKE_PAYLOAD_BYTES);
    let cut = batches(&distinct, 0, 4);
    assert!(cut.len() > 1);
    for (start, end, e) in &cut {
        assert!(
            e.len() < MAX_INVOKE_PAYLOAD_BYTES,
            "checks {start}..{end}: {} bytes",
            e.len()
        );
    }
    let outcomes = checker.judge(&distinct).await.expect("judged in parts");
    assert!(
        outcomes.iter().all(|o| o.passed),
        "{:?}",
        outcomes.iter().map(|o| &o.reason).collect::<Vec<_>>()
    );
    assert_eq!(lambda.invocations(), 1 + cut.len() as u64);

    // A body that does not match the hash it travels under is refused, not judged.
    let small = std::sync::Arc::new(umpire_core::eval::FetchedBody {
        status: 200,
        body: b"small".to_vec(),
        truncated: false,
    });
    let line = String::from_utf8(largest_probe([&small, &small, &small], false).line_for(0, 1))
        .expect("utf-8");
    let forged = line.replace(
        &base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b"small"),
        &base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b"other"),
    );
    assert_ne!(forged, line);
    let refused =
        umpire_functions::checker::handle_event(&serde_json::json!({ "request": forged }));
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("another sha256")),
        "{refused}"
    );
}
