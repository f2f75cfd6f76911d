//! The stack as AWS runs it: every function's own bootstrap, in its own sandbox, behind
//! API Gateway and its SQS trigger, with the template's environment and, through the
//! IAM gate, exactly its role's permissions (tests/support/stack.rs). Every route and
//! job the template serves is driven once; a call any role's policy does not allow
//! fails the test, and the statements no call needed are printed (the surplus report;
//! infra/local/iam_removal.py checks each statement is needed by removing it).

use umpire_blackbox::request;
use umpire_blackbox::stack::{LocalStack, StackOptions};

fn get(stack: &LocalStack, path: &str) -> umpire_blackbox::Reply {
    request(stack.api.expect("api"), "GET", path, &[], None)
}

fn post_json(stack: &LocalStack, path: &str, body: &str) -> umpire_blackbox::Reply {
    request(
        stack.api.expect("api"),
        "POST",
        path,
        &[("Content-Type", "application/json")],
        Some(body.as_bytes()),
    )
}

/// Every item of every table, every message of every queue, and every log line of every
/// function, as text (the test's own access).
async fn everything_stored(stack: &LocalStack) -> String {
    let config = stack.admin_config().await;
    let db = aws_sdk_dynamodb::Client::new(&config);
    let sqs = aws_sdk_sqs::Client::new(&config);
    let mut out = String::new();
    for table in [
        "VerdictsTable",
        "IdempotencyTable",
        "PaymentsTable",
        "RateLimitsTable",
        "FeedbackTable",
    ] {
        let items = db
            .scan()
            .table_name(stack.name(table))
            .send()
            .await
            .expect("scan");
        out.push_str(&format!("{:?}", items.items()));
    }
    for queue in ["JobsQueue", "JobsDeadLetterQueue"] {
        let got = sqs
            .receive_message()
            .queue_url(stack.name(queue))
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .expect("receive");
        for m in got.messages() {
            out.push_str(m.body().unwrap_or_default());
        }
    }
    let logs = stack.logs();
    assert!(!logs.is_empty(), "the functions' logs were kept");
    out.push_str(&logs);
    out
}

/// Every decision was an allow; otherwise the refused calls, as the gate saw them.
fn assert_nothing_denied(stack: &LocalStack) {
    let denied = stack.denied();
    assert!(
        denied.is_empty(),
        "calls the template's policies do not allow:\n{}",
        serde_json::to_string_pretty(&denied).unwrap_or_default()
    );
}

const BASIC: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass on build 7f3c-91ab-basic"}}"###;

fn sworn_body(page: std::net::SocketAddr, hook: std::net::SocketAddr) -> String {
    format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{page}/status","expect":{{"status":200,"keyword":"up"}}}},{{"type":"regex","pattern":"^ready"}}]}},"deliverable":{{"text":"ready to ship build 7f3c-91ab-sworn"}},"webhook_url":"http://{hook}/hook"}}"#
    )
}

fn key() -> String {
    umpire_host::random_id("idem")
}

fn str_at(v: &umpire_core::Value, k: &str) -> String {
    v.get(k)
        .and_then(umpire_core::Value::as_str)
        .unwrap_or_else(|| panic!("no {k} in {v:?}"))
        .to_owned()
}

fn wait_until(what: &str, within: std::time::Duration, mut done: impl FnMut() -> bool) {
    let started = std::time::Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

/// Feedback on `merchant`, paid by the devnet's payer, signed with the contract's recipe.
fn feedback(devnet: &umpire_blackbox::chain::Devnet, merchant: &str) -> serde_json::Value {
    let payer = devnet.get("payer");
    let tx = devnet.transfer(&payer, merchant, 1_000_000);
    let s = umpire_blackbox::chain::node_json(
        "tests/js/sign_feedback.mjs",
        &[
            "--private-key",
            &devnet.get("payer_private_key"),
            "--tx",
            &tx,
            "--merchant",
            merchant,
            "--outcome",
            "fulfilled",
        ],
    );
    serde_json::json!({
        "merchant": merchant, "payer": payer, "tx_hash": tx, "outcome": "fulfilled",
        "signature": s["signature"],
    })
}

fn mcp_call(stack: &LocalStack, tool: &str, args: &serde_json::Value) -> serde_json::Value {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": args},
    });
    let r = request(
        stack.api.expect("api"),
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        Some(body.to_string().as_bytes()),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json-rpc");
    assert_eq!(
        v["result"]["isError"],
        false,
        "{tool}: {}",
        String::from_utf8_lossy(&r.body)
    );
    v["result"]["structuredContent"].clone()
}

/// Admin access to the local AWS server (the test's own set-up, not a function's).
async fn admin() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(std::env::var("UMPIRE_TEST_AWS_ENDPOINT").expect("local AWS"))
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "test", "test", None, None, "admin",
        ))
        .load()
        .await
}

