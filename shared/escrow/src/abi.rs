//! The escrow's ABI: the calls and events every ERC-8183 escrow shares, and the
//! `getJob` layouts known to be deployed, each answer told apart by which layout it is
//! the exact encoding of.

use alloy::primitives::{Address, U256};
use alloy::sol;
use alloy::sol_types::SolCall;

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
    pub(crate) fn read(self, answer: &[u8]) -> Option<RawJob> {
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
pub(crate) struct RawJob {
    pub(crate) client: Address,
    pub(crate) provider: Address,
    pub(crate) evaluator: Address,
    pub(crate) description: String,
    pub(crate) budget: U256,
    pub(crate) expired_at: U256,
    pub(crate) status: u8,
    pub(crate) payment_token: Option<Address>,
    pub(crate) submitted_at: Option<U256>,
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
}
