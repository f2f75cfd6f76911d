//! `umpire evaluate --watch`: follow a contract's `JobSubmitted` events and evaluate
//! every job whose evaluator is our wallet, from the brief in its description.
//!
//! Anyone can create a job naming our wallet as its evaluator, so the watcher pays only
//! for the jobs of clients it is told to serve (`--client`, or `--any-client` said out
//! loud), at no tier dearer than `--tier`, and gives up on a job after a bounded number
//! of failed attempts.

use std::collections::{HashMap, HashSet};
use std::process::ExitCode;
use std::time::Duration;

use alloy::primitives::{Address, U256};
use umpire_core::product::Tier;
use umpire_escrow::{Job, Status};

use super::brief::{brief, brief_tier, inputs};
use super::{Evaluator, Step, chain_step, skip};
use crate::commands::Local;
use crate::commands::guard::Room;

/// The exit status of a watch stopped because its spending budget is spent.
pub const BUDGET_SPENT: u8 = 3;

/// How often a job whose evaluation failed on the way is tried before it is given up.
const MAX_ATTEMPTS: u32 = 10;
/// Blocks read again at every poll: a lagging RPC or a short reorg must not lose a
/// `JobSubmitted` for good (jobs seen before are skipped).
const RESCAN_BLOCKS: u64 = 32;

pub struct WatchArgs {
    /// eip155:CHAIN:CONTRACT
    pub contract: String,
    pub from_block: Option<u64>,
    pub poll_seconds: u64,
    /// Handle what is there, then stop.
    pub once: bool,
    /// The clients whose jobs are evaluated; empty with `any_client` means everyone's.
    pub clients: Vec<Address>,
    pub any_client: bool,
}

impl Evaluator<'_> {
    /// One job seen submitted: evaluated if it is ours, for a client we serve, with a
    /// brief we can follow and a budget that can pay for it; otherwise skipped.
    async fn watched(
        &self,
        id: U256,
        ceiling: Tier,
        w: &WatchArgs,
        fetcher: &umpire_fetch::Fetcher,
    ) -> Step {
        let job_ref = self.on.job(id);
        let job = match self.escrow.job(id).await {
            Ok(j) => j,
            Err(e) => return chain_step(e),
        };
        if let Err(why) = self.ours_to_evaluate(&job, w) {
            return skip(&job_ref, why);
        }
        let brief = match brief(&job.description) {
            Ok(b) => b,
            Err(e) => return skip(&job_ref, format!("{e} (see docs/erc8183.md)")),
        };
        let tier = match brief_tier(&brief, ceiling) {
            Ok(t) => t,
            Err(why) => return skip(&job_ref, why),
        };
        // Nothing is fetched for a job the budget cannot pay for.
        if let Err(step) = self.affordable(tier) {
            return step;
        }
        let commitment = match self.submitted(&job_ref, &job).await {
            Ok(c) => c,
            Err(step) => return step,
        };
        let (spec, deliverable) = match inputs(&job_ref, brief, commitment, fetcher).await {
            Ok(inputs) => inputs,
            Err(step) => return step,
        };
        self.judge_submitted(&job_ref, commitment, tier, spec, deliverable)
            .await
    }

    /// Whether a job is one this watch evaluates: `Err` says why not. Anyone may name
    /// us as a job's evaluator, and every evaluation is paid for.
    fn ours_to_evaluate(&self, job: &Job, w: &WatchArgs) -> Result<(), String> {
        if job.evaluator != self.me {
            return Err(format!("its evaluator is {}, not us", job.evaluator));
        }
        if job.status != Status::Submitted {
            return Err(format!("it is {}", job.status.name()));
        }
        if !w.any_client && !w.clients.contains(&job.client) {
            return Err(format!(
                "its client {} is not one we evaluate for (--client)",
                job.client
            ));
        }
        Ok(())
    }

    /// Whether the spending budget has room for a verdict of `tier`: a watch that has
    /// spent its budget stops, one that has spent this hour's waits.
    fn affordable(&self, tier: Tier) -> Result<(), Step> {
        let path = format!("/v1/verdicts/{}", tier.as_str());
        match self.payer.room(&path, u128::from(tier.price().usdc_units)) {
            Room::Spent => Err(Step::Stop(format!(
                "a {} verdict does not fit in what is left of the spending budget (--budget-total)",
                tier.as_str()
            ))),
            Room::HourSpent => Err(Step::Wait(format!(
                "a {} verdict does not fit in this hour's budget (--budget-per-hour)",
                tier.as_str()
            ))),
            Room::Open => Ok(()),
        }
    }
}

/// The jobs a watch knows of: those still to evaluate, those settled for good, and
/// how often each has failed on the way.
#[derive(Default)]
struct Jobs {
    pending: Vec<U256>,
    done: HashSet<U256>,
    attempts: HashMap<U256, u32>,
}

impl Jobs {
    /// Counts a failed attempt at `id`. When it was the last one allowed, the job is
    /// settled, never to be tried again, and the attempts made are returned.
    fn given_up(&mut self, id: U256) -> Option<u32> {
        let n = self.attempts.entry(id).or_insert(0);
        *n += 1;
        if *n >= MAX_ATTEMPTS {
            let n = *n;
            self.done.insert(id);
            Some(n)
        } else {
            None
        }
    }
}

