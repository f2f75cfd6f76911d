//! The purchase ledger: where each payment stands, in its own table (`payments`), one
//! entry per payment keyed by what the chain dedupes on. One authorization pays for one
//! purchase:
//!
//! ```text
//!   (none) ──claim──▶ Claimed ──prepare──▶ Prepared ──settled──▶ Settled { tx }
//!                        │                    │  ▲
//!                        └──────void──────────┤  └─retake (same request, holder gone)
//!                                             ▼
//!                                   Voided { reason }   (the payment may buy again)
//! ```
//!
//! Every step is a conditional write on the entry's phase and the request it is held
//! for, so two requests never move one payment. A claimed or prepared entry is held
//! until `held_until` (longer than any request's budget): past it the request is gone.
//! A claimed payment is then free again; a prepared one is kept for the very request
//! that prepared it for as long as its payment may still land on chain (`kept_until`:
//! the authorization's `validBefore` and a margin), so no other request can take a
//! payment whose transfer is on its way. That request's retry takes it back
//! ([`Hold::retake`]) and the chain decides: paid, and the prepared answer is given;
//! refused, and nothing is. A settlement whose outcome is unknown stays prepared with
//! its hold lapsed at once, so the retry may proceed at once.

use std::fmt;
use std::ops::Deref;
use std::time::Duration;

use umpire_core::hash::sha256_hex;
use umpire_core::{ApiError, Value};
use umpire_host::Deadline;
use umpire_pay::PaymentContext;
use umpire_store::{
    PaymentClaim, PaymentHold, PaymentMove, PaymentPhase, PaymentState, VerdictRecord,
};

use crate::checkout::idempotency::{self, COMPLETED_SECS, RequestHash};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Response};

/// How many times a settled payment's record is tried.
const SETTLED_ATTEMPTS: u32 = 3;

/// How long a voided entry is kept (it frees the payment at once; it stays only so an
/// operator and pass 2 can see what happened).
const VOIDED_SECS: u64 = 3600;

/// The ledger key of one payment (hex sha256): what the chain dedupes on, so re-encoded
/// copies of one authorization meet on one entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentKey(String);

