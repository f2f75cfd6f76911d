//! `POST /mcp`: the Model Context Protocol over its streamable HTTP transport
//! (JSON-RPC 2.0, answered with `application/json`; stateless, so no session id and no
//! server-initiated stream: `GET /mcp` is 405 as the transport allows).
//!
//! Tools are the free routes, called through the same handlers as HTTP so answers and
//! errors are identical: validate, quote, get_verdict, find, submit_feedback, plus
//! verify_document, the contract's recipe run here. Each POST counts once in the `mcp`
//! rate-limit bucket; feedback also counts in the feedback bucket it shares with HTTP.
//!
//! The paid tools, buy_verdict and get_reputation, are paid with x402's MCP transport:
//! called without a payment they answer the 402 as a tool error whose structured
//! content is the `PaymentRequired`; the client retries with the payment in
//! `params._meta["x402/payment"]` and gets the settlement in the result's
//! `_meta["x402/payment-response"]`. They are not a second paid path: each call becomes
//! the HTTP request it stands for (the payment in PAYMENT-SIGNATURE, the optional key in
//! Idempotency-Key) and goes to the paid route itself ([`PaidRoutes`]: in process in
//! `umpire serve`, the route's own function in AWS), checkout, ledger and all.

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use umpire_chain::claim::Outcome;
use umpire_core::json::{Value, parse, parse_str};
use umpire_core::product::Tier;
use umpire_core::spec::parse_deliverable;

use crate::cpu::off_thread;
use crate::limits;
use crate::{AppState, ClientIp, Request, Response, respond};
use umpire_core::signer::PublicKey;

/// Protocol revisions we speak, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

/// (name, title, description, input schema as JSON text).
const TOOLS: &[(&str, &str, &str, &str)] = &[
    (
        "validate",
        "Validate a would-be purchase",
        "Checks a spec (and optionally deliverable, webhook_url, job_ref) for a tier exactly as a purchase would, without paying: every problem with a hint, URL-policy verdicts, the normalized spec and its spec_hash. Free.",
        r#"{"type":"object","properties":{"tier":{"type":"string"},"spec":{"type":"object","description":"{\"checks\":[...]} as in the contract"},"deliverable":{"type":"object","properties":{"text":{"type":"string"},"json":{}}},"webhook_url":{"type":"string"},"job_ref":{"type":"string"}},"required":["tier","spec"]}"#,
    ),
    (
        "quote",
        "Prices, limits and payment rails",
        "The pricing manifest: every tier's price, the accepted payment rails, limits and rate limits. Free.",
        r#"{"type":"object","properties":{}}"#,
    ),
    (
        "get_verdict",
        "Read a verdict",
        "A verdict's status and document by id, with the one-time secret returned at purchase (pending sworn verdicts show pass-1 results). Free.",
        r#"{"type":"object","properties":{"verdict_id":{"type":"string"},"secret":{"type":"string"}},"required":["verdict_id","secret"]}"#,
    ),
    (
        "find",
        "Find sworn verdicts",
        "Ids of sworn verdicts bought with this spec_hash and webhook URL (to recover an id after losing the purchase response). Free.",
        r#"{"type":"object","properties":{"spec_hash":{"type":"string","pattern":"^[0-9a-f]{64}$"},"webhook":{"type":"string"}},"required":["spec_hash","webhook"]}"#,
    ),
    (
        "submit_feedback",
        "Leave payment-verified feedback",
        "Records feedback on a merchant, proven by a USDC payment from payer to merchant on Base (tx_hash) and the payer's EIP-191 signature over the contract's message. Free; one feedback per transaction.",
        r#"{"type":"object","properties":{"merchant":{"type":"string","pattern":"^0x[0-9a-fA-F]{40}$"},"payer":{"type":"string","pattern":"^0x[0-9a-fA-F]{40}$"},"tx_hash":{"type":"string","pattern":"^0x[0-9a-fA-F]{64}$"},"outcome":{"type":"string"},"would_repeat":{"type":"boolean"},"latency_ms":{"type":"integer","minimum":0},"signature":{"type":"string"}},"required":["merchant","payer","tx_hash","outcome","signature"],"additionalProperties":false}"#,
    ),
    (
        "buy_verdict",
        "Buy a signed verdict (x402)",
        "Judges a deliverable against an acceptance spec and returns the Ed25519-signed pass/fail verdict (witness $0.25, basic $1.00, probe $2.00, sworn $5.00: sworn answers with pass-1 results and a status link; the final document follows). Paid with x402 over MCP: called without payment it returns the payment requirements (isError, structuredContent = PaymentRequired); retry with the payment in _meta[\"x402/payment\"]. Refusals before payment cost nothing.",
        r#"{"type":"object","properties":{"tier":{"type":"string"},"spec":{"type":"object","description":"{\"checks\":[...]} as in the contract"},"deliverable":{"type":"object","properties":{"text":{"type":"string"},"json":{}}},"webhook_url":{"type":"string","description":"sworn only"},"job_ref":{"type":"string"},"idempotency_key":{"type":"string","minLength":16,"maxLength":128,"description":"as the Idempotency-Key header: a retry with the same key and arguments gets the original answer, never a second charge"}},"required":["tier","spec"]}"#,
    ),
    (
        "get_reputation",
        "Buy a merchant's reputation report (x402)",
        "The signed, payment-verified reputation report of a merchant wallet ($0.01). Paid with x402 over MCP like buy_verdict.",
        r#"{"type":"object","properties":{"merchant":{"type":"string","pattern":"^0x[0-9a-fA-F]{40}$"},"idempotency_key":{"type":"string","minLength":16,"maxLength":128}},"required":["merchant"]}"#,
    ),
    (
        "verify_document",
        "Verify a signed document",
        "Runs the contract's verification recipe on a signed Umpire document (verdict or reputation report): stable JSON bytes, payload_sha256, the Ed25519 signature against this service's published keys (or key_document), and, given the deliverable, deliverable_hash. Free, nothing stored.",
        r#"{"type":"object","properties":{"document":{"type":"object"},"key_document":{"type":"object","description":"a /.well-known/umpire-key.json document; default: this service's keys"},"deliverable":{"type":"object","properties":{"text":{"type":"string"},"json":{}}}},"required":["document"]}"#,
    ),
];

