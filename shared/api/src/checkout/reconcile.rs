//! The reconciler: every purchase whose settlement's outcome is unknown at its
//! request's deadline is followed to its end by the service, without waiting for the
//! customer. A job on the jobs queue (SQS with its delay on AWS; the embedded store's
//! jobs table under `umpire serve`) reads the chain until the payment landed or can no
//! longer land:
//!
//! - **paid** (the authorization's transfer to us, whoever sent it; a Solana
//!   signature confirmed): the prepared answer is delivered — its verdict stored, the
//!   ledger `Settled`, the Idempotency-Keys bound to it completed with the answer, so the
//!   customer's next request (with the key, the payment, or the secret at the status
//!   link) gets it. A sworn verdict's pass 2 and an ERC-8004 answer, queued before the
//!   settlement, wait for this and then run.
//! - **unused and still valid**: it is settled now (our own broadcast resent, or the
//!   facilitator asked again, which reconciles a repeated `/settle`), so a transfer
//!   dropped from a pool still lands while its authorization lasts.
//! - **can no longer land** (canceled, spent otherwise, expired unused): voided, its
//!   keys released; nothing was taken, and the customer's next request is asked for a
//!   new payment.
//! - **unknown** (the chain cannot be read): asked again later, with a growing delay;
//!   past the last moment the payment could land, each round records `PendingOverdue`
//!   (alarmed).
//!
//! Each step is the ledger's conditional write, so the customer's own retry and any
//! number of reconciler copies decide one purchase once.

use std::time::Duration;

use umpire_core::Value;
use umpire_pay::PaymentContext;
use umpire_store::{Job, PaymentState};
use umpire_x402::{FailureKind, FailureReason, PaymentFailure, PaymentPayload, SettlementResponse};

use crate::checkout::idempotency::RequestHash;
use crate::checkout::ledger::{Hold, PaymentKey, PendingSale, Prepared, Retake};
use crate::plumbing::metrics::{self, Metric};
use crate::plumbing::state::AppState;

use super::answer::deliver;
use super::claim::end_bound_keys;
use super::header::AnswerHeader;
use super::sale::receipted;

/// The job kind on the jobs queue.
pub const JOB_RECONCILE: &str = "purchase.reconcile";

/// What one round may spend on the chain (or the facilitator): well inside the
/// worker's timeout.
const ROUND_BUDGET: Duration = Duration::from_secs(20);

/// The first look comes a couple of seconds after the deadline (a block on Base); the
/// wait doubles every second round (most pending payments land within a few blocks),
/// up to half a minute.
const FIRST_DELAY: Duration = Duration::from_secs(2);
const LONGEST_DELAY: Duration = Duration::from_secs(30);

/// How long past the last moment its payment could land a pending purchase is still
/// followed before its reconciler stops (and says so).
pub(super) const PARK_AFTER_SECS: u64 = 6 * 3600;

/// One round of following a pending purchase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileJob {
    /// The purchase's payment, as the ledger keys it.
    pub payment_key: String,
    /// 1-based.
    pub attempt: u32,
}

impl ReconcileJob {
    pub fn parse(job: &Job) -> Option<Result<ReconcileJob, String>> {
        if job.kind != JOB_RECONCILE {
            return None;
        }
        let parse = || {
            let p = umpire_core::json::parse(job.payload.as_bytes()).map_err(|e| e.to_string())?;
            Ok(ReconcileJob {
                payment_key: p
                    .get("payment_key")
                    .and_then(Value::as_str)
                    .ok_or("reconcile job lacks payment_key")?
                    .to_owned(),
                attempt: p
                    .get("attempt")
                    .and_then(Value::as_u64)
                    .and_then(|a| u32::try_from(a).ok())
                    .filter(|a| *a >= 1)
                    .ok_or("reconcile job has no valid attempt number")?,
            })
        };
        Some(parse())
    }

    pub fn to_job(&self) -> Job {
        let payload = Value::object()
            .with("payment_key", self.payment_key.as_str())
            .with("attempt", u64::from(self.attempt));
        Job {
            kind: JOB_RECONCILE.into(),
            payload: payload.to_canonical_string(),
        }
    }

