//! Verdicts, their documents, pass-2 keys and webhook attempts in SQLite.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::{
    Finalize, Result, StoreError, Unix, VerdictRecord, VerdictStatus, VerdictStore, WebhookOutcome,
};

use super::{SqliteStore, VERDICT_COLUMNS, VERDICT_READ_COLUMNS, verdict_from_row};

#[async_trait]
impl VerdictStore for SqliteStore {
    async fn put_verdict(&self, rec: &VerdictRecord) -> Result<()> {
        let r = rec.clone();
        let inserted = self
            .run(move |c| {
                c.execute(
                    &format!("INSERT OR IGNORE INTO verdicts ({VERDICT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"),
                    params![
                        r.verdict_id,
                        r.tier.as_str(),
                        r.status.as_str(),
                        r.document,
                        r.preview,
                        r.secret_hash,
                        r.spec_hash,
                        r.webhook_url,
                        r.created_at,
                        r.expires_at,
                        r.job_key,
                        r.payer
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
}
