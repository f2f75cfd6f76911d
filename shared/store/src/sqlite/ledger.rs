//! The purchase ledger in SQLite.

use async_trait::async_trait;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

use crate::{LedgerStore, PaymentClaim, PaymentEntry, PaymentHold, PaymentMove, Result, Unix};

use super::{
    PAYMENT_COLUMNS, PaymentColumns, PaymentRow, SqliteStore, payment_columns, payment_from_row,
};

#[async_trait]
impl LedgerStore for SqliteStore {
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
                        "INSERT OR REPLACE INTO payments (payment_key, request_hash, phase, held_until, expires_at, kept_until) VALUES (?1, ?2, 'claimed', ?3, ?4, NULL)",
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
        let PaymentColumns {
            answer,
            tx_hash,
            response,
            reason,
            kept_until,
        } = payment_columns(&step.to)?;
        let (k, h) = (payment_key.to_owned(), request_hash.to_owned());
        let (from, to) = (step.from.as_str(), step.to.phase().as_str());
        let (held_until, expires_at) = (step.held_until, step.expires_at);
        // Without a lapse condition every holder passes: held_until <= u64::MAX.
        let lapsed_at = i64::try_from(step.lapsed_at.unwrap_or(u64::MAX)).unwrap_or(i64::MAX);
        let changed = self
            .run(move |c| {
                c.execute(
                    "UPDATE payments SET phase = ?3, held_until = ?4, expires_at = ?5, answer = ?6, tx_hash = ?7, response = ?8, reason = ?9, kept_until = ?12 WHERE payment_key = ?1 AND request_hash = ?2 AND phase = ?10 AND held_until <= ?11",
                    params![k, h, to, held_until, expires_at, answer, tx_hash, response, reason, from, lapsed_at, kept_until],
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
}