/// A pass-2 job for a pending verdict no purchase paid for (the verdicts function died
/// between storing it and settling): the worker deletes the verdict.
async fn unsold_pass2(stack: &LocalStack) -> String {
    use umpire_store::{JobQueue, VerdictRecord, VerdictStatus, VerdictStore};
    let config = admin().await;
    let tables = umpire_store::dynamo::TableNames {
        verdicts: stack.name("VerdictsTable"),
        idempotency: stack.name("IdempotencyTable"),
        payments: stack.name("PaymentsTable"),
        rate_limits: stack.name("RateLimitsTable"),
        feedback: stack.name("FeedbackTable"),
        channels: stack.name("ChannelsTable"),
    };
    let store = umpire_store::dynamo::DynamoStore::from_config(&config, tables);
    let queue = umpire_store::sqs::SqsQueue::from_config(&config, stack.name("JobsQueue"));
    let spec = umpire_core::spec::parse_spec(
        &umpire_core::json::parse_str(r#"{"checks":[{"type":"length","min":1}]}"#).expect("json"),
        Some(umpire_core::product::Tier::Sworn),
    )
    .expect("spec");
    let purchase = umpire_api::products::verdict::purchase::Purchase {
        tier: umpire_core::product::Tier::Sworn,
        spec,
        deliverable: umpire_core::spec::Deliverable {
            text: Some("x".into()),
            json: None,
        },
        webhook_url: None,
        job_ref: None,
    };
    let verdict_id = umpire_host::random_id("vrd");
    let now = umpire_host::Clock::system().now();
    store
        .put_verdict(&VerdictRecord {
            verdict_id: verdict_id.clone(),
            tier: umpire_core::product::Tier::Sworn,
            status: VerdictStatus::Pending,
            document: None,
            preview: None,
            secret_hash: "0".repeat(64),
            spec_hash: purchase.spec.hash.clone(),
            webhook_url: None,
            created_at: now,
            expires_at: now + 3600,
            webhook_outcome: None,
            job_key: None,
            payer: None,
        })
        .await
        .expect("a pending verdict");
    let unpaid =
        umpire_api::checkout::ledger::raw_payment_key(&serde_json::json!({"payload": verdict_id}));
    let key = umpire_core::seal::DataKey::from_bytes(umpire_host::random_bytes());
    let job = umpire_api::products::verdict::sworn::pass2_job(
        &verdict_id,
        &key,
        &purchase,
        &[],
        now,
        umpire_api::products::verdict::sworn::Sold {
            payment_key: &unpaid,
            wait_until: now + 60,
            answers_request: false,
        },
    )
    .expect("job");
    queue
        .enqueue(&job, std::time::Duration::ZERO)
        .await
        .expect("enqueue pass 2");
    let verdicts = stack.name("VerdictsTable");
    let client = aws_sdk_dynamodb::Client::new(&config);
    let started = std::time::Instant::now();
    loop {
        let item = client
            .get_item()
            .table_name(&verdicts)
            .key(
                "verdict_id",
                aws_sdk_dynamodb::types::AttributeValue::S(verdict_id.clone()),
            )
            .send()
            .await
            .expect("read the verdict");
        if item.item.is_none() {
            return verdict_id;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the worker did not delete the unsold verdict; refused calls: {}",
            serde_json::to_string_pretty(&stack.denied()).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_and_job_runs_under_its_own_role() {
    use umpire_blackbox::chain::{
        Devnet, FACILITATOR_TOKEN, Facilitator, buy_get_v2, buy_v2, sign_payment,
    };
    let devnet = Devnet::start();
    // Solana too: USDC through the facilitator, native SOL verified and broadcast by
    // the verdicts function itself on the node named by a secret.
    let solana = umpire_blackbox::svm::SolanaNet::start();
    // Its /settle waits 3 s for a receipt, then answers settlement_pending (30 s as
    // shipped: longer than the verdicts function may run).
    let facilitator = Facilitator::start_args(
        &devnet,
        None,
        Some(&solana),
        &["--confirmation-timeout-ms", "3000"],
    );
    let feed = umpire_blackbox::serve_fixed(
        "200 OK",
        "application/json",
        br#"{"data":{"amount":"150.00","base":"SOL","currency":"USD"}}"#.to_vec(),
    );
    let params = vec![
        ("EvmPayTo".to_owned(), devnet.get("pay_to")),
        ("EvmNetwork".to_owned(), devnet.get("network")),
        ("FacilitatorUrl".to_owned(), facilitator.url.clone()),
        ("FeedbackConfirmations".to_owned(), "1".to_owned()),
        ("SolanaPayTo".to_owned(), solana.get("pay_to")),
        ("SolanaFeePayer".to_owned(), solana.get("fee_payer")),
        ("SolNative".to_owned(), "on".to_owned()),
        (
            "SolPriceUrl".to_owned(),
            format!("http://{feed}/v2/prices/SOL-USD/spot"),
        ),
    ];
    let env = vec![
        ("UMPIRE_EVM_ASSET".to_owned(), devnet.get("asset")),
        ("UMPIRE_EVM_ASSET_NAME".to_owned(), devnet.get("asset_name")),
        (
            "UMPIRE_EVM_ASSET_VERSION".to_owned(),
            devnet.get("asset_version"),
        ),
        (
            "UMPIRE_FEEDBACK_CHAIN_ID".to_owned(),
            devnet.get("chain_id"),
        ),
        ("UMPIRE_FEEDBACK_USDC".to_owned(), devnet.get("asset")),
        ("UMPIRE_TEST_FETCH_ALLOW".to_owned(), "127.0.0.1".to_owned()),
        ("UMPIRE_SWORN_DELAY_SECONDS".to_owned(), "1".to_owned()),
        ("UMPIRE_WEBHOOK_RETRY_BASE_MS".to_owned(), "100".to_owned()),
    ];
    // Made by the operator before the deploy; the stack takes their ARNs.
    let secrets = vec![
        (
            "FacilitatorAuthSecretArn".to_owned(),
            format!("Bearer {FACILITATOR_TOKEN}"),
        ),
        ("FeedbackRpcUrlSecretArn".to_owned(), devnet.get("rpc_url")),
        ("SolanaRpcUrlSecretArn".to_owned(), solana.get("rpc_url")),
        // The chain the facilitator settles on, read to decide what it leaves unknown.
        ("EvmRpcUrlSecretArn".to_owned(), devnet.get("rpc_url")),
    ];
    let stack = tokio::task::block_in_place(|| {
        LocalStack::start(StackOptions {
            params,
            secrets,
            env,
            run_functions: true,
            ..StackOptions::default()
        })
    });
    let api = stack.api.expect("api");
    let url = |path: &str| format!("http://{api}{path}");

    // The routes that keep nothing (static documents, the price list, validation).
    tokio::task::block_in_place(|| {
        for path in [
            "/healthz",
            "/.well-known/umpire-key.json",
            "/openapi.json",
            "/verify",
            "/v1/quote",
        ] {
            let r = get(&stack, path);
            assert_eq!(
                r.status,
                200,
                "{path}: {}",
                String::from_utf8_lossy(&r.body)
            );
        }
        let r = post_json(
            &stack,
            "/v1/validate",
            r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#,
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    });

    // A basic verdict, bought with the reference client through API Gateway: the
    // verdicts function verifies and settles with the facilitator, judges in the
    // checker function (through the gate), stores the verdict and the ledger entry.
    let basic_key = key();
    let first = tokio::task::block_in_place(|| {
        buy_v2(&devnet, &url("/v1/verdicts/basic"), BASIC, Some(&basic_key))
    });
    assert_eq!(first.status, 201, "{}", first.body);
    // The same key and body again: answered in front of the paywall (a replay).
    let again = tokio::task::block_in_place(|| {
        buy_v2(&devnet, &url("/v1/verdicts/basic"), BASIC, Some(&basic_key))
    });
    assert_eq!(again.status, 201, "{}", again.body);
    let v = first.json();
    let verdict = (str_at(&v, "verdict_id"), str_at(&v, "secret"));
    // One payment sent twice without a key (as @x402/fetch resends): the ledger replays.
    tokio::task::block_in_place(|| {
        let payment = sign_payment(&devnet, &url("/v1/verdicts/basic"), BASIC);
        // The reference client echoes the 402's extensions (Bazaar schema, an offer per
        // rail) into the header: with every rail on, it must still pass API Gateway.
        assert!(
            payment.len() + 1024 <= umpire_core::platform::API_GATEWAY_REQUEST_HEADERS_BYTES,
            "a {}-byte payment header leaves no room under API Gateway's limit",
            payment.len()
        );
        for _ in 0..2 {
            let r = request(
                api,
                "POST",
                "/v1/verdicts/basic",
                &[
                    ("Content-Type", "application/json"),
                    ("PAYMENT-SIGNATURE", &payment),
                ],
                Some(BASIC.as_bytes()),
            );
            assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        }
    });
    // Solana: USDC with the reference client (the facilitator settles), native SOL at
    // the 402's quote (the verdicts function reads the node's URL from its secret,
    // simulates, broadcasts and confirms).
    tokio::task::block_in_place(|| {
        let bought =
            umpire_blackbox::svm::buy_svm(&solana, &url("/v1/verdicts/basic"), BASIC, Some(&key()));
        assert_eq!(bought.status, 201, "{}", bought.body);
        assert_eq!(
            solana.token_units(&solana.get("pay_to_usdc_account")),
            1_000_000
        );
        let unpaid = post_json(&stack, "/v1/verdicts/basic", BASIC);
        assert_eq!(unpaid.status, 402);
        let required: umpire_x402::PaymentRequired =
            umpire_x402::decode_header(unpaid.header("payment-required").expect("402 header"))
                .expect("requirements");
        let before = solana.lamports(&solana.get("pay_to"));
        let payment = solana.sign_native(&required, None);
        let r = umpire_blackbox::post_paid(api, "/v1/verdicts/basic", BASIC, &payment, &key());
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        // $1.00 at $150/SOL, +1.5%, rounded up.
        assert_eq!(solana.lamports(&solana.get("pay_to")), before + 6_766_667);
    });
    let status = tokio::task::block_in_place(|| {
        request(
            api,
            "GET",
            &format!("/v1/verdicts/{}", verdict.0),
            &[("Authorization", &format!("Bearer {}", verdict.1))],
            None,
        )
    });
    assert_eq!(
        status.status,
        200,
        "{}",
        String::from_utf8_lossy(&status.body)
    );

    // A sworn verdict: queued by the verdicts function, pass 2 run by the worker from
    // the SQS trigger, the webhook delivered by the worker.
    let page = umpire_blackbox::Scripted::start(vec![(200, "service up")]);
    let hook = umpire_blackbox::Scripted::start(vec![(200, "thanks")]);
    let body = sworn_body(page.addr, hook.addr);
    let bought = tokio::task::block_in_place(|| {
        buy_v2(&devnet, &url("/v1/verdicts/sworn"), &body, Some(&key()))
    });
    assert_eq!(bought.status, 202, "{}", bought.body);
    let v = bought.json();
    let sworn_id = str_at(&v, "verdict_id");
    let sworn_secret = str_at(&v, "secret");
    tokio::task::block_in_place(|| {
        wait_until(
            "the final sworn document",
            std::time::Duration::from_secs(90),
            || {
                let r = request(
                    api,
                    "GET",
                    &format!("/v1/verdicts/{sworn_id}"),
                    &[("Authorization", &format!("Bearer {sworn_secret}"))],
                    None,
                );
                r.json().get("status").and_then(umpire_core::Value::as_str) == Some("final")
            },
        );
        wait_until("the webhook", std::time::Duration::from_secs(60), || {
            !hook.received().is_empty()
        });
    });

    // find, by the spec's hash (validate says it) and the webhook.
    let validated = tokio::task::block_in_place(|| {
        post_json(
            &stack,
            "/v1/validate",
            &body.replacen('{', r#"{"tier":"sworn","#, 1),
        )
    });
    let spec_hash = str_at(&validated.json(), "spec_hash");
    let hook_url = format!("http://{}/hook", hook.addr);
    let found = tokio::task::block_in_place(|| {
        get(
            &stack,
            &format!(
                "/v1/find?spec_hash={spec_hash}&webhook={}",
                umpire_blackbox::urlencode(&hook_url)
            ),
        )
    });
    assert_eq!(
        found.status,
        200,
        "{}",
        String::from_utf8_lossy(&found.body)
    );
    assert!(String::from_utf8_lossy(&found.body).contains(&sworn_id));

    // A sworn purchase whose authorization its payer executes (to us) while pass 1
    // runs: the facilitator's /settle answers that the nonce is used, which is no
    // refusal — the verdicts function reads the chain (EvmRpcUrlSecretArn), finds the
    // transfer to us, and delivers the purchase (never "nothing was charged").
    let held = umpire_blackbox::Held::start("service up");
    let failing = sworn_body(held.addr, hook.addr);
    let payment =
        tokio::task::block_in_place(|| sign_payment(&devnet, &url("/v1/verdicts/sworn"), &failing));
    let buyer = {
        let (payment, failing) = (payment.clone(), failing.clone());
        std::thread::spawn(move || {
            umpire_blackbox::post_paid(api, "/v1/verdicts/sworn", &failing, &payment, &key())
        })
    };
    tokio::task::block_in_place(|| {
        held.wait_for_request(std::time::Duration::from_secs(60));
        devnet.execute_authorization(&devnet.get("payer"), &payment);
        held.release();
    });
    let paid = tokio::task::block_in_place(|| buyer.join().expect("buyer"));
    assert_eq!(paid.status, 202, "{}", String::from_utf8_lossy(&paid.body));

    // A sworn purchase whose payer cancels its authorization while pass 1 runs: the
    // facilitator cannot settle it, the chain shows the authorization canceled, and
    // the verdicts function voids it: its pending verdict deleted, its key released, a
    // 402 that says nothing was charged.
    let payer = devnet.get("payer");
    let held = umpire_blackbox::Held::start("service up");
    let canceled = sworn_body(held.addr, hook.addr);
    let payment = tokio::task::block_in_place(|| {
        sign_payment(&devnet, &url("/v1/verdicts/sworn"), &canceled)
    });
    let buyer = {
        let (payment, canceled) = (payment.clone(), canceled.clone());
        std::thread::spawn(move || {
            umpire_blackbox::post_paid(api, "/v1/verdicts/sworn", &canceled, &payment, &key())
        })
    };
    tokio::task::block_in_place(|| {
        held.wait_for_request(std::time::Duration::from_secs(60));
        let dn = devnet.devnet_json();
        let done = umpire_blackbox::chain::node_json(
            "tests/js/cancel.mjs",
            &["--devnet", &dn, "--payment", &payment],
        );
        assert_eq!(done["status"], "success", "{done}");
        held.release();
    });
    let refused = tokio::task::block_in_place(|| buyer.join().expect("buyer"));
    assert_eq!(
        refused.status,
        402,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );

    // (a) and (c) on the platform: the chain stops past the purchase's deadline, the
    // facilitator answers settlement_pending, and the purchase is pending, never a 402.
    // The reference client's rerun is answered with the pending purchase and signs
    // nothing; `umpire buy`, stopped at its pending answer and rerun with the key it
    // printed, sends the payment it signed and nothing new. The chain resumes: the
    // worker's reconciler (a delayed SQS job) and the rerun deliver each purchase once.
    tokio::task::block_in_place(|| {
        use umpire_blackbox::chain::Mining;
        use umpire_blackbox::cli::{Customer, finished, read_until};
        let payer0 = devnet.balance(&payer);
        let pending_body = BASIC.replace("7f3c-91ab-basic", "7f3c-91ab-pending");
        let fetch_key = key();
        devnet.set_mining(Mining::Manual);
        let first = buy_v2(
            &devnet,
            &url("/v1/verdicts/basic"),
            &pending_body,
            Some(&fetch_key),
        );
        assert_eq!(first.status, 502, "{}", first.body);
        let pending = umpire_blackbox::decode_b64_json(
            &first.header("payment-response").expect("PAYMENT-RESPONSE"),
        );
        assert_eq!(pending["errorReason"], "settlement_pending", "{pending}");
        let rerun = buy_v2(
            &devnet,
            &url("/v1/verdicts/basic"),
            &pending_body,
            Some(&fetch_key),
        );
        assert_eq!(rerun.status, 409, "{}", rerun.body);
        assert!(rerun.header("payment-required").is_none());

        let customer = Customer::new(
            &format!("http://{api}"),
            &devnet.get("payer_private_key"),
            &BASIC.replace("7f3c-91ab-basic", "7f3c-91ab-customer"),
        );
        let mut run = customer.buy(None);
        let (cli_key, said) = read_until(
            &mut run,
            "settlement is pending",
            std::time::Duration::from_secs(90),
        );
        assert!(!cli_key.is_empty(), "{said:#?}");
        let _ = run.kill();
        let _ = run.wait();
        let rerun = customer.buy(Some(&cli_key));
        assert_eq!(payer0 - devnet.balance(&payer), 0, "nothing mined yet");
        devnet.set_mining(Mining::Instant);
        let (code, bought, stderr) = finished(rerun, std::time::Duration::from_secs(120));
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("resuming this purchase"), "{stderr}");
        assert!(bought["document"]["signature"].is_object(), "{bought}");

        // The reference client's purchase, delivered by the worker alone: its rerun now
        // gets it (the authorization that rerun signs proves the wallet; never settled).
        wait_until(
            "the worker's reconciler",
            std::time::Duration::from_secs(90),
            || {
                let again = buy_v2(
                    &devnet,
                    &url("/v1/verdicts/basic"),
                    &pending_body,
                    Some(&fetch_key),
                );
                again.status == 201
                    && umpire_blackbox::decode_b64_json(
                        &again.header("payment-response").expect("PAYMENT-RESPONSE"),
                    )["transaction"]
                        .as_str()
                        .is_some_and(|t| {
                            t.eq_ignore_ascii_case(
                                pending["transaction"].as_str().unwrap_or_default(),
                            )
                        })
            },
        );
        assert_eq!(
            payer0 - devnet.balance(&payer),
            2 * umpire_blackbox::PRICE_BASIC,
            "two purchases, each charged once"
        );
    });

    // Feedback, proven on chain, and the merchant's report, bought.
    let merchant = devnet.accounts()[5].clone();
    let fb = tokio::task::block_in_place(|| feedback(&devnet, &merchant));
    let r = tokio::task::block_in_place(|| post_json(&stack, "/v1/feedback", &fb.to_string()));
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let report_url = url(&format!("/v1/reputation?merchant={merchant}"));
    let report = tokio::task::block_in_place(|| buy_get_v2(&devnet, &report_url));
    assert_eq!(report.status, 200, "{}", report.body);
    tokio::task::block_in_place(|| {
        // With an Idempotency-Key, twice: the second is answered in front of the paywall.
        let dn = devnet.devnet_json();
        let report_key = key();
        for _ in 0..2 {
            let v = umpire_blackbox::chain::node_json(
                "tests/js/buy.mjs",
                &[
                    "--devnet",
                    &dn,
                    "--method",
                    "GET",
                    "--url",
                    &report_url,
                    "--key",
                    &report_key,
                ],
            );
            assert_eq!(v["status"], 200, "{v}");
        }
        // One payment sent twice: the ledger replays the report.
        let v = umpire_blackbox::chain::node_json(
            "tests/js/buy.mjs",
            &[
                "--devnet",
                &dn,
                "--method",
                "GET",
                "--url",
                &report_url,
                "--sign-only",
            ],
        );
        let payment = v["header"].as_str().expect("a payment").to_owned();
        let path = format!("/v1/reputation?merchant={merchant}");
        for _ in 0..2 {
            let r = request(api, "GET", &path, &[("PAYMENT-SIGNATURE", &payment)], None);
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        }
    });

    // MCP: every tool that touches storage.
    tokio::task::block_in_place(|| {
        mcp_call(
            &stack,
            "validate",
            &serde_json::json!({"tier": "basic", "spec": {"checks": [{"type": "length", "min": 1}]}}),
        );
        mcp_call(
            &stack,
            "get_verdict",
            &serde_json::json!({"verdict_id": verdict.0, "secret": verdict.1}),
        );
        mcp_call(
            &stack,
            "find",
            &serde_json::json!({"spec_hash": spec_hash, "webhook": hook_url}),
        );
        mcp_call(&stack, "submit_feedback", &feedback(&devnet, &merchant));
        // The paid tools, with x402's MCP client: MCP invokes the paid routes'
        // functions, which sell as they do over HTTP.
        let mcp_url = format!("http://{}/mcp", stack.api.expect("api"));
        let args = serde_json::json!({"tier": "basic", "spec": {"checks": [{"type": "regex", "pattern": "^# Report"}]}, "deliverable": {"text": "# Report over MCP"}});
        let v = umpire_blackbox::chain::buy_over_mcp(
            &devnet,
            &mcp_url,
            "buy_verdict",
            &args.to_string(),
        );
        assert_eq!(v["is_error"], false, "{v}");
        assert_eq!(v["payment_response"]["success"], true, "{v}");
        assert_eq!(v["structured"]["verdict"], "pass", "{v}");
        let args = serde_json::json!({"merchant": merchant});
        let v = umpire_blackbox::chain::buy_over_mcp(
            &devnet,
            &mcp_url,
            "get_reputation",
            &args.to_string(),
        );
        assert_eq!(v["is_error"], false, "{v}");
        assert!(v["structured"]["report"].is_object(), "{v}");
    });

    // A pass-2 job whose purchase never settled: the worker deletes its verdict.
    unsold_pass2(&stack).await;

    // The data promise, on DynamoDB and SQS: nothing of the deliverables bought above
    // is kept in any table or queue (dead letters included) once their verdicts exist.
    for deliverable in [
        "all tests pass on build 7f3c-91ab-basic",
        "ready to ship build 7f3c-91ab-sworn",
    ] {
        let kept = everything_stored(&stack).await;
        for w in deliverable.as_bytes().windows(16) {
            let w = String::from_utf8_lossy(w);
            assert!(
                !kept.contains(w.as_ref()),
                "the stack keeps {w:?} of a deliverable"
            );
        }
    }

    // API Gateway refuses a request whose request line and header values pass 10,240
    // bytes, before any function (the emulator too). Every purchase above went through
    // it with the reference clients' own headers, a payment on each rail among them;
    // the largest is reported, with its margin. Would catch: a payment header grown
    // past what API Gateway takes (every purchase of that rail refused on AWS alone).
    let largest = stack.stats()["largest_request_head"].as_u64().unwrap_or(0);
    eprintln!("largest request line and header values: {largest} bytes of 10,240");
    assert!(
        largest > 1_000 && largest <= 10_240,
        "a payment header was seen, within the limit: {largest}"
    );
    let pad = "a".repeat(10_300);
    let padded = tokio::task::block_in_place(|| {
        request(api, "GET", "/healthz", &[("X-Padding", pad.as_str())], None)
    });
    assert_eq!(padded.status, 431, "past API Gateway's header limit");

    assert_nothing_denied(&stack);
    let report = surplus(&stack);
    eprintln!("statements and actions no call needed:\n{report}");
    // Of our own policies (AWS's managed ones serve the platform, not our calls), what
    // no call of this run needed is exactly what a path this run does not take needs;
    // anything else is a grant to take away, or a path to exercise here.
    let ours: Vec<&str> = report
        .lines()
        .filter(|l| {
            !l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.starts_with("AWS"))
        })
        .collect();
    assert_eq!(
        ours,
        [
            // Lambda itself writes the checkers' logs with these (the platform, as
            // with the AWS-managed policies of the other functions), not our calls.
            r#"CheckerFunction OwnLogs#1: ["logs:CreateLogStream", "logs:PutLogEvents"]"#,
            // A payer's second feedback updates its aggregate and pairs; a payer whose
            // pairs must be listed (an anchor row spreading) reads its by_payer index.
            // This run leaves one feedback per payer.
            r#"FeedbackFunction FeedbackFunctionRolePolicy0#1: ["dynamodb:UpdateItem"]"#,
            r#"FeedbackFunction FeedbackFunctionRolePolicy0#2: ["dynamodb:Query"]"#,
            r#"McpFunction McpFunctionRolePolicy0#3: ["dynamodb:UpdateItem"]"#,
            r#"McpFunction McpFunctionRolePolicy0#4: ["dynamodb:Query"]"#,
            r#"PassTwoCheckerFunction OwnLogs#1: ["logs:CreateLogStream", "logs:PutLogEvents"]"#,
            // The PreTraffic hook runs only in a deployment, which this run does not
            // make: functions/tests/pretraffic.rs uses each of these (and holds that
            // every call it made was allowed).
            r#"PreTrafficHookFunction OwnLogs#1: ["logs:CreateLogStream", "logs:PutLogEvents"]"#,
            r#"PreTrafficHookFunction ReportOnDeployments#1: ["codedeploy:GetDeployment"]"#,
            r#"PreTrafficHookFunction ReportOnDeployments#2: ["codedeploy:GetApplicationRevision"]"#,
            r#"PreTrafficHookFunction ReportOnDeployments#3: ["codedeploy:PutLifecycleEventHookExecutionStatus"]"#,
            r#"PreTrafficHookFunction ProbeNewVersions#1: ["lambda:InvokeFunction"]"#,
            r#"PreTrafficHookFunction ProbeNewVersions#2: ["lambda:ListTags"]"#,
            // This stack has no validator key: the worker opens one in
            // a_validation_answer_is_posted_by_the_worker_under_its_own_role.
            r#"WorkerFunction ValidatorKeyDecrypt#1: ["kms:Decrypt"]"#,
            // No claims run here (they are not built yet): functions/tests/kms.rs
            // only_the_worker_opens_the_receiver_authorizer_key opens it as the worker.
            r#"WorkerFunction ReceiverAuthorizerDecrypt#1: ["kms:Decrypt"]"#,
        ],
        "grants no call of this run needed, beyond the known ones:\n{report}"
    );
    let _ = facilitator;
}

/// Every statement (and every action of it) of every function's policies that no
/// recorded call was allowed by: the surplus report.
fn surplus(stack: &LocalStack) -> String {
    let calls = stack.calls();
    let mut lines = Vec::new();
    for (logical, f) in stack.resolved["functions"].as_object().expect("functions") {
        for p in f["policies"].as_array().into_iter().flatten() {
            let name = p["name"].as_str().unwrap_or_default();
            let statements = match &p["document"]["Statement"] {
                serde_json::Value::Array(a) => a.clone(),
                one => vec![one.clone()],
            };
            for (i, s) in statements.iter().enumerate() {
                let id = format!("{name}#{}", i + 1);
                let by_it: Vec<&serde_json::Value> = calls
                    .iter()
                    .filter(|c| {
                        c["principal"] == logical.as_str()
                            && c["statements"]
                                .as_array()
                                .is_some_and(|a| a.iter().any(|x| x == id.as_str()))
                    })
                    .collect();
                let actions: Vec<String> = match &s["Action"] {
                    serde_json::Value::Array(a) => a
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect(),
                    one => one.as_str().map(str::to_owned).into_iter().collect(),
                };
                let unused: Vec<&String> = actions
                    .iter()
                    .filter(|a| !by_it.iter().any(|c| c["action"] == a.as_str()))
                    .collect();
                if !unused.is_empty() {
                    lines.push(format!("{logical} {id}: {unused:?}"));
                }
            }
        }
    }
    lines.join("\n")
}

/// ERC-8004 on AWS: the validator's key sealed under the stack's KMS key by `umpire
/// keygen --validator` (the operator seals; only the worker's role may open it), the
/// registration file served by the key function, a purchase naming a validation request
/// checked by the verdicts function on chain (its RPC read from a secret), and the
/// answer posted by the worker from the queue, each under its own role.
#[tokio::test(flavor = "multi_thread")]
async fn a_validation_answer_is_posted_by_the_worker_under_its_own_role() {
    use alloy::primitives::keccak256;
    use base64::Engine as _;
    use umpire_blackbox::chain::{Devnet, FACILITATOR_TOKEN, Facilitator, buy_v2, node_json};
    use umpire_blackbox::stack::OPERATOR;
    let devnet = Devnet::start();
    let facilitator = Facilitator::start_with(&devnet, None, None);
    let params = vec![
        ("EvmPayTo".to_owned(), devnet.get("pay_to")),
        ("EvmNetwork".to_owned(), devnet.get("network")),
        ("FacilitatorUrl".to_owned(), facilitator.url.clone()),
    ];
    let env = vec![
        ("UMPIRE_EVM_ASSET".to_owned(), devnet.get("asset")),
        ("UMPIRE_EVM_ASSET_NAME".to_owned(), devnet.get("asset_name")),
        (
            "UMPIRE_EVM_ASSET_VERSION".to_owned(),
            devnet.get("asset_version"),
        ),
        ("UMPIRE_WEBHOOK_RETRY_BASE_MS".to_owned(), "100".to_owned()),
    ];
    let secrets = vec![
        (
            "FacilitatorAuthSecretArn".to_owned(),
            format!("Bearer {FACILITATOR_TOKEN}"),
        ),
        (
            "ValidationRpcUrlSecretArn".to_owned(),
            devnet.get("rpc_url"),
        ),
    ];
    let mut stack = tokio::task::block_in_place(|| {
        LocalStack::start(StackOptions {
            params,
            secrets,
            env: env.clone(),
            ..StackOptions::default()
        })
    });
    // The operator seals a new validator key under the stack's key, and funds it.
    let kms_key = stack.name("SigningKey");
    let operator: Vec<(String, String)> = stack.sdk_env(OPERATOR);
    let operator: Vec<(&str, &str)> = operator
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (code, out, err) = umpire_blackbox::run_umpire(
        &["keygen", "--validator", "--kms-key-id", &kms_key],
        &operator,
    );
    assert_eq!(code, 0, "{err}");
    let printed = |name: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("keygen printed no {name}: {out}"))
            .to_owned()
    };
    let (ciphertext, validator) = (
        printed("ValidatorKeyCiphertext"),
        printed("ValidatorAddress"),
    );
    devnet.rpc(
        "anvil_setBalance",
        serde_json::json!([validator, "0x8AC7230489E80000"]),
    );
    let registry = format!(
        "eip155:{}:{}",
        devnet.get("chain_id"),
        devnet.get("validation_registry")
    );
    tokio::task::block_in_place(|| {
        stack.redeploy(
            &[
                ("ValidationRegistry", registry.as_str()),
                ("ValidatorAddress", validator.as_str()),
                ("ValidatorKeyCiphertext", ciphertext.as_str()),
            ],
            &env,
        )
    });
    let api = stack.api.expect("api");
    // The registration file names the validator.
    let reg = tokio::task::block_in_place(|| get(&stack, "/.well-known/agent-registration.json"));
    assert_eq!(reg.status, 200);
    assert!(
        String::from_utf8_lossy(&reg.body)
            .to_lowercase()
            .contains(&validator.to_lowercase()),
        "{}",
        String::from_utf8_lossy(&reg.body)
    );
    // An agent asks Umpire's validator to check its report.
    let dn = devnet.devnet_json();
    let agent = node_json(
        "infra/devnet/validation.mjs",
        &[
            "register",
            "--devnet",
            &dn,
            "--uri",
            "https://agent.example/a.json",
        ],
    );
    let agent_id = agent["agent_id"].as_str().expect("agent_id").to_owned();
    let spec = r##"{"checks":[{"type":"regex","pattern":"^# Report"}]}"##;
    let deliverable = r##"{"text":"# Report\nall green"}"##;
    let file = format!(r#"{{"spec":{spec},"deliverable":{deliverable}}}"#);
    let hash = format!("{}", keccak256(file.as_bytes()));
    let uri = format!(
        "data:application/json;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(&file)
    );
    node_json(
        "infra/devnet/validation.mjs",
        &[
            "request",
            "--devnet",
            &dn,
            "--agent-id",
            &agent_id,
            "--request-uri",
            &uri,
            "--request-hash",
            &hash,
            "--validator",
            &validator,
        ],
    );
    let body = format!(
        r#"{{"spec":{spec},"deliverable":{deliverable},"job_ref":"erc8004:{registry}:{hash}"}}"#
    );
    let bought = tokio::task::block_in_place(|| {
        buy_v2(
            &devnet,
            &format!("http://{api}/v1/verdicts/basic"),
            &body,
            Some(&key()),
        )
    });
    assert_eq!(bought.status, 201, "{}", bought.body);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        let s = node_json(
            "infra/devnet/validation.mjs",
            &["status", "--devnet", &dn, "--request-hash", &hash],
        );
        if s["tag"] == "umpire:basic" {
            break s;
        }
        assert!(
            std::time::Instant::now() < until,
            "no answer posted: {s}\n{}",
            stack.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    assert_eq!(status["response"], 100);
    assert_eq!(
        status["validator"].as_str().map(str::to_lowercase),
        Some(validator.to_lowercase())
    );
    assert_nothing_denied(&stack);
}
