//! What a reputation report reads of its payers, kept current by every feedback write.
//!
//! A report on merchant M asks three questions of each payer p with a row for M in the
//! window `[since, now]`: has p another row in the window (else it is *single use*), a
//! row for another merchant (*cross merchant*), a row for an anchor merchant
//! (*anchored*)? Reading p's history to answer costs a query per payer, and a merchant
//! can buy itself 100,000 payers. So every write keeps two kinds of record:
//!
//! - per payer, a [`PayerAgg`]: its two latest rows, its two latest distinct merchants
//!   (each with its latest row) and its latest anchor row;
//! - per (merchant, payer), a [`PairSummary`] stored on the merchant's own index: the
//!   latest time p paid M and, for each question, the latest time that answers yes.
//!
//! A report reads the merchant's rows and pairs, its own index pages, and nothing else.
//!
//! **Why a write touches at most two pairs.** A pair is read only by reports whose
//! `since ≤ latest`. Its `other_row` must be `≥ since` exactly when p has another row in
//! the window, for every such `since`. Once `other_row ≥ latest` it answers yes for all
//! of them and never needs touching again (the pair is *settled*); an unsettled pair
//! needs the exact value. A pair is unsettled for `other_row` only while M holds p's
//! strictly latest row, and for `other_merchant` only while M is p's strictly latest
//! merchant: one pair per payer, the one [`PayerAgg`] names ([`PayerAgg::holder`]). So a
//! write changes its row, its payer, its own pair and that one other pair, whatever the
//! order block times arrive in. *Anchored* is a payer-wide fact with no such shortcut:
//! a new anchor row later than the payer's latest one spreads to the payer's other
//! pairs ([`Update::spread_anchor`]): at most once per anchor payment, each costing the
//! payer a transfer it does not get back. (The embedded store skips pairs whose latest
//! row is more than [`SPREAD_HORIZON_SECS`] older than the anchor row: no report can
//! read them, since a report's window ends at its issue time, after every row.)
//!
//! [`exact`] computes the same records from every row by brute force: the oracle the
//! tests hold the incremental path to, and the bulk loader (migrations, benches).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{FeedbackRow, Unix};

/// The window reports cover, and the slack for a block time ahead of our clock: a pair
/// whose latest row is older than `WINDOW + SLACK` before an anchor row can no longer
/// be read by any report, so the anchor's spread skips it.
pub const SPREAD_HORIZON_SECS: Unix = umpire_core::product::FEEDBACK_WINDOW_DAYS * 86_400 + 86_400;

/// A merchant and the block time of a row for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub at: Unix,
    pub merchant: String,
}

/// One payer's latest activity, across merchants.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PayerAgg {
    pub payer: String,
    /// Its two latest rows, newest first (ties keep the earlier write first).
    pub rows: Vec<Stamp>,
    /// Its two latest distinct merchants, each with its latest row, newest first.
    pub merchants: Vec<Stamp>,
    /// Its latest row for an anchor merchant.
    pub anchored: Option<Unix>,
    /// The `anchored` value every pair of the payer has been told; lower than
    /// `anchored` while a spread is pending (a writer stopped mid-way: the next write
    /// of the payer finishes it).
    pub anchored_spread: Option<Unix>,
    /// How many pairs the payer has (merchants it ever paid): a spread that lists the
    /// pairs from an index which lags knows when it has not seen them all.
    #[serde(default)]
    pub pairs: u64,
    /// Bumped by every write: concurrent writers of one payer race on it.
    pub version: u64,
}

/// What a report on `merchant` reads of `payer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PairSummary {
    pub merchant: String,
    pub payer: String,
    /// Block time of the payer's latest row for the merchant.
    pub latest: Unix,
    /// Latest block time of the payer's rows other than that one (exact, or `≥ latest`).
    pub other_row: Option<Unix>,
    /// Latest block time of the payer's rows for other merchants (exact, or `≥ latest`).
    pub other_merchant: Option<Unix>,
    /// Latest block time of the payer's rows for an anchor merchant (exact).
    pub anchored: Option<Unix>,
}

