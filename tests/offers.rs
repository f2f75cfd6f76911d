//! Proof in x402's own signed forms, and a payer that cannot be overcharged: every
//! paid 402 carries offers signed with the published key (checked with the reference
//! library, `@x402/extensions/offer-receipt`), every purchase a signed receipt naming
//! its payer; `umpire buy` behind a hostile mirror — one that forwards the free routes
//! to the genuine service and rewrites the paid 402 — signs nothing; and the wallet
//! that paid reads its verdict by signing in (`@x402/extensions/sign-in-with-x`).

use serde_json::Value;
use umpire_blackbox::chain::{Devnet, Settlement, node_json};
use umpire_blackbox::mirror::Mirror;
use umpire_blackbox::svm::{SolanaNet, SvmFacilitator};
use umpire_blackbox::{Server, TempDir, decode_b64_json, request, run_umpire, serve_fixed};

const SPEC: &str = r#"{"checks":[{"type":"regex","pattern":"^# Report"}]}"#;
const DELIVERABLE: &str = r##"{"text":"# Report\nall tests pass"}"##;
const MERCHANT: &str = "0x1111111111111111111111111111111111111111";

fn body() -> String {
    format!(r#"{{"spec":{SPEC},"deliverable":{DELIVERABLE}}}"#)
}

fn price_feed() -> String {
    let addr = serve_fixed(
        "200 OK",
        "application/json",
        br#"{"data":{"amount":"150.00","base":"SOL","currency":"USD"}}"#.to_vec(),
    );
    format!("http://{addr}/v2/prices/SOL-USD/spot")
}

/// A server selling on every rail: USDC on the devnet (settled by us), USDC on the
/// local Solana chain (through the reference facilitator) and native SOL.
struct EveryRail {
    devnet: Devnet,
    net: SolanaNet,
    _facilitator: SvmFacilitator,
    server: Server,
}

impl EveryRail {
    fn start() -> EveryRail {
        EveryRail::start_with(&[])
    }

    fn start_with(env: &[(&str, &str)]) -> EveryRail {
        let devnet = Devnet::start();
        let net = SolanaNet::start();
        let facilitator = SvmFacilitator::start(&net);
        let sol = net.server_env(&facilitator.url, &price_feed());
        let mut extra: Vec<(&str, &str)> =
            sol.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        // The witness's probe names this machine (never fetched: nobody pays).
        extra.push(("UMPIRE_TEST_FETCH_ALLOW", "127.0.0.1"));
        extra.extend_from_slice(env);
        let server = devnet.serve(Settlement::SelfSettle, &extra);
        EveryRail {
            devnet,
            net,
            _facilitator: facilitator,
            server,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.server.addr)
    }
}

#[test]
fn every_offer_on_every_rail_verifies_with_the_reference_library() {
    let w = EveryRail::start();
    let mut routes: Vec<String> = ["witness", "basic", "probe", "sworn"]
        .iter()
        .map(|t| {
            let body = if *t == "witness" {
                format!(
                    r#"{{"spec":{{"checks":[{{"type":"url_probe","url":"http://127.0.0.1:9/status","expect":{{"status":200}}}}]}},"deliverable":{DELIVERABLE}}}"#
                )
            } else {
                body()
            };
            format!("POST /v1/verdicts/{t} {body}")
        })
        .collect();
    routes.push(format!("GET /v1/reputation?merchant={MERCHANT}"));
    routes.push(format!(
        r#"MCP buy_verdict {{"tier":"basic","spec":{SPEC},"deliverable":{DELIVERABLE}}}"#
    ));
    routes.push(format!(r#"MCP get_reputation {{"merchant":"{MERCHANT}"}}"#));
    let base = w.base();
    let mut args = vec!["--base", base.as_str()];
    for r in &routes {
        args.extend(["--route", r.as_str()]);
    }
    let v = node_json("tests/js/offer_receipt.mjs", &args);
    assert_eq!(v["problems"], serde_json::json!([]), "{v:#}");
    let checked = v["routes"].as_array().expect("routes");
    assert_eq!(checked.len(), routes.len(), "{v:#}");
    for r in checked {
        // Base USDC, Solana USDC, native SOL: one signed offer each.
        assert_eq!(r["accepts"], 3, "{r}");
        assert_eq!(r["offers"], 3, "{r}");
        let networks = r["networks"].to_string();
        assert!(networks.contains("eip155:"), "{networks}");
        assert!(networks.contains(&w.net.get("usdc_mint")), "{networks}");
        assert!(networks.contains("native"), "{networks}");
    }
    // The key that signs them is the published one, under its did:key.
    let keys: Value =
        serde_json::from_slice(&w.server.get("/.well-known/umpire-key.json").body).expect("JSON");
    let did = keys.pointer("/keys/0/did").expect("did").clone();
    let kid = checked[0]["kids"][0].as_str().expect("kid").to_owned();
    assert_eq!(
        Some(kid.split('#').next().expect("did")),
        did.as_str(),
        "{kid} vs {did}"
    );
}

/// A purchase through the reference client, its receipt checked by the reference
/// library: (status, receipt check, PAYMENT-RESPONSE, the payment sent).
fn bought_with_receipt(args: &[&str]) -> (u64, Value, Value, String) {
    let v = node_json("tests/js/buy.mjs", args);
    let response = v["headers"]["payment-response"]
        .as_str()
        .map(decode_b64_json)
        .unwrap_or(Value::Null);
    (
        v["status"].as_u64().unwrap_or_default(),
        v["receipt"].clone(),
        response,
        v["sent"][0].as_str().unwrap_or_default().to_owned(),
    )
}

fn assert_receipt(receipt: &Value, response: &Value, payer: &str) {
    assert_eq!(receipt["present"], true, "{receipt}");
    assert_eq!(receipt["offer_found"], true, "{receipt}");
    assert_eq!(receipt["matches_offer"], true, "{receipt}");
    assert_eq!(receipt["payload"]["payer"], payer, "{receipt}");
    assert_eq!(
        receipt["payload"]["network"], response["network"],
        "{receipt}"
    );
    assert_eq!(
        receipt["payload"]["transaction"], response["transaction"],
        "{receipt}"
    );
    assert!(
        receipt["payload"]["resourceUrl"]
            .as_str()
            .is_some_and(|u| u.ends_with("/v1/verdicts/basic")),
        "{receipt}"
    );
}

#[test]
fn a_purchase_on_base_and_one_on_solana_carry_receipts_that_verify_and_match() {
    let w = EveryRail::start();
    let url = format!("{}/v1/verdicts/basic", w.base());
    let key = umpire_host::random_id("idem");
    let devnet = w.devnet.devnet_json();
    let (status, receipt, response, sent) = bought_with_receipt(&[
        "--devnet",
        &devnet,
        "--url",
        &url,
        "--body",
        &body(),
        "--key",
        &key,
        "--verify-receipt",
    ]);
    assert_eq!(status, 201, "{receipt}");
    assert_receipt(&receipt, &response, &w.devnet.get("payer"));

    // A replay carries the original receipt, byte for byte.
    let replay = request(
        w.server.addr,
        "POST",
        "/v1/verdicts/basic",
        &[
            ("Content-Type", "application/json"),
            ("Idempotency-Key", &key),
            ("PAYMENT-SIGNATURE", &sent),
        ],
        Some(body().as_bytes()),
    );
    assert_eq!(replay.status, 201);
    let again = decode_b64_json(replay.header("payment-response").expect("PAYMENT-RESPONSE"));
    assert_eq!(again, response);

    let svm = w.net.svm_json();
    let (status, receipt, response, _) = bought_with_receipt(&[
        "--svm",
        &svm,
        "--url",
        &url,
        "--body",
        &body(),
        "--key",
        &umpire_host::random_id("idem"),
        "--verify-receipt",
    ]);
    assert_eq!(status, 201, "{receipt}");
    assert_receipt(&receipt, &response, &w.net.get("payer"));
}

struct Buyer {
    files: TempDir,
    wallet: String,
}

impl Buyer {
    fn new(devnet: &Devnet) -> Buyer {
        let files = TempDir::new("guarded");
        files.write("spec.json", SPEC.as_bytes());
        files.write("deliverable.json", DELIVERABLE.as_bytes());
        Buyer {
            files,
            wallet: devnet.get("payer_private_key"),
        }
    }

    /// `umpire buy basic` against `base`, with `extra` flags and `env`.
    fn buy(&self, base: &str, extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let spec = self.files.path().join("spec.json");
        let deliverable = self.files.path().join("deliverable.json");
        let mut args = vec![
            "buy",
            "basic",
            "--base",
            base,
            "--spec",
            spec.to_str().expect("path"),
            "--deliverable",
            deliverable.to_str().expect("path"),
        ];
        args.extend_from_slice(extra);
        let mut all = vec![("UMPIRE_WALLET_KEY", self.wallet.as_str())];
        all.extend_from_slice(env);
        run_umpire(&args, &all)
    }
}

#[test]
fn a_hostile_mirror_gets_nothing_signed() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let upstream = format!("http://{}", server.addr);
    let buyer = Buyer::new(&devnet);
    let payer = devnet.get("payer");
    let before = devnet.balance(&payer);
    for (mode, why) in [
        ("inflate", "other terms than the 402's option"),
        ("payto", "other terms than the 402's option"),
        ("forged", "not the pinned key"),
        ("strip", "no signed offers"),
    ] {
        let mirror = Mirror::start(&upstream, mode);
        let (code, out, err) = buyer.buy(&mirror.base, &[], &[]);
        assert_ne!(code, 0, "{mode}: {out}");
        assert!(err.contains("refusing to pay"), "{mode}: {err}");
        assert!(err.contains(why), "{mode}: {err}");
        assert!(err.contains("Nothing was signed"), "{mode}: {err}");
        assert_eq!(mirror.payments_seen(), 0, "{mode}: a payment was sent");
    }
    assert_eq!(devnet.balance(&payer), before, "nothing moved");

    // The control: an honest mirror is paid through, once.
    let honest = Mirror::start(&upstream, "honest");
    let (code, out, err) = buyer.buy(&honest.base, &[], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"verdict\""), "{out}");
    assert_eq!(honest.payments_seen(), 1);
    assert_eq!(devnet.balance(&payer), before - 1_000_000);

    // A paid answer without its secret (as a replay of a spent payment says it) is no
    // reason to sign again: one purchase, one payment.
    let withholding = Mirror::start(&upstream, "withhold");
    let (code, out, err) = buyer.buy(&withholding.base, &[], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"secret\":null"), "{out}");
    assert_eq!(withholding.payments_seen(), 1, "{err}");
    assert_eq!(devnet.balance(&payer), before - 2_000_000);
}

