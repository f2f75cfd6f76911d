//! Paying on Solana for real: a local chain (litesvm, the real SPL Token program), the
//! reference x402 SVM client and facilitator for USDC, Umpire's own verification and
//! broadcast for native SOL (our extension), `umpire buy --rail solana|sol`, and SOL
//! quotes honored by any instance holding the key, for their window only. Balances
//! are read from the chain.

use umpire_blackbox::chain::{Devnet, Settlement, sign_payment};
use umpire_blackbox::mirror::Mirror;
use umpire_blackbox::svm::{SolanaNet, SvmFacilitator, buy_svm, sign_svm_payment};
use umpire_blackbox::{
    Reply, Server, TempDir, assert_recipe_verifies, decode_b64_json, request, run_umpire,
    serve_fixed,
};
use umpire_core::json::Value;
use umpire_x402::{PaymentRequired, decode_header};

const SPEC: &str = r#"{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]}"#;
const DELIVERABLE: &str = r##"{"text":"# Report\nall tests pass"}"##;
/// $1.00 in USDC units.
const BASIC_USDC: u64 = 1_000_000;
/// $1.00 at $150/SOL = 6,666,666.67 lamports; +1.5% = 6,766,666.67, rounded up.
const BASIC_LAMPORTS_AT_150: u64 = 6_766_667;
/// The same at $120/SOL: 8,333,333.33 × 1.015 = 8,458,333.33, rounded up.
const BASIC_LAMPORTS_AT_120: u64 = 8_458_334;
/// A Solana transaction's base fee (one signature); the priority fee on 20,000 units
/// at 1 micro-lamport rounds up to one more lamport.
const FEE_LAMPORTS: u64 = 5_001;

fn body() -> String {
    format!(r#"{{"spec":{SPEC},"deliverable":{DELIVERABLE}}}"#)
}

fn url(server: &Server) -> String {
    format!("http://{}/v1/verdicts/basic", server.addr)
}

fn post(server: &Server, headers: &[(&str, &str)]) -> Reply {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    request(
        server.addr,
        "POST",
        "/v1/verdicts/basic",
        &all,
        Some(body().as_bytes()),
    )
}

fn key() -> String {
    umpire_host::random_id("idem")
}

/// A stand-in for the public price feed (Coinbase's spot-price API shape).
fn price_feed(amount: &'static str) -> String {
    let addr = serve_fixed(
        "200 OK",
        "application/json",
        format!(r#"{{"data":{{"amount":"{amount}","base":"SOL","currency":"USD"}}}}"#).into_bytes(),
    );
    format!("http://{addr}/v2/prices/SOL-USD/spot")
}

fn json_of(r: &Reply) -> Value {
    umpire_core::json::parse(&r.body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&r.body)))
}

fn settlement(r: &Reply, header: &str) -> serde_json::Value {
    decode_b64_json(r.header(header).unwrap_or_else(|| panic!("no {header}")))
}

/// The 402's requirements for a basic verdict.
fn required(server: &Server) -> PaymentRequired {
    let r = post(server, &[]);
    assert_eq!(r.status, 402);
    decode_header(r.header("payment-required").expect("PAYMENT-REQUIRED")).expect("requirements")
}

