//! x402, the HTTP 402 payment protocol, as Umpire speaks it: the `PaymentRequired`
//! answer (v2 header `PAYMENT-REQUIRED`, mirrored in the body; v1 body), the client's
//! payment (`PAYMENT-SIGNATURE` v2, `X-PAYMENT` v1), the `SettlementResponse`
//! (`PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`), matching a payment against our own
//! requirements (never the client's copy), the offline checks of each scheme's payload
//! (EIP-3009 signatures, Solana transactions), signed offers and sign-in-with-x, and the
//! payer's side (signing a payment). No network: settlement is `umpire-pay`.

pub mod batch;
pub mod client;
pub mod codec;
pub mod evm;
pub mod offers;
pub mod rails;
pub mod reason;
pub mod siwx;
pub mod svm;
pub mod types;

pub use codec::{CodecError, decode_header, encode_header};
pub use rails::{Rail, RailPricing, Rails};
pub use reason::{FailureKind, FailureReason, PaymentFailure};
pub use types::{
    EvmAuthorization, EvmExactPayload, PaymentPayload, PaymentRequired, PaymentRequirements,
    PaymentRequirementsV1, ResourceInfo, SettlementResponse, X402Version,
};

/// The v2 response header carrying `PaymentRequired`.
pub const HEADER_PAYMENT_REQUIRED: &str = "payment-required";
/// The v2 request header carrying `PaymentPayload`.
pub const HEADER_PAYMENT_SIGNATURE: &str = "payment-signature";
/// The v1 request header.
pub const HEADER_X_PAYMENT: &str = "x-payment";
/// The v2 and v1 response headers carrying `SettlementResponse`.
pub const HEADER_PAYMENT_RESPONSE: &str = "payment-response";
pub const HEADER_X_PAYMENT_RESPONSE: &str = "x-payment-response";
