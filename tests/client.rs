//! The `umpire` client against `umpire serve` on a devnet, as a newcomer uses it: buy a
//! basic and a sworn verdict (paid with x402 from the wallet key), verify them, resume a
//! purchase without paying twice, read status and find, validate, leave feedback on a
//! merchant that was paid, and buy its reputation report. Refusals exit 1 and explain.

use umpire_blackbox::chain::{Devnet, Settlement};
use umpire_blackbox::{PRICE_BASIC, PRICE_SWORN, Server, TempDir, run_umpire};
use umpire_core::json::{Value, parse_str};

const PRICE_REPORT: u128 = 10_000;

struct Setup {
    devnet: Devnet,
    /// Kept alive for the test; stopped on drop.
    _server: Server,
    files: TempDir,
    base: String,
    wallet: String,
}

impl Setup {
    fn new() -> Setup {
        let devnet = Devnet::start();
        let mut env = devnet.server_env(Settlement::SelfSettle);
        env.extend(devnet.feedback_env());
        env.push(("UMPIRE_SWORN_DELAY_SECONDS".into(), "1".into()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let server = Server::start_with(&env);
        let base = format!("http://{}", server.addr);
        let wallet = devnet.get("payer_private_key");
        Setup {
            devnet,
            _server: server,
            files: TempDir::new("client"),
            base,
            wallet,
        }
    }

    /// Runs `umpire ARGS --base URL` with the payer's wallet key in the environment.
    fn umpire(&self, args: &[&str]) -> (i32, String, String) {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--base", &self.base]);
        run_umpire(&all, &[("UMPIRE_WALLET_KEY", &self.wallet)])
    }

    /// `umpire verify` of an answer saved as `name`, against the server's published keys.
    fn verify(&self, name: &str, answer: &str, deliverable: Option<&str>) -> (i32, String, String) {
        let saved = self.file(name, answer);
        let key_url = format!("{}/.well-known/umpire-key.json", self.base);
        let mut args = vec!["verify", &saved, "--key", &key_url];
        if let Some(d) = deliverable {
            args.extend(["--deliverable", d]);
        }
        run_umpire(&args, &[])
    }

    fn file(&self, name: &str, text: &str) -> String {
        self.files
            .write(name, text.as_bytes())
            .to_str()
            .expect("utf-8 path")
            .to_owned()
    }
}

fn json(stdout: &str) -> Value {
    parse_str(stdout.trim()).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"))
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or_default()
}

#[test]
fn buy_verify_resume_status_and_validate_from_the_command_line() {
    let t = Setup::new();
    let payer = t.devnet.get("payer");
    let before = t.devnet.balance(&payer);
    let spec = t.file(
        "spec.json",
        r#"{"checks":[{"type":"regex","pattern":"^# Report"}]}"#,
    );
    let deliverable = t.file("deliverable.json", r##"{"text":"# Report\nall good"}"##);

    let (code, out, err) = t.umpire(&[
        "buy",
        "basic",
        "--spec",
        &spec,
        "--deliverable",
        &deliverable,
        "--job-ref",
        "job-7",
    ]);
    assert_eq!(code, 0, "{err}");
    let answer = json(&out);
    assert_eq!(s(&answer, "verdict"), "pass");
    assert!(s(&answer, "secret").starts_with("sec_"), "{out}");
    assert!(
        err.contains("Idempotency-Key: "),
        "the key is printed: {err}"
    );
    assert_eq!(t.devnet.balance(&payer), before - PRICE_BASIC);

    // The answer verifies offline against the published key.
    let (code, vout, verr) = t.verify("bought.json", &out, Some(&deliverable));
    assert_eq!(code, 0, "{vout}{verr}");
    assert!(vout.contains("verified: verdict pass"), "{vout}");

    // Resuming with the printed key replays the purchase: no second payment.
    let key = err
        .lines()
        .find_map(|l| l.strip_prefix("Idempotency-Key: "))
        .and_then(|l| l.split_whitespace().next())
        .expect("key line")
        .to_owned();
    let (code, again, err2) = t.umpire(&[
        "buy",
        "basic",
        "--spec",
        &spec,
        "--deliverable",
        &deliverable,
        "--job-ref",
        "job-7",
        "--idempotency-key",
        &key,
    ]);
    assert_eq!(code, 0, "{err2}");
    assert_eq!(json(&again).get("document"), answer.get("document"));
    assert_eq!(t.devnet.balance(&payer), before - PRICE_BASIC, "paid once");

    // Status with the secret.
    let (code, st, err3) = t.umpire(&[
        "status",
        s(&answer, "verdict_id"),
        "--secret",
        s(&answer, "secret"),
    ]);
    assert_eq!(code, 0, "{err3}");
    assert_eq!(json(&st).get("document"), answer.get("document"));
    let (code, _, err4) = t.umpire(&["status", s(&answer, "verdict_id"), "--secret", "vs_wrong"]);
    assert_eq!(code, 1);
    assert!(
        err4.contains("not_found") && err4.contains("meaning:"),
        "{err4}"
    );

    // Validate: valid exits 0, a broken spec exits 1 with each problem and hint.
    let (code, _, _) = t.umpire(&["validate", "basic", "--spec", &spec]);
    assert_eq!(code, 0);
    let bad = t.file(
        "bad.json",
        r#"{"checks":[{"type":"regex","pattern":"(a"}]}"#,
    );
    let (code, _, verr) = t.umpire(&["validate", "basic", "--spec", &bad]);
    assert_eq!(code, 1);
    assert!(
        verr.contains("checks[0].pattern") && verr.contains("hint:"),
        "{verr}"
    );

    // A refused purchase (bad spec) exits 1, explains, and charges nothing.
    let (code, _, berr) = t.umpire(&[
        "buy",
        "basic",
        "--spec",
        &bad,
        "--deliverable",
        &deliverable,
    ]);
    assert_eq!(code, 1);
    assert!(
        berr.contains("invalid_spec") && berr.contains("nothing was charged"),
        "{berr}"
    );
    assert_eq!(t.devnet.balance(&payer), before - PRICE_BASIC);

    // No wallet: a local problem (exit 2) that says what to set.
    let (code, _, werr) = run_umpire(
        &[
            "buy",
            "basic",
            "--spec",
            &spec,
            "--deliverable",
            &deliverable,
            "--base",
            &t.base,
        ],
        &[],
    );
    assert_eq!(code, 2);
    assert!(werr.contains("UMPIRE_WALLET_KEY"), "{werr}");
}

#[test]
fn a_sworn_purchase_waits_for_its_final_document_and_find_recovers_it() {
    let t = Setup::new();
    let payer = t.devnet.get("payer");
    let before = t.devnet.balance(&payer);
    let spec = t.file(
        "spec.json",
        r#"{"checks":[{"type":"length","unit":"chars","min":3}]}"#,
    );
    let deliverable = t.file("deliverable.json", r#"{"text":"done and dusted"}"#);
    // A loopback webhook breaks the URL policy: refused before payment, explained.
    let (code, _, err) = t.umpire(&[
        "buy",
        "sworn",
        "--spec",
        &spec,
        "--deliverable",
        &deliverable,
        "--webhook",
        "http://127.0.0.1:9/hook",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("webhook"), "{err}");
    assert_eq!(
        t.devnet.balance(&payer),
        before,
        "nothing charged for a refusal"
    );

    let (code, out, err) = t.umpire(&[
        "buy",
        "sworn",
        "--spec",
        &spec,
        "--deliverable",
        &deliverable,
    ]);
    assert_eq!(code, 0, "{err}");
    check_final(&t, &out, &err, &deliverable);
    assert_eq!(t.devnet.balance(&payer), before - PRICE_SWORN);
}

fn check_final(t: &Setup, out: &str, err: &str, deliverable: &str) {
    let answer = json(out);
    assert_eq!(s(&answer, "status"), "final", "waited for pass 2: {err}");
    assert!(err.contains("waiting for pass 2"), "{err}");
    let (code, vout, verr) = t.verify("sworn.json", out, Some(deliverable));
    assert_eq!(code, 0, "{vout}{verr}");
    let spec_hash = answer
        .get("document")
        .map(|d| s(d, "spec_hash").to_owned())
        .unwrap_or_default();
    let (code, found, ferr) = t.umpire(&[
        "find",
        "--spec-hash",
        &spec_hash,
        "--webhook",
        "https://hooks.example.com/none",
    ]);
    assert_eq!(code, 0, "{ferr}");
    assert!(json(&found).get("verdict_ids").is_some());
}

#[test]
fn feedback_and_a_reputation_report_from_the_command_line() {
    let t = Setup::new();
    let payer = t.devnet.get("payer");
    let merchant = t.devnet.get("merchant");
    let tx = t.devnet.transfer(&payer, &merchant, 20_000);

    let (code, out, err) = t.umpire(&[
        "feedback",
        "--tx",
        &tx,
        "--merchant",
        &merchant,
        "--outcome",
        "fulfilled",
        "--would-repeat",
        "--latency-ms",
        "1200",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&out)
            .get("feedback")
            .map(|f| s(f, "outcome").to_owned()),
        Some("fulfilled".into())
    );
    // The same transaction again: refused, in plain words.
    let (code, _, err) = t.umpire(&[
        "feedback",
        "--tx",
        &tx,
        "--merchant",
        &merchant,
        "--outcome",
        "failed",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("duplicate_feedback") && err.contains("one per transaction"),
        "{err}"
    );
    // Bad input never reaches the service.
    let (code, _, err) = t.umpire(&[
        "feedback",
        "--tx",
        "0x12",
        "--merchant",
        &merchant,
        "--outcome",
        "fulfilled",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--tx"), "{err}");

    let before = t.devnet.balance(&payer);
    let (code, out, err) = t.umpire(&["reputation", &merchant]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("feedback_count: 1"), "{out}");
    assert!(out.contains("signed by key"), "{out}");
    assert_eq!(t.devnet.balance(&payer), before - PRICE_REPORT);

    let (code, out, err) = t.umpire(&["reputation", &merchant, "--json"]);
    assert_eq!(code, 0, "{err}");
    let (code, vout, verr) = t.verify("report.json", &out, None);
    assert_eq!(code, 0, "the report verifies: {vout}{verr}");
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `make devnet` as the README walks it: the script starts anvil, the local Solana
/// chain, the facilitator and `umpire serve`, and prints the commands to buy on every
/// rail; run as printed, each buys a verdict.
#[test]
fn make_devnet_sells_on_every_rail_as_it_says() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let data = TempDir::new("make-devnet");
    let addr = format!("127.0.0.1:{}", free_port());
    let mut devnet = Command::new("node")
        .arg(umpire_blackbox::repo_root().join("infra/devnet/devnet.mjs"))
        .arg("--umpire")
        .arg(umpire_blackbox::umpire_bin())
        .arg("--data-dir")
        .arg(data.path())
        .args(["--addr", &addr, "--rpc-port", &free_port().to_string()])
        .current_dir(umpire_blackbox::repo_root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start infra/devnet/devnet.mjs");
    // Its own output (the commands) on stderr, the server's listening line on stdout.
    // The pipe is drained to the end: a closed one would stop the devnet mid-write.
    let stderr = devnet.stderr.take().expect("stderr");
    let (tx, said) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if all.contains("reputation?merchant=") {
                continue;
            }
            all.push_str(&line);
            all.push('\n');
            if line.contains("reputation?merchant=") {
                let _ = tx.send(all.clone());
            }
        }
    });
    let mut stdout = BufReader::new(devnet.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("umpire listening") {
        line.clear();
        assert!(
            stdout.read_line(&mut line).expect("devnet output") > 0,
            "the devnet stopped before serving"
        );
    }
    std::thread::spawn(move || {
        let mut sink = String::new();
        while stdout.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    let said = said
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the devnet's account of itself");
    let stop = || {
        // SIGTERM: the script stops what it started.
        let _ = Command::new("kill")
            .args(["-TERM", &devnet.id().to_string()])
            .status();
    };

    // The service's state lives in a directory of this chain's own (a later devnet,
    // a fresh chain, starts from a fresh store).
    let chains: Vec<_> = std::fs::read_dir(data.path().join("devnet"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    if chains.len() != 1 || !said.contains("keeps this chain's state in") {
        stop();
        panic!(
            "one state directory per chain, said: {chains:?}
{said}"
        );
    }

    let files = TempDir::new("make-devnet-files");
    let spec = files.write(
        "spec.json",
        br#"{"checks":[{"type":"regex","pattern":"^# Report"}]}"#,
    );
    let deliverable = files.write("deliverable.json", br##"{"text":"# Report"}"##);
    // Every printed `umpire buy` line on Solana, its continuation joined.
    let joined = said.replace("\\\n", " ");
    let buys: Vec<Vec<String>> = joined
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("umpire buy basic") && l.contains("--rail"))
        .map(|l| l.split_whitespace().skip(1).map(str::to_owned).collect())
        .collect();
    if buys.len() != 2 {
        stop();
        panic!("expected the two Solana commands in:\n{said}");
    }
    let base = format!("http://{addr}");
    for args in buys {
        let args: Vec<String> = args
            .into_iter()
            .map(|a| match a.as_str() {
                "spec.json" => spec.to_string_lossy().into_owned(),
                "deliverable.json" => deliverable.to_string_lossy().into_owned(),
                _ => a,
            })
            .collect();
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = run_umpire(&argv, &[("UMPIRE_BASE_URL", &base)]);
        if code != 0 {
            stop();
            panic!("`umpire {}` failed: {err}", args.join(" "));
        }
        assert_eq!(s(&json(&out), "verdict"), "pass", "{out}");
    }
    // Umpire is registered as the ERC-8004 agent it says, and its registration file
    // (the agent's URI) names it and its validator.
    let agent = said
        .lines()
        .find_map(|l| l.strip_prefix("ERC-8004: Umpire is agent "))
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_owned);
    let addr: std::net::SocketAddr = addr.parse().expect("addr");
    let registration = umpire_blackbox::request(
        addr,
        "GET",
        "/.well-known/agent-registration.json",
        &[],
        None,
    );
    stop();
    let _ = devnet.wait();
    let agent = agent.unwrap_or_else(|| panic!("no ERC-8004 line in:\n{said}"));
    let reg = registration.json();
    let text = String::from_utf8_lossy(&reg.to_canonical_vec()).into_owned();
    assert!(
        text.contains(&format!("\"agentId\":{agent}")) && text.contains("\"name\":\"validator\""),
        "agent {agent}: {text}"
    );
}
