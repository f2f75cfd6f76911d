//! Step 5 of an evaluation: `complete` on pass or `reject` on fail, sent to the escrow
//! with the document's `payload_sha256` as its reason, unless the job was decided
//! meanwhile.

use std::process::ExitCode;

use umpire_core::json::Value;
use umpire_escrow::{EscrowError, JobRef, Status, bytes32_hex};

use super::judge::Ruling;
use super::output::print_decision;
use super::{Evaluator, Step, chain_step, no};

impl Evaluator<'_> {
    /// Sends the ruling on the job and prints it with its document.
    pub(super) async fn decide(&self, job_ref: &JobRef, ruling: Ruling, doc: Value) -> Step {
        let Ruling {
            verdict,
            decision,
            reason,
        } = ruling;
        // A verdict takes time to buy: someone (a timeout, the client) may have decided
        // the job meanwhile, and a second decision would only be refused.
        match self.escrow.job(job_ref.job_id).await {
            Ok(j) if j.status != Status::Submitted => {
                return self.report_decided(job_ref, j.status, true).await;
            }
            Ok(_) => {}
            Err(e) => return chain_step(e),
        }
        let tx = match self.escrow.decide(job_ref.job_id, decision, reason).await {
            Ok(tx) => tx,
            Err(EscrowError::Refused { what, message }) => {
                return no(
                    format!("the escrow refused {what}: {message}"),
                    "run again: a job decided meanwhile is reported as such",
                );
            }
            Err(e) => return chain_step(e),
        };
        eprintln!("{} sent: {}", decision.name(), bytes32_hex(&tx));
        print_decision(job_ref, decision, &tx, &reason, &verdict, doc);
        Step::Done(ExitCode::SUCCESS)
    }
}