#[test]
fn usdc_on_solana_is_bought_with_the_reference_client_and_facilitator() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(&facilitator, &price_feed("150.00"), &[]);
    let (payer_usdc, our_usdc) = (
        net.get("payer_usdc_account"),
        net.get("pay_to_usdc_account"),
    );
    let (payer0, ours0) = (net.token_units(&payer_usdc), net.token_units(&our_usdc));

    let bought = buy_svm(&net, &url(&server), &body(), Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    let answer = bought.json();
    let document = answer.get("document").expect("document");
    assert_recipe_verifies(&server, document, DELIVERABLE);
    let paid = decode_b64_json(&bought.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(paid["success"], true);
    assert_eq!(paid["network"], net.get("network"));
    assert_eq!(paid["payer"], net.get("payer"));
    assert_eq!(net.token_units(&payer_usdc), payer0 - BASIC_USDC);
    assert_eq!(net.token_units(&our_usdc), ours0 + BASIC_USDC);

    // One payment, resent as it was, under an Idempotency-Key and without one, and
    // re-encoded (keys reordered, spaces): one purchase, moved once.
    let payment = sign_svm_payment(&net, &url(&server), &body());
    let idem = key();
    let first = post(
        &server,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
    );
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let again = post(
        &server,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
    );
    assert_eq!(again.status, 201);
    assert_eq!(
        json_of(&again).get("verdict_id"),
        json_of(&first).get("verdict_id")
    );
    let bare = post(&server, &[("PAYMENT-SIGNATURE", &payment)]);
    assert_eq!(bare.status, 201, "{}", String::from_utf8_lossy(&bare.body));
    assert_eq!(
        json_of(&bare).get("verdict_id"),
        json_of(&first).get("verdict_id")
    );
    let mut raw = decode_b64_json(&payment);
    let tx = raw["payload"]["transaction"].take();
    raw["payload"] = serde_json::json!({"transaction": tx});
    let respelled = umpire_x402::encode_header(
        &serde_json::from_str::<serde_json::Value>(
            &serde_json::to_string_pretty(&raw).expect("json"),
        )
        .expect("json"),
    );
    let other_key = post(
        &server,
        &[
            ("PAYMENT-SIGNATURE", &respelled),
            ("Idempotency-Key", &key()),
        ],
    );
    assert_eq!(
        other_key.status,
        201,
        "{}",
        String::from_utf8_lossy(&other_key.body)
    );
    assert_eq!(
        json_of(&other_key).get("verdict_id"),
        json_of(&first).get("verdict_id"),
        "the same purchase, not a second one"
    );
    // The same payment for another request: refused, named for Solana.
    let other_body = request(
        server.addr,
        "POST",
        "/v1/verdicts/basic",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", &payment),
        ],
        Some(
            body()
                .replace("all tests pass", "all tests passed")
                .as_bytes(),
        ),
    );
    assert_eq!(other_body.status, 402);
    assert_eq!(
        settlement(&other_body, "payment-response")["errorReason"],
        "duplicate_settlement"
    );
    assert_eq!(net.token_units(&payer_usdc), payer0 - 2 * BASIC_USDC);
    assert_eq!(net.token_units(&our_usdc), ours0 + 2 * BASIC_USDC);
}

#[test]
fn a_solana_settlement_that_fails_voids_the_purchase_and_the_key_buys_again() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(
        &facilitator,
        &price_feed("150.00"),
        &[("UMPIRE_REQUEST_BUDGET_MS", "6000")],
    );
    let (payer_usdc, our_usdc) = (
        net.get("payer_usdc_account"),
        net.get("pay_to_usdc_account"),
    );
    let payer0 = net.token_units(&payer_usdc);
    let idem = key();

    // The facilitator's broadcast fails at the node: it says `transaction_failed` and
    // names no transaction, which is also what a broadcast whose answer was lost looks
    // like. So the purchase is pending (502, never a 402 "nothing was charged").
    let payment = sign_svm_payment(&net, &url(&server), &body());
    net.fail_sends(1);
    let pending = post(
        &server,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
    );
    assert_eq!(
        pending.status,
        502,
        "{}",
        String::from_utf8_lossy(&pending.body)
    );
    let s = settlement(&pending, "payment-response");
    assert_eq!(s["success"], false);
    assert_eq!(s["errorReason"], "settlement_pending", "{s}");
    // A new payment under the key is never taken.
    let second = sign_svm_payment(&net, &url(&server), &body());
    let refused = post(
        &server,
        &[("PAYMENT-SIGNATURE", &second), ("Idempotency-Key", &idem)],
    );
    assert_eq!(
        refused.status,
        409,
        "{}",
        String::from_utf8_lossy(&refused.body)
    );
    // Its reconciler asks the facilitator again (no signature is known to look up):
    // settled once, by the service itself.
    let started = std::time::Instant::now();
    while net.token_units(&our_usdc) < BASIC_USDC {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "the pending purchase was not settled by its reconciler"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let bought = post(
        &server,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
    );
    assert_eq!(
        bought.status,
        201,
        "{}",
        String::from_utf8_lossy(&bought.body)
    );
    assert_eq!(net.token_units(&payer_usdc), payer0 - BASIC_USDC);
    assert_eq!(net.token_units(&our_usdc), BASIC_USDC);

    // Native SOL, whose broadcast is ours: refused by the node, voided the same way.
    let sol_payer = net.get("sol_payer");
    let lamports0 = net.lamports(&sol_payer);
    let payment = net.sign_native(&required(&server), None);
    net.fail_sends(1);
    let voided = post(
        &server,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &key())],
    );
    assert_eq!(
        voided.status,
        402,
        "{}",
        String::from_utf8_lossy(&voided.body)
    );
    assert_eq!(
        settlement(&voided, "payment-response")["errorReason"],
        "invalid_exact_svm_transaction_failed"
    );
    assert_eq!(net.lamports(&sol_payer), lamports0, "nothing charged");
}

