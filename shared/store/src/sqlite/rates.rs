//! Rate-limit counters in SQLite.

use async_trait::async_trait;
use rusqlite::params;

use crate::{RateStore, Result, Unix};

use super::SqliteStore;

#[async_trait]
impl RateStore for SqliteStore {
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
}
