//! Persistence behind a trait per concern (verdicts, idempotency, the purchase ledger,
//! rate counters, feedback, batch-settlement channels; `Store` is all six) and the job
//! queue, implemented twice: DynamoDB + SQS for AWS, and an embedded SQLite database for
//! `umpire serve`. One conformance suite (`tests/conformance.rs`, `tests/channels.rs`)
//! holds both to the same behaviour.
//!
//! Retention is enforced on read: every record with an expiry is invisible once it
//! has passed, whatever the backend's background deletion (DynamoDB TTL runs up to days
//! late; local emulators never run it). Deliverables are never stored here, except
//! inside a sworn pass-2 job, which lives only until pass 2.

pub mod aggregates;
pub mod channels;
#[cfg(feature = "aws")]
pub mod dynamo;
pub mod sqlite;
#[cfg(feature = "aws")]
pub mod sqs;

pub use channels::ChannelStore;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use umpire_core::product::Tier;

/// Seconds since the Unix epoch.
pub type Unix = u64;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The record already exists (a conditional create lost).
    #[error("already exists")]
    AlreadyExists,
    /// The backend could not be reached or failed; safe to retry.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// A stored record could not be read back.
    #[error("stored record is unreadable: {0}")]
    Corrupt(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerdictStatus {
    /// Sworn pass 1 is done; pass 2 is scheduled.
    Pending,
    /// The final signed document exists.
    Final,
}

impl VerdictStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            VerdictStatus::Pending => "pending",
            VerdictStatus::Final => "final",
        }
    }

    pub fn parse(s: &str) -> Option<VerdictStatus> {
        match s {
            "pending" => Some(VerdictStatus::Pending),
            "final" => Some(VerdictStatus::Final),
            _ => None,
        }
    }
}

/// A verdict as stored: no deliverable, only hashes and the signed documents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictRecord {
    pub verdict_id: String,
    pub tier: Tier,
    pub status: VerdictStatus,
    /// The final signed document (stable JSON text), once there is one.
    pub document: Option<String>,
    /// Sworn: the pass-1 preview shown while pending (stable JSON text).
    pub preview: Option<String>,
    /// Lowercase hex sha256 of the one-time secret (also the webhook HMAC key).
    pub secret_hash: String,
    pub spec_hash: String,
    pub webhook_url: Option<String>,
    pub created_at: Unix,
    pub expires_at: Unix,
    /// What the sworn webhook came to, once it did (set by
    /// [`VerdictStore::record_webhook_outcome`], never by `put_verdict`).
    pub webhook_outcome: Option<WebhookOutcome>,
    /// Sworn, while pending: the data key (hex) its pass-2 job's deliverable is sealed
    /// under (`umpire_core::seal`). `finalize_verdict` removes it, and deleting the
    /// verdict deletes it, so every copy of the job (retries, the DLQ) is unreadable
    /// from then on. Never serialized (a record travels in a ledger entry's prepared
    /// answer): only the stores' own columns hold it.
    #[serde(skip)]
    pub job_key: Option<String>,
    /// The wallet that paid for it (an EVM address, checksummed, or a Solana address):
    /// it may read the verdict by proving the wallet (sign-in-with-x) instead of the
    /// secret. None for verdicts bought before it was kept.
    #[serde(default)]
    pub payer: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finalize {
    /// This call moved the verdict from pending to final.
    Done,
    /// It was already final; here is the document that made it so.
    AlreadyFinal(String),
    NotFound,
}

/// A response kept so an idempotent retry gets exactly the same answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Response bodies are UTF-8 JSON.
    pub body: String,
}