/// A native SOL transfer broadcast but not confirmed by the deadline is not counted as
/// paid (the payer could have had it dropped): the answer is 502 with nothing
/// delivered, and the identical retry delivers the verdict once the chain confirms it,
/// charged once.
#[test]
fn an_unconfirmed_sol_transfer_is_delivered_only_once_it_lands() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(
        &facilitator,
        &price_feed("150.00"),
        &[("UMPIRE_REQUEST_BUDGET_MS", "3000")],
    );
    let sol_payer = net.get("sol_payer");
    let ours = net.get("pay_to");
    let ours0 = net.lamports(&ours);
    let required = required(&server);
    let price: u64 = required
        .accepts
        .iter()
        .find(|r| r.asset == umpire_x402::svm::NATIVE_SOL_ASSET)
        .and_then(|r| r.amount.to_u64())
        .expect("SOL option");
    let payment = net.sign_native(&required, None);
    let idem = key();
    let headers = [
        ("PAYMENT-SIGNATURE", payment.as_str()),
        ("Idempotency-Key", idem.as_str()),
    ];

    net.hold_statuses(true);
    let unknown = post(&server, &headers);
    assert_eq!(
        unknown.status,
        502,
        "{}",
        String::from_utf8_lossy(&unknown.body)
    );
    let body = json_of(&unknown);
    assert_eq!(
        body.get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str),
        Some("chain_unavailable")
    );
    assert!(
        body.get("document").is_none(),
        "nothing delivered unconfirmed"
    );
    // Still unconfirmed: the retry is not delivered either; the purchase is pending
    // (409 in_flight, settlement_pending), never a 402.
    let still = post(&server, &headers);
    assert_eq!(
        still.status,
        409,
        "{}",
        String::from_utf8_lossy(&still.body)
    );
    assert_eq!(
        json_of(&still)
            .get("error")
            .and_then(|e| e.get("reason"))
            .and_then(Value::as_str),
        Some("settlement_pending")
    );

    net.hold_statuses(false);
    let delivered = post(&server, &headers);
    assert_eq!(
        delivered.status,
        201,
        "{}",
        String::from_utf8_lossy(&delivered.body)
    );
    assert_eq!(net.lamports(&ours), ours0 + price, "charged once");
    assert_eq!(
        settlement(&delivered, "payment-response")["payer"],
        sol_payer.as_str()
    );
    // And again: the same purchase, no second charge.
    assert_eq!(post(&server, &headers).status, 201);
    assert_eq!(net.lamports(&ours), ours0 + price);
}

/// Confirmation polls follow the slots: on a cluster that confirms a transfer about two
/// slots after it lands, a purchase asks for its status a few times, not on a schedule
/// blind to the slots (at once, then 5 ms doubling: nine polls by then).
#[test]
fn sol_confirmation_polls_follow_the_slots() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(
        &facilitator,
        &price_feed("150.00"),
        &[("UMPIRE_SOLANA_SLOT_MS", "400")],
    );
    net.confirm_after(std::time::Duration::from_millis(900));
    let required = required(&server);
    let payment = net.sign_native(&required, None);
    let before = net.calls_of("getSignatureStatuses");
    let r = post(&server, &[("PAYMENT-SIGNATURE", payment.as_str())]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let polls = net.calls_of("getSignatureStatuses") - before;
    // At 400 ms, then every 200 ms: confirmed by the poll at 1,000 ms.
    assert!((1..=5).contains(&polls), "{polls} status polls");
}

