//! Found and paid where agents already are: every paid route's 402 declares x402's
//! `bazaar` discovery extension (checked with `@x402/extensions`' own validator and
//! extractor, as a facilitator's catalog runs them) and the `payment-identifier`
//! extension, honored like the Idempotency-Key header, by the reference client.

use umpire_blackbox::chain::{Devnet, Settlement, buy_over_mcp, buy_v2, node_json};
use umpire_blackbox::{Server, assert_recipe_verifies, request};
use umpire_core::json::Value;

const TIERS: [&str; 4] = ["witness", "basic", "probe", "sworn"];

/// The PAYMENT-REQUIRED header of an unpaid request.
fn required_header(server: &Server, method: &str, path: &str, body: Option<&str>) -> String {
    let r = request(
        server.addr,
        method,
        path,
        &[("Content-Type", "application/json")],
        body.map(str::as_bytes),
    );
    assert_eq!(r.status, 402, "{}", String::from_utf8_lossy(&r.body));
    r.header("payment-required")
        .expect("PAYMENT-REQUIRED")
        .to_owned()
}

fn catalog(required: &str) -> serde_json::Value {
    node_json("tests/js/discovery.mjs", &["--required", required])
}

#[test]
fn every_paid_route_is_discoverable_and_the_discovered_call_buys() {
    let devnet = Devnet::start();
    // The examples' hosts resolve (offline) to a public address: validated, not fetched.
    let server = devnet.serve(
        Settlement::SelfSettle,
        &[(
            "UMPIRE_TEST_FETCH_HOSTS",
            "api.example.com=93.184.215.14,example.com=93.184.215.14,agent.example.com=93.184.215.14",
        )],
    );
    let merchant = "0x1111111111111111111111111111111111111111";

    let mut routes: Vec<(String, &str, String)> = TIERS
        .iter()
        .map(|t| {
            (
                format!("/v1/verdicts/{t}"),
                "POST",
                format!("a {t} verdict"),
            )
        })
        .collect();
    routes.push((
        format!("/v1/reputation?merchant={merchant}"),
        "GET",
        "reputation".into(),
    ));
    // Unpaid requests must be valid to be priced: each tier's example, as /openapi.json
    // serves it.
    let openapi: serde_json::Value =
        serde_json::from_slice(&server.get("/openapi.json").body).expect("openapi");
    let example = |path: &str| {
        let tier = path.rsplit('/').next().unwrap_or_default();
        openapi["paths"]["/v1/verdicts/{tier}"]["post"]["requestBody"]["content"]
            ["application/json"]["examples"][tier]["value"]
            .to_string()
    };
    let mut basic_input = None;
    for (path, method, what) in &routes {
        let body = (*method == "POST").then(|| example(path));
        let required = required_header(&server, method, path, body.as_deref());
        let c = catalog(&required);
        assert_eq!(c["valid"], true, "{what}: {c}");
        assert_eq!(c["specValid"], true, "{what}: {c}");
        let d = &c["discovered"];
        assert_eq!(d["method"], *method, "{what}: {d}");
        assert_eq!(d["serviceName"], "Umpire");
        assert!(
            d["description"]
                .as_str()
                .is_some_and(|s| s.contains("signed") && s.len() > 60),
            "a description an agent can search: {d}"
        );
        let info = &d["discoveryInfo"];
        assert!(info["output"]["example"].is_object(), "{what}: {info}");
        // The payment-identifier extension is declared, optional.
        let declared = umpire_blackbox::decode_b64_json(&required);
        assert_eq!(
            declared["extensions"]["payment-identifier"]["info"]["required"],
            false
        );
        if *method == "POST" {
            assert_eq!(info["input"]["bodyType"], "json");
            assert!(info["input"]["body"]["spec"]["checks"].is_array(), "{info}");
            if path.ends_with("/basic") {
                basic_input = Some(info["input"].clone());
            }
        } else {
            assert_eq!(
                info["input"]["queryParams"]["merchant"]
                    .as_str()
                    .map(str::len),
                Some(42)
            );
        }
    }

    // The example the catalog holds, sent as is with a payment, buys a verdict.
    let input = basic_input.expect("basic's input");
    let body = input["body"].to_string();
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let bought = buy_v2(&devnet, &url, &body, None);
    assert_eq!(bought.status, 201, "{}", bought.body);
    let answer = bought.json();
    assert_eq!(answer.get("verdict").and_then(Value::as_str), Some("pass"));
    let document = answer.get("document").expect("document");
    assert_recipe_verifies(&server, document, &input["body"]["deliverable"].to_string());
}

