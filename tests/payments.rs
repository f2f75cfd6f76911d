//! x402 end to end, the way a customer meets it: the reference JavaScript clients
//! (`@x402/fetch` + `@x402/evm` for v2, `x402-fetch` for v1) paying the real
//! `umpire serve`, settled on anvil against the test EIP-3009 token, by Umpire itself
//! or by the reference facilitator. Balances are read from the chain.

use std::sync::Arc;

use base64::Engine;
use umpire_blackbox::chain::{Devnet, Facilitator, Settlement, buy_v1, buy_v2, sign_payment};
use umpire_blackbox::{
    HOUR_WINDOW_MS, Held, PRICE_BASIC, PRICE_PROBE, Reply, Server, assert_recipe_verifies,
    decode_b64_json, pay_in_background, request, serve_fixed,
};
use umpire_core::json::Value;

const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"},"job_ref":"erc8183:job/9"}"###;

fn url(server: &Server, tier: &str) -> String {
    format!("http://{}/v1/verdicts/{tier}", server.addr)
}

fn post(server: &Server, body: &str, headers: &[(&str, &str)]) -> Reply {
    let mut all = vec![("Content-Type", "application/json")];
    all.extend_from_slice(headers);
    request(
        server.addr,
        "POST",
        "/v1/verdicts/basic",
        &all,
        Some(body.as_bytes()),
    )
}

fn key() -> String {
    umpire_host::random_id("idem")
}

const PROBE: &str = "/v1/verdicts/probe";

/// A probe purchase that can be held mid-check: a page answering only once released,
/// the service on `devnet` (fetching loopback), and a purchase body whose one check
/// reads that page.
fn held_probe(devnet: &Devnet) -> (Held, Server, String) {
    let page = Held::start("service up");
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{}/status","expect":{{"status":200,"keyword":"up"}}}}]}},"deliverable":{{"text":"deployed"}}}}"#,
        page.addr
    );
    (page, server, body)
}

#[test]
fn the_402_names_every_rail_in_header_and_body_and_refusals_come_first() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let r = post(&server, BODY, &[]);
    assert_eq!(r.status, 402);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let header = decode_b64_json(r.header("payment-required").expect("PAYMENT-REQUIRED"));
    assert_eq!(header["x402Version"], 2);
    assert_eq!(header["accepts"][0]["network"], devnet.info["network"]);
    assert_eq!(header["accepts"][0]["amount"], "1000000");
    assert_eq!(
        header["resource"]["url"],
        "https://umpire.vimabrosta.com/v1/verdicts/basic"
    );
    let body = r.json();
    assert_eq!(
        body.get("requirements"),
        Some(&Value::from(header.clone())),
        "the body mirrors the header"
    );
    assert_eq!(r.error_code(), "payment_required");

    // Refused before any payment is asked for: no 402, no PAYMENT-REQUIRED.
    let bad_spec =
        r#"{"spec":{"checks":[{"type":"regex","pattern":"(a+)+$"}]},"deliverable":{"text":"x"}}"#;
    let r = post(&server, bad_spec, &[]);
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.error_code(), "invalid_spec");
    assert!(r.header("payment-required").is_none());
    let r = request(
        server.addr,
        "POST",
        "/v1/verdicts/platinum",
        &[("Content-Type", "application/json")],
        Some(BODY.as_bytes()),
    );
    assert_eq!(r.status, 404);
    assert_eq!(r.error_code(), "unknown_tier");
    let r = post(&server, BODY, &[("Idempotency-Key", "short")]);
    assert_eq!(r.error_code(), "invalid_idempotency_key");
}

#[test]
fn the_reference_client_buys_a_basic_verdict_and_retries_replay_without_paying() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payer = devnet.get("payer");
    let pay_to = devnet.get("pay_to");
    let (payer0, pay_to0) = (devnet.balance(&payer), devnet.balance(&pay_to));
    let idem = key();

    let bought = buy_v2(&devnet, &url(&server, "basic"), BODY, Some(&idem));
    assert_eq!(bought.status, 201, "{}", bought.body);
    let settlement = decode_b64_json(&bought.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(settlement["success"], true);
    assert_eq!(settlement["network"], devnet.info["network"]);
    assert!(
        settlement["transaction"]
            .as_str()
            .is_some_and(|t| t.len() == 66)
    );
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
    assert_eq!(devnet.balance(&pay_to), pay_to0 + PRICE_BASIC);

    let body = bought.json();
    let document = body.get("document").expect("document").clone();
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("pass")
    );
    assert_eq!(
        document.get("job_ref").and_then(Value::as_str),
        Some("erc8183:job/9")
    );
    assert_recipe_verifies(
        &server,
        &document,
        r##"{"text":"# Report\nall tests pass"}"##,
    );

    // The status link with the one-time secret returns the same document.
    let id = body.get("verdict_id").and_then(Value::as_str).expect("id");
    // docs/api.md: the 201 names the paying wallet and the status link (also its
    // `Location`), whose path is the one opened below.
    assert_eq!(
        body.get("payer")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase),
        Some(payer.to_ascii_lowercase()),
        "the 201's payer is the wallet that paid"
    );
    let status_url = body
        .get("status_url")
        .and_then(Value::as_str)
        .expect("status_url");
    assert!(
        status_url.ends_with(&format!("/v1/verdicts/{id}")),
        "{status_url}"
    );
    assert_eq!(bought.header("location").as_deref(), Some(status_url));
    let secret = body.get("secret").and_then(Value::as_str).expect("secret");
    let bearer = format!("Bearer {secret}");
    let status = request(
        server.addr,
        "GET",
        &format!("/v1/verdicts/{id}"),
        &[("Authorization", &bearer)],
        None,
    );
    assert_eq!(status.status, 200);
    assert_eq!(status.json().get("document"), Some(&document));

    // Same key, same body: the original response, no second transfer (the client
    // signs a fresh payment for the second 402; it is never submitted).
    let again = buy_v2(&devnet, &url(&server, "basic"), BODY, Some(&idem));
    assert_eq!(again.status, 201);
    assert_eq!(again.body, bought.body, "a replay is the original response");
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);

    // Same key, another body: refused, nothing charged.
    let other = BODY.replace("all tests pass", "most tests pass");
    let reuse = buy_v2(&devnet, &url(&server, "basic"), &other, Some(&idem));
    assert_eq!(reuse.status, 409, "{}", reuse.body);
    assert!(reuse.body.contains("idempotency_key_reuse"));
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
}