#[test]
fn the_pin_holds_the_price_the_key_and_the_callers_cap() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let base = format!("http://{}", server.addr);
    let buyer = Buyer::new(&devnet);
    let pins = TempDir::new("pins");
    let pin_env = [("UMPIRE_PIN_DIR", pins.path().to_str().expect("path"))];

    // Pinned explicitly, then paid at the pinned price.
    let (code, pin_file, err) = run_umpire(&["pin", "--base", &base], &pin_env);
    assert_eq!(code, 0, "{err}");
    let pin_file = pin_file.trim().to_owned();
    let pinned: Value =
        serde_json::from_slice(&std::fs::read(&pin_file).expect("pin file")).expect("JSON");
    let keys: Value =
        serde_json::from_slice(&server.get("/.well-known/umpire-key.json").body).expect("JSON");
    assert_eq!(
        pinned.pointer("/key_document/keys/0/key_id"),
        keys.pointer("/keys/0/key_id")
    );
    let (code, _, err) = buyer.buy(&base, &[], &pin_env);
    assert_eq!(code, 0, "{err}");

    // The caller's own cap.
    let (code, _, err) = buyer.buy(&base, &["--max-amount", "0.50"], &pin_env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("above --max-amount"), "{err}");

    // A pinned price below what the service now asks: refused until pinned again.
    let mut cheaper = pinned.clone();
    for tier in cheaper["quote"]["tiers"].as_array_mut().expect("tiers") {
        tier["usdc_units"] = "500000".into();
    }
    std::fs::write(&pin_file, cheaper.to_string()).expect("write pin");
    let (code, _, err) = buyer.buy(&base, &[], &pin_env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pinned price"), "{err}");

    // Another key pinned (the service's key as someone else's document claims it):
    // every genuine offer is refused.
    let mut other = pinned.clone();
    let stranger = umpire_core::signer::LocalSigner::from_seed([9; 32]);
    let stranger_key = umpire_core::signer::PublicKey::of(&stranger);
    other["key_document"]["keys"] = serde_json::json!([stranger_key.to_value("active").to_serde()]);
    std::fs::write(&pin_file, other.to_string()).expect("write pin");
    let (code, _, err) = buyer.buy(&base, &[], &pin_env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not the pinned key"), "{err}");

    // `umpire pin` again accepts the service as it is.
    let (code, _, err) = run_umpire(&["pin", "--base", &base], &pin_env);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("the pinned key changed"), "{err}");
    let (code, _, err) = buyer.buy(&base, &[], &pin_env);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn a_plain_http_service_elsewhere_is_not_paid_without_saying_so() {
    let devnet = Devnet::start();
    let buyer = Buyer::new(&devnet);
    // Never reached: refused before any request.
    let (code, _, err) = buyer.buy("http://192.0.2.1:9", &[], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("plain http"), "{err}");
    // Whatever the scheme's case.
    let (code, _, err) = buyer.buy("HTTP://192.0.2.1:9", &[], &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("plain http"), "{err}");
    // Nor is a key pinned from it, unless given from elsewhere.
    let pins = TempDir::new("pins");
    let pin_env = [("UMPIRE_PIN_DIR", pins.path().to_str().expect("path"))];
    let (code, _, err) = run_umpire(&["pin", "--base", "http://192.0.2.1:9"], &pin_env);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--key-document"), "{err}");
}

/// A free port on 127.0.0.1 (bound, then let go).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// `tests/js/siwx.mjs` against `url`: (status, body, the header sent).
fn sign_in(url: &str, args: &[&str]) -> (u64, String, String) {
    let v = sign_in_json(url, args);
    (
        v["status"].as_u64().unwrap_or_default(),
        v["body"].as_str().unwrap_or_default().to_owned(),
        v["header"].as_str().unwrap_or_default().to_owned(),
    )
}

/// All that `tests/js/siwx.mjs` printed (the nonces signed and offered included).
fn sign_in_json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["--url", url];
    all.extend_from_slice(args);
    node_json("tests/js/siwx.mjs", &all)
}

