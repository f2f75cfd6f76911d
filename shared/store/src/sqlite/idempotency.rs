//! Idempotency keys in SQLite.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::{Claim, IdempotencyRecord, IdempotencyStore, Result, StoredResponse, Unix};

use super::{SqliteStore, idempotency_from_row, idempotency_record};

#[async_trait]
impl IdempotencyStore for SqliteStore {
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
        let text = response.encode()?;
        let (k, h) = (key.to_owned(), request_hash.to_owned());
        self.run(move |c| {
            c.execute(
                "UPDATE idempotency SET status = 'COMPLETED', response = ?3, expires_at = ?4 WHERE key = ?1 AND request_hash = ?2 AND status = 'INPROGRESS'",
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

    async fn pend_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
        expires_at: Unix,
    ) -> Result<bool> {
        let (k, h, p) = (
            key.to_owned(),
            request_hash.to_owned(),
            payment_key.to_owned(),
        );
        self.run(move |c| {
            c.execute(
                "UPDATE idempotency SET status = 'PENDING', response = ?3, expires_at = ?4 WHERE key = ?1 AND request_hash = ?2 AND status = 'INPROGRESS'",
                params![k, h, p, expires_at],
            )
        })
        .await
        .map(|n| n == 1)
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
        let (k, h, p) = (
            key.to_owned(),
            request_hash.to_owned(),
            payment_key.to_owned(),
        );
        self.run(move |c| {
            c.execute(
                "UPDATE idempotency SET status = 'COMPLETED', response = ?4, expires_at = ?5 WHERE key = ?1 AND request_hash = ?2 AND status = 'PENDING' AND response = ?3",
                params![k, h, p, text, expires_at],
            )
        })
        .await
        .map(|n| n == 1)
    }

    async fn release_bound_idempotency(
        &self,
        key: &str,
        request_hash: &str,
        payment_key: &str,
    ) -> Result<bool> {
        let (k, h, p) = (
            key.to_owned(),
            request_hash.to_owned(),
            payment_key.to_owned(),
        );
        self.run(move |c| {
            c.execute(
                "DELETE FROM idempotency WHERE key = ?1 AND request_hash = ?2 AND status = 'PENDING' AND response = ?3",
                params![k, h, p],
            )
        })
        .await
        .map(|n| n == 1)
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
}
