//! Feedback rows and what reports read of them in DynamoDB.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use crate::{FeedbackRow, FeedbackStore, PayerSpread, Result, StoreError, Unix};

use super::{DynamoStore, PAYER_QUERIES_AT_ONCE, condition_failed, n, s, sdk};

#[async_trait]
impl FeedbackStore for DynamoStore {
    async fn put_feedback(&self, row: &FeedbackRow) -> Result<()> {
        let mut req = self
            .client
            .put_item()
            .table_name(&self.names.feedback)
            .item("tx_hash", s(&row.tx_hash))
            .item("merchant", s(&row.merchant))
            .item("payer", s(&row.payer))
            .item("outcome", s(&row.outcome))
            .item("amount_units", s(&row.amount_units))
            .item("block_time", n(row.block_time))
            .item("created_at", n(row.created_at))
            .condition_expression("attribute_not_exists(tx_hash)");
        if let Some(w) = row.would_repeat {
            req = req.item("would_repeat", AttributeValue::Bool(w));
        }
        if let Some(l) = row.latency_ms {
            req = req.item("latency_ms", n(l));
        }
        match req.send().await {
            Ok(_) => Ok(()),
            Err(e) if condition_failed(&e) => Err(StoreError::AlreadyExists),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn feedback_for_merchant(
        &self,
        merchant: &str,
        since: Unix,
        limit: usize,
    ) -> Result<Vec<FeedbackRow>> {
        self.feedback_on("by_merchant", "merchant", merchant, since, limit)
            .await
    }

    async fn payer_spreads(
        &self,
        payers: &[String],
        since: Unix,
        cap: usize,
    ) -> Result<Vec<PayerSpread>> {
        use futures::StreamExt as _;
        // Collected first: a lazy map's closure would make the future's Send bound
        // higher-ranked, which the trait's boxed future cannot carry.
        let lookups: Vec<_> = payers
            .iter()
            .map(|p| self.payer_spread(p, since, cap))
            .collect();
        futures::stream::iter(lookups)
            .buffered(PAYER_QUERIES_AT_ONCE)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }
}
