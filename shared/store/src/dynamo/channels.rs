//! batch-settlement channels in DynamoDB: one item per channel, each step one
//! conditional write on it. Amounts are numbers (exact to 38 digits, [`MAX_AMOUNT`]) so
//! conditions compare them; `unclaimed` ("1") is set while the channel has charged more
//! than was claimed on chain, and the sparse index `by_unclaimed` finds those channels.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use crate::channels::{
    ChannelChain, ChannelCharge, ChannelCommit, ChannelHold, ChannelRecord, ChannelStore,
    ChannelTake, MAX_AMOUNT,
};
use crate::{Result, StoreError, Unix};

use super::{DynamoStore, Item, applied, get_n, get_s, n, opt_s, s, sdk};

const KEY: &str = "channel_id";
const UNCLAIMED_INDEX: &str = "by_unclaimed";

fn amount(v: u128) -> Result<AttributeValue> {
    if v > MAX_AMOUNT {
        return Err(StoreError::Corrupt(format!(
            "channel amount {v} exceeds 38 digits"
        )));
    }
    Ok(AttributeValue::N(v.to_string()))
}

fn get_amount(item: &Item, k: &str) -> Result<u128> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("attribute {k} missing or not an amount")))
}

fn from_item(item: &Item) -> Result<ChannelRecord> {
    let hold = match opt_s(item, "hold_id") {
        Some(id) => Some(ChannelHold {
            id,
            base: get_amount(item, "hold_base")?,
            until: get_n(item, "hold_until")?,
        }),
        None => None,
    };
    Ok(ChannelRecord {
        channel_id: get_s(item, KEY)?,
        network: get_s(item, "network")?,
        config: get_s(item, "config")?,
        charge: ChannelCharge {
            charged: get_amount(item, "charged")?,
            signed_max: get_amount(item, "signed_max")?,
            signature: get_s(item, "signature")?,
        },
        chain: ChannelChain {
            balance: get_amount(item, "balance")?,
            total_claimed: get_amount(item, "total_claimed")?,
            withdraw_requested_at: get_n(item, "withdraw_requested_at")?,
            refund_nonce: get_n(item, "refund_nonce")?,
            synced_at: get_n(item, "synced_at")?,
        },
        hold,
        committed_by: opt_s(item, "committed_by"),
    })
}

fn to_item(r: &ChannelRecord) -> Result<Item> {
    let mut item = Item::from([
        (KEY.to_owned(), s(&r.channel_id)),
        ("network".to_owned(), s(&r.network)),
        ("config".to_owned(), s(&r.config)),
        ("charged".to_owned(), amount(r.charge.charged)?),
        ("signed_max".to_owned(), amount(r.charge.signed_max)?),
        ("signature".to_owned(), s(&r.charge.signature)),
        ("balance".to_owned(), amount(r.chain.balance)?),
        ("total_claimed".to_owned(), amount(r.chain.total_claimed)?),
        (
            "withdraw_requested_at".to_owned(),
            n(r.chain.withdraw_requested_at),
        ),
        ("refund_nonce".to_owned(), n(r.chain.refund_nonce)),
        ("synced_at".to_owned(), n(r.chain.synced_at)),
    ]);
    if let Some(h) = &r.hold {
        item.insert("hold_id".to_owned(), s(&h.id));
        item.insert("hold_base".to_owned(), amount(h.base)?);
        item.insert("hold_until".to_owned(), n(h.until));
    }
    if let Some(by) = &r.committed_by {
        item.insert("committed_by".to_owned(), s(by));
    }
    if r.unclaimed() > 0 {
        item.insert("unclaimed".to_owned(), s("1"));
    }
    Ok(item)
}

#[async_trait]
impl ChannelStore for DynamoStore {
    async fn get_channel(&self, channel_id: &str) -> Result<Option<ChannelRecord>> {
        let item = self.get_item(&self.names.channels, KEY, channel_id).await?;
        item.as_ref().map(from_item).transpose()
    }

    async fn create_channel(&self, record: &ChannelRecord) -> Result<bool> {
        let r = self
            .client
            .put_item()
            .table_name(&self.names.channels)
            .set_item(Some(to_item(record)?))
            .condition_expression("attribute_not_exists(channel_id)")
            .send()
            .await;
        applied(r)
    }

