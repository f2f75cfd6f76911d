//! Why a verdict read is refused: shared by the secret and the wallet-proof paths.

use umpire_core::{ApiError, ErrorCode};
use umpire_store::VerdictRecord;

use crate::plumbing::state::AppState;

/// Verdict ids as minted: `vrd_` and 32 lowercase hex digits.
pub(crate) fn is_verdict_id(id: &str) -> bool {
    id.strip_prefix("vrd_")
        .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

pub(crate) fn not_found() -> ApiError {
    // The same answer for an unknown id, an expired one and a wrong secret, so ids
    // cannot be probed.
    ApiError::new(
        ErrorCode::NotFound,
        "no verdict with that id and secret",
        "Check the id and send the one-time secret from the purchase response as Authorization: Bearer <secret>. Documents are kept 90 days.",
    )
}

/// The stored verdict `id`, whoever asks; a malformed, unknown or expired id is the
/// one not-found answer. The caller checks the credential against it.
pub(crate) async fn stored_verdict(state: &AppState, id: &str) -> Result<VerdictRecord, ApiError> {
    if !is_verdict_id(id) {
        return Err(not_found());
    }
    let now = state.config.clock.now();
    state
        .store
        .get_verdict(id, now)
        .await
        .map_err(crate::plumbing::state::internal)?
        .ok_or_else(not_found)
}

/// Why a status read is refused, and whether the answer offers a wallet proof instead.
pub(crate) enum Denied {
    Plainly(ApiError),
    /// No usable credential: the answer carries a sign-in-with-x challenge.
    Challenging(ApiError),
}

impl From<ApiError> for Denied {
    fn from(e: ApiError) -> Self {
        Denied::Plainly(e)
    }
}
