//! batch-settlement channels in SQLite: each step one immediate transaction that reads
//! the channel's row, decides as the DynamoDB condition does, and writes.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use crate::channels::{
    ChannelChain, ChannelCharge, ChannelCommit, ChannelHold, ChannelRecord, ChannelStore,
    ChannelTake,
};
use crate::{Result, StoreError, Unix};

use super::SqliteStore;

/// Amounts are uint128 decimal strings (SQLite integers stop at 2^63); `unclaimed` is
/// kept with every write so claims find their channels by index.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS channels (
    channel_id            TEXT PRIMARY KEY,
    network               TEXT NOT NULL,
    config                TEXT NOT NULL,
    charged               TEXT NOT NULL,
    signed_max            TEXT NOT NULL,
    signature             TEXT NOT NULL,
    balance               TEXT NOT NULL,
    total_claimed         TEXT NOT NULL,
    withdraw_requested_at INTEGER NOT NULL,
    refund_nonce          INTEGER NOT NULL,
    synced_at             INTEGER NOT NULL,
    hold_id               TEXT,
    hold_base             TEXT,
    hold_until            INTEGER,
    committed_by          TEXT,
    unclaimed             INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS channels_unclaimed ON channels (unclaimed);
";

const COLUMNS: &str = "channel_id, network, config, charged, signed_max, signature, balance, total_claimed, withdraw_requested_at, refund_nonce, synced_at, hold_id, hold_base, hold_until, committed_by";

type Raw = (
    [String; 6],
    [String; 2],
    [u64; 3],
    (Option<String>, Option<String>, Option<u64>),
    Option<String>,
);

fn raw(r: &Row<'_>) -> rusqlite::Result<Raw> {
    Ok((
        [
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ],
        [r.get(6)?, r.get(7)?],
        [r.get(8)?, r.get(9)?, r.get(10)?],
        (r.get(11)?, r.get(12)?, r.get(13)?),
        r.get(14)?,
    ))
}

fn amount(s: &str) -> Result<u128> {
    s.parse()
        .map_err(|_| StoreError::Corrupt(format!("channel amount {s:?} is not a uint128")))
}

fn record(raw: Raw) -> Result<ChannelRecord> {
    let (
        [channel_id, network, config, charged, signed_max, signature],
        [balance, claimed],
        n,
        h,
        committed_by,
    ) = raw;
    let hold = match h {
        (Some(id), Some(base), Some(until)) => Some(ChannelHold {
            id,
            base: amount(&base)?,
            until,
        }),
        _ => None,
    };
    Ok(ChannelRecord {
        channel_id,
        network,
        config,
        charge: ChannelCharge {
            charged: amount(&charged)?,
            signed_max: amount(&signed_max)?,
            signature,
        },
        chain: ChannelChain {
            balance: amount(&balance)?,
            total_claimed: amount(&claimed)?,
            withdraw_requested_at: n[0],
            refund_nonce: n[1],
            synced_at: n[2],
        },
        hold,
        committed_by,
    })
}

fn read(c: &Connection, id: &str) -> rusqlite::Result<Option<Raw>> {
    c.query_row(
        &format!("SELECT {COLUMNS} FROM channels WHERE channel_id = ?1"),
        [id],
        raw,
    )
    .optional()
}

/// Writes every column of `r` (insert or replace), `unclaimed` computed from it.
fn write(c: &Connection, r: &ChannelRecord) -> rusqlite::Result<usize> {
    let hold = r.hold.as_ref();
    c.execute(
        &format!("INSERT OR REPLACE INTO channels ({COLUMNS}, unclaimed) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"),
        params![
            r.channel_id,
            r.network,
            r.config,
            r.charge.charged.to_string(),
            r.charge.signed_max.to_string(),
            r.charge.signature,
            r.chain.balance.to_string(),
            r.chain.total_claimed.to_string(),
            r.chain.withdraw_requested_at,
            r.chain.refund_nonce,
            r.chain.synced_at,
            hold.map(|h| h.id.clone()),
            hold.map(|h| h.base.to_string()),
            hold.map(|h| h.until),
            r.committed_by,
            r.unclaimed() > 0,
        ],
    )
}

