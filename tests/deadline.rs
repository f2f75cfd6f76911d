//! Every paid request ends inside its time budget, whatever it waits on: API Gateway
//! ends an HTTP integration at 30 s, so a purchase that runs longer is cut off while
//! it may still be settling. These run `umpire serve` with its default budget (25 s)
//! against a fetch target that never answers, a chain whose receipts never come and
//! a facilitator that never settles; and they check that an authorization too short
//! for the budget is refused before any work, and one the chain sees lapse voids.

use std::io::Write;
use std::time::{Duration, Instant};

use base64::Engine;
use umpire_blackbox::chain::{Devnet, RpcProxy, Settlement, sign_payment};
use umpire_blackbox::{Held, PRICE_PROBE, Reply, read_request, request};
use umpire_core::json::Value;

/// API Gateway's limit less the second a Lambda needs to hand its answer back.
const PLATFORM_LIMIT: Duration = Duration::from_secs(29);

fn probe_body(page: std::net::SocketAddr) -> String {
    format!(
        r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://{page}/status","expect":{{"status":200,"keyword":"up"}}}}]}},"deliverable":{{"text":"deployed"}}}}"#
    )
}

fn post_probe(addr: std::net::SocketAddr, body: &str, payment: &str) -> Reply {
    request(
        addr,
        "POST",
        "/v1/verdicts/probe",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", payment),
        ],
        Some(body.as_bytes()),
    )
}

fn text(r: &Reply) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn settlement_of(r: &Reply) -> serde_json::Value {
    let h = r.header("payment-response").expect("PAYMENT-RESPONSE");
    let raw = base64::engine::general_purpose::STANDARD
        .decode(h)
        .expect("base64");
    serde_json::from_slice(&raw).expect("json")
}

#[test]
fn a_purchase_with_a_hanging_fetch_and_a_chain_without_receipts_answers_in_time() {
    let devnet = Devnet::start();
    let proxy = RpcProxy::start(&devnet);
    // The page is never released: the fetch ends at its own 12 s limit.
    let page = Held::start("service up");
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[
            ("UMPIRE_EVM_RPC_URL", proxy.url.as_str()),
            ("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"),
        ],
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let body = probe_body(page.addr);
    let url = format!("http://{}/v1/verdicts/probe", server.addr);
    let payment = sign_payment(&devnet, &url, &body);
    // The transfer is mined on submission; its receipt is held far past any budget.
    proxy.delay_receipts(Duration::from_secs(120));

    let started = Instant::now();
    let r = post_probe(server.addr, &body, &payment);
    let took = started.elapsed();
    assert!(
        took < PLATFORM_LIMIT,
        "answered after {took:?}: {}",
        text(&r)
    );
    // Mined, its receipt held: the token's logs prove the transfer inside the budget.
    assert_eq!(r.status, 201, "{}", text(&r));
    let s = settlement_of(&r);
    assert_eq!(s["success"], true, "{s}");
    assert!(
        s["transaction"].as_str().is_some_and(|t| t.len() == 66),
        "{s}"
    );
    let document = r.json().get("document").cloned().expect("document");
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("fail"),
        "the page never answered"
    );
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_PROBE, "charged once");
    eprintln!("answered in {took:?}");
}