#[test]
fn twenty_concurrent_requests_with_one_key_and_one_payment_settle_once() {
    let devnet = Devnet::start();
    let server = Arc::new(devnet.serve(Settlement::SelfSettle, &[]));
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let payment = Arc::new(sign_payment(&devnet, &url(&server, "basic"), BODY));
    let idem = Arc::new(key());
    let replies: Vec<Reply> = (0..20)
        .map(|_| {
            let (server, payment, idem) = (server.clone(), payment.clone(), idem.clone());
            std::thread::spawn(move || {
                post(
                    &server,
                    BODY,
                    &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().expect("request thread"))
        .collect();
    let created: Vec<&Reply> = replies.iter().filter(|r| r.status == 201).collect();
    assert!(!created.is_empty(), "one request must win");
    for r in &replies {
        match r.status {
            // The one purchase: its first answer with the secret, the replays to the
            // spent payment without it.
            201 => {
                let (this, first) = (r.json(), created[0].json());
                assert_eq!(
                    (this.get("verdict_id"), this.get("document")),
                    (first.get("verdict_id"), first.get("document")),
                    "every 201 is the one purchase"
                );
            }
            409 => {
                assert_eq!(r.error_code(), "in_flight");
                assert!(
                    r.header("retry-after").is_some(),
                    "in_flight says when to retry"
                );
            }
            other => panic!("unexpected {other}: {}", String::from_utf8_lossy(&r.body)),
        }
    }
    assert_eq!(
        devnet.balance(&payer),
        payer0 - PRICE_BASIC,
        "settled exactly once"
    );
}

/// Re-encodes a PAYMENT-SIGNATURE after `edit` changes its JSON.
fn tampered(header: &str, edit: impl FnOnce(&mut serde_json::Value)) -> String {
    let mut v = decode_b64_json(header);
    edit(&mut v);
    base64::engine::general_purpose::STANDARD.encode(v.to_string())
}

fn assert_refused(r: &Reply, reason: &str) {
    assert_eq!(r.status, 402, "{}", String::from_utf8_lossy(&r.body));
    let s = decode_b64_json(
        r.header("payment-response")
            .expect("PAYMENT-RESPONSE on a refusal"),
    );
    assert_eq!(s["success"], false);
    assert_eq!(s["errorReason"], reason, "{s}");
    assert!(
        r.header("payment-required").is_some(),
        "the requirements come again"
    );
}

#[test]
fn bad_payments_are_refused_with_their_reason_and_nothing_settles() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let good = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let send = |h: &str| {
        post(
            &server,
            BODY,
            &[("PAYMENT-SIGNATURE", h), ("Idempotency-Key", &key())],
        )
    };

    let cheap = tampered(&good, |v| {
        v["accepted"]["amount"] = "250000".into();
        v["payload"]["authorization"]["value"] = "250000".into();
    });
    assert_refused(
        &send(&cheap),
        "invalid_exact_evm_payload_authorization_value",
    );
    let elsewhere = "0x000000000000000000000000000000000000dEaD";
    let misdirected = tampered(&good, |v| {
        v["accepted"]["payTo"] = elsewhere.into();
        v["payload"]["authorization"]["to"] = elsewhere.into();
    });
    assert_refused(
        &send(&misdirected),
        "invalid_exact_evm_payload_recipient_mismatch",
    );
    let expired = tampered(&good, |v| {
        v["payload"]["authorization"]["validBefore"] = "1700000000".into();
    });
    assert_refused(
        &send(&expired),
        "invalid_exact_evm_payload_authorization_valid_before",
    );
    let forged = tampered(&good, |v| {
        let sig = v["payload"]["signature"]
            .as_str()
            .expect("signature")
            .to_owned();
        // Flip one nibble of r.
        let flipped = if &sig[10..11] == "0" { "1" } else { "0" };
        v["payload"]["signature"] = format!("{}{}{}", &sig[..10], flipped, &sig[11..]).into();
    });
    assert_refused(&send(&forged), "invalid_exact_evm_payload_signature");
    let other_chain = tampered(&good, |v| v["accepted"]["network"] = "eip155:1".into());
    assert_refused(&send(&other_chain), "unsupported_scheme");
    assert_refused(&send("%%% not base64 %%%"), "invalid_payload");
    // A payment means exactly what it signs: padded with a field, it is refused.
    let padded = tampered(&good, |v| {
        v["payload"]["authorization"]["memo"] = "hi".into()
    });
    assert_refused(&send(&padded), "invalid_payload");
    let padded = tampered(&good, |v| v["payload"]["extra"] = 1.into());
    assert_refused(&send(&padded), "invalid_payload");
    assert_eq!(devnet.balance(&payer), payer0, "nothing settled");

    // The good payment buys once. Sent again for the same request, under a new key or
    // none, it is that purchase again (a lost answer is recovered by resending the
    // payment); for another request it is spent.
    let r = send(&good);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
    let replayed = send(&good);
    assert_eq!(
        replayed.status,
        201,
        "{}",
        String::from_utf8_lossy(&replayed.body)
    );
    assert_same_purchase_without_secret(&replayed, &r);
    let keyless = post(&server, BODY, &[("PAYMENT-SIGNATURE", &good)]);
    assert_eq!(
        keyless.status,
        201,
        "{}",
        String::from_utf8_lossy(&keyless.body)
    );
    assert_same_purchase_without_secret(&keyless, &r);
    // The replay goes only to the payer's own signature: the same authorization with a
    // forged signature (same payer, same nonce, so the same claim) gets nothing.
    assert_refused(&send(&forged), "invalid_exact_evm_payload_signature");
    let other_request = BODY.replace("# Report", "# Other report");
    assert_ne!(other_request, BODY);
    let elsewhere_bought = post(
        &server,
        &other_request,
        &[("PAYMENT-SIGNATURE", &good), ("Idempotency-Key", &key())],
    );
    assert_refused(
        &elsewhere_bought,
        "invalid_exact_evm_payload_authorization_nonce_used",
    );
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
}

/// A replay earned by presenting a payment: the purchase `original` answered, with the
/// one-time secret withheld (a settled authorization is public on chain).
fn assert_same_purchase_without_secret(replay: &Reply, original: &Reply) {
    let (replay, original) = (replay.json(), original.json());
    assert!(
        original.get("secret").and_then(Value::as_str).is_some(),
        "{original:?}"
    );
    assert_eq!(replay.get("secret"), Some(&Value::Null), "{replay:?}");
    for field in ["verdict_id", "document", "settlement", "status_url"] {
        assert_eq!(replay.get(field), original.get(field), "{field}");
    }
}

/// Every file of the embedded store, as bytes (the database, its WAL and shared memory).
fn store_bytes(dir: &std::path::Path) -> Vec<u8> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("data dir").flatten() {
        if entry.path().is_file() {
            out.extend(std::fs::read(entry.path()).unwrap_or_default());
        }
    }
    out
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The one-time secret is derived, never stored: after a purchase, its keyed replays
/// (withheld for the spent payment, the same secret again for one signed now), its
/// replay by payment (withheld) and a status read, the
/// embedded store's files hold neither the secret nor the webhook key made from it.
#[test]
fn the_embedded_store_holds_neither_the_secret_nor_the_webhook_key() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let idem = key();
    let keyed = [
        ("PAYMENT-SIGNATURE", payment.as_str()),
        ("Idempotency-Key", idem.as_str()),
    ];
    let bought = post(&server, BODY, &keyed);
    assert_eq!(
        bought.status,
        201,
        "{}",
        String::from_utf8_lossy(&bought.body)
    );
    let secret = bought
        .json()
        .get("secret")
        .and_then(Value::as_str)
        .expect("secret")
        .to_owned();
    // The spent payment is public on chain: its keyed replay withholds the secret; a
    // payment signed now proves the wallet and gets it again (and is not charged).
    let replay = post(&server, BODY, &keyed);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json().get("secret"), Some(&Value::Null));
    let fresh = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let proven = post(
        &server,
        BODY,
        &[
            ("PAYMENT-SIGNATURE", fresh.as_str()),
            ("Idempotency-Key", idem.as_str()),
        ],
    );
    assert_eq!(proven.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        proven.json().get("secret").and_then(Value::as_str),
        Some(secret.as_str()),
        "the keyed replay to a payment signed now gives the secret again"
    );
    let by_payment = post(&server, BODY, &[("PAYMENT-SIGNATURE", &payment)]);
    assert_same_purchase_without_secret(&by_payment, &bought);
    let id = bought
        .json()
        .get("verdict_id")
        .and_then(Value::as_str)
        .expect("id")
        .to_owned();
    let status = request(
        server.addr,
        "GET",
        &format!("/v1/verdicts/{id}"),
        &[("Authorization", &format!("Bearer {secret}"))],
        None,
    );
    assert_eq!(status.status, 200);

    let at_rest = store_bytes(server.data.path());
    assert!(contains(&at_rest, &id), "the store holds the purchase");
    let webhook_key = umpire_core::hash::sha256_hex(secret.as_bytes());
    assert!(
        !contains(&at_rest, secret.trim_start_matches("sec_")),
        "the secret is stored"
    );
    assert!(
        !contains(&at_rest, &webhook_key),
        "the webhook key is stored"
    );
}

/// `@x402/fetch` sends no Idempotency-Key. A 201 lost on its way back (a proxy's or
/// API Gateway's cut: to the server it is an answer given like any other) is recovered
/// by sending the same payment again: the same purchase, charged once.
#[test]
fn a_lost_answer_without_an_idempotency_key_is_recovered_by_resending_the_payment() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let lost = post(&server, BODY, &[("PAYMENT-SIGNATURE", &payment)]);
    assert_eq!(lost.status, 201, "{}", String::from_utf8_lossy(&lost.body));
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
    for _ in 0..2 {
        let again = post(&server, BODY, &[("PAYMENT-SIGNATURE", &payment)]);
        assert_eq!(
            again.status,
            201,
            "{}",
            String::from_utf8_lossy(&again.body)
        );
        assert_same_purchase_without_secret(&again, &lost);
        assert!(again.header("payment-response").is_some());
    }
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC, "charged once");
}

