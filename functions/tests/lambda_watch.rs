//! `make test-lambda`: the API served by the Lambda functions themselves under
//! `cargo lambda watch` (infra/local/watch.sh, the same script as `make watch`),
//! routed as the HttpApi routes it, against the local AWS-compatible server and a
//! devnet: validate, a paid basic verdict bought with the reference x402 client, and
//! its status with the one-time secret. Slow (it builds every function), so it is
//! ignored by the default `make test` and run with --ignored by `make test-lambda`.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use umpire_blackbox::chain::{Devnet, Settlement, buy_v2};
use umpire_blackbox::{repo_root, request};
use umpire_core::Value;

const BODY: &str = r###"{"spec":{"checks":[{"type":"regex","pattern":"^# Report"},{"type":"length","unit":"words","min":3}]},"deliverable":{"text":"# Report\nall tests pass"}}"###;

/// The watch script's whole process group (moto, cargo lambda, the functions),
/// stopped on drop.
struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let group = format!("-{}", self.0.id());
        let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
        std::thread::sleep(Duration::from_millis(500));
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
#[ignore = "builds and runs every function under cargo lambda watch: make test-lambda"]
fn validate_a_paid_basic_verdict_and_its_status_through_cargo_lambda_watch() {
    let devnet = Devnet::start();
    let port = free_port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let watch = Watch(
        Command::new(repo_root().join("infra/local/watch.sh"))
            .arg(repo_root().join(".cache/venv"))
            .arg(port.to_string())
            .envs(devnet.server_env(Settlement::SelfSettle))
            // Limits out of the way as a function takes them (a function refuses
            // UMPIRE_RATE_LIMITS=off, a switch for local runs only).
            .envs(umpire_core::product::RATE_LIMITS.iter().map(|(bucket, _)| {
                (
                    format!("UMPIRE_RATE_LIMIT_{}", bucket.to_ascii_uppercase()),
                    "100000".to_owned(),
                )
            }))
            .current_dir(repo_root())
            .process_group(0)
            .spawn()
            .expect("start infra/local/watch.sh"),
    );

    // The first request to each function builds it: allow minutes, not seconds.
    let started = Instant::now();
    loop {
        if let Ok(s) = std::net::TcpStream::connect(addr) {
            drop(s);
            let health = request(addr, "GET", "/healthz", &[], None);
            if health.status == 200 {
                break;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(900),
            "cargo lambda watch did not serve /healthz"
        );
        std::thread::sleep(Duration::from_secs(1));
    }

    let validated = request(
        addr,
        "POST",
        "/v1/validate",
        &[("Content-Type", "application/json")],
        Some(br#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#),
    );
    assert_eq!(
        validated.status,
        200,
        "{}",
        String::from_utf8_lossy(&validated.body)
    );
    assert_eq!(validated.json().get("valid"), Some(&Value::Bool(true)));

    let url = format!("http://{addr}/v1/verdicts/basic");
    let key = umpire_host::random_id("idem");
    let payer = devnet.get("payer");
    let before = devnet.balance(&payer);
    let bought = buy_v2(&devnet, &url, BODY, Some(&key));
    assert_eq!(bought.status, 201, "{}", bought.body);
    assert!(
        devnet.balance(&payer) < before,
        "the purchase settled on chain"
    );
    let body = bought.json();
    let document = body.get("document").cloned().expect("document");
    assert_eq!(
        document.get("verdict").and_then(Value::as_str),
        Some("pass")
    );

    let id = body.get("verdict_id").and_then(Value::as_str).expect("id");
    let secret = body.get("secret").and_then(Value::as_str).expect("secret");
    let status = request(
        addr,
        "GET",
        &format!("/v1/verdicts/{id}"),
        &[("Authorization", &format!("Bearer {secret}"))],
        None,
    );
    assert_eq!(
        status.status,
        200,
        "{}",
        String::from_utf8_lossy(&status.body)
    );
    assert_eq!(status.json().get("document"), Some(&document));
    drop(watch);
}