/// A tool's input schema, with the enums the contract defines filled in from their
/// one source (tiers, feedback outcomes) rather than spelled out again in the text.
fn input_schema(text: &str) -> Value {
    let mut schema = parse_str(text).unwrap_or_else(|_| Value::object());
    let mut set_enum = |field: &str, values: Vec<Value>| {
        if let Value::Object(root) = &mut schema
            && let Some(Value::Object(props)) = root.get_mut("properties")
            && let Some(Value::Object(prop)) = props.get_mut(field)
        {
            prop.insert("enum".into(), Value::Array(values));
        }
    };
    set_enum(
        "tier",
        Tier::ALL.iter().map(|t| Value::from(t.as_str())).collect(),
    );
    set_enum(
        "outcome",
        Outcome::ALL
            .iter()
            .map(|o| Value::from(o.as_str()))
            .collect(),
    );
    schema
}

fn tools_list() -> Value {
    let tools: Vec<Value> = TOOLS
        .iter()
        .map(|(name, title, description, schema)| {
            Value::object()
                .with("name", *name)
                .with("title", *title)
                .with("description", *description)
                .with("inputSchema", input_schema(schema))
        })
        .collect();
    Value::object().with("tools", Value::Array(tools))
}

fn rpc_result(id: &Value, result: Value) -> Value {
    Value::object()
        .with("jsonrpc", "2.0")
        .with("id", id.clone())
        .with("result", result)
}

fn rpc_error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    Value::object()
        .with("jsonrpc", "2.0")
        .with("id", id.clone())
        .with(
            "error",
            Value::object()
                .with("code", code)
                .with("message", message.into()),
        )
}