/// A client that hangs up mid-purchase loses only the answer: the purchase runs to its
/// end, and resending the same payment (no Idempotency-Key, as `@x402/fetch` sends it)
/// answers with the one verdict that payment bought, at every moment of hanging up.
#[test]
fn a_client_hanging_up_mid_purchase_gets_it_by_resending_the_payment() {
    use std::io::Write;
    const HANG_UPS_MS: [u64; 5] = [10, 30, 100, 300, 1000];
    let devnet = Devnet::start();
    // Receipts come 1.5 s late, so the later hang-ups land after the settlement went out
    // and before the purchase was recorded: a purchase cut there would hold its payment
    // until its claim lapsed (minutes), and the resend below would wait it out.
    let proxy = umpire_blackbox::chain::RpcProxy::start(&devnet);
    proxy.delay_receipts(std::time::Duration::from_millis(1500));
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_EVM_RPC_URL", proxy.url.as_str())],
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let payments = umpire_blackbox::chain::sign_payments(
        &devnet,
        &url(&server, "basic"),
        BODY,
        HANG_UPS_MS.len(),
    );
    let mut verdicts = std::collections::BTreeSet::new();
    for (ms, payment) in HANG_UPS_MS.iter().zip(&payments) {
        let mut conn = std::net::TcpStream::connect(server.addr).expect("connect");
        write!(
            conn,
            "POST /v1/verdicts/basic HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nPAYMENT-SIGNATURE: {payment}\r\nContent-Length: {}\r\n\r\n{BODY}",
            server.addr,
            BODY.len()
        )
        .expect("send");
        std::thread::sleep(std::time::Duration::from_millis(*ms));
        drop(conn);
        let resent = std::time::Instant::now();
        let first = post(&server, BODY, &[("PAYMENT-SIGNATURE", payment)]);
        assert!(
            resent.elapsed() < std::time::Duration::from_secs(15),
            "hung up after {ms} ms: the resend waited {:?} for a purchase that should have ended",
            resent.elapsed()
        );
        assert_eq!(
            first.status,
            201,
            "hung up after {ms} ms, then resent: {}",
            String::from_utf8_lossy(&first.body)
        );
        let again = post(&server, BODY, &[("PAYMENT-SIGNATURE", payment)]);
        assert_eq!(
            again.json().get("verdict_id"),
            first.json().get("verdict_id"),
            "hung up after {ms} ms: one purchase"
        );
        let id = first
            .json()
            .get("verdict_id")
            .and_then(Value::as_str)
            .expect("verdict_id")
            .to_owned();
        assert!(verdicts.insert(id), "a verdict per payment");
    }
    let paid = PRICE_BASIC * HANG_UPS_MS.len() as u128;
    assert_eq!(
        devnet.balance(&payer),
        payer0 - paid,
        "each payment charged once"
    );
}

