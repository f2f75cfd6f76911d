//! Nothing at rest opens a verdict: after a paid purchase on DynamoDB (the local
//! AWS-compatible server), its replay under the same Idempotency-Key and its replay by
//! the same payment, every item of every table is read back and searched for the
//! one-time secret and for the webhook key derived from it (sha256 of the secret,
//! which signs webhooks). Neither may be there; the status link still opens with the
//! secret the purchase answered, and the keyed replay gives the same secret back.
//!
//! On the stack's own tables, each route under its own function's role (the IAM gate
//! refuses anything else). `make test` starts the local server and sets
//! `UMPIRE_TEST_AWS_ENDPOINT`.

use std::sync::Arc;

use alloy::signers::local::PrivateKeySigner;
use umpire_api::{AppState, Config};
use umpire_blackbox::chain::{Devnet, Settlement};
use umpire_blackbox::stack::{LocalStack, StackOptions};
use umpire_checker::{CheckerPool, PoolConfig, WORKER_ARG};
use umpire_core::hash::sha256_hex;
use umpire_core::json::{Value, parse};
use umpire_core::signer::LocalSigner;
use umpire_store::dynamo::DynamoStore;

/// The deliverable's words after its heading are its own ("zephyr-quokka…"): no table
/// may hold them once the verdict is issued (docs/api.md's retention).
const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"}]},"deliverable":{"text":"# Report\nzephyr-quokka-marmalade all tests pass"}}"###;
const DELIVERABLE_WORDS: &str = "zephyr-quokka-marmalade";

async fn call(
    state: &AppState,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value, http::HeaderMap) {
    let mut req = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(bytes::Bytes::from(body.to_owned()))
        .expect("request");
    let r = umpire_api::handle(state, req).await;
    let status = r.status().as_u16();
    let json = parse(r.body()).unwrap_or(Value::Null);
    (status, json, r.headers().clone())
}

/// Every attribute of every item in `table`, as text.
async fn dump(client: &aws_sdk_dynamodb::Client, table: &str) -> String {
    let mut out = String::new();
    let mut start = None;
    loop {
        let page = client
            .scan()
            .table_name(table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .expect("scan");
        for item in page.items() {
            out.push_str(&format!("{item:?}\n"));
        }
        match page.last_evaluated_key() {
            Some(k) if !k.is_empty() => start = Some(k.clone()),
            _ => break,
        }
    }
    out
}

/// The devnet, the stack (its tables from template.yaml), and the purchase route's state
/// acting under the verdicts function's role; the status function's store beside it.
async fn purchase_state() -> (Devnet, LocalStack, AppState, DynamoStore, [String; 5]) {
    let devnet = tokio::task::spawn_blocking(Devnet::start)
        .await
        .expect("devnet");
    let env = devnet.server_env(Settlement::SelfSettle);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let rails = umpire_pay::config::rails_from(get).expect("rails");
    let payments = umpire_pay::config::payments_from(&rails, get)
        .await
        .expect("payments");

    // The stack's own tables (from template.yaml); the purchase runs under the verdicts
    // function's role, the status link under the status function's, through the gate.
    let stack = tokio::task::spawn_blocking(|| LocalStack::start(StackOptions::default()))
        .await
        .expect("the stack");
    let names = stack.table_names();
    let tables = [
        names.verdicts.clone(),
        names.idempotency.clone(),
        names.payments.clone(),
        names.rate_limits.clone(),
        names.feedback.clone(),
    ];
    let store = DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk_config("VerdictsFunction").await),
        names.clone(),
    );
    let status_store = DynamoStore::new(
        aws_sdk_dynamodb::Client::new(&stack.sdk_config("StatusFunction").await),
        names,
    );
    let check_limit = std::time::Duration::from_secs(2);
    let config = Config {
        check_limit,
        rails,
        rate_limits: None,
        ..Config::default()
    };
    let state = AppState::new(
        config,
        Arc::new(LocalSigner::from_seed([0x51; 32])),
        Arc::new(store),
    )
    .with_checker(Some(Arc::new(CheckerPool::new(PoolConfig {
        program: env!("CARGO_BIN_EXE_checker").into(),
        args: vec![WORKER_ARG.to_owned()],
        check_limit,
        max_workers: 2,
    }))))
    .with_payments(payments);

    (devnet, stack, state, status_store, tables)
}

