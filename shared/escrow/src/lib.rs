//! ERC-8183 (Agentic Commerce) job escrow, as an Umpire evaluator sees it:
//!
//! - [`JobRef`]: which job, on which chain and contract, in the one spelling a purchase's
//!   `job_ref` carries (`erc8183:eip155:<chain id>:<contract>:<job id>`), so the signed
//!   verdict names the job it judged.
//! - [`Escrow`]: the job, the provider's `submit` commitment and the evaluator's outcome,
//!   read from the chain (`getJob` and the `JobSubmitted`, `JobCompleted` and
//!   `JobRejected` events the ERC defines). The ERC does not fix `getJob`'s answer, so
//!   deployments differ: the layouts known to be deployed ([`Layout`]) are told apart
//!   once per contract, by which one its answer is the exact encoding of.
//! - [`Escrow::decide`]: `complete` or `reject`, sent with the evaluator's key, waited
//!   for and checked.

mod contract;
mod job_ref;
pub mod validation;

pub use job_ref::{ContractRef, JobRef, JobRefError};
pub use validation::{Registry, RequestStatus, Response, ValidationRef, ValidationRefError};

use contract::Contract;

use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::rpc::types::{Filter, Log};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol;
use alloy::sol_types::{SolCall, SolEvent};

/// `0x` and the 64 hex digits of a 32-byte value (a commitment, a reason, a
/// transaction).
pub fn bytes32_hex(b: &B256) -> String {
    format!("0x{}", alloy::hex::encode(b))
}

/// The bytes32 a sha256 hex string (a `deliverable_hash`, a `payload_sha256`) is.
pub fn bytes32_of(hex: &str) -> Option<B256> {
    (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.parse().ok())
        .flatten()
}

sol! {
    /// What every ERC-8183 escrow shares: the evaluator's calls and the job's events.
    interface IAgenticCommerce {
        function complete(uint256 jobId, bytes32 reason, bytes calldata optParams) external;
        function reject(uint256 jobId, bytes32 reason, bytes calldata optParams) external;

        event JobSubmitted(uint256 indexed jobId, address indexed provider, bytes32 deliverable);
        event JobCompleted(uint256 indexed jobId, address indexed evaluator, bytes32 reason);
        event JobRejected(uint256 indexed jobId, address indexed rejector, bytes32 reason);
    }

    /// `getJob` as the ERC's reference implementation answers it (its published
    /// deployments, and the devnet's AgenticCommerce.sol): the job's own id first, a
    /// payment token per job, the provider's ERC-8004 agent id and when it submitted.
    interface ReferenceEscrow {
        struct Job {
            uint256 id;
            address client;
            address provider;
            address evaluator;
            string description;
            uint256 budget;
            uint256 expiredAt;
            uint8 status;
            address hook;
            address paymentToken;
            uint256 providerAgentId;
            uint256 submittedAt;
        }

        function getJob(uint256 jobId) external view returns (Job memory);
        /// How long after `submit` the refund cannot be claimed, even past `expiredAt`.
        function EVALUATION_GRACE_PERIOD() external view returns (uint256);
    }

    /// `getJob` as the ERC's earlier text was implemented (the devnet's
    /// AgenticCommerceLegacy.sol): eight fields, one payment token for the contract.
    interface LegacyEscrow {
        struct Job {
            address client;
            address provider;
            address evaluator;
            string description;
            uint256 budget;
            uint256 expiredAt;
            uint8 status;
            address hook;
        }

        function getJob(uint256 jobId) external view returns (Job memory);
    }
}

/// The `getJob` layouts the evaluator reads, in the order they are tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// The ERC's reference implementation (twelve fields, a token per job).
    Reference,
    /// The earlier text's (eight fields).
    Legacy,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Reference => "reference (12 fields)",
            Layout::Legacy => "legacy (8 fields)",
        }
    }

    /// The job in `answer` (getJob's return data), if `answer` is exactly this layout's
    /// encoding of one: decoded strictly and encoded back to the same bytes, so an
    /// answer in another layout (whose words could happen to decode) is never taken
    /// for this one.
    fn read(self, answer: &[u8]) -> Option<RawJob> {
        match self {
            Layout::Reference => exactly::<ReferenceEscrow::getJobCall>(answer).map(|j| RawJob {
                client: j.client,
                provider: j.provider,
                evaluator: j.evaluator,
                description: j.description,
                budget: j.budget,
                expired_at: j.expiredAt,
                status: j.status,
                payment_token: Some(j.paymentToken),
                submitted_at: Some(j.submittedAt),
            }),
            Layout::Legacy => exactly::<LegacyEscrow::getJobCall>(answer).map(|j| RawJob {
                client: j.client,
                provider: j.provider,
                evaluator: j.evaluator,
                description: j.description,
                budget: j.budget,
                expired_at: j.expiredAt,
                status: j.status,
                payment_token: None,
                submitted_at: None,
            }),
        }
    }
}

