//! What Umpire sells and the limits it sells it under: the contract's numbers, once.

use crate::check_type::CheckType;

/// The public identity documents name as their issuer (overridable per deployment).
pub const DEFAULT_ISSUER: &str = "https://umpire.vimabrosta.com";
pub const OPERATOR: &str = "Vima Brosta LLC";

/// USDC has 6 decimals: 1 USD = 1_000_000 base units.
pub const USDC_DECIMALS: u32 = 6;

pub const MIN_CHECKS: usize = 1;
pub const MAX_CHECKS: usize = 10;
pub const MAX_NETWORK_CHECKS: usize = 3;
/// "text up to 200KB": 200 KiB of UTF-8.
pub const MAX_TEXT_BYTES: usize = 200 * 1024;
/// Whole request bodies; generous next to the text cap so a JSON deliverable fits too.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Days specs and signed documents are kept for re-reads.
pub const DOCUMENT_RETENTION_DAYS: u64 = 90;
/// How long a settled purchase's answer is kept for replays (by its Idempotency-Key or
/// its payment), and so how long the ledger remembers that a payment bought: no chain
/// read may credit a transfer older than this (`umpire_x402::evm::SETTLEMENT_CREDIT_SECS`),
/// or a payment whose purchase the ledger forgot would buy a second one.
pub const ANSWER_KEPT_SECS: u64 = 24 * 3600;
/// Bytes read from a fetched URL; larger bodies are truncated and fail content_hash.
pub const FETCH_READ_CAP_BYTES: u64 = 2 * 1024 * 1024;
pub const FETCH_MAX_REDIRECTS: u32 = 4;
pub const FETCH_TIMEOUT_SECS: u64 = 12;
pub const FETCH_USER_AGENT: &str = "UmpireProbe/1.0 (+https://umpire.vimabrosta.com/bot)";
pub const ALLOWED_PORTS: [u16; 4] = [80, 443, 8080, 8443];
/// Response headers an observation records, each value capped at [`OBSERVED_HEADER_CAP_CHARS`].
pub const OBSERVED_HEADERS: [&str; 7] = [
    "content-type",
    "content-length",
    "last-modified",
    "etag",
    "cache-control",
    "date",
    "server",
];
pub const OBSERVED_HEADER_CAP_CHARS: usize = 200;
/// Sworn verdicts run every check again about this long after pass 1.
pub const SWORN_PASS2_DELAY_SECS: u64 = 60;
pub const WEBHOOK_MAX_RETRIES: u32 = 5;
/// Feedback floor: 0.01 USDC.
pub const MIN_FEEDBACK_USDC_UNITS: u64 = 10_000;
/// USDC on Base mainnet: the token whose transfers prove feedback payments (and the
/// default asset of the EVM rail).
pub const BASE_USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
pub const BASE_CHAIN_ID: u64 = 8453;
/// Blocks a feedback payment needs, its own included (Base makes one every 2 s).
pub const FEEDBACK_CONFIRMATIONS: u64 = 5;
pub const FEEDBACK_WINDOW_DAYS: u64 = 90;
/// Idempotency keys: at least 16 characters (the contract), at most this many.
pub const IDEMPOTENCY_KEY_MIN: usize = 16;
pub const IDEMPOTENCY_KEY_MAX: usize = 128;
/// The premium over spot for payers in native SOL, in basis points (1.5%).
pub const SOL_QUOTE_BUFFER_BPS: u64 = 150;

/// Per-IP limits on free routes, requests per minute (paid routes are limited by
/// payment itself). Feedback over HTTP and MCP share one bucket.
pub const RATE_LIMITS: &[(&str, u32)] = &[
    ("feedback", 30),
    ("validate", 30),
    ("find", 20),
    ("status", 120),
    ("quote", 120),
    ("mcp", 120),
    ("replay", 120),
    // Requests to a paid route without a payment: the body's checks and its URLs'
    // lookups before a 402 are work nobody has paid for yet.
    ("unpaid", 60),
];

/// On the wire and in storage as [`Tier::as_str`] spells it (serde's lowercase names
/// are the same words; a unit test holds them equal).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Witness,
    Basic,
    Probe,
    Sworn,
}

