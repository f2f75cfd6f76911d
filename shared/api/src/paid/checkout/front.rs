//! The paywall's front door: what a request's Idempotency-Key decides before its payment
//! is looked at.

use crate::paid::idempotency::{self, Decision};
use crate::plumbing::respond;
use crate::{AppState, Response};

use super::asking::Asking;

/// What the request's key says before its payment is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyState {
    /// No key, or a key free for this request.
    Fresh,
    /// The key completed this very request: the request is a replay.
    Completed,
}

/// `Err` with the refusal when the key was used for another request (`409
/// idempotency_key_reuse`) or its request is still running (`409 in_flight`): nothing
/// about the original is revealed. A completed identical request is not replayed
/// here: its answer goes only to a payment that proves the wallet now (see
/// `claim::claim`), never to a header that merely names it.
pub(super) async fn check_key(state: &AppState, asking: &Asking<'_>) -> Result<KeyState, Response> {
    let Some(scoped) = &asking.scoped else {
        return Ok(KeyState::Fresh);
    };
    match idempotency::check(state, scoped, &asking.request_hash).await {
        Ok(Decision::Replay(_)) => Ok(KeyState::Completed),
        Ok(Decision::Proceed) => Ok(KeyState::Fresh),
        Err(e) => Err(respond::error(&e)),
    }
}
