//! Selling against batch-settlement vouchers: a voucher is checked locally (our channel,
//! our terms, the payer authorizer's signature: `umpire_x402::batch::check`) against the
//! channel as we keep it, the chain's state mirrored and re-read when older than a bound;
//! then the channel is taken for this one request (a conditional write: every instance
//! sees it), and the charge is committed only with the answer ([`ChannelSeller::commit`]:
//! only by the holder, from the charge it took the channel at; its retry recognised).
//!
//! A voucher written for another charge gets what the scheme's corrective 402 carries
//! (`channelState`, and `voucherState` with our latest voucher's proof), so the reference
//! client resynchronises and signs again; a second request while one is answered gets
//! `channel_busy` and when to retry.

use std::sync::Arc;

use alloy::primitives::{Address, B256};
use serde_json::{Map, Value, json};
use umpire_store::StoreError;
use umpire_store::channels::{
    ChannelChain, ChannelCharge, ChannelCommit, ChannelHold, ChannelRecord, ChannelStore,
    ChannelTake,
};
use umpire_x402::batch::OnChainChannel;
use umpire_x402::batch::check::{Signer, Terms};
use umpire_x402::batch::wire::{ChannelPayload, SignedVoucher};
use umpire_x402::reason::{FailureReason, PaymentFailure};
use umpire_x402::types::{Account, SettlementResponse};

/// The chain's view of a channel, as the seller reads it.
#[async_trait::async_trait]
pub trait ChannelReader: Send + Sync {
    async fn read(&self, channel: B256) -> Result<OnChainChannel, PaymentFailure>;
}

/// An [`umpire_pay::evm::EvmChain`] reading the contract at an address.
pub struct ContractReader {
    pub chain: umpire_pay::evm::EvmChain,
    pub contract: Address,
}

#[async_trait::async_trait]
impl ChannelReader for ContractReader {
    async fn read(&self, channel: B256) -> Result<OnChainChannel, PaymentFailure> {
        self.chain.batch_channel(self.contract, channel).await
    }
}

/// The longest one request may hold a channel (seconds): an API Gateway request's 30 s,
/// with room for the commit.
pub const MAX_HOLD_SECS: u64 = 60;

/// The most the mirrored chain state may lag (seconds), whatever the seller is given: a
/// withdrawal started on chain is seen within it, far inside the 15-minute minimum delay.
pub const MAX_FRESH_SECS: u64 = 60;

/// Sells against the channels of one rail.
pub struct ChannelSeller {
    pub terms: Terms,
    /// CAIP-2, as the answers name it.
    pub network: String,
    pub store: Arc<dyn ChannelStore>,
    pub chain: Arc<dyn ChannelReader>,
    /// How old (seconds) the mirrored chain state may be for a voucher to be checked
    /// against it: past it, the chain is read again first. Far below the shortest
    /// withdrawal delay (15 min), so a withdrawal started since is seen in time.
    pub fresh_secs: u64,
}

/// A channel held for one request, charging `price` on top of `hold.base`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub channel_id: String,
    pub hold: ChannelHold,
    /// The channel as it stood when taken.
    pub before: ChannelRecord,
    pub payer: Address,
    pub voucher: SignedVoucher,
    pub price: u128,
}

/// What a voucher came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Take {
    /// This request holds the channel: do the work, then [`ChannelSeller::commit`].
    Held(Box<Held>),
    /// The voucher was written for another charge: the corrective 402's `extra`
    /// (`channelState`, `voucherState`) goes with the refusal.
    Corrective {
        failure: PaymentFailure,
        extra: Map<String, Value>,
    },
    /// Another request holds the channel until `retry_after_secs` from now.
    Busy {
        failure: PaymentFailure,
        retry_after_secs: u64,
    },
    Refused(PaymentFailure),
}

fn refuse(reason: FailureReason, message: impl Into<String>) -> Take {
    Take::Refused(PaymentFailure::invalid(reason, message))
}

fn unavailable(e: StoreError) -> PaymentFailure {
    PaymentFailure::unavailable(format!("the channel store: {e}"))
}

/// The scheme's channel snapshot (`channelState`): amounts as decimal strings,
/// `withdrawRequestedAt` a number, `chargedCumulativeAmount` what we have charged.
pub fn channel_state(r: &ChannelRecord) -> Value {
    json!({
        "channelId": r.channel_id,
        "balance": r.chain.balance.to_string(),
        "totalClaimed": r.chain.total_claimed.to_string(),
        "withdrawRequestedAt": r.chain.withdraw_requested_at,
        "refundNonce": r.chain.refund_nonce.to_string(),
        "chargedCumulativeAmount": r.charge.charged.to_string(),
    })
}

/// What the corrective 402 adds to our batch-settlement requirements: the channel's
/// state and, when we hold a voucher of it, that voucher's ceiling and signature (the
/// payer's own proof of what it signed last).
fn correction(r: &ChannelRecord) -> Map<String, Value> {
    let mut extra = Map::new();
    extra.insert("channelState".into(), channel_state(r));
    if !r.charge.signature.is_empty() {
        extra.insert(
            "voucherState".into(),
            json!({
                "signedMaxClaimable": r.charge.signed_max.to_string(),
                "signature": r.charge.signature,
            }),
        );
    }
    extra
}