#[test]
fn a_settlement_that_fails_after_the_checks_voids_the_purchase() {
    let devnet = Devnet::start();
    // The probe's page is held until the payer's funds have left: they leave between
    // verification (before any check runs) and settlement (after every check).
    let (page, server, body) = held_probe(&devnet);
    let payer = devnet.get("payer");
    let elsewhere = devnet.get("settler");
    let payer0 = devnet.balance(&payer);
    let payment = sign_payment(&devnet, &url(&server, "probe"), &body);
    let idem = key();
    let purchase = pay_in_background(server.addr, PROBE, &body, &payment, Some(&idem));
    page.wait_for_request(std::time::Duration::from_secs(30));
    devnet.transfer(&payer, &elsewhere, payer0);
    page.release();
    let voided = purchase.join().expect("purchase thread");
    assert_eq!(
        voided.status,
        402,
        "{}",
        String::from_utf8_lossy(&voided.body)
    );
    let s = decode_b64_json(voided.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(s["success"], false);
    assert_eq!(s["errorReason"], "insufficient_funds", "{s}");
    assert!(
        voided
            .json()
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .is_some_and(|m| m.contains("voided")),
        "{}",
        String::from_utf8_lossy(&voided.body)
    );
    assert!(
        voided.json().get("document").is_none(),
        "nothing is delivered"
    );

    // Funds back: the key was released, but the payer's revert cost us its gas, so its
    // payments are refused for a while (before any work, nothing sent, nothing charged).
    devnet.transfer(&elsewhere, &payer, payer0);
    let paused = buy_v2(&devnet, &url(&server, "probe"), &body, Some(&idem));
    assert_eq!(paused.status, 402, "{}", paused.body);
    let s = decode_b64_json(&paused.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(
        s["errorReason"], "invalid_exact_evm_payer_reverted_recently",
        "{s}"
    );
    assert_eq!(devnet.balance(&payer), payer0, "nothing charged");
}

/// docs/paying.md: Ctrl-C stops `umpire serve` taking connections and waits (up to a
/// minute) for the purchases in progress: a probe held mid-check when SIGINT arrives
/// is answered `201` once its page answers, charged once, and only then does the
/// process end. Would catch: a shutdown that drops a paid purchase mid-way (the money
/// moved or about to, no answer), or one that keeps taking new work.
#[test]
fn ctrl_c_lets_a_purchase_in_progress_finish_then_stops() {
    a_signal_lets_a_purchase_in_progress_finish_then_stops("INT");
}

/// The same for SIGTERM, what systemd, Docker and `kill` send to stop a service. Would
/// catch: a stop that kills the process mid-purchase (SIGTERM's default).
#[test]
fn sigterm_lets_a_purchase_in_progress_finish_then_stops() {
    a_signal_lets_a_purchase_in_progress_finish_then_stops("TERM");
}

fn a_signal_lets_a_purchase_in_progress_finish_then_stops(signal: &str) {
    let devnet = Devnet::start();
    let (page, server, body) = held_probe(&devnet);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let payment = sign_payment(&devnet, &url(&server, "probe"), &body);
    let purchase = pay_in_background(server.addr, PROBE, &body, &payment, Some(&key()));
    page.wait_for_request(std::time::Duration::from_secs(30));
    server.signal(signal);
    // New connections are refused while the purchase still runs.
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(server.addr).is_ok() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "still taking connections after Ctrl-C"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!server.has_ended(), "it waits for the purchase in progress");
    page.release();
    let answered = purchase
        .join()
        .expect("purchase thread: answered, not cut off");
    assert_eq!(
        answered.status,
        201,
        "{}",
        String::from_utf8_lossy(&answered.body)
    );
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_PROBE, "charged once");
    let started = std::time::Instant::now();
    while !server.has_ended() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the server did not end after its last purchase"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A payment that reached us is delivered, whoever broadcast it: an authorization a
/// stranger executes while the purchase works (a front-runner who saw the header, the
/// payer's own relayer) paid us, so the purchase is answered with that transaction,
/// and the authorization buys nothing else. The customer is charged once and gets what
/// they paid for; before, this answered 402 and kept the dollar.
#[test]
fn an_authorization_a_stranger_executes_mid_purchase_still_buys_it_once() {
    let devnet = Devnet::start();
    let (page, server, body) = held_probe(&devnet);
    let payer = devnet.get("payer");
    let stranger = devnet.accounts()[7].clone();
    let payer0 = devnet.balance(&payer);
    let payment = sign_payment(&devnet, &url(&server, "probe"), &body);
    let purchase = pay_in_background(server.addr, PROBE, &body, &payment, None);
    // Verified, now at work: the authorization is executed from outside.
    page.wait_for_request(std::time::Duration::from_secs(30));
    let receipt = devnet.execute_authorization(&stranger, &payment);
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    page.release();
    let bought = purchase.join().expect("purchase thread");
    let text = String::from_utf8_lossy(&bought.body).into_owned();
    assert_eq!(bought.status, 201, "{text}");
    let s = decode_b64_json(bought.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(s["success"], true, "{s}");
    assert_eq!(
        s["transaction"].as_str().map(str::to_lowercase),
        receipt["transactionHash"].as_str().map(str::to_lowercase),
        "the settlement names the stranger's transaction: {s}"
    );
    assert!(bought.json().get("document").is_some(), "{text}");

    // Resending it buys nothing more: the same purchase, never a second one.
    let again = request(
        server.addr,
        "POST",
        "/v1/verdicts/probe",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", &payment),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(
        again.status,
        201,
        "{}",
        String::from_utf8_lossy(&again.body)
    );
    assert_eq!(
        again.json().get("verdict_id"),
        bought.json().get("verdict_id"),
        "the same purchase"
    );
    let other = request(
        server.addr,
        "POST",
        "/v1/verdicts/probe",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", &payment),
        ],
        Some(body.replace("deployed", "deployed again").as_bytes()),
    );
    assert_eq!(
        other.status,
        402,
        "{}",
        String::from_utf8_lossy(&other.body)
    );
    assert_eq!(
        devnet.balance(&payer),
        payer0 - PRICE_PROBE,
        "moved once, by the stranger"
    );
    devnet.assert_ledger_matches_chain(&server);
}

#[test]
fn the_reference_facilitator_verifies_and_settles_for_us() {
    let devnet = Devnet::start();
    let facilitator = Facilitator::start(&devnet, None);
    let server = devnet.serve(Settlement::Facilitator(facilitator.url.clone()), &[]);
    // Its /supported lists our rail, so the start-up check has nothing to say.
    let rails = umpire_pay::config::rails_from(|k| {
        devnet
            .server_env(Settlement::Facilitator(facilitator.url.clone()))
            .into_iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v)
    })
    .expect("rails");
    let payments = umpire_pay::Payments {
        evm: None,
        native_sol: None,
        facilitator: Some(Arc::new(
            umpire_pay::settle::FacilitatorClient::new(
                &facilitator.url,
                Some(format!(
                    "Bearer {}",
                    umpire_blackbox::chain::FACILITATOR_TOKEN
                )),
            )
            .expect("client"),
        )),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    assert_eq!(
        runtime.block_on(payments.facilitator_mismatches(&rails.rails)),
        Ok(Vec::new())
    );
    let mut elsewhere = rails.clone();
    elsewhere.rails[0].network = "eip155:1".parse().expect("valid fixture");
    assert_eq!(
        runtime
            .block_on(payments.facilitator_mismatches(&elsewhere.rails))
            .map(|p| p.len()),
        Ok(1)
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let bought = buy_v2(&devnet, &url(&server, "basic"), BODY, Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    let s = decode_b64_json(&bought.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(s["success"], true);
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
    // A forged signature is refused by our offline check before the facilitator is asked.
    let good = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let cheap = tampered(&good, |v| {
        v["payload"]["authorization"]["validAfter"] = "1".into()
    });
    let r = post(
        &server,
        BODY,
        &[("PAYMENT-SIGNATURE", &cheap), ("Idempotency-Key", &key())],
    );
    assert_refused(&r, "invalid_exact_evm_payload_signature");
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
}

#[test]
fn the_v1_client_buys_with_x_payment() {
    // x402 v1 names networks; "base-sepolia" is chain 84532.
    let devnet = Devnet::start_on(Some(84532));
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let bought = buy_v1(&devnet, &url(&server, "basic"), BODY, Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    let s = decode_b64_json(
        &bought
            .header("x-payment-response")
            .expect("X-PAYMENT-RESPONSE"),
    );
    assert_eq!(s["success"], true);
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC);
}

/// `umpire serve` selling on `devnet` with rate limits on, an hour's window, and one
/// bucket's limit set (`var` = `value`).
fn limited(devnet: &Devnet, var: &str, value: &str) -> Server {
    devnet.serve(
        Settlement::SelfSettle,
        &[
            ("UMPIRE_RATE_LIMITS", "on"),
            ("UMPIRE_RATE_LIMIT_WINDOW_MS", HOUR_WINDOW_MS),
            (var, value),
        ],
    )
}

#[test]
fn replays_are_rate_limited_per_ip() {
    let devnet = Devnet::start();
    let server = limited(&devnet, "UMPIRE_RATE_LIMIT_REPLAY", "1");
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let idem = key();
    let headers = [
        ("PAYMENT-SIGNATURE", payment.as_str()),
        ("Idempotency-Key", idem.as_str()),
    ];
    let first = post(&server, BODY, &headers);
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let replay = post(&server, BODY, &headers);
    assert_eq!(replay.status, 201);
    assert_eq!(
        replay.json().get("verdict_id"),
        first.json().get("verdict_id")
    );
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let limited = post(&server, BODY, &headers);
    assert_eq!(limited.status, 429);
    assert_eq!(limited.error_code(), "rate_limited");
    assert!(limited.header("retry-after").is_some());
}

/// A lookup by payment counts in the replay bucket whether it finds the purchase or not:
/// a settled authorization is public on chain, so anyone can rebuild its header and
/// guess at the request it bought. With the bucket at 2, a guess (another request: the
/// payment is spent, 402) and the identical request (its purchase again) are answered,
/// and the next guess is 429. Would catch: misses not counted, which would make
/// guessing free.
#[test]
fn every_lookup_by_payment_counts_hit_or_miss() {
    let devnet = Devnet::start();
    let server = limited(&devnet, "UMPIRE_RATE_LIMIT_REPLAY", "2");
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let pay = [("PAYMENT-SIGNATURE", payment.as_str())];
    let first = post(&server, BODY, &pay);
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    let guess = BODY.replace("# Report", "# Another report");
    let statuses = [
        post(&server, &guess, &pay).status,
        post(&server, BODY, &pay).status,
        post(&server, &guess, &pay).status,
    ];
    assert_eq!(statuses, [402, 201, 429], "a miss, a hit, then limited");
}

/// A payment header that does not read as a payment is no payment: the request counts
/// in the unpaid bucket like one without any (its checks and lookups are unpaid work).
#[test]
fn a_header_that_is_no_payment_counts_as_unpaid() {
    let devnet = Devnet::start();
    let server = limited(&devnet, "UMPIRE_RATE_LIMIT_UNPAID", "3");
    // Its own 402 is the first unpaid request.
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    for name in ["PAYMENT-SIGNATURE", "X-PAYMENT"] {
        let r = post(&server, BODY, &[(name, "x")]);
        assert_ne!(r.status, 429, "{}", String::from_utf8_lossy(&r.body));
    }
    let limited = post(&server, BODY, &[("PAYMENT-SIGNATURE", "not-a-payment")]);
    assert_eq!(
        limited.status,
        429,
        "{}",
        String::from_utf8_lossy(&limited.body)
    );
    assert_eq!(limited.error_code(), "rate_limited");
    // A real payment is limited by itself, not by the bucket.
    let paid = post(&server, BODY, &[("PAYMENT-SIGNATURE", payment.as_str())]);
    assert_eq!(paid.status, 201, "{}", String::from_utf8_lossy(&paid.body));
}

/// A stand-in for the public price feed (Coinbase's spot-price API shape).
fn price_feed(amount: &'static str) -> std::net::SocketAddr {
    serve_fixed(
        "200 OK",
        "application/json",
        format!(r#"{{"data":{{"amount":"{amount}","base":"SOL","currency":"USD"}}}}"#).into_bytes(),
    )
}

fn solana_server(price_url: &str) -> Server {
    Server::start_with(&[
        (
            "UMPIRE_SOLANA_PAY_TO",
            "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
        ),
        (
            "UMPIRE_SOLANA_FEE_PAYER",
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
        ),
        ("UMPIRE_SOL_NATIVE", "on"),
        // USDC on Solana is verified and settled by a facilitator, native SOL on a Solana
        // node; a 402 calls neither.
        ("UMPIRE_FACILITATOR_URL", "http://127.0.0.1:9"),
        ("UMPIRE_SOLANA_RPC_URL", "http://127.0.0.1:9"),
        ("UMPIRE_SOL_PRICE_URL", price_url),
    ])
}

#[test]
fn native_sol_is_quoted_from_the_spot_rate_plus_the_buffer_or_left_out() {
    let feed = price_feed("150.00");
    let server = solana_server(&format!("http://{feed}/v2/prices/SOL-USD/spot"));
    let r = post(&server, BODY, &[]);
    assert_eq!(r.status, 402);
    let required = decode_b64_json(r.header("payment-required").expect("PAYMENT-REQUIRED"));
    let accepts = required["accepts"].as_array().expect("accepts");
    assert_eq!(accepts.len(), 2, "{required}");
    assert_eq!(
        accepts[0]["asset"],
        "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
    );
    assert_eq!(accepts[0]["amount"], "1000000");
    assert_eq!(
        accepts[0]["extra"]["feePayer"],
        "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"
    );
    // $1.00 at $150/SOL = 6,666,666.67 lamports; +1.5% = 6,766,666.67, rounded up.
    assert_eq!(accepts[1]["amount"], "6766667");

    // No price: the SOL option is left out rather than mispriced.
    let blind = solana_server("http://127.0.0.1:9/v2/prices/SOL-USD/spot");
    let r = post(&blind, BODY, &[]);
    let required = decode_b64_json(r.header("payment-required").expect("PAYMENT-REQUIRED"));
    assert_eq!(
        required["accepts"].as_array().map(Vec::len),
        Some(1),
        "{required}"
    );
}

const PAGE: &str = "<html><head><title>Release</title></head><body><h1 class=\"version\">v2.3.1</h1><p>deployed</p></body></html>";

/// The observation of check `i` in a signed document.
fn observation(document: &Value, i: usize) -> Value {
    document
        .get("results")
        .and_then(Value::as_array)
        .and_then(|r| r.get(i))
        .and_then(|r| r.get("observations"))
        .and_then(Value::as_array)
        .and_then(|o| o.first())
        .cloned()
        .unwrap_or_else(|| panic!("no observation for check {i} in {document:?}"))
}

fn field<'a>(v: &'a Value, k: &str) -> &'a Value {
    v.get(k).unwrap_or_else(|| panic!("no {k} in {v:?}"))
}

/// docs/fetching.md: each distinct URL is fetched once per pass and shared by the checks
/// naming it. A probe with two checks on one page (its status and keyword, and its
/// body's hash) makes one request at the page's server, and both checks judge that one
/// body. Would catch: a fetch per check (twice the load on the customer's site, and two
/// checks judging two different bodies of one page).
#[test]
fn checks_naming_one_url_share_one_fetch() {
    const PAGE: &str = "service up";
    let page = umpire_blackbox::Scripted::start(vec![(200, PAGE), (200, "changed")]);
    let devnet = Devnet::start();
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let at = format!("http://{}/status", page.addr);
    let sha = umpire_core::hash::sha256_hex(PAGE.as_bytes());
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"{at}","expect":{{"status":200,"keyword":"up"}}}},{{"type":"content_hash","target":"url","url":"{at}","sha256":"{sha}"}}]}},"deliverable":{{"text":"deployed"}}}}"#
    );
    let bought = buy_v2(&devnet, &url(&server, "probe"), &body, Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    let document = bought.json().get("document").cloned().expect("document");
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("pass"),
        "both checks judged the one body: {document:?}"
    );
    assert_eq!(
        page.received().len(),
        1,
        "one request for the page: {:?}",
        page.received()
    );
}

