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

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use reqwest::Method;
use umpire_core::json::Value;
use umpire_core::signer::{PublicKey, active_keys_from_document};
use umpire_x402::offers::{OfferPayload, verified_offer};
use umpire_x402::types::{Asset, PaymentRequired, PaymentRequirements};

use super::Local;
use super::client::Api;

/// The longest a payment this client signs may stay valid: a purchase answers within
/// API Gateway's 30 s, and x402's reference default window is 300 s. A 402 asking for
/// longer asks for an authorization someone could hold and execute later.
pub const MAX_PAYMENT_WINDOW_SECS: u64 = 300;

/// How far this machine's clock and the service's may disagree: an offer's validity is
/// read with this much leeway either way.
const CLOCK_SKEW_SECS: u64 = 30;

/// Where pins live: `$UMPIRE_PIN_DIR`, else `$XDG_CONFIG_HOME/umpire/pins`, else
/// `~/.config/umpire/pins`.
fn pin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("UMPIRE_PIN_DIR") {
        return PathBuf::from(d);
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    config.join("umpire").join("pins")
}

/// The pin file of the service at `base`.
pub fn pin_path(base: &str) -> PathBuf {
    let name: String = base
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    pin_dir().join(format!("{name}.json"))
}

/// Whether `base` is reached over TLS or on this machine: the only places a first use
/// may pin what it is shown.
fn trustworthy_transport(base: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(base) else {
        return false;
    };
    url.scheme() == "https" || loopback(&url)
}

fn loopback(url: &reqwest::Url) -> bool {
    matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"))
}

/// Whether a service reached at `base` may be pinned on first use: on this machine, or
/// over https at the very origin its key document and quote name as their issuer (a
/// mirror at its own address forwarding the genuine documents names another).
fn pinnable_on_first_use(base: &str, doc: &Value, quote: &Value) -> bool {
    let Ok(url) = reqwest::Url::parse(base) else {
        return false;
    };
    let same_origin = |v: &Value| {
        v.get("issuer")
            .and_then(Value::as_str)
            .and_then(|i| reqwest::Url::parse(i).ok())
            .is_some_and(|i| i.origin() == url.origin())
    };
    loopback(&url) || (url.scheme() == "https" && same_origin(doc) && same_origin(quote))
}

/// What was pinned for one service: its keys and its pricing manifest.
pub struct Pin {
    keys: Vec<PublicKey>,
    quote: Value,
    /// The file it was read from or written to.
    pub path: PathBuf,
}

impl Pin {
    /// The service's key document and quote, fetched from `api` now.
    pub async fn fetch(api: &Api, key_document: Option<&str>) -> Result<(Value, Value), Local> {
        let doc = match key_document {
            Some(source) => super::verify::key_document(source)
                .await
                .map_err(|e| Local(format!("the key document ({source}): {e}")))?,
            None => get_json(api, "/.well-known/umpire-key.json").await?,
        };
        let quote = get_json(api, "/v1/quote").await?;
        Ok((doc, quote))
    }

