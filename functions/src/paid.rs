//! The MCP function's paid tools in AWS: each purchase goes to the paid route's own
//! function (verdicts, reputation), invoked synchronously with the API Gateway event
//! that route gets over HTTP, the caller's address included. So MCP holds no payment,
//! signing or checker permissions of its own, and there is one paid path: the route's.

use aws_sdk_lambda::primitives::Blob;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use umpire_api::plumbing::respond;
use umpire_api::{AppState, ClientIp, Request, Response, Route};
use umpire_core::{ApiError, ErrorCode};

/// The verdicts function's name or ARN, for the MCP function's `buy_verdict`.
pub const VERDICTS_FUNCTION_ENV: &str = "UMPIRE_VERDICTS_FUNCTION";
/// The reputation function's name or ARN, for `get_reputation`.
pub const REPUTATION_FUNCTION_ENV: &str = "UMPIRE_REPUTATION_FUNCTION";

/// Invokes the paid routes' functions.
pub struct LambdaRoutes {
    client: aws_sdk_lambda::Client,
    verdicts: String,
    reputation: String,
}

impl LambdaRoutes {
    /// Both functions named in the environment, or None (paid tools not offered).
    pub fn from_env(aws: &umpire_aws::SdkConfig) -> Option<LambdaRoutes> {
        let named = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        Some(LambdaRoutes {
            client: aws_sdk_lambda::Client::new(&umpire_aws::for_service(
                aws,
                umpire_aws::Service::Lambda,
            )),
            verdicts: named(VERDICTS_FUNCTION_ENV)?,
            reputation: named(REPUTATION_FUNCTION_ENV)?,
        })
    }
}

/// The API Gateway (HTTP API, payload 2.0) event of `req`, as the route's function
/// gets it from API Gateway.
pub fn http_event(req: &Request) -> Vec<u8> {
    let mut headers = Map::new();
    for (k, v) in req.headers() {
        if let Ok(v) = v.to_str() {
            headers.insert(k.as_str().to_ascii_lowercase(), Value::from(v));
        }
    }
    let path = req.uri().path();
    let query = req.uri().query().unwrap_or_default();
    // The caller as API Gateway saw it (absent: the route's "unknown" bucket).
    let source_ip = ClientIp::of(req).map(|ClientIp(ip)| ip.to_string());
    let now = umpire_host::Clock::system().now_ms();
    let route_key = format!("{} {path}", req.method());
    let event = json!({
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "-",
            "apiId": "mcp",
            "domainName": "mcp",
            "domainPrefix": "mcp",
            "http": {
                "method": req.method().as_str(),
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": "umpire-mcp"
            },
            "requestId": umpire_host::random_id("mcp"),
            "routeKey": route_key,
            "stage": "$default",
            "time": "",
            "timeEpoch": now
        },
        "body": base64::engine::general_purpose::STANDARD.encode(req.body()),
        "isBase64Encoded": true
    });
    serde_json::to_vec(&event).unwrap_or_default()
}

/// The route function's answer (an API Gateway response) as an HTTP response.
pub fn http_response(payload: &[u8]) -> Option<Response> {
    let answer: Value = serde_json::from_slice(payload).ok()?;
    let status = answer
        .get("statusCode")
        .and_then(Value::as_u64)
        .unwrap_or(200);
    let text = answer
        .get("body")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let body = if answer.get("isBase64Encoded") == Some(&Value::Bool(true)) {
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .ok()?
    } else {
        text.as_bytes().to_vec()
    };
    let mut builder = http::Response::builder().status(u16::try_from(status).ok()?);
    if let Some(Value::Object(h)) = answer.get("headers") {
        for (k, v) in h {
            if let Some(v) = v.as_str() {
                builder = builder.header(k.as_str(), v);
            }
        }
    }
    // lambda_http may fill both maps with the same headers: the second only if the
    // first is absent.
    let single = matches!(answer.get("headers"), Some(Value::Object(h)) if !h.is_empty());
    if let (false, Some(Value::Object(h))) = (single, answer.get("multiValueHeaders")) {
        for (k, vs) in h {
            for v in vs
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                builder = builder.header(k.as_str(), v);
            }
        }
    }
    builder.body(Bytes::from(body)).ok()
}

fn unreachable_route(why: String) -> Response {
    tracing::error!(error = why, "a paid route could not be invoked");
    respond::error(
        &ApiError::new(
            ErrorCode::Unavailable,
            "the purchase could not be reached right now",
            "Retry the identical call (same arguments and payment) in a few seconds: if it went through you get its answer, and you are never charged twice.",
        )
        .with_retry_after(2),
    )
}

#[async_trait::async_trait]
impl umpire_api::plumbing::state::PaidRoutes for LambdaRoutes {
    async fn call(&self, _state: &AppState, route: Route, req: Request) -> Response {
        let function = match route {
            Route::Reputation => &self.reputation,
            _ => &self.verdicts,
        };
        let out = self
            .client
            .invoke()
            .function_name(function)
            .payload(Blob::new(http_event(&req)))
            .send()
            .await;
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                return unreachable_route(format!(
                    "{}",
                    aws_sdk_lambda::error::DisplayErrorContext(e)
                ));
            }
        };
        if let Some(error) = out.function_error() {
            return unreachable_route(format!("{function} failed: {error}"));
        }
        let payload = out.payload().map(|p| p.as_ref()).unwrap_or_default();
        http_response(payload)
            .unwrap_or_else(|| unreachable_route(format!("{function} answered no HTTP response")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_carries_the_request_and_an_answer_comes_back() {
        let mut req = http::Request::builder()
            .method("GET")
            .uri("/v1/reputation?merchant=0xab%2Bc")
            .header("PAYMENT-SIGNATURE", "eyJ4IjoxfQ==")
            .body(Bytes::from_static(b""))
            .expect("request");
        req.extensions_mut()
            .insert(ClientIp(std::net::IpAddr::from([203, 0, 113, 7])));
        let event: Value = serde_json::from_slice(&http_event(&req)).expect("event");
        assert_eq!(event["rawPath"], "/v1/reputation");
        assert_eq!(event["rawQueryString"], "merchant=0xab%2Bc");
        assert_eq!(event["headers"]["payment-signature"], "eyJ4IjoxfQ==");
        assert_eq!(event["requestContext"]["http"]["sourceIp"], "203.0.113.7");
        // lambda_http reads it as the route would get it from API Gateway: the query
        // from rawQueryString, decoded.
        let parsed: lambda_http::request::LambdaRequest =
            serde_json::from_value(event).expect("an API Gateway v2 event");
        assert!(matches!(
            parsed,
            lambda_http::request::LambdaRequest::ApiGatewayV2(_)
        ));
        use lambda_http::RequestExt as _;
        let req = lambda_http::Request::from(parsed);
        assert_eq!(
            req.query_string_parameters_ref()
                .and_then(|q| q.first("merchant")),
            Some("0xab+c")
        );
        assert_eq!(req.uri().path(), "/v1/reputation");

        let answer = json!({"statusCode": 402, "headers": {"payment-required": "e30=", "content-type": "application/json"}, "body": "{\"a\":1}", "isBase64Encoded": false});
        let r = http_response(answer.to_string().as_bytes()).expect("response");
        assert_eq!(r.status(), 402);
        assert_eq!(r.headers()["payment-required"], "e30=");
        assert_eq!(r.body().as_ref(), b"{\"a\":1}");
    }
}
