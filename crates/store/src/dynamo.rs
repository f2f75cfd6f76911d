//! The production store: DynamoDB through the AWS SDK. The table layout is data
//! ([`TABLES`]): `create_tables` builds it for tests and local stacks, and a test holds
//! `template.yaml` to exactly the same keys, indexes and TTL attributes.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ReturnValue, ReturnValuesOnConditionCheckFailure,
    ScalarAttributeType, TimeToLiveSpecification,
};

use crate::{
    Claim, FeedbackRow, Finalize, IdempotencyRecord, IdempotencyState, PayerSpread, PaymentClaim,
    PaymentEntry, PaymentMove, PaymentPhase, PaymentState, Result, Store, StoreError,
    StoredResponse, Unix, VerdictRecord, VerdictStatus, WebhookOutcome,
};

/// Payer index queries in flight at once for one report.
const PAYER_QUERIES_AT_ONCE: usize = 32;

/// One secondary index.
#[derive(Debug, Clone, Copy)]
pub struct Index {
    pub name: &'static str,
    pub partition_key: (&'static str, &'static str),
    pub sort_key: Option<(&'static str, &'static str)>,
    /// Non-key attributes projected; `None` projects ALL.
    pub include: Option<&'static [&'static str]>,
}

/// One table: its CloudFormation logical id, the environment variable naming it, its
/// key (name, type "S"/"N"), indexes and TTL attribute.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub logical_id: &'static str,
    pub env: &'static str,
    pub key: (&'static str, &'static str),
    pub indexes: &'static [Index],
    pub ttl: Option<&'static str>,
}

pub const VERDICTS: Table = Table {
    logical_id: "VerdictsTable",
    env: "UMPIRE_VERDICTS_TABLE",
    key: ("verdict_id", "S"),
    // Sparse: only verdicts with a webhook carry find_key = spec_hash "#" webhook_url.
    indexes: &[Index {
        name: "by_find_key",
        partition_key: ("find_key", "S"),
        sort_key: Some(("created_at", "N")),
        include: Some(&["expires_at"]),
    }],
    ttl: Some("expires_at"),
};

pub const IDEMPOTENCY: Table = Table {
    logical_id: "IdempotencyTable",
    env: "UMPIRE_IDEMPOTENCY_TABLE",
    key: ("idem_key", "S"),
    indexes: &[],
    ttl: Some("expires_at"),
};

/// The purchase ledger: one entry per payment, keyed by what the chain dedupes on.
pub const PAYMENTS: Table = Table {
    logical_id: "PaymentsTable",
    env: "UMPIRE_PAYMENTS_TABLE",
    key: ("payment_key", "S"),
    indexes: &[],
    ttl: Some("expires_at"),
};

pub const RATE_LIMITS: Table = Table {
    logical_id: "RateLimitsTable",
    env: "UMPIRE_RATE_LIMITS_TABLE",
    key: ("bucket", "S"),
    indexes: &[],
    ttl: Some("expires_at"),
};

/// Feedback is permanent: no TTL. One row per transaction is the primary key itself.
pub const FEEDBACK: Table = Table {
    logical_id: "FeedbackTable",
    env: "UMPIRE_FEEDBACK_TABLE",
    key: ("tx_hash", "S"),
    indexes: &[
        Index {
            name: "by_merchant",
            partition_key: ("merchant", "S"),
            sort_key: Some(("block_time", "N")),
            include: None,
        },
        Index {
            name: "by_payer",
            partition_key: ("payer", "S"),
            sort_key: Some(("block_time", "N")),
            include: None,
        },
    ],
    ttl: None,
};

pub const TABLES: [Table; 5] = [VERDICTS, IDEMPOTENCY, PAYMENTS, RATE_LIMITS, FEEDBACK];

/// The physical table names, from the environment (`UMPIRE_*_TABLE`) or a prefix.
#[derive(Debug, Clone)]
pub struct TableNames {
    pub verdicts: String,
    pub idempotency: String,
    pub payments: String,
    pub rate_limits: String,
    pub feedback: String,
}

impl TableNames {
    pub fn with_prefix(prefix: &str) -> TableNames {
        TableNames {
            verdicts: format!("{prefix}verdicts"),
            idempotency: format!("{prefix}idempotency"),
            payments: format!("{prefix}payments"),
            rate_limits: format!("{prefix}rate-limits"),
            feedback: format!("{prefix}feedback"),
        }
    }