    /// How long after this round the next one comes.
    fn next_delay(&self) -> Duration {
        FIRST_DELAY
            .saturating_mul(1u32 << (self.attempt / 2).min(16))
            .min(LONGEST_DELAY)
    }
}

/// Starts following the pending purchase paid with `payment`; `false` when it cannot be
/// queued (no queue, or the queue refused): the customer's retry still decides it.
pub async fn follow(state: &AppState, payment: &PaymentKey) -> bool {
    follow_after(state, payment, Duration::ZERO).await
}

/// [`follow`], its first round once `after` has passed (and a block more): a purchase
/// about to settle is followed from before its settlement starts, so a process that
/// dies settling it leaves its reconciler behind. A round that finds it decided ends.
pub async fn follow_after(state: &AppState, payment: &PaymentKey, after: Duration) -> bool {
    let job = ReconcileJob {
        payment_key: payment.as_str().to_owned(),
        attempt: 1,
    };
    let delay = (after + FIRST_DELAY).min(umpire_store::MAX_DELAY);
    enqueue(state, &job, delay).await
}

async fn enqueue(state: &AppState, job: &ReconcileJob, delay: Duration) -> bool {
    let Some(queue) = &state.queue else {
        tracing::error!("no job queue: a pending purchase is decided only by its customer's retry");
        return false;
    };
    match queue.enqueue(&job.to_job(), delay).await {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "could not queue a pending purchase's reconciler");
            false
        }
    }
}

/// What one round came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Round {
    /// Delivered, voided, or nothing left to decide (someone else did).
    Done,
    /// Still undecided: asked again later.
    Again,
}

/// Runs one round of `job`. `Err` (the store could not be read) leaves the job to the
/// queue's retry; an undecided purchase is queued again here.
pub async fn run(state: &AppState, job: &ReconcileJob) -> Result<Round, String> {
    let key = PaymentKey::from_stored(job.payment_key.clone());
    let round = round(state, &key).await?;
    if round == Round::Again {
        let next = ReconcileJob {
            attempt: job.attempt.saturating_add(1),
            ..job.clone()
        };
        if !enqueue(state, &next, job.next_delay()).await {
            return Err("could not queue the next round".into());
        }
    }
    Ok(round)
}

async fn round(state: &AppState, key: &PaymentKey) -> Result<Round, String> {
    let now = state.config.clock.now();
    let entry = state
        .store
        .get_payment(key, now)
        .await
        .map_err(|e| e.to_string())?;
    let Some(entry) = entry else {
        return Ok(Round::Done);
    };
    match &entry.state {
        // Undecidable for hours past its last moment to land (the chain unreadable all
        // along, a verdict that will not store): parked, for an operator; the
        // customer's retry can still decide it.
        PaymentState::Prepared { kept_until, .. } if *kept_until + PARK_AFTER_SECS <= now => {
            tracing::error!(payment_key = %key, "a pending purchase undecided for hours is parked: no more rounds");
            metrics::record(Metric::PendingOverdue);
            return Ok(Round::Done);
        }
        PaymentState::Prepared { .. } if entry.held_until > now => {
            // A request (the customer's retry) is deciding it right now.
            return Ok(Round::Again);
        }
        PaymentState::Prepared { .. } => {}
        // Settled or voided (decided by a retry), or claimed afresh after a void.
        _ => return Ok(Round::Done),
    }
    let hash = RequestHash::from_stored(entry.request_hash.clone());
    let (hold, prepared) = match Hold::retake(state, key, &hash).await {
        Ok(Retake::Taken(hold, prepared)) => (hold, *prepared),
        Ok(Retake::Busy) => return Ok(Round::Again),
        Ok(Retake::Nothing) => return Ok(Round::Done),
        Err(e) => return Err(e.message),
    };
    let Some(sale) = prepared.sale.clone() else {
        // Written before purchases carried what deciding them needs: only the
        // customer's retry can decide it.
        tracing::error!(payment_key = %key, "a pending purchase without its sale cannot be reconciled");
        hold.leave_unknown(state).await;
        return Ok(Round::Done);
    };
    let ctx = match context(state, &sale) {
        Ok(ctx) => ctx,
        Err(why) => {
            tracing::error!(payment_key = %key, why, "a pending purchase's payment cannot be read back");
            hold.leave_unknown(state).await;
            metrics::record(Metric::PendingOverdue);
            return Ok(Round::Done);
        }
    };
    Ok(decide(state, hold, prepared, sale, &ctx, &hash).await)
}

