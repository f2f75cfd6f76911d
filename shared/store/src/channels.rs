//! batch-settlement channels as the seller keeps them: per channel, what it has charged
//! and the payer's latest voucher (what a claim needs), the chain's state as last
//! mirrored, and the one request that may be charging it now. Every step is one
//! conditional write on the channel's record, so requests on one channel are serialized
//! across every instance: a second request meets the first one's hold (`Busy`), a
//! voucher written for an older charge meets the new one (`Moved`), and a charge lands
//! only from the request holding the channel at the charge it reserved from.
//!
//! Payment records only: ids, amounts, signatures; nothing of a deliverable.

use async_trait::async_trait;

use crate::{Result, Unix};

/// The chain's state of a channel, as last read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelChain {
    /// Deposited, less withdrawals and refunds (claims do not lower it).
    pub balance: u128,
    pub total_claimed: u128,
    /// When the payer started a timed withdrawal (unix seconds), 0 when none.
    pub withdraw_requested_at: u64,
    pub refund_nonce: u64,
    /// When we read it (unix seconds).
    pub synced_at: Unix,
}

/// A request holding a channel: charging from `base`, until `until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelHold {
    /// Unique to the request (two requests with the same voucher hold under two ids).
    pub id: String,
    pub base: u128,
    pub until: Unix,
}

/// A charge and the voucher that pays it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelCharge {
    /// The cumulative amount charged, this request's price included.
    pub charged: u128,
    /// The voucher's ceiling (at least `charged`).
    pub signed_max: u128,
    /// The voucher's signature, 0x hex.
    pub signature: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelRecord {
    /// The channel's id, 0x hex (bound to its chain and contract).
    pub channel_id: String,
    /// CAIP-2.
    pub network: String,
    /// The channel's config as JSON (what a claim sends back to the contract).
    pub config: String,
    /// Charged so far, with the latest voucher (a voucher for `charged` or more).
    pub charge: ChannelCharge,
    pub chain: ChannelChain,
    pub hold: Option<ChannelHold>,
    /// The hold whose commit charged `charge` (None for a record as first made): only
    /// that request's retry is told its charge stands.
    pub committed_by: Option<String>,
}

impl ChannelRecord {
    /// Charged and not yet claimed on chain.
    pub fn unclaimed(&self) -> u128 {
        self.charge.charged.saturating_sub(self.chain.total_claimed)
    }

    /// This record with the chain's state `chain`, raised to what it shows claimed.
    pub fn caught_up(mut self, chain: ChannelChain) -> ChannelRecord {
        if chain.total_claimed > self.charge.charged {
            self.charge = ChannelCharge {
                charged: chain.total_claimed,
                signed_max: chain.total_claimed,
                signature: String::new(),
            };
            self.committed_by = None;
        }
        self.chain = chain;
        self
    }

    /// Whether a request holds the channel at `now`.
    pub fn held_at(&self, now: Unix) -> bool {
        self.hold.as_ref().is_some_and(|h| h.until > now)
    }
}

/// What taking a channel for a request came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelTake {
    /// This request holds the channel; the record as it stood before.
    Won(ChannelRecord),
    /// Another request holds it.
    Busy(ChannelRecord),
    /// The channel has charged something other than the hold's base: the voucher was
    /// written for another state (the record says which).
    Moved(ChannelRecord),
    /// We keep no record of the channel.
    Missing,
}

/// What committing a charge came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelCommit {
    /// The charge is recorded now.
    Committed,
    /// It was already, by this very hold (a retry of this request's commit).
    Already,
    /// The hold was lost (it lapsed and another request took the channel): nothing
    /// charged.
    Lost,
}

/// The most a DynamoDB number holds exactly (38 digits): amounts past it are refused
/// before they reach a store (no token's supply comes near).
pub const MAX_AMOUNT: u128 = 10u128.pow(38) - 1;

#[async_trait]
pub trait ChannelStore: Send + Sync {
    async fn get_channel(&self, channel_id: &str) -> Result<Option<ChannelRecord>>;
    /// Writes the record of a channel we keep no record of yet (its hold, if any,
    /// included); `false` when one exists.
    async fn create_channel(&self, record: &ChannelRecord) -> Result<bool>;
    /// Takes the channel for one request: won only when it has charged `hold.base` and
    /// no request holds it at `now`.
    async fn take_channel(
        &self,
        channel_id: &str,
        hold: &ChannelHold,
        now: Unix,
    ) -> Result<ChannelTake>;
    /// Records `charge`, only from the request holding the channel (`hold_id`) at the
    /// charge it took it from (`base`), and lets the channel go.
    async fn commit_channel(
        &self,
        channel_id: &str,
        hold_id: &str,
        base: u128,
        charge: &ChannelCharge,
    ) -> Result<ChannelCommit>;
    /// Lets the channel go without charging (the request failed); a no-op when the
    /// hold is not `hold_id`'s any more.
    async fn release_channel(&self, channel_id: &str, hold_id: &str) -> Result<()>;
    /// Writes what the chain says of the channel (never older than what is kept). A
    /// record behind the chain (charged below what was claimed: a restored table, a
    /// claim made elsewhere) is raised to it, its voucher dropped: what the chain has
    /// claimed is proven charged, and a buyer resynchronising from the chain then
    /// agrees with us ([`ChannelRecord::caught_up`]).
    async fn mirror_channel(&self, channel_id: &str, chain: &ChannelChain) -> Result<()>;
    /// Up to `limit` channels with charges not yet claimed on chain.
    async fn unclaimed_channels(&self, limit: usize) -> Result<Vec<ChannelRecord>>;
}