    pub fn from_env() -> TableNames {
        let d = TableNames::with_prefix("umpire-");
        let get = |t: Table, default: String| std::env::var(t.env).unwrap_or(default);
        TableNames {
            verdicts: get(VERDICTS, d.verdicts),
            idempotency: get(IDEMPOTENCY, d.idempotency),
            payments: get(PAYMENTS, d.payments),
            rate_limits: get(RATE_LIMITS, d.rate_limits),
            feedback: get(FEEDBACK, d.feedback),
        }
    }

    fn name_of(&self, t: &Table) -> &str {
        match t.logical_id {
            "VerdictsTable" => &self.verdicts,
            "IdempotencyTable" => &self.idempotency,
            "PaymentsTable" => &self.payments,
            "RateLimitsTable" => &self.rate_limits,
            _ => &self.feedback,
        }
    }
}

#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    names: TableNames,
}

type Item = HashMap<String, AttributeValue>;

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s(item: &Item, k: &str) -> Result<String> {
    item.get(k)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .ok_or_else(|| StoreError::Corrupt(format!("attribute {k} missing or not a string")))
}

fn opt_s(item: &Item, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

fn get_n(item: &Item, k: &str) -> Result<u64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| StoreError::Corrupt(format!("attribute {k} missing or not a number")))
}

fn opt_n(item: &Item, k: &str) -> Option<u64> {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .and_then(|t| t.parse().ok())
}

fn sdk<E: std::fmt::Debug>(e: SdkError<E>) -> StoreError {
    StoreError::Unavailable(format!("{e:?}").chars().take(500).collect())
}

/// A conditional write lost (the item exists or is in another state).
fn condition_failed<E: ProvideErrorMetadata>(e: &SdkError<E>) -> bool {
    e.as_service_error().and_then(ProvideErrorMetadata::code)
        == Some("ConditionalCheckFailedException")
}

fn find_key(spec_hash: &str, webhook_url: &str) -> String {
    format!("{spec_hash}#{webhook_url}")
}

impl DynamoStore {
    pub fn new(client: Client, names: TableNames) -> DynamoStore {
        DynamoStore { client, names }
    }

    /// Client from an already loaded AWS configuration (load it once per cold start).
    pub fn from_config(config: &aws_types::SdkConfig, names: TableNames) -> DynamoStore {
        DynamoStore::new(Client::new(config), names)
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Creates every table as [`TABLES`] describes (on-demand billing, TTL).
    pub async fn create_tables(&self) -> Result<()> {
        for t in TABLES {
            let name = self.names.name_of(&t).to_owned();
            let mut attrs: Vec<(&str, &str)> = vec![t.key];
            for i in t.indexes {
                attrs.push(i.partition_key);
                attrs.extend(i.sort_key);
            }
            attrs.sort();
            attrs.dedup();
            let scalar = |ty: &str| {
                if ty == "N" {
                    ScalarAttributeType::N
                } else {
                    ScalarAttributeType::S
                }
            };
            let key_el = |name: &str, kt: KeyType| {
                KeySchemaElement::builder()
                    .attribute_name(name)
                    .key_type(kt)
                    .build()
                    .map_err(|e| StoreError::Unavailable(e.to_string()))
            };
            let mut req = self
                .client
                .create_table()
                .table_name(&name)
                .billing_mode(BillingMode::PayPerRequest)
                .key_schema(key_el(t.key.0, KeyType::Hash)?);
            for (a, ty) in attrs {
                req = req.attribute_definitions(
                    AttributeDefinition::builder()
                        .attribute_name(a)
                        .attribute_type(scalar(ty))
                        .build()
                        .map_err(|e| StoreError::Unavailable(e.to_string()))?,
                );
            }
            for i in t.indexes {
                let projection = match i.include {
                    None => Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                    Some(attrs) => attrs
                        .iter()
                        .fold(
                            Projection::builder().projection_type(ProjectionType::Include),
                            |p, a| p.non_key_attributes(*a),
                        )
                        .build(),
                };
                let mut g = GlobalSecondaryIndex::builder()
                    .index_name(i.name)
                    .key_schema(key_el(i.partition_key.0, KeyType::Hash)?)
                    .projection(projection);
                if let Some((sk, _)) = i.sort_key {
                    g = g.key_schema(key_el(sk, KeyType::Range)?);
                }
                req = req.global_secondary_indexes(
                    g.build()
                        .map_err(|e| StoreError::Unavailable(e.to_string()))?,
                );
            }
            req.send().await.map_err(sdk)?;
            if let Some(ttl) = t.ttl {
                self.client
                    .update_time_to_live()
                    .table_name(&name)
                    .time_to_live_specification(
                        TimeToLiveSpecification::builder()
                            .attribute_name(ttl)
                            .enabled(true)
                            .build()
                            .map_err(|e| StoreError::Unavailable(e.to_string()))?,
                    )
                    .send()
                    .await
                    .map_err(sdk)?;
            }
        }
        Ok(())
    }

    /// One item by key, read consistently.
    async fn get_item(&self, table: &str, key: &str, value: &str) -> Result<Option<Item>> {
        let out = self
            .client
            .get_item()
            .table_name(table)
            .key(key, s(value))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk)?;
        Ok(out.item)
    }