#[test]
fn the_paying_wallet_signs_in_to_its_verdict_and_nothing_else_does() {
    let issuer = format!("http://127.0.0.1:{}", free_port());
    let w = EveryRail::start_with(&[("UMPIRE_ISSUER", &issuer)]);
    assert_eq!(w.base(), issuer);
    let url = format!("{issuer}/v1/verdicts/basic");
    let devnet = w.devnet.devnet_json();
    let bought = node_json(
        "tests/js/buy.mjs",
        &["--devnet", &devnet, "--url", &url, "--body", &body()],
    );
    assert_eq!(bought["status"], 201, "{bought}");
    let answer: Value = serde_json::from_str(bought["body"].as_str().expect("body")).expect("JSON");
    let id = answer["verdict_id"].as_str().expect("id").to_owned();
    let status_url = format!("{issuer}/v1/verdicts/{id}");
    let payer_key = w.devnet.get("payer_private_key");

    // Without a credential: the challenge, declared.
    let asked = request(
        w.server.addr,
        "GET",
        &format!("/v1/verdicts/{id}"),
        &[],
        None,
    );
    assert_eq!(asked.status, 422);
    let challenge = decode_b64_json(asked.header("payment-required").expect("challenge"));
    let declared = &challenge["extensions"]["sign-in-with-x"];
    assert_eq!(declared["info"]["uri"], status_url.as_str(), "{challenge}");
    assert_eq!(
        declared["info"]["domain"],
        issuer.trim_start_matches("http://")
    );

    // The paying wallet, through the reference helpers: the verdict, no secret needed.
    let first = sign_in_json(&status_url, &["--private-key", &payer_key]);
    let (status, text, header) = (
        first["status"].as_u64().unwrap_or_default(),
        first["body"].as_str().unwrap_or_default().to_owned(),
        first["header"].as_str().unwrap_or_default().to_owned(),
    );
    assert_eq!(status, 200, "{text}");
    let read: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(read["verdict_id"], id.as_str());
    assert_eq!(read["document"], answer["document"]);

    // The same proof again: its nonce is spent. docs/api.md: the refusal is `401
    // bad_signature` with a fresh challenge, a nonce other than the one spent.
    let replayed = sign_in_json(&status_url, &["--header", &header]);
    let text = replayed["body"].as_str().unwrap_or_default();
    assert_eq!(replayed["status"], 401, "{text}");
    assert!(text.contains("invalid_siwx_nonce"), "{text}");
    assert!(text.contains("bad_signature"), "{text}");
    let spent = first["signed_nonce"].as_str().expect("the nonce signed");
    let fresh_nonce = replayed["refusal_nonce"]
        .as_str()
        .expect("the refusal carries a challenge");
    assert_ne!(fresh_nonce, spent, "a fresh nonce, not the spent one");

    // Another wallet: told what an unknown id is told.
    let stranger = format!("0x{}", "42".repeat(32));
    let (status, text, _) = sign_in(&status_url, &["--private-key", &stranger]);
    assert_eq!(status, 404, "{text}");

    // A proof for another domain, and an expired one.
    let (status, text, _) = sign_in(
        &status_url,
        &["--private-key", &payer_key, "--tamper", "domain"],
    );
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("invalid_siwx_domain_mismatch"), "{text}");
    let (status, text, _) = sign_in(
        &status_url,
        &["--private-key", &payer_key, "--tamper", "expired"],
    );
    assert_eq!(status, 401, "{text}");
    assert!(
        text.contains("invalid_siwx_issued_at_too_old") || text.contains("invalid_siwx_expired"),
        "{text}"
    );

    // A proof for this verdict opens no other: bound to its URI.
    let other = node_json(
        "tests/js/buy.mjs",
        &["--devnet", &devnet, "--url", &url, "--body", &body()],
    );
    let other: Value = serde_json::from_str(other["body"].as_str().expect("body")).expect("JSON");
    let other_url = format!(
        "{issuer}/v1/verdicts/{}",
        other["verdict_id"].as_str().expect("id")
    );
    let (_, _, fresh) = sign_in(&status_url, &["--private-key", &payer_key]);
    let (status, text, _) = sign_in(&other_url, &["--header", &fresh]);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("invalid_siwx_uri_mismatch"), "{text}");

    // The Solana payer signs in with SIWS the same way.
    let svm = w.net.svm_json();
    let sol = node_json(
        "tests/js/buy.mjs",
        &["--svm", &svm, "--url", &url, "--body", &body()],
    );
    assert_eq!(sol["status"], 201, "{sol}");
    let sol: Value = serde_json::from_str(sol["body"].as_str().expect("body")).expect("JSON");
    let sol_url = format!(
        "{issuer}/v1/verdicts/{}",
        sol["verdict_id"].as_str().expect("id")
    );
    let (status, text, _) = sign_in(&sol_url, &["--svm-keypair", &w.net.get("payer_keypair")]);
    assert_eq!(status, 200, "{text}");
    // ...and the EVM payer cannot read the Solana payer's verdict.
    let (status, _, _) = sign_in(&sol_url, &["--private-key", &payer_key]);
    assert_eq!(status, 404);

    // `umpire status` signs in with the wallet when no secret is given.
    let (code, out, err) = run_umpire(
        &["status", &id, "--base", &issuer],
        &[("UMPIRE_WALLET_KEY", payer_key.as_str())],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&id), "{out}");
    let (code, _, err) = run_umpire(
        &["status", &id, "--base", &issuer],
        &[("UMPIRE_WALLET_KEY", stranger.as_str())],
    );
    assert_eq!(code, 1, "{err}");
}