impl PairSummary {
    /// The payer's only row in the window starting at `since` is this merchant's.
    pub fn single_use(&self, since: Unix) -> bool {
        self.other_row.is_none_or(|t| t < since)
    }

    /// The payer paid another merchant in the window.
    pub fn cross_merchant(&self, since: Unix) -> bool {
        self.other_merchant.is_some_and(|t| t >= since)
    }

    /// The payer paid an anchor merchant in the window.
    pub fn anchored(&self, since: Unix) -> bool {
        self.anchored.is_some_and(|t| t >= since)
    }
}

impl PayerAgg {
    /// The merchant, other than `merchant`, whose pair a row for `merchant` must update:
    /// the payer's strictly latest merchant (which also holds its strictly latest row,
    /// if any row is strictly latest). `None` when the latest is shared or is `merchant`.
    pub fn holder(&self, merchant: &str) -> Option<&str> {
        let first = self.merchants.first()?;
        let strict = self.merchants.get(1).is_none_or(|m| first.at > m.at);
        (strict && first.merchant != merchant).then_some(first.merchant.as_str())
    }

    /// Whether an anchor row is still to be told to some pairs.
    pub fn spread_pending(&self) -> Option<Unix> {
        self.anchored.filter(|a| self.anchored_spread < Some(*a))
    }
}

/// What one write changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// The payer's new aggregate (version bumped).
    pub payer: PayerAgg,
    /// The row's own pair.
    pub pair: PairSummary,
    /// The one other pair whose value the row changes ([`PayerAgg::holder`]).
    pub holder: Option<PairSummary>,
    /// Every other pair of the payer with `anchored` below this and a latest row within
    /// [`SPREAD_HORIZON_SECS`] of it must be raised to it; then the payer's
    /// `anchored_spread` is set to it.
    pub spread_anchor: Option<Unix>,
}

fn insert_top2(list: &mut Vec<Stamp>, stamp: Stamp, distinct: bool) {
    if let Some(i) = list
        .iter()
        .position(|s| distinct && s.merchant == stamp.merchant)
    {
        if list[i].at >= stamp.at {
            return;
        }
        list.remove(i);
    }
    // After every entry at least as new: equal times keep the earlier write first.
    let at = list
        .iter()
        .position(|s| s.at < stamp.at)
        .unwrap_or(list.len());
    list.insert(at, stamp);
    list.truncate(2);
}

/// The update a new `row` makes, given what the store holds: the payer's aggregate,
/// the row's pair and the holder's pair (both read by the keys `agg` names).
pub fn fold(
    agg: Option<&PayerAgg>,
    pair: Option<&PairSummary>,
    holder_pair: Option<&PairSummary>,
    row: &FeedbackRow,
) -> Update {
    let old = agg.cloned().unwrap_or_else(|| PayerAgg {
        payer: row.payer.clone(),
        ..PayerAgg::default()
    });
    let t = row.block_time;
    let mut new = old.clone();
    new.version = old.version + 1;
    if pair.is_none() {
        new.pairs += 1;
    }
    insert_top2(
        &mut new.rows,
        Stamp {
            at: t,
            merchant: row.merchant.clone(),
        },
        false,
    );
    insert_top2(
        &mut new.merchants,
        Stamp {
            at: t,
            merchant: row.merchant.clone(),
        },
        true,
    );
    if row.anchor {
        new.anchored = new.anchored.max(Some(t));
    }
    let latest_before = pair.map(|p| p.latest);
    let other_row = match latest_before {
        // The new row is the merchant's latest: every earlier row is "other".
        None => old.rows.first().map(|s| s.at),
        Some(l) if t >= l => old.rows.first().map(|s| s.at),
        // A late row: the merchant's latest stays; this one is another row.
        Some(_) => pair.and_then(|p| p.other_row).max(Some(t)),
    };
    let own = PairSummary {
        merchant: row.merchant.clone(),
        payer: row.payer.clone(),
        latest: latest_before.map_or(t, |l| l.max(t)),
        other_row,
        other_merchant: new
            .merchants
            .iter()
            .find(|s| s.merchant != row.merchant)
            .map(|s| s.at),
        anchored: new.anchored,
    };
    let holder = old.holder(&row.merchant).map(|m| {
        let base = holder_pair.cloned().unwrap_or_else(|| PairSummary {
            // Missing only if the store lost it: rebuilt from what the aggregate knows.
            merchant: m.to_owned(),
            payer: row.payer.clone(),
            latest: old.merchants.first().map_or(t, |s| s.at),
            other_row: old.rows.get(1).map(|s| s.at),
            other_merchant: old.merchants.get(1).map(|s| s.at),
            anchored: old.anchored,
        });
        PairSummary {
            other_row: base.other_row.max(Some(t)),
            other_merchant: base.other_merchant.max(Some(t)),
            anchored: new.anchored,
            ..base
        }
    });
    let spread_anchor = new.spread_pending();
    Update {
        payer: new,
        pair: own,
        holder,
        spread_anchor,
    }
}

