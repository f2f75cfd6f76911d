//! A job as the evaluator sees it, whatever the contract's layout: its status, its
//! terms, the provider's submission, the evaluator's outcome, and the decision to send.

use alloy::primitives::{Address, B256, U256};

/// A job's state, as ERC-8183 numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Open,
    Funded,
    Submitted,
    Completed,
    Rejected,
    Expired,
}

impl Status {
    pub(crate) fn from_u8(n: u8) -> Option<Status> {
        Some(match n {
            0 => Status::Open,
            1 => Status::Funded,
            2 => Status::Submitted,
            3 => Status::Completed,
            4 => Status::Rejected,
            5 => Status::Expired,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Open => "Open",
            Status::Funded => "Funded",
            Status::Submitted => "Submitted",
            Status::Completed => "Completed",
            Status::Rejected => "Rejected",
            Status::Expired => "Expired",
        }
    }

    /// Completed, Rejected or Expired: nothing can change any more.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Rejected | Status::Expired)
    }
}

/// A job as `getJob` returns it, whatever the layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub client: Address,
    pub provider: Address,
    pub evaluator: Address,
    pub description: String,
    pub budget: U256,
    pub expired_at: U256,
    pub status: Status,
    /// The job's own token (the reference layout); `None` where the contract has one.
    pub payment_token: Option<Address>,
    /// When the provider submitted (the reference layout; 0 before it did).
    pub submitted_at: Option<U256>,
}

impl Job {
    /// From when anyone may claim the job's refund: its expiry, or for a submitted job
    /// on an escrow with an evaluation grace period, the end of that period if later.
    pub fn refundable_at(&self, grace_period: U256) -> U256 {
        match self.submitted_at {
            Some(at) if self.status == Status::Submitted && !grace_period.is_zero() => {
                self.expired_at.max(at.saturating_add(grace_period))
            }
            _ => self.expired_at,
        }
    }
}

/// The provider's `submit`: its commitment to the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Submission {
    pub deliverable: B256,
    pub provider: Address,
    pub transaction: Option<B256>,
}

/// The evaluator's `complete` or `reject`, with the attestation it gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Completed or Rejected.
    pub status: Status,
    pub reason: B256,
    /// Who called it (the evaluator; the client when an Open job is rejected).
    pub by: Address,
    pub transaction: Option<B256>,
}

/// What the evaluator decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Complete,
    Reject,
}

impl Decision {
    pub fn name(self) -> &'static str {
        match self {
            Decision::Complete => "complete",
            Decision::Reject => "reject",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refund_waits_for_the_grace_period_of_a_submitted_job() {
        let job = |status, submitted_at: Option<u64>| Job {
            client: Address::ZERO,
            provider: Address::ZERO,
            evaluator: Address::ZERO,
            description: String::new(),
            budget: U256::ZERO,
            expired_at: U256::from(1_000),
            status,
            payment_token: None,
            submitted_at: submitted_at.map(U256::from),
        };
        let hour = U256::from(3_600);
        assert_eq!(
            job(Status::Submitted, Some(900)).refundable_at(hour),
            U256::from(4_500)
        );
        // Submitted long before its expiry: the expiry is later.
        assert_eq!(
            job(Status::Submitted, Some(10)).refundable_at(U256::from(60)),
            U256::from(1_000)
        );
        // No grace period, no submission time (legacy), or not submitted: the expiry.
        assert_eq!(
            job(Status::Submitted, Some(900)).refundable_at(U256::ZERO),
            U256::from(1_000)
        );
        assert_eq!(
            job(Status::Submitted, None).refundable_at(hour),
            U256::from(1_000)
        );
        assert_eq!(
            job(Status::Funded, Some(0)).refundable_at(hour),
            U256::from(1_000)
        );
    }
}