/// The payment as the purchase took it: its header, our requirements, and the rail
/// they name on this deployment.
fn context(state: &AppState, sale: &PendingSale) -> Result<PaymentContext, String> {
    let payment = PaymentPayload::from_json(sale.payment.clone())?;
    let req = &sale.requirements;
    let rail = state
        .config
        .rails
        .rails
        .iter()
        .find(|r| {
            r.scheme == req.scheme
                && r.network == req.network
                && r.asset
                    .to_string()
                    .eq_ignore_ascii_case(&req.asset.to_string())
        })
        .cloned()
        .ok_or_else(|| {
            format!(
                "this deployment has no rail {} on {}",
                req.asset, req.network
            )
        })?;
    Ok(PaymentContext {
        raw: sale.payment.clone(),
        payment,
        rail,
        requirements: sale.requirements.clone(),
        requirements_v1: sale.requirements_v1.clone(),
        transaction: sale.transaction.clone(),
        // Its settlement started before it went pending: a refusal now proves nothing.
        settled_before: true,
    })
}

async fn decide(
    state: &AppState,
    hold: Hold,
    prepared: Prepared,
    sale: PendingSale,
    ctx: &PaymentContext,
    hash: &RequestHash,
) -> Round {
    match settlement(state, &hold, &sale, ctx).await {
        Ok(Some(settlement)) => delivered(state, hold, prepared, sale, settlement, hash).await,
        // Unused on the chain, and its window (with the margin for a late block) has
        // passed: it can never land.
        Ok(None) if hold.lapsed(state.config.clock.now()) => {
            voided(
                state,
                hold,
                &sale,
                hash,
                FailureReason::EvmValidBefore.as_str(),
            )
            .await
        }
        // Unused, too close to its end to settle again: looked at again until it lapses.
        Ok(None) => {
            still_pending(
                state,
                hold,
                PaymentFailure::unavailable("unused, and too late to settle again"),
            )
            .await
        }
        // Canceled, or spent on something that did not pay us (the token's logs), or a
        // Solana transaction that failed on chain: the chain's own evidence. A refusal
        // of a settlement attempt is not (it may follow a transfer that landed).
        Err(f)
            if matches!(
                f.reason,
                FailureReason::EvmNonceUsed | FailureReason::SvmFailed
            ) && f.kind != FailureKind::Unavailable =>
        {
            voided(state, hold, &sale, hash, f.reason.as_str()).await
        }
        Err(f) => still_pending(state, hold, f).await,
    }
}

/// What one round finds of the pending purchase's payment: paid us (its settlement),
/// unused (`None`: settled now while it can still land with a margin), or not known.
async fn settlement(
    state: &AppState,
    hold: &Hold,
    sale: &PendingSale,
    ctx: &PaymentContext,
) -> Result<Option<SettlementResponse>, PaymentFailure> {
    let deadline = state.config.clock.deadline(ROUND_BUDGET);
    let now = state.config.clock.now();
    // Settled again only while it can still land with a margin (an authorization about
    // to expire would be refused, or revert on our gas).
    let may_settle = ctx
        .lands_by()
        .is_none_or(|t| t > now + umpire_x402::evm::VALID_BEFORE_MARGIN_SECS)
        && !hold.lapsed(now);
    let settle = || async {
        tokio::time::timeout_at(
            deadline.instant().into(),
            state.payments.settle(ctx, deadline),
        )
        .await
        .unwrap_or_else(|_| {
            Err(PaymentFailure::unavailable(
                "the settlement did not answer in the round",
            ))
        })
        .map(Some)
    };
    if let (Some(tx), true) = (&sale.transaction, sale.paid) {
        // Paid already (its verdict's store write failed): only storing is left.
        return Ok(Some(SettlementResponse {
            success: true,
            transaction: tx.clone(),
            network: Some(ctx.rail.network.clone()),
            payer: ctx.claimed_payer(),
            error_reason: None,
            extensions: Default::default(),
            extra: Default::default(),
        }));
    }
    if !state.payments.reads_chain(ctx) {
        // No chain to read here (a facilitator without its RPC): only asking it again
        // tells (the reference facilitator reconciles a repeated /settle of a payment).
        if !may_settle {
            return Err(PaymentFailure::unavailable(
                "no chain is read here to decide this payment, and it is too late to settle it again",
            ));
        }
        return settle().await;
    }
    let found = tokio::time::timeout_at(
        deadline.instant().into(),
        state.payments.find_settlement(ctx),
    )
    .await
    .unwrap_or_else(|_| {
        Err(PaymentFailure::unavailable(
            "the chain did not answer within the reconciler's round",
        ))
    })?;
    match found {
        // Unused: landed never yet. Still valid: settled now (a dropped broadcast sent
        // again, the facilitator asked again).
        None if may_settle => settle().await,
        other => Ok(other),
    }
}