/// docs/fetching.md: no proxy is ever used. The server runs with every proxy variable
/// an HTTP library reads naming a recording server, and the page is on 127.0.0.2,
/// which `NO_PROXY` (127.0.0.1, the chain's RPC) does not exempt: the witness still
/// fetches it directly and the proxy hears nothing. Would catch: the fetcher built
/// without `no_proxy` (reqwest reads these variables by default), so an environment
/// reroutes, observes or forges what a verdict signs.
#[test]
fn no_proxy_from_the_environment_reroutes_a_fetch() {
    let page = std::net::TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let at = page.local_addr().expect("addr");
    std::thread::spawn(move || {
        for mut conn in page.incoming().flatten() {
            let mut buf = [0u8; 8192];
            let _ = std::io::Read::read(&mut conn, &mut buf);
            let _ = std::io::Write::write_all(
                &mut conn,
                b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\ndeployed",
            );
        }
    });
    let proxy = umpire_blackbox::Scripted::start(vec![(502, "a proxy"); 4]);
    let via = format!("http://{}", proxy.addr);
    let devnet = Devnet::start();
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[
            ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1,127.0.0.2"),
            ("HTTP_PROXY", &via),
            ("HTTPS_PROXY", &via),
            ("ALL_PROXY", &via),
            ("http_proxy", &via),
            ("https_proxy", &via),
            ("all_proxy", &via),
            ("NO_PROXY", "127.0.0.1"),
            ("no_proxy", "127.0.0.1"),
        ],
    );
    let url_ = format!("http://{at}/release");
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"{url_}","expect":{{"status":200,"keyword":"deployed"}}}}]}},"deliverable":{{"text":"deployed"}}}}"#
    );
    let bought = buy_v2(&devnet, &url(&server, "witness"), &body, Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    let document = bought.json().get("document").cloned().expect("document");
    let o = observation(&document, 0);
    assert_eq!(field(&o, "resolved_address").as_str(), Some("127.0.0.2"));
    assert_eq!(field(&o, "http_status"), &Value::from(200u64));
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("pass"),
        "{document:?}"
    );
    assert!(
        proxy.received().is_empty(),
        "a fetch went through the environment's proxy: {:?}",
        proxy.received()
    );
}

