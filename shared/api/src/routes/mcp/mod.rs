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

mod paid;
mod tools;

pub use paid::{InProcess, PAYMENT_META_KEY, PAYMENT_RESPONSE_META_KEY};

use paid::{paid_tool, verify_document};
use tools::{TOOLS, tools_list};

use bytes::Bytes;
use http::{HeaderValue, Method, StatusCode, header};
use umpire_core::json::{Value, parse};

use crate::plumbing::cpu::off_thread;
use crate::plumbing::limits;
use crate::plumbing::protocol::MCP_PROTOCOL_VERSIONS;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, ClientIp, Keys, Request, Response};

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;

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
        && !MCP_PROTOCOL_VERSIONS
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
                    MCP_PROTOCOL_VERSIONS.join(", ")
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
        .and_then(|a| MCP_PROTOCOL_VERSIONS.iter().find(|p| **p == a))
        .copied()
        .unwrap_or(MCP_PROTOCOL_VERSIONS[0]);
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
    free_tool(state, req, &name, args).await
}

/// A free tool: the request it stands for, answered by the route's own handler, or
/// (`verify_document`) done here.
async fn free_tool(
    state: &AppState,
    req: &Request,
    name: &str,
    args: Value,
) -> Result<Value, String> {
    let json = ("content-type", "application/json".to_owned());
    // Arguments that become a request body are serialized off the async threads.
    let body_of = |args: Value| off_thread(move || Bytes::from(args.to_canonical_vec()));
    let response = match name {
        "validate" => {
            let r = internal(req, Method::POST, "/v1/validate", &[json], None)?;
            crate::products::verdict::validate::validate_parsed(state, &r, args).await
        }
        "quote" => {
            let r = internal(req, Method::GET, "/v1/quote", &[], None)?;
            crate::products::quote::quote(state, &r).await
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
            crate::products::verdict::lookup::status(state, &r).await
        }
        "find" => {
            let uri = format!(
                "/v1/find?spec_hash={}&webhook={}",
                umpire_core::urlenc::component(string_arg(&args, "spec_hash")?),
                umpire_core::urlenc::component(string_arg(&args, "webhook")?)
            );
            let r = internal(req, Method::GET, &uri, &[], None)?;
            crate::products::verdict::lookup::find(state, &r).await
        }
        "submit_feedback" => {
            let body = body_of(args).await;
            let r = internal(req, Method::POST, "/v1/feedback", &[json], Some(body))?;
            crate::products::reputation::feedback::submit(state, &r).await
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
