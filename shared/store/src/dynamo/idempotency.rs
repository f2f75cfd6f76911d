//! Idempotency keys in DynamoDB.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use crate::{Claim, IdempotencyRecord, IdempotencyStore, Result, StoreError, StoredResponse, Unix};

use super::{DynamoStore, condition_failed, idempotency_from_item, n, s, sdk};

#[async_trait]
impl IdempotencyStore for DynamoStore {
    async fn claim_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        now: Unix,
        in_progress_until: Unix,
        expires_at: Unix,
    ) -> Result<Claim> {
        let r = self
            .client
            .put_item()
            .table_name(&self.names.idempotency)
            .item("idem_key", s(key))
            .item("request_hash", s(request_hash))
            .item("status", s("INPROGRESS"))
            .item("in_progress_until", n(in_progress_until))
            .item("expires_at", n(expires_at))
            .condition_expression(
                "attribute_not_exists(idem_key) OR expires_at <= :now OR (#s = :inprogress AND in_progress_until <= :now)",
            )
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":inprogress", s("INPROGRESS"))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match r {
            Ok(_) => Ok(Claim::Won),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c)) => {
                    match c.item() {
                        Some(old) => Ok(Claim::Held(idempotency_from_item(old)?)),
                        // The holder vanished between our check and its answer: read it.
                        None => match self.get_idempotency(key, now).await? {
                            Some(rec) => Ok(Claim::Held(rec)),
                            None => Err(StoreError::Unavailable("idempotency record changed during claim; retry".into())),
                        },
                    }
                }
                _ => Err(sdk(e)),
            },
        }
    }

    async fn complete_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        response: &StoredResponse,
        expires_at: Unix,
    ) -> Result<()> {
        let text = response.encode()?;
        let r = self
            .client
            .update_item()
            .table_name(&self.names.idempotency)
            .key("idem_key", s(key))
            .update_expression("SET #s = :completed, #r = :resp, expires_at = :exp")
            .condition_expression("request_hash = :h AND #s = :inprogress")
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#r", "response")
            .expression_attribute_values(":inprogress", s("INPROGRESS"))
            .expression_attribute_values(":completed", s("COMPLETED"))
            .expression_attribute_values(":resp", s(text))
            .expression_attribute_values(":exp", n(expires_at))
            .expression_attribute_values(":h", s(request_hash))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            // Someone else's claim (ours lapsed and was taken over): theirs wins.
            Err(e) if condition_failed(&e) => Ok(()),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn release_idempotency(&self, key: &str, request_hash: &str) -> Result<()> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.names.idempotency)
            .key("idem_key", s(key))
            .condition_expression("request_hash = :h AND #s = :inprogress")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":h", s(request_hash))
            .expression_attribute_values(":inprogress", s("INPROGRESS"))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if condition_failed(&e) => Ok(()),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn pend_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
        expires_at: Unix,
    ) -> Result<bool> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.idempotency)
            .key("idem_key", s(key))
            .update_expression("SET #s = :pending, payment_key = :p, expires_at = :exp")
            .condition_expression("request_hash = :h AND #s = :inprogress")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":pending", s("PENDING"))
            .expression_attribute_values(":inprogress", s("INPROGRESS"))
            .expression_attribute_values(":p", s(payment_key))
            .expression_attribute_values(":exp", n(expires_at))
            .expression_attribute_values(":h", s(request_hash))
            .send()
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn complete_bound_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
        response: &StoredResponse,
        expires_at: Unix,
    ) -> Result<bool> {
        let text = response.encode()?;
        let r = self
            .client
            .update_item()
            .table_name(&self.names.idempotency)
            .key("idem_key", s(key))
            .update_expression(
                "SET #s = :completed, #r = :resp, expires_at = :exp REMOVE payment_key",
            )
            .condition_expression("request_hash = :h AND #s = :pending AND payment_key = :p")
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#r", "response")
            .expression_attribute_values(":completed", s("COMPLETED"))
            .expression_attribute_values(":pending", s("PENDING"))
            .expression_attribute_values(":resp", s(text))
            .expression_attribute_values(":exp", n(expires_at))
            .expression_attribute_values(":h", s(request_hash))
            .expression_attribute_values(":p", s(payment_key))
            .send()
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn release_bound_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
    ) -> Result<bool> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.names.idempotency)
            .key("idem_key", s(key))
            .condition_expression("request_hash = :h AND #s = :pending AND payment_key = :p")
            .expression_attribute_names("#s", "status")
            .expression_attribute_values(":h", s(request_hash))
            .expression_attribute_values(":pending", s("PENDING"))
            .expression_attribute_values(":p", s(payment_key))
            .send()
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn get_idempotency(&self, key: &str, now: Unix) -> Result<Option<IdempotencyRecord>> {
        let item = self
            .get_item(&self.names.idempotency, "idem_key", key)
            .await?;
        let rec = item.as_ref().map(idempotency_from_item).transpose()?;
        Ok(rec.filter(|r| r.expires_at > now))
    }
}