#[test]
fn a_paid_witness_verdict_observes_the_public_page() {
    let page = serve_fixed(
        "200 OK",
        "text/html; charset=utf-8",
        PAGE.as_bytes().to_vec(),
    );
    let devnet = Devnet::start();
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let url_ = format!("http://{page}/release");
    let body = format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"{url_}","expect":{{"status":200,"keyword":"deployed","selector":{{"selector":"h1.version","op":"eq","value":"v2.3.1"}}}}}}]}},"deliverable":{{"text":"I deployed v2.3.1"}}}}"#
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let bought = buy_v2(&devnet, &url(&server, "witness"), &body, Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    assert_eq!(
        devnet.balance(&payer),
        payer0 - 250_000,
        "witness costs $0.25"
    );
    let document = bought.json().get("document").cloned().expect("document");
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("pass"),
        "{document:?}"
    );
    let o = observation(&document, 0);
    assert_eq!(field(&o, "requested_url").as_str(), Some(url_.as_str()));
    assert_eq!(field(&o, "url").as_str(), Some(url_.as_str()));
    assert_eq!(field(&o, "http_status"), &Value::from(200u64));
    assert_eq!(field(&o, "resolved_address").as_str(), Some("127.0.0.1"));
    assert_eq!(field(&o, "tls"), &Value::Null);
    assert_eq!(field(&o, "redirect_hops"), &Value::from(0u64));
    assert_eq!(field(&o, "truncated"), &Value::Bool(false));
    assert_eq!(field(&o, "body_bytes"), &Value::from(PAGE.len() as u64));
    assert_eq!(
        field(&o, "body_sha256").as_str(),
        Some(umpire_core::hash::sha256_hex(PAGE.as_bytes()).as_str()),
        "anyone fetching the same URL can compare"
    );
    assert_eq!(
        field(field(&o, "headers"), "content-type").as_str(),
        Some("text/html; charset=utf-8")
    );
    assert!(
        field(&o, "fetched_at")
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_recipe_verifies(&server, &document, r#"{"text":"I deployed v2.3.1"}"#);

    // A witness reads no deliverable: none (or an empty one) is needed, and the
    // document names the empty deliverable's hash.
    let spec = format!(
        r#"{{"checks":[{{"type":"url_probe","url":"{url_}","expect":{{"status":200}}}}]}}"#
    );
    for body in [
        format!(r#"{{"spec":{spec}}}"#),
        format!(r#"{{"spec":{spec},"deliverable":{{}}}}"#),
    ] {
        let bought = buy_v2(&devnet, &url(&server, "witness"), &body, Some(&key()));
        assert_eq!(bought.status, 201, "{body}: {}", bought.body);
        let document = bought.json().get("document").cloned().expect("document");
        assert_recipe_verifies(&server, &document, "{}");
    }
    assert_eq!(devnet.balance(&payer), payer0 - 3 * 250_000);
    // A spec that reads the deliverable still needs it, before any payment.
    let r = request(
        server.addr,
        "POST",
        "/v1/verdicts/probe",
        &[("Content-Type", "application/json")],
        Some(br#"{"spec":{"checks":[{"type":"regex","pattern":"x"}]}}"#),
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        String::from_utf8_lossy(&r.body).contains("deliverable is required"),
        "{}",
        String::from_utf8_lossy(&r.body)
    );
}

#[test]
fn a_paid_probe_verdict_judges_urls_and_text_together() {
    let artifact = br#"{"ok":true,"build":{"id":42}}"#.to_vec();
    let api = serve_fixed("200 OK", "application/json", artifact.clone());
    let missing = serve_fixed("404 Not Found", "text/plain", b"gone".to_vec());
    let devnet = Devnet::start();
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let artifact_hash = umpire_core::hash::sha256_hex(&artifact);
    let body = format!(
        r#"{{"spec":{{"checks":[
            {{"type":"url_probe","url":"http://{api}/health","expect":{{"status":200,"json_path":{{"path":"build.id","op":"eq","value":42}}}}}},
            {{"type":"content_hash","sha256":"{artifact_hash}","target":"url","url":"http://{api}/artifact.json"}},
            {{"type":"url_probe","url":"http://{missing}/page","expect":{{"status":200}}}},
            {{"type":"regex","pattern":"shipped"}}
        ]}},"deliverable":{{"text":"shipped build 42"}}}}"#
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let bought = buy_v2(&devnet, &url(&server, "probe"), &body, Some(&key()));
    assert_eq!(bought.status, 201, "{}", bought.body);
    assert_eq!(devnet.balance(&payer), payer0 - 2_000_000, "probe costs $2");
    let document = bought.json().get("document").cloned().expect("document");
    let passed: Vec<bool> = document
        .get("results")
        .and_then(Value::as_array)
        .expect("results")
        .iter()
        .map(|r| r.get("passed") == Some(&Value::Bool(true)))
        .collect();
    assert_eq!(passed, vec![true, true, false, true]);
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("fail")
    );
    assert_eq!(
        field(&observation(&document, 1), "body_sha256").as_str(),
        Some(artifact_hash.as_str())
    );
    assert_eq!(
        field(&observation(&document, 2), "http_status"),
        &Value::from(404u64)
    );
    assert!(
        document
            .get("results")
            .and_then(Value::as_array)
            .and_then(|r| r[3].get("observations"))
            .is_none(),
        "checks that fetch nothing carry no observations"
    );
    assert_recipe_verifies(&server, &document, r#"{"text":"shipped build 42"}"#);
}

