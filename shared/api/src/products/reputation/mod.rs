//! `GET /v1/reputation?merchant=0x…` ($0.01): the signed reputation report.
//!
//! The report is exact over the merchant's whole 90-day window, and reads only what is
//! the merchant's own, never the table: its rows in the window and, for the
//! independence signals, one pair per payer that feedback writes keep current
//! (`umpire_store::aggregates`). However many payers a merchant has and however long
//! their histories, a report is the merchant's own index pages. Every metric is
//! defined in docs/reputation.md.

pub mod feedback;

use std::collections::{BTreeMap, BTreeSet};

use umpire_chain::Outcome;
use umpire_chain::claim::{lower_hex, parse_address};
use umpire_core::document::sign;
use umpire_core::json::Value;
use umpire_core::product::{
    BASE_CHAIN_ID, FEEDBACK_WINDOW_DAYS, MIN_FEEDBACK_USDC_UNITS, REPUTATION_PRICE,
};
use umpire_core::{ApiError, ErrorCode};
use umpire_host::random_id;
use umpire_store::aggregates::PairSummary;
use umpire_store::{FeedbackRow, Store, StoreError};

use crate::checkout::discovery::{Input, Listing};
use crate::checkout::{self, NothingAfter, Prepared, Product};
use crate::plumbing::respond;
use crate::plumbing::state::{AppState, Request, Response};
use crate::products::reputation::feedback::usdc_decimal;

pub const REPUTATION_DOCUMENT: &str = "umpire.reputation.v1";

pub const CAVEAT: &str = "Each row proves a successful USDC transfer of at least min_feedback_usdc from the payer to this merchant on the chain named by chain_id (8453: Base) within the window, and a signature of the feedback by the wallet that paid. It does not prove an independent counterparty: a merchant can pay itself from wallets it owns for the price of the transfers. Read independence (payers who also paid an anchor, a party the merchant does not control), payer_concentration and weighted_fulfillment_rate before feedback_count. No feedback is not a judgment.";

/// What one report reads.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// The window's first second.
    pub since: u64,
    /// The merchant's rows in the window, newest first: all of them.
    pub rows: Vec<FeedbackRow>,
    /// One per payer with a row in the window: what the independence signals ask.
    pub pairs: Vec<PairSummary>,
}

fn units(row: &FeedbackRow) -> u128 {
    row.amount_units.parse().unwrap_or(0)
}

/// Payers by attested volume to the merchant, largest first (ties: by address).
fn payers_by_volume(rows: &[FeedbackRow]) -> Vec<(String, u128)> {
    let mut volume: BTreeMap<&str, u128> = BTreeMap::new();
    for r in rows {
        *volume.entry(r.payer.as_str()).or_default() += units(r);
    }
    let mut v: Vec<(String, u128)> = volume.into_iter().map(|(p, u)| (p.to_owned(), u)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

pub async fn read_ledger(
    store: &dyn Store,
    merchant: &str,
    since: u64,
) -> Result<Ledger, StoreError> {
    let read = store.merchant_ledger(merchant, since).await?;
    Ok(Ledger {
        since,
        rows: read.rows,
        pairs: read.pairs,
    })
}

/// num/den rounded half up to 4 decimal places; 0 when there is nothing to divide.
fn ratio(num: u128, den: u128) -> Value {
    if den == 0 {
        return Value::from(0.0);
    }
    let basis_points = (num * 20_000 + den) / (2 * den);
    Value::from(basis_points as f64 / 10_000.0)
}

/// The middle value, or the mean of the two middle values rounded down.
fn median(mut v: Vec<u128>) -> u128 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2
    }
}

/// Half-points per outcome: fulfilled 2, partial 1, failed 0 (partial counts half).
fn half_points(outcome: &str) -> u128 {
    match Outcome::parse(outcome) {
        Some(Outcome::Fulfilled) => 2,
        Some(Outcome::Partial) => 1,
        _ => 0,
    }
}

/// Fulfillment half-points of `rows` over twice their count: the fulfillment rate.
fn fulfillment<'a>(rows: impl Iterator<Item = &'a FeedbackRow>) -> Value {
    let (points, count) = rows.fold((0u128, 0u128), |(p, c), r| {
        (p + half_points(&r.outcome), c + 1)
    });
    ratio(points, 2 * count)
}

