//! The embedded store for `umpire serve`: one SQLite file in the data directory.
//! Every operation is one transaction on one connection, so a conditional write is
//! atomic exactly as a DynamoDB condition expression is.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::{
    Claim, Delivery, FeedbackRow, Finalize, IdempotencyRecord, IdempotencyState, Job, JobQueue,
    PayerSpread, PaymentClaim, PaymentEntry, PaymentMove, PaymentPhase, PaymentState, Result,
    Store, StoreError, StoredResponse, Unix, VerdictRecord, VerdictStatus, WebhookOutcome,
};

pub const FILE_NAME: &str = "umpire.sqlite3";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS verdicts (
    verdict_id  TEXT PRIMARY KEY,
    tier        TEXT NOT NULL,
    status      TEXT NOT NULL,
    document    TEXT,
    preview     TEXT,
    secret_hash TEXT NOT NULL,
    spec_hash   TEXT NOT NULL,
    webhook_url TEXT,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_find ON verdicts (spec_hash, webhook_url);
CREATE TABLE IF NOT EXISTS idempotency (
    key               TEXT PRIMARY KEY,
    request_hash      TEXT NOT NULL,
    status            TEXT NOT NULL,
    in_progress_until INTEGER NOT NULL,
    response          TEXT,
    expires_at        INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS payments (
    payment_key  TEXT PRIMARY KEY,
    request_hash TEXT NOT NULL,
    phase        TEXT NOT NULL,
    held_until   INTEGER NOT NULL,
    answer       TEXT,
    tx_hash      TEXT,
    response     TEXT,
    reason       TEXT,
    expires_at   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS rate_limits (
    bucket     TEXT PRIMARY KEY,
    count      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS feedback (
    tx_hash      TEXT PRIMARY KEY,
    merchant     TEXT NOT NULL,
    payer        TEXT NOT NULL,
    outcome      TEXT NOT NULL,
    would_repeat INTEGER,
    latency_ms   INTEGER,
    amount_units TEXT NOT NULL,
    block_time   INTEGER NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_merchant ON feedback (merchant, block_time);
CREATE INDEX IF NOT EXISTS feedback_payer ON feedback (payer, block_time);
CREATE TABLE IF NOT EXISTS jobs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    kind          TEXT NOT NULL,
    payload       TEXT NOT NULL,
    not_before    INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    lease         TEXT
);
CREATE INDEX IF NOT EXISTS jobs_due ON jobs (not_before);
";

/// Columns added to `verdicts` after its first release: a data directory made by an
/// earlier version gains them on open (the webhook's state, kept on the verdict).
const VERDICT_ADDED_COLUMNS: [(&str, &str); 5] = [
    ("webhook_attempt", "INTEGER"),
    ("webhook_held_until", "INTEGER"),
    ("webhook_done", "INTEGER"),
    ("webhook_outcome", "TEXT"),
    ("job_key", "TEXT"),
];

fn add_missing_columns(conn: &Connection) -> rusqlite::Result<()> {
    let mut st = conn.prepare("SELECT name FROM pragma_table_info('verdicts')")?;
    let have: Vec<String> = st
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<rusqlite::Result<_>>()?;
    for (name, ty) in VERDICT_ADDED_COLUMNS {
        if !have.iter().any(|h| h == name) {
            conn.execute_batch(&format!("ALTER TABLE verdicts ADD COLUMN {name} {ty}"))?;
        }
    }
    Ok(())
}

#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    /// Clock for job delays, in Unix milliseconds; tests move it. (`jobs.not_before`
    /// held seconds before it held milliseconds: such rows are simply due at once.)
    clock: Arc<dyn Fn() -> u64 + Send + Sync>,
}

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

impl SqliteStore {
    /// Opens (creating) `dir/umpire.sqlite3`.
    pub fn open_in(dir: &Path) -> Result<SqliteStore> {
        std::fs::create_dir_all(dir).map_err(unavailable)?;
        SqliteStore::from_connection(Connection::open(dir.join(FILE_NAME)).map_err(unavailable)?)
    }

    pub fn in_memory() -> Result<SqliteStore> {
        SqliteStore::from_connection(Connection::open_in_memory().map_err(unavailable)?)
    }

    fn from_connection(conn: Connection) -> Result<SqliteStore> {
        // WAL + FULL: a committed write survives a crash of the process or the machine.
        // secure_delete: what a row held (a job key cleared, a sealed job acknowledged)
        // is overwritten, not left readable in the file's free pages.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000; PRAGMA secure_delete = ON;",
        )
        .map_err(unavailable)?;
        conn.execute_batch(SCHEMA).map_err(unavailable)?;
        add_missing_columns(&conn).map_err(unavailable)?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            clock: Arc::new(|| umpire_host::Clock::system().now_ms()),
        })
    }

    /// Replaces the clock used for job delays, in Unix milliseconds (tests).
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> SqliteStore {
        self.clock = Arc::new(clock);
        self
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard).map_err(unavailable)
        })
        .await
        .map_err(unavailable)?
    }

    /// Feedback rows by `column` (merchant or payer, a fixed name) since a block time.
    async fn feedback_on(
        &self,
        column: &'static str,
        who: &str,
        since: Unix,
        limit: usize,
    ) -> Result<Vec<FeedbackRow>> {
        let who = who.to_owned();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE {column} = ?1 AND block_time >= ?2 ORDER BY block_time DESC, tx_hash DESC LIMIT ?3"
            ))?;
            st.query_map(params![who, since, limit], feedback_from_row)?.collect()
        })
        .await
    }

    /// Deletes what retention says is gone (expired verdicts, idempotency records,
    /// payment entries, rate-limit windows). Reads already hide them; this reclaims the space.
    pub async fn purge_expired(&self, now: Unix) -> Result<usize> {
        self.run(move |c| {
            let mut n = c.execute("DELETE FROM verdicts WHERE expires_at <= ?1", [now])?;
            n += c.execute("DELETE FROM idempotency WHERE expires_at <= ?1", [now])?;
            n += c.execute("DELETE FROM payments WHERE expires_at <= ?1", [now])?;
            n += c.execute("DELETE FROM rate_limits WHERE expires_at <= ?1", [now])?;
            Ok(n)
        })
        .await
    }
}

