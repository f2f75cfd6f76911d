//! What `umpire` checks before it signs a payment, so that whoever answers its
//! request — the service, a mirror, a proxy, anything between — cannot make it pay
//! more, pay someone else, or pay on another chain than Umpire itself offers.
//!
//! A 402 is only a claim by whoever sent it. Umpire signs one offer per option in
//! every 402 (x402's `offer-receipt` extension) with the key its key document
//! publishes; the client pins that key and the pricing manifest (`/v1/quote`) once,
//! in a pin file per service, and from then on signs a payment only when:
//!
//! - the option carries an offer signed by a pinned key, stating exactly its terms,
//!   for the very resource asked for, still running and no longer than
//!   [`MAX_PAYMENT_WINDOW_SECS`];
//! - the option's scheme, network, asset and payee are one of the pinned rails;
//! - its amount is at most the product's pinned price (a fixed-price rail) and at
//!   most `--max-amount`;
//! - the spending budget, when there is one (`evaluate --watch`), has room for it.
//!
//! A pin is made by `umpire pin`, or on first use when the service is reached over
//! https or on this machine (trust on first use, as ssh does); a plain-http service
//! elsewhere is never paid unless `--allow-http`. A key rotation or a price change
//! at the service is refused until the operator of this client pins again.
//!
//! Where each part lives: the pin file (pin.rs) and `umpire pin` (command.rs); the
//! guard loaded for a service (load.rs); the checks on one payment (approve.rs); the
//! caps given on the command line (amount.rs) and the spending budget (budget.rs).

mod amount;
mod approve;
mod budget;
mod command;
mod load;
mod pin;

use std::path::PathBuf;
use std::sync::Mutex;

pub use amount::MaxAmount;
use budget::Spent;
pub use budget::{Budget, Room};
pub use command::PinCmd;
use pin::Pin;

/// The longest a payment this client signs may stay valid: a purchase answers within
/// API Gateway's 30 s, and x402's reference default window is 300 s. A 402 asking for
/// longer asks for an authorization someone could hold and execute later.
pub const MAX_PAYMENT_WINDOW_SECS: u64 = 300;

/// How far this machine's clock and the service's may disagree: an offer's validity is
/// read with this much leeway either way.
const CLOCK_SKEW_SECS: u64 = 30;

/// The options of the guard (flags and environment).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct GuardArgs {
    /// The pin file every 402 is checked against (the service's key and prices; see
    /// `umpire pin`). Default: $UMPIRE_PIN, else the pin kept for --base, made on first
    /// use over https or on this machine.
    #[arg(long, env = "UMPIRE_PIN")]
    pub pin_file: Option<PathBuf>,
    /// The most one payment may be: dollars (1.50) for the USDC rails, SOL (0.02sol)
    /// for native SOL; repeat (or comma-separate) for both. Default: $UMPIRE_MAX_AMOUNT,
    /// else the pinned price (USDC); native SOL, quoted per request, needs a SOL cap.
    #[arg(long, env = "UMPIRE_MAX_AMOUNT", value_delimiter = ',')]
    pub max_amount: Vec<MaxAmount>,
    /// Pay a service reached over plain http on another machine (anyone on the way
    /// could rewrite what it asks; only for a network that is yours).
    #[arg(long)]
    pub allow_http: bool,
    /// What an unattended evaluator may spend (`evaluate`'s budget flags).
    #[arg(skip)]
    pub budget: Option<Budget>,
}

/// The checks a payment passes before it is signed.
pub struct Guard {
    pin: Pin,
    max_amount: Vec<MaxAmount>,
    budget: Option<Budget>,
    spent: Mutex<Spent>,
}

/// A payment the guard let through: what it is worth, for the budget.
pub struct Approval {
    usd_units: u128,
}

impl Guard {
    /// The pinned price of what `path` sells (USDC base units).
    pub fn pinned_price(&self, path: &str) -> Option<u128> {
        self.pin.price_units(path)
    }
}