    async fn take_channel(
        &self,
        channel_id: &str,
        hold: &ChannelHold,
        now: Unix,
    ) -> Result<ChannelTake> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.channels)
            .key(KEY, s(channel_id))
            .update_expression("SET hold_id = :id, hold_base = :base, hold_until = :until")
            .condition_expression(
                "attribute_exists(channel_id) AND charged = :base AND (attribute_not_exists(hold_id) OR hold_until <= :now)",
            )
            .expression_attribute_values(":id", s(&hold.id))
            .expression_attribute_values(":base", amount(hold.base)?)
            .expression_attribute_values(":until", n(hold.until))
            .expression_attribute_values(":now", n(now))
            .return_values(ReturnValue::AllOld)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        let old = match r {
            Ok(out) => {
                let before = out.attributes.ok_or_else(|| {
                    StoreError::Unavailable("a taken channel came back without its item".into())
                })?;
                return Ok(ChannelTake::Won(from_item(&before)?));
            }
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c)) => {
                    c.item().cloned()
                }
                _ => return Err(sdk(e)),
            },
        };
        let Some(old) = old else {
            return Ok(ChannelTake::Missing);
        };
        let record = from_item(&old)?;
        Ok(if record.charge.charged != hold.base {
            ChannelTake::Moved(record)
        } else {
            ChannelTake::Busy(record)
        })
    }

    async fn commit_channel(
        &self,
        channel_id: &str,
        hold_id: &str,
        base: u128,
        charge: &ChannelCharge,
    ) -> Result<ChannelCommit> {
        // A charge only grows what the channel owes: above its base, and the base is at
        // least what was claimed, so the channel has something unclaimed after it.
        let mut update =
            "SET charged = :c, signed_max = :m, signature = :sig, committed_by = :hid".to_owned();
        if charge.charged > base {
            update.push_str(", unclaimed = :one");
        }
        update.push_str(" REMOVE hold_id, hold_base, hold_until");
        let mut req = self
            .client
            .update_item()
            .table_name(&self.names.channels)
            .key(KEY, s(channel_id))
            .update_expression(update)
            .condition_expression("hold_id = :hid AND charged = :base")
            .expression_attribute_values(":c", amount(charge.charged)?)
            .expression_attribute_values(":m", amount(charge.signed_max)?)
            .expression_attribute_values(":sig", s(&charge.signature))
            .expression_attribute_values(":hid", s(hold_id))
            .expression_attribute_values(":base", amount(base)?)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if charge.charged > base {
            req = req.expression_attribute_values(":one", s("1"));
        }
        match req.send().await {
            Ok(_) => Ok(ChannelCommit::Committed),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c)) => {
                    let already = c
                        .item()
                        .map(from_item)
                        .transpose()?
                        .is_some_and(|r| {
                            r.charge == *charge && r.committed_by.as_deref() == Some(hold_id)
                        });
                    Ok(if already { ChannelCommit::Already } else { ChannelCommit::Lost })
                }
                _ => Err(sdk(e)),
            },
        }
    }

    async fn release_channel(&self, channel_id: &str, hold_id: &str) -> Result<()> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.channels)
            .key(KEY, s(channel_id))
            .update_expression("REMOVE hold_id, hold_base, hold_until")
            .condition_expression("hold_id = :hid")
            .expression_attribute_values(":hid", s(hold_id))
            .send()
            .await;
        // Not this request's hold any more: nothing to let go.
        applied(r).map(|_| ())
    }

    async fn mirror_channel(&self, channel_id: &str, chain: &ChannelChain) -> Result<()> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.channels)
            .key(KEY, s(channel_id))
            .update_expression(
                "SET balance = :b, total_claimed = :tc, withdraw_requested_at = :w, refund_nonce = :rn, synced_at = :at",
            )
            // Never back in time: a slower read of older state loses to a newer one.
            .condition_expression("attribute_exists(channel_id) AND synced_at <= :at")
            .expression_attribute_values(":b", amount(chain.balance)?)
            .expression_attribute_values(":tc", amount(chain.total_claimed)?)
            .expression_attribute_values(":w", n(chain.withdraw_requested_at))
            .expression_attribute_values(":rn", n(chain.refund_nonce))
            .expression_attribute_values(":at", n(chain.synced_at))
            .send()
            .await;
        if !applied(r)? {
            return Ok(());
        }
        // Behind the chain: raised to what it shows claimed (ChannelRecord::caught_up),
        // which leaves nothing unclaimed.
        let r = self
            .client
            .update_item()
            .table_name(&self.names.channels)
            .key(KEY, s(channel_id))
            .update_expression(
                "SET charged = :tc, signed_max = :tc, signature = :none REMOVE committed_by, unclaimed",
            )
            .condition_expression("charged < :tc")
            .expression_attribute_values(":tc", amount(chain.total_claimed)?)
            .expression_attribute_values(":none", s(""))
            .send()
            .await;
        if applied(r)? {
            return Ok(());
        }
        // Everything charged is claimed: out of the index, unless a charge landed in
        // between (then the condition fails and the channel stays listed).
        let r = self
            .client
            .update_item()
            .table_name(&self.names.channels)
            .key(KEY, s(channel_id))
            .update_expression("REMOVE unclaimed")
            .condition_expression("attribute_exists(unclaimed) AND charged <= :tc")
            .expression_attribute_values(":tc", amount(chain.total_claimed)?)
            .send()
            .await;
        applied(r).map(|_| ())
    }

    async fn unclaimed_channels(&self, limit: usize) -> Result<Vec<ChannelRecord>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let page = self
                .client
                .query()
                .table_name(&self.names.channels)
                .index_name(UNCLAIMED_INDEX)
                .key_condition_expression("unclaimed = :one")
                .expression_attribute_values(":one", s("1"))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(sdk)?;
            for item in page.items() {
                if out.len() < limit {
                    out.push(from_item(item)?);
                }
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(out)
    }
}