impl StoredResponse {
    /// The text both stores keep it as.
    pub fn encode(&self) -> Result<String> {
        serde_json::to_string(self).map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    /// Reads [`StoredResponse::encode`]'s text back; anything else is corrupt.
    pub fn decode(text: &str) -> Result<StoredResponse> {
        serde_json::from_str(text).map_err(|e| StoreError::Corrupt(e.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyState {
    /// Claimed by a request still running; others wait until `until`.
    InProgress {
        until: Unix,
    },
    Completed(StoredResponse),
    /// Bound to a purchase whose settlement's outcome is not known yet (the payment's
    /// ledger key): the key answers that purchase's pending state, never a new 402 or
    /// a second purchase, until the purchase is delivered (completed) or voided
    /// (released). Nothing claims it over, however old: only its expiry frees it.
    Pending {
        payment_key: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The scoped key (wallet and Idempotency-Key).
    pub key: String,
    /// sha256 of the request (method, path, body) that claimed it.
    pub request_hash: String,
    pub state: IdempotencyState,
    pub expires_at: Unix,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This caller owns the key now.
    Won,
    /// Someone holds it: the record says what to answer.
    Held(IdempotencyRecord),
}

/// Where one payment stands in the purchase ledger. One authorization pays for one
/// purchase: `Claimed → Prepared → Settled | Voided`, each step a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentState {
    /// A request verified the payment and is doing the work it pays for.
    Claimed,
    /// The answer is written down and settlement is under way, or its outcome is
    /// unknown (a crash, a chain that stopped answering): the chain decides.
    Prepared {
        /// The prepared answer (JSON text the API reads back).
        answer: String,
        /// Until when the payment may still land on chain (an authorization's
        /// `validBefore`, and a margin): before then no other request may take it, only
        /// the one that prepared this answer, whose retry the chain decides.
        kept_until: Unix,
    },
    /// This purchase's own settlement paid us.
    Settled {
        transaction: String,
        /// The answer as given, for replays (without the one-time secret).
        response: StoredResponse,
    },
    /// The purchase ended without taking the money; the payment may buy again.
    Voided { reason: String },
}

/// The name of a [`PaymentState`], as conditions and stores spell it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaymentPhase {
    Claimed,
    Prepared,
    Settled,
    Voided,
}

impl PaymentPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            PaymentPhase::Claimed => "claimed",
            PaymentPhase::Prepared => "prepared",
            PaymentPhase::Settled => "settled",
            PaymentPhase::Voided => "voided",
        }
    }

    pub fn parse(s: &str) -> Option<PaymentPhase> {
        [
            PaymentPhase::Claimed,
            PaymentPhase::Prepared,
            PaymentPhase::Settled,
            PaymentPhase::Voided,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
}

impl PaymentState {
    pub fn phase(&self) -> PaymentPhase {
        match self {
            PaymentState::Claimed => PaymentPhase::Claimed,
            PaymentState::Prepared { .. } => PaymentPhase::Prepared,
            PaymentState::Settled { .. } => PaymentPhase::Settled,
            PaymentState::Voided { .. } => PaymentPhase::Voided,
        }
    }
}

/// One payment's ledger entry, keyed by what the chain dedupes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentEntry {
    pub payment_key: String,
    /// sha256 of the request (method, path, body) the payment is buying.
    pub request_hash: String,
    pub state: PaymentState,
    /// Claimed or prepared: until when its request is working on it. Past it the
    /// request is gone (its budget is shorter) and another may take the payment over.
    pub held_until: Unix,
    pub expires_at: Unix,
}

impl PaymentEntry {
    /// Whether a new claim may take this entry's place at `now`: expired, voided, or
    /// left behind by a request that is no longer running.
    pub fn is_free(&self, now: Unix) -> bool {
        self.expires_at <= now
            || match self.state {
                PaymentState::Voided { .. } => true,
                PaymentState::Claimed => self.held_until <= now,
                PaymentState::Prepared { kept_until, .. } => {
                    self.held_until <= now && kept_until <= now
                }
                PaymentState::Settled { .. } => false,
            }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaymentClaim {
    /// This request holds the payment now (state `Claimed`).
    Won,
    /// Another entry stands: settled, or held by a running request.
    Held(PaymentEntry),
}

/// The terms of a new claim on a payment: when it is made, until when its request holds
/// the payment, and when the entry expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PaymentHold {
    pub now: Unix,
    /// Past this the request is gone and another may take the payment over.
    pub held_until: Unix,
    pub expires_at: Unix,
}

/// A conditional step of a payment held for `request_hash`: applied only when the
/// entry is in phase `from` (and, with `lapsed_at`, its holder's time has run out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentMove {
    pub from: PaymentPhase,
    /// Taking over an interrupted purchase: only if `held_until <= lapsed_at`.
    pub lapsed_at: Option<Unix>,
    pub to: PaymentState,
    pub held_until: Unix,
    pub expires_at: Unix,
}

/// What a sworn verdict's webhook has come to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WebhookOutcome {
    Delivered,
    /// Every attempt failed.
    GaveUp,
}

impl WebhookOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookOutcome::Delivered => "delivered",
            WebhookOutcome::GaveUp => "gave_up",
        }
    }

    pub fn parse(s: &str) -> Option<WebhookOutcome> {
        match s {
            "delivered" => Some(WebhookOutcome::Delivered),
            "gave_up" => Some(WebhookOutcome::GaveUp),
            _ => None,
        }
    }
}