/// The signals that weigh a payer by whom else it paid (docs/reputation.md).
fn independence(ledger: &Ledger, anchors: &[String]) -> Value {
    let since = ledger.since;
    let anchored: BTreeSet<&str> = ledger
        .pairs
        .iter()
        .filter(|p| p.anchored(since))
        .map(|p| p.payer.as_str())
        .collect();
    let (with, without): (Vec<&FeedbackRow>, Vec<&FeedbackRow>) = ledger
        .rows
        .iter()
        .partition(|r| anchored.contains(r.payer.as_str()));
    Value::object()
        .with(
            "anchors",
            Value::Array(anchors.iter().map(|a| Value::from(a.as_str())).collect()),
        )
        .with("anchored_payers", anchored.len())
        .with(
            "anchored_payer_share",
            ratio(anchored.len() as u128, ledger.pairs.len() as u128),
        )
        .with("anchored_rows", with.len())
        .with("anchored_fulfillment_rate", fulfillment(with.into_iter()))
        .with(
            "unanchored_fulfillment_rate",
            fulfillment(without.into_iter()),
        )
}

/// The report's fields (everything but the envelope and the signature).
pub fn metrics(ledger: &Ledger, anchors: &[String]) -> Value {
    let rows = &ledger.rows;
    let count = rows.len() as u128;
    let volume: u128 = rows.iter().map(units).sum();
    let mut outcomes: BTreeMap<&str, u64> = Outcome::ALL.iter().map(|o| (o.as_str(), 0)).collect();
    for r in rows {
        if let Some(n) = outcomes.get_mut(r.outcome.as_str()) {
            *n += 1;
        }
    }
    let points: u128 = rows.iter().map(|r| half_points(&r.outcome)).sum();
    let weighted_points: u128 = rows
        .iter()
        .map(|r| units(r) * half_points(&r.outcome))
        .sum();
    let repeat_answers: Vec<bool> = rows.iter().filter_map(|r| r.would_repeat).collect();
    let latencies: Vec<u128> = rows
        .iter()
        .filter_map(|r| r.latency_ms.map(u128::from))
        .collect();
    let by_payer = payers_by_volume(rows);
    let seen = |pick: fn(u64, u64) -> u64| {
        rows.iter()
            .map(|r| r.block_time)
            .reduce(pick)
            .map(umpire_core::time::rfc3339)
    };
    Value::object()
        .with("feedback_count", rows.len())
        .with("unique_payers", by_payer.len())
        .with("usdc_volume_attested", usdc_decimal(volume))
        .with(
            "median_amount_usdc",
            usdc_decimal(median(rows.iter().map(units).collect())),
        )
        .with(
            "outcomes",
            outcomes
                .iter()
                .fold(Value::object(), |v, (k, n)| v.with(*k, *n)),
        )
        .with("fulfillment_rate", ratio(points, 2 * count))
        .with(
            "weighted_fulfillment_rate",
            ratio(weighted_points, 2 * volume),
        )
        .with(
            "would_repeat_rate",
            ratio(
                repeat_answers.iter().filter(|b| **b).count() as u128,
                repeat_answers.len() as u128,
            ),
        )
        .with("would_repeat_answers", repeat_answers.len())
        // null when no row gave a latency: 0 would read as "instant".
        .with(
            "median_latency_ms",
            if latencies.is_empty() {
                Value::Null
            } else {
                Value::from(u64::try_from(median(latencies.clone())).unwrap_or(u64::MAX))
            },
        )
        .with("latency_answers", latencies.len())
        .with("payer_concentration", payer_concentration(ledger))
        .with("independence", independence(ledger, anchors))
        .with("first_seen", seen(u64::min))
        .with("last_seen", seen(u64::max))
        .with("rows_read", rows.len())
        // Reports are exact: every row of the window is read. Kept for clients that
        // read it from earlier reports.
        .with("rows_truncated", false)
}