/// The reference client with the payment-identifier extension and no Idempotency-Key:
/// bought once; its retry under the same id (a new authorization) replays with no second
/// charge; the same id with another body is 409; an id in both places that differs is
/// 422 before any payment is looked at.
#[test]
fn the_payment_identifier_is_honored_like_the_idempotency_key() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let url = format!("http://{}/v1/verdicts/basic", server.addr);
    let body = r#"{"spec":{"checks":[{"type":"regex","pattern":"^ok"}]},"deliverable":{"text":"ok then"}}"#;
    let other = r#"{"spec":{"checks":[{"type":"regex","pattern":"^ok"}]},"deliverable":{"text":"ok again"}}"#;
    let payer = devnet.get("payer");
    let pay_to = devnet.get("pay_to");
    let (payer0, ours0) = (devnet.balance(&payer), devnet.balance(&pay_to));
    let id = format!("pay_{}", umpire_host::random_id("t").replace('_', ""));
    let dn = devnet.devnet_json();
    let buy = |body: &str| {
        let v = node_json(
            "tests/js/buy.mjs",
            &[
                "--devnet",
                &dn,
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
            v["sent"][0].as_str().unwrap_or_default().to_owned(),
        )
    };

    let (status, first, spent) = buy(body);
    assert_eq!(status, 201, "{first}");
    assert_eq!(devnet.balance(&pay_to), ours0 + 1_000_000);

    // The client's retry signs a new authorization under the same id: verified (it
    // is the payer), so the replay is the original answer, secret included.
    let (status, again, _) = buy(body);
    assert_eq!(status, 201, "{again}");
    let field = |text: &str, k: &str| {
        umpire_core::json::parse(text.as_bytes())
            .ok()
            .and_then(|v| v.get(k).and_then(Value::as_str).map(str::to_owned))
    };
    assert_eq!(
        field(&again, "verdict_id"),
        field(&first, "verdict_id"),
        "the same purchase, replayed"
    );
    assert!(field(&first, "secret").is_some());
    assert_eq!(field(&again, "secret"), field(&first, "secret"));
    assert_eq!(
        devnet.balance(&pay_to),
        ours0 + 1_000_000,
        "no second charge"
    );
    assert_eq!(devnet.balance(&payer), payer0 - 1_000_000);

    let (status, reused, _) = buy(other);
    assert_eq!(status, 409, "{reused}");
    assert!(reused.contains("idempotency_key_reuse"), "{reused}");
    assert_eq!(devnet.balance(&pay_to), ours0 + 1_000_000);

    // The id travels inside the payment (to facilitators, through MCP clients), so
    // it is no secret: whoever resends the first, spent payment carrying it (rebuilt
    // from the chain, say) gets the purchase with the one-time secret withheld.
    let as_paid = |payment: &str| {
        request(
            server.addr,
            "POST",
            "/v1/verdicts/basic",
            &[
                ("Content-Type", "application/json"),
                ("PAYMENT-SIGNATURE", payment),
            ],
            Some(body.as_bytes()),
        )
    };
    let r = as_paid(&spent);
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let text = String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(field(&text, "verdict_id"), field(&first, "verdict_id"));
    assert_eq!(field(&text, "secret"), None, "withheld: {text}");
    assert_eq!(
        devnet.balance(&pay_to),
        ours0 + 1_000_000,
        "never charged again"
    );

    // Header and extension both present and different: refused before the payment.
    let signed = umpire_blackbox::chain::sign_payment(&devnet, &url, body);
    // The reference client echoes the 402's extensions (the Bazaar declaration
    // included) into its payment: the header must leave room in API Gateway's limit.
    assert!(
        signed.len() + 2048 <= umpire_core::platform::API_GATEWAY_REQUEST_HEADERS_BYTES,
        "a {}-byte payment header",
        signed.len()
    );
    let mut payment = umpire_blackbox::decode_b64_json(&signed);
    payment["extensions"]["payment-identifier"] =
        serde_json::json!({"info": {"required": false, "id": id}});
    let header = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        payment.to_string(),
    );
    let r = request(
        server.addr,
        "POST",
        "/v1/verdicts/basic",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", &header),
            ("Idempotency-Key", "another-key-0123456789"),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    let text = String::from_utf8_lossy(&r.body);
    assert!(text.contains("payment_identifier_mismatch"), "{text}");
    // A malformed id is refused the same way, with the extension's rule in the message.
    payment["extensions"]["payment-identifier"]["info"]["id"] = "short".into();
    let header = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        payment.to_string(),
    );
    let r = request(
        server.addr,
        "POST",
        "/v1/verdicts/basic",
        &[
            ("Content-Type", "application/json"),
            ("PAYMENT-SIGNATURE", &header),
        ],
        Some(body.as_bytes()),
    );
    assert_eq!(r.status, 422, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        devnet.balance(&pay_to),
        ours0 + 1_000_000,
        "nothing charged"
    );
}

