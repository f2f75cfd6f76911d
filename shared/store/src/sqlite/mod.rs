//! The embedded store for `umpire serve`: one SQLite file in the data directory.
//! Every operation is one transaction on one connection, so a conditional write is
//! atomic exactly as a DynamoDB condition expression is.

mod channels;
mod feedback;
mod idempotency;
mod jobs;
mod ledger;
mod rates;
mod verdicts;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use umpire_core::product::Tier;

use crate::{
    FeedbackRow, IdempotencyRecord, IdempotencyState, PaymentEntry, PaymentPhase, PaymentState,
    Result, StoreError, StoredResponse, Unix, VerdictRecord, VerdictStatus, WebhookOutcome,
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
    expires_at   INTEGER NOT NULL,
    kept_until   INTEGER
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
CREATE TABLE IF NOT EXISTS feedback_payers (
    payer TEXT PRIMARY KEY,
    agg   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS feedback_pairs (
    merchant       TEXT NOT NULL,
    payer          TEXT NOT NULL,
    latest         INTEGER NOT NULL,
    other_row      INTEGER,
    other_merchant INTEGER,
    anchored       INTEGER,
    PRIMARY KEY (merchant, payer)
);
CREATE INDEX IF NOT EXISTS feedback_pairs_merchant ON feedback_pairs (merchant, latest);
CREATE INDEX IF NOT EXISTS feedback_pairs_payer ON feedback_pairs (payer, latest);
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
const VERDICT_ADDED_COLUMNS: [(&str, &str); 6] = [
    ("webhook_attempt", "INTEGER"),
    ("webhook_held_until", "INTEGER"),
    ("webhook_done", "INTEGER"),
    ("webhook_outcome", "TEXT"),
    ("job_key", "TEXT"),
    ("payer", "TEXT"),
];

/// Columns `payments` gained after it was first created.
const PAYMENT_ADDED_COLUMNS: [(&str, &str); 1] = [("kept_until", "INTEGER")];

/// Columns `feedback` gained after it was first created.
const FEEDBACK_ADDED_COLUMNS: [(&str, &str); 1] = [("anchor", "INTEGER NOT NULL DEFAULT 0")];

fn add_missing_columns(conn: &Connection) -> rusqlite::Result<()> {
    for (table, added) in [
        ("verdicts", &VERDICT_ADDED_COLUMNS[..]),
        ("payments", &PAYMENT_ADDED_COLUMNS[..]),
        ("feedback", &FEEDBACK_ADDED_COLUMNS[..]),
    ] {
        let mut st = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))?;
        let have: Vec<String> = st
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<_>>()?;
        for (name, ty) in added {
            if !have.iter().any(|h| h == name) {
                conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {name} {ty}"))?;
            }
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

    fn from_connection(mut conn: Connection) -> Result<SqliteStore> {
        // WAL + FULL: a committed write survives a crash of the process or the machine.
        // secure_delete: what a row held (a job key cleared, a sealed job acknowledged)
        // is overwritten, not left readable in the file's free pages.
        conn.execute_batch(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 5000; PRAGMA secure_delete = ON;",
        )
        .map_err(unavailable)?;
        conn.execute_batch(SCHEMA).map_err(unavailable)?;
        conn.execute_batch(channels::SCHEMA).map_err(unavailable)?;
        add_missing_columns(&conn).map_err(unavailable)?;
        feedback::aggregate_earlier_rows(&mut conn).map_err(unavailable)?;
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

/// A stored tier name; anything else is a corrupt row.
fn tier_of(text: String) -> rusqlite::Result<Tier> {
    Tier::parse(&text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            1,
            rusqlite::types::Type::Text,
            format!("{text:?} is not a tier").into(),
        )
    })
}

fn verdict_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(VerdictRecord, String)> {
    let status: String = r.get(2)?;
    Ok((
        VerdictRecord {
            verdict_id: r.get(0)?,
            tier: tier_of(r.get(1)?)?,
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
            payer: r.get(12)?,
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
    let state = match status.as_str() {
        "COMPLETED" => {
            let text = response.ok_or_else(|| {
                StoreError::Corrupt(format!("{key}: completed without a response"))
            })?;
            IdempotencyState::Completed(StoredResponse::decode(&text)?)
        }
        // A pending key keeps its purchase's payment key where a response would go.
        "PENDING" => IdempotencyState::Pending {
            payment_key: response
                .ok_or_else(|| StoreError::Corrupt(format!("{key}: pending without a payment")))?,
        },
        _ => IdempotencyState::InProgress { until },
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
    kept_until: Option<Unix>,
}

const PAYMENT_COLUMNS: &str = "payment_key, request_hash, phase, held_until, answer, tx_hash, response, reason, expires_at, kept_until";

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
        kept_until: r.get(9)?,
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
                kept_until: self.kept_until.unwrap_or_default(),
            },
            Some(PaymentPhase::Settled) => PaymentState::Settled {
                transaction: self.tx_hash.ok_or_else(|| missing("transaction"))?,
                response: StoredResponse::decode(
                    &self.response.ok_or_else(|| missing("response"))?,
                )?,
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

/// The state-specific columns of a payment state.
#[derive(Default)]
struct PaymentColumns {
    answer: Option<String>,
    tx_hash: Option<String>,
    response: Option<String>,
    reason: Option<String>,
    kept_until: Option<Unix>,
}

fn payment_columns(state: &PaymentState) -> Result<PaymentColumns> {
    Ok(match state {
        PaymentState::Claimed => PaymentColumns::default(),
        PaymentState::Prepared { answer, kept_until } => PaymentColumns {
            answer: Some(answer.clone()),
            kept_until: Some(*kept_until),
            ..PaymentColumns::default()
        },
        PaymentState::Settled {
            transaction,
            response,
        } => PaymentColumns {
            tx_hash: Some(transaction.clone()),
            response: Some(response.encode()?),
            ..PaymentColumns::default()
        },
        PaymentState::Voided { reason } => PaymentColumns {
            reason: Some(reason.clone()),
            ..PaymentColumns::default()
        },
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
        anchor: r.get::<_, i64>(9)? != 0,
    })
}

const VERDICT_COLUMNS: &str = "verdict_id, tier, status, document, preview, secret_hash, spec_hash, webhook_url, created_at, expires_at, job_key, payer";
/// What a verdict is read back with: its columns (the job key last) and the webhook's
/// outcome.
const VERDICT_READ_COLUMNS: &str = "verdict_id, tier, status, document, preview, secret_hash, spec_hash, webhook_url, created_at, expires_at, webhook_outcome, job_key, payer";
const FEEDBACK_COLUMNS: &str = "tx_hash, merchant, payer, outcome, would_repeat, latency_ms, amount_units, block_time, created_at, anchor";
