//! The checks one payment passes before it is signed: a signed offer for the very
//! resource, on a pinned rail, at no more than the pinned price, within the caps and
//! the budget.

use umpire_x402::offers::{OfferPayload, verified_offer};
use umpire_x402::types::{Asset, PaymentRequired, PaymentRequirements};

use super::{Approval, CLOCK_SKEW_SECS, Guard, MAX_PAYMENT_WINDOW_SECS, MaxAmount};
use crate::commands::Local;

impl Guard {
    /// Whether `required.accepts[index]` may be paid for `path` at `now`: the signed
    /// offer, the pinned rail and price, the caps and the budget. `Err` says why not.
    pub fn approve(
        &self,
        required: &PaymentRequired,
        index: usize,
        path: &str,
        now: u64,
    ) -> Result<Approval, Local> {
        let refuse = |why: String| {
            Local(format!(
                "refusing to pay: {why}. Nothing was signed. {}",
                "If the service changed its key or prices, check the change and run `umpire pin` to accept it."
            ))
        };
        let accepted = required
            .accepts
            .get(index)
            .ok_or_else(|| refuse("no such option in the 402".into()))?;
        let path = path.split('?').next().unwrap_or(path);
        let offer = self.offer(required, index).map_err(refuse)?;
        let resource = format!("{}{path}", self.pin.issuer());
        if offer.resource_url != resource {
            return Err(refuse(format!(
                "the signed offer is for {}, not for {resource}",
                offer.resource_url
            )));
        }
        if offer.valid_until + CLOCK_SKEW_SECS <= now {
            return Err(refuse(format!(
                "the signed offer expired at {} (unix seconds)",
                offer.valid_until
            )));
        }
        let window = accepted.max_timeout_seconds;
        if window > MAX_PAYMENT_WINDOW_SECS
            || offer.valid_until > now + MAX_PAYMENT_WINDOW_SECS + CLOCK_SKEW_SECS
        {
            return Err(refuse(format!(
                "the payment would stay valid for {window} s (offer until {}); a purchase needs at most {MAX_PAYMENT_WINDOW_SECS} s",
                offer.valid_until
            )));
        }
        let fixed_price = self.pin.rail_of(accepted).ok_or_else(|| {
            refuse(format!(
                "{} {} to {} on {} is not one of the rails pinned for this service",
                accepted.scheme, accepted.asset, accepted.pay_to, accepted.network
            ))
        })?;
        let price = self
            .pin
            .price_units(path)
            .ok_or_else(|| refuse(format!("{path} is not a product in the pinned price list")))?;
        let amount: u128 = accepted
            .amount
            .0
            .try_into()
            .map_err(|_| refuse(format!("the 402 asks {}", accepted.amount)))?;
        if fixed_price && amount > price {
            return Err(refuse(format!(
                "the 402 asks {amount} base units and the pinned price of {path} is {price}"
            )));
        }
        self.within_caps(accepted, amount).map_err(refuse)?;
        self.within_budget(price, now).map_err(refuse)?;
        Ok(Approval { usd_units: price })
    }

    /// The option's offer, signed by one of the pinned keys.
    fn offer(&self, required: &PaymentRequired, index: usize) -> Result<OfferPayload, String> {
        let mut why = String::new();
        for key in &self.pin.keys {
            match verified_offer(required, index, key) {
                Ok(offer) => return Ok(offer),
                Err(e) => why = e.to_string(),
            }
        }
        Err(why)
    }

    /// Whether `amount` is within the caps given on the command line: `Err` says which
    /// it is above.
    fn within_caps(&self, accepted: &PaymentRequirements, amount: u128) -> Result<(), String> {
        let sol = accepted.asset == Asset::NativeSol;
        // A SOL amount is quoted per request from a rate only the service knows: no
        // pinned price bounds it, so the caller's own cap must.
        if sol
            && !self
                .max_amount
                .iter()
                .any(|c| matches!(c, MaxAmount::Lamports(_)))
        {
            return Err(
                "native SOL is quoted per request and no pinned price bounds it: give the most you will pay in SOL with --max-amount (e.g. 0.02sol) or $UMPIRE_MAX_AMOUNT".into(),
            );
        }
        for cap in &self.max_amount {
            match *cap {
                MaxAmount::Usd(max) if !sol && amount > max => {
                    return Err(format!(
                        "the 402 asks {amount} USDC base units, above --max-amount ({max})"
                    ));
                }
                MaxAmount::Lamports(max) if sol && amount > max => {
                    return Err(format!(
                        "the 402 asks {amount} lamports, above --max-amount ({max})"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}