fn json_response(status: u16, body: &Value) -> Response {
    let mut r = respond::json(status, body);
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The MCP endpoint.
pub async fn mcp(state: &AppState, req: &Request) -> Response {
    if let Some(v) = req.headers().get("mcp-protocol-version")
        && !PROTOCOL_VERSIONS
            .iter()
            .any(|p| v.as_bytes() == p.as_bytes())
    {
        return json_response(
            400,
            &rpc_error(
                &Value::Null,
                INVALID_REQUEST,
                format!(
                    "unsupported MCP-Protocol-Version; this server speaks {}",
                    PROTOCOL_VERSIONS.join(", ")
                ),
            ),
        );
    }
    // Parsing, serializing and dropping what a caller sent (up to 1 MiB, hundreds of
    // thousands of values) happens on the blocking pool, never on the async threads.
    let raw = req.body().clone();
    let body = match off_thread(move || parse(&raw)).await {
        Ok(v) => v,
        Err(e) => {
            return json_response(
                400,
                &rpc_error(&Value::Null, PARSE_ERROR, format!("not JSON: {e}")),
            );
        }
    };
    // The contract's mcp limit counts calls: every request of a batch (at least one per
    // POST), so a batch cannot carry more calls than the limit allows.
    let requests = match &body {
        Value::Array(batch) => batch.iter().filter(|m| m.get("id").is_some()).count(),
        _ => 1,
    };
    for _ in 0..requests.max(1) {
        if let Err(e) = limits::enforce(state, "mcp", ClientIp::of(req)).await {
            return respond::error(&e);
        }
    }
    let reply = match body {
        Value::Array(batch) if batch.is_empty() => {
            return json_response(
                400,
                &rpc_error(&Value::Null, INVALID_REQUEST, "an empty batch"),
            );
        }
        Value::Array(batch) => {
            let mut replies = Vec::new();
            let alone = requests <= 1;
            for message in batch {
                if let Some(reply) = handle_message(state, req, message, alone).await {
                    replies.push(reply);
                }
            }
            (!replies.is_empty()).then_some(Value::Array(replies))
        }
        message => handle_message(state, req, message, true).await,
    };
    match reply {
        None => accepted(),
        Some(reply) => off_thread(move || json_response(200, &reply)).await,
    }
}

/// Notifications and responses get no answer: 202 with no body.
fn accepted() -> Response {
    let mut r = http::Response::new(Bytes::new());
    *r.status_mut() = StatusCode::ACCEPTED;
    r
}

/// One JSON-RPC message; None for notifications and client responses. `alone`: the
/// only call of its POST (paid tools must be: each may take a purchase's whole time
/// budget, and a batch answers only when all its calls have).
async fn handle_message(
    state: &AppState,
    req: &Request,
    message: Value,
    alone: bool,
) -> Option<Value> {
    let Value::Object(mut obj) = message else {
        return Some(rpc_error(
            &Value::Null,
            INVALID_REQUEST,
            "a JSON-RPC message is an object",
        ));
    };
    let id = obj.get("id")?.clone();
    if !matches!(id, Value::String(_) | Value::Number(_) | Value::Null) {
        return Some(rpc_error(
            &Value::Null,
            INVALID_REQUEST,
            "id must be a string or a number",
        ));
    }
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some(rpc_error(&id, INVALID_REQUEST, "jsonrpc must be \"2.0\""));
    }
    let Some(method) = obj.get("method").and_then(Value::as_str) else {
        // A response to something we never asked: nothing to answer.
        return None;
    };
    let method = method.to_owned();
    let params = obj.remove("params").unwrap_or_else(Value::object);
    Some(match method.as_str() {
        "initialize" => rpc_result(&id, initialize(&params)),
        "ping" => rpc_result(&id, Value::object()),
        "tools/list" => rpc_result(&id, tools_list()),
        "tools/call" => match call_tool(state, req, params, alone).await {
            Ok(result) => rpc_result(&id, result),
            Err(message) => rpc_error(&id, INVALID_PARAMS, message),
        },
        other => rpc_error(
            &id,
            METHOD_NOT_FOUND,
            format!(
                "no method {other:?}; this server offers initialize, ping, tools/list, tools/call"
            ),
        ),
    })
}

fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str);
    let version = asked
        .and_then(|a| PROTOCOL_VERSIONS.iter().find(|p| **p == a))
        .copied()
        .unwrap_or(PROTOCOL_VERSIONS[0]);
    Value::object()
        .with("protocolVersion", version)
        .with(
            "capabilities",
            Value::object().with("tools", Value::object().with("listChanged", false)),
        )
        .with(
            "serverInfo",
            Value::object()
                .with("name", "umpire")
                .with("title", "Umpire")
                .with("version", env!("CARGO_PKG_VERSION")),
        )
        .with(
            "instructions",
            "Umpire sells Ed25519-signed pass/fail verdicts on deliverables and payment-verified reputation reports, paid per call with x402 (buy_verdict, get_reputation: the payment goes in _meta[\"x402/payment\"], as x402's MCP clients do). The other tools are free: validate a spec before buying, read prices, read or find verdicts, leave feedback, and verify any signed document offline.",
        )
}

