//! Verdicts, their documents, pass-2 keys and webhook attempts in DynamoDB.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValuesOnConditionCheckFailure;

use crate::{Finalize, Result, StoreError, Unix, VerdictRecord, VerdictStore, WebhookOutcome};

use super::{
    DynamoStore, Item, condition_failed, find_key, get_n, get_s, n, opt_s, s, sdk,
    verdict_from_item,
};

#[async_trait]
impl VerdictStore for DynamoStore {
    async fn put_verdict(&self, rec: &VerdictRecord) -> Result<()> {
        let mut item: Item = HashMap::from([
            ("verdict_id".into(), s(&rec.verdict_id)),
            ("tier".into(), s(rec.tier.as_str())),
            ("status".into(), s(rec.status.as_str())),
            ("secret_hash".into(), s(&rec.secret_hash)),
            ("spec_hash".into(), s(&rec.spec_hash)),
            ("created_at".into(), n(rec.created_at)),
            ("expires_at".into(), n(rec.expires_at)),
        ]);
        if let Some(d) = &rec.document {
            item.insert("document".into(), s(d));
        }
        if let Some(k) = &rec.job_key {
            item.insert("job_key".into(), s(k));
        }
        if let Some(p) = &rec.payer {
            item.insert("payer".into(), s(p));
        }
        if let Some(p) = &rec.preview {
            item.insert("preview".into(), s(p));
        }
        if let Some(w) = &rec.webhook_url {
            item.insert("webhook_url".into(), s(w));
            item.insert("find_key".into(), s(find_key(&rec.spec_hash, w)));
        }
        match self
            .client
            .put_item()
            .table_name(&self.names.verdicts)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(verdict_id)")
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if condition_failed(&e) => Err(StoreError::AlreadyExists),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn get_verdict(&self, verdict_id: &str, now: Unix) -> Result<Option<VerdictRecord>> {
        let item = self
            .get_item(&self.names.verdicts, "verdict_id", verdict_id)
            .await?;
        let rec = item.as_ref().map(verdict_from_item).transpose()?;
        // TTL deletes late; retention is what the expiry says.
        Ok(rec.filter(|r| r.expires_at > now))
    }

    async fn finalize_verdict(&self, verdict_id: &str, document: &str) -> Result<Finalize> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.verdicts)
            .key("verdict_id", s(verdict_id))
            // The job key goes with the pending state: copies of the pass-2 job can no
            // longer be opened.
            .update_expression("SET #s = :final, #d = :doc REMOVE job_key")
            .condition_expression("attribute_exists(verdict_id) AND #s = :pending")
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#d", "document")
            .expression_attribute_values(":final", s("final"))
            .expression_attribute_values(":pending", s("pending"))
            .expression_attribute_values(":doc", s(document))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match r {
            Ok(_) => Ok(Finalize::Done),
            Err(e) => match e.as_service_error() {
                Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(c)) => {
                    match c.item() {
                        None => Ok(Finalize::NotFound),
                        Some(old) => match opt_s(old, "document") {
                            Some(doc) if opt_s(old, "status").as_deref() == Some("final") => {
                                Ok(Finalize::AlreadyFinal(doc))
                            }
                            _ => Err(StoreError::Corrupt(format!("{verdict_id}: neither pending nor final"))),
                        },
                    }
                }
                _ => Err(sdk(e)),
            },
        }
    }

    async fn forget_job_key(&self, verdict_id: &str) -> Result<()> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.verdicts)
            .key("verdict_id", s(verdict_id))
            .update_expression("REMOVE job_key")
            // Never recreate a verdict that is gone (an update would).
            .condition_expression("attribute_exists(verdict_id)")
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e)
                if matches!(
                    e.as_service_error(),
                    Some(aws_sdk_dynamodb::operation::update_item::UpdateItemError::ConditionalCheckFailedException(_))
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(sdk(e)),
        }
    }

    async fn delete_verdict(&self, verdict_id: &str) -> Result<()> {
        self.client
            .delete_item()
            .table_name(&self.names.verdicts)
            .key("verdict_id", s(verdict_id))
            .send()
            .await
            .map(|_| ())
            .map_err(sdk)
    }

    async fn find_verdicts(
        &self,
        spec_hash: &str,
        webhook_url: &str,
        now: Unix,
    ) -> Result<Vec<String>> {
        let items = self
            .query_all(
                &self.names.verdicts,
                "by_find_key",
                "find_key = :fk",
                vec![(":fk", s(find_key(spec_hash, webhook_url)))],
                vec![],
            )
            .await?;
        let mut ids = Vec::new();
        for item in items {
            if get_n(&item, "expires_at")? > now {
                ids.push(get_s(&item, "verdict_id")?);
            }
        }
        Ok(ids)
    }

    async fn claim_webhook_attempt(
        &self,
        verdict_id: &str,
        attempt: u32,
        now: Unix,
        held_until: Unix,
    ) -> Result<bool> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.verdicts)
            .key("verdict_id", s(verdict_id))
            .update_expression(
                "SET webhook_attempt = :n, webhook_held_until = :held, webhook_done = if_not_exists(webhook_done, :zero)",
            )
            .condition_expression(
                "attribute_exists(verdict_id) AND attribute_not_exists(webhook_outcome) AND (attribute_not_exists(webhook_attempt) OR webhook_attempt < :n OR (webhook_attempt = :n AND webhook_done < :n AND webhook_held_until <= :now))",
            )
            .expression_attribute_values(":n", n(attempt.into()))
            .expression_attribute_values(":held", n(held_until))
            .expression_attribute_values(":now", n(now))
            .expression_attribute_values(":zero", n(0))
            .send()
            .await;
        match r {
            Ok(_) => Ok(true),
            Err(e) if condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn finish_webhook_attempt(&self, verdict_id: &str, attempt: u32) -> Result<()> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.verdicts)
            .key("verdict_id", s(verdict_id))
            .update_expression("SET webhook_done = :n")
            .condition_expression("webhook_attempt = :n")
            .expression_attribute_values(":n", n(attempt.into()))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            // A later attempt was claimed meanwhile: this one is behind it anyway.
            Err(e) if condition_failed(&e) => Ok(()),
            Err(e) => Err(sdk(e)),
        }
    }

    async fn record_webhook_outcome(
        &self,
        verdict_id: &str,
        outcome: WebhookOutcome,
    ) -> Result<()> {
        let r = self
            .client
            .update_item()
            .table_name(&self.names.verdicts)
            .key("verdict_id", s(verdict_id))
            .update_expression("SET webhook_outcome = :o")
            .condition_expression(
                "attribute_exists(verdict_id) AND attribute_not_exists(webhook_outcome)",
            )
            .expression_attribute_values(":o", s(outcome.as_str()))
            .send()
            .await;
        match r {
            Ok(_) => Ok(()),
            Err(e) if condition_failed(&e) => Ok(()),
            Err(e) => Err(sdk(e)),
        }
    }
}
