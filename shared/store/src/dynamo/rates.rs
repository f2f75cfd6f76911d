//! Rate-limit counters in DynamoDB.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;

use crate::{RateStore, Result, StoreError, Unix};

use super::{DynamoStore, n, opt_n, s, sdk};

#[async_trait]
impl RateStore for DynamoStore {
    async fn count_request(&self, bucket: &str, expires_at: Unix) -> Result<u64> {
        let out = self
            .client
            .update_item()
            .table_name(&self.names.rate_limits)
            .key("bucket", s(bucket))
            .update_expression("ADD #c :one SET expires_at = if_not_exists(expires_at, :exp)")
            .expression_attribute_names("#c", "count")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":exp", n(expires_at))
            .return_values(ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(sdk)?;
        out.attributes
            .as_ref()
            .and_then(|a| opt_n(a, "count"))
            .ok_or_else(|| StoreError::Corrupt("rate-limit counter without a count".into()))
    }
}
