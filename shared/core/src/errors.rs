//! The contract's error codes, each with its HTTP status: the one table every
//! handler, client and document draws from.

/// Where error codes are explained; every error body links here with `#<code>`.
pub const ERRORS_DOCS: &str = "https://umpire.vimabrosta.com/docs/errors";

macro_rules! error_codes {
    ($($variant:ident => ($code:literal, $status:literal)),+ $(,)?) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $($variant),+ }

        impl ErrorCode {
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code),+ }
            }

            pub fn status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status),+ }
            }

            pub fn parse(code: &str) -> Option<ErrorCode> {
                match code { $($code => Some(ErrorCode::$variant),)+ _ => None }
            }
        }
    };
}

error_codes! {
    InvalidRequest => ("invalid_request", 422),
    InvalidSpec => ("invalid_spec", 422),
    UnknownTier => ("unknown_tier", 404),
    InvalidWebhook => ("invalid_webhook", 422),
    BlockedHost => ("blocked_host", 422),
    BlockedPort => ("blocked_port", 422),
    InvalidScheme => ("invalid_scheme", 422),
    CredentialsInUrl => ("credentials_in_url", 422),
    DnsFailure => ("dns_failure", 422),
    BadSignature => ("bad_signature", 401),
    PaymentNotFound => ("payment_not_found", 422),
    PayerMismatch => ("payer_mismatch", 422),
    ReceiptTooOld => ("receipt_too_old", 422),
    SelfFeedback => ("self_feedback", 422),
    DuplicateFeedback => ("duplicate_feedback", 409),
    AmountTooSmall => ("amount_too_small", 422),
    ReceiptsOff => ("receipts_off", 503),
    ChainUnavailable => ("chain_unavailable", 502),
    InvalidIdempotencyKey => ("invalid_idempotency_key", 422),
    IdempotencyKeyReuse => ("idempotency_key_reuse", 409),
    InFlight => ("in_flight", 409),
    // Sent only for a purchase naming an ERC-8004 validation request already answered;
    // elsewhere each case it could name has a more precise answer (docs/api.md, 409).
    AlreadyCreated => ("already_created", 409),
    RateLimited => ("rate_limited", 429),
    NotFound => ("not_found", 404),
    InvalidJson => ("invalid_json", 400),
    Internal => ("internal", 500),
    // Beyond the contract's list: HTTP semantics a client library relies on.
    MethodNotAllowed => ("method_not_allowed", 405),
    PaymentRequired => ("payment_required", 402),
    PayloadTooLarge => ("payload_too_large", 413),
    // Something this deployment does not serve (yet, or as configured); nothing charged.
    Unavailable => ("unavailable", 503),
}

impl ErrorCode {
    pub fn docs_url(self) -> String {
        format!("{ERRORS_DOCS}#{}", self.as_str())
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal meant for the caller: the body of every non-2xx answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub hint: String,
    /// Extra members of the `error` object (for example `problems` for invalid_spec).
    pub details: Vec<(String, crate::json::Value)>,
    /// When to try again, in seconds: the `Retry-After` header and the body's
    /// `retry_after_seconds`.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>, hint: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            hint: hint.into(),
            details: Vec::new(),
            retry_after: None,
        }
    }

    /// The client may retry after `seconds` (Retry-After).
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn with_detail(mut self, key: &str, value: impl Into<crate::json::Value>) -> Self {
        self.details.push((key.to_owned(), value.into()));
        self
    }

    /// `{"error":{"code","message","hint","docs", ...details}}`
    pub fn to_body(&self) -> crate::json::Value {
        use crate::json::Value;
        let mut inner = Value::object()
            .with("code", self.code.as_str())
            .with("message", self.message.as_str())
            .with("hint", self.hint.as_str())
            .with("docs", self.code.docs_url());
        for (k, v) in &self.details {
            inner.insert(k.as_str(), v.clone());
        }
        if let Some(seconds) = self.retry_after {
            inner.insert("retry_after_seconds", seconds);
        }
        Value::object().with("error", inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.as_str()));
            assert_eq!(ErrorCode::parse(c.as_str()), Some(*c));
        }
    }

    #[test]
    fn statuses_match_the_contract() {
        assert_eq!(ErrorCode::InvalidJson.status(), 400);
        assert_eq!(ErrorCode::UnknownTier.status(), 404);
        assert_eq!(ErrorCode::BadSignature.status(), 401);
        assert_eq!(ErrorCode::ChainUnavailable.status(), 502);
        assert_eq!(ErrorCode::ReceiptsOff.status(), 503);
        assert_eq!(ErrorCode::RateLimited.status(), 429);
        assert_eq!(ErrorCode::Internal.status(), 500);
    }
}