impl PaymentKey {
    /// A key as stored elsewhere (a pass-2 job names its purchase's payment).
    pub fn from_stored(key: String) -> PaymentKey {
        PaymentKey(key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for PaymentKey {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The ledger key of `ctx`'s payment: re-encoded copies of one authorization (hex
/// case, `from` in lower case, a leading zero, an extra field) meet on one entry.
/// EIP-3009: (network, token, payer, nonce); other payments: their x402 `payload`.
pub fn payment_key(ctx: &PaymentContext) -> PaymentKey {
    match ctx.chain_identity() {
        Some(identity) => PaymentKey(sha256_hex(identity.as_bytes())),
        None => raw_payment_key(&ctx.raw),
    }
}

/// A payment keyed by its `payload` JSON (stable JSON, so key order and spacing do
/// not matter).
pub fn raw_payment_key(raw_payment: &serde_json::Value) -> PaymentKey {
    let payload = Value::from(raw_payment.get("payload").cloned().unwrap_or_default());
    let mut bytes = b"payload|".to_vec();
    bytes.extend_from_slice(&payload.to_canonical_vec());
    PaymentKey(sha256_hex(&bytes))
}

/// A purchase's answer as it will be given, written down in its payment's entry before
/// the payment settles: the response without its settlement, and the verdict to store
/// once paid.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Prepared {
    pub status: u16,
    /// The `Location` header, if any.
    pub location: Option<String>,
    /// The body without the settlement (stable JSON text).
    pub body: String,
    /// Where the settlement goes in the body, e.g. `["settlement"]`.
    pub settlement_at: Vec<String>,
    /// A verdict to store once the payment settled. The body's `secret` is null here
    /// and given on delivery once the verdict is stored (see `secret`).
    pub record: Option<VerdictRecord>,
    /// What deciding and delivering the purchase needs without its request (the
    /// reconciler's job, when the settlement's outcome is not known in time). Absent
    /// in entries written before it existed.
    #[serde(default)]
    pub sale: Option<PendingSale>,
}

/// A purchase as its reconciler sees it: the payment and our terms, how its answer is
/// given, and the Idempotency-Keys bound to it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PendingSale {
    /// The payment as its header carried it (x402 JSON).
    pub payment: serde_json::Value,
    /// Our requirements it matched (never the client's copy), v2 and v1.
    pub requirements: umpire_x402::PaymentRequirements,
    pub requirements_v1: Option<umpire_x402::PaymentRequirementsV1>,
    /// The header the settlement is answered in (`payment-response` or
    /// `x-payment-response`).
    pub answer_in: String,
    /// What was bought, as the receipt names it.
    pub resource_url: String,
    /// The Idempotency-Keys bound to the purchase while it is pending.
    #[serde(default)]
    pub keys: Vec<BoundKey>,
    /// The settlement's transaction, once one is known to be on its way.
    #[serde(default)]
    pub transaction: Option<String>,
    /// A reconciler job follows the purchase.
    #[serde(default)]
    pub followed: bool,
    /// The chain showed the payment paid us; only storing the answer is left.
    #[serde(default)]
    pub paid: bool,
}

/// An Idempotency-Key bound to a pending purchase (scoped, as stored).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BoundKey {
    pub key: String,
    /// The wallet-less copy of the customer's key, which answers a rerun that has not
    /// paid yet: released when the purchase ends, never completed (an unpaid request
    /// never gets a purchase's answer).
    #[serde(default)]
    pub unpaid: bool,
}

impl Prepared {
    pub fn new(status: u16, body: &Value, settlement_at: &[&str]) -> Prepared {
        Prepared {
            status,
            location: None,
            body: String::from_utf8_lossy(&body.to_canonical_vec()).into_owned(),
            settlement_at: settlement_at.iter().map(|s| (*s).to_owned()).collect(),
            record: None,
            sale: None,
        }
    }
}

/// Why a payment could not be claimed.
pub enum ClaimError {
    /// It settled a purchase already.
    Spent,
    /// A running request holds it, or another request's answer is prepared while the
    /// payment may still land.
    InUse,
    /// This very request prepared its answer and was interrupted (a crash, an unknown
    /// settlement): the purchase is resumed, not begun again ([`Hold::retake`]).
    Interrupted,
    Store(ApiError),
}

/// What [`Hold::retake`] found.
pub enum Retake {
    /// The prepared purchase, held for this request again.
    Taken(Hold, Box<Prepared>),
    /// A running request holds the payment for this very request.
    Busy,
    /// Nothing prepared for this request (never, or it settled, voided or lapsed).
    Nothing,
}

/// This request's hold on a payment's entry, moved through the states by its methods.
/// Dropping it without a final step leaves the entry to lapse (a crash does the same).
#[must_use = "a hold ends settled, voided or left unknown"]
pub struct Hold {
    key: PaymentKey,
    request_hash: RequestHash,
    phase: PaymentPhase,
    /// The prepared state, once there is one (kept as it is while the outcome is open).
    prepared: Option<PaymentState>,
}

fn held_until(state: &AppState, now: u64) -> u64 {
    now + u64::from(state.config.in_progress_secs)
}

impl Hold {
    /// Takes the payment for this request: won when it has no entry, or one that is
    /// voided, expired, or left by a request that is gone.
    pub async fn claim(
        state: &AppState,
        key: &PaymentKey,
        request_hash: &RequestHash,
    ) -> Result<Hold, ClaimError> {
        let now = state.config.clock.now();
        let hold = PaymentHold {
            now,
            held_until: held_until(state, now),
            expires_at: now + COMPLETED_SECS,
        };
        let claim = state
            .store
            .claim_payment(key, request_hash, &hold)
            .await
            .map_err(|e| ClaimError::Store(crate::plumbing::state::internal(e)))?;
        match claim {
            PaymentClaim::Won => Ok(Hold {
                key: key.clone(),
                request_hash: request_hash.clone(),
                phase: PaymentPhase::Claimed,
                prepared: None,
            }),
            PaymentClaim::Held(entry) => Err(match entry.state {
                PaymentState::Settled { .. } => ClaimError::Spent,
                PaymentState::Prepared { .. }
                    if entry.request_hash == request_hash.as_str() && entry.held_until <= now =>
                {
                    ClaimError::Interrupted
                }
                _ => ClaimError::InUse,
            }),
        }
    }

