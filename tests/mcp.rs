//! `POST /mcp` driven by the official MCP TypeScript SDK client (tests/js/mcp_client.mjs):
//! initialize, tools/list and a call of every tool against the real server; plus the
//! transport's edges (notifications, batches, bad JSON, GET) and the rate limits (mcp
//! 120/min; feedback calls also count in the feedback bucket HTTP uses).

use umpire_blackbox::chain::node_json;
use umpire_blackbox::{HOUR_WINDOW_MS, Server, TempDir, request, run_umpire};
use umpire_core::json::{Value, parse_str};

fn post_mcp(server: &Server, body: &str, headers: &[(&str, &str)]) -> umpire_blackbox::Reply {
    let mut all = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    request(server.addr, "POST", "/mcp", &all, Some(body.as_bytes()))
}

#[test]
fn the_official_sdk_client_lists_every_tool_and_calls_the_free_ones() {
    let server = Server::start();
    // A document signed with the server's own key: judged locally in its data directory.
    let files = TempDir::new("mcp");
    let spec = files.write(
        "spec.json",
        br#"{"checks":[{"type":"regex","pattern":"^ok"}]}"#,
    );
    let deliverable = files.write("deliverable.json", br#"{"text":"ok, done"}"#);
    let (code, doc, err) = run_umpire(
        &[
            "judge",
            "--tier",
            "basic",
            "--spec",
            spec.to_str().expect("utf-8 path"),
            "--deliverable",
            deliverable.to_str().expect("utf-8 path"),
            "--data-dir",
            server.data.path().to_str().expect("utf-8 path"),
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let document = files.write("document.json", doc.as_bytes());

    let url = format!("http://{}/mcp", server.addr);
    let out = node_json(
        "tests/js/mcp_client.mjs",
        &[
            "--url",
            &url,
            "--document",
            document.to_str().expect("utf-8 path"),
            "--deliverable",
            deliverable.to_str().expect("utf-8 path"),
        ],
    );
    assert_eq!(out["server"]["name"], "umpire");
    assert_eq!(
        out["tools"],
        serde_json::json!([
            "buy_verdict",
            "find",
            "get_reputation",
            "get_verdict",
            "quote",
            "submit_feedback",
            "validate",
            "verify_document"
        ])
    );
    assert_eq!(out["schemas_are_objects"], true);
    assert_eq!(out["validate"]["isError"], false, "{}", out["validate"]);
    assert_eq!(out["validate"]["structured"]["valid"], true);
    assert_eq!(out["validate_bad"]["structured"]["valid"], false);
    assert_eq!(out["quote"]["isError"], false);
    assert!(out["quote"]["structured"].is_object());
    assert_eq!(
        out["verify"]["structured"]["verified"], true,
        "{}",
        out["verify"]
    );
    assert_eq!(out["verify_tampered"]["structured"]["verified"], false);
    assert!(
        out["verify_tampered"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("FAIL")),
        "names the failing step: {}",
        out["verify_tampered"]
    );
    assert_eq!(out["get_verdict"]["isError"], true);
    assert_eq!(out["find"]["isError"], false, "{}", out["find"]);
    assert_eq!(out["feedback"]["isError"], true);
    assert_eq!(
        out["feedback"]["structured"]["error"]["code"], "receipts_off",
        "{}",
        out["feedback"]
    );
    assert_eq!(out["unknown_tool"], "-32602");
}

#[test]
fn the_transport_answers_notifications_batches_and_mistakes_by_the_rules() {
    let server = Server::start();
    let init = post_mcp(
        &server,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        &[],
    );
    assert_eq!(init.status, 200);
    let v = init.json();
    assert_eq!(
        v.get("result")
            .and_then(|r| r.get("protocolVersion"))
            .and_then(Value::as_str),
        Some("2025-03-26"),
        "a supported version asked for is the version used"
    );
    let unknown_version = post_mcp(
        &server,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"1999-01-01"}}"#,
        &[],
    );
    assert_eq!(
        unknown_version
            .json()
            .get("result")
            .and_then(|r| r.get("protocolVersion"))
            .and_then(Value::as_str),
        Some("2025-06-18"),
        "otherwise our newest"
    );

    let note = post_mcp(
        &server,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        &[],
    );
    assert_eq!(note.status, 202, "a notification gets no body");
    assert!(note.body.is_empty());

    let batch = post_mcp(
        &server,
        r#"[{"jsonrpc":"2.0","id":"a","method":"ping"},{"jsonrpc":"2.0","method":"notifications/x"},{"jsonrpc":"2.0","id":"b","method":"nope"}]"#,
        &[("MCP-Protocol-Version", "2025-03-26")],
    );
    assert_eq!(batch.status, 200);
    let replies = parse_str(&String::from_utf8_lossy(&batch.body)).expect("json");
    let replies = replies.as_array().expect("a batch answer");
    assert_eq!(
        replies.len(),
        2,
        "one answer per request, none for the notification"
    );
    assert_eq!(
        replies[1]
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_f64),
        Some(-32601.0)
    );

    let bad = post_mcp(&server, "{not json", &[]);
    assert_eq!(bad.status, 400);
    assert_eq!(
        bad.json()
            .get("error")
            .and_then(|e| e.get("code"))
            .and_then(Value::as_f64),
        Some(-32700.0)
    );
    let bad_version = post_mcp(
        &server,
        r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
        &[("MCP-Protocol-Version", "1999-01-01")],
    );
    assert_eq!(bad_version.status, 400);

    let get = request(server.addr, "GET", "/mcp", &[], None);
    assert_eq!(get.status, 405, "no server-to-client stream");
}