impl SqliteStore {
    /// Reads the channel's record, lets `step` decide, writes what it returns; all in
    /// one immediate transaction.
    async fn step_channel<T: Send + 'static>(
        &self,
        channel_id: &str,
        step: impl FnOnce(Option<ChannelRecord>) -> (Option<ChannelRecord>, T) + Send + 'static,
    ) -> Result<T> {
        let id = channel_id.to_owned();
        self.run(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let current = read(&tx, &id)?;
            let current = match current.map(record).transpose() {
                Ok(r) => r,
                Err(e) => return Ok(Err(e)),
            };
            let (next, out) = step(current);
            if let Some(next) = next {
                write(&tx, &next)?;
            }
            tx.commit()?;
            Ok(Ok(out))
        })
        .await?
    }
}

#[async_trait]
impl ChannelStore for SqliteStore {
    async fn get_channel(&self, channel_id: &str) -> Result<Option<ChannelRecord>> {
        let id = channel_id.to_owned();
        let r = self.run(move |c| read(c, &id)).await?;
        r.map(record).transpose()
    }

    async fn create_channel(&self, record: &ChannelRecord) -> Result<bool> {
        let new = record.clone();
        self.step_channel(&record.channel_id, move |current| match current {
            Some(_) => (None, false),
            None => (Some(new), true),
        })
        .await
    }

    async fn take_channel(
        &self,
        channel_id: &str,
        hold: &ChannelHold,
        now: Unix,
    ) -> Result<ChannelTake> {
        let hold = hold.clone();
        self.step_channel(channel_id, move |current| match current {
            None => (None, ChannelTake::Missing),
            Some(r) if r.charge.charged != hold.base => (None, ChannelTake::Moved(r)),
            Some(r) if r.held_at(now) => (None, ChannelTake::Busy(r)),
            Some(r) => {
                let next = ChannelRecord {
                    hold: Some(hold),
                    ..r.clone()
                };
                (Some(next), ChannelTake::Won(r))
            }
        })
        .await
    }

    async fn commit_channel(
        &self,
        channel_id: &str,
        hold_id: &str,
        base: u128,
        charge: &ChannelCharge,
    ) -> Result<ChannelCommit> {
        let (hold_id, charge) = (hold_id.to_owned(), charge.clone());
        self.step_channel(channel_id, move |current| match current {
            Some(r)
                if r.charge.charged == base && r.hold.as_ref().is_some_and(|h| h.id == hold_id) =>
            {
                let next = ChannelRecord {
                    charge,
                    hold: None,
                    committed_by: Some(hold_id),
                    ..r
                };
                (Some(next), ChannelCommit::Committed)
            }
            Some(r) if r.charge == charge && r.committed_by.as_deref() == Some(&hold_id) => {
                (None, ChannelCommit::Already)
            }
            _ => (None, ChannelCommit::Lost),
        })
        .await
    }

    async fn release_channel(&self, channel_id: &str, hold_id: &str) -> Result<()> {
        let hold_id = hold_id.to_owned();
        self.step_channel(channel_id, move |current| match current {
            Some(r) if r.hold.as_ref().is_some_and(|h| h.id == hold_id) => {
                (Some(ChannelRecord { hold: None, ..r }), ())
            }
            _ => (None, ()),
        })
        .await
    }

    async fn mirror_channel(&self, channel_id: &str, chain: &ChannelChain) -> Result<()> {
        let chain = chain.clone();
        // Never back in time: a slower read of older state loses to a newer one.
        self.step_channel(channel_id, move |current| match current {
            Some(r) if r.chain.synced_at <= chain.synced_at => (Some(r.caught_up(chain)), ()),
            _ => (None, ()),
        })
        .await
    }

    async fn unclaimed_channels(&self, limit: usize) -> Result<Vec<ChannelRecord>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .run(move |c| {
                let mut st = c.prepare(&format!(
                    "SELECT {COLUMNS} FROM channels WHERE unclaimed = 1 LIMIT ?1"
                ))?;
                st.query_map([limit], raw)?
                    .collect::<rusqlite::Result<Vec<Raw>>>()
            })
            .await?;
        rows.into_iter().map(record).collect()
    }
}
