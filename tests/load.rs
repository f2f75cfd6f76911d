//! Load and fault tests, bounded in count and time, loopback only: many paid requests
//! at once on the devnet, and hostile specs mixed with health checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use umpire_blackbox::chain::{Devnet, Settlement, sign_payments};
use umpire_blackbox::{Reply, Server, request};

const PRICE_BASIC: u128 = 1_000_000;
const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"}}"###;

fn buy(server: &Server, payment: &str, key: &str) -> Reply {
    request(
        server.addr,
        "POST",
        "/v1/verdicts/basic",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", payment),
            ("Idempotency-Key", key),
        ],
        Some(BODY.as_bytes()),
    )
}

fn verdict_id(r: &Reply) -> String {
    r.json()
        .get("verdict_id")
        .and_then(|v| v.as_str())
        .unwrap_or_else(|| panic!("no verdict_id: {}", String::from_utf8_lossy(&r.body)))
        .to_owned()
}

/// 200 requests at once, 10 for each of 20 keys (each key with its own payment):
/// exactly 20 settlements on chain, one purchase per key, every other answer that
/// purchase replayed or 409 `in_flight`, never a 5xx or a refusal.
#[test]
fn two_hundred_concurrent_paid_requests_over_twenty_keys_settle_twenty_times() {
    const KEYS: usize = 20;
    const PER_KEY: usize = 10;
    let devnet = Devnet::start();
    let server = Arc::new(devnet.serve(Settlement::SelfSettle, &[]));
    let (payer, pay_to) = (devnet.get("payer"), devnet.get("pay_to"));
    let (payer0, pay_to0) = (devnet.balance(&payer), devnet.balance(&pay_to));
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let payments = sign_payments(&devnet, &url, BODY, KEYS);
    let keys: Vec<String> = (0..KEYS)
        .map(|_| umpire_core::hash::random_id("load"))
        .collect();

    let start = Arc::new(std::sync::Barrier::new(KEYS * PER_KEY));
    let threads: Vec<_> = (0..KEYS * PER_KEY)
        .map(|i| {
            let (server, start) = (server.clone(), start.clone());
            let (payment, key) = (payments[i % KEYS].clone(), keys[i % KEYS].clone());
            std::thread::spawn(move || {
                start.wait();
                (i % KEYS, buy(&server, &payment, &key))
            })
        })
        .collect();
    let replies: Vec<(usize, Reply)> = threads
        .into_iter()
        .map(|t| t.join().expect("request thread"))
        .collect();

    let mut purchase_of_key: BTreeMap<usize, Vec<u8>> = BTreeMap::new();
    let mut in_flight = 0;
    for (k, r) in &replies {
        match r.status {
            201 => {
                let first = purchase_of_key.entry(*k).or_insert_with(|| r.body.clone());
                assert_eq!(*first, r.body, "key {k}: every 201 is its one purchase");
            }
            409 => {
                assert_eq!(r.error_code(), "in_flight");
                assert!(r.header("retry-after").is_some());
                in_flight += 1;
            }
            s => panic!(
                "key {k}: unexpected {s}: {}",
                String::from_utf8_lossy(&r.body)
            ),
        }
    }
    eprintln!(
        "200 requests: {} answered 201, {in_flight} answered 409 in_flight",
        replies.len() - in_flight
    );

    // Keys whose requests were all in flight get their purchase on a retry.
    for (k, (payment, key)) in payments.iter().zip(&keys).enumerate() {
        let r = buy(&server, payment, key);
        assert_eq!(
            r.status,
            201,
            "key {k}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let first = purchase_of_key.entry(k).or_insert_with(|| r.body.clone());
        assert_eq!(*first, r.body, "key {k}: the retry replays its purchase");
    }
    let verdicts: BTreeSet<String> = purchase_of_key
        .values()
        .map(|body| {
            verdict_id(&Reply {
                status: 201,
                headers: Vec::new(),
                body: body.clone(),
            })
        })
        .collect();
    assert_eq!(verdicts.len(), KEYS, "one verdict per key");
    let moved = PRICE_BASIC * KEYS as u128;
    assert_eq!(devnet.balance(&payer), payer0 - moved, "20 settlements");
    assert_eq!(devnet.balance(&pay_to), pay_to0 + moved);
}