/// How concentrated the merchant's payers are: the top payer's share of rows, and of
/// the payers examined, those that paid only here once and those that paid elsewhere.
fn payer_concentration(ledger: &Ledger) -> Value {
    let rows = &ledger.rows;
    let count = rows.len() as u128;
    let mut rows_per_payer: BTreeMap<&str, u128> = BTreeMap::new();
    for r in rows {
        *rows_per_payer.entry(r.payer.as_str()).or_default() += 1;
    }
    let top_payer_rows = rows_per_payer.values().copied().max().unwrap_or(0);
    let examined = ledger.pairs.len() as u128;
    let single_use = ledger
        .pairs
        .iter()
        .filter(|p| p.single_use(ledger.since))
        .count() as u128;
    let cross_merchant = ledger
        .pairs
        .iter()
        .filter(|p| p.cross_merchant(ledger.since))
        .count() as u128;
    Value::object()
        .with("top_payer_share", ratio(top_payer_rows, count))
        .with("single_use_payer_share", ratio(single_use, examined))
        .with(
            "cross_merchant_payer_share",
            ratio(cross_merchant, examined),
        )
        .with("payers_examined", ledger.pairs.len())
}

/// The signed report for `merchant` (lowercase hex) as of `now`.
pub fn signed_report(state: &AppState, merchant: &str, ledger: &Ledger, now: u64) -> Value {
    let since = now.saturating_sub(FEEDBACK_WINDOW_DAYS * 86_400);
    let Value::Object(fields) = metrics(ledger, &state.config.reputation_anchors) else {
        unreachable!("metrics is an object")
    };
    let mut doc = Value::object()
        .with("document", REPUTATION_DOCUMENT)
        .with("report_id", random_id("rep"))
        .with("merchant", merchant)
        .with(
            "chain_id",
            state
                .feedback_chain
                .as_ref()
                .map_or(BASE_CHAIN_ID, |c| c.config().chain_id),
        )
        .with("issued_at", umpire_core::time::rfc3339(now))
        .with("issuer", state.config.issuer.as_str())
        .with("key_id", state.signer.key_id())
        .with(
            "window",
            Value::object()
                .with("days", FEEDBACK_WINDOW_DAYS)
                .with("from", umpire_core::time::rfc3339(since))
                .with("to", umpire_core::time::rfc3339(now)),
        )
        .with(
            "min_feedback_usdc",
            usdc_decimal(u128::from(MIN_FEEDBACK_USDC_UNITS)),
        )
        .with("caveat", CAVEAT);
    for (k, v) in fields {
        doc = doc.with(k, v);
    }
    sign(doc, state.signer.as_ref())
}

fn merchant_of(req: &Request) -> Result<String, ApiError> {
    let query = req.uri().query().unwrap_or("");
    let mut merchant = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "merchant" {
            merchant = Some(v.to_owned());
        } else {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("unknown query parameter {k:?}"),
                "Ask GET /v1/reputation?merchant=0x<40 hex digits>.",
            ));
        }
    }
    let raw = merchant.ok_or_else(|| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            "merchant is required",
            "Ask GET /v1/reputation?merchant=0x<40 hex digits>; nothing was charged.",
        )
    })?;
    parse_address(&raw)
        .map(|a| lower_hex(a.as_slice()))
        .map_err(|m| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("merchant: {m}"),
                "Send the merchant's address lowercase or EIP-55 checksummed; nothing was charged.",
            )
        })
}

pub async fn reputation(state: &AppState, req: &Request) -> Response {
    use tracing::Instrument as _;
    report(state, req)
        .instrument(checkout::purchase_span("reputation"))
        .await
}

async fn report(state: &AppState, req: &Request) -> Response {
    let deadline = state.config.clock.deadline(state.config.request_budget);
    if let Err(e) = crate::checkout::enforce_unpaid(state, req).await {
        return respond::error(&e);
    }
    let merchant = match merchant_of(req) {
        Ok(m) => m,
        Err(e) => return respond::error(&e),
    };
    let product = product();
    let mut checkout = match checkout::begin(state, req, product, deadline).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let now = state.config.clock.now();
    let since = now.saturating_sub(FEEDBACK_WINDOW_DAYS * 86_400);
    let read = tokio::time::timeout_at(
        checkout.work_deadline().instant().into(),
        read_ledger(state.store.as_ref(), &merchant, since),
    )
    .await;
    let ledger = match read {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return checkout.abandon(crate::plumbing::state::internal(e)).await,
        Err(_) => return checkout.out_of_time().await,
    };
    let report = signed_report(state, &merchant, &ledger, now);
    let receipt = Value::object()
        .with("price_usd", REPUTATION_PRICE.usd_decimal())
        .with("payer", checkout.payer.to_string());
    let body = Value::object()
        .with("report", report)
        .with("receipt", receipt);
    let prepared = Prepared::new(200, &body, &["receipt", "settlement"]);
    let answer = checkout
        .sell(&prepared, &NothingAfter)
        .await
        .map(|settlement| (prepared, settlement));
    checkout.finish(answer).await
}