    /// Takes back a purchase this very request prepared and lost (its process died,
    /// or the settlement's outcome was unknown), with its answer.
    pub async fn retake(
        state: &AppState,
        key: &PaymentKey,
        request_hash: &RequestHash,
    ) -> Result<Retake, ApiError> {
        let now = state.config.clock.now();
        let Some(entry) = state
            .store
            .get_payment(key, now)
            .await
            .map_err(crate::plumbing::state::internal)?
        else {
            return Ok(Retake::Nothing);
        };
        if entry.request_hash != request_hash.as_str() {
            return Ok(Retake::Nothing);
        }
        let answer = match &entry.state {
            PaymentState::Claimed | PaymentState::Prepared { .. } if entry.held_until > now => {
                return Ok(Retake::Busy);
            }
            PaymentState::Prepared { answer, .. } => answer,
            _ => return Ok(Retake::Nothing),
        };
        let prepared: Prepared = match serde_json::from_str(answer) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "an unreadable prepared answer");
                return Ok(Retake::Nothing);
            }
        };
        let step = PaymentMove {
            from: PaymentPhase::Prepared,
            lapsed_at: Some(now),
            to: entry.state.clone(),
            held_until: held_until(state, now),
            expires_at: entry.expires_at,
        };
        let retaken = state
            .store
            .move_payment(key, request_hash, &step)
            .await
            .map_err(crate::plumbing::state::internal)?;
        if !retaken {
            // Another retry of the same request took it first.
            return Ok(Retake::Busy);
        }
        let hold = Hold {
            key: key.clone(),
            request_hash: request_hash.clone(),
            phase: PaymentPhase::Prepared,
            prepared: Some(entry.state.clone()),
        };
        Ok(Retake::Taken(hold, Box::new(prepared)))
    }

    pub fn key(&self) -> &PaymentKey {
        &self.key
    }

    async fn step(
        &mut self,
        state: &AppState,
        to: PaymentState,
        held: u64,
        expires: u64,
    ) -> Result<bool, ApiError> {
        let step = PaymentMove {
            from: self.phase,
            lapsed_at: None,
            held_until: held,
            expires_at: expires,
            to,
        };
        let moved = state
            .store
            .move_payment(&self.key, &self.request_hash, &step)
            .await
            .map_err(crate::plumbing::state::internal)?;
        if moved {
            self.phase = step.to.phase();
        }
        Ok(moved)
    }

    /// Claimed → Prepared: the answer written down before any money moves, so a crash
    /// from here on leaves what the customer's retry needs; kept for this request until
    /// `kept_until` (unix seconds), while the payment may still land.
    pub async fn prepare(
        &mut self,
        state: &AppState,
        prepared: &Prepared,
        kept_until: u64,
    ) -> Result<(), ApiError> {
        let answer = serde_json::to_string(prepared).map_err(crate::plumbing::state::internal)?;
        let now = state.config.clock.now();
        let to = PaymentState::Prepared { answer, kept_until };
        let expires = (now + COMPLETED_SECS).max(kept_until);
        if self
            .step(state, to.clone(), held_until(state, now), expires)
            .await?
        {
            self.prepared = Some(to);
            Ok(())
        } else {
            // Only a hold that outlived `held_until` can lose its entry; the budget
            // check keeps requests far shorter.
            Err(crate::plumbing::state::internal(
                "the payment's claim was taken over before settlement",
            ))
        }
    }

    /// Prepared → Settled with the answer as given (without the one-time secret), for
    /// replays by payment.
    pub async fn settled(mut self, state: &AppState, transaction: &str, response: &Response) {
        let now = state.config.clock.now();
        let to = PaymentState::Settled {
            transaction: transaction.to_owned(),
            response: idempotency::stored_answer(state, response),
        };
        // Retried: a prepared entry left behind would outlive its keep one day.
        for attempt in 1..=SETTLED_ATTEMPTS {
            match self
                .step(state, to.clone(), now, now + COMPLETED_SECS)
                .await
            {
                Ok(true) => return,
                Ok(false) => {
                    tracing::error!(transaction, "a settled payment's entry was taken over");
                    return;
                }
                // The prepared answer stays: a retry finds the payment spent and recovers it.
                Err(e) => {
                    tracing::error!(error = %e.message, transaction, attempt, "could not record a settled payment");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
    }

    /// Claimed or Prepared → Voided: nothing was taken, the payment may buy again.
    pub async fn void(mut self, state: &AppState, reason: &str) {
        let now = state.config.clock.now();
        let to = PaymentState::Voided {
            reason: reason.to_owned(),
        };
        if let Err(e) = self.step(state, to, now, now + VOIDED_SECS).await {
            // Left to lapse at `held_until`.
            tracing::error!(error = %e.message, "could not void a payment's entry");
        }
    }

    /// Until when the prepared payment may still land (unix seconds).
    pub fn kept_until(&self) -> Option<u64> {
        match &self.prepared {
            Some(PaymentState::Prepared { kept_until, .. }) => Some(*kept_until),
            _ => None,
        }
    }

    /// Whether the prepared payment can no longer land: its keep (the authorization's
    /// `validBefore` and a margin) has passed.
    pub fn lapsed(&self, now: u64) -> bool {
        matches!(&self.prepared, Some(PaymentState::Prepared { kept_until, .. }) if *kept_until <= now)
    }

    /// The prepared answer this hold carries, as written down.
    pub fn prepared(&self) -> Option<Prepared> {
        match &self.prepared {
            Some(PaymentState::Prepared { answer, .. }) => serde_json::from_str(answer).ok(),
            _ => None,
        }
    }

    /// The settlement's outcome is unknown: like [`Hold::leave_unknown`], with what the
    /// purchase's reconciler needs updated by `update` (the transaction on its way,
    /// the keys bound, whether a job follows it).
    pub async fn leave_pending(mut self, state: &AppState, update: impl FnOnce(&mut PendingSale)) {
        if let Some(PaymentState::Prepared { answer, kept_until }) = &self.prepared
            && let Ok(mut prepared) = serde_json::from_str::<Prepared>(answer)
            && let Some(sale) = prepared.sale.as_mut()
        {
            update(sale);
            if let Ok(answer) = serde_json::to_string(&prepared) {
                self.prepared = Some(PaymentState::Prepared {
                    answer,
                    kept_until: *kept_until,
                });
            }
        }
        self.leave_unknown(state).await;
    }

    /// The settlement's outcome is unknown: the answer stays prepared with its hold
    /// lapsed, so the identical retry takes it back at once ([`Hold::retake`]) and the
    /// chain decides.
    pub async fn leave_unknown(mut self, state: &AppState) {
        let Some(to) = self.prepared.clone() else {
            return self.void(state, "settlement_not_started").await;
        };
        let now = state.config.clock.now();
        let kept = match &to {
            PaymentState::Prepared { kept_until, .. } => *kept_until,
            _ => 0,
        };
        let expires = (now + COMPLETED_SECS).max(kept);
        if let Err(e) = self.step(state, to, now, expires).await {
            tracing::warn!(error = %e.message, "could not lapse a payment's hold; it lapses later");
        }
    }
}

/// How long a resend waits for the purchase its payment is already paying for: well
/// inside API Gateway's 30 s, longer than a purchase normally runs.
const AWAIT_RUNNING_PURCHASE: Duration = Duration::from_secs(20);
/// The first pause between reads of the running purchase's entry, doubling to the
/// longest: a purchase is usually done within the first few, and a long one costs the
/// store a read a second per waiting request, not ten.
const AWAIT_POLL: Duration = Duration::from_millis(100);
const AWAIT_POLL_MAX: Duration = Duration::from_secs(1);

pub enum Running {
    /// That purchase's answer (or `in_flight` when it outlasted the wait).
    Answered(Response),
    /// It ended without buying this request (voided, released, or lapsed).
    Gone,
}

/// The purchase that `key`'s payment bought for this very request, waited for while it
/// runs: a client that resends its payment (a lost answer, a dropped connection) gets
/// the purchase, not a `409` it has to retry by hand. The replay withholds the one-time
/// secret (a payment is public once settled). `Gone` when there is none (never claimed,
/// voided, lapsed, or held for another request).
pub async fn await_purchase(
    state: &AppState,
    key: &PaymentKey,
    request_hash: &RequestHash,
    deadline: Deadline,
    in_use: impl Fn() -> ApiError,
) -> Running {
    // Never past this request's own deadline (less a moment to answer in).
    let wait = AWAIT_RUNNING_PURCHASE.min(deadline.remaining().saturating_sub(AWAIT_POLL * 5));
    let started = tokio::time::Instant::now();
    let mut pause = AWAIT_POLL;
    loop {
        let now = state.config.clock.now();
        match state.store.get_payment(key, now).await {
            Ok(Some(entry)) if entry.request_hash == request_hash.as_str() => match &entry.state {
                PaymentState::Settled { response, .. } => {
                    return Running::Answered(idempotency::replay_without_secret(response));
                }
                PaymentState::Claimed | PaymentState::Prepared { .. } if entry.held_until > now => {
                }
                _ => return Running::Gone,
            },
            Ok(_) => return Running::Gone,
            Err(e) => {
                return Running::Answered(respond::error(&crate::plumbing::state::internal(e)));
            }
        }
        let left = wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Running::Answered(respond::error(&in_use()));
        }
        tokio::time::sleep(pause.min(left)).await;
        pause = (pause * 2).min(AWAIT_POLL_MAX);
    }
}

/// Whether the purchase that minted `verdict_id` with the payment under `key` went
/// through, as pass 2 of a sworn verdict needs to know before finishing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PurchaseOutcome {
    /// Settled with this verdict.
    Paid,
    /// Still running: its request settles the question within its hold.
    Unresolved,
    /// Pending: its settlement's outcome was not known in time, and its reconciler
    /// follows it until the chain decides (however long that takes).
    Pending,
    /// Voided, or the payment bought another verdict: this one was never sold.
    NotSold,
}

