//! [`Escrow`]: one ERC-8183 contract on one chain, as the evaluator reads it (the job,
//! the provider's submission, the outcome) and, with its key, decides a job.

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::rpc::types::{Filter, Log};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEvent};

use crate::abi::{IAgenticCommerce, Layout, ReferenceEscrow};
use crate::contract::{Contract, DEFAULT_LOOKBACK_BLOCKS, LOG_CHUNK_BLOCKS, decode, rpc};
use crate::error::EscrowError;
use crate::job::{Decision, Job, Outcome, Status, Submission};
use crate::job_ref::ContractRef;

/// One ERC-8183 contract on one chain, read (and, with an evaluator key, written).
pub struct Escrow {
    contract: Contract,
    lookback_blocks: u64,
    /// The contract's `getJob` layout and grace period, found by the first job read.
    layout: std::sync::OnceLock<(Layout, U256)>,
}

impl Escrow {
    /// Connects to `rpc_url` and checks that it serves the contract's chain.
    pub async fn connect(
        rpc_url: &str,
        on: &ContractRef,
        evaluator: Option<PrivateKeySigner>,
    ) -> Result<Escrow, EscrowError> {
        Ok(Escrow {
            contract: Contract::connect(rpc_url, on, evaluator).await?,
            lookback_blocks: DEFAULT_LOOKBACK_BLOCKS,
            layout: std::sync::OnceLock::new(),
        })
    }

    /// Looks for events this many blocks back (default [`DEFAULT_LOOKBACK_BLOCKS`]).
    pub fn with_lookback(mut self, blocks: u64) -> Escrow {
        self.lookback_blocks = blocks.max(1);
        self
    }

    /// The evaluator's address, when connected with its key.
    pub fn evaluator(&self) -> Option<Address> {
        self.contract.sender()
    }

    /// The job, read with the contract's layout (found by the first read: see
    /// [`Layout::read`]).
    pub async fn job(&self, id: U256) -> Result<Job, EscrowError> {
        const WHAT: &str = "getJob";
        // Every layout's getJob has the same selector: one call, read by each layout.
        let input = ReferenceEscrow::getJobCall { jobId: id }.abi_encode();
        let answer = match self.contract.call_raw(WHAT, input, None).await? {
            // Nothing at all: a node behind the block that created the contract (a
            // load-balanced RPC can be) answers so; the contract itself never does.
            Ok(out) if out.is_empty() => {
                return Err(rpc(WHAT)("an empty answer; the node may be behind".into()));
            }
            Ok(out) => out,
            // A revert: no such job (the earlier layout's contracts revert for one).
            Err(_) => return Err(EscrowError::UnknownJob(id)),
        };
        let j = match self.layout.get() {
            Some((layout, _)) => layout.read(&answer),
            None => {
                let found = [Layout::Reference, Layout::Legacy]
                    .into_iter()
                    .find_map(|l| l.read(&answer).map(|j| (l, j)));
                match found {
                    Some((layout, j)) => {
                        let grace = self.grace_period(layout).await?;
                        let _ = self.layout.set((layout, grace));
                        Some(j)
                    }
                    None => None,
                }
            }
        }
        .ok_or(EscrowError::Unreadable(self.contract.address()))?;
        // A job that does not exist answers zeroed in the reference layout.
        if j.evaluator == Address::ZERO {
            return Err(EscrowError::UnknownJob(id));
        }
        Ok(Job {
            client: j.client,
            provider: j.provider,
            evaluator: j.evaluator,
            description: j.description,
            budget: j.budget,
            expired_at: j.expired_at,
            status: Status::from_u8(j.status).ok_or_else(|| {
                EscrowError::Config(format!(
                    "the contract reports status {}, which ERC-8183 does not define",
                    j.status
                ))
            })?,
            payment_token: j.payment_token,
            submitted_at: j.submitted_at,
        })
    }

    /// The contract's layout, once a job was read.
    pub fn layout(&self) -> Option<Layout> {
        self.layout.get().map(|(l, _)| *l)
    }

    /// The evaluation grace period (0 if the contract has none), once a job was read.
    pub fn grace(&self) -> U256 {
        self.layout.get().map_or(U256::ZERO, |(_, g)| *g)
    }

