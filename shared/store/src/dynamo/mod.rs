//! The production store: DynamoDB through the AWS SDK. The table layout is data
//! ([`TABLES`]): `create_tables` builds it for tests and local stacks, and a test holds
//! `template.yaml` to exactly the same keys, indexes and TTL attributes.

mod channels;
mod feedback;
mod idempotency;
mod ledger;
mod rates;
mod verdicts;

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ScalarAttributeType, TimeToLiveSpecification,
};
use umpire_core::product::Tier;

use crate::{
    FeedbackRow, IdempotencyRecord, IdempotencyState, PaymentEntry, PaymentPhase, PaymentState,
    Result, StoreError, StoredResponse, VerdictRecord, VerdictStatus, WebhookOutcome,
};

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

/// batch-settlement channels: payment records that live as long as their channel (no
/// TTL); the sparse index lists the channels with charges not yet claimed on chain.
pub const CHANNELS: Table = Table {
    logical_id: "ChannelsTable",
    env: "UMPIRE_CHANNELS_TABLE",
    key: ("channel_id", "S"),
    indexes: &[Index {
        name: "by_unclaimed",
        partition_key: ("unclaimed", "S"),
        sort_key: None,
        include: None,
    }],
    ttl: None,
};

pub const TABLES: [Table; 6] = [
    VERDICTS,
    IDEMPOTENCY,
    PAYMENTS,
    RATE_LIMITS,
    FEEDBACK,
    CHANNELS,
];

/// The physical table names, from the environment (`UMPIRE_*_TABLE`) or a prefix.
#[derive(Debug, Clone)]
pub struct TableNames {
    pub verdicts: String,
    pub idempotency: String,
    pub payments: String,
    pub rate_limits: String,
    pub feedback: String,
    pub channels: String,
}

impl TableNames {
    pub fn with_prefix(prefix: &str) -> TableNames {
        TableNames {
            verdicts: format!("{prefix}verdicts"),
            idempotency: format!("{prefix}idempotency"),
            payments: format!("{prefix}payments"),
            rate_limits: format!("{prefix}rate-limits"),
            feedback: format!("{prefix}feedback"),
            channels: format!("{prefix}channels"),
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
            channels: get(CHANNELS, d.channels),
        }
    }