fn verdict_id_in(body: &str) -> Option<String> {
    umpire_core::json::parse(body.as_bytes())
        .ok()?
        .get("verdict_id")?
        .as_str()
        .map(str::to_owned)
}

pub async fn purchase_outcome(
    state: &AppState,
    key: &PaymentKey,
    verdict_id: &str,
) -> Result<PurchaseOutcome, ApiError> {
    let now = state.config.clock.now();
    let entry = state
        .store
        .get_payment(key, now)
        .await
        .map_err(crate::plumbing::state::internal)?;
    let ours = |body: &str| verdict_id_in(body).as_deref() == Some(verdict_id);
    Ok(match entry.map(|e| (e.state, e.held_until)) {
        Some((PaymentState::Settled { response, .. }, _)) if ours(&response.body) => {
            PurchaseOutcome::Paid
        }
        Some((PaymentState::Prepared { answer, .. }, _))
            if serde_json::from_str::<Prepared>(&answer).is_ok_and(|p| ours(&p.body)) =>
        {
            PurchaseOutcome::Pending
        }
        // Someone is working on the payment: whether it sells this verdict is not known yet.
        Some((PaymentState::Claimed, until)) if until > now => PurchaseOutcome::Unresolved,
        _ => PurchaseOutcome::NotSold,
    })
}
