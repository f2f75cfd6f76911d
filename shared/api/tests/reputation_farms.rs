//! A market simulated row by row through the embedded store and read as the route
//! reads it: honest merchants and payers spread by heavy-tailed laws, and farms built
//! by seven strategies, each by a farmer who has read docs/reputation.md. On the
//! documented signals, one stated rule ([`looks_farmed`], the reading docs/reputation.md
//! gives) flags every farm and no honest ledger of the same size, under three seeds.
//! The signals of the first wave alone do not: a farm whose wallets also pay a sock
//! merchant reads like an honest ledger on them.

use std::collections::BTreeMap;

use umpire_api::products::reputation::{metrics, read_ledger};
use umpire_core::json::Value;
use umpire_store::sqlite::SqliteStore;
use umpire_store::{FeedbackRow, FeedbackStore};

const NOW: u64 = 1_800_000_000;
const WINDOW: u64 = umpire_core::product::FEEDBACK_WINDOW_DAYS * 86_400;
const FLOOR: u64 = umpire_core::product::MIN_FEEDBACK_USDC_UNITS;

/// Honest ledgers this small are not judged (a handful of rows proves little either way).
const MIN_ROWS: usize = 40;

// The rule: a ledger looks farmed when any of these holds.
/// Fewer anchored payers than this share: nobody with a history of paying a party
/// that keeps the money vouches for the merchant.
const MIN_ANCHORED_PAYER_SHARE: f64 = 0.15;
/// One payer wrote more than this share of the rows.
const MAX_TOP_PAYER_SHARE: f64 = 0.5;
/// The payers wrote more rows each than this, on average: a few wallets, however
/// anchored, make the ledger.
const MAX_ROWS_PER_PAYER: f64 = 4.0;
/// Anchored and unanchored payers disagree on the merchant by more than this
/// (fulfillment rates): a smear, or praise bought from fresh wallets.
const MAX_FULFILLMENT_GAP: f64 = 0.3;

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut v = v;
    for k in path {
        v = v.get(k).unwrap_or_else(|| panic!("{path:?}"));
    }
    v.as_f64().unwrap_or_else(|| panic!("{path:?} is a number"))
}

/// The stated rule, and the reason it fires.
fn looks_farmed(report: &Value) -> Option<&'static str> {
    if f(report, &["independence", "anchored_payer_share"]) < MIN_ANCHORED_PAYER_SHARE {
        return Some("few anchored payers");
    }
    if f(report, &["payer_concentration", "top_payer_share"]) > MAX_TOP_PAYER_SHARE {
        return Some("one payer dominates");
    }
    if f(report, &["feedback_count"]) > MAX_ROWS_PER_PAYER * f(report, &["unique_payers"]) {
        return Some("few payers write the rows");
    }
    // The gap means something only when both kinds of payer wrote rows.
    let anchored_rows = f(report, &["independence", "anchored_rows"]);
    if anchored_rows > 0.0 && anchored_rows < f(report, &["feedback_count"]) {
        let gap = f(report, &["independence", "anchored_fulfillment_rate"])
            - f(report, &["independence", "unanchored_fulfillment_rate"]);
        if gap.abs() > MAX_FULFILLMENT_GAP {
            return Some("anchored and unanchored payers disagree");
        }
    }
    None
}

/// A small deterministic generator.
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
    fn unit(&mut self) -> f64 {
        (self.next(1 << 30) as f64 + 0.5) / f64::from(1u32 << 30)
    }
}

fn addr(kind: u64, i: u64) -> String {
    format!("0x{kind:08x}{i:032x}")
}

struct Market {
    rows: Vec<FeedbackRow>,
    anchors: Vec<String>,
    rng: Lcg,
}