/// An internal request to one of our own routes, as the caller, already counted.
fn internal(
    req: &Request,
    method: Method,
    uri: &str,
    headers: &[(&str, String)],
    body: Option<Bytes>,
) -> Result<Request, String> {
    let mut builder = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        builder = builder.header(*k, v);
    }
    let mut inner = builder
        .body(body.unwrap_or_default())
        .map_err(|e| format!("bad arguments: {e}"))?;
    if let Some(ip) = ClientIp::of(req) {
        inner.extensions_mut().insert(ip);
    }
    Ok(inner)
}

/// A route's answer as a tool result: its JSON as text and as structured content;
/// error answers (4xx/5xx) are tool errors the model can read and act on.
fn route_result(response: Response) -> Value {
    let status = response.status().as_u16();
    let body = response.into_body();
    let parsed =
        parse(&body).unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&body).into_owned()));
    let text = String::from_utf8_lossy(&body).into_owned();
    let mut result = Value::object()
        .with(
            "content",
            Value::Array(vec![
                Value::object().with("type", "text").with("text", text),
            ]),
        )
        .with("isError", status >= 400);
    if parsed.as_object().is_some() {
        result = result.with("structuredContent", parsed);
    }
    result
}

fn string_arg<'a>(args: &'a Value, name: &str) -> Result<&'a str, String> {
    args.get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("argument {name:?} (a string) is required"))
}

async fn call_tool(
    state: &AppState,
    req: &Request,
    params: Value,
    alone: bool,
) -> Result<Value, String> {
    let Value::Object(mut params) = params else {
        return Err("tools/call needs params, an object".into());
    };
    let name = match params.get("name") {
        Some(Value::String(n)) => n.clone(),
        _ => return Err("tools/call needs params.name".into()),
    };
    let args = params.remove("arguments").unwrap_or_else(Value::object);
    if args.as_object().is_none() {
        return Err("params.arguments must be an object".into());
    }
    if matches!(name.as_str(), "buy_verdict" | "get_reputation") {
        if !alone {
            return Err(format!(
                "{name} is paid and cannot be batched: send each paid call in a POST of its own (a purchase may take the whole time budget, and a batch answers only when every call has)"
            ));
        }
        let payment = params
            .get("_meta")
            .and_then(|m| m.get(PAYMENT_META_KEY))
            .cloned();
        return paid_tool(state, req, &name, args, payment).await;
    }
    let json = ("content-type", "application/json".to_owned());
    // Arguments that become a request body are serialized off the async threads.
    let body_of = |args: Value| off_thread(move || Bytes::from(args.to_canonical_vec()));
    let response = match name.as_str() {
        "validate" => {
            let body = body_of(args).await;
            let r = internal(req, Method::POST, "/v1/validate", &[json], Some(body))?;
            crate::handlers::validate(state, &r).await
        }
        "quote" => {
            let r = internal(req, Method::GET, "/v1/quote", &[], None)?;
            crate::handlers::quote(state, &r).await
        }
        "get_verdict" => {
            let id = string_arg(&args, "verdict_id")?;
            let secret = string_arg(&args, "secret")?;
            let r = internal(
                req,
                Method::GET,
                &format!("/v1/verdicts/{}", umpire_core::urlenc::component(id)),
                &[("authorization", format!("Bearer {secret}"))],
                None,
            )?;
            crate::lookup::status(state, &r).await
        }
        "find" => {
            let uri = format!(
                "/v1/find?spec_hash={}&webhook={}",
                umpire_core::urlenc::component(string_arg(&args, "spec_hash")?),
                umpire_core::urlenc::component(string_arg(&args, "webhook")?)
            );
            let r = internal(req, Method::GET, &uri, &[], None)?;
            crate::lookup::find(state, &r).await
        }
        "submit_feedback" => {
            let body = body_of(args).await;
            let r = internal(req, Method::POST, "/v1/feedback", &[json], Some(body))?;
            crate::feedback::submit(state, &r).await
        }
        "verify_document" => {
            let ours = state.public_keys();
            return Ok(off_thread(move || verify_document(ours, &args)).await);
        }
        other => {
            return Err(format!(
                "no tool {other:?}; tools/list names {}",
                TOOLS.iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
            ));
        }
    };
    Ok(off_thread(move || route_result(response)).await)
}