/// One feedback row: addresses, hashes, enums and numbers only. Permanent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedbackRow {
    /// Lowercase 0x-prefixed hex; one row per transaction.
    pub tx_hash: String,
    pub merchant: String,
    pub payer: String,
    /// fulfilled | partial | failed
    pub outcome: String,
    pub would_repeat: Option<bool>,
    pub latency_ms: Option<u64>,
    /// The qualifying transfer's amount in USDC base units (decimal string: uint256).
    pub amount_units: String,
    pub block_time: Unix,
    pub created_at: Unix,
    /// The merchant was an anchor of the reputation graph when the row was written
    /// (`docs/reputation.md`): its payers count as anchored.
    #[serde(default)]
    pub anchor: bool,
}

/// What a report on one merchant reads: its own index, nothing else.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MerchantLedger {
    /// Its rows with `block_time >= since`, newest first.
    pub rows: Vec<FeedbackRow>,
    /// Its payers with a row at or after `since`, each with what the report asks of them.
    pub pairs: Vec<aggregates::PairSummary>,
}

/// A delayed job (sworn pass 2, webhook retries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub kind: String,
    /// JSON text.
    pub payload: String,
}

/// A job handed to a consumer, with the handle to acknowledge it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub job: Job,
    pub receipt: String,
    /// How many times it has been received, this one included.
    pub receive_count: u32,
}

// Storage by concern: each trait is what one part of the service keeps. `Store` is all of
// them, for the places (the local server, the verdicts function) that need several.

/// Verdicts and their documents, sworn verdicts' pass-2 keys and webhook attempts.
#[async_trait]
pub trait VerdictStore: Send + Sync {
    /// Creates a verdict; `AlreadyExists` if the id is taken.
    async fn put_verdict(&self, rec: &VerdictRecord) -> Result<()>;
    /// The verdict, unless missing or expired at `now`.
    async fn get_verdict(&self, verdict_id: &str, now: Unix) -> Result<Option<VerdictRecord>>;
    /// Pending → final with `document`, exactly once.
    async fn finalize_verdict(&self, verdict_id: &str, document: &str) -> Result<Finalize>;
    async fn delete_verdict(&self, verdict_id: &str) -> Result<()>;
    /// Removes a pending verdict's job key (pass 2 gave up on it): every copy of its
    /// pass-2 job is unreadable from then on. Nothing to do for a verdict that is gone.
    async fn forget_job_key(&self, verdict_id: &str) -> Result<()>;
    /// Claims attempt `attempt` (1-based) of a verdict's webhook until `held_until`,
    /// stored on the verdict itself: won when the verdict exists, has no outcome, no
    /// later attempt was claimed, and this one is neither finished nor held at `now`.
    /// Each attempt is made once, whatever the queue redelivers.
    async fn claim_webhook_attempt(
        &self,
        verdict_id: &str,
        attempt: u32,
        now: Unix,
        held_until: Unix,
    ) -> Result<bool>;
    /// Marks a claimed attempt finished (its follow-up is in place).
    async fn finish_webhook_attempt(&self, verdict_id: &str, attempt: u32) -> Result<()>;
    /// Records what the webhook came to; the first outcome stays.
    async fn record_webhook_outcome(&self, verdict_id: &str, outcome: WebhookOutcome)
    -> Result<()>;
    /// Ids of live verdicts with this spec_hash and webhook URL (exact match).
    async fn find_verdicts(
        &self,
        spec_hash: &str,
        webhook_url: &str,
        now: Unix,
    ) -> Result<Vec<String>>;
}