fn mirrored(on: &OnChainChannel, now: u64) -> ChannelChain {
    ChannelChain {
        balance: on.balance,
        total_claimed: on.total_claimed,
        withdraw_requested_at: on.withdraw_initiated_at,
        refund_nonce: u64::try_from(on.refund_nonce).unwrap_or(u64::MAX),
        synced_at: now,
    }
}

impl ChannelSeller {
    /// Checks `payload` for a purchase at `price` and takes its channel for the request
    /// whose hold is `hold_id` (unique to its payment), until `hold_until`.
    pub async fn take(
        &self,
        payload: &ChannelPayload,
        price: u128,
        hold_id: &str,
        hold_until: u64,
        now: u64,
    ) -> Take {
        // A hold born lapsed lets a twin in at once; one without end locks the payer's
        // channel if the request dies.
        if price == 0 || hold_until <= now || hold_until > now + MAX_HOLD_SECS {
            return Take::Refused(PaymentFailure::config(format!(
                "a channel is taken for a positive price and at most {MAX_HOLD_SECS} s (price {price}, {} s)",
                hold_until.saturating_sub(now)
            )));
        }
        let ChannelPayload::Voucher { config, voucher } = payload else {
            return refuse(
                FailureReason::BatchPayloadType,
                "only voucher payloads are accepted here so far: deposit into the channel on chain, then pay with vouchers",
            );
        };
        let id = match self.terms.channel(config, voucher) {
            Ok(id) => id,
            Err(f) => return Take::Refused(f),
        };
        match self.terms.signer(config, voucher) {
            Ok(Signer::Verified) => {}
            Ok(Signer::OnChain { .. }) => {
                return refuse(
                    FailureReason::BatchVoucherSignature,
                    "channels without a payerAuthorizer (ERC-1271 vouchers) are not accepted yet: name an EOA as payerAuthorizer",
                );
            }
            Err(f) => return Take::Refused(f),
        }
        let record = match self.current(id, config, now).await {
            Ok(r) => r,
            Err(f) => return Take::Refused(f),
        };
        if let Some(refusal) = self.against(&record, voucher, price) {
            return refusal;
        }
        let hold = ChannelHold {
            id: hold_id.to_owned(),
            base: record.charge.charged,
            until: hold_until,
        };
        self.hold(record, hold, config.payer, voucher, price, now)
            .await
    }

    /// Takes the checked channel for the request `hold` names: held, busy, or moved
    /// since it was read.
    async fn hold(
        &self,
        record: ChannelRecord,
        hold: ChannelHold,
        payer: Address,
        voucher: &SignedVoucher,
        price: u128,
        now: u64,
    ) -> Take {
        match self
            .store
            .take_channel(&record.channel_id, &hold, now)
            .await
        {
            Ok(ChannelTake::Won(before)) => {
                // The record may have moved between the check and the take (a mirror
                // showing a withdrawal): checked again as taken.
                if let Some(refusal) = self.against(&before, voucher, price) {
                    let _ = self
                        .store
                        .release_channel(&record.channel_id, &hold.id)
                        .await;
                    return refusal;
                }
                Take::Held(Box::new(Held {
                    channel_id: record.channel_id,
                    hold,
                    before,
                    payer,
                    voucher: voucher.clone(),
                    price,
                }))
            }
            Ok(ChannelTake::Busy(r)) => {
                let until = r.hold.as_ref().map_or(now + 1, |h| h.until);
                Take::Busy {
                    failure: PaymentFailure::invalid(
                        FailureReason::BatchChannelBusy,
                        "another request on this channel is being answered: retry after it",
                    ),
                    retry_after_secs: until.saturating_sub(now).max(1),
                }
            }
            Ok(ChannelTake::Moved(r)) => Take::Corrective {
                failure: mismatch(&r, price),
                extra: correction(&r),
            },
            Ok(ChannelTake::Missing) => Take::Refused(PaymentFailure::unavailable(
                "the channel's record went away while it was taken; retry",
            )),
            Err(e) => Take::Refused(unavailable(e)),
        }
    }