#[test]
fn mcp_calls_count_in_the_mcp_bucket_and_in_their_routes_own() {
    let server = Server::start_with(&[
        ("UMPIRE_RATE_LIMITS", "on"),
        ("UMPIRE_RATE_LIMIT_WINDOW_MS", HOUR_WINDOW_MS),
        ("UMPIRE_RATE_LIMIT_MCP", "4"),
        ("UMPIRE_RATE_LIMIT_FEEDBACK", "1"),
        ("UMPIRE_RATE_LIMIT_VALIDATE", "1"),
    ]);
    let call = |tool: &str, args: &str| {
        post_mcp(
            &server,
            &format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"{tool}","arguments":{args}}}}}"#
            ),
            &[],
        )
    };
    let validate = r#"{"tier":"basic","spec":{"checks":[{"type":"length","min":1}]}}"#;
    // validate allows 1: the first call passes, the second is refused inside the tool
    // result, and HTTP validate shares the spent bucket.
    let first = call("validate", validate);
    assert_eq!(first.status, 200);
    assert_eq!(
        first.json().get("result").and_then(|x| x.get("isError")),
        Some(&Value::Bool(false))
    );
    let second = call("validate", validate);
    assert_eq!(second.status, 200);
    let text = String::from_utf8_lossy(&second.body).into_owned();
    assert!(
        text.contains("rate_limited"),
        "validate bucket over MCP: {text}"
    );
    assert_eq!(
        server.validate(validate).status,
        429,
        "HTTP validate counts the MCP calls"
    );
    // Feedback over HTTP uses the shared bucket's one request; over MCP it is refused.
    let feedback = r#"{"merchant":"0x1111111111111111111111111111111111111111","payer":"0x2222222222222222222222222222222222222222","tx_hash":"0x3333333333333333333333333333333333333333333333333333333333333333","outcome":"failed","signature":"0x00"}"#;
    let http = server.feedback(feedback);
    assert_ne!(http.status, 429);
    let over_mcp = call("submit_feedback", feedback);
    let text = String::from_utf8_lossy(&over_mcp.body).into_owned();
    assert!(
        text.contains("rate_limited"),
        "shared feedback bucket: {text}"
    );
    // The fourth POST fills the mcp bucket; the fifth is 429 with Retry-After.
    assert_eq!(call("quote", "{}").status, 200);
    let limited = call("quote", "{}");
    assert_eq!(limited.status, 429);
    assert!(limited.header("retry-after").is_some());
}

#[test]
fn every_call_of_a_batch_counts_in_the_mcp_bucket() {
    let server = Server::start_with(&[
        ("UMPIRE_RATE_LIMITS", "on"),
        ("UMPIRE_RATE_LIMIT_WINDOW_MS", HOUR_WINDOW_MS),
        ("UMPIRE_RATE_LIMIT_MCP", "3"),
    ]);
    let ping = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
    let three = format!("[{},{},{}]", ping(1), ping(2), ping(3));
    assert_eq!(
        post_mcp(&server, &three, &[]).status,
        200,
        "three calls fit"
    );
    let limited = post_mcp(&server, &format!("[{}]", ping(4)), &[]);
    assert_eq!(limited.status, 429, "a batch is not one call");
    assert!(limited.header("retry-after").is_some());
}

/// The paid tools' edges, before anything is bought: a paid call in a batch is refused
/// (each may take a purchase's whole budget), a payment larger than HTTP could carry is
/// refused, and an idempotency key the route could not read is refused (never dropped
/// on the way, which could let one purchase be paid twice).
#[test]
fn paid_tools_refuse_batches_oversized_payments_and_unreadable_keys() {
    let server = Server::start();
    let call = |id: u64, args: &str, meta: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"buy_verdict","arguments":{args}{meta}}}}}"#
        )
    };
    let args = r#"{"tier":"basic","spec":{"checks":[{"type":"regex","pattern":"^ok"}]},"deliverable":{"text":"ok"}}"#;

    let batch = format!(
        "[{},{}]",
        call(1, args, ""),
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#
    );
    let r = post_mcp(&server, &batch, &[]);
    assert_eq!(r.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(v[0]["error"]["code"], -32602, "{v}");
    assert!(
        v[0]["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot be batched")),
        "{v}"
    );
    assert_eq!(
        v[1]["result"],
        serde_json::json!({}),
        "the rest of the batch runs"
    );

    let big = format!(
        r#","_meta":{{"x402/payment":{{"x402Version":2,"payload":{{"pad":"{}"}}}}}}"#,
        "a".repeat(17_000)
    );
    let r = post_mcp(&server, &call(3, args, &big), &[]);
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert!(
        v["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("a payment is at most")),
        "{v}"
    );

    let keyed = r#"{"tier":"basic","spec":{"checks":[{"type":"regex","pattern":"^ok"}]},"deliverable":{"text":"ok"},"idempotency_key":"clé-non-ascii-0123456789"}"#;
    let r = post_mcp(&server, &call(4, keyed, ""), &[]);
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert_eq!(
        v["result"]["structuredContent"]["error"]["code"], "invalid_idempotency_key",
        "{v}"
    );
}