#[test]
fn native_sol_is_bought_at_the_quote_and_umpire_buy_pays_both_solana_rails() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(&facilitator, &price_feed("150.00"), &[]);
    let (sol_payer, pay_to) = (net.get("sol_payer"), net.get("pay_to"));
    let files = TempDir::new("buy-svm");
    let spec = files.write("spec.json", SPEC.as_bytes());
    let deliverable = files.write("deliverable.json", DELIVERABLE.as_bytes());
    let base = format!("http://{}", server.addr);
    let buy_at = |base: &str, rail: &str, keypair: &str, cap: &str| {
        let mut args: Vec<String> = [
            "buy",
            "basic",
            "--spec",
            &spec.to_string_lossy(),
            "--deliverable",
            &deliverable.to_string_lossy(),
            "--rail",
            rail,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(net.buy_args(keypair));
        if !cap.is_empty() {
            args.extend(["--max-amount".to_owned(), cap.to_owned()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        run_umpire(&args, &[("UMPIRE_BASE_URL", base)])
    };
    let buy_capped = |rail: &str, keypair: &str, cap: &str| buy_at(&base, rail, keypair, cap);
    let buy = |rail: &str, keypair: &str| buy_capped(rail, keypair, "");

    let (payer0, ours0) = (net.lamports(&sol_payer), net.lamports(&pay_to));
    // A SOL quote is bounded by nothing pinned: without the caller's own SOL cap,
    // nothing is signed.
    let (code, _, stderr) = buy("sol", "sol_payer_keypair");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--max-amount"), "{stderr}");
    assert_eq!(net.lamports(&sol_payer), payer0, "nothing paid");
    let (code, _, stderr) = buy_capped("sol", "sol_payer_keypair", "0.001sol");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("above --max-amount"), "{stderr}");
    let (code, stdout, stderr) = buy_capped("sol", "sol_payer_keypair", "0.01sol");
    assert_eq!(code, 0, "{stderr}");
    let answer = umpire_core::json::parse(stdout.as_bytes()).expect("JSON answer");
    assert_recipe_verifies(
        &server,
        answer.get("document").expect("document"),
        DELIVERABLE,
    );
    assert_eq!(
        net.lamports(&pay_to),
        ours0 + BASIC_LAMPORTS_AT_150,
        "the quoted lamports, to the lamport"
    );
    assert_eq!(
        net.lamports(&sol_payer),
        payer0 - BASIC_LAMPORTS_AT_150 - FEE_LAMPORTS
    );
    assert_eq!(
        answer
            .get("settlement")
            .and_then(|s| s.get("payer"))
            .and_then(Value::as_str),
        Some(sol_payer.as_str())
    );

    // A mirror naming another fee payer (which the offers do not cover) would have the
    // payer's transfer signed for a stranger to land: the pinned fee payer refuses it.
    let our_usdc = net.get("pay_to_usdc_account");
    let mirror = Mirror::start(&base, "feepayer");
    let (code, _, stderr) = buy_at(&mirror.base, "solana", "payer_keypair", "");
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not one of the rails pinned"), "{stderr}");
    assert_eq!(mirror.payments_seen(), 0, "nothing signed");
    assert_eq!(net.token_units(&our_usdc), 0);

    // USDC on Solana from the same client, through the facilitator.
    let (code, _, stderr) = buy("solana", "payer_keypair");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(net.token_units(&our_usdc), BASIC_USDC);

    // Paying less than the quote, or a transaction whose blockhash has expired: refused
    // before any work, nothing charged, the reason named for Solana.
    let lamports = net.lamports(&sol_payer);
    let short = net.sign_native(&required(&server), Some(BASIC_LAMPORTS_AT_150 - 1));
    let r = post(&server, &[("PAYMENT-SIGNATURE", &short)]);
    assert_eq!(r.status, 402);
    assert_eq!(
        settlement(&r, "payment-response")["errorReason"],
        "sol_quote_invalid",
        "the quote's MAC covers its amount"
    );
    let stale = net.sign_native(&required(&server), None);
    net.expire_blockhash();
    let r = post(&server, &[("PAYMENT-SIGNATURE", &stale)]);
    assert_eq!(r.status, 402);
    assert_eq!(
        settlement(&r, "payment-response")["errorReason"],
        "invalid_exact_svm_transaction_simulation_failed"
    );
    assert!(String::from_utf8_lossy(&r.body).contains("BlockhashNotFound"));
    assert_eq!(net.lamports(&sol_payer), lamports);

    // One SOL payment resent: the same purchase, moved once.
    let payment = net.sign_native(&required(&server), None);
    let first = post(&server, &[("PAYMENT-SIGNATURE", &payment)]);
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let again = post(
        &server,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &key())],
    );
    assert_eq!(
        again.status,
        201,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(
        json_of(&again).get("verdict_id"),
        json_of(&first).get("verdict_id")
    );
    assert_eq!(
        net.lamports(&sol_payer),
        lamports - BASIC_LAMPORTS_AT_150 - FEE_LAMPORTS
    );
}

#[test]
fn a_sol_quote_holds_on_another_instance_for_its_window_and_not_after() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    // Three instances sharing only key material: A quotes for 60 s at $150, C for
    // 40 s at $150, B reads a feed that has moved to $120.
    let a = net.serve(&facilitator, &price_feed("150.00"), &[]);
    let with_a_key = || {
        let dir = TempDir::new("serve-svm-shared-key");
        let key = umpire_server::datadir::KEY_FILE;
        std::fs::copy(a.data.path().join(key), dir.path().join(key)).expect("copy the key");
        dir
    };
    let b = net.serve_in(with_a_key(), &facilitator, &price_feed("120.00"), &[]);
    let c = net.serve_in(
        with_a_key(),
        &facilitator,
        &price_feed("150.00"),
        &[("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "40")],
    );
    let from_a = net.sign_native(&required(&a), None);
    let from_c = net.sign_native(&required(&c), None);
    assert_eq!(
        required(&b)
            .accepts
            .iter()
            .find(|r| r.asset == "native")
            .map(|r| r.amount.to_string()),
        Some(BASIC_LAMPORTS_AT_120.to_string()),
        "B quotes from the moved feed"
    );

    std::thread::sleep(std::time::Duration::from_secs(50));
    let (pay_to, sol_payer) = (net.get("pay_to"), net.get("sol_payer"));
    let (ours0, payer0) = (net.lamports(&pay_to), net.lamports(&sol_payer));
    let bought = post(&b, &[("PAYMENT-SIGNATURE", &from_a)]);
    assert_eq!(
        bought.status,
        201,
        "{}",
        String::from_utf8_lossy(&bought.body)
    );
    assert_eq!(
        net.lamports(&pay_to),
        ours0 + BASIC_LAMPORTS_AT_150,
        "A's quote, not B's price"
    );

    let late = post(&b, &[("PAYMENT-SIGNATURE", &from_c)]);
    assert_eq!(late.status, 402, "{}", String::from_utf8_lossy(&late.body));
    assert_eq!(
        settlement(&late, "payment-response")["errorReason"],
        "sol_quote_expired"
    );
    let error = json_of(&late);
    let message = error
        .get("error")
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("quote expired"), "{message}");
    let fresh: PaymentRequired =
        decode_header(late.header("payment-required").expect("a new quote")).expect("402");
    assert!(
        fresh
            .accepts
            .iter()
            .any(|r| r.asset == "native" && r.amount == BASIC_LAMPORTS_AT_120.to_string()),
        "the refusal carries a fresh quote"
    );
    assert_eq!(
        net.lamports(&sol_payer),
        payer0 - BASIC_LAMPORTS_AT_150 - FEE_LAMPORTS
    );
}

#[test]
fn either_payment_header_carries_either_version_and_is_answered_in_kind() {
    // The reference v2 client's payload under X-PAYMENT (as many agent frameworks send).
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payer = devnet.get("payer");
    let before = devnet.balance(&payer);
    let v2 = sign_payment(&devnet, &url(&server), &body());
    let r = post(&server, &[("X-PAYMENT", &v2), ("Idempotency-Key", &key())]);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        r.header("payment-response").is_none(),
        "answered in the header it came in"
    );
    assert_eq!(settlement(&r, "x-payment-response")["success"], true);
    assert_eq!(devnet.balance(&payer), before - u128::from(BASIC_USDC));
    // And under PAYMENT-SIGNATURE, answered in PAYMENT-RESPONSE.
    let v2 = sign_payment(&devnet, &url(&server), &body());
    let r = post(&server, &[("PAYMENT-SIGNATURE", &v2)]);
    assert_eq!(r.status, 201);
    assert!(r.header("x-payment-response").is_none());
    assert_eq!(settlement(&r, "payment-response")["success"], true);
}