async fn delivered(
    state: &AppState,
    hold: Hold,
    prepared: Prepared,
    sale: PendingSale,
    settlement: SettlementResponse,
    hash: &RequestHash,
) -> Round {
    let answer_in = AnswerHeader::from_name(&sale.answer_in);
    let settlement = receipted(state, &sale.resource_url, settlement);
    let tx = settlement.transaction.clone();
    let deadline = state.config.clock.deadline(ROUND_BUDGET);
    let (r, stored) = deliver(state, answer_in, prepared, &settlement, deadline, true).await;
    end_bound_keys(state, &sale.keys, hash, hold.key(), Some(&r)).await;
    if !stored {
        tracing::error!(transaction = %tx, "a paid pending purchase's verdict could not be stored yet; asked again");
        hold.leave_pending(state, |s| {
            s.transaction = Some(tx);
            s.paid = true;
        })
        .await;
        return Round::Again;
    }
    tracing::warn!(transaction = %tx, "a pending purchase was paid: delivered");
    metrics::record(Metric::Settlement);
    metrics::record(Metric::PendingDelivered);
    hold.settled(state, &tx, &r).await;
    Round::Done
}

async fn voided(
    state: &AppState,
    hold: Hold,
    sale: &PendingSale,
    hash: &RequestHash,
    reason: &str,
) -> Round {
    tracing::warn!(
        reason,
        "a pending purchase's payment can no longer land: voided"
    );
    metrics::record(Metric::PendingVoided);
    metrics::record(Metric::Void);
    let payment = hold.key().clone();
    hold.void(state, reason).await;
    end_bound_keys(state, &sale.keys, hash, &payment, None).await;
    Round::Done
}

async fn still_pending(state: &AppState, hold: Hold, f: PaymentFailure) -> Round {
    let now = state.config.clock.now();
    if hold.kept_until().is_some_and(|until| until <= now) {
        // Past the last moment it could land, and still not decided: the chain cannot
        // be read (or something is stuck). Someone should look.
        tracing::error!(error = %f, "a purchase is still pending past the last moment its payment could land");
        metrics::record(Metric::PendingOverdue);
    } else {
        tracing::info!(error = %f, "a pending purchase is not decided yet");
    }
    let tx = f.transaction.clone();
    hold.leave_pending(state, |s| {
        if tx.is_some() {
            s.transaction = tx;
        }
        s.followed = true;
    })
    .await;
    Round::Again
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_reads_back_and_waits_longer_each_round() {
        let job = ReconcileJob {
            payment_key: "abc".into(),
            attempt: 3,
        };
        let back = ReconcileJob::parse(&job.to_job())
            .expect("ours")
            .expect("parses");
        assert_eq!(back, job);
        let delays: Vec<u64> = (1..=7)
            .map(|attempt| {
                ReconcileJob {
                    attempt,
                    ..job.clone()
                }
                .next_delay()
                .as_secs()
            })
            .collect();
        assert_eq!(delays, [2, 4, 4, 8, 8, 16, 16]);
        assert_eq!(
            ReconcileJob {
                attempt: 40,
                ..job.clone()
            }
            .next_delay(),
            LONGEST_DELAY
        );
        assert!(
            ReconcileJob::parse(&Job {
                kind: "sworn.pass2".into(),
                payload: "{}".into()
            })
            .is_none()
        );
    }
}
