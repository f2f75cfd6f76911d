//! Feedback rows and what reports read of them in SQLite.

use async_trait::async_trait;
use rusqlite::params;

use crate::{FeedbackRow, FeedbackStore, PayerSpread, Result, StoreError, Unix};

use super::{FEEDBACK_COLUMNS, SqliteStore};

#[async_trait]
impl FeedbackStore for SqliteStore {
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