/// x402's MCP transport: where a tool call carries its payment, and where the result
/// carries the settlement.
pub const PAYMENT_META_KEY: &str = "x402/payment";
pub const PAYMENT_RESPONSE_META_KEY: &str = "x402/payment-response";

/// The largest payment a paid tool takes (base64 of its JSON): what fits in an HTTP
/// request's headers through API Gateway, with room for the others.
const MAX_PAYMENT_BYTES: usize = umpire_core::platform::API_GATEWAY_REQUEST_HEADERS_BYTES - 2048;

/// Where the paid tools' requests go: the paid routes themselves.
#[async_trait::async_trait]
pub trait PaidRoutes: Send + Sync {
    /// Answers `req` as `route` (`Route::Buy` or `Route::Reputation`) does over HTTP.
    async fn call(&self, state: &AppState, route: crate::Route, req: Request) -> Response;
}

/// The paid routes in this very process (`umpire serve`).
pub struct InProcess;

#[async_trait::async_trait]
impl PaidRoutes for InProcess {
    async fn call(&self, state: &AppState, route: crate::Route, req: Request) -> Response {
        match route {
            crate::Route::Reputation => crate::reputation::reputation(state, &req).await,
            _ => crate::buy::buy(state, &req).await,
        }
    }
}

/// A paid tool: the HTTP request it stands for, sent to the paid route, and the
/// answer in x402's MCP shape.
async fn paid_tool(
    state: &AppState,
    req: &Request,
    name: &str,
    args: Value,
    payment: Option<Value>,
) -> Result<Value, String> {
    let Some(routes) = state.paid_routes.clone() else {
        return Ok(tool_error(
            "paid tools are not offered by this deployment's MCP endpoint; buy over HTTP (POST /v1/verdicts/{tier}, GET /v1/reputation)",
        ));
    };
    let mut headers: Vec<(&str, String)> = Vec::new();
    if let Some(payment) = payment {
        if payment.as_object().is_none() {
            return Ok(tool_error(
                "_meta[\"x402/payment\"] must be the x402 PaymentPayload object",
            ));
        }
        let encoded = off_thread(move || umpire_pay::encode_header(&payment.to_serde())).await;
        // As large as the same payment may be over HTTP (API Gateway's header limit).
        if encoded.len() > MAX_PAYMENT_BYTES {
            return Ok(tool_error(&format!(
                "_meta[\"x402/payment\"] is {} bytes encoded; a payment is at most {MAX_PAYMENT_BYTES}",
                encoded.len()
            )));
        }
        headers.push((umpire_pay::HEADER_PAYMENT_SIGNATURE, encoded));
    }
    if let Some(key) = args.get("idempotency_key") {
        let Some(key) = key.as_str() else {
            return Err("argument \"idempotency_key\" must be a string".into());
        };
        // Checked here as the header is: a key the route could not read is refused,
        // never dropped on the way (a purchase without its key could be paid twice).
        if let Err(e) = crate::idempotency::IdempotencyKey::parse(key) {
            return Ok(route_result(respond::error(&e)));
        }
        headers.push(("idempotency-key", key.to_owned()));
    }
    let (route, inner) = if name == "get_reputation" {
        let merchant = string_arg(&args, "merchant")?;
        let uri = format!(
            "/v1/reputation?merchant={}",
            umpire_core::urlenc::component(merchant)
        );
        (
            crate::Route::Reputation,
            internal(req, Method::GET, &uri, &headers, None)?,
        )
    } else {
        let tier = string_arg(&args, "tier")?;
        let tier = Tier::parse(tier).map(Tier::as_str).ok_or_else(|| {
            format!(
                "argument \"tier\" must be one of {}",
                Tier::ALL.map(Tier::as_str).join(", ")
            )
        })?;
        // The body is the arguments a purchase takes, in stable JSON: the same
        // arguments make the same bytes, so a retry is the identical request.
        let mut body = Value::object();
        for field in ["spec", "deliverable", "webhook_url", "job_ref"] {
            if let Some(v) = args.get(field) {
                body = body.with(field, v.clone());
            }
        }
        let bytes = off_thread(move || Bytes::from(body.to_canonical_vec())).await;
        headers.push(("content-type", "application/json".to_owned()));
        let uri = format!("/v1/verdicts/{tier}");
        (
            crate::Route::Buy,
            internal(req, Method::POST, &uri, &headers, Some(bytes))?,
        )
    };
    let response = routes.call(state, route, inner).await;
    Ok(off_thread(move || paid_result(response)).await)
}