fn mcp_buy(devnet: &Devnet, server: &Server, tool: &str, arguments: &str) -> serde_json::Value {
    buy_over_mcp(
        devnet,
        &format!("http://{}/mcp", server.addr),
        tool,
        arguments,
    )
}

/// An agent living in MCP buys a verdict and a reputation report with x402's official
/// MCP client (Python SDK): the first call gets the requirements as a tool error, the
/// client pays in `_meta`, the answer carries the settlement in `_meta`. Each document
/// verifies with the contract's recipe; each purchase moved money once. A refusal before
/// payment is a tool error with the contract's code, and nothing is paid.
#[test]
fn the_official_x402_mcp_client_buys_a_verdict_and_a_report() {
    let devnet = Devnet::start();
    let server = devnet.serve(Settlement::SelfSettle, &[]);
    let payer = devnet.get("payer");
    let pay_to = devnet.get("pay_to");
    let (payer0, ours0) = (devnet.balance(&payer), devnet.balance(&pay_to));

    let deliverable = r##"{"text":"# Report\nall tests pass"}"##;
    let args = format!(
        r#"{{"tier":"basic","spec":{{"checks":[{{"type":"regex","pattern":"^# Report"}}]}},"deliverable":{deliverable}}}"#
    );
    let v = mcp_buy(&devnet, &server, "buy_verdict", &args);
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(v["payment_made"], true);
    assert_eq!(v["payment_response"]["success"], true, "{v}");
    assert_eq!(v["payment_response"]["network"], devnet.get("network"));
    let bought = &v["structured"];
    assert_eq!(bought["verdict"], "pass", "{v}");
    let document = Value::from(bought["document"].clone());
    assert_recipe_verifies(&server, &document, deliverable);
    assert_eq!(devnet.balance(&pay_to), ours0 + 1_000_000);
    assert_eq!(devnet.balance(&payer), payer0 - 1_000_000);

    let v = mcp_buy(
        &devnet,
        &server,
        "get_reputation",
        &format!(r#"{{"merchant":"{pay_to}"}}"#),
    );
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(v["payment_response"]["success"], true, "{v}");
    let report = Value::from(v["structured"]["report"].clone());
    let tmp = umpire_blackbox::TempDir::new("mcp-report");
    let doc = tmp.write("doc.json", &report.to_canonical_vec());
    let keys = tmp.write(
        "keys.json",
        &server.get("/.well-known/umpire-key.json").body,
    );
    let (ok, said) = umpire_blackbox::python_recipe_signature_only(&doc, &keys);
    assert!(ok, "the report does not verify: {said}");
    assert_eq!(
        devnet.balance(&pay_to),
        ours0 + 1_010_000,
        "each purchase once"
    );

    // Sworn over MCP: the 202's content, pass 1 and the status link.
    let v = mcp_buy(
        &devnet,
        &server,
        "buy_verdict",
        r#"{"tier":"sworn","spec":{"checks":[{"type":"regex","pattern":"^ok"}]},"deliverable":{"text":"ok"}}"#,
    );
    assert_eq!(v["is_error"], false, "{v}");
    assert_eq!(v["structured"]["status"], "pending", "{v}");
    assert!(
        v["structured"]["status_url"]
            .as_str()
            .is_some_and(|u| u.contains("/v1/verdicts/")),
        "{v}"
    );
    assert!(v["structured"]["pass1"].is_object(), "{v}");
    assert_eq!(devnet.balance(&pay_to), ours0 + 6_010_000);

    // Refused before payment: a tool error with the contract's code; nothing paid.
    let v = mcp_buy(
        &devnet,
        &server,
        "buy_verdict",
        r#"{"tier":"basic","spec":{"checks":[]},"deliverable":{"text":"x"}}"#,
    );
    assert_eq!(v["is_error"], true, "{v}");
    assert_eq!(v["payment_made"], false, "{v}");
    assert!(v["texts"].to_string().contains("invalid_spec"), "{v}");
    assert_eq!(devnet.balance(&pay_to), ours0 + 6_010_000);
}