impl Tier {
    pub const ALL: [Tier; 4] = [Tier::Witness, Tier::Basic, Tier::Probe, Tier::Sworn];

    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "witness" => Some(Tier::Witness),
            "basic" => Some(Tier::Basic),
            "probe" => Some(Tier::Probe),
            "sworn" => Some(Tier::Sworn),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Witness => "witness",
            Tier::Basic => "basic",
            Tier::Probe => "probe",
            Tier::Sworn => "sworn",
        }
    }

    pub fn price(self) -> Price {
        match self {
            Tier::Witness => Price::usdc_units(250_000),
            Tier::Basic => Price::usdc_units(1_000_000),
            Tier::Probe => Price::usdc_units(2_000_000),
            Tier::Sworn => Price::usdc_units(5_000_000),
        }
    }

    /// What a spec bought in this tier may hold: the one table the spec rules and the
    /// quote read.
    pub fn limits(self) -> TierLimits {
        match self {
            Tier::Witness => TierLimits {
                max_checks: 1,
                max_network_checks: 1,
                only_check: Some(CheckType::UrlProbe),
            },
            Tier::Basic => TierLimits {
                max_checks: MAX_CHECKS,
                max_network_checks: 0,
                only_check: None,
            },
            Tier::Probe | Tier::Sworn => TierLimits {
                max_checks: MAX_CHECKS,
                max_network_checks: MAX_NETWORK_CHECKS,
                only_check: None,
            },
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Tier::Witness => {
                "Exactly one url_probe: a stake-free party says whether the public state agrees with a claim of success."
            }
            Tier::Basic => "Up to 10 checks on the deliverable itself; nothing is fetched.",
            Tier::Probe => {
                "Up to 10 checks, of which up to 3 may fetch public URLs (url_probe, content_hash on a url)."
            }
            Tier::Sworn => {
                "Every check runs twice about 60 seconds apart and passes only if it passes both times; the final document goes to your webhook."
            }
        }
    }
}

/// A tier's rules on the checks of its spec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierLimits {
    pub max_checks: usize,
    /// Checks that fetch a URL: url_probe, and content_hash with target url.
    pub max_network_checks: usize,
    /// A tier that sells exactly one check of one type names the type.
    pub only_check: Option<CheckType>,
}

pub const REPUTATION_PRICE: Price = Price::usdc_units(10_000);

/// A price in USDC base units (6 decimals); stablecoin rails charge exactly this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Price {
    pub usdc_units: u64,
}

impl Price {
    pub const fn usdc_units(usdc_units: u64) -> Price {
        Price { usdc_units }
    }

    /// "$1.00", "$0.25", "$0.01".
    pub fn usd_display(self) -> String {
        let cents = self.usdc_units / 10_000;
        format!("${}.{:02}", cents / 100, cents % 100)
    }

    /// "1.00" as a decimal string of dollars, exact to the base unit.
    pub fn usd_decimal(self) -> String {
        let whole = self.usdc_units / 1_000_000;
        let frac = self.usdc_units % 1_000_000;
        let mut frac = format!("{frac:06}");
        while frac.len() > 2 && frac.ends_with('0') {
            frac.pop();
        }
        format!("{whole}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_serialize_as_they_are_spelled() {
        for t in Tier::ALL {
            let json = serde_json::to_value(t).expect("json");
            assert_eq!(json, t.as_str());
            assert_eq!(serde_json::from_value::<Tier>(json).expect("reads"), t);
            assert_eq!(Tier::parse(t.as_str()), Some(t));
        }
        assert!(serde_json::from_value::<Tier>(serde_json::json!("gold")).is_err());
    }

    #[test]
    fn prices_match_the_contract() {
        assert_eq!(Tier::Witness.price().usd_display(), "$0.25");
        assert_eq!(Tier::Basic.price().usd_display(), "$1.00");
        assert_eq!(Tier::Probe.price().usd_display(), "$2.00");
        assert_eq!(Tier::Sworn.price().usd_display(), "$5.00");
        assert_eq!(REPUTATION_PRICE.usd_display(), "$0.01");
        assert_eq!(Tier::Sworn.price().usd_decimal(), "5.00");
        assert_eq!(Price::usdc_units(1_234_567).usd_decimal(), "1.234567");
    }

    #[test]
    fn tiers_parse() {
        for t in Tier::ALL {
            assert_eq!(Tier::parse(t.as_str()), Some(t));
        }
        assert_eq!(Tier::parse("gold"), None);
    }
}
