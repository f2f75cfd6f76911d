//! Feedback rows and the aggregates reports read, in DynamoDB.
//!
//! All in the feedback table, beside the rows (keyed by their 0x transaction hash):
//! a payer's aggregate at `payer#<payer>` (no index attributes: in no index), and a
//! pair at `pair#<merchant>#<payer>` carrying `merchant` and `block_time` (its latest
//! row), so it sits on the merchant's own `by_merchant` pages next to its rows. A
//! write is one transaction: the row (new), the payer's aggregate (at the version read),
//! the row's pair and at most one other pair. Writers of one payer race on the
//! aggregate's version and the loser reads again.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::builders::PutBuilder;
use aws_sdk_dynamodb::types::{
    AttributeValue, KeysAndAttributes, Put, PutRequest, TransactWriteItem, WriteRequest,
};

use crate::aggregates::{self, PairSummary, PayerAgg};
use crate::{FeedbackRow, FeedbackStore, MerchantLedger, Result, StoreError, Unix};

use super::{DynamoStore, Item, feedback_from_item, get_n, get_s, n, opt_n, s, sdk};

/// Tries of a write whose payer another write changed under it.
const WRITE_TRIES: usize = 16;
/// How often, and how far apart, a spread lists the payer's pairs before leaving
/// itself pending (the payer index is eventually consistent: usually well under a
/// second behind).
const SPREAD_LIST_TRIES: usize = 8;
const SPREAD_LIST_PAUSE: std::time::Duration = std::time::Duration::from_millis(250);
/// Batch writes in flight at once while loading.
const LOADS_AT_ONCE: usize = 8;

fn agg_key(payer: &str) -> String {
    format!("payer#{payer}")
}

fn pair_key(merchant: &str, payer: &str) -> String {
    format!("pair#{merchant}#{payer}")
}

fn row_item(row: &FeedbackRow) -> Item {
    let mut item: Item = HashMap::from([
        ("tx_hash".to_owned(), s(&row.tx_hash)),
        ("merchant".to_owned(), s(&row.merchant)),
        ("payer".to_owned(), s(&row.payer)),
        ("outcome".to_owned(), s(&row.outcome)),
        ("amount_units".to_owned(), s(&row.amount_units)),
        ("block_time".to_owned(), n(row.block_time)),
        ("created_at".to_owned(), n(row.created_at)),
        ("anchor".to_owned(), AttributeValue::Bool(row.anchor)),
    ]);
    if let Some(w) = row.would_repeat {
        item.insert("would_repeat".into(), AttributeValue::Bool(w));
    }
    if let Some(l) = row.latency_ms {
        item.insert("latency_ms".into(), n(l));
    }
    item
}

fn pair_item(p: &PairSummary) -> Item {
    let mut item: Item = HashMap::from([
        ("tx_hash".to_owned(), s(pair_key(&p.merchant, &p.payer))),
        ("kind".to_owned(), s("pair")),
        ("merchant".to_owned(), s(&p.merchant)),
        ("payer".to_owned(), s(&p.payer)),
        ("block_time".to_owned(), n(p.latest)),
    ]);
    for (k, v) in [
        ("other_row", p.other_row),
        ("other_merchant", p.other_merchant),
        ("anchored", p.anchored),
    ] {
        if let Some(v) = v {
            item.insert(k.to_owned(), n(v));
        }
    }
    item
}

fn pair_from_item(item: &Item) -> Result<PairSummary> {
    Ok(PairSummary {
        merchant: get_s(item, "merchant")?,
        payer: get_s(item, "payer")?,
        latest: get_n(item, "block_time")?,
        other_row: opt_n(item, "other_row"),
        other_merchant: opt_n(item, "other_merchant"),
        anchored: opt_n(item, "anchored"),
    })
}

fn is_pair(item: &Item) -> bool {
    item.get("kind")
        .and_then(|v| v.as_s().ok())
        .is_some_and(|k| k == "pair")
}

fn agg_item(a: &PayerAgg) -> Result<Item> {
    let text = serde_json::to_string(a).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(HashMap::from([
        ("tx_hash".to_owned(), s(agg_key(&a.payer))),
        ("agg".to_owned(), s(text)),
        ("version".to_owned(), n(a.version)),
    ]))
}

