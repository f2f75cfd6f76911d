//! The paywall's front door: a completed identical request is answered with its original
//! response, before any payment is asked for or taken.

use crate::paid::idempotency::{self, Decision};
use crate::plumbing::{limits, respond};
use crate::{AppState, ClientIp, Response};

use super::asking::Asking;

/// `Err` with the original answer when the request's key completed this very request.
/// A key from the header replays here; one from the payment only once the payment
/// verified (the claim), or sealed (see `RequestKey`).
pub(super) async fn replay(state: &AppState, asking: &Asking<'_>) -> Result<(), Response> {
    let Some(scoped) = asking.scoped.as_ref().filter(|_| asking.reveal) else {
        return Ok(());
    };
    match idempotency::check(state, scoped, &asking.request_hash).await {
        Ok(Decision::Proceed) => Ok(()),
        Ok(Decision::Replay(r)) => {
            limits::enforce(state, "replay", ClientIp::of(asking.req))
                .await
                .map_err(|e| respond::error(&e))?;
            Err(r)
        }
        Err(e) => Err(respond::error(&e)),
    }
}
