//! x402's `batch-settlement` scheme on EVM chains: a payer deposits once into a channel
//! of the `x402BatchSettlement` contract and pays each request with a cumulative voucher
//! signed off-chain; the receiver claims vouchers in batches and sweeps what it claimed.
//!
//! This module is the scheme's vocabulary, with no network: the contract's types and
//! EIP-712 digests (a channel's id is the typed-data hash of its immutable config under
//! the contract's domain, so it is bound to the chain and the contract's address), the
//! payloads clients send ([`wire`]), and the checks a voucher must pass before any state
//! is read ([`check`]). Everything hashes through alloy's `sol!` types, as `exact` does.

use alloy::primitives::{Address, B256, U256, address, keccak256};
use alloy::sol;
use alloy::sol_types::{Eip712Domain, SolStruct, SolValue};

pub mod check;
pub mod wire;

/// The scheme's name in `accepts[].scheme`.
pub const SCHEME: &str = "batch-settlement";

/// Where the reference contract lives on every EVM chain it is deployed to (CREATE2,
/// the same bytes everywhere): the address the reference packages sign every channel
/// id and voucher for. The devnet puts its contract here too.
pub const BATCH_SETTLEMENT_ADDRESS: Address =
    address!("0x4020074e9dF2ce1deE5A9C1b5c3f541D02a10003");

/// The reference EIP-3009 deposit collector: the `to` of every deposit authorization.
pub const ERC3009_DEPOSIT_COLLECTOR_ADDRESS: Address =
    address!("0x4020806089470a89826cB9fB1f4059150b550004");

/// The contract's bounds on a channel's withdrawal delay (seconds, inclusive): 15
/// minutes to 30 days.
pub const MIN_WITHDRAW_DELAY_SECS: u64 = 15 * 60;
pub const MAX_WITHDRAW_DELAY_SECS: u64 = 30 * 24 * 3600;

/// The contract's EIP-712 domain name and version.
pub const DOMAIN_NAME: &str = "x402 Batch Settlement";
pub const DOMAIN_VERSION: &str = "1";

sol! {
    /// A channel's immutable terms; its EIP-712 hash is the channel's id.
    #[derive(Debug, PartialEq, Eq)]
    struct ChannelConfig {
        address payer;
        address payerAuthorizer;
        address receiver;
        address receiverAuthorizer;
        address token;
        uint40 withdrawDelay;
        bytes32 salt;
    }

    /// What a payer signs per request: the most the receiver may claim in all.
    #[derive(Debug, PartialEq, Eq)]
    struct Voucher {
        bytes32 channelId;
        uint128 maxClaimableAmount;
    }

    /// What the receiver authorizer signs to refund a payer without the delay.
    #[derive(Debug, PartialEq, Eq)]
    struct Refund {
        bytes32 channelId;
        uint256 nonce;
        uint128 amount;
    }

    /// One row of a claim batch, as the authorizer signs it.
    #[derive(Debug, PartialEq, Eq)]
    struct ClaimEntry {
        bytes32 channelId;
        uint128 maxClaimableAmount;
        uint128 totalClaimed;
    }

    /// What the receiver authorizer signs so anyone may submit a batch of claims.
    #[derive(Debug, PartialEq, Eq)]
    struct ClaimBatch {
        ClaimEntry[] claims;
    }

    /// The parts of the contract a seller reads, and the payer's timed withdrawal.
    interface IBatchSettlement {
        function channels(bytes32 channelId) external view returns (uint128 balance, uint128 totalClaimed);
        function pendingWithdrawals(bytes32 channelId) external view returns (uint128 amount, uint40 initiatedAt);
        function refundNonce(bytes32 channelId) external view returns (uint256);
        function initiateWithdraw(ChannelConfig config, uint128 amount) external;
    }
}

/// A channel as the contract holds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OnChainChannel {
    /// Deposited, less withdrawals and refunds.
    pub balance: u128,
    pub total_claimed: u128,
    /// A timed withdrawal under way: when it started (unix seconds) and how much; 0, 0
    /// when none.
    pub withdraw_initiated_at: u64,
    pub withdraw_amount: u128,
    pub refund_nonce: U256,
}

/// The contract's EIP-712 domain on `chain_id` at `contract`.
pub fn domain(chain_id: u64, contract: Address) -> Eip712Domain {
    Eip712Domain::new(
        Some(DOMAIN_NAME.into()),
        Some(DOMAIN_VERSION.into()),
        Some(U256::from(chain_id)),
        Some(contract),
        None,
    )
}

/// A channel's id: `getChannelId(config)` of the contract at `contract` on `chain_id`.
pub fn channel_id(config: &ChannelConfig, chain_id: u64, contract: Address) -> B256 {
    config.eip712_signing_hash(&domain(chain_id, contract))
}

/// The digest a payer signs for a voucher: `getVoucherDigest(channelId, max)`.
pub fn voucher_digest(
    channel: B256,
    max_claimable: u128,
    chain_id: u64,
    contract: Address,
) -> B256 {
    Voucher {
        channelId: channel,
        maxClaimableAmount: max_claimable,
    }
    .eip712_signing_hash(&domain(chain_id, contract))
}

/// The digest the receiver authorizer signs for a refund: `getRefundDigest`.
pub fn refund_digest(
    channel: B256,
    nonce: U256,
    amount: u128,
    chain_id: u64,
    contract: Address,
) -> B256 {
    Refund {
        channelId: channel,
        nonce,
        amount,
    }
    .eip712_signing_hash(&domain(chain_id, contract))
}

/// The digest the receiver authorizer signs for a batch: `getClaimBatchDigest`.
pub fn claim_batch_digest(entries: Vec<ClaimEntry>, chain_id: u64, contract: Address) -> B256 {
    ClaimBatch { claims: entries }.eip712_signing_hash(&domain(chain_id, contract))
}

/// The EIP-3009 nonce a deposit authorization must carry: `keccak256(abi.encode(channelId,
/// salt))`, so an authorization can fund only the channel it names.
pub fn deposit_nonce(channel: B256, salt: U256) -> B256 {
    keccak256((channel, salt).abi_encode())
}

#[cfg(test)]
mod tests;
