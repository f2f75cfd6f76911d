//! Feedback rows and the aggregates reports read, in SQLite: a write and its
//! aggregates are one transaction.

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use crate::aggregates::{self, PairSummary, PayerAgg, SPREAD_HORIZON_SECS};
use crate::{FeedbackRow, FeedbackStore, MerchantLedger, Result, StoreError, Unix};

use super::{FEEDBACK_COLUMNS, SqliteStore, feedback_from_row};

const PAIR_COLUMNS: &str = "merchant, payer, latest, other_row, other_merchant, anchored";

fn pair_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<PairSummary> {
    Ok(PairSummary {
        merchant: r.get(0)?,
        payer: r.get(1)?,
        latest: r.get(2)?,
        other_row: r.get(3)?,
        other_merchant: r.get(4)?,
        anchored: r.get(5)?,
    })
}

fn corrupt(e: impl std::fmt::Display) -> rusqlite::Error {
    rusqlite::Error::ToSqlConversionFailure(Box::new(std::io::Error::other(e.to_string())))
}

fn insert_row(tx: &Connection, r: &FeedbackRow) -> rusqlite::Result<usize> {
    tx.execute(
        &format!("INSERT OR IGNORE INTO feedback ({FEEDBACK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)"),
        params![
            r.tx_hash,
            r.merchant,
            r.payer,
            r.outcome,
            r.would_repeat.map(i64::from),
            r.latency_ms,
            r.amount_units,
            r.block_time,
            r.created_at,
            i64::from(r.anchor),
        ],
    )
}

fn put_pair(tx: &Connection, p: &PairSummary) -> rusqlite::Result<()> {
    tx.execute(
        &format!(
            "INSERT OR REPLACE INTO feedback_pairs ({PAIR_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)"
        ),
        params![
            p.merchant,
            p.payer,
            p.latest,
            p.other_row,
            p.other_merchant,
            p.anchored
        ],
    )?;
    Ok(())
}

fn put_agg(tx: &Connection, a: &PayerAgg) -> rusqlite::Result<()> {
    let text = serde_json::to_string(a).map_err(corrupt)?;
    tx.execute(
        "INSERT OR REPLACE INTO feedback_payers (payer, agg) VALUES (?1, ?2)",
        params![a.payer, text],
    )?;
    Ok(())
}

fn get_pair(
    tx: &Transaction<'_>,
    merchant: &str,
    payer: &str,
) -> rusqlite::Result<Option<PairSummary>> {
    tx.query_row(
        &format!("SELECT {PAIR_COLUMNS} FROM feedback_pairs WHERE merchant = ?1 AND payer = ?2"),
        params![merchant, payer],
        pair_from_row,
    )
    .optional()
}

/// A row and its aggregates, inside `tx`; false if the transaction already has a row.
fn put_with_aggregates(tx: &Transaction<'_>, row: &FeedbackRow) -> rusqlite::Result<bool> {
    if insert_row(tx, row)? == 0 {
        return Ok(false);
    }
    let agg: Option<PayerAgg> = tx
        .query_row(
            "SELECT agg FROM feedback_payers WHERE payer = ?1",
            params![row.payer],
            |r| r.get::<_, String>(0),
        )
        .optional()?
        .map(|text| serde_json::from_str(&text).map_err(corrupt))
        .transpose()?;
    let pair = get_pair(tx, &row.merchant, &row.payer)?;
    let holder = match agg.as_ref().and_then(|a| a.holder(&row.merchant)) {
        Some(h) => get_pair(tx, h, &row.payer)?,
        None => None,
    };
    let mut update = aggregates::fold(agg.as_ref(), pair.as_ref(), holder.as_ref(), row);
    if let Some(a) = update.spread_anchor {
        spread_anchor(tx, &row.payer, a)?;
        update.payer.anchored_spread = Some(a);
    }
    put_pair(tx, &update.pair)?;
    if let Some(h) = &update.holder {
        put_pair(tx, h)?;
    }
    put_agg(tx, &update.payer)?;
    Ok(true)
}

fn spread_anchor(tx: &Transaction<'_>, payer: &str, at: Unix) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE feedback_pairs SET anchored = ?2 WHERE payer = ?1 AND latest >= ?3 AND (anchored IS NULL OR anchored < ?2)",
        params![payer, at, at.saturating_sub(SPREAD_HORIZON_SECS)],
    )?;
    Ok(())
}

/// `rows` and the aggregates [`aggregates::exact`] computes from them; `insert` false
/// when the rows are there already (an older data directory).
fn write_exact(tx: &Connection, rows: &[FeedbackRow], insert: bool) -> rusqlite::Result<()> {
    if insert {
        for r in rows {
            insert_row(tx, r)?;
        }
    }
    let (aggs, pairs) = aggregates::exact(rows);
    for a in &aggs {
        put_agg(tx, a)?;
    }
    for p in &pairs {
        put_pair(tx, p)?;
    }
    Ok(())
}

/// A data directory from before the aggregates existed: they are computed from its
/// rows once, on open.
pub(super) fn aggregate_earlier_rows(conn: &mut Connection) -> rusqlite::Result<()> {
    let aggregated: i64 =
        conn.query_row("SELECT COUNT(*) FROM feedback_payers", [], |r| r.get(0))?;
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM feedback", [], |r| r.get(0))?;
    if aggregated > 0 || rows == 0 {
        return Ok(());
    }
    let all: Vec<FeedbackRow> = conn
        .prepare(&format!("SELECT {FEEDBACK_COLUMNS} FROM feedback"))?
        .query_map([], feedback_from_row)?
        .collect::<rusqlite::Result<_>>()?;
    let tx = conn.transaction()?;
    write_exact(&tx, &all, false)?;
    tx.commit()
}

#[async_trait]
impl FeedbackStore for SqliteStore {
    async fn put_feedback(&self, row: &FeedbackRow) -> Result<()> {
        let r = row.clone();
        let inserted = self
            .run(move |c| {
                let tx = c.transaction()?;
                let inserted = put_with_aggregates(&tx, &r)?;
                tx.commit()?;
                Ok(inserted)
            })
            .await?;
        if inserted {
            Ok(())
        } else {
            Err(StoreError::AlreadyExists)
        }
    }

    async fn merchant_ledger(&self, merchant: &str, since: Unix) -> Result<MerchantLedger> {
        let merchant = merchant.to_owned();
        self.run(move |c| {
            let mut st = c.prepare(&format!(
                "SELECT {FEEDBACK_COLUMNS} FROM feedback WHERE merchant = ?1 AND block_time >= ?2 ORDER BY block_time DESC, tx_hash DESC"
            ))?;
            let rows = st
                .query_map(params![merchant, since], feedback_from_row)?
                .collect::<rusqlite::Result<_>>()?;
            let mut st = c.prepare(&format!(
                "SELECT {PAIR_COLUMNS} FROM feedback_pairs WHERE merchant = ?1 AND latest >= ?2 ORDER BY payer"
            ))?;
            let pairs = st
                .query_map(params![merchant, since], pair_from_row)?
                .collect::<rusqlite::Result<_>>()?;
            Ok(MerchantLedger { rows, pairs })
        })
        .await
    }

    async fn load_feedback(&self, rows: &[FeedbackRow]) -> Result<()> {
        let rows = rows.to_vec();
        self.run(move |c| {
            let tx = c.transaction()?;
            write_exact(&tx, &rows, true)?;
            tx.commit()
        })
        .await
    }
}