impl Market {
    fn pay(&mut self, merchant: &str, payer: &str, units: u64, outcome: &str) {
        let t = NOW - 1 - self.rng.next(WINDOW - 10);
        let n = self.rows.len();
        self.rows.push(FeedbackRow {
            tx_hash: format!("0x{n:064x}"),
            merchant: merchant.into(),
            payer: payer.into(),
            outcome: outcome.into(),
            would_repeat: None,
            latency_ms: None,
            amount_units: units.to_string(),
            block_time: t,
            created_at: NOW,
            anchor: self.anchors.iter().any(|a| a == merchant),
        });
    }

    /// 300 merchants chosen by a Zipf law, 8,000 payers whose activity follows a
    /// Pareto law (P(rows ≥ k) = k^-1.5, most pay once), amounts log-uniform from the
    /// floor to 20 USDC, each merchant with its own quality. Three of the 12 most
    /// popular merchants are the anchors.
    fn honest(seed: u64) -> Market {
        const MERCHANTS: u64 = 300;
        let anchors = [1, 4, 10].map(|r| addr(0xaa, r)).to_vec();
        let mut m = Market {
            rows: Vec::new(),
            anchors,
            rng: Lcg(seed),
        };
        let weights: Vec<f64> = (1..=MERCHANTS).map(|r| 1.0 / r as f64).collect();
        let total: f64 = weights.iter().sum();
        let quality: Vec<f64> = (0..MERCHANTS).map(|_| 0.55 + 0.4 * m.rng.unit()).collect();
        for p in 0..8_000 {
            let payer = addr(0xc0, p);
            let k = (m.rng.unit().powf(-1.0 / 1.5) as u64).clamp(1, 40);
            for _ in 0..k {
                let mut pick = m.rng.unit() * total;
                let mut rank = 0;
                while pick > weights[rank] && rank + 1 < weights.len() {
                    pick -= weights[rank];
                    rank += 1;
                }
                let units = (FLOOR as f64 * (2_000.0f64).powf(m.rng.unit())) as u64;
                let u = m.rng.unit();
                let q = quality[rank];
                let outcome = if u < q {
                    "fulfilled"
                } else if u < q + (1.0 - q) / 2.0 {
                    "partial"
                } else {
                    "failed"
                };
                m.pay(&addr(0xaa, rank as u64), &payer, units, outcome);
            }
        }
        m
    }
}

/// The six strategies, each building a ledger of about `n` rows on a fresh target
/// (or, for the smear, on an honest victim).
#[derive(Debug, Clone, Copy)]
enum Farm {
    /// n fresh wallets pay the target the floor once each.
    Fresh,
    /// ...and each also pays a sock merchant the farmer owns (the money comes back).
    FreshWithSock,
    /// 5 wallets and the target pay each other back and forth, n/5 times each way.
    RoundTrips,
    /// One wallet pays the target n times, 5 USDC each, cycled; it also paid an anchor
    /// once, so it is anchored.
    Whale,
    /// 20 sock merchants pay and review each other, then the target n/20 times each.
    Ring,
    /// n "failed" rows on an honest competitor of n rows, from fresh wallets that each
    /// also pay a sock merchant.
    Smear,
    /// Three wallets, two of them anchored (one payment to an anchor each), write the
    /// n rows: anchored share 2/3 and no payer above a third, for 0.02 USDC.
    FewAnchored,
}

impl Farm {
    const ALL: [Farm; 7] = [
        Farm::Fresh,
        Farm::FreshWithSock,
        Farm::RoundTrips,
        Farm::Whale,
        Farm::Ring,
        Farm::Smear,
        Farm::FewAnchored,
    ];