    /// Feedback rows on one index (merchant or payer) since a block time, newest
    /// first, at most `limit`: the query walks the index backwards and stops there.
    async fn feedback_on(
        &self,
        index: &str,
        attr: &str,
        who: &str,
        since: Unix,
        limit: usize,
    ) -> Result<Vec<FeedbackRow>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let page = self
                .client
                .query()
                .table_name(&self.names.feedback)
                .index_name(index)
                .key_condition_expression("#who = :who AND block_time >= :since")
                .expression_attribute_names("#who", attr)
                .expression_attribute_values(":who", s(who))
                .expression_attribute_values(":since", n(since))
                .scan_index_forward(false)
                .limit(i32::try_from(limit - out.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(sdk)?;
            for item in page.items.unwrap_or_default() {
                out.push(feedback_from_item(&item)?);
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        // Same block time: the index order among them is unspecified; make it stable.
        out.sort_by(|a, b| (b.block_time, &b.tx_hash).cmp(&(a.block_time, &a.tx_hash)));
        out.truncate(limit);
        Ok(out)
    }

    /// One payer's spread: its rows in the window (by_payer, only `merchant` read),
    /// page by page until both counts reach `cap`.
    async fn payer_spread(&self, payer: &str, since: Unix, cap: usize) -> Result<PayerSpread> {
        let mut rows = 0usize;
        let mut merchants: Vec<String> = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.names.feedback)
                .index_name("by_payer")
                .key_condition_expression("payer = :p AND block_time >= :since")
                .expression_attribute_values(":p", s(payer))
                .expression_attribute_values(":since", n(since))
                .projection_expression("merchant")
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(sdk)?;
            for item in page.items() {
                rows += 1;
                let m = opt_s(item, "merchant").unwrap_or_default();
                if merchants.len() < cap && !merchants.contains(&m) {
                    merchants.push(m);
                }
            }
            let done = rows >= cap && merchants.len() >= cap;
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() && !done => start = Some(k),
                _ => break,
            }
        }
        Ok(PayerSpread {
            rows: rows.min(cap),
            merchants: merchants.len(),
        })
    }

    async fn query_all(
        &self,
        table: &str,
        index: &str,
        key_condition: &str,
        values: Vec<(&str, AttributeValue)>,
        names: Vec<(&str, &str)>,
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let mut q = self
                .client
                .query()
                .table_name(table)
                .index_name(index)
                .key_condition_expression(key_condition)
                .set_exclusive_start_key(start.take());
            for (k, v) in &values {
                q = q.expression_attribute_values(*k, v.clone());
            }
            for (k, v) in &names {
                q = q.expression_attribute_names(*k, *v);
            }
            let page = q.send().await.map_err(sdk)?;
            out.extend(page.items.unwrap_or_default());
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(out),
            }
        }
    }
}

fn verdict_from_item(item: &Item) -> Result<VerdictRecord> {
    let status = get_s(item, "status")?;
    Ok(VerdictRecord {
        verdict_id: get_s(item, "verdict_id")?,
        tier: get_s(item, "tier")?,
        status: VerdictStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("verdict status {status:?}")))?,
        document: opt_s(item, "document"),
        preview: opt_s(item, "preview"),
        secret_hash: get_s(item, "secret_hash")?,
        spec_hash: get_s(item, "spec_hash")?,
        webhook_url: opt_s(item, "webhook_url"),
        created_at: get_n(item, "created_at")?,
        expires_at: get_n(item, "expires_at")?,
        webhook_outcome: opt_s(item, "webhook_outcome")
            .as_deref()
            .and_then(WebhookOutcome::parse),
        job_key: opt_s(item, "job_key"),
    })
}

