//! Paid tools over MCP: x402 payments in `_meta` (the x402 MCP transport), routed to the
//! same paid handlers as HTTP; and offline document verification.

use bytes::Bytes;
use http::Method;

use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_core::signer::PublicKey;
use umpire_core::spec::parse_deliverable;

use crate::plumbing::cpu::off_thread;
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, PaidRoutes, Request, Response};

use super::{internal, route_result, string_arg};

/// x402's MCP transport: where a tool call carries its payment, and where the result
/// carries the settlement.
pub const PAYMENT_META_KEY: &str = "x402/payment";

pub const PAYMENT_RESPONSE_META_KEY: &str = "x402/payment-response";

/// The largest payment a paid tool takes (base64 of its JSON). Reference clients echo
/// the 402's extensions (the Bazaar's schema, one signed offer per rail) into every
/// payment, so with three rails a payment is ~9 KB. Over MCP it travels in the body and
/// reaches the paid route in process or by Invoke, where API Gateway's header limit does
/// not apply: room for more rails, still a bound on what a hostile call makes us decode.
pub(super) const MAX_PAYMENT_BYTES: usize = 16 * 1024;

/// The paid routes in this very process (`umpire serve`).
pub struct InProcess;

#[async_trait::async_trait]
impl PaidRoutes for InProcess {
    async fn call(
        &self,
        state: &AppState,
        route: crate::plumbing::routes::Route,
        req: Request,
    ) -> Response {
        match route {
            crate::plumbing::routes::Route::Reputation => {
                crate::products::reputation::reputation(state, &req).await
            }
            _ => crate::products::verdict::buy::buy(state, &req).await,
        }
    }
}

/// A paid tool: the HTTP request it stands for, sent to the paid route, and the
/// answer in x402's MCP shape.
pub(super) async fn paid_tool(
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
        let encoded = off_thread(move || umpire_x402::encode_header(&payment.to_serde())).await;
        if encoded.len() > MAX_PAYMENT_BYTES {
            return Ok(tool_error(&format!(
                "_meta[\"x402/payment\"] is {} bytes encoded; a payment is at most {MAX_PAYMENT_BYTES}",
                encoded.len()
            )));
        }
        headers.push((umpire_x402::HEADER_PAYMENT_SIGNATURE, encoded));
    }
    if let Some(key) = args.get("idempotency_key") {
        let Some(key) = key.as_str() else {
            return Err("argument \"idempotency_key\" must be a string".into());
        };
        // Checked here as the header is: a key the route could not read is refused,
        // never dropped on the way (a purchase without its key could be paid twice).
        if let Err(e) = crate::checkout::idempotency::IdempotencyKey::parse(key) {
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
            crate::plumbing::routes::Route::Reputation,
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
            crate::plumbing::routes::Route::Buy,
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
pub(super) fn paid_result(response: Response) -> Value {
    let header_json = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| umpire_x402::decode_header::<serde_json::Value>(v).ok())
            .map(Value::from)
    };
    let settlement = header_json(umpire_x402::HEADER_PAYMENT_RESPONSE);
    let required = header_json(umpire_x402::HEADER_PAYMENT_REQUIRED);
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

pub(super) fn tool_error(message: &str) -> Value {
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
pub(super) fn verify_document(ours: Vec<PublicKey>, args: &Value) -> Value {
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