fn verdict_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(VerdictRecord, String)> {
    let status: String = r.get(2)?;
    Ok((
        VerdictRecord {
            verdict_id: r.get(0)?,
            tier: r.get(1)?,
            status: VerdictStatus::Pending,
            document: r.get(3)?,
            preview: r.get(4)?,
            secret_hash: r.get(5)?,
            spec_hash: r.get(6)?,
            webhook_url: r.get(7)?,
            created_at: r.get(8)?,
            expires_at: r.get(9)?,
            webhook_outcome: r
                .get::<_, Option<String>>(10)?
                .as_deref()
                .and_then(WebhookOutcome::parse),
            job_key: r.get(11)?,
        },
        status,
    ))
}

fn idempotency_from_row(
    r: &rusqlite::Row<'_>,
) -> rusqlite::Result<(String, String, String, Unix, Option<String>, Unix)> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn idempotency_record(
    (key, request_hash, status, until, response, expires_at): (
        String,
        String,
        String,
        Unix,
        Option<String>,
        Unix,
    ),
) -> Result<IdempotencyRecord> {
    let state = if status == "COMPLETED" {
        let text = response
            .ok_or_else(|| StoreError::Corrupt(format!("{key}: completed without a response")))?;
        IdempotencyState::Completed(
            serde_json::from_str::<StoredResponse>(&text)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        )
    } else {
        IdempotencyState::InProgress { until }
    };
    Ok(IdempotencyRecord {
        key,
        request_hash,
        state,
        expires_at,
    })
}

/// A `payments` row as stored: the phase names which optional columns are set.
struct PaymentRow {
    payment_key: String,
    request_hash: String,
    phase: String,
    held_until: Unix,
    answer: Option<String>,
    tx_hash: Option<String>,
    response: Option<String>,
    reason: Option<String>,
    expires_at: Unix,
}

const PAYMENT_COLUMNS: &str =
    "payment_key, request_hash, phase, held_until, answer, tx_hash, response, reason, expires_at";

fn payment_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PaymentRow> {
    Ok(PaymentRow {
        payment_key: r.get(0)?,
        request_hash: r.get(1)?,
        phase: r.get(2)?,
        held_until: r.get(3)?,
        answer: r.get(4)?,
        tx_hash: r.get(5)?,
        response: r.get(6)?,
        reason: r.get(7)?,
        expires_at: r.get(8)?,
    })
}