/// The reputation report as checkout sells it: its price, its resource, and how
/// discovery (x402 Bazaar) lists it.
pub fn product() -> Product {
    Product {
        price: REPUTATION_PRICE,
        path: "/v1/reputation".into(),
        name: "a reputation report".into(),
        listing: Listing {
            description: "Umpire reputation report: a signed, payment-verified reputation of a merchant wallet (outcomes, repeat rate, volume, independence signals over 90 days); verifiable offline.".to_owned(),
            openapi_path: "/v1/reputation",
            input: Input::Query,
            success_status: "200",
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/reputation.md's rounding, at its edges: a rate exactly half a unit of the
    /// fourth place rounds up (1/20,000 is 0.00005 → 0.0001; 3/20,000 → 0.0002), just
    /// under half rounds down, nothing to divide is 0; an even count's median is the
    /// mean of the middle two rounded down to a base unit (1 and 2 → 1). Would catch:
    /// rounding to nearest-even or truncating, or a median given as a fraction.
    #[test]
    fn rates_round_half_up_and_even_medians_round_down() {
        let r = |n, d| ratio(n, d).as_f64().expect("a number");
        assert_eq!(r(1, 20_000), 0.0001);
        assert_eq!(r(3, 20_000), 0.0002);
        assert_eq!(r(5, 20_000), 0.0003);
        assert_eq!(r(49_999, 1_000_000_000), 0.0);
        assert_eq!(r(2, 3), 0.6667);
        assert_eq!(r(1, 3), 0.3333);
        assert_eq!(r(0, 0), 0.0);
        assert_eq!(median(vec![2, 1]), 1, "(1 + 2) / 2 rounded down");
        assert_eq!(median(vec![10_000, 10_001]), 10_000);
        assert_eq!(median(vec![3, 1, 2]), 2);
        assert_eq!(median(vec![]), 0);
    }

    const M: &str = "0x1111111111111111111111111111111111111111";
    const OTHER: &str = "0x2222222222222222222222222222222222222222";

    fn row(n: usize, merchant: &str, payer: &str, units: u64, outcome: &str) -> FeedbackRow {
        FeedbackRow {
            tx_hash: format!("0x{n:064x}"),
            merchant: merchant.into(),
            payer: payer.into(),
            outcome: outcome.into(),
            would_repeat: n.is_multiple_of(2).then_some(n.is_multiple_of(4)),
            latency_ms: n.is_multiple_of(3).then_some(100 * n as u64),
            amount_units: units.to_string(),
            block_time: 1_790_000_000 + n as u64,
            created_at: 1_790_000_100 + n as u64,
            anchor: false,
        }
    }

    /// The ledger of merchant `m` out of every row of the window, pairs by brute force.
    fn ledger_of(all: &[FeedbackRow], m: &str) -> Ledger {
        Ledger {
            since: 0,
            rows: all.iter().filter(|r| r.merchant == m).cloned().collect(),
            pairs: umpire_store::aggregates::exact(all)
                .1
                .into_iter()
                .filter(|p| p.merchant == m)
                .collect(),
        }
    }

    fn f(v: &Value, k: &str) -> f64 {
        v.get(k)
            .and_then(Value::as_f64)
            .unwrap_or_else(|| panic!("{k} in {v:?}"))
    }

    #[test]
    fn no_feedback_is_a_report_of_zeros() {
        let m = metrics(&Ledger::default(), &[]);
        assert_eq!(m.get("feedback_count").and_then(Value::as_u64), Some(0));
        assert_eq!(
            m.get("usdc_volume_attested").and_then(Value::as_str),
            Some("0")
        );
        assert_eq!(f(&m, "fulfillment_rate"), 0.0);
        assert_eq!(m.get("first_seen"), Some(&Value::Null));
        // No latency given: no median, not a median of 0.
        assert_eq!(m.get("median_latency_ms"), Some(&Value::Null));
        assert_eq!(m.get("latency_answers").and_then(Value::as_u64), Some(0));
        let pc = m.get("payer_concentration").expect("concentration");
        assert_eq!(f(pc, "single_use_payer_share"), 0.0);
    }

    #[test]
    fn rates_medians_and_weights_follow_their_definitions() {
        let p = |i: usize| format!("0x{:040x}", 0xa0 + i);
        // Two 1-USDC fulfilled, one 3-USDC partial, one 0.01 failed, from three payers.
        let all = vec![
            row(1, M, &p(1), 1_000_000, "fulfilled"),
            row(2, M, &p(1), 1_000_000, "fulfilled"),
            row(3, M, &p(2), 3_000_000, "partial"),
            row(4, M, &p(3), 10_000, "failed"),
            row(9, OTHER, &p(2), 50_000, "fulfilled"),
        ];
        let m = metrics(&ledger_of(&all, M), &[]);
        assert_eq!(m.get("unique_payers").and_then(Value::as_u64), Some(3));
        assert_eq!(
            m.get("usdc_volume_attested").and_then(Value::as_str),
            Some("5.01")
        );
        // Amounts 0.01, 1, 1, 3: the mean of the middle two.
        assert_eq!(
            m.get("median_amount_usdc").and_then(Value::as_str),
            Some("1")
        );
        // (2 + 0.5) / 4
        assert_eq!(f(&m, "fulfillment_rate"), 0.625);
        // (2 x 1 + 0.5 x 3) / 5.01 = 0.69860... -> 0.6986
        assert_eq!(f(&m, "weighted_fulfillment_rate"), 0.6986);
        // would_repeat given on rows 2 (false) and 4 (true).
        assert_eq!(f(&m, "would_repeat_rate"), 0.5);
        // latency given on row 3 only.
        assert_eq!(
            m.get("median_latency_ms").and_then(Value::as_u64),
            Some(300)
        );
        let pc = m.get("payer_concentration").expect("concentration");
        assert_eq!(f(pc, "top_payer_share"), 0.5);
        assert_eq!(f(pc, "single_use_payer_share"), 0.3333);
        assert_eq!(f(pc, "cross_merchant_payer_share"), 0.3333);
    }

    #[test]
    fn a_farmed_ledger_looks_farmed() {
        // 60 fresh wallets, one 0.01 "fulfilled" each, never seen elsewhere...
        let farmed_rows: Vec<FeedbackRow> = (0..60)
            .map(|i| row(i, M, &format!("0x{:040x}", 0xf000 + i), 10_000, "fulfilled"))
            .collect();
        let farmed = ledger_of(&farmed_rows, M);
        // ...against 10 real customers who each also buy from another merchant.
        let mut all = Vec::new();
        for i in 0..10 {
            let payer = format!("0x{:040x}", 0xc000 + i);
            all.push(row(
                100 + 2 * i,
                M,
                &payer,
                2_000_000,
                if i < 8 { "fulfilled" } else { "failed" },
            ));
            all.push(row(101 + 2 * i, OTHER, &payer, 500_000, "fulfilled"));
        }
        let honest = ledger_of(&all, M);
        let (f_m, h_m) = (metrics(&farmed, &[]), metrics(&honest, &[]));
        let share = |m: &Value, k: &str| f(m.get("payer_concentration").expect("pc"), k);
        assert_eq!(share(&f_m, "single_use_payer_share"), 1.0);
        assert_eq!(share(&f_m, "cross_merchant_payer_share"), 0.0);
        assert_eq!(
            f_m.get("usdc_volume_attested").and_then(Value::as_str),
            Some("0.6")
        );
        assert_eq!(share(&h_m, "single_use_payer_share"), 0.0);
        assert_eq!(share(&h_m, "cross_merchant_payer_share"), 1.0);
        assert_eq!(
            h_m.get("usdc_volume_attested").and_then(Value::as_str),
            Some("20")
        );
        // The count and the raw rate flatter the farm; the signals do not.
        assert!(f(&f_m, "fulfillment_rate") > f(&h_m, "fulfillment_rate"));
    }
}