    /// Writes the pin of `base`: the key document and quote given.
    pub fn write(base: &str, doc: &Value, quote: &Value) -> Result<Pin, Local> {
        let pin = Pin::from_parts(doc, quote, pin_path(base))?;
        let body = Value::object()
            .with("base", base)
            .with(
                "pinned_at",
                umpire_core::time::rfc3339(umpire_host::Clock::system().now()),
            )
            .with("key_document", doc.clone())
            .with("quote", quote.clone());
        if let Some(dir) = pin.path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Local(format!("{}: {e}", dir.display())))?;
        }
        std::fs::write(&pin.path, body.to_canonical_vec())
            .map_err(|e| Local(format!("{}: {e}", pin.path.display())))?;
        Ok(pin)
    }

    /// The pin in `path`, if there is one.
    pub fn read(path: &Path) -> Result<Option<Pin>, Local> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Local(format!("{}: {e}", path.display()))),
        };
        let v = umpire_core::json::parse(&bytes)
            .map_err(|e| Local(format!("{}: not a pin file: {e}", path.display())))?;
        let part = |k: &str| {
            v.get(k)
                .cloned()
                .ok_or_else(|| Local(format!("{}: not a pin file (no {k})", path.display())))
        };
        Pin::from_parts(&part("key_document")?, &part("quote")?, path.to_owned()).map(Some)
    }

    fn from_parts(doc: &Value, quote: &Value, path: PathBuf) -> Result<Pin, Local> {
        // Only a key that signs now may sign a price: a retired key (perhaps retired
        // because it leaked) is never trusted with one.
        let keys = active_keys_from_document(doc);
        if keys.is_empty() {
            return Err(Local("the key document lists no active key".into()));
        }
        if quote.get("issuer").and_then(Value::as_str).is_none() {
            return Err(Local("the pricing manifest names no issuer".into()));
        }
        Ok(Pin {
            keys,
            quote: quote.clone(),
            path,
        })
    }

    /// The keys pinned, as `key_id (did)` for people.
    pub fn describe_keys(&self) -> String {
        self.keys
            .iter()
            .map(|k| format!("{} ({})", k.key_id, umpire_core::signer::did_key(&k.bytes)))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn issuer(&self) -> &str {
        self.quote
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The pinned price of what `path` sells, in USDC base units (micro-dollars).
    fn price_units(&self, path: &str) -> Option<u128> {
        let units = |v: &Value| v.get("usdc_units")?.as_str()?.parse::<u128>().ok();
        let endpoint_path = |v: &Value| {
            let e = v.get("endpoint")?.as_str()?;
            let (_method, target) = e.split_once(' ')?;
            Some(target.split('?').next()?.to_owned())
        };
        let tiers = self.quote.get("tiers").and_then(Value::as_array);
        let reputation = self.quote.get("reputation");
        tiers
            .into_iter()
            .flatten()
            .chain(reputation)
            .find(|p| endpoint_path(p).as_deref() == Some(path))
            .and_then(units)
    }

    /// The pinned rail `accepted` pays on, if it is one: whether its price is fixed.
    fn rail_of(&self, accepted: &PaymentRequirements) -> Option<bool> {
        let rails = self
            .quote
            .get("payment")
            .and_then(|p| p.get("rails"))
            .and_then(Value::as_array)?;
        let field = |r: &Value, k: &str| r.get(k).and_then(Value::as_str).map(str::to_owned);
        rails
            .iter()
            .find(|r| {
                field(r, "scheme").as_deref() == Some(accepted.scheme.as_str())
                    && field(r, "network").as_deref() == Some(accepted.network.as_str())
                    && field(r, "asset") == Some(accepted.asset.to_string())
                    && field(r, "pay_to") == Some(accepted.pay_to.to_string())
                    // A pinned fee payer is the only one a transfer is signed for.
                    && field(r, "fee_payer").is_none_or(|pinned| {
                        accepted.extra.get("feePayer").and_then(|v| v.as_str())
                            == Some(pinned.as_str())
                    })
            })
            .map(|r| field(r, "pricing").as_deref() == Some("fixed"))
    }
}

/// Pin the service's key and prices: from then on every payment's 402 must carry
/// offers signed by this key, at no more than these prices, or nothing is signed
/// (docs/client.md). Run it again to accept a new key or new prices.
#[derive(clap::Args)]
pub struct PinCmd {
    /// The key document to pin, a file or URL, taken from a source you trust.
    /// Default: BASE/.well-known/umpire-key.json.
    #[arg(long)]
    key_document: Option<String>,
    #[command(flatten)]
    remote: super::Remote,
}

impl PinCmd {
    pub async fn run(self) -> std::process::ExitCode {
        let key_document = self.key_document;
        super::remote_call(self.remote, |api| async move {
            pin(&api, key_document.as_deref()).await
        })
        .await
    }
}

/// `umpire pin`: pins the service's key document and prices, saying what changed.
pub async fn pin(api: &Api, key_document: Option<&str>) -> Result<std::process::ExitCode, Local> {
    if key_document.is_none() && !trustworthy_transport(api.base()) {
        return Err(Local(format!(
            "{} is plain http on another machine: a key read from it could be anyone's. Pass --key-document FILE (or URL) with Umpire's key document from a source you trust",
            api.base()
        )));
    }
    let path = pin_path(api.base());
    let before = Pin::read(&path).ok().flatten();
    let (doc, quote) = Pin::fetch(api, key_document).await?;
    let pin = Pin::write(api.base(), &doc, &quote)?;
    match before {
        Some(old) if old.describe_keys() != pin.describe_keys() => eprintln!(
            "the pinned key changed: was {}, now {}",
            old.describe_keys(),
            pin.describe_keys()
        ),
        Some(old) if old.quote != pin.quote => eprintln!("the pinned prices or rails changed"),
        Some(_) => eprintln!("unchanged"),
        None => {}
    }
    eprintln!(
        "pinned {}: key {}; prices and rails from {}/v1/quote",
        pin.path.display(),
        pin.describe_keys(),
        api.base()
    );
    println!("{}", pin.path.display());
    Ok(std::process::ExitCode::SUCCESS)
}

async fn get_json(api: &Api, path: &str) -> Result<Value, Local> {
    let a = api.send(Method::GET, path, &[], None).await?;
    if a.status != 200 {
        return Err(Local(format!(
            "{}{path} answered {}; cannot pin the service",
            api.base(),
            a.status
        )));
    }
    Ok(a.body)
}

/// A cap on one payment, in the units of the rail it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxAmount {
    /// USD, in micro-dollars (= USDC base units): caps the USDC rails.
    Usd(u128),
    /// Native SOL, in lamports: caps the SOL rail.
    Lamports(u128),
}

