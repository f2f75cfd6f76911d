//! Load tests, bounded in count and time, loopback only: many paid requests at once on
//! the devnet, and hostile specs mixed with health checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use umpire_blackbox::chain::{Devnet, Settlement, sign_payments};
use umpire_blackbox::{PRICE_BASIC, Reply, request};
use umpire_core::json::Value;

const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"}}"###;

/// The verdict id in a purchase's answer body.
fn verdict_id(body: &[u8]) -> String {
    umpire_core::json::parse(body)
        .ok()
        .and_then(|v| {
            v.get("verdict_id")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| panic!("no verdict_id: {}", String::from_utf8_lossy(body)))
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
    let keys: Vec<String> = (0..KEYS).map(|_| umpire_host::random_id("load")).collect();

    let start = Arc::new(std::sync::Barrier::new(KEYS * PER_KEY));
    let threads: Vec<_> = (0..KEYS * PER_KEY)
        .map(|i| {
            let (server, start) = (server.clone(), start.clone());
            let (payment, key) = (payments[i % KEYS].clone(), keys[i % KEYS].clone());
            std::thread::spawn(move || {
                start.wait();
                (i % KEYS, server.buy("basic", BODY, &payment, &key))
            })
        })
        .collect();
    let replies: Vec<(usize, Reply)> = threads
        .into_iter()
        .map(|t| t.join().expect("request thread"))
        .collect();

    // One purchase per key: every 201 of a key names the same verdict and document
    // (the first answer with its one-time secret, the replays to the spent payment
    // without it).
    let mut purchase_of_key: BTreeMap<usize, (Option<Value>, Option<Value>)> = BTreeMap::new();
    let mut in_flight = 0;
    for (k, r) in &replies {
        match r.status {
            201 => {
                let body = r.json();
                let this = (
                    body.get("verdict_id").cloned(),
                    body.get("document").cloned(),
                );
                let first = purchase_of_key.entry(*k).or_insert_with(|| this.clone());
                assert_eq!(*first, this, "key {k}: every 201 is its one purchase");
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
        let r = server.buy("basic", BODY, payment, key);
        assert_eq!(
            r.status,
            201,
            "key {k}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let body = r.json();
        let this = (
            body.get("verdict_id").cloned(),
            body.get("document").cloned(),
        );
        let first = purchase_of_key.entry(k).or_insert_with(|| this.clone());
        assert_eq!(*first, this, "key {k}: the retry replays its purchase");
    }
    let verdicts: BTreeSet<String> = purchase_of_key
        .values()
        .map(|(id, _)| {
            id.as_ref()
                .and_then(Value::as_str)
                .expect("a verdict_id")
                .to_owned()
        })
        .collect();
    assert_eq!(verdicts.len(), KEYS, "one verdict per key");
    let moved = PRICE_BASIC * KEYS as u128;
    assert_eq!(devnet.balance(&payer), payer0 - moved, "20 settlements");
    assert_eq!(devnet.balance(&pay_to), pay_to0 + moved);
}

/// A change to a decoded payment header.
type Edit = dyn Fn(&mut serde_json::Value);

/// One signed payment header spelled eight ways that all carry the same authorization
/// (the padded one is refused outright, `invalid_payload`):
/// as signed, an extra field in `payload`, upper-case hex in the nonce or the signature,
/// `v` as 0/1 instead of 27/28, `from` in lower case, a leading zero in `value`, and
/// the JSON's keys in another order.
fn reencodings(header: &str) -> Vec<String> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let original: serde_json::Value =
        serde_json::from_slice(&b64.decode(header).expect("base64")).expect("payment JSON");
    let upper_hex = |s: &str| format!("0x{}", s.trim_start_matches("0x").to_uppercase());
    let edits: Vec<Box<Edit>> = vec![
        Box::new(|_| {}),
        Box::new(|p| p["payload"]["extra"] = serde_json::json!("ignored?")),
        Box::new(move |p| {
            let n = p["payload"]["authorization"]["nonce"]
                .as_str()
                .expect("nonce")
                .to_owned();
            p["payload"]["authorization"]["nonce"] = upper_hex(&n).into();
        }),
        Box::new(move |p| {
            let s = p["payload"]["signature"].as_str().expect("sig").to_owned();
            p["payload"]["signature"] = upper_hex(&s).into();
        }),
        Box::new(|p| {
            let s = p["payload"]["signature"].as_str().expect("sig").to_owned();
            let (body, v) = s.split_at(s.len() - 2);
            let v = u8::from_str_radix(v, 16).expect("v");
            p["payload"]["signature"] = format!("{body}{:02x}", v.saturating_sub(27)).into();
        }),
        Box::new(|p| {
            let from = p["payload"]["authorization"]["from"]
                .as_str()
                .expect("from");
            p["payload"]["authorization"]["from"] = from.to_lowercase().into();
        }),
        Box::new(|p| {
            let value = p["payload"]["authorization"]["value"]
                .as_str()
                .expect("value");
            p["payload"]["authorization"]["value"] = format!("0{value}").into();
        }),
        Box::new(|p| {
            // Rebuilt with every object's keys reversed.
            fn reversed(v: &serde_json::Value) -> serde_json::Value {
                match v {
                    serde_json::Value::Object(m) => serde_json::Value::Object(
                        m.iter()
                            .rev()
                            .map(|(k, v)| (k.clone(), reversed(v)))
                            .collect(),
                    ),
                    other => other.clone(),
                }
            }
            *p = reversed(p);
        }),
    ];
    edits
        .iter()
        .map(|edit| {
            let mut p = original.clone();
            edit(&mut p);
            b64.encode(serde_json::to_vec(&p).expect("JSON"))
        })
        .collect()
}

/// The attack one signed payment made on a purchase keyed by its raw bytes: the same
/// authorization re-encoded eight ways and sent 16 times at once, eight with an
/// Idempotency-Key each and eight without. The payer is charged once and exactly one
/// verdict exists; every other answer is that purchase or a refusal (4xx).
#[test]
fn one_authorization_reencoded_sixteen_times_at_once_buys_one_verdict() {
    let devnet = Devnet::start();
    let server = Arc::new(devnet.serve(Settlement::SelfSettle, &[]));
    let (payer, pay_to) = (devnet.get("payer"), devnet.get("pay_to"));
    let (payer0, pay_to0) = (devnet.balance(&payer), devnet.balance(&pay_to));
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let payment = sign_payments(&devnet, &url, BODY, 1).remove(0);
    let copies = reencodings(&payment);
    assert_eq!(copies.len(), 8);
    let start = Arc::new(std::sync::Barrier::new(copies.len() * 2));
    let threads: Vec<_> = copies
        .iter()
        .flat_map(|c| [(c.clone(), true), (c.clone(), false)])
        .map(|(copy, with_key)| {
            let (server, start) = (server.clone(), start.clone());
            std::thread::spawn(move || {
                let key = umpire_host::random_id("twin");
                let mut headers = vec![
                    ("Content-Type", "application/json"),
                    ("PAYMENT-SIGNATURE", copy.as_str()),
                ];
                if with_key {
                    headers.push(("Idempotency-Key", key.as_str()));
                }
                start.wait();
                request(
                    server.addr,
                    "POST",
                    "/v1/verdicts/basic",
                    &headers,
                    Some(BODY.as_bytes()),
                )
            })
        })
        .collect();
    let replies: Vec<Reply> = threads
        .into_iter()
        .map(|t| t.join().expect("request thread"))
        .collect();
    let mut verdicts = BTreeSet::new();
    for r in &replies {
        match r.status {
            201 => {
                verdicts.insert(verdict_id(&r.body));
            }
            400..=499 => {}
            s => panic!("unexpected {s}: {}", String::from_utf8_lossy(&r.body)),
        }
    }
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(
        verdicts.len(),
        1,
        "one verdict for one payment: {statuses:?}"
    );
    assert_eq!(devnet.balance(&payer), payer0 - PRICE_BASIC, "charged once");
    assert_eq!(devnet.balance(&pay_to), pay_to0 + PRICE_BASIC);
}

/// Passes the guard (no repetition around the lookahead) but rescans the rest of the
/// text at every `a`: quadratic, far past any limit on 100 KB (see tests/hostile.rs).
const HOSTILE: &str = "a(?=a*$)b";
/// The per-check limit the hostile load runs under.
const HOSTILE_LIMIT_MS: &str = "300";

/// p-th percentile (0..=100) of sorted durations.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// 100 paid verdicts at once, each with a pattern that passes the guard and would run
/// for minutes, while a client asks /healthz over and over: every hostile check fails
/// at its limit (the other check of each spec keeps its true outcome), every purchase
/// is answered, health always answers. Its latency is printed; `make bench` runs this
/// against a release build with `UMPIRE_HEALTH_P99_MS=100` to hold the p99 to it
/// (timings are not asserted in `make test` on a noisy machine).
#[test]
fn a_hundred_hostile_purchases_end_at_their_limit_while_health_answers() {
    const N: usize = 100;
    let devnet = Devnet::start();
    let server = Arc::new(devnet.serve(
        Settlement::SelfSettle,
        &[("UMPIRE_CHECK_LIMIT_MS", HOSTILE_LIMIT_MS)],
    ));
    let payer = devnet.get("payer");
    let payer0 = devnet.balance(&payer);
    let body = Arc::new(format!(
        r#"{{"spec":{{"checks":[{{"type":"regex","pattern":"{HOSTILE}"}},{{"type":"length","min":1}}]}},"deliverable":{{"text":"{}"}}}}"#,
        "a".repeat(100_000)
    ));
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let payments = sign_payments(&devnet, &url, &body, N);

    let done = Arc::new(AtomicBool::new(false));
    let health = {
        let (server, done) = (server.clone(), done.clone());
        std::thread::spawn(move || {
            let mut latencies = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let t = Instant::now();
                let r = request(server.addr, "GET", "/healthz", &[], None);
                latencies.push(t.elapsed());
                assert_eq!(r.status, 200, "health failed under load");
                std::thread::sleep(Duration::from_millis(10));
            }
            latencies
        })
    };
    let started = Instant::now();
    let buyers: Vec<_> = payments
        .into_iter()
        .map(|payment| {
            let (server, body) = (server.clone(), body.clone());
            std::thread::spawn(move || {
                let key = umpire_host::random_id("hostile");
                server.buy("basic", &body, &payment, &key)
            })
        })
        .collect();
    let replies: Vec<Reply> = buyers
        .into_iter()
        .map(|t| t.join().expect("buyer"))
        .collect();
    let all_answered = started.elapsed();
    done.store(true, Ordering::SeqCst);
    let mut latencies = health.join().expect("health thread");

    for r in &replies {
        assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
        let doc = r.json().get("document").cloned().expect("document");
        let results = doc
            .get("results")
            .and_then(Value::as_array)
            .expect("results")
            .clone();
        let reason = |i: usize| {
            results[i]
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let passed = |i: usize| results[i].get("passed").and_then(Value::as_bool);
        assert_eq!(passed(0), Some(false));
        assert!(reason(0).contains("time limit"), "{}", reason(0));
        assert_eq!(passed(1), Some(true), "{}", reason(1));
    }
    assert_eq!(
        devnet.balance(&payer),
        payer0 - PRICE_BASIC * N as u128,
        "every purchase settled once"
    );

    latencies.sort();
    let p99 = percentile(&latencies, 99);
    eprintln!(
        "hostile load: {N} purchases answered in {:.1} s; /healthz {} answers, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        all_answered.as_secs_f64(),
        latencies.len(),
        percentile(&latencies, 50).as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    assert!(latencies.len() >= 10, "health was asked too rarely");
    if let Some(limit) = std::env::var("UMPIRE_HEALTH_P99_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        assert!(
            p99 < Duration::from_millis(limit),
            "health p99 {p99:?} over {limit} ms"
        );
    }
}

/// The p-th percentile (0–100) of `v`, in milliseconds.
fn percentile_ms(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p / 100.0).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// 600 unpaid requests at once, each with a URL whose name the DNS server never answers
/// for (getaddrinfo waits out its own timeouts, 20 s here): each is refused `422
/// dns_failure` within the lookup's 5 s (at most 32 lookups hold a thread at a time),
/// `/healthz` stays fast and the embedded store, which runs on the same blocking pool,
/// keeps its latency. Run in a network namespace of its own (`unshare`), where
/// /etc/resolv.conf names a black hole. Where namespaces cannot be made it fails, unless
/// the run allows its skip (`dns_black_hole` in UMPIRE_ALLOWED_SKIPS).
#[test]
fn six_hundred_unpaid_requests_against_a_dns_that_never_answers_starve_nothing() {
    const REQUESTS: usize = 600;
    let dir = umpire_blackbox::TempDir::new("blackhole");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.1\noptions timeout:5 attempts:2\n",
    )
    .expect("resolv.conf");
    let bin = std::env::var_os("UMPIRE_RELEASE_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(umpire_blackbox::umpire_bin);
    let data = dir.path().join("data");
    // Namespaces first: where none can be made (no privilege, no unshare) the scenario
    // cannot run at all, which is not the same as the server failing inside one.
    let can_unshare = std::process::Command::new("unshare")
        .args(["--net", "--mount", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !can_unshare {
        umpire_blackbox::cannot_run("dns_black_hole", "no network namespace can be made here");
        return;
    }
    // The namespace: loopback only, a UDP socket on port 53 that reads and never
    // answers (the server starts once it is bound), and `umpire serve` (exec'd, so its
    // pid is the namespace's handle).
    let bound = dir.path().join("bound");
    let script = format!(
        "mount --bind {resolv} /etc/resolv.conf || exit 1\n\
         ip link set lo up || exit 1\n\
         {python} -c 'import socket,time; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind((\"127.0.0.1\", 53)); open(\"{bound}\", \"w\").close(); time.sleep(600)' >/dev/null 2>&1 &\n\
         for i in $(seq 200); do [ -e {bound} ] && break; sleep 0.05; done\n\
         [ -e {bound} ] || exit 1\n\
         exec {bin} serve --addr 127.0.0.1:0 --data-dir {data}\n",
        resolv = resolv.display(),
        python = umpire_blackbox::python(),
        bound = bound.display(),
        bin = bin.display(),
        data = data.display(),
    );
    let mut child = match std::process::Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--fork",
            "--kill-child",
            "bash",
            "-c",
            &script,
        ])
        .env("RUST_LOG", "error")
        .env("UMPIRE_RATE_LIMITS", "on")
        .env("UMPIRE_RATE_LIMIT_UNPAID", "100000")
        .env("UMPIRE_RATE_LIMIT_VALIDATE", "100000")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("unshare ran a moment ago and does not start now: {e}"),
    };
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("listening line");
    let Some(addr) = line.trim().strip_prefix("umpire listening on http://") else {
        let _ = child.kill();
        let _ = child.wait();
        panic!(
            "umpire serve (or the black-hole resolver) did not start in the namespace: {line:?}"
        );
    };
    // The server's pid inside: the child of unshare --fork.
    let pid = std::fs::read_to_string(format!("/proc/{}/task/{}/children", child.id(), child.id()))
        .ok()
        .and_then(|c| c.split_whitespace().next().map(str::to_owned))
        .expect("the namespace's process");
    let out = std::process::Command::new("nsenter")
        .arg(format!("--net=/proc/{pid}/ns/net"))
        .arg(umpire_blackbox::python())
        .arg(umpire_blackbox::repo_root().join("tests/py/dns_blackhole_load.py"))
        .args(["--addr", addr, "--requests", &REQUESTS.to_string()])
        .output()
        .expect("run the load inside the namespace");
    let _ = child.kill();
    let _ = child.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "load script failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let ms = |k: &str| -> Vec<f64> {
        v[k].as_array()
            .expect(k)
            .iter()
            .filter_map(serde_json::Value::as_f64)
            .collect()
    };
    let (health, writes, baseline) = (ms("health_ms"), ms("write_ms"), ms("write_baseline_ms"));
    let slowest = ms("answered_ms").into_iter().fold(0.0, f64::max);
    let (health_p99, write_p99, base_p99) = (
        percentile_ms(&health, 99.0),
        percentile_ms(&writes, 99.0),
        percentile_ms(&baseline, 99.0),
    );
    eprintln!(
        "dns black hole: {REQUESTS} unpaid requests in {:.1} s, {:?}; /healthz p99 {health_p99:.1} ms over {} samples; store write p99 {write_p99:.1} ms (before: {base_p99:.1} ms); slowest refusal {slowest:.0} ms",
        v["took_s"].as_f64().unwrap_or_default(),
        v["statuses"],
        health.len()
    );
    assert_eq!(
        v["statuses"]["422"].as_u64(),
        Some(REQUESTS as u64),
        "every one refused before payment (dns_failure): {}",
        v["statuses"]
    );
    assert!(health.len() >= 20, "too few samples: {}", health.len());
    assert!(health_p99 < 50.0, "/healthz p99 {health_p99:.1} ms");
    // Each refusal within the lookup's own limit: getaddrinfo alone would hold every
    // one for the resolver's timeouts (20 s here).
    let limit = umpire_fetch::LOOKUP_TIMEOUT.as_millis() as f64 + 3000.0;
    assert!(slowest < limit, "a refusal took {slowest:.0} ms");
    // And the black hole was one: the lookups that got a thread waited out their whole
    // limit. A resolver that refused at once (not bound, or not the one in
    // resolv.conf) would answer every request fast and prove nothing.
    let waited = umpire_fetch::LOOKUP_TIMEOUT.as_millis() as f64 - 250.0;
    assert!(
        slowest >= waited,
        "no refusal waited for the lookup's limit ({slowest:.0} ms): the DNS server answered"
    );
    // The store's writes go on (a starved blocking pool would hold them for the
    // resolver's 20 s); timings on this shared machine vary, so the bound is loose.
    assert!(
        write_p99 < 1000.0,
        "store writes slowed from p99 {base_p99:.1} ms to {write_p99:.1} ms"
    );
}