    /// Adds the farm to the market; returns the merchant whose ledger it made.
    fn build(self, m: &mut Market, n: u64, id: u64, victim: &str) -> String {
        let target = addr(0xf0 + id, 0);
        let wallet = |i: u64| addr(0xe000 + id, i);
        let sock = addr(0xd0 + id, 0);
        match self {
            Farm::Fresh => {
                for i in 0..n {
                    m.pay(&target, &wallet(i), FLOOR, "fulfilled");
                }
            }
            Farm::FreshWithSock => {
                for i in 0..n {
                    m.pay(&target, &wallet(i), FLOOR, "fulfilled");
                    m.pay(&sock, &wallet(i), FLOOR, "fulfilled");
                }
            }
            Farm::RoundTrips => {
                for i in 0..n {
                    m.pay(&target, &wallet(i % 5), 1_000_000, "fulfilled");
                    m.pay(&wallet(i % 5), &target, 1_000_000, "fulfilled");
                }
            }
            Farm::Whale => {
                let anchor = m.anchors[0].clone();
                m.pay(&anchor, &wallet(0), FLOOR, "fulfilled");
                for _ in 0..n {
                    m.pay(&target, &wallet(0), 5_000_000, "fulfilled");
                }
            }
            Farm::Ring => {
                let member = |i: u64| addr(0xd100 + id, i);
                for i in 0..20 {
                    for j in (0..20).filter(|j| *j != i) {
                        m.pay(&member(j), &member(i), FLOOR, "fulfilled");
                    }
                }
                for i in 0..n {
                    m.pay(&target, &member(i % 20), 100_000, "fulfilled");
                }
            }
            Farm::FewAnchored => {
                let anchor = m.anchors[1].clone();
                m.pay(&anchor, &wallet(0), FLOOR, "fulfilled");
                m.pay(&anchor, &wallet(1), FLOOR, "fulfilled");
                for i in 0..n {
                    m.pay(&target, &wallet(i % 3), 1_000_000, "fulfilled");
                }
            }
            Farm::Smear => {
                for i in 0..n {
                    m.pay(victim, &wallet(i), FLOOR, "failed");
                    m.pay(&sock, &wallet(i), FLOOR, "fulfilled");
                }
                return victim.to_owned();
            }
        }
        target
    }
}

async fn reports(m: &Market) -> BTreeMap<String, Value> {
    let store = SqliteStore::in_memory().expect("sqlite");
    for r in &m.rows {
        store.put_feedback(r).await.expect("put");
    }
    let mut merchants: Vec<&str> = m.rows.iter().map(|r| r.merchant.as_str()).collect();
    merchants.sort_unstable();
    merchants.dedup();
    let mut out = BTreeMap::new();
    for merchant in merchants {
        let ledger = read_ledger(&store, merchant, NOW - WINDOW)
            .await
            .expect("ledger");
        out.insert(merchant.to_owned(), metrics(&ledger, &m.anchors));
    }
    out
}

fn rows(report: &Value) -> usize {
    report
        .get("feedback_count")
        .and_then(Value::as_u64)
        .unwrap_or(0) as usize
}

fn line(name: &str, r: &Value) -> String {
    format!(
        "{name:<16} rows {:>5}  per payer {:>6.2}  anchored {:.3}  top {:.3}  gap {:+.3}  single-use {:.3}  cross {:.3}",
        rows(r),
        f(r, &["feedback_count"]) / f(r, &["unique_payers"]),
        f(r, &["independence", "anchored_payer_share"]),
        f(r, &["payer_concentration", "top_payer_share"]),
        f(r, &["independence", "anchored_fulfillment_rate"])
            - f(r, &["independence", "unanchored_fulfillment_rate"]),
        f(r, &["payer_concentration", "single_use_payer_share"]),
        f(r, &["payer_concentration", "cross_merchant_payer_share"]),
    )
}