impl std::str::FromStr for MaxAmount {
    type Err = String;

    /// `1.50` or `1.50usd` (dollars), `0.02sol` (SOL).
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let (number, sol) = match lower.strip_suffix("sol") {
            Some(n) => (n, true),
            None => (lower.strip_suffix("usd").unwrap_or(&lower), false),
        };
        let decimals = if sol { 9 } else { 6 };
        let units = decimal_units(number.trim(), decimals).ok_or_else(|| {
            format!("{s}: not an amount (dollars like 1.50, or SOL like 0.02sol)")
        })?;
        Ok(if sol {
            MaxAmount::Lamports(units)
        } else {
            MaxAmount::Usd(units)
        })
    }
}

/// `text` (a plain decimal) in units of 10^-`decimals`; None past that precision.
fn decimal_units(text: &str, decimals: u32) -> Option<u128> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || frac.len() > decimals as usize {
        return None;
    }
    let frac_units = format!("{frac:0<width$}", width = decimals as usize);
    int.parse::<u128>()
        .ok()?
        .checked_mul(10u128.pow(decimals))?
        .checked_add(frac_units.parse::<u128>().unwrap_or(0))
}

/// What may be spent over time (USD micro-dollars, at the products' pinned prices).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub per_hour: u128,
    pub total: u128,
}