/// The 402 for `body`, then the payment as the payer signs it: the paid request's headers.
async fn paid_headers(state: &AppState, devnet: &Devnet, body: &str) -> (String, String) {
    let json = [("content-type", "application/json")];
    let (status, _, headers) = call(state, "POST", "/v1/verdicts/basic", &json, body).await;
    assert_eq!(status, 402);
    let required: umpire_x402::PaymentRequired =
        umpire_x402::decode_header(headers["payment-required"].to_str().expect("ascii"))
            .expect("requirements");
    let accepted = umpire_x402::client::pick_evm(&required).expect("an EVM rail");
    let signer: PrivateKeySigner = devnet.get("payer_private_key").parse().expect("key");
    let payment = umpire_x402::client::sign_exact_evm(
        &signer,
        &required,
        accepted,
        umpire_host::Clock::system().now(),
        umpire_host::random_bytes::<32>(),
    )
    .expect("signed");
    (payment, umpire_host::random_id("atrest"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dynamodb_holds_neither_the_secret_nor_the_webhook_key() {
    let (devnet, stack, state, status_store, tables) = purchase_state().await;
    let client = aws_sdk_dynamodb::Client::new(&stack.admin_config().await);
    let (payment, key) = paid_headers(&state, &devnet, BODY).await;
    let paid = [
        ("content-type", "application/json"),
        ("payment-signature", payment.as_str()),
        ("idempotency-key", key.as_str()),
    ];

    let (status, bought, _) = call(&state, "POST", "/v1/verdicts/basic", &paid, BODY).await;
    assert_eq!(status, 201, "{bought:?}");
    let secret = bought
        .get("secret")
        .and_then(Value::as_str)
        .expect("a secret")
        .to_owned();
    let id = bought
        .get("verdict_id")
        .and_then(Value::as_str)
        .expect("id")
        .to_owned();

    // The keyed replay to the spent payment withholds the secret (the payment is public
    // on chain); to a payment signed now it gives the same secret back; the replay by
    // payment withholds it.
    let (status, replay, headers) = call(&state, "POST", "/v1/verdicts/basic", &paid, BODY).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(replay.get("secret"), Some(&Value::Null));
    let (fresh, _) = paid_headers(&state, &devnet, BODY).await;
    let proven = [
        ("content-type", "application/json"),
        ("payment-signature", fresh.as_str()),
        ("idempotency-key", key.as_str()),
    ];
    let (status, replay, headers) = call(&state, "POST", "/v1/verdicts/basic", &proven, BODY).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert_eq!(
        replay.get("secret").and_then(Value::as_str),
        Some(secret.as_str())
    );
    assert!(
        !headers.keys().any(|k| k.as_str().starts_with("umpire-")),
        "internal marks stay inside: {headers:?}"
    );
    let unkeyed = [
        ("content-type", "application/json"),
        ("payment-signature", payment.as_str()),
    ];
    let (status, by_payment, _) = call(&state, "POST", "/v1/verdicts/basic", &unkeyed, BODY).await;
    assert_eq!(status, 201, "{by_payment:?}");
    assert_eq!(by_payment.get("verdict_id"), bought.get("verdict_id"));
    assert_eq!(by_payment.get("secret"), Some(&Value::Null));

    // The status link opens with the secret.
    let bearer = format!("Bearer {secret}");
    let status_state = state.with_store(Arc::new(status_store)).with_checker(None);
    let (status, _, _) = call(
        &status_state,
        "GET",
        &format!("/v1/verdicts/{id}"),
        &[("authorization", bearer.as_str())],
        "",
    )
    .await;
    assert_eq!(status, 200);

    let webhook_key = sha256_hex(secret.as_bytes());
    let bare = secret.trim_start_matches("sec_");
    let mut dumped = String::new();
    for table in &tables {
        dumped.push_str(&dump(&client, table).await);
    }
    assert!(
        dumped.contains(&id),
        "the dump holds the purchase: {dumped}"
    );
    for (what, needle) in [
        ("the secret", bare),
        ("the webhook key", webhook_key.as_str()),
        ("a piece of the deliverable", DELIVERABLE_WORDS),
    ] {
        assert!(!dumped.contains(needle), "{what} is stored:\n{dumped}");
    }
    let denied = tokio::task::block_in_place(|| stack.denied());
    assert!(denied.is_empty(), "refused: {denied:?}");
}

/// The largest spec a purchase takes (MAX_SPEC_BYTES of normalized JSON) is sold and
/// stored on DynamoDB, whose items hold 400 KB: its prepared answer carries the document
/// twice. One byte more is refused before payment.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_largest_spec_a_purchase_takes_fits_dynamodb() {
    use umpire_core::spec::MAX_SPEC_BYTES;
    let (devnet, stack, state, _, _) = purchase_state().await;
    // One json_path check whose value fills the spec to the limit (the normalized form
    // adds nothing to it).
    let spec_of = |fill: usize| {
        format!(
            r#"{{"checks":[{{"type":"json_path","path":"a","op":"eq","value":"{}"}}]}}"#,
            "v".repeat(fill)
        )
    };
    let overhead = spec_of(0).len();
    let body_of = |fill: usize| {
        format!(
            r#"{{"spec":{},"deliverable":{{"json":{{"a":"v"}}}}}}"#,
            spec_of(fill)
        )
    };
    let exact = body_of(MAX_SPEC_BYTES - overhead);
    let (payment, key) = paid_headers(&state, &devnet, &exact).await;
    let paid = [
        ("content-type", "application/json"),
        ("payment-signature", payment.as_str()),
        ("idempotency-key", key.as_str()),
    ];
    let (status, bought, _) = call(&state, "POST", "/v1/verdicts/basic", &paid, &exact).await;
    assert_eq!(status, 201, "{bought:?}");
    // Its replay comes from the idempotency record (the whole response, stored).
    let (status, _, headers) = call(&state, "POST", "/v1/verdicts/basic", &paid, &exact).await;
    assert_eq!(status, 201);
    assert_eq!(headers["idempotent-replayed"], "true");

    let over = body_of(MAX_SPEC_BYTES - overhead + 1);
    let json = [("content-type", "application/json")];
    let (status, refused, _) = call(&state, "POST", "/v1/verdicts/basic", &json, &over).await;
    assert_eq!(status, 422, "{refused:?}");
    assert!(format!("{refused:?}").contains("spec_too_large"));
    let denied = tokio::task::block_in_place(|| stack.denied());
    assert!(denied.is_empty(), "refused: {denied:?}");
}
