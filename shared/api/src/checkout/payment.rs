//! The x402 answer to an unpaid (or wrongly paid) request: HTTP 402 with
//! `PAYMENT-REQUIRED` = standard base64 of the v2 `PaymentRequired` JSON (the v2 clients
//! read only the header), the same object in the body under `requirements`, and
//! `Cache-Control: no-store`. For x402 v1 clients, which read only the body, the body
//! also carries `x402Version: 1` and the v1 `accepts` (v2 clients read the header first).

use umpire_core::{ApiError, ErrorCode, Value};
use umpire_x402::{HEADER_PAYMENT_REQUIRED, PaymentRequired, PaymentRequirementsV1, encode_header};

use crate::plumbing::respond;
use crate::plumbing::state::Response;

/// The 402 response for `required`, with a human-readable error object too.
pub fn payment_required_response(
    required: &PaymentRequired,
    v1_accepts: &[PaymentRequirementsV1],
    message: &str,
    hint: &str,
) -> Response {
    let as_value =
        |v: serde_json::Result<serde_json::Value>| v.map(Value::from).unwrap_or(Value::Null);
    let body = ApiError::new(ErrorCode::PaymentRequired, message, hint)
        .to_body()
        .with("requirements", as_value(serde_json::to_value(required)))
        .with("x402Version", 1u64)
        .with("accepts", as_value(serde_json::to_value(v1_accepts)));
    let mut r = respond::json(402, &body);
    if let Ok(v) = http::HeaderValue::from_str(&encode_header(required)) {
        r.headers_mut().insert(HEADER_PAYMENT_REQUIRED, v);
    }
    respond::cache(r, "no-store")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plumbing::config::Config;
    use umpire_core::product::Tier;
    use umpire_x402::ResourceInfo;

    fn config() -> Config {
        let rails = umpire_pay::config::rails_from(|k| match k {
            "UMPIRE_EVM_PAY_TO" => Some("0x1111111111111111111111111111111111111111".into()),
            "UMPIRE_SOLANA_PAY_TO" => Some("9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM".into()),
            "UMPIRE_SOLANA_FEE_PAYER" => {
                Some("2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4".into())
            }
            "UMPIRE_SOL_NATIVE" => Some("on".into()),
            _ => None,
        })
        .expect("rails");
        Config {
            rails,
            ..Config::default()
        }
    }

    #[test]
    fn the_402_carries_the_requirements_in_header_and_body() {
        let c = config();
        let resource = ResourceInfo {
            url: "https://umpire.vimabrosta.com/v1/verdicts/probe".into(),
            description: "Umpire probe verdict".into(),
            mime_type: "application/json".into(),
            ..ResourceInfo::default()
        };
        let price = Tier::Probe.price();
        let offer = umpire_x402::rails::Offer::fixed(price, "/v1/verdicts/probe");
        let req = c
            .rails
            .payment_required(&offer, resource.clone(), "payment required");
        let v1 = c.rails.accepts_v1(&offer, &resource);
        let r = payment_required_response(
            &req,
            &v1,
            "this verdict costs $2.00",
            "Pay with x402 and retry the identical request.",
        );
        assert_eq!(r.status(), 402);
        assert_eq!(
            r.headers()
                .get("cache-control")
                .and_then(|v| v.to_str().ok()),
            Some("no-store")
        );
        let header = r
            .headers()
            .get("payment-required")
            .and_then(|v| v.to_str().ok())
            .expect("PAYMENT-REQUIRED header");
        let from_header: serde_json::Value =
            umpire_x402::decode_header(header).expect("base64 JSON");
        let body = umpire_core::json::parse(r.body()).expect("body JSON");
        assert_eq!(
            body.get("requirements"),
            Some(&Value::from(from_header.clone()))
        );
        assert_eq!(from_header["x402Version"], 2);
        assert_eq!(
            from_header["resource"]["url"],
            "https://umpire.vimabrosta.com/v1/verdicts/probe"
        );
        // Base USDC first; no SOL option without a fresh rate.
        let accepts = from_header["accepts"].as_array().expect("accepts");
        assert_eq!(accepts.len(), 2);
        assert_eq!(accepts[0]["network"], "eip155:8453");
        assert_eq!(accepts[0]["amount"], "2000000");
        assert_eq!(accepts[0]["extra"]["name"], "USD Coin");
        assert_eq!(
            body.get("error")
                .and_then(|e| e.get("code"))
                .and_then(Value::as_str),
            Some("payment_required")
        );
        // v1 clients read the body: x402Version 1 and v1 accepts with plain network names.
        assert_eq!(body.get("x402Version"), Some(&Value::from(1u64)));
        let v1_accepts = body
            .get("accepts")
            .and_then(Value::as_array)
            .expect("v1 accepts");
        assert_eq!(
            v1_accepts[0].get("network").and_then(Value::as_str),
            Some("base")
        );
        assert_eq!(
            v1_accepts[0]
                .get("maxAmountRequired")
                .and_then(Value::as_str),
            Some("2000000")
        );
    }
}
