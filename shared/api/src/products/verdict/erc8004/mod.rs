//! Umpire as an ERC-8004 validator (docs/erc8004.md).
//!
//! A purchase whose `job_ref` names a validation request
//! (`erc8004:eip155:<chain>:<registry>:<requestHash>`) is checked before payment: the
//! request exists on the registry this deployment answers on, names our validator, has
//! no answer of ours yet (a provisional one included: another purchase is answering
//! it), and its request file (at `requestURI`, which only the
//! request's event holds) hashes to `requestHash` and carries the spec and deliverable
//! the purchase is judged on (or their hashes). After delivery a queued job answers it:
//! `validationResponse(requestHash, 100 | 0, responseURI, payload_sha256, umpire:<tier>)`
//! from the validator's key, with a provisional answer after a sworn verdict's pass 1.
//! Posting never holds up the paid answer; it retries on its own.

mod answer;
mod registration;
mod request;

pub use answer::{Answer, Paying, queue_answer, run_post};
pub use registration::registration;
pub use request::check_before_payment;

use umpire_core::json::Value;
use umpire_escrow::validation::VALIDATION_REF_PREFIX;

use crate::products::verdict::purchase::Purchase;

/// Attempts at posting one answer before it is given up on (and alarmed): with the
/// webhook's backoff (30 s doubling, 15 min at most), about an hour and a half.
pub const POST_MAX_ATTEMPTS: u32 = 10;

/// Attempts in a row whose transaction was mined and reverted before an answer is given
/// up on: each such attempt is paid for in gas, and a second one in a row says the
/// cause (a contract refusing what its simulation allowed, an RPC whose estimates are
/// always short) is not passing.
pub const MAX_MINED_REVERTS: u32 = 2;
/// The largest request file read (the fetcher's cap applies to http(s) too).
pub const MAX_REQUEST_FILE_BYTES: usize = 256 * 1024;

pub use crate::plumbing::config::{
    DEFAULT_LOW_GAS_WEI, KEY_HEX_ENV, ValidatorConfig, key_from_env,
};

/// The validation request a purchase's `job_ref` names, if it names one.
pub fn named_request(purchase: &Purchase) -> Option<&str> {
    purchase
        .job_ref
        .as_ref()
        .and_then(Value::as_str)
        .filter(|r| r.starts_with(VALIDATION_REF_PREFIX))
}