    /// The channel as we keep it, its chain state re-read when older than the bound; a
    /// channel seen for the first time starts at what the chain shows claimed (all a
    /// new seller can prove was charged).
    async fn current(
        &self,
        id: B256,
        config: &umpire_x402::batch::ChannelConfig,
        now: u64,
    ) -> Result<ChannelRecord, PaymentFailure> {
        let key = id.to_string();
        let kept = self.store.get_channel(&key).await.map_err(unavailable)?;
        if let Some(r) = &kept
            && now.saturating_sub(r.chain.synced_at) <= self.fresh_secs.min(MAX_FRESH_SECS)
        {
            return Ok(r.clone());
        }
        let on = self.chain.read(id).await?;
        let chain = mirrored(&on, now);
        match kept {
            Some(r) => {
                self.store
                    .mirror_channel(&key, &chain)
                    .await
                    .map_err(unavailable)?;
                Ok(r.caught_up(chain))
            }
            None => {
                let new = ChannelRecord {
                    channel_id: key.clone(),
                    network: self.network.clone(),
                    config: config_json(config),
                    charge: ChannelCharge {
                        charged: on.total_claimed,
                        signed_max: on.total_claimed,
                        signature: String::new(),
                    },
                    chain,
                    hold: None,
                    committed_by: None,
                };
                if self.store.create_channel(&new).await.map_err(unavailable)? {
                    return Ok(new);
                }
                // Another request made it first: theirs stands.
                self.store
                    .get_channel(&key)
                    .await
                    .map_err(unavailable)?
                    .ok_or_else(|| {
                        PaymentFailure::unavailable("the channel's record vanished; retry")
                    })
            }
        }
    }

    /// The voucher against the channel's state: `None` when it may be taken.
    fn against(&self, r: &ChannelRecord, voucher: &SignedVoucher, price: u128) -> Option<Take> {
        let max = voucher.max_claimable;
        // A payer withdrawing takes back at the delay's end whatever is not claimed by
        // then: nothing more is sold on the channel (what was sold is claimed first).
        if r.chain.withdraw_requested_at != 0 {
            return Some(refuse(
                FailureReason::BatchWithdrawalPending,
                format!(
                    "a withdrawal from channel {} started at {}: nothing more is sold on it (open a new channel, or wait for the withdrawal to end)",
                    r.channel_id, r.chain.withdraw_requested_at
                ),
            ));
        }
        if r.chain.balance == 0 {
            return Some(refuse(
                FailureReason::BatchChannelNotFound,
                format!(
                    "nothing is deposited in channel {}: deposit first",
                    r.channel_id
                ),
            ));
        }
        if max <= r.chain.total_claimed {
            return Some(Take::Corrective {
                failure: PaymentFailure::invalid(
                    FailureReason::BatchCumulativeBelowClaimed,
                    format!(
                        "the voucher's ceiling {max} is not above what was claimed on chain, {}",
                        r.chain.total_claimed
                    ),
                ),
                extra: correction(r),
            });
        }
        if Some(max) != r.charge.charged.checked_add(price) {
            return Some(Take::Corrective {
                failure: mismatch(r, price),
                extra: correction(r),
            });
        }
        if max > r.chain.balance {
            return Some(refuse(
                FailureReason::BatchCumulativeExceedsBalance,
                format!(
                    "the voucher's ceiling {max} exceeds the channel's balance {}: deposit more",
                    r.chain.balance
                ),
            ));
        }
        None
    }

    /// Records the charge with the voucher that pays it: call once the answer is
    /// written down. `Lost`: the hold lapsed and another request took the channel, so
    /// nothing is charged and the answer must not be given.
    pub async fn commit(&self, held: &Held) -> Result<ChannelCommit, StoreError> {
        let charge = ChannelCharge {
            charged: held.hold.base + held.price,
            signed_max: held.voucher.max_claimable,
            signature: held.voucher.signature.to_string(),
        };
        self.store
            .commit_channel(&held.channel_id, &held.hold.id, held.hold.base, &charge)
            .await
    }

    /// Lets the channel go without charging (the request failed).
    pub async fn release(&self, held: &Held) -> Result<(), StoreError> {
        self.store
            .release_channel(&held.channel_id, &held.hold.id)
            .await
    }

    /// The settlement response of a committed voucher purchase: no transaction (nothing
    /// moved on chain), this request's charge, the channel's state after it.
    pub fn response(&self, held: &Held) -> SettlementResponse {
        let mut after = held.before.clone();
        after.charge.charged = held.hold.base + held.price;
        let mut extra = Map::new();
        extra.insert("chargedAmount".into(), json!(held.price.to_string()));
        extra.insert("channelState".into(), channel_state(&after));
        SettlementResponse {
            success: true,
            transaction: String::new(),
            network: self.network.parse().ok(),
            payer: Some(Account::Evm(held.payer)),
            error_reason: None,
            extensions: Map::new(),
            extra,
        }
    }
}

fn mismatch(r: &ChannelRecord, price: u128) -> PaymentFailure {
    PaymentFailure::invalid(
        FailureReason::BatchCumulativeMismatch,
        format!(
            "the channel has charged {}: this purchase's voucher must be for {} (see channelState)",
            r.charge.charged,
            r.charge.charged.saturating_add(price)
        ),
    )
}

/// The config as the reference client writes it (what a claim sends back).
fn config_json(c: &umpire_x402::batch::ChannelConfig) -> String {
    json!({
        "payer": c.payer.to_string(),
        "payerAuthorizer": c.payerAuthorizer.to_string(),
        "receiver": c.receiver.to_string(),
        "receiverAuthorizer": c.receiverAuthorizer.to_string(),
        "token": c.token.to_string(),
        "withdrawDelay": u64::try_from(c.withdrawDelay).unwrap_or(u64::MAX),
        "salt": c.salt.to_string(),
    })
    .to_string()
}