/// The exact aggregates and pairs of `rows` (any order), by brute force.
pub fn exact(rows: &[FeedbackRow]) -> (Vec<PayerAgg>, Vec<PairSummary>) {
    let mut by_payer: BTreeMap<&str, Vec<&FeedbackRow>> = BTreeMap::new();
    for r in rows {
        by_payer.entry(r.payer.as_str()).or_default().push(r);
    }
    let mut aggs = Vec::new();
    let mut pairs = Vec::new();
    for (payer, mut theirs) in by_payer {
        theirs.sort_by_key(|r| std::cmp::Reverse(r.block_time));
        let anchored = theirs
            .iter()
            .filter(|r| r.anchor)
            .map(|r| r.block_time)
            .max();
        let mut latest: BTreeMap<&str, Unix> = BTreeMap::new();
        for r in &theirs {
            let e = latest.entry(r.merchant.as_str()).or_insert(r.block_time);
            *e = (*e).max(r.block_time);
        }
        let mut merchants: Vec<Stamp> = latest
            .iter()
            .map(|(m, at)| Stamp {
                at: *at,
                merchant: (*m).to_owned(),
            })
            .collect();
        merchants.sort_by_key(|m| std::cmp::Reverse(m.at));
        for (m, at) in &latest {
            // The other rows: all but one row of this merchant at its latest time.
            let mut skipped = false;
            let other_row = theirs
                .iter()
                .filter(|r| {
                    let is_latest = !skipped && r.merchant == *m && r.block_time == *at;
                    skipped |= is_latest;
                    !is_latest
                })
                .map(|r| r.block_time)
                .max();
            pairs.push(PairSummary {
                merchant: (*m).to_owned(),
                payer: payer.to_owned(),
                latest: *at,
                other_row,
                other_merchant: latest
                    .iter()
                    .filter(|(o, _)| *o != m)
                    .map(|(_, t)| *t)
                    .max(),
                anchored,
            });
        }
        aggs.push(PayerAgg {
            payer: payer.to_owned(),
            rows: theirs
                .iter()
                .take(2)
                .map(|r| Stamp {
                    at: r.block_time,
                    merchant: r.merchant.clone(),
                })
                .collect(),
            merchants: merchants.into_iter().take(2).collect(),
            anchored,
            anchored_spread: anchored,
            pairs: latest.len() as u64,
            version: 1,
        });
    }
    (aggs, pairs)
}