/// A facilitator that verifies everything and never answers `/settle`.
fn hanging_facilitator(network: &str) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let supported = format!(
        r#"{{"kinds":[{{"x402Version":2,"scheme":"exact","network":"{network}"}}],"extensions":[],"signers":{{}}}}"#
    );
    std::thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            let supported = supported.clone();
            std::thread::spawn(move || {
                let Some(req) = read_request(&mut conn) else {
                    return;
                };
                let body = match req.path.as_str() {
                    "/supported" => supported,
                    "/verify" => {
                        let v: serde_json::Value =
                            serde_json::from_slice(&req.body).unwrap_or_default();
                        let payer = v["paymentPayload"]["payload"]["authorization"]["from"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        format!(r#"{{"isValid":true,"payer":"{payer}"}}"#)
                    }
                    // Holds the connection open, answering nothing.
                    _ => {
                        std::thread::sleep(Duration::from_secs(300));
                        return;
                    }
                };
                let _ = write!(
                    conn,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    addr
}

#[test]
fn a_facilitator_that_never_settles_is_given_up_at_the_deadline() {
    let devnet = Devnet::start();
    let network = format!("eip155:{}", devnet.get("chain_id"));
    let facilitator = hanging_facilitator(&network);
    let page = Held::start("service up");
    page.release();
    let server = devnet.serve(
        Settlement::Facilitator(format!("http://{facilitator}")),
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let body = probe_body(page.addr);
    let url = format!("http://{}/v1/verdicts/probe", server.addr);
    let payment = sign_payment(&devnet, &url, &body);

    let started = Instant::now();
    let r = post_probe(server.addr, &body, &payment);
    let took = started.elapsed();
    assert!(
        took < PLATFORM_LIMIT,
        "answered after {took:?}: {}",
        text(&r)
    );
    // Nobody knows whether the money moved: the retry finds out; nothing delivered.
    assert_eq!(r.status, 502, "{}", text(&r));
    assert_eq!(
        r.json()
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_str),
        Some("chain_unavailable"),
        "{}",
        text(&r)
    );
    assert!(r.json().get("document").is_none());
    eprintln!("answered in {took:?}");
}

#[test]
fn an_authorization_shorter_than_the_budget_is_refused_before_any_work() {
    use alloy::signers::local::PrivateKeySigner;
    use umpire_x402::client::{pick_evm, sign_exact_evm};

    let devnet = Devnet::start();
    let page = Held::start("service up");
    page.release();
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let body = probe_body(page.addr);
    let unpaid = server.post_json("/v1/verdicts/probe", &body);
    assert_eq!(unpaid.status, 402);
    let required: umpire_x402::PaymentRequired =
        umpire_x402::decode_header(unpaid.header("payment-required").expect("PAYMENT-REQUIRED"))
            .expect("requirements");
    let mut accepted = pick_evm(&required).expect("an EVM rail").clone();
    assert!(
        accepted.max_timeout_seconds >= 25 + 6,
        "our maxTimeoutSeconds covers the budget and the margin: {}",
        accepted.max_timeout_seconds
    );
    // The client signs for 15 s only: less than the purchase may need.
    accepted.max_timeout_seconds = 15;
    let signer: PrivateKeySigner = devnet.get("payer_private_key").parse().expect("key");
    let payment = sign_exact_evm(
        &signer,
        &required,
        &accepted,
        umpire_host::Clock::system().now(),
        umpire_host::random_bytes::<32>(),
    )
    .expect("signed");

    let r = post_probe(server.addr, &body, &payment);
    assert_eq!(r.status, 402, "{}", text(&r));
    let s = settlement_of(&r);
    assert_eq!(
        s["errorReason"], "invalid_exact_evm_payload_authorization_valid_before",
        "{s}"
    );
    assert!(text(&r).contains("settling"), "{}", text(&r));
    assert!(
        !page.was_asked(),
        "nothing was fetched for a payment that cannot last the purchase"
    );
}

#[test]
fn an_authorization_the_chain_sees_lapse_before_settlement_voids_the_purchase() {
    let devnet = Devnet::start();
    let page = Held::start("service up");
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1")],
    );
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let body = probe_body(page.addr);
    let url = format!("http://{}/v1/verdicts/probe", server.addr);
    let payment = sign_payment(&devnet, &url, &body);
    let purchase = {
        let (addr, body, payment) = (server.addr, body.clone(), payment.clone());
        std::thread::spawn(move || post_probe(addr, &body, &payment))
    };
    // Verified; while the purchase works, the chain's clock runs past validBefore (a
    // chain ahead of our clock, or an authorization that lapses in the mempool).
    page.wait_for_request(Duration::from_secs(30));
    devnet.rpc("evm_increaseTime", serde_json::json!([3600]));
    devnet.rpc("evm_mine", serde_json::json!([]));
    page.release();
    let r = purchase.join().expect("purchase thread");
    assert_eq!(r.status, 402, "{}", text(&r));
    let s = settlement_of(&r);
    assert_eq!(s["success"], false, "{s}");
    assert!(text(&r).contains("voided"), "{}", text(&r));
    assert!(r.json().get("document").is_none(), "nothing delivered");
    assert_eq!(devnet.balance(&payer), payer0, "nothing charged");
}
