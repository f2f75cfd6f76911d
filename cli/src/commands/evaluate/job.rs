//! Step 1 of an evaluation: read the job and find it ours to judge, submitted and not
//! expired, or report it as already decided.

use std::process::ExitCode;

use alloy::primitives::{B256, U256};
use umpire_core::json::Value;
use umpire_core::product::Tier;
use umpire_escrow::{EscrowError, Job, JobRef, Status};

use super::output::print_decided;
use super::{Evaluator, Step, chain_step, no};

impl Evaluator<'_> {
    /// One job, steps 1 to 5 of the module's list.
    pub(super) async fn judge(
        &self,
        job_ref: &JobRef,
        tier: Tier,
        spec: Value,
        deliverable: Value,
    ) -> Step {
        // 1. The job.
        let job: Job = match self.escrow.job(job_ref.job_id).await {
            Ok(j) => j,
            Err(EscrowError::UnknownJob(id)) => {
                return no(
                    format!("job {id} does not exist on {}", job_ref.contract),
                    "check the job id and the contract address",
                );
            }
            Err(e) => return chain_step(e),
        };
        if job.evaluator != self.me {
            return no(
                format!(
                    "this wallet ({}) is not the job's evaluator ({})",
                    self.me, job.evaluator
                ),
                "run with the evaluator's key (--evaluator-key-file or UMPIRE_EVALUATOR_KEY)",
            );
        }
        let commitment = match self.submitted(job_ref, &job).await {
            Ok(c) => c,
            Err(step) => return step,
        };
        self.judge_submitted(job_ref, commitment, tier, spec, deliverable)
            .await
    }

    /// The rest of step 1 for a job already read and found ours: it must be Submitted
    /// and unexpired. Its commitment (the provider's `JobSubmitted`), read once.
    pub(super) async fn submitted(&self, job_ref: &JobRef, job: &Job) -> Result<B256, Step> {
        if job.status.is_terminal() {
            return Err(self.report_decided(job_ref, job.status, false).await);
        }
        if job.status != Status::Submitted {
            return Err(no(
                format!(
                    "job {job_ref} is {}: the provider has not submitted its work yet",
                    job.status.name()
                ),
                "run again after the provider's submit (JobSubmitted); nothing was paid",
            ));
        }
        // Past its expiry a job's refund can be claimed by anyone, unless the escrow
        // gives a submitted job an evaluation grace period (the reference one does).
        let now = self.escrow.chain_time().await.map_err(chain_step)?;
        let refundable_at = job.refundable_at(self.escrow.grace());
        if U256::from(now) >= refundable_at {
            let grace = if refundable_at > job.expired_at {
                format!(" and its evaluation grace period ended at {refundable_at}")
            } else {
                String::new()
            };
            return Err(no(
                format!(
                    "job {job_ref} expired at {}{grace} (chain time {now}): anyone may claim its refund, so no verdict is bought for it",
                    job.expired_at
                ),
                "nothing was paid; the client can call claimRefund",
            ));
        }
        match self.escrow.submission(job_ref.job_id).await {
            Ok(Some(s)) => Ok(s.deliverable),
            Ok(None) => Err(no(
                format!("job {job_ref} is Submitted but no JobSubmitted event was found"),
                "look further back with --lookback-blocks N; nothing was paid",
            )),
            Err(e) => Err(chain_step(e)),
        }
    }

    /// Reports a job that needs no evaluation (any more), with how it was decided.
    pub(super) async fn report_decided(&self, job: &JobRef, status: Status, paid: bool) -> Step {
        let outcome = match self.escrow.outcome(job.job_id).await {
            Ok(o) => o,
            Err(e) => return chain_step(e),
        };
        eprintln!(
            "job {job} is already {}: {}",
            status.name(),
            if paid {
                "decided meanwhile; the verdict bought is kept, nothing sent"
            } else {
                "nothing to evaluate, nothing paid, nothing sent"
            }
        );
        print_decided(job, status, outcome.as_ref());
        // An expired job was refunded without an evaluation: not a success of ours.
        Step::Done(if status == Status::Expired {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        })
    }
}