/// What `answer` returns for `C`, if it is exactly `C`'s encoding of it: decoded
/// strictly, and encoded back to the same bytes.
fn exactly<C: SolCall>(answer: &[u8]) -> Option<C::Return> {
    let decoded = C::abi_decode_returns_validate(answer).ok()?;
    (C::abi_encode_returns(&decoded) == answer).then_some(decoded)
}

/// A job as some layout's `getJob` answered it, its status not yet checked.
struct RawJob {
    client: Address,
    provider: Address,
    evaluator: Address,
    description: String,
    budget: U256,
    expired_at: U256,
    status: u8,
    payment_token: Option<Address>,
    submitted_at: Option<U256>,
}

use contract::LOG_CHUNK_BLOCKS;
/// How far back events are looked for: about 11 days of Base blocks.
pub const DEFAULT_LOOKBACK_BLOCKS: u64 = 500_000;

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
    fn from_u8(n: u8) -> Option<Status> {
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

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EscrowError {
    #[error("{0}")]
    Config(String),
    #[error("the RPC failed on {what}: {message}")]
    Rpc { what: &'static str, message: String },
    #[error("job {0} does not exist on this contract")]
    UnknownJob(U256),
    #[error("the chain refused {what}: {message}")]
    Refused { what: &'static str, message: String },
    /// A transaction from our key (the evaluator's, the validator's) is not mined yet:
    /// sending another could act twice (the second one reverting, or answering twice).
    #[error("a transaction from {0} (our key) is still pending; wait for it, then run again")]
    Pending(Address),
    /// The contract's `getJob` answers in none of the layouts known to be deployed:
    /// asking again will not change that.
    #[error(
        "not an ERC-8183 escrow we can read: {0}'s getJob answers in neither the reference implementation's layout nor the earlier eight-field one (docs/erc8183.md)"
    )]
    Unreadable(Address),
}

impl EscrowError {
    /// Worth trying again later: the chain did not answer, or is still busy with us.
    pub fn is_transient(&self) -> bool {
        matches!(self, EscrowError::Rpc { .. } | EscrowError::Pending(_))
    }
}

use contract::rpc;

pub(crate) fn decode<E: SolEvent>(log: &Log) -> Result<E, EscrowError> {
    E::decode_log(&log.inner)
        .map(|e| e.data)
        .map_err(|e| rpc("decoding an event")(format!("{}: {e}", E::SIGNATURE)))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(description: &str) -> Vec<u8> {
        ReferenceEscrow::getJobCall::abi_encode_returns(&ReferenceEscrow::Job {
            id: U256::from(7),
            client: Address::repeat_byte(1),
            provider: Address::repeat_byte(2),
            evaluator: Address::repeat_byte(3),
            description: description.into(),
            budget: U256::from(10_000_000),
            expiredAt: U256::from(1_800_000_000),
            status: 2,
            hook: Address::ZERO,
            paymentToken: Address::repeat_byte(4),
            providerAgentId: U256::ZERO,
            submittedAt: U256::from(1_799_999_000),
        })
    }

    fn legacy(description: &str, budget: u64) -> Vec<u8> {
        LegacyEscrow::getJobCall::abi_encode_returns(&LegacyEscrow::Job {
            client: Address::repeat_byte(1),
            provider: Address::repeat_byte(2),
            evaluator: Address::repeat_byte(3),
            description: description.into(),
            budget: U256::from(budget),
            expiredAt: U256::from(1_800_000_000),
            status: 2,
            hook: Address::ZERO,
        })
    }

    /// Each layout's answer is read by that layout only, whatever its description,
    /// including the legacy answer whose budget sits where the reference keeps its
    /// description's offset (384 = 12 words), the closest the two come to each other.
    #[test]
    fn each_answer_is_read_by_its_own_layout_only() {
        for text in ["", "a brief", &"x".repeat(100)] {
            let r = reference(text);
            assert!(Layout::Reference.read(&r).is_some());
            assert!(Layout::Legacy.read(&r).is_none(), "{text:?}");
            for budget in [10_000_000, 384, 256] {
                let l = legacy(text, budget);
                assert!(Layout::Legacy.read(&l).is_some());
                assert!(Layout::Reference.read(&l).is_none(), "{text:?} {budget}");
            }
        }
        // A job that does not exist: the reference answers it zeroed.
        let zeroed = ReferenceEscrow::getJobCall::abi_encode_returns(&ReferenceEscrow::Job {
            id: U256::ZERO,
            client: Address::ZERO,
            provider: Address::ZERO,
            evaluator: Address::ZERO,
            description: String::new(),
            budget: U256::ZERO,
            expiredAt: U256::ZERO,
            status: 0,
            hook: Address::ZERO,
            paymentToken: Address::ZERO,
            providerAgentId: U256::ZERO,
            submittedAt: U256::ZERO,
        });
        assert!(Layout::Reference.read(&zeroed).is_some());
        assert!(Layout::Legacy.read(&zeroed).is_none());
        // Two numbers are no job at all.
        let mut two = vec![0u8; 64];
        two[31] = 1;
        two[63] = 2;
        assert!(Layout::Reference.read(&two).is_none());
        assert!(Layout::Legacy.read(&two).is_none());
    }

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
