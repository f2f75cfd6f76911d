//! The pin file of a service: its key document and pricing manifest, kept on this
//! machine, read back for every payment, and where a first use may make one.

use std::path::{Path, PathBuf};

use reqwest::Method;
use umpire_core::json::Value;
use umpire_core::signer::{PublicKey, active_keys_from_document};
use umpire_x402::types::PaymentRequirements;

use crate::commands::Local;
use crate::commands::client::Api;
use crate::commands::verify;

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
pub(super) fn trustworthy_transport(base: &str) -> bool {
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
pub(super) fn pinnable_on_first_use(base: &str, doc: &Value, quote: &Value) -> bool {
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
    pub(super) keys: Vec<PublicKey>,
    pub(super) quote: Value,
    /// The file it was read from or written to.
    pub path: PathBuf,
}

impl Pin {
    /// The service's key document and quote, fetched from `api` now.
    pub async fn fetch(api: &Api, key_document: Option<&str>) -> Result<(Value, Value), Local> {
        let doc = match key_document {
            Some(source) => verify::key_document(source)
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

    pub(super) fn issuer(&self) -> &str {
        self.quote
            .get("issuer")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// The pinned price of what `path` sells, in USDC base units (micro-dollars).
    pub(super) fn price_units(&self, path: &str) -> Option<u128> {
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
    pub(super) fn rail_of(&self, accepted: &PaymentRequirements) -> Option<bool> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