/// The payment-identifier extension on Solana: the reference SVM client with an id and no
/// Idempotency-Key buys once, replays under the same id with no second charge, and the
/// same id with another body is 409.
#[test]
fn the_payment_identifier_holds_on_solana() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(&facilitator, &price_feed("150.00"), &[]);
    let (payer_usdc, our_usdc) = (
        net.get("payer_usdc_account"),
        net.get("pay_to_usdc_account"),
    );
    let payer0 = net.token_units(&payer_usdc);
    let id = format!("pay_{}", umpire_host::random_id("sol").replace('_', ""));
    let (svm, url) = (net.svm_json(), url(&server));
    let buy = |body: &str| {
        let v = umpire_blackbox::chain::node_json(
            "tests/js/buy.mjs",
            &[
                "--svm",
                &svm,
                "--url",
                &url,
                "--body",
                body,
                "--payment-id",
                &id,
            ],
        );
        (
            v["status"].as_u64().unwrap_or(0),
            v["body"].as_str().unwrap_or_default().to_owned(),
        )
    };
    let (status, first) = buy(&body());
    assert_eq!(status, 201, "{first}");
    let (status, again) = buy(&body());
    assert_eq!(status, 201, "{again}");
    let id_of = |t: &str| {
        umpire_core::json::parse(t.as_bytes()).ok().and_then(|v| {
            v.get("verdict_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
    };
    assert_eq!(id_of(&again), id_of(&first));
    assert_eq!(
        net.token_units(&payer_usdc),
        payer0 - BASIC_USDC,
        "charged once"
    );
    assert_eq!(net.token_units(&our_usdc), BASIC_USDC);
    let other =
        format!(r##"{{"spec":{SPEC},"deliverable":{{"text":"# Report\nsomething else"}}}}"##);
    let (status, reused) = buy(&other);
    assert_eq!(status, 409, "{reused}");
    assert_eq!(net.token_units(&payer_usdc), payer0 - BASIC_USDC);
}

/// docs/paying.md: an unconfirmed native SOL transfer is delivered on the retry even
/// after its quote's window (`extra.quote.expiresAt`) has closed: the payer paid the
/// quoted amount in time, and the retry of that purchase is no new purchase at a new
/// quote. Would catch a retry refused (or asked to pay again at today's rate) because
/// the quote it was signed against ran out while the chain was slow.
#[test]
fn an_unconfirmed_sol_transfer_is_delivered_on_a_retry_past_its_quote() {
    let net = SolanaNet::start();
    let facilitator = SvmFacilitator::start(&net);
    let server = net.serve(
        &facilitator,
        &price_feed("150.00"),
        &[
            ("UMPIRE_REQUEST_BUDGET_MS", "3000"),
            // The shortest quote window the 3-s budget allows.
            ("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "12"),
        ],
    );
    let ours = net.get("pay_to");
    let ours0 = net.lamports(&ours);
    let required = required(&server);
    let option = required
        .accepts
        .iter()
        .find(|r| r.asset == umpire_x402::svm::NATIVE_SOL_ASSET)
        .expect("SOL option");
    let price = option.amount.to_u64().expect("price");
    let expires_at = option.extra["quote"]["expiresAt"]
        .as_u64()
        .expect("quote.expiresAt");
    let payment = net.sign_native(&required, None);
    let idem = key();
    let headers = [
        ("PAYMENT-SIGNATURE", payment.as_str()),
        ("Idempotency-Key", idem.as_str()),
    ];
    net.hold_statuses(true);
    let unknown = post(&server, &headers);
    assert_eq!(
        unknown.status,
        502,
        "{}",
        String::from_utf8_lossy(&unknown.body)
    );
    // The quote's window closes while the chain says nothing.
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    while now() <= expires_at + 1 {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    net.hold_statuses(false);
    let delivered = post(&server, &headers);
    assert_eq!(
        delivered.status,
        201,
        "{}",
        String::from_utf8_lossy(&delivered.body)
    );
    assert_eq!(net.lamports(&ours), ours0 + price, "charged once");
    // Without the key too: the same payment is answered with its purchase.
    let again = post(&server, &[("PAYMENT-SIGNATURE", payment.as_str())]);
    assert_eq!(
        again.status,
        201,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(net.lamports(&ours), ours0 + price);
}