    fn name_of(&self, t: &Table) -> &str {
        match t.logical_id {
            "VerdictsTable" => &self.verdicts,
            "IdempotencyTable" => &self.idempotency,
            "PaymentsTable" => &self.payments,
            "RateLimitsTable" => &self.rate_limits,
            "ChannelsTable" => &self.channels,
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

/// Whether a conditional write applied: `false` when its condition failed, `Err` for
/// any other failure.
fn applied<T, E: ProvideErrorMetadata + std::fmt::Debug>(
    r: std::result::Result<T, SdkError<E>>,
) -> Result<bool> {
    match r {
        Ok(_) => Ok(true),
        Err(e) if condition_failed(&e) => Ok(false),
        Err(e) => Err(sdk(e)),
    }
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
            self.create_table(&t, &name).await?;
            if let Some(ttl) = t.ttl {
                self.enable_ttl(&name, ttl).await?;
            }
        }
        Ok(())
    }

    /// Creates the table `t` as `name`: on-demand billing, its key, the attributes its
    /// keys use and its secondary indexes.
    async fn create_table(&self, t: &Table, name: &str) -> Result<()> {
        let mut req = self
            .client
            .create_table()
            .table_name(name)
            .billing_mode(BillingMode::PayPerRequest)
            .key_schema(key_element(t.key.0, KeyType::Hash)?);
        for (a, ty) in key_attributes(t) {
            req = req.attribute_definitions(attribute_definition(a, ty)?);
        }
        for i in t.indexes {
            req = req.global_secondary_indexes(global_index(i)?);
        }
        req.send().await.map_err(sdk)?;
        Ok(())
    }

    /// Switches on expiry by the attribute `ttl` for the table `name`.
    async fn enable_ttl(&self, name: &str, ttl: &str) -> Result<()> {
        self.client
            .update_time_to_live()
            .table_name(name)
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

    async fn query_all(
        &self,
        table: &str,
        index: &str,
        key_condition: &str,
        values: Vec<(&str, AttributeValue)>,
        names: Vec<(&str, &str)>,
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        self.query_each(table, index, key_condition, None, values, names, |item| {
            out.push(item);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Every item a query (and its optional filter) answers, page by page, each handed
    /// to `each` as its page arrives (a large answer is never held raw all at once).
    #[allow(clippy::too_many_arguments)]
    async fn query_each(
        &self,
        table: &str,
        index: &str,
        key_condition: &str,
        filter: Option<&str>,
        values: Vec<(&str, AttributeValue)>,
        names: Vec<(&str, &str)>,
        mut each: impl FnMut(Item) -> Result<()> + Send,
    ) -> Result<()> {
        let mut start: Option<Item> = None;
        loop {
            let mut q = self
                .client
                .query()
                .table_name(table)
                .index_name(index)
                .key_condition_expression(key_condition)
                .set_filter_expression(filter.map(str::to_owned))
                .set_exclusive_start_key(start.take());
            for (k, v) in &values {
                q = q.expression_attribute_values(*k, v.clone());
            }
            for (k, v) in &names {
                q = q.expression_attribute_names(*k, *v);
            }
            let page = q.send().await.map_err(sdk)?;
            for item in page.items.unwrap_or_default() {
                each(item)?;
            }
            match page.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => return Ok(()),
            }
        }
    }
}

/// Every attribute a key of `t` (the table's or an index's) uses, as (name, type),
/// sorted and without duplicates.
fn key_attributes(t: &Table) -> Vec<(&'static str, &'static str)> {
    let mut attrs: Vec<(&'static str, &'static str)> = vec![t.key];
    for i in t.indexes {
        attrs.push(i.partition_key);
        attrs.extend(i.sort_key);
    }
    attrs.sort();
    attrs.dedup();
    attrs
}

/// The DynamoDB type of a key attribute: "N" is a number, anything else a string.
fn scalar_type(ty: &str) -> ScalarAttributeType {
    if ty == "N" {
        ScalarAttributeType::N
    } else {
        ScalarAttributeType::S
    }
}

/// One element of a key schema: the attribute `name` as hash or range key.
fn key_element(name: &str, kt: KeyType) -> Result<KeySchemaElement> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kt)
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// The definition of the key attribute `name` of type `ty` ("S"/"N").
fn attribute_definition(name: &str, ty: &str) -> Result<AttributeDefinition> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(scalar_type(ty))
        .build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

/// What an index projects: ALL, or only the listed non-key attributes.
fn projection(i: &Index) -> Projection {
    match i.include {
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
    }
}

/// The global secondary index `i`: its keys and projection.
fn global_index(i: &Index) -> Result<GlobalSecondaryIndex> {
    let mut g = GlobalSecondaryIndex::builder()
        .index_name(i.name)
        .key_schema(key_element(i.partition_key.0, KeyType::Hash)?)
        .projection(projection(i));
    if let Some((sk, _)) = i.sort_key {
        g = g.key_schema(key_element(sk, KeyType::Range)?);
    }
    g.build()
        .map_err(|e| StoreError::Unavailable(e.to_string()))
}

fn verdict_from_item(item: &Item) -> Result<VerdictRecord> {
    let status = get_s(item, "status")?;
    Ok(VerdictRecord {
        verdict_id: get_s(item, "verdict_id")?,
        tier: {
            let text = get_s(item, "tier")?;
            Tier::parse(&text)
                .ok_or_else(|| StoreError::Corrupt(format!("{text:?} is not a tier")))?
        },
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
        payer: opt_s(item, "payer"),
    })
}

fn idempotency_from_item(item: &Item) -> Result<IdempotencyRecord> {
    let key = get_s(item, "idem_key")?;
    let state = match get_s(item, "status")?.as_str() {
        "COMPLETED" => {
            let text = get_s(item, "response")?;
            IdempotencyState::Completed(StoredResponse::decode(&text)?)
        }
        "PENDING" => IdempotencyState::Pending {
            payment_key: get_s(item, "payment_key")?,
        },
        _ => IdempotencyState::InProgress {
            until: get_n(item, "in_progress_until")?,
        },
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
            kept_until: opt_n(item, "kept_until").unwrap_or_default(),
        },
        Some(PaymentPhase::Settled) => PaymentState::Settled {
            transaction: get_s(item, "tx_hash")?,
            response: StoredResponse::decode(&get_s(item, "response")?)?,
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
        PaymentState::Prepared { answer, kept_until } => {
            vec![("answer", s(answer)), ("kept_until", n(*kept_until))]
        }
        PaymentState::Settled {
            transaction,
            response,
        } => vec![
            ("tx_hash", s(transaction)),
            ("response", s(response.encode()?)),
        ],
        PaymentState::Voided { reason } => vec![("reason", s(reason))],
    })
}

/// Every state-specific attribute a payment item may carry.
const PAYMENT_STATE_ATTRIBUTES: [&str; 5] =
    ["answer", "kept_until", "tx_hash", "response", "reason"];

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
        anchor: item
            .get("anchor")
            .and_then(|v| v.as_bool().ok())
            .copied()
            .unwrap_or(false),
    })
}