impl PaymentRow {
    fn entry(self) -> Result<PaymentEntry> {
        let key = self.payment_key.clone();
        let missing = |what: &str| StoreError::Corrupt(format!("payment {key}: no {what}"));
        let state = match PaymentPhase::parse(&self.phase) {
            Some(PaymentPhase::Claimed) => PaymentState::Claimed,
            Some(PaymentPhase::Prepared) => PaymentState::Prepared {
                answer: self.answer.ok_or_else(|| missing("answer"))?,
            },
            Some(PaymentPhase::Settled) => PaymentState::Settled {
                transaction: self.tx_hash.ok_or_else(|| missing("transaction"))?,
                response: serde_json::from_str(&self.response.ok_or_else(|| missing("response"))?)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            },
            Some(PaymentPhase::Voided) => PaymentState::Voided {
                reason: self.reason.unwrap_or_default(),
            },
            None => {
                return Err(StoreError::Corrupt(format!(
                    "payment phase {:?}",
                    self.phase
                )));
            }
        };
        Ok(PaymentEntry {
            payment_key: self.payment_key,
            request_hash: self.request_hash,
            state,
            held_until: self.held_until,
            expires_at: self.expires_at,
        })
    }
}

/// The state-specific columns of a payment state: (answer, tx_hash, response, reason).
type PaymentColumns = (
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn payment_columns(state: &PaymentState) -> Result<PaymentColumns> {
    Ok(match state {
        PaymentState::Claimed => (None, None, None, None),
        PaymentState::Prepared { answer } => (Some(answer.clone()), None, None, None),
        PaymentState::Settled {
            transaction,
            response,
        } => (
            None,
            Some(transaction.clone()),
            Some(serde_json::to_string(response).map_err(|e| StoreError::Corrupt(e.to_string()))?),
            None,
        ),
        PaymentState::Voided { reason } => (None, None, None, Some(reason.clone())),
    })
}

fn feedback_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<FeedbackRow> {
    Ok(FeedbackRow {
        tx_hash: r.get(0)?,
        merchant: r.get(1)?,
        payer: r.get(2)?,
        outcome: r.get(3)?,
        would_repeat: r.get::<_, Option<i64>>(4)?.map(|b| b != 0),
        latency_ms: r.get(5)?,
        amount_units: r.get(6)?,
        block_time: r.get(7)?,
        created_at: r.get(8)?,
    })
}

const VERDICT_COLUMNS: &str = "verdict_id, tier, status, document, preview, secret_hash, spec_hash, webhook_url, created_at, expires_at, job_key";
/// What a verdict is read back with: its columns (the job key last) and the webhook's
/// outcome.
const VERDICT_READ_COLUMNS: &str = "verdict_id, tier, status, document, preview, secret_hash, spec_hash, webhook_url, created_at, expires_at, webhook_outcome, job_key";
const FEEDBACK_COLUMNS: &str = "tx_hash, merchant, payer, outcome, would_repeat, latency_ms, amount_units, block_time, created_at";

#[async_trait]
impl Store for SqliteStore {
    async fn put_verdict(&self, rec: &VerdictRecord) -> Result<()> {
        let r = rec.clone();
        let inserted = self
            .run(move |c| {
                c.execute(
                    &format!("INSERT OR IGNORE INTO verdicts ({VERDICT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"),
                    params![
                        r.verdict_id,
                        r.tier,
                        r.status.as_str(),
                        r.document,
                        r.preview,
                        r.secret_hash,
                        r.spec_hash,
                        r.webhook_url,
                        r.created_at,
                        r.expires_at,
                        r.job_key
                    ],
                )
            })
            .await?;
        if inserted == 1 {
            Ok(())
        } else {
            Err(StoreError::AlreadyExists)
        }
    }

    async fn get_verdict(&self, verdict_id: &str, now: Unix) -> Result<Option<VerdictRecord>> {
        let id = verdict_id.to_owned();
        let row = self
            .run(move |c| {
                c.query_row(
                    &format!("SELECT {VERDICT_READ_COLUMNS} FROM verdicts WHERE verdict_id = ?1 AND expires_at > ?2"),
                    params![id, now],
                    verdict_from_row,
                )
                .optional()
            })
            .await?;
        row.map(|(mut rec, status)| {
            rec.status = VerdictStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("verdict status {status:?}")))?;
            Ok(rec)
        })
        .transpose()
    }

    async fn finalize_verdict(&self, verdict_id: &str, document: &str) -> Result<Finalize> {
        let (id, doc) = (verdict_id.to_owned(), document.to_owned());
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let current: Option<(String, Option<String>)> = tx
                .query_row(
                    "SELECT status, document FROM verdicts WHERE verdict_id = ?1",
                    [&id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            let outcome = match current {
                None => Finalize::NotFound,
                Some((status, Some(existing))) if status == "final" => {
                    Finalize::AlreadyFinal(existing)
                }
                Some(_) => {
                    tx.execute(
                        "UPDATE verdicts SET status = 'final', document = ?2, job_key = NULL WHERE verdict_id = ?1",
                        params![id, doc],
                    )?;
                    Finalize::Done
                }
            };
            tx.commit()?;
            Ok(outcome)
        })
        .await
    }

    async fn forget_job_key(&self, verdict_id: &str) -> Result<()> {
        let id = verdict_id.to_owned();
        self.run(move |c| {
            c.execute(
                "UPDATE verdicts SET job_key = NULL WHERE verdict_id = ?1",
                [id],
            )
        })
        .await
        .map(|_| ())
    }

    async fn delete_verdict(&self, verdict_id: &str) -> Result<()> {
        let id = verdict_id.to_owned();
        self.run(move |c| c.execute("DELETE FROM verdicts WHERE verdict_id = ?1", [id]))
            .await
            .map(|_| ())
    }

    async fn find_verdicts(
        &self,
        spec_hash: &str,
        webhook_url: &str,
        now: Unix,
    ) -> Result<Vec<String>> {
        let (s, w) = (spec_hash.to_owned(), webhook_url.to_owned());
        self.run(move |c| {
            let mut st = c.prepare(
                "SELECT verdict_id FROM verdicts WHERE spec_hash = ?1 AND webhook_url = ?2 AND expires_at > ?3 ORDER BY created_at, verdict_id",
            )?;
            let ids = st
                .query_map(params![s, w, now], |r| r.get::<_, String>(0))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(ids)
        })
        .await
    }

    async fn claim_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        now: Unix,
        in_progress_until: Unix,
        expires_at: Unix,
    ) -> Result<Claim> {
        let (k, h) = (key.to_owned(), request_hash.to_owned());
        let held = self
            .run(move |c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let existing = tx
                    .query_row(
                        "SELECT key, request_hash, status, in_progress_until, response, expires_at FROM idempotency WHERE key = ?1",
                        [&k],
                        idempotency_from_row,
                    )
                    .optional()?;
                let free = match &existing {
                    None => true,
                    Some((_, _, status, until, _, exp)) => {
                        *exp <= now || (status == "INPROGRESS" && *until <= now)
                    }
                };
                if free {
                    tx.execute(
                        "INSERT OR REPLACE INTO idempotency (key, request_hash, status, in_progress_until, response, expires_at) VALUES (?1, ?2, 'INPROGRESS', ?3, NULL, ?4)",
                        params![k, h, in_progress_until, expires_at],
                    )?;
                    tx.commit()?;
                    Ok(None)
                } else {
                    tx.commit()?;
                    Ok(existing)
                }
            })
            .await?;
        match held {
            None => Ok(Claim::Won),
            Some(row) => Ok(Claim::Held(idempotency_record(row)?)),
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
        let (k, h) = (key.to_owned(), request_hash.to_owned());
        self.run(move |c| {
            c.execute(
                "UPDATE idempotency SET status = 'COMPLETED', response = ?3, expires_at = ?4 WHERE key = ?1 AND request_hash = ?2",
                params![k, h, text, expires_at],
            )
        })
        .await
        .map(|_| ())
    }

    async fn release_idempotency(&self, key: &str, request_hash: &str) -> Result<()> {
        let (k, h) = (key.to_owned(), request_hash.to_owned());
        self.run(move |c| {
            c.execute(
                "DELETE FROM idempotency WHERE key = ?1 AND request_hash = ?2 AND status = 'INPROGRESS'",
                params![k, h],
            )
        })
        .await
        .map(|_| ())
    }

    async fn get_idempotency(&self, key: &str, now: Unix) -> Result<Option<IdempotencyRecord>> {
        let k = key.to_owned();
        let row = self
            .run(move |c| {
                c.query_row(
                    "SELECT key, request_hash, status, in_progress_until, response, expires_at FROM idempotency WHERE key = ?1 AND expires_at > ?2",
                    params![k, now],
                    idempotency_from_row,
                )
                .optional()
            })
            .await?;
        row.map(idempotency_record).transpose()
    }

    async fn claim_webhook_attempt(
        &self,
        verdict_id: &str,
        attempt: u32,
        now: Unix,
        held_until: Unix,
    ) -> Result<bool> {
        let id = verdict_id.to_owned();
        let changed = self
            .run(move |c| {
                c.execute(
                    "UPDATE verdicts SET webhook_attempt = ?2, webhook_held_until = ?4, webhook_done = COALESCE(webhook_done, 0) WHERE verdict_id = ?1 AND webhook_outcome IS NULL AND (webhook_attempt IS NULL OR webhook_attempt < ?2 OR (webhook_attempt = ?2 AND webhook_done < ?2 AND webhook_held_until <= ?3))",
                    params![id, attempt, now, held_until],
                )
            })
            .await?;
        Ok(changed == 1)
    }

    async fn finish_webhook_attempt(&self, verdict_id: &str, attempt: u32) -> Result<()> {
        let id = verdict_id.to_owned();
        self.run(move |c| {
            c.execute(
                "UPDATE verdicts SET webhook_done = ?2 WHERE verdict_id = ?1 AND webhook_attempt = ?2",
                params![id, attempt],
            )
        })
        .await
        .map(|_| ())
    }

    async fn record_webhook_outcome(
        &self,
        verdict_id: &str,
        outcome: WebhookOutcome,
    ) -> Result<()> {
        let id = verdict_id.to_owned();
        self.run(move |c| {
            c.execute(
                "UPDATE verdicts SET webhook_outcome = ?2 WHERE verdict_id = ?1 AND webhook_outcome IS NULL",
                params![id, outcome.as_str()],
            )
        })
        .await
        .map(|_| ())
    }

    async fn claim_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        now: Unix,
        held_until: Unix,
        expires_at: Unix,
    ) -> Result<PaymentClaim> {
        let (k, h) = (payment_key.to_owned(), request_hash.to_owned());
        let held = self
            .run(move |c| {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let existing = tx
                    .query_row(
                        &format!("SELECT {PAYMENT_COLUMNS} FROM payments WHERE payment_key = ?1"),
                        [&k],
                        payment_from_row,
                    )
                    .optional()?;
                let held = match existing {
                    None => None,
                    Some(row) => match row.entry() {
                        Ok(entry) if entry.is_free(now) => None,
                        Ok(entry) => Some(Ok(entry)),
                        Err(e) => Some(Err(e)),
                    },
                };
                if held.is_none() {
                    tx.execute(
                        "INSERT OR REPLACE INTO payments (payment_key, request_hash, phase, held_until, expires_at) VALUES (?1, ?2, 'claimed', ?3, ?4)",
                        params![k, h, held_until, expires_at],
                    )?;
                }
                tx.commit()?;
                Ok(held)
            })
            .await?;
        match held {
            None => Ok(PaymentClaim::Won),
            Some(entry) => Ok(PaymentClaim::Held(entry?)),
        }
    }

    async fn move_payment(
        &self,
        payment_key: &str,
        request_hash: &str,
        step: &PaymentMove,
    ) -> Result<bool> {
        let (answer, tx_hash, response, reason) = payment_columns(&step.to)?;
        let (k, h) = (payment_key.to_owned(), request_hash.to_owned());
        let (from, to) = (step.from.as_str(), step.to.phase().as_str());
        let (held_until, expires_at) = (step.held_until, step.expires_at);
        // Without a lapse condition every holder passes: held_until <= u64::MAX.
        let lapsed_at = i64::try_from(step.lapsed_at.unwrap_or(u64::MAX)).unwrap_or(i64::MAX);
        let changed = self
            .run(move |c| {
                c.execute(
                    "UPDATE payments SET phase = ?3, held_until = ?4, expires_at = ?5, answer = ?6, tx_hash = ?7, response = ?8, reason = ?9 WHERE payment_key = ?1 AND request_hash = ?2 AND phase = ?10 AND held_until <= ?11",
                    params![k, h, to, held_until, expires_at, answer, tx_hash, response, reason, from, lapsed_at],
                )
            })
            .await?;
        Ok(changed == 1)
    }

    async fn get_payment(&self, payment_key: &str, now: Unix) -> Result<Option<PaymentEntry>> {
        let k = payment_key.to_owned();
        let row = self
            .run(move |c| {
                c.query_row(
                    &format!(
                        "SELECT {PAYMENT_COLUMNS} FROM payments WHERE payment_key = ?1 AND expires_at > ?2"
                    ),
                    params![k, now],
                    payment_from_row,
                )
                .optional()
            })
            .await?;
        row.map(PaymentRow::entry).transpose()
    }

    async fn count_request(&self, bucket: &str, expires_at: Unix) -> Result<u64> {
        let b = bucket.to_owned();
        self.run(move |c| {
            c.query_row(
                "INSERT INTO rate_limits (bucket, count, expires_at) VALUES (?1, 1, ?2)
                 ON CONFLICT(bucket) DO UPDATE SET count = count + 1 RETURNING count",
                params![b, expires_at],
                |r| r.get::<_, u64>(0),
            )
        })
        .await
    }

    async fn put_feedback(&self, row: &FeedbackRow) -> Result<()> {
        let r = row.clone();
        let inserted = self
            .run(move |c| {
                c.execute(
                    &format!("INSERT OR IGNORE INTO feedback ({FEEDBACK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
                    params![
                        r.tx_hash,
                        r.merchant,
                        r.payer,
                        r.outcome,
                        r.would_repeat.map(i64::from),
                        r.latency_ms,
                        r.amount_units,
                        r.block_time,
                        r.created_at
                    ],
                )
            })
            .await?;
        if inserted == 1 {
            Ok(())
        } else {
            Err(StoreError::AlreadyExists)
        }
    }

    async fn feedback_for_merchant(
        &self,
        merchant: &str,
        since: Unix,
        limit: usize,
    ) -> Result<Vec<FeedbackRow>> {
        self.feedback_on("merchant", merchant, since, limit).await
    }

    async fn payer_spreads(
        &self,
        payers: &[String],
        since: Unix,
        cap: usize,
    ) -> Result<Vec<PayerSpread>> {
        let payers = payers.to_vec();
        self.run(move |c| {
            // One indexed count per payer (feedback_payer: payer, block_time), all in
            // one visit to the connection.
            let mut st = c.prepare(
                "SELECT COUNT(*), COUNT(DISTINCT merchant) FROM feedback WHERE payer = ?1 AND block_time >= ?2",
            )?;
            payers
                .iter()
                .map(|p| {
                    st.query_row(params![p, since], |r| {
                        let (rows, merchants): (i64, i64) = (r.get(0)?, r.get(1)?);
                        Ok(PayerSpread {
                            rows: usize::try_from(rows).unwrap_or(0).min(cap),
                            merchants: usize::try_from(merchants).unwrap_or(0).min(cap),
                        })
                    })
                })
                .collect()
        })
        .await
    }
}