fn agg_from_item(item: &Item) -> Result<PayerAgg> {
    serde_json::from_str(&get_s(item, "agg")?).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn put(table: &str, item: Item) -> PutBuilder {
    Put::builder().table_name(table).set_item(Some(item))
}

fn built(p: PutBuilder) -> Result<TransactWriteItem> {
    let p = p
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))?;
    Ok(TransactWriteItem::builder().put(p).build())
}

/// How a write transaction ended.
enum Written {
    Done,
    /// The row exists: one feedback per transaction.
    Duplicate,
    /// Another write of the payer got there first: read again.
    Raced,
}

impl DynamoStore {
    async fn get_agg(&self, payer: &str) -> Result<Option<PayerAgg>> {
        let got = self
            .client
            .get_item()
            .table_name(&self.names.feedback)
            .key("tx_hash", s(agg_key(payer)))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk)?;
        got.item.as_ref().map(agg_from_item).transpose()
    }

    /// The pairs of `payer` with these merchants (at most two), in one read.
    async fn get_pairs(&self, merchants: &[&str], payer: &str) -> Result<Vec<PairSummary>> {
        let keys = merchants
            .iter()
            .map(|m| HashMap::from([("tx_hash".to_owned(), s(pair_key(m, payer)))]))
            .collect::<Vec<_>>();
        let mut request = Some(
            KeysAndAttributes::builder()
                .set_keys(Some(keys))
                .consistent_read(true)
                .build()
                .map_err(|e| StoreError::Unavailable(e.to_string()))?,
        );
        let mut out = Vec::new();
        while let Some(r) = request.take() {
            let got = self
                .client
                .batch_get_item()
                .request_items(&self.names.feedback, r)
                .send()
                .await
                .map_err(sdk)?;
            for item in got
                .responses
                .unwrap_or_default()
                .remove(&self.names.feedback)
                .unwrap_or_default()
            {
                out.push(pair_from_item(&item)?);
            }
            request = got
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.names.feedback))
                .filter(|k| !k.keys.is_empty());
        }
        Ok(out)
    }

    async fn write_once(&self, row: &FeedbackRow) -> Result<(Written, Option<(Unix, u64, u64)>)> {
        let table = &self.names.feedback;
        let agg = self.get_agg(&row.payer).await?;
        let holder = agg.as_ref().and_then(|a| a.holder(&row.merchant));
        let wanted: Vec<&str> = std::iter::once(row.merchant.as_str())
            .chain(holder)
            .collect();
        let pairs = self.get_pairs(&wanted, &row.payer).await?;
        let find = |m: &str| pairs.iter().find(|p| p.merchant == m);
        let update = aggregates::fold(
            agg.as_ref(),
            find(&row.merchant),
            holder.and_then(find),
            row,
        );
        let mut agg_put = put(table, agg_item(&update.payer)?);
        agg_put = match &agg {
            None => agg_put.condition_expression("attribute_not_exists(tx_hash)"),
            Some(a) => agg_put
                .condition_expression("version = :v")
                .expression_attribute_values(":v", n(a.version)),
        };
        let mut items = vec![
            built(put(table, row_item(row)).condition_expression("attribute_not_exists(tx_hash)"))?,
            built(agg_put)?,
        ];
        for p in std::iter::once(&update.pair).chain(update.holder.as_ref()) {
            items.push(built(put(table, pair_item(p)))?);
        }
        let sent = self
            .client
            .transact_write_items()
            // No ClientRequestToken of ours: the SDK makes a random one per call and
            // sends it again on its own retries, so a resend after a lost answer
            // succeeds once instead of reading as a duplicate of itself. One derived
            // from the row would make two requests posting the same feedback at once
            // one call to DynamoDB: both answered 201, or (created a second apart) an
            // IdempotentParameterMismatch, a 500 where 409 duplicate_feedback is due.
            .set_transact_items(Some(items))
            .send()
            .await;
        let spread = update
            .spread_anchor
            .map(|a| (a, update.payer.version, update.payer.pairs));
        match sent {
            Ok(_) => Ok((Written::Done, spread)),
            Err(e) => {
                let Some(service) = e.as_service_error() else {
                    return Err(sdk(e));
                };
                if service.code() != Some("TransactionCanceledException") {
                    if service.code() == Some("TransactionConflictException") {
                        return Ok((Written::Raced, None));
                    }
                    return Err(sdk(e));
                }
                let reasons = match service {
                    aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c) => c
                        .cancellation_reasons()
                        .iter()
                        .map(|r| r.code().unwrap_or("None").to_owned())
                        .collect::<Vec<_>>(),
                    _ => Vec::new(),
                };
                if reasons
                    .first()
                    .is_some_and(|c| c == "ConditionalCheckFailed")
                {
                    Ok((Written::Duplicate, None))
                } else {
                    // The aggregate's version moved, or another transaction held an item.
                    Ok((Written::Raced, None))
                }
            }
        }
    }

    /// Raises `anchored` to `at` on every pair of `payer`, then records the spread on
    /// the aggregate (if no write changed it meanwhile; else the next write of the
    /// payer spreads again, which changes nothing twice). The pairs are listed from the
    /// payer index, which lags the table: the list is used only once it holds as many
    /// pairs as the aggregate counts; until then the spread stays pending.
    async fn spread_anchor(&self, payer: &str, at: Unix, version: u64, pairs: u64) -> Result<()> {
        let table = &self.names.feedback;
        let mut listed = Vec::new();
        for wait in 0..SPREAD_LIST_TRIES {
            if wait > 0 {
                tokio::time::sleep(SPREAD_LIST_PAUSE).await;
            }
            listed = self.payer_pairs(payer).await?;
            if listed.len() as u64 >= pairs {
                break;
            }
        }
        if (listed.len() as u64) < pairs {
            tracing::warn!(
                payer,
                listed = listed.len(),
                pairs,
                "the payer index lags: the anchor's spread stays pending until the payer's next write"
            );
            return Ok(());
        }
        for p in listed.iter().filter(|p| p.anchored < Some(at)) {
            let res = self
                .client
                .update_item()
                .table_name(table)
                .key("tx_hash", s(pair_key(&p.merchant, &p.payer)))
                .update_expression("SET anchored = :a")
                .condition_expression(
                    "attribute_exists(tx_hash) AND (attribute_not_exists(anchored) OR anchored < :a)",
                )
                .expression_attribute_values(":a", n(at))
                .send()
                .await;
            match res {
                Ok(_) => {}
                Err(e) if super::condition_failed(&e) => {}
                Err(e) => return Err(sdk(e)),
            }
        }
        let Some(mut agg) = self.get_agg(payer).await? else {
            return Ok(());
        };
        if agg.version != version || agg.anchored_spread >= Some(at) {
            return Ok(());
        }
        agg.anchored_spread = Some(at);
        let res = self
            .client
            .put_item()
            .table_name(table)
            .set_item(Some(agg_item(&agg)?))
            .condition_expression("version = :v")
            .expression_attribute_values(":v", n(version))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e) if super::condition_failed(&e) => Ok(()),
            Err(e) => Err(sdk(e)),
        }
    }

    /// Every pair of `payer`, from the payer index (rows are read and left out).
    async fn payer_pairs(&self, payer: &str) -> Result<Vec<PairSummary>> {
        let mut out = Vec::new();
        self.query_each(
            &self.names.feedback,
            "by_payer",
            "payer = :p",
            Some("kind = :pair"),
            vec![(":p", s(payer)), (":pair", s("pair"))],
            vec![],
            |item| {
                out.push(pair_from_item(&item)?);
                Ok(())
            },
        )
        .await?;
        Ok(out)
    }

    /// Finishes a spread a writer left pending (it stopped between its transaction
    /// and the spread).
    async fn finish_pending_spread(&self, payer: &str) -> Result<()> {
        if let Some((agg, at)) = self
            .get_agg(payer)
            .await?
            .and_then(|a| a.spread_pending().map(|at| (a, at)))
        {
            self.spread_anchor(payer, at, agg.version, agg.pairs)
                .await?;
        }
        Ok(())
    }

    async fn write_batch(&self, items: Vec<Item>) -> Result<()> {
        let mut requests: Vec<WriteRequest> = items
            .into_iter()
            .map(|item| {
                PutRequest::builder()
                    .set_item(Some(item))
                    .build()
                    .map(|p| WriteRequest::builder().put_request(p).build())
                    .map_err(|e| StoreError::Unavailable(e.to_string()))
            })
            .collect::<Result<_>>()?;
        while !requests.is_empty() {
            let sent = self
                .client
                .batch_write_item()
                .request_items(&self.names.feedback, std::mem::take(&mut requests))
                .send()
                .await
                .map_err(sdk)?;
            requests = sent
                .unprocessed_items
                .and_then(|mut u| u.remove(&self.names.feedback))
                .unwrap_or_default();
        }
        Ok(())
    }
}