/// Idempotency keys: claims, completed responses, releases.
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// One conditional write: wins if the key is free, or its record expired, or its
    /// in-progress claim lapsed.
    async fn claim_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        now: Unix,
        in_progress_until: Unix,
        expires_at: Unix,
    ) -> Result<Claim>;
    /// Stores the response of a claim this caller holds (in progress: a key bound to a
    /// pending purchase is completed by [`IdempotencyStore::complete_bound_idempotency`]
    /// only).
    async fn complete_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        response: &StoredResponse,
        expires_at: Unix,
    ) -> Result<()>;
    /// Gives a claim back (a voided purchase) while it is in progress: the key may be
    /// used again. A key bound to a pending purchase is released by
    /// [`IdempotencyStore::release_bound_idempotency`] only.
    async fn release_idempotency(&self, key: &str, request_hash: &str) -> Result<()>;
    /// Completes a key bound to the pending purchase paid with `payment_key` (pending,
    /// for `request_hash`, that payment) with the purchase's answer; `false` when the key
    /// is not so bound (never bound, ended already, or bound to another purchase).
    async fn complete_bound_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
        response: &StoredResponse,
        expires_at: Unix,
    ) -> Result<bool>;
    /// Releases a key bound to the pending purchase paid with `payment_key` (voided, or
    /// an unpaid copy whose purchase ended); `false` when it is not so bound.
    async fn release_bound_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
    ) -> Result<bool>;
    /// Binds a claim held for `request_hash` (in progress) to the pending purchase of
    /// `payment_key` until `expires_at`; `false` when the key holds no such claim (it
    /// lapsed and was taken over, or is pending already).
    async fn pend_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
        expires_at: Unix,
    ) -> Result<bool>;
    async fn get_idempotency(&self, key: &str, now: Unix) -> Result<Option<IdempotencyRecord>>;
}

/// The purchase ledger: one entry per payment, moved step by step.
#[async_trait]
pub trait LedgerStore: Send + Sync {
    /// Takes a payment for a request: one conditional write, won when the payment has
    /// no entry or its entry [`PaymentEntry::is_free`].
    async fn claim_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        hold: &PaymentHold,
    ) -> Result<PaymentClaim>;
    /// Moves a payment held for `request_hash` one step; `false` when its entry is not
    /// in the state the move starts from (another request took it over, or it moved).
    async fn move_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        step: &PaymentMove,
    ) -> Result<bool>;
    async fn get_payment(&self, payment_key: &str, now: Unix) -> Result<Option<PaymentEntry>>;
}

/// Rate-limit counters.
#[async_trait]
pub trait RateStore: Send + Sync {
    /// Counts one request in a fixed window; returns the count including this one.
    async fn count_request(&self, bucket: &str, expires_at: Unix) -> Result<u64>;
}

/// Feedback rows and what reports read of them.
#[async_trait]
pub trait FeedbackStore: Send + Sync {
    /// Adds a feedback row and, in the same transaction, the aggregates reports read
    /// ([`aggregates`]); `AlreadyExists` if the transaction already has one.
    async fn put_feedback(&self, row: &FeedbackRow) -> Result<()>;
    /// A merchant's rows in the window starting at `since` and its pairs with a row
    /// in it: the merchant's own index pages, however many payers it has and however
    /// long their histories are.
    async fn merchant_ledger(&self, merchant: &str, since: Unix) -> Result<MerchantLedger>;
    /// Writes `rows` with the aggregates [`aggregates::exact`] computes from them, in
    /// bulk: for a store holding no feedback yet (rebuilds, benches, tests).
    async fn load_feedback(&self, rows: &[FeedbackRow]) -> Result<()>;
}

/// Everything stored, for a caller that needs several concerns at once.
pub trait Store:
    VerdictStore + IdempotencyStore + LedgerStore + RateStore + FeedbackStore + ChannelStore
{
}

impl<T> Store for T where
    T: VerdictStore + IdempotencyStore + LedgerStore + RateStore + FeedbackStore + ChannelStore
{
}

#[async_trait]
pub trait JobQueue: Send + Sync {
    /// Makes `job` deliverable after `delay` (at most 900 s, SQS's cap). SQS counts
    /// whole seconds and rounds up; the embedded store keeps milliseconds, so tests can
    /// run back-offs in a fraction of a second.
    async fn enqueue(&self, job: &Job, delay: std::time::Duration) -> Result<()>;
    /// Up to `max` due jobs, each hidden from other receivers for `visibility_secs`.
    async fn receive(&self, max: u32, visibility_secs: u32) -> Result<Vec<Delivery>>;
    /// Deletes a received job.
    async fn ack(&self, receipt: &str) -> Result<()>;
}

/// Receives of a job before SQS dead-letters it (the jobs queue's `maxReceiveCount`; a
/// template test holds the two equal). The worker Lambda acts on the last one: a pass-2
/// job failing it forgets its key first (`routes::jobs::run_delivery` in umpire-api).
pub const JOB_MAX_RECEIVES: u32 = 5;

/// SQS's longest message delay.
pub const MAX_DELAY_SECS: u32 = umpire_core::platform::SQS_MAX_DELAY_SECS;
pub const MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(MAX_DELAY_SECS as u64);
