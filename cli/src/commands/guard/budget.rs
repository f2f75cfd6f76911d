//! What an unattended evaluator may spend: the budget, the payments signed against it,
//! and the room it leaves.

use super::{Approval, Guard};

/// What may be spent over time (USD micro-dollars, at the products' pinned prices).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub per_hour: u128,
    pub total: u128,
}

/// Payments signed so far: when, and what they were worth.
#[derive(Debug, Default)]
pub(super) struct Spent {
    payments: Vec<(u64, u128)>,
}

impl Spent {
    fn total(&self) -> u128 {
        self.payments.iter().map(|(_, v)| v).sum()
    }

    fn in_hour_before(&self, now: u64) -> u128 {
        self.payments
            .iter()
            .filter(|(t, _)| t + 3600 > now)
            .map(|(_, v)| v)
            .sum()
    }
}

impl Guard {
    /// Whether the budget has room for a payment of `price` at `now`: `Err` says how
    /// much of it is spent.
    pub(super) fn within_budget(&self, price: u128, now: u64) -> Result<(), String> {
        let Some(budget) = self.budget else {
            return Ok(());
        };
        let usd = |units: u128| format!("${}.{:06}", units / 1_000_000, units % 1_000_000);
        let (total, hour) = {
            let spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
            (spent.total(), spent.in_hour_before(now))
        };
        match self.room(price, now) {
            Room::Open => Ok(()),
            Room::Spent => Err(format!(
                "the spending budget is spent ({} of {} in total)",
                usd(total),
                usd(budget.total)
            )),
            Room::HourSpent => Err(format!(
                "the hourly budget is spent ({} of {} in the last hour)",
                usd(hour),
                usd(budget.per_hour)
            )),
        }
    }

    /// Counts a payment signed: it may be spent from now on, whatever becomes of it.
    pub fn signed(&self, approval: Approval, now: u64) {
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        spent.payments.push((now, approval.usd_units));
    }

    /// What the budget leaves for a payment of `price` at `now`.
    pub fn room(&self, price: u128, now: u64) -> Room {
        let Some(budget) = self.budget else {
            return Room::Open;
        };
        let spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        if spent.total() + price > budget.total {
            Room::Spent
        } else if spent.in_hour_before(now) + price > budget.per_hour {
            Room::HourSpent
        } else {
            Room::Open
        }
    }
}

/// What a spending budget leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    Open,
    /// Spent for this hour: wait.
    HourSpent,
    /// Spent for good: stop.
    Spent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hourly_window_forgets_old_payments() {
        let s = Spent {
            payments: vec![(1_000, 5), (4_000, 7)],
        };
        assert_eq!(s.total(), 12);
        assert_eq!(s.in_hour_before(4_500), 12);
        assert_eq!(s.in_hour_before(4_600), 7);
    }
}