/// A paid route's answer as x402's MCP transport gives it: 402 → a tool error whose
/// structured content is the `PaymentRequired` (what x402 MCP clients pay from), with
/// the refusal's settlement response when a payment was refused; success → the body,
/// with the settlement in `_meta`; any other error → the error body, as free tools
/// give it.
fn paid_result(response: Response) -> Value {
    let header_json = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| umpire_pay::decode_header::<serde_json::Value>(v).ok())
            .map(Value::from)
    };
    let settlement = header_json(umpire_pay::HEADER_PAYMENT_RESPONSE);
    let required = header_json(umpire_pay::HEADER_PAYMENT_REQUIRED);
    if response.status().as_u16() == 402
        && let Some(Value::Object(mut required)) = required
    {
        if let Some(s) = &settlement {
            required.insert(PAYMENT_RESPONSE_META_KEY.into(), s.clone());
        }
        let required = Value::Object(required);
        let ours = String::from_utf8_lossy(response.body()).into_owned();
        return Value::object()
            .with(
                "content",
                Value::Array(vec![
                    Value::object().with("type", "text").with(
                        "text",
                        String::from_utf8_lossy(&required.to_canonical_vec()).into_owned(),
                    ),
                    Value::object().with("type", "text").with("text", ours),
                ]),
            )
            .with("structuredContent", required)
            .with("isError", true);
    }
    let mut result = route_result(response);
    if let Some(s) = settlement {
        result = result.with("_meta", Value::object().with(PAYMENT_RESPONSE_META_KEY, s));
    }
    result
}

fn tool_error(message: &str) -> Value {
    Value::object()
        .with(
            "content",
            Value::Array(vec![
                Value::object().with("type", "text").with("text", message),
            ]),
        )
        .with("isError", true)
}

/// The contract's recipe, step by step, as a tool result.
fn verify_document(ours: Vec<PublicKey>, args: &Value) -> Value {
    let fail = |message: String| tool_error(&message);
    let Some(document) = args.get("document").filter(|d| d.as_object().is_some()) else {
        return fail("argument \"document\" (the signed document, an object) is required".into());
    };
    let keys = match args.get("key_document") {
        None => ours,
        Some(doc) => doc
            .get("keys")
            .and_then(Value::as_array)
            .map(|ks| {
                ks.iter()
                    .filter_map(umpire_core::signer::PublicKey::from_value)
                    .collect()
            })
            .unwrap_or_default(),
    };
    let deliverable = match args.get("deliverable") {
        None => None,
        Some(d) => match parse_deliverable(d, "deliverable") {
            Ok(d) => Some(d),
            Err(problems) => {
                return fail(format!(
                    "deliverable: {}",
                    problems.first().map_or("invalid", |p| p.message.as_str())
                ));
            }
        },
    };
    let steps = umpire_core::document::verify(document, &keys, deliverable.as_ref());
    let verified = steps.iter().all(|s| s.ok) && steps.iter().any(|s| s.name == "ed25519");
    let summary = steps
        .iter()
        .map(|s| {
            format!(
                "{} {}: {}",
                if s.ok { "ok" } else { "FAIL" },
                s.name,
                s.detail
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let structured = Value::object().with("verified", verified).with(
        "steps",
        Value::Array(
            steps
                .iter()
                .map(|s| {
                    Value::object()
                        .with("name", s.name)
                        .with("ok", s.ok)
                        .with("detail", s.detail.as_str())
                })
                .collect(),
        ),
    );
    Value::object()
        .with(
            "content",
            Value::Array(vec![
                Value::object().with("type", "text").with("text", summary),
            ]),
        )
        .with("structuredContent", structured)
        .with("isError", false)
}