#[async_trait]
impl JobQueue for SqliteStore {
    async fn enqueue(&self, job: &Job, delay: std::time::Duration) -> Result<()> {
        let delay_ms = u64::try_from(delay.min(crate::MAX_DELAY).as_millis()).unwrap_or(0);
        let not_before = (self.clock)() + delay_ms;
        let j = job.clone();
        self.run(move |c| {
            c.execute(
                "INSERT INTO jobs (kind, payload, not_before) VALUES (?1, ?2, ?3)",
                params![j.kind, j.payload, not_before],
            )
        })
        .await
        .map(|_| ())
    }

    async fn receive(&self, max: u32, visibility_secs: u32) -> Result<Vec<Delivery>> {
        let now = (self.clock)();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let due: Vec<(i64, String, String, u32)> = {
                let mut st = tx.prepare(
                    "SELECT id, kind, payload, receive_count FROM jobs WHERE not_before <= ?1 ORDER BY not_before, id LIMIT ?2",
                )?;
                st.query_map(params![now, max], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
                    .collect::<rusqlite::Result<_>>()?
            };
            let mut out = Vec::with_capacity(due.len());
            for (id, kind, payload, count) in due {
                // Like an SQS receipt handle: only the latest receiver may delete it.
                let lease = format!("{id}:{}", hex::encode(umpire_host::random_bytes::<8>()));
                tx.execute(
                    "UPDATE jobs SET not_before = ?2, receive_count = receive_count + 1, lease = ?3 WHERE id = ?1",
                    params![id, now + u64::from(visibility_secs) * 1000, lease],
                )?;
                out.push(Delivery {
                    job: Job { kind, payload },
                    receipt: lease,
                    receive_count: count + 1,
                });
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn ack(&self, receipt: &str) -> Result<()> {
        let r = receipt.to_owned();
        self.run(move |c| c.execute("DELETE FROM jobs WHERE lease = ?1", [r]))
            .await
            .map(|_| ())
    }
}