/// Whether two sets of pairs give every report the same answers: same keys and
/// latest times, and each question answered alike for every `since ≤ latest`.
pub fn equivalent(a: &PairSummary, b: &PairSummary) -> bool {
    // A value ≥ latest answers yes for every since ≤ latest; below it, only the exact
    // value answers every since alike.
    let same = |x: Option<Unix>, y: Option<Unix>, latest: Unix| {
        let cap = |v: Option<Unix>| v.map(|t| t.min(latest));
        cap(x) == cap(y)
    };
    a.merchant == b.merchant
        && a.payer == b.payer
        && a.latest == b.latest
        && same(a.other_row, b.other_row, a.latest)
        && same(a.other_merchant, b.other_merchant, a.latest)
        && same(a.anchored, b.anchored, a.latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(n: u64, merchant: &str, payer: &str, t: Unix, anchor: bool) -> FeedbackRow {
        FeedbackRow {
            tx_hash: format!("0x{n:064x}"),
            merchant: merchant.into(),
            payer: payer.into(),
            outcome: "fulfilled".into(),
            would_repeat: None,
            latency_ms: None,
            amount_units: "10000".into(),
            block_time: t,
            created_at: t,
            anchor,
        }
    }

    /// An in-memory store of aggregates, folded one row at a time.
    #[derive(Default)]
    struct Folded {
        aggs: BTreeMap<String, PayerAgg>,
        pairs: BTreeMap<(String, String), PairSummary>,
    }

    impl Folded {
        fn put(&mut self, r: &FeedbackRow) {
            let agg = self.aggs.get(&r.payer);
            let pair = self.pairs.get(&(r.merchant.clone(), r.payer.clone()));
            let holder = agg
                .and_then(|a| a.holder(&r.merchant))
                .and_then(|h| self.pairs.get(&(h.to_owned(), r.payer.clone())));
            let u = fold(agg, pair, holder, r);
            if let Some(a) = u.spread_anchor {
                for p in self.pairs.values_mut().filter(|p| p.payer == r.payer) {
                    if p.latest + SPREAD_HORIZON_SECS >= a {
                        p.anchored = p.anchored.max(Some(a));
                    }
                }
            }
            for p in [Some(u.pair), u.holder].into_iter().flatten() {
                self.pairs.insert((p.merchant.clone(), p.payer.clone()), p);
            }
            let mut agg = u.payer;
            agg.anchored_spread = agg.anchored;
            self.aggs.insert(r.payer.clone(), agg);
        }
    }

    #[test]
    fn folding_rows_in_any_order_answers_like_brute_force() {
        let ms = ["0xm1", "0xm2", "0xm3", "0xanchor"];
        let ps = ["0xp1", "0xp2", "0xp3"];
        // A small generator: many shuffled histories with ties and late rows.
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        for _ in 0..3_000 {
            let count = 1 + next(9);
            let rows: Vec<FeedbackRow> = (0..count)
                .map(|n| {
                    let m = ms[next(4) as usize];
                    row(
                        n,
                        m,
                        ps[next(3) as usize],
                        1_000 + 10 * next(6),
                        m == "0xanchor",
                    )
                })
                .collect();
            let mut folded = Folded::default();
            for r in &rows {
                folded.put(r);
            }
            let (exact_aggs, exact_pairs) = exact(&rows);
            assert_eq!(exact_pairs.len(), folded.pairs.len(), "{rows:?}");
            for a in &exact_aggs {
                assert_eq!(folded.aggs[&a.payer].pairs, a.pairs, "{rows:?}");
            }
            for e in &exact_pairs {
                let got = &folded.pairs[&(e.merchant.clone(), e.payer.clone())];
                assert!(equivalent(got, e), "{got:?} vs exact {e:?} after {rows:?}");
            }
        }
    }

    #[test]
    fn a_write_touches_its_pair_and_at_most_the_holder() {
        let mut f = Folded::default();
        f.put(&row(1, "0xm1", "0xp", 100, false));
        let agg = &f.aggs["0xp"];
        assert_eq!(agg.holder("0xm2"), Some("0xm1"));
        assert_eq!(
            agg.holder("0xm1"),
            None,
            "its own latest: nothing else to tell"
        );
        f.put(&row(2, "0xm2", "0xp", 100, false));
        // Both at 100: nobody holds the latest alone, both pairs are settled.
        assert_eq!(f.aggs["0xp"].holder("0xm3"), None);
        let p1 = &f.pairs[&("0xm1".to_owned(), "0xp".to_owned())];
        assert!(!p1.single_use(100) && p1.cross_merchant(100));
    }
}