    /// A reference-layout contract's `EVALUATION_GRACE_PERIOD`, or 0 where it has none
    /// (the ERC text does not require one).
    async fn grace_period(&self, layout: Layout) -> Result<U256, EscrowError> {
        if layout != Layout::Reference {
            return Ok(U256::ZERO);
        }
        Ok(self
            .contract
            .call(
                "EVALUATION_GRACE_PERIOD",
                &ReferenceEscrow::EVALUATION_GRACE_PERIODCall {},
                None,
            )
            .await?
            .unwrap_or(U256::ZERO))
    }

    /// The latest block's timestamp (a job expires by the chain's clock).
    pub async fn chain_time(&self) -> Result<u64, EscrowError> {
        self.contract.chain_time().await
    }

    /// The job's latest log of any of `events`, looking back in chunks.
    async fn latest_log(&self, events: &[B256], id: U256) -> Result<Option<Log>, EscrowError> {
        let filter = Filter::new().event_signature(events.to_vec()).topic1(id);
        Ok(self
            .contract
            .logs_back(filter, self.lookback_blocks, true)
            .await?
            .pop())
    }

    /// The latest block number.
    pub async fn head(&self) -> Result<u64, EscrowError> {
        self.contract.head().await
    }

    /// The ids of jobs submitted in blocks `from..=to`, in the order they were.
    pub async fn submitted_between(&self, from: u64, to: u64) -> Result<Vec<U256>, EscrowError> {
        let mut ids = Vec::new();
        let mut start = from;
        while start <= to {
            let end = start.saturating_add(LOG_CHUNK_BLOCKS - 1).min(to);
            let filter = Filter::new()
                .event_signature(IAgenticCommerce::JobSubmitted::SIGNATURE_HASH)
                .from_block(start)
                .to_block(end);
            for log in self.contract.logs(filter).await? {
                let e = IAgenticCommerce::JobSubmitted::decode_log(&log.inner)
                    .map_err(|e| rpc("JobSubmitted")(e.to_string()))?;
                ids.push(e.jobId);
            }
            start = end + 1;
        }
        Ok(ids)
    }

    /// Where `--watch` starts by default: far enough back to find jobs submitted while
    /// no watcher ran.
    pub fn lookback(&self) -> u64 {
        self.lookback_blocks
    }

    /// The provider's commitment (`JobSubmitted`), if it has submitted.
    pub async fn submission(&self, id: U256) -> Result<Option<Submission>, EscrowError> {
        use IAgenticCommerce::JobSubmitted;
        let Some(log) = self.latest_log(&[JobSubmitted::SIGNATURE_HASH], id).await? else {
            return Ok(None);
        };
        let e = decode::<JobSubmitted>(&log)?;
        Ok(Some(Submission {
            deliverable: e.deliverable,
            provider: e.provider,
            transaction: log.transaction_hash,
        }))
    }

    /// How the job was decided (`JobCompleted` or `JobRejected`), if it was: one scan
    /// for both, since a job is decided once.
    pub async fn outcome(&self, id: U256) -> Result<Option<Outcome>, EscrowError> {
        use IAgenticCommerce::{JobCompleted, JobRejected};
        let events = [JobCompleted::SIGNATURE_HASH, JobRejected::SIGNATURE_HASH];
        let Some(log) = self.latest_log(&events, id).await? else {
            return Ok(None);
        };
        let transaction = log.transaction_hash;
        Ok(Some(
            if log.topic0() == Some(&JobCompleted::SIGNATURE_HASH) {
                let e = decode::<JobCompleted>(&log)?;
                Outcome {
                    status: Status::Completed,
                    reason: e.reason,
                    by: e.evaluator,
                    transaction,
                }
            } else {
                let e = decode::<JobRejected>(&log)?;
                Outcome {
                    status: Status::Rejected,
                    reason: e.reason,
                    by: e.rejector,
                    transaction,
                }
            },
        ))
    }

    /// Sends `complete` or `reject` with `reason` from the evaluator's key, after a
    /// simulation (so a refusal is reported by the chain, not paid for in gas), and
    /// waits for it to be mined successfully.
    pub async fn decide(
        &self,
        id: U256,
        decision: Decision,
        reason: B256,
    ) -> Result<B256, EscrowError> {
        let input = match decision {
            Decision::Complete => IAgenticCommerce::completeCall {
                jobId: id,
                reason,
                optParams: Bytes::new(),
            }
            .abi_encode(),
            Decision::Reject => IAgenticCommerce::rejectCall {
                jobId: id,
                reason,
                optParams: Bytes::new(),
            }
            .abi_encode(),
        };
        self.contract.send(decision.name(), input).await
    }
}