/// One purchase, logged as JSON at debug level: every line the paid path writes (the
/// paid routes and the payment code) is in the purchase's span and says what was bought;
/// from the held payment on, the lines carry its key, and the answer's line the
/// verdict's id, the one the buyer got.
#[test]
fn a_purchase_logs_its_span_on_every_line_of_the_paid_path() {
    let devnet = Devnet::start();
    let env = devnet.server_env(Settlement::SelfSettle);
    let mut env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    env.push(("UMPIRE_LOG_FORMAT", "json"));
    let server = Server::start_logged(&env);
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let bought = post(
        &server,
        BODY,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &key())],
    );
    assert_eq!(
        bought.status,
        201,
        "{}",
        String::from_utf8_lossy(&bought.body)
    );
    let verdict_id = bought
        .json()
        .get("verdict_id")
        .and_then(Value::as_str)
        .expect("verdict_id")
        .to_owned();
    let logs = server.logs();
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let text = |l: &serde_json::Value, path: &[&str]| -> Option<String> {
        let mut at = l;
        for p in path {
            at = at.get(p)?;
        }
        at.as_str().map(str::to_owned)
    };
    let paid_path = |l: &&serde_json::Value| {
        text(l, &["target"]).is_some_and(|t| {
            [
                "umpire_api::checkout",
                "umpire_api::products::verdict::buy",
                "umpire_api::products::verdict::judge",
                "umpire_api::products::verdict::purchase",
                "umpire_api::products::reputation",
                "umpire_pay",
            ]
            .iter()
            .any(|p| t.starts_with(p))
        })
    };
    let ours: Vec<&serde_json::Value> = lines.iter().filter(paid_path).collect();
    assert!(ours.len() >= 2, "the paid path logs the purchase:\n{logs}");
    for l in &ours {
        assert_eq!(
            text(l, &["span", "name"]).as_deref(),
            Some("purchase"),
            "{l}"
        );
        assert_eq!(
            text(l, &["span", "product"]).as_deref(),
            Some("verdict"),
            "{l}"
        );
        assert_eq!(text(l, &["span", "tier"]).as_deref(), Some("basic"), "{l}");
    }
    let held = ours
        .iter()
        .position(|l| {
            text(l, &["fields", "message"]).as_deref() == Some("payment verified and held")
        })
        .unwrap_or_else(|| panic!("the held payment is logged:\n{logs}"));
    let payment_key = text(ours[held], &["span", "payment_key"]).expect("the payment's key");
    assert_eq!(payment_key.len(), 64, "a hash: {payment_key}");
    for l in &ours[held..] {
        assert_eq!(
            text(l, &["span", "payment_key"]),
            Some(payment_key.clone()),
            "{l}"
        );
    }
    let answered = ours
        .iter()
        .find(|l| {
            text(l, &["fields", "message"]).as_deref() == Some("purchase settled and answered")
        })
        .unwrap_or_else(|| panic!("the answer is logged:\n{logs}"));
    assert_eq!(text(answered, &["span", "verdict_id"]), Some(verdict_id));
    assert!(text(answered, &["fields", "transaction"]).is_some_and(|t| t.starts_with("0x")));
    // Ids and hashes only: the payment itself is nowhere in the log.
    let signature = decode_b64_json(&payment)["payload"]["signature"]
        .as_str()
        .expect("the payment's signature")
        .trim_start_matches("0x")
        .to_owned();
    assert!(!logs.contains(&signature) && !logs.contains(&payment[..40]));
}

