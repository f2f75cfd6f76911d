//! Delayed jobs in SQLite.

use async_trait::async_trait;
use rusqlite::{TransactionBehavior, params};

use crate::{Delivery, Job, JobQueue, Result};

use super::SqliteStore;

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