async fn every_farm_is_told_from_every_honest_ledger(seed: u64) {
    let honest = Market::honest(seed);
    let honest_reports = reports(&honest).await;
    let judged: Vec<(&String, &Value)> = honest_reports
        .iter()
        .filter(|(m, r)| rows(r) >= MIN_ROWS && !honest.anchors.contains(m))
        .collect();
    assert!(judged.len() >= 30, "{} honest ledgers judged", judged.len());
    let mut sizes: Vec<usize> = judged.iter().map(|(_, r)| rows(r)).collect();
    sizes.sort_unstable();
    for (m, r) in &judged {
        assert_eq!(looks_farmed(r), None, "honest {}", line(m, r));
    }
    // How close honest ledgers come to each threshold.
    let extreme = |path: &[&str], pick: fn(f64, f64) -> f64| {
        judged
            .iter()
            .map(|(_, r)| f(r, path))
            .reduce(pick)
            .unwrap_or(0.0)
    };
    let gaps = judged.iter().map(|(_, r)| {
        (f(r, &["independence", "anchored_fulfillment_rate"])
            - f(r, &["independence", "unanchored_fulfillment_rate"]))
        .abs()
    });
    let rows_per_payer = judged
        .iter()
        .map(|(_, r)| f(r, &["feedback_count"]) / f(r, &["unique_payers"]));
    eprintln!(
        "honest extremes: anchored share ≥ {:.3}, top payer share ≤ {:.3}, rows per payer ≤ {:.2}, |gap| ≤ {:.3}",
        extreme(&["independence", "anchored_payer_share"], f64::min),
        extreme(&["payer_concentration", "top_payer_share"], f64::max),
        rows_per_payer.fold(0.0, f64::max),
        gaps.fold(0.0, f64::max)
    );
    // Farms the size of the smallest, the median and a large honest ledger.
    let targets = [
        sizes[0],
        sizes[sizes.len() / 2],
        sizes[sizes.len() * 9 / 10],
    ];
    // The smear's victims: honest merchants of about those sizes.
    let victim_of = |n: usize| {
        judged
            .iter()
            .min_by_key(|(_, r)| rows(r).abs_diff(n))
            .map(|(m, _)| (*m).clone())
            .expect("a victim")
    };
    let mut market = Market {
        rows: honest.rows.clone(),
        anchors: honest.anchors.clone(),
        rng: Lcg(seed ^ 0x5eed),
    };
    let mut farmed = Vec::new();
    for (size_i, n) in targets.iter().enumerate() {
        for (farm_i, farm) in Farm::ALL.iter().enumerate() {
            let victim = victim_of(*n);
            let victim_rows = rows(&honest_reports[&victim]) as u64;
            let count = if matches!(farm, Farm::Smear) {
                victim_rows
            } else {
                *n as u64
            };
            let id = (size_i * Farm::ALL.len() + farm_i) as u64;
            farmed.push((*farm, market_build(&mut market, *farm, count, id, &victim)));
        }
    }
    let all = reports(&market).await;
    eprintln!(
        "seed {seed}: {} honest ledgers of {}..{} rows pass",
        judged.len(),
        sizes[0],
        sizes[sizes.len() - 1]
    );
    for (farm, merchant) in &farmed {
        let r = &all[merchant];
        eprintln!("{}", line(&format!("{farm:?}"), r));
        assert!(
            looks_farmed(r).is_some(),
            "{farm:?} passes: {}",
            line(&format!("{farm:?}"), r)
        );
        // Same size as an honest ledger that passes: the signals, not the size, tell.
        assert!(rows(r) >= MIN_ROWS);
    }
    // The first wave's signals alone: the sock merchant makes the farm read honest.
    let sock_farm = &all[&farmed[1].1];
    assert_eq!(
        f(
            sock_farm,
            &["payer_concentration", "single_use_payer_share"]
        ),
        0.0
    );
    assert_eq!(
        f(
            sock_farm,
            &["payer_concentration", "cross_merchant_payer_share"]
        ),
        1.0
    );
}

fn market_build(m: &mut Market, farm: Farm, n: u64, id: u64, victim: &str) -> String {
    farm.build(m, n, id, victim)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn farms_are_told_from_honest_ledgers_seed_1() {
    every_farm_is_told_from_every_honest_ledger(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn farms_are_told_from_honest_ledgers_seed_2() {
    every_farm_is_told_from_every_honest_ledger(2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn farms_are_told_from_honest_ledgers_seed_3() {
    every_farm_is_told_from_every_honest_ledger(3).await;
}