/// A purchased document is kept the contract's 90 days: the answer's `expires_at` is 90
/// days after the signed document's `issued_at` (the same second, or the next: both
/// read one clock), and the status route says the same. Would catch: another retention
/// constant, or a record written with a clock of its own.
#[test]
fn a_document_is_kept_ninety_days() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payment = sign_payment(&devnet, &url(&server, "basic"), BODY);
    let bought = post(
        &server,
        BODY,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &key())],
    );
    assert_eq!(
        bought.status,
        201,
        "{}",
        String::from_utf8_lossy(&bought.body)
    );
    let answer = bought.json();
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).expect(k).to_owned();
    let time = |t: &str| umpire_core::time::parse_rfc3339(t).expect("RFC 3339");
    let issued = time(&text(
        answer.get("document").expect("document"),
        "issued_at",
    ));
    let expires = time(&text(&answer, "expires_at"));
    let kept = expires - issued;
    assert!(
        (90 * 86_400..=90 * 86_400 + 1).contains(&kept),
        "kept {kept} s, not 90 days"
    );
    let status = server.verdict_status(&text(&answer, "verdict_id"), &text(&answer, "secret"));
    assert_eq!(status.status, 200);
    assert_eq!(
        text(&status.json(), "expires_at"),
        text(&answer, "expires_at")
    );
}

/// Logs at debug level over a purchase, a replay and a refused payment never hold the
/// deliverable, the one-time secret, or the payment's signature.
#[test]
fn logs_never_hold_secrets_signatures_or_deliverables() {
    let devnet = Devnet::start();
    let env = devnet.server_env(Settlement::SelfSettle);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let server = Server::start_logged(&env);
    let marker = "confidential-deliverable-7c1e";
    let body = BODY.replace("all tests pass", &format!("all tests pass {marker}"));
    let payment = sign_payment(&devnet, &url(&server, "basic"), &body);
    let signature = decode_b64_json(&payment)["payload"]["signature"]
        .as_str()
        .expect("the payment's signature")
        .to_owned();
    let idem = key();
    let bought = post(
        &server,
        &body,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
    );
    assert_eq!(
        bought.status,
        201,
        "{}",
        String::from_utf8_lossy(&bought.body)
    );
    let secret = bought
        .json()
        .get("secret")
        .and_then(Value::as_str)
        .expect("secret")
        .to_owned();
    let replay = post(
        &server,
        &body,
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &idem)],
    );
    assert_eq!(replay.status, 201);
    // Spent: the same payment for another request is refused.
    let refused = post(
        &server,
        &body.replace("# Report", "# Another report"),
        &[("PAYMENT-SIGNATURE", &payment), ("Idempotency-Key", &key())],
    );
    assert_eq!(refused.status, 402, "the payment was spent");

    let logs = server.logs();
    assert!(
        logs.contains(r#"path="/v1/verdicts/basic" status=201"#),
        "requests are logged: {logs}"
    );
    for (what, needle) in [
        ("the deliverable", marker),
        ("the one-time secret", secret.as_str()),
        ("the payment signature", signature.trim_start_matches("0x")),
        ("the payment header", &payment[..40]),
    ] {
        assert!(!logs.contains(needle), "the logs hold {what}:\n{logs}");
    }
}
