//! The limits of the platform the service is deployed on (AWS), in one place. The code
//! sizes what it sends and stores from these, and the tests hold the template and the
//! local emulators to them (functions/tests/template.rs).

/// API Gateway (HTTP API) ends an integration after this long and answers 503.
pub const API_GATEWAY_TIMEOUT_SECS: u64 = 30;

/// API Gateway (HTTP API) refuses a request whose request line and header values
/// together exceed this: a payment header echoing the 402's extensions must fit, with
/// room for the rest.
pub const API_GATEWAY_REQUEST_HEADERS_BYTES: usize = 10_240;

/// A synchronous Lambda invocation carries at most this much, each way
/// ("Request must be smaller than 6291456 bytes for the InvokeFunction operation").
pub const LAMBDA_SYNC_PAYLOAD_BYTES: usize = 6_291_456;

/// An SQS message body and its attributes together.
pub const SQS_MESSAGE_BYTES: usize = 262_144;

/// The longest delay SQS gives a message (`DelaySeconds`).
pub const SQS_MAX_DELAY_SECS: u32 = 900;

/// A DynamoDB item, attribute names and values together ("400 KB").
pub const DYNAMODB_ITEM_BYTES: usize = 409_600;

/// The longest a function may run (its `Timeout`).
pub const LAMBDA_MAX_TIMEOUT_SECS: u64 = 900;