/// Payments signed so far: when, and what they were worth.
#[derive(Debug, Default)]
struct Spent {
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
    /// The guard for payments to `api`'s service: its pin, read, or made on first use
    /// where that is safe.
    pub async fn load(api: &Api, args: &GuardArgs) -> Result<Guard, Local> {
        if !trustworthy_transport(api.base()) && !args.allow_http {
            return Err(Local(format!(
                "{} is plain http on another machine: anyone on the way could rewrite what it asks to be paid. Use https, or pass --allow-http if this network is yours",
                api.base()
            )));
        }
        let path = args
            .pin_file
            .clone()
            .unwrap_or_else(|| pin_path(api.base()));
        let pin = match Pin::read(&path)? {
            Some(pin) => pin,
            None if args.pin_file.is_some() => {
                return Err(Local(format!("{}: no such pin file", path.display())));
            }
            None if trustworthy_transport(api.base()) => {
                let (doc, quote) = Pin::fetch(api, None).await?;
                if !pinnable_on_first_use(api.base(), &doc, &quote) {
                    return Err(Local(format!(
                        "{} serves documents issued by {}: not pinned on first use. If that is the service you mean, pay it at its own address, or run `umpire pin --base {} --key-document FILE` with its key document from a source you trust",
                        api.base(),
                        doc.get("issuer")
                            .and_then(Value::as_str)
                            .unwrap_or("nobody"),
                        api.base()
                    )));
                }
                let pin = Pin::write(api.base(), &doc, &quote)?;
                eprintln!(
                    "first payment to {}: pinned its key {} and prices in {} (check the key against one you trust; `umpire pin` renews the pin)",
                    api.base(),
                    pin.describe_keys(),
                    pin.path.display()
                );
                pin
            }
            None => {
                return Err(Local(format!(
                    "no pin for {} and it is not reached over https: run `umpire pin --base {} --key-document FILE` with Umpire's key document from a source you trust",
                    api.base(),
                    api.base()
                )));
            }
        };
        Ok(Guard {
            pin,
            max_amount: args.max_amount.clone(),
            budget: args.budget,
            spent: Mutex::new(Spent::default()),
        })
    }

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

    fn within_budget(&self, price: u128, now: u64) -> Result<(), String> {
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

    /// The pinned price of what `path` sells (USDC base units).
    pub fn pinned_price(&self, path: &str) -> Option<u128> {
        self.pin.price_units(path)
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
    fn amounts_read_in_dollars_or_sol() {
        assert_eq!("1.50".parse(), Ok(MaxAmount::Usd(1_500_000)));
        assert_eq!("2usd".parse(), Ok(MaxAmount::Usd(2_000_000)));
        assert_eq!("0.02sol".parse(), Ok(MaxAmount::Lamports(20_000_000)));
        assert!("1.0000001".parse::<MaxAmount>().is_err());
        assert!("-1".parse::<MaxAmount>().is_err());
        assert!("".parse::<MaxAmount>().is_err());
    }

    #[test]
    fn only_tls_and_this_machine_may_be_pinned_on_first_use() {
        assert!(trustworthy_transport("https://umpire.example"));
        assert!(trustworthy_transport("http://127.0.0.1:8080"));
        assert!(trustworthy_transport("http://localhost:9"));
        assert!(trustworthy_transport("http://[::1]:9"));
        assert!(!trustworthy_transport("http://umpire.example"));
        assert!(!trustworthy_transport("http://10.0.0.1:8080"));
        assert!(!trustworthy_transport("HTTP://10.0.0.1:8080"));
    }

    #[test]
    fn first_use_pins_only_the_origin_that_issued_the_documents() {
        let issued = |by: &str| Value::object().with("issuer", by);
        let genuine = issued("https://umpire.example");
        assert!(pinnable_on_first_use(
            "https://umpire.example",
            &genuine,
            &genuine
        ));
        assert!(pinnable_on_first_use(
            "https://umpire.example/",
            &genuine,
            &genuine
        ));
        // A mirror at its own address forwarding the genuine documents.
        assert!(!pinnable_on_first_use(
            "https://mirror.example",
            &genuine,
            &genuine
        ));
        assert!(!pinnable_on_first_use(
            "https://umpire.example",
            &genuine,
            &issued("https://other.example")
        ));
        assert!(!pinnable_on_first_use(
            "https://umpire.example",
            &Value::object(),
            &genuine
        ));
        // This machine: local runs name their public issuer.
        assert!(pinnable_on_first_use(
            "http://127.0.0.1:8080",
            &genuine,
            &genuine
        ));
    }

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
