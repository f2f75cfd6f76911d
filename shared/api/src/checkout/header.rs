//! The payment's header, the idempotency key a request carries, and the header its
//! settlement is answered in.

use http::HeaderValue;
use umpire_core::{ApiError, ErrorCode, Value};
use umpire_x402::{
    FailureReason, HEADER_PAYMENT_RESPONSE, HEADER_PAYMENT_SIGNATURE, HEADER_X_PAYMENT,
    HEADER_X_PAYMENT_RESPONSE, PaymentFailure, PaymentPayload, SettlementResponse, decode_header,
    encode_header,
};

use crate::checkout::discovery;
use crate::checkout::idempotency::IdempotencyKey;
use crate::plumbing::state::{Request, Response};

/// Which header a settlement response goes back in: the one matching the header the
/// payment came in (`PAYMENT-SIGNATURE` → `PAYMENT-RESPONSE`, `X-PAYMENT` →
/// `X-PAYMENT-RESPONSE`), whatever x402 version the payload speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerHeader {
    PaymentResponse,
    XPaymentResponse,
}

impl AnswerHeader {
    pub(super) fn name(self) -> &'static str {
        match self {
            AnswerHeader::PaymentResponse => HEADER_PAYMENT_RESPONSE,
            AnswerHeader::XPaymentResponse => HEADER_X_PAYMENT_RESPONSE,
        }
    }

    /// The header [`AnswerHeader::name`] names (any case); `PAYMENT-RESPONSE` else.
    pub(super) fn from_name(name: &str) -> AnswerHeader {
        if name.eq_ignore_ascii_case(HEADER_X_PAYMENT_RESPONSE) {
            AnswerHeader::XPaymentResponse
        } else {
            AnswerHeader::PaymentResponse
        }
    }

    /// The header a request's payment (if any) is answered in.
    pub(super) fn of(req: &Request) -> AnswerHeader {
        if req.headers().get(HEADER_PAYMENT_SIGNATURE).is_none()
            && req.headers().get(HEADER_X_PAYMENT).is_some()
        {
            AnswerHeader::XPaymentResponse
        } else {
            AnswerHeader::PaymentResponse
        }
    }
}

/// A payment header as the client sent it.
pub(super) struct PaymentHeader {
    pub(super) raw: serde_json::Value,
    pub(super) payment: PaymentPayload,
}

/// Whether `req` carries a payment that reads as one (x402 JSON, either header, either
/// version): what lets a paid request past the unpaid bucket and into a purchase slot.
/// Any header value is not enough.
pub fn carries_readable_payment(req: &Request) -> bool {
    matches!(read_payment_header(req), Ok(Some(_)))
}

/// The payment of a request: `PAYMENT-SIGNATURE` (x402 v2's name) or `X-PAYMENT` (v1's,
/// which many clients send whatever they speak), each carrying a v1 or a v2 payload,
/// told apart by its `x402Version`.
pub(super) fn read_payment_header(req: &Request) -> Result<Option<PaymentHeader>, PaymentFailure> {
    let (name, value) = match (
        req.headers().get(HEADER_PAYMENT_SIGNATURE),
        req.headers().get(HEADER_X_PAYMENT),
    ) {
        (Some(v), _) => (HEADER_PAYMENT_SIGNATURE, v),
        (None, Some(v)) => (HEADER_X_PAYMENT, v),
        (None, None) => return Ok(None),
    };
    let malformed = |why: String| {
        PaymentFailure::invalid(
            FailureReason::InvalidPayload,
            format!("the {name} header is not base64 x402 JSON: {why}"),
        )
    };
    let text = value
        .to_str()
        .map_err(|_| malformed("it is not ASCII".into()))?;
    let raw: serde_json::Value = decode_header(text).map_err(|e| malformed(e.to_string()))?;
    let payment = PaymentPayload::from_json(raw.clone()).map_err(malformed)?;
    Ok(Some(PaymentHeader { raw, payment }))
}

/// The request's idempotency key: the `Idempotency-Key` header, or the id a v2 payment
/// carries in its `payment-identifier` extension (reference clients using the
/// extension send no header), honored alike. Both present must agree. Neither is a
/// secret (a key may be derived from public data, an id travels inside the payment):
/// a replay is answered only to a payment that proves the wallet (see `claim`).
pub(super) fn request_key(
    req: &Request,
    header: Option<&PaymentHeader>,
) -> Result<Option<IdempotencyKey>, ApiError> {
    let from_header = IdempotencyKey::from_headers(req.headers())?;
    let from_payment = match header {
        Some(h) => discovery::payment_id(&h.raw).map_err(|e| {
            ApiError::new(
                ErrorCode::InvalidIdempotencyKey,
                e.0,
                "Use a random id such as pay_7d5d747be160e280504c099d984bcfe0 (the extension's generatePaymentId makes one), and reuse it only to retry the identical request.",
            )
            .with_detail("reason", "payment_identifier")
        })?,
        None => None,
    };
    match (from_header, from_payment) {
        (Some(key), Some(id)) if key.as_str() != id => Err(ApiError::new(
            ErrorCode::InvalidIdempotencyKey,
            "the Idempotency-Key header and the payment's payment-identifier id differ; each names the purchase for replays, so they must agree",
            "Send one of them, or the same value in both. Nothing was charged.",
        )
        .with_detail("reason", "payment_identifier_mismatch")),
        (Some(key), _) => Ok(Some(key)),
        (None, Some(id)) => IdempotencyKey::parse(&id).map(Some),
        (None, None) => Ok(None),
    }
}

/// `r` with its one-time `secret` withheld (null), for an answer given to a requester
/// who has not proven to hold the paying wallet now.
pub(super) fn withhold_secret(r: Response) -> Response {
    let (parts, body) = r.into_parts();
    let body = match umpire_core::json::parse(&body) {
        Ok(v) if v.get("secret").is_some() => {
            bytes::Bytes::from(v.with("secret", Value::Null).to_canonical_vec())
        }
        _ => body,
    };
    let mut r = http::Response::from_parts(parts, body);
    r.headers_mut().remove(http::header::CONTENT_LENGTH);
    r
}

pub fn settlement_header(
    answer_in: AnswerHeader,
    s: &SettlementResponse,
) -> (&'static str, Option<HeaderValue>) {
    (
        answer_in.name(),
        HeaderValue::from_str(&encode_header(s)).ok(),
    )
}