fn idempotency_from_item(item: &Item) -> Result<IdempotencyRecord> {
    let key = get_s(item, "idem_key")?;
    let state = if get_s(item, "status")? == "COMPLETED" {
        let text = get_s(item, "response")?;
        IdempotencyState::Completed(
            serde_json::from_str::<StoredResponse>(&text)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        )
    } else {
        IdempotencyState::InProgress {
            until: get_n(item, "in_progress_until")?,
        }
    };
    Ok(IdempotencyRecord {
        key,
        request_hash: get_s(item, "request_hash")?,
        state,
        expires_at: get_n(item, "expires_at")?,
    })
}

fn payment_from_item(item: &Item) -> Result<PaymentEntry> {
    let key = get_s(item, "payment_key")?;
    let phase = get_s(item, "phase")?;
    let state = match PaymentPhase::parse(&phase) {
        Some(PaymentPhase::Claimed) => PaymentState::Claimed,
        Some(PaymentPhase::Prepared) => PaymentState::Prepared {
            answer: get_s(item, "answer")?,
        },
        Some(PaymentPhase::Settled) => PaymentState::Settled {
            transaction: get_s(item, "tx_hash")?,
            response: serde_json::from_str(&get_s(item, "response")?)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        },
        Some(PaymentPhase::Voided) => PaymentState::Voided {
            reason: opt_s(item, "reason").unwrap_or_default(),
        },
        None => {
            return Err(StoreError::Corrupt(format!(
                "payment {key}: phase {phase:?}"
            )));
        }
    };
    Ok(PaymentEntry {
        payment_key: key,
        request_hash: get_s(item, "request_hash")?,
        state,
        held_until: get_n(item, "held_until")?,
        expires_at: get_n(item, "expires_at")?,
    })
}

/// The state-specific attributes of a payment state; the others are removed.
fn payment_attributes(state: &PaymentState) -> Result<Vec<(&'static str, AttributeValue)>> {
    Ok(match state {
        PaymentState::Claimed => Vec::new(),
        PaymentState::Prepared { answer } => vec![("answer", s(answer))],
        PaymentState::Settled {
            transaction,
            response,
        } => vec![
            ("tx_hash", s(transaction)),
            (
                "response",
                s(serde_json::to_string(response)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?),
            ),
        ],
        PaymentState::Voided { reason } => vec![("reason", s(reason))],
    })
}

/// Every state-specific attribute a payment item may carry.
const PAYMENT_STATE_ATTRIBUTES: [&str; 4] = ["answer", "tx_hash", "response", "reason"];

fn feedback_from_item(item: &Item) -> Result<FeedbackRow> {
    Ok(FeedbackRow {
        tx_hash: get_s(item, "tx_hash")?,
        merchant: get_s(item, "merchant")?,
        payer: get_s(item, "payer")?,
        outcome: get_s(item, "outcome")?,
        would_repeat: item
            .get("would_repeat")
            .and_then(|v| v.as_bool().ok())
            .copied(),
        latency_ms: opt_n(item, "latency_ms"),
        amount_units: get_s(item, "amount_units")?,
        block_time: get_n(item, "block_time")?,
        created_at: get_n(item, "created_at")?,
    })
}

#[async_trait]
impl Store for DynamoStore {
    async fn put_verdict(&self, rec: &VerdictRecord) -> Result<()> {
        let mut item: Item = HashMap::from([
            ("verdict_id".into(), s(&rec.verdict_id)),
            ("tier".into(), s(&rec.tier)),
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
        let text =
            serde_json::to_string(response).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let r = self
            .client
            .update_item()
            .table_name(&self.names.idempotency)
            .key("idem_key", s(key))
            .update_expression("SET #s = :completed, #r = :resp, expires_at = :exp")
            .condition_expression("request_hash = :h")
            .expression_attribute_names("#s", "status")
            .expression_attribute_names("#r", "response")
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

    async fn get_idempotency(&self, key: &str, now: Unix) -> Result<Option<IdempotencyRecord>> {
        let item = self
            .get_item(&self.names.idempotency, "idem_key", key)
            .await?;
        let rec = item.as_ref().map(idempotency_from_item).transpose()?;
        Ok(rec.filter(|r| r.expires_at > now))
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

    async fn claim_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        now: Unix,
        held_until: Unix,
        expires_at: Unix,
    ) -> Result<PaymentClaim> {
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
                "attribute_not_exists(payment_key) OR expires_at <= :now OR #p = :voided OR (#p IN (:claimed, :prepared) AND held_until <= :now)",
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