/// Follows the contract's `JobSubmitted` events and evaluates each job whose evaluator
/// is our wallet, from what its description names. A job whose evaluation failed on
/// the way (a fetch, the chain, the service) is tried again at the next poll, up to
/// [`MAX_ATTEMPTS`] times; one that was judged or refused is not. One line of JSON per
/// judged job on stdout.
pub(super) async fn watch(
    ev: &Evaluator<'_>,
    ceiling: Tier,
    w: &WatchArgs,
) -> Result<ExitCode, Local> {
    if w.clients.is_empty() && !w.any_client {
        return Err(Local(
            "--watch pays for every job it judges, and anyone can name us as a job's evaluator: name the clients whose jobs we evaluate (--client 0x…, repeatable), or pass --any-client".into(),
        ));
    }
    let fetcher = umpire_fetch::Fetcher::from_env().map_err(Local)?;
    let head = ev
        .escrow
        .head()
        .await
        .map_err(|e| Local(format!("escrow: {e}")))?;
    let mut from = w
        .from_block
        .unwrap_or_else(|| head.saturating_sub(ev.escrow.lookback()));
    eprintln!(
        "watching {} from block {from} for jobs whose evaluator is {}, at most {} verdicts",
        ev.on,
        ev.me,
        ceiling.as_str()
    );
    let mut jobs = Jobs::default();
    loop {
        from = poll(ev, from, &mut jobs).await;
        if let Some(code) = evaluate_pending(ev, ceiling, w, &fetcher, &mut jobs).await {
            return Ok(code);
        }
        if w.once {
            return Ok(if jobs.pending.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(2)
            });
        }
        tokio::time::sleep(Duration::from_secs(w.poll_seconds.max(1))).await;
    }
}

/// Where the poll after one that read up to `head` (from `from`) starts: the last
/// [`RESCAN_BLOCKS`] blocks again (an RPC that lagged behind the head, or served an
/// event late, loses nothing: the job list drops what it has seen), never before
/// `from`.
fn next_from(head: u64, from: u64) -> u64 {
    (head + 1).saturating_sub(RESCAN_BLOCKS).max(from)
}

/// Reads the jobs submitted since block `from` into the pending ones, and returns the
/// block the next poll reads from. A chain that does not answer now is asked again at
/// the next poll, from the same block.
async fn poll(ev: &Evaluator<'_>, from: u64, jobs: &mut Jobs) -> u64 {
    match ev.escrow.head().await {
        Ok(head) if head >= from => match ev.escrow.submitted_between(from, head).await {
            Ok(ids) => {
                for id in ids {
                    if !jobs.done.contains(&id) && !jobs.pending.contains(&id) {
                        jobs.pending.push(id);
                    }
                }
                return next_from(head, from);
            }
            Err(e) => eprintln!("reading JobSubmitted events failed: {e}; trying again"),
        },
        Ok(_) => {}
        Err(e) => eprintln!("the chain did not answer: {e}; trying again"),
    }
    from
}

/// Evaluates the pending jobs, keeping those to try again at the next poll. `Some` is
/// the exit status of a watch that must stop: its budget is spent, or the contract
/// cannot be read.
async fn evaluate_pending(
    ev: &Evaluator<'_>,
    ceiling: Tier,
    w: &WatchArgs,
    fetcher: &umpire_fetch::Fetcher,
    jobs: &mut Jobs,
) -> Option<ExitCode> {
    let mut again = Vec::new();
    let list: Vec<U256> = std::mem::take(&mut jobs.pending);
    for (i, &id) in list.iter().enumerate() {
        match ev.watched(id, ceiling, w, fetcher).await {
            Step::Done(_) => {
                jobs.done.insert(id);
            }
            Step::Stop(why) => {
                eprintln!(
                    "job {}: {why}; stopping with {} jobs unevaluated",
                    ev.on.job(id),
                    list.len() - i + again.len()
                );
                return Some(ExitCode::from(BUDGET_SPENT));
            }
            Step::Unusable(why) => {
                eprintln!(
                    "{why}; stopping: nothing was paid, and no job of {} can be read",
                    ev.on
                );
                return Some(ExitCode::from(1));
            }
            Step::Wait(why) => {
                eprintln!("job {}: {why}; it waits", ev.on.job(id));
                again.push(id);
            }
            Step::Again(why) => {
                if let Some(n) = jobs.given_up(id) {
                    eprintln!("job {}: {why}; given up after {n} attempts", ev.on.job(id));
                } else {
                    eprintln!(
                        "job {}: {why}; trying again at the next poll",
                        ev.on.job(id)
                    );
                    again.push(id);
                }
            }
        }
    }
    jobs.pending = again;
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/erc8183.md: each poll reads the last 32 blocks again (an RPC that served
    /// the head before its events loses nothing), never before where the watch began.
    /// Would catch: a watch that moves on past the head and misses a late event.
    #[test]
    fn each_poll_reads_the_last_32_blocks_again() {
        assert_eq!(RESCAN_BLOCKS, 32);
        let next = next_from(1_000, 0);
        assert_eq!(1_000 - next + 1, 32, "blocks 969..=1000 read again");
        assert_eq!(next_from(10, 5), 5, "never before the start");
        assert_eq!(next_from(0, 0), 0);
    }

    /// docs/erc8183.md: a job whose evaluation fails on the way is tried again at up
    /// to 10 polls, then given up for good. Would catch: a job retried for ever (paying
    /// for nothing each time a fetch works and the decision does not), or given up at
    /// its first hiccup.
    #[test]
    fn a_failing_job_is_given_up_at_its_tenth_attempt() {
        assert_eq!(MAX_ATTEMPTS, 10);
        let mut jobs = Jobs::default();
        let id = U256::from(7);
        for attempt in 1..10 {
            assert_eq!(jobs.given_up(id), None, "attempt {attempt}");
            assert!(!jobs.done.contains(&id));
        }
        assert_eq!(jobs.given_up(id), Some(10));
        assert!(jobs.done.contains(&id), "never tried again");
        assert_eq!(
            jobs.given_up(U256::from(8)),
            None,
            "another job counts apart"
        );
    }
}
