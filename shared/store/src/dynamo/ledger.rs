//! The purchase ledger in DynamoDB.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use crate::{
    LedgerStore, PaymentClaim, PaymentEntry, PaymentHold, PaymentMove, PaymentPhase, Result,
    StoreError, Unix,
};

use super::{
    DynamoStore, PAYMENT_STATE_ATTRIBUTES, condition_failed, n, payment_attributes,
    payment_from_item, s, sdk,
};

#[async_trait]
impl LedgerStore for DynamoStore {
    async fn claim_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        hold: &PaymentHold,
    ) -> Result<PaymentClaim> {
        let PaymentHold {
            now,
            held_until,
            expires_at,
        } = *hold;
        // The condition is PaymentEntry::is_free, spelled for DynamoDB.
        let r = self
            .client
            .put_item()
            .table_name(&self.names.payments)
            .item("payment_key", s(payment_key))
            .item("request_hash", s(request_hash))
            .item("phase", s(PaymentPhase::Claimed.as_str()))
            .item("held_until", n(held_until))
            .item("expires_at", n(expires_at))
            .condition_expression(
                "attribute_not_exists(payment_key) OR expires_at <= :now OR #p = :voided OR (#p = :claimed AND held_until <= :now) OR (#p = :prepared AND held_until <= :now AND (attribute_not_exists(kept_until) OR kept_until <= :now))",
            )
            .expression_attribute_names("#p", "phase")
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":voided", s(PaymentPhase::Voided.as_str()))
            .expression_attribute_values(":claimed", s(PaymentPhase::Claimed.as_str()))
            .expression_attribute_values(":prepared", s(PaymentPhase::Prepared.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match r {
            Ok(_) => Ok(PaymentClaim::Won),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::put_item::PutItemError::ConditionalCheckFailedException(c)) => {
                    match c.item() {
                        Some(old) => Ok(PaymentClaim::Held(payment_from_item(old)?)),
                        None => match self.get_payment(payment_key, now).await? {
                            Some(entry) => Ok(PaymentClaim::Held(entry)),
                            None => Err(StoreError::Unavailable(
                                "payment entry changed during claim; retry".into(),
                            )),
                        },
                    }
                }
                _ => Err(sdk(e)),
            },
        }
    }

    async fn move_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        step: &PaymentMove,
    ) -> Result<bool> {
        let set = payment_attributes(&step.to)?;
        let mut update = "SET #p = :to, held_until = :held, expires_at = :exp".to_owned();
        for (i, _) in set.iter().enumerate() {
            update.push_str(&format!(", #a{i} = :a{i}"));
        }
        let removed: Vec<&str> = PAYMENT_STATE_ATTRIBUTES
            .into_iter()
            .filter(|a| !set.iter().any(|(k, _)| k == a))
            .collect();
        if !removed.is_empty() {
            let names: Vec<String> = (0..removed.len()).map(|i| format!("#r{i}")).collect();
            update.push_str(&format!(" REMOVE {}", names.join(", ")));
        }
        let mut condition = "request_hash = :h AND #p = :from".to_owned();
        if step.lapsed_at.is_some() {
            condition.push_str(" AND held_until <= :lapsed");
        }
        let mut req = self
            .client
            .update_item()
            .table_name(&self.names.payments)
            .key("payment_key", s(payment_key))
            .update_expression(update)
            .condition_expression(condition)
            .expression_attribute_names("#p", "phase")
            .expression_attribute_values(":to", s(step.to.phase().as_str()))
            .expression_attribute_values(":held", n(step.held_until))
            .expression_attribute_values(":exp", n(step.expires_at))
            .expression_attribute_values(":h", s(request_hash))
            .expression_attribute_values(":from", s(step.from.as_str()));
        for (i, (k, v)) in set.into_iter().enumerate() {
            req = req
                .expression_attribute_names(format!("#a{i}"), k)
                .expression_attribute_values(format!(":a{i}"), v);
        }
        for (i, k) in removed.into_iter().enumerate() {
            req = req.expression_attribute_names(format!("#r{i}"), k);
        }
        if let Some(at) = step.lapsed_at {
            req = req.expression_attribute_values(":lapsed", n(at));
        }
        match req.send().await {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn get_payment(&self, payment_key: &str, now: Unix) -> Result<Option<PaymentEntry>> {
        let item = self
            .get_item(&self.names.payments, "payment_key", payment_key)
            .await?;
        let entry = item.as_ref().map(payment_from_item).transpose()?;
        Ok(entry.filter(|e| e.expires_at > now))
    }
}