#[async_trait]
impl FeedbackStore for DynamoStore {
    async fn put_feedback(&self, row: &FeedbackRow) -> Result<()> {
        for attempt in 0..WRITE_TRIES {
            match self.write_once(row).await? {
                (Written::Done, spread) => {
                    // The row is in: a spread that fails now stays pending for the
                    // payer's next write, and the writer still hears it succeeded.
                    if let Some((at, version, pairs)) = spread
                        && let Err(e) = self.spread_anchor(&row.payer, at, version, pairs).await
                    {
                        tracing::warn!(payer = row.payer, error = %e, "anchor spread left pending");
                    }
                    return Ok(());
                }
                (Written::Duplicate, _) => {
                    if let Err(e) = self.finish_pending_spread(&row.payer).await {
                        tracing::warn!(payer = row.payer, error = %e, "anchor spread left pending");
                    }
                    return Err(StoreError::AlreadyExists);
                }
                (Written::Raced, _) => {
                    // Writers of one payer: a short, growing, jittered pause (so the
                    // losers do not meet again) before reading again.
                    let cap = 10u64 << attempt.min(5);
                    let [r0, r1] = umpire_host::random_bytes::<2>();
                    let ms = cap / 2 + u64::from(u16::from_le_bytes([r0, r1])) % cap;
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
            }
        }
        Err(StoreError::Unavailable(format!(
            "payer {} is being written by others: {WRITE_TRIES} tries lost the race",
            row.payer
        )))
    }

    async fn merchant_ledger(&self, merchant: &str, since: Unix) -> Result<MerchantLedger> {
        // Each page's items turned into rows and pairs as it arrives: the raw items of a
        // large merchant would hold several times the memory.
        let mut ledger = MerchantLedger::default();
        self.query_each(
            &self.names.feedback,
            "by_merchant",
            "merchant = :m AND block_time >= :since",
            None,
            vec![(":m", s(merchant)), (":since", n(since))],
            vec![],
            |item| {
                if is_pair(&item) {
                    ledger.pairs.push(pair_from_item(&item)?);
                } else {
                    ledger.rows.push(feedback_from_item(&item)?);
                }
                Ok(())
            },
        )
        .await?;
        ledger
            .rows
            .sort_by(|a, b| (b.block_time, &b.tx_hash).cmp(&(a.block_time, &a.tx_hash)));
        ledger.pairs.sort_by(|a, b| a.payer.cmp(&b.payer));
        Ok(ledger)
    }

    async fn load_feedback(&self, rows: &[FeedbackRow]) -> Result<()> {
        use futures::StreamExt as _;
        let (aggs, pairs) = aggregates::exact(rows);
        let mut items: Vec<Item> = rows.iter().map(row_item).collect();
        for a in &aggs {
            items.push(agg_item(a)?);
        }
        items.extend(pairs.iter().map(pair_item));
        // BatchWriteItem takes 25 items at most.
        let mut batches: Vec<Vec<Item>> = Vec::new();
        for item in items {
            match batches.last_mut() {
                Some(b) if b.len() < 25 => b.push(item),
                _ => batches.push(vec![item]),
            }
        }
        let writes: Vec<_> = batches.into_iter().map(|b| self.write_batch(b)).collect();
        futures::stream::iter(writes)
            .buffer_unordered(LOADS_AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }
}
