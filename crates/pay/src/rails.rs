//! Payment rails: what we accept, in preference order, and matching a client's payment
//! against our own requirements (scheme, network, asset, payTo, amount). The client's
//! copy of the requirements is only used to find which of ours it means.

use serde_json::{Map, Value};
use umpire_core::product::{Price, SOL_QUOTE_BUFFER_BPS, USDC_DECIMALS};
use umpire_core::signer::Signer;

use crate::types::{
    EvmExactPayload, PaymentPayload, PaymentRequired, PaymentRequirements, PaymentRequirementsV1,
    ResourceInfo,
};

/// How a rail prices a product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RailPricing {
    /// A USD stablecoin: the product's fixed price, scaled to the asset's decimals.
    Stablecoin { decimals: u32 },
    /// Native SOL (9 decimals), quoted per request from a spot rate plus the buffer.
    SolSpot,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rail {
    /// `exact`.
    pub scheme: String,
    /// CAIP-2 network id.
    pub network: String,
    /// The v1 name of the network (`base`, `base-sepolia`, `solana`), if v1 clients may use it.
    pub v1_network: Option<String>,
    pub asset: String,
    pub pay_to: String,
    pub extra: Map<String, Value>,
    pub pricing: RailPricing,
}

impl Rail {
    pub fn is_evm(&self) -> bool {
        self.network.starts_with("eip155:")
    }

    pub fn family(&self) -> Family {
        if self.is_evm() {
            Family::Evm
        } else {
            Family::Svm
        }
    }

    /// Native SOL, our extension of `exact` on Solana: verified and settled here.
    pub fn is_native_sol(&self) -> bool {
        self.pricing == RailPricing::SolSpot
    }

    /// Addresses on EVM compare case-insensitively (checksum casing); elsewhere exactly.
    fn same_address(&self, a: &str, b: &str) -> bool {
        if self.is_evm() {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    }
}

/// A spot rate for SOL: micro-USD per SOL, and when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SolRate {
    pub micro_usd_per_sol: u64,
    pub fetched_at: u64,
}

/// Lamports for a price: spot plus the buffer, rounded up. None for a zero rate.
pub fn sol_lamports(price: Price, rate: SolRate) -> Option<u64> {
    if rate.micro_usd_per_sol == 0 {
        return None;
    }
    // lamports = usd × 1e9 / (usd per SOL) × (1 + buffer), all in integers, rounded up.
    let num =
        u128::from(price.usdc_units) * 1_000_000_000 * u128::from(10_000 + SOL_QUOTE_BUFFER_BPS);
    let den = u128::from(rate.micro_usd_per_sol) * 10_000;
    u64::try_from(num.div_ceil(den)).ok()
}

#[derive(Debug, Clone, PartialEq)]
pub struct Rails {
    /// In preference order: clients take the first they support.
    pub rails: Vec<Rail>,
    pub max_timeout_seconds: u64,
}

/// A chain family: which reason codes a mismatch is named with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Evm,
    Svm,
}

/// Why a payment does not match what we asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    #[error("no accepted rail has scheme {scheme} on network {network}")]
    UnknownRail { scheme: String, network: String },
    #[error("the payment is for asset {got}, not {want}")]
    WrongAsset {
        family: Family,
        got: String,
        want: String,
    },
    #[error("the payment pays {got}, not {want}")]
    WrongPayTo {
        family: Family,
        got: String,
        want: String,
    },
    #[error("the payment is for {got} base units, not {want}")]
    WrongAmount {
        family: Family,
        got: String,
        want: String,
    },
    #[error("the payment payload is malformed: {0}")]
    Malformed(String),
    /// A Solana transaction that is not the payment it must be.
    #[error("{}", .0.message)]
    Svm(crate::svm::Refusal),
    #[error(
        "the SOL quote expired at {expired_at} (unix seconds); pay the new quote in PAYMENT-REQUIRED"
    )]
    QuoteExpired { expired_at: u64 },
    #[error("the SOL quote is not one this service issued: {0}")]
    QuoteInvalid(String),
}

/// The reason code for a native SOL quote that has run out: pay the fresh one.
pub const REASON_QUOTE_EXPIRED: &str = "sol_quote_expired";
/// The reason code for a SOL payment whose quote we did not issue (or that was altered).
pub const REASON_QUOTE_INVALID: &str = "sol_quote_invalid";

impl MatchError {
    /// The x402 `invalidReason` code for this mismatch, named for the rail's chain.
    pub fn reason(&self) -> &'static str {
        use crate::svm;
        match self {
            MatchError::UnknownRail { .. } => "unsupported_scheme",
            MatchError::WrongAsset {
                family: Family::Evm,
                ..
            } => "invalid_exact_evm_payload_asset_mismatch",
            MatchError::WrongAsset {
                family: Family::Svm,
                ..
            } => svm::REASON_MINT,
            MatchError::WrongPayTo {
                family: Family::Evm,
                ..
            } => "invalid_exact_evm_payload_recipient_mismatch",
            MatchError::WrongPayTo {
                family: Family::Svm,
                ..
            } => svm::REASON_RECIPIENT,
            MatchError::WrongAmount {
                family: Family::Evm,
                ..
            } => "invalid_exact_evm_payload_authorization_value",
            MatchError::WrongAmount {
                family: Family::Svm,
                ..
            } => svm::REASON_AMOUNT,
            MatchError::Malformed(_) => "invalid_payload",
            MatchError::Svm(r) => r.reason,
            MatchError::QuoteExpired { .. } => REASON_QUOTE_EXPIRED,
            MatchError::QuoteInvalid(_) => REASON_QUOTE_INVALID,
        }
    }
}

/// What the rails' amounts depend on at one moment: the product's price, the SOL rate,
/// and what a SOL quote is sealed with.
#[derive(Clone, Copy)]
pub struct Offer<'a> {
    pub price: Price,
    /// The path of the resource sold (`/v1/verdicts/basic`): a SOL quote buys it only.
    pub resource: &'a str,
    /// A fresh SOL spot rate; without one no new SOL quote is offered.
    pub sol: Option<SolRate>,
    /// Unix seconds now.
    pub now: u64,
    /// Seals SOL quotes (a key derived from the signing key, so every instance holding
    /// it honors every other's quotes, with no shared state); without it no SOL quote
    /// is offered or honored.
    pub quote_key: Option<&'a dyn Signer>,
}

impl<'a> Offer<'a> {
    /// An offer with no SOL quoting (stablecoin rails only).
    pub fn fixed(price: Price, resource: &'a str) -> Offer<'a> {
        Offer {
            price,
            resource,
            sol: None,
            now: 0,
            quote_key: None,
        }
    }
}

/// What a SOL quote's MAC covers: everything the payment must pay, the resource it
/// buys, and when it stops being honored.
fn quote_message(resource: &str, rail: &Rail, amount: &str, expires_at: u64) -> Vec<u8> {
    format!(
        "umpire sol quote v1\n{resource}\n{}\n{}\n{}\n{amount}\n{expires_at}",
        rail.network, rail.asset, rail.pay_to
    )
    .into_bytes()
}

const QUOTE_PURPOSE: &str = "sol quote";

fn quote_mac(key: &dyn Signer, message: &[u8]) -> Option<String> {
    key.derive(QUOTE_PURPOSE, message).map(|m| hex_lower(&m))
}

fn hex_lower(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Constant-time comparison of two MACs in hex.
fn same_mac(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl Rails {
    fn amount(&self, rail: &Rail, offer: &Offer<'_>) -> Option<String> {
        match rail.pricing {
            RailPricing::Stablecoin { decimals } => {
                let price = offer.price;
                let units = if decimals >= USDC_DECIMALS {
                    u128::from(price.usdc_units) * 10u128.pow(decimals - USDC_DECIMALS)
                } else {
                    u128::from(price.usdc_units).div_ceil(10u128.pow(USDC_DECIMALS - decimals))
                };
                Some(units.to_string())
            }
            RailPricing::SolSpot => offer
                .sol
                .and_then(|r| sol_lamports(offer.price, r))
                .map(|l| l.to_string()),
        }
    }

    /// The `extra` of a rail's requirements for this offer: a SOL quote adds its
    /// expiry and MAC (`{"quote": {"expiresAt", "mac"}}`); None when a SOL quote cannot
    /// be sealed.
    fn extra(&self, rail: &Rail, amount: &str, offer: &Offer<'_>) -> Option<Map<String, Value>> {
        let mut extra = rail.extra.clone();
        if rail.pricing == RailPricing::SolSpot {
            let expires_at = offer.now + self.max_timeout_seconds;
            let mac = quote_mac(
                offer.quote_key?,
                &quote_message(offer.resource, rail, amount, expires_at),
            )?;
            extra.insert(
                "quote".into(),
                serde_json::json!({"expiresAt": expires_at, "mac": mac}),
            );
        }
        Some(extra)
    }

    /// Our requirements for this offer; the SOL rail is left out without a fresh rate
    /// (or a key to seal its quote) rather than mispriced.
    pub fn accepts(&self, offer: &Offer<'_>) -> Vec<(Rail, PaymentRequirements)> {
        self.rails
            .iter()
            .filter_map(|rail| {
                let amount = self.amount(rail, offer)?;
                let extra = self.extra(rail, &amount, offer)?;
                Some((
                    rail.clone(),
                    PaymentRequirements {
                        scheme: rail.scheme.clone(),
                        network: rail.network.clone(),
                        amount,
                        asset: rail.asset.clone(),
                        pay_to: rail.pay_to.clone(),
                        max_timeout_seconds: self.max_timeout_seconds,
                        extra,
                    },
                ))
            })
            .collect()
    }

    pub fn payment_required(
        &self,
        offer: &Offer<'_>,
        resource: ResourceInfo,
        error: &str,
    ) -> PaymentRequired {
        PaymentRequired {
            x402_version: 2,
            error: error.to_owned(),
            resource,
            accepts: self.accepts(offer).into_iter().map(|(_, r)| r).collect(),
            extensions: Map::new(),
        }
    }

    /// The v1 form of the same requirements (rails with a v1 network name).
    pub fn accepts_v1(
        &self,
        offer: &Offer<'_>,
        resource: &ResourceInfo,
    ) -> Vec<PaymentRequirementsV1> {
        self.accepts(offer)
            .into_iter()
            .filter_map(|(rail, r)| {
                Some(PaymentRequirementsV1 {
                    scheme: r.scheme,
                    network: rail.v1_network?,
                    max_amount_required: r.amount,
                    resource: resource.url.clone(),
                    description: resource.description.clone(),
                    mime_type: resource.mime_type.clone(),
                    pay_to: r.pay_to,
                    max_timeout_seconds: r.max_timeout_seconds,
                    asset: r.asset,
                    extra: r.extra,
                })
            })
            .collect()
    }

    /// The rail a payment is for: v2 names (scheme, network, asset); v1 names only
    /// (scheme, network), which picks the first such rail (native SOL has no v1 name).
    fn rail_for(&self, payment: &PaymentPayload) -> Result<&Rail, MatchError> {
        let (scheme, network) = match payment {
            PaymentPayload::V2 { accepted, .. } => (&accepted.scheme, &accepted.network),
            PaymentPayload::V1 {
                scheme, network, ..
            } => (scheme, network),
        };
        let on_network = |rail: &&Rail| {
            rail.scheme == *scheme
                && match payment {
                    PaymentPayload::V2 { .. } => rail.network == *network,
                    PaymentPayload::V1 { .. } => rail.v1_network.as_deref() == Some(network),
                }
        };
        let mut candidates = self.rails.iter().filter(on_network).peekable();
        let first = *candidates.peek().ok_or_else(|| MatchError::UnknownRail {
            scheme: scheme.clone(),
            network: network.clone(),
        })?;
        match payment {
            PaymentPayload::V1 { .. } => Ok(first),
            PaymentPayload::V2 { accepted, .. } => candidates
                .find(|rail| rail.same_address(&accepted.asset, &rail.asset))
                .ok_or_else(|| MatchError::WrongAsset {
                    family: first.family(),
                    got: accepted.asset.clone(),
                    want: self
                        .rails
                        .iter()
                        .filter(on_network)
                        .map(|r| r.asset.as_str())
                        .collect::<Vec<_>>()
                        .join(" or "),
                }),
        }
    }

    /// Which of our requirements this payment is for, checked field by field against
    /// ours, and against what the payment itself moves (the signed authorization, the
    /// transaction's transfer): never the client's copy alone.
    pub fn match_payment(
        &self,
        payment: &PaymentPayload,
        offer: &Offer<'_>,
    ) -> Result<(Rail, PaymentRequirements), MatchError> {
        let rail = self.rail_for(payment)?.clone();
        let family = rail.family();
        let req = match (&rail.pricing, payment) {
            (RailPricing::SolSpot, PaymentPayload::V2 { accepted, .. }) => {
                self.quoted(&rail, accepted, offer)?
            }
            _ => self
                .accepts(offer)
                .into_iter()
                .find(|(r, _)| *r == rail)
                .map(|(_, req)| req)
                .ok_or_else(|| MatchError::UnknownRail {
                    scheme: rail.scheme.clone(),
                    network: rail.network.clone(),
                })?,
        };
        if let PaymentPayload::V2 { accepted, .. } = payment {
            if !rail.same_address(&accepted.pay_to, &req.pay_to) {
                return Err(MatchError::WrongPayTo {
                    family,
                    got: accepted.pay_to.clone(),
                    want: req.pay_to.clone(),
                });
            }
            if !same_amount(&accepted.amount, &req.amount) {
                return Err(MatchError::WrongAmount {
                    family,
                    got: accepted.amount.clone(),
                    want: req.amount.clone(),
                });
            }
        }
        match family {
            Family::Evm if rail.scheme == "exact" => {
                let evm: EvmExactPayload = serde_json::from_value(payment.scheme_payload().clone())
                    .map_err(|e| MatchError::Malformed(e.to_string()))?;
                let a = &evm.authorization;
                if !rail.same_address(&a.to, &req.pay_to) {
                    return Err(MatchError::WrongPayTo {
                        family,
                        got: a.to.clone(),
                        want: req.pay_to.clone(),
                    });
                }
                if !same_amount(&a.value, &req.amount) {
                    return Err(MatchError::WrongAmount {
                        family,
                        got: a.value.clone(),
                        want: req.amount.clone(),
                    });
                }
            }
            Family::Svm => check_svm_transfer(&rail, &req, payment)?,
            Family::Evm => {}
        }
        Ok((rail, req))
    }

    /// Our requirements as quoted earlier (by any instance holding the quote key), if
    /// the quote the payment carries is ours, unaltered and still running.
    fn quoted(
        &self,
        rail: &Rail,
        accepted: &PaymentRequirements,
        offer: &Offer<'_>,
    ) -> Result<PaymentRequirements, MatchError> {
        let key = offer.quote_key.ok_or_else(|| {
            MatchError::QuoteInvalid("this service holds no key to check SOL quotes with".into())
        })?;
        let quote = accepted.extra.get("quote").ok_or_else(|| {
            MatchError::QuoteInvalid("the payment's requirements carry no extra.quote".into())
        })?;
        let expires_at = quote.get("expiresAt").and_then(Value::as_u64);
        let mac = quote.get("mac").and_then(Value::as_str);
        let (Some(expires_at), Some(mac)) = (expires_at, mac) else {
            return Err(MatchError::QuoteInvalid(
                "extra.quote must be {\"expiresAt\": <unix seconds>, \"mac\": <hex>}".into(),
            ));
        };
        let want = quote_mac(
            key,
            &quote_message(offer.resource, rail, &accepted.amount, expires_at),
        )
        .ok_or_else(|| MatchError::QuoteInvalid("the quote key is unavailable".into()))?;
        if !same_mac(mac, &want) {
            return Err(MatchError::QuoteInvalid(
                "its MAC does not match its amount, resource and expiry".into(),
            ));
        }
        if offer.now > expires_at {
            return Err(MatchError::QuoteExpired {
                expired_at: expires_at,
            });
        }
        let mut extra = rail.extra.clone();
        extra.insert("quote".into(), quote.clone());
        Ok(PaymentRequirements {
            scheme: rail.scheme.clone(),
            network: rail.network.clone(),
            amount: accepted.amount.clone(),
            asset: rail.asset.clone(),
            pay_to: rail.pay_to.clone(),
            max_timeout_seconds: self.max_timeout_seconds,
            extra,
        })
    }
}

/// The transfer a Solana payment's transaction makes, against our requirements: for
/// native SOL the whole transaction (ours to verify); for SPL the transfer's mint,
/// amount and destination (the payee's associated token account), before the
/// facilitator is asked.
fn check_svm_transfer(
    rail: &Rail,
    req: &PaymentRequirements,
    payment: &PaymentPayload,
) -> Result<(), MatchError> {
    use crate::svm::{self, Pubkey};
    let family = Family::Svm;
    let tx = svm::payload_transaction(payment.scheme_payload()).map_err(MatchError::Svm)?;
    let amount_ok = |got: u64| same_amount(&got.to_string(), &req.amount);
    if rail.pricing == RailPricing::SolSpot {
        let t = svm::native_transfer(&tx).map_err(MatchError::Svm)?;
        if t.to.to_base58() != req.pay_to {
            return Err(MatchError::WrongPayTo {
                family,
                got: t.to.to_base58(),
                want: req.pay_to.clone(),
            });
        }
        if !amount_ok(t.lamports) {
            return Err(MatchError::WrongAmount {
                family,
                got: t.lamports.to_string(),
                want: req.amount.clone(),
            });
        }
        return Ok(());
    }
    let t = svm::spl_transfer(&tx).ok_or_else(|| {
        MatchError::Svm(svm::Refusal {
            reason: svm::REASON_NO_TRANSFER,
            message: "the transaction has no single TransferChecked".into(),
        })
    })?;
    if t.mint.to_base58() != req.asset {
        return Err(MatchError::WrongAsset {
            family,
            got: t.mint.to_base58(),
            want: req.asset.clone(),
        });
    }
    let pay_to = Pubkey::from_base58(&req.pay_to);
    let paid_to_us = [svm::TOKEN_PROGRAM, svm::TOKEN_2022_PROGRAM]
        .iter()
        .any(|program| {
            let (Some(owner), Some(program)) = (pay_to, Pubkey::from_base58(program)) else {
                return false;
            };
            Pubkey::associated_token_account(&owner, &t.mint, &program) == Some(t.destination)
        });
    if !paid_to_us {
        return Err(MatchError::WrongPayTo {
            family,
            got: t.destination.to_base58(),
            want: format!("the associated token account of {}", req.pay_to),
        });
    }
    if !amount_ok(t.amount) {
        return Err(MatchError::WrongAmount {
            family,
            got: t.amount.to_string(),
            want: req.amount.clone(),
        });
    }
    Ok(())
}

/// Integer strings compare by value ("001" is 1); anything non-numeric never matches.
fn same_amount(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.trim_start_matches('0').to_owned())
    };
    matches!((norm(a), norm(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::svm::{self, Pubkey, Transaction};
    use serde_json::json;
    use umpire_core::product::Tier;
    use umpire_core::signer::LocalSigner;

    const PAY_TO: &str = "0x1111111111111111111111111111111111111111";
    const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
    const SOLANA: &str = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
    const SOL_USDC: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";
    const PATH: &str = "/v1/verdicts/sworn";

    fn solana_key(seed: u8) -> (LocalSigner, Pubkey) {
        let s = LocalSigner::from_seed([seed; 32]);
        let p = Pubkey(s.public_key());
        (s, p)
    }

    fn sol_pay_to() -> Pubkey {
        solana_key(200).1
    }

    fn rails() -> Rails {
        let mut evm_extra = Map::new();
        evm_extra.insert("name".into(), json!("USD Coin"));
        evm_extra.insert("version".into(), json!("2"));
        let mut svm_extra = Map::new();
        svm_extra.insert("feePayer".into(), json!(solana_key(201).1.to_base58()));
        Rails {
            rails: vec![
                Rail {
                    scheme: "exact".into(),
                    network: "eip155:8453".into(),
                    v1_network: Some("base".into()),
                    asset: USDC.into(),
                    pay_to: PAY_TO.into(),
                    extra: evm_extra,
                    pricing: RailPricing::Stablecoin { decimals: 6 },
                },
                Rail {
                    scheme: "exact".into(),
                    network: SOLANA.into(),
                    v1_network: Some("solana".into()),
                    asset: SOL_USDC.into(),
                    pay_to: sol_pay_to().to_base58(),
                    extra: svm_extra,
                    pricing: RailPricing::Stablecoin { decimals: 6 },
                },
                Rail {
                    scheme: "exact".into(),
                    network: SOLANA.into(),
                    v1_network: None,
                    asset: svm::NATIVE_SOL_ASSET.into(),
                    pay_to: sol_pay_to().to_base58(),
                    extra: Map::new(),
                    pricing: RailPricing::SolSpot,
                },
            ],
            max_timeout_seconds: 60,
        }
    }

    const RATE: SolRate = SolRate {
        micro_usd_per_sol: 150_000_000,
        fetched_at: 0,
    };

    fn offer<'a>(price: Price, sol: Option<SolRate>, now: u64, key: &'a LocalSigner) -> Offer<'a> {
        Offer {
            price,
            resource: PATH,
            sol,
            now,
            quote_key: Some(key),
        }
    }

    #[test]
    fn accepts_lists_rails_in_order_and_drops_sol_without_a_rate_or_key() {
        let r = rails();
        let key = LocalSigner::from_seed([9; 32]);
        let without = r.accepts(&offer(Tier::Basic.price(), None, 1000, &key));
        assert_eq!(without.len(), 2);
        assert_eq!(without[0].1.network, "eip155:8453");
        assert_eq!(without[0].1.amount, "1000000");
        let unsealed = Offer {
            quote_key: None,
            ..offer(Tier::Sworn.price(), Some(RATE), 1000, &key)
        };
        assert_eq!(r.accepts(&unsealed).len(), 2, "no key, no SOL quote");
        let with = r.accepts(&offer(Tier::Sworn.price(), Some(RATE), 1000, &key));
        assert_eq!(with.len(), 3);
        // $5 at $150/SOL = 0.0333… SOL; +1.5% = 33_833_334 lamports (rounded up).
        assert_eq!(with[2].1.amount, "33833334");
        let quote = &with[2].1.extra["quote"];
        assert_eq!(quote["expiresAt"], 1060, "quoted for maxTimeoutSeconds");
        assert_eq!(quote["mac"].as_str().map(str::len), Some(64));
    }

    #[test]
    fn sol_quotes_round_up() {
        let rate = SolRate {
            micro_usd_per_sol: 3,
            fetched_at: 0,
        };
        // $0.01 at $0.000003/SOL: 3333.33… SOL × 1.015 → rounded up to the lamport.
        assert_eq!(
            sol_lamports(Price::usdc_units(10_000), rate),
            Some(3_383_333_333_334)
        );
        assert_eq!(
            sol_lamports(
                Price::usdc_units(10_000),
                SolRate {
                    micro_usd_per_sol: 0,
                    fetched_at: 0
                }
            ),
            None
        );
    }

    fn v2_payment(amount: &str, pay_to: &str, value: &str, to: &str) -> PaymentPayload {
        PaymentPayload::from_json(json!({
            "x402Version": 2,
            "accepted": {"scheme": "exact", "network": "eip155:8453", "amount": amount, "asset": USDC.to_lowercase(),
                "payTo": pay_to, "maxTimeoutSeconds": 60, "extra": {"name": "USD Coin", "version": "2"}},
            "payload": {"signature": "0x00", "authorization": {"from": "0x2222222222222222222222222222222222222222",
                "to": to, "value": value, "validAfter": "0", "validBefore": "1", "nonce": "0x00"}}
        }))
        .expect("payload")
    }

    #[test]
    fn matching_checks_every_field_against_our_requirements() {
        let r = rails();
        let price = Tier::Basic.price();
        let o = Offer::fixed(price, "/v1/verdicts/basic");
        assert!(
            r.match_payment(&v2_payment("1000000", PAY_TO, "1000000", PAY_TO), &o)
                .is_ok()
        );
        let upper = PAY_TO.to_uppercase().replace("0X", "0x");
        assert!(
            r.match_payment(&v2_payment("1000000", &upper, "1000000", PAY_TO), &o)
                .is_ok()
        );
        assert!(matches!(
            r.match_payment(&v2_payment("250000", PAY_TO, "250000", PAY_TO), &o),
            Err(MatchError::WrongAmount { .. })
        ));
        let other = "0x9999999999999999999999999999999999999999";
        assert!(matches!(
            r.match_payment(&v2_payment("1000000", other, "1000000", other), &o),
            Err(MatchError::WrongPayTo { .. })
        ));
        // The client's copy says the right thing, the signed authorization does not.
        assert!(matches!(
            r.match_payment(&v2_payment("1000000", PAY_TO, "1000000", other), &o),
            Err(MatchError::WrongPayTo { .. })
        ));
        let e = r
            .match_payment(&v2_payment("1000000", PAY_TO, "999999", PAY_TO), &o)
            .expect_err("short");
        assert_eq!(e.reason(), "invalid_exact_evm_payload_authorization_value");
        let wrong_net = PaymentPayload::from_json(json!({"x402Version": 2, "accepted": {"scheme": "exact",
            "network": "eip155:1", "amount": "1000000", "asset": USDC, "payTo": PAY_TO, "maxTimeoutSeconds": 60},
            "payload": {}})).expect("payload");
        assert!(matches!(
            r.match_payment(&wrong_net, &o),
            Err(MatchError::UnknownRail { .. })
        ));
        let v1 = PaymentPayload::from_json(json!({"x402Version": 1, "scheme": "exact", "network": "base",
            "payload": {"signature": "0x00", "authorization": {"from": "0x2222222222222222222222222222222222222222",
            "to": PAY_TO, "value": "1000000", "validAfter": "0", "validBefore": "1", "nonce": "0x00"}}})).expect("v1");
        assert_eq!(
            r.match_payment(&v1, &o).map(|(_, q)| q.amount),
            Ok("1000000".into())
        );
    }

    /// A v2 Solana payment: `accepted` as given, paying with `tx`.
    fn svm_payment(accepted: &PaymentRequirements, tx: &Transaction) -> PaymentPayload {
        PaymentPayload::from_json(json!({
            "x402Version": 2,
            "accepted": accepted,
            "payload": {"transaction": tx.to_base64()}
        }))
        .expect("payload")
    }

    fn native_tx(payer: &LocalSigner, to: Pubkey, lamports: u64) -> Transaction {
        let from = Pubkey(payer.public_key());
        let m = svm::compile(
            from,
            &[svm::system_transfer(from, to, lamports), svm::memo(b"n1")],
            [3; 32],
        );
        let mut tx = Transaction::unsigned(m);
        let sig = payer.sign(&tx.message_bytes);
        tx.sign_with(&from, sig).expect("payer signs");
        tx
    }

    #[test]
    fn a_sol_quote_is_honored_by_any_key_holder_until_it_expires() {
        let r = rails();
        let key = LocalSigner::from_seed([9; 32]);
        let price = Tier::Sworn.price();
        let quoted = r.accepts(&offer(price, Some(RATE), 1000, &key));
        let sol = &quoted[2].1;
        let (payer, _) = solana_key(1);
        let pay = svm_payment(sol, &native_tx(&payer, sol_pay_to(), 33_833_334));
        // Another instance, 50 s later, its rate moved (or gone): the quote holds.
        let other_instance = LocalSigner::from_seed([9; 32]);
        let moved = SolRate {
            micro_usd_per_sol: 90_000_000,
            fetched_at: 1050,
        };
        for rate in [Some(moved), None] {
            let (rail, req) = r
                .match_payment(&pay, &offer(price, rate, 1050, &other_instance))
                .expect("quote honored");
            assert!(rail.is_native_sol());
            assert_eq!(req.amount, "33833334");
        }
        // Past its window; under another key; for another resource; altered.
        let late = r.match_payment(&pay, &offer(price, Some(moved), 1061, &key));
        assert_eq!(late.map_err(|e| e.reason()), Err(REASON_QUOTE_EXPIRED));
        let stranger = LocalSigner::from_seed([8; 32]);
        let forged = r.match_payment(&pay, &offer(price, Some(RATE), 1000, &stranger));
        assert_eq!(forged.map_err(|e| e.reason()), Err(REASON_QUOTE_INVALID));
        let elsewhere = Offer {
            resource: "/v1/verdicts/basic",
            ..offer(price, Some(RATE), 1000, &key)
        };
        assert_eq!(
            r.match_payment(&pay, &elsewhere).map_err(|e| e.reason()),
            Err(REASON_QUOTE_INVALID)
        );
        let mut cheaper = sol.clone();
        cheaper.amount = "1".into();
        let pay_less = svm_payment(&cheaper, &native_tx(&payer, sol_pay_to(), 1));
        assert_eq!(
            r.match_payment(&pay_less, &offer(price, Some(RATE), 1000, &key))
                .map_err(|e| e.reason()),
            Err(REASON_QUOTE_INVALID)
        );
        let mut later = sol.clone();
        later.extra["quote"]["expiresAt"] = json!(99_999);
        let pay_later = svm_payment(&later, &native_tx(&payer, sol_pay_to(), 33_833_334));
        assert_eq!(
            r.match_payment(&pay_later, &offer(price, Some(RATE), 2000, &key))
                .map_err(|e| e.reason()),
            Err(REASON_QUOTE_INVALID)
        );
    }

    #[test]
    fn the_transaction_must_pay_what_the_quote_says_named_for_solana() {
        let r = rails();
        let key = LocalSigner::from_seed([9; 32]);
        let price = Tier::Sworn.price();
        let o = offer(price, Some(RATE), 1000, &key);
        let sol = r.accepts(&o)[2].1.clone();
        let (payer, _) = solana_key(1);
        let (_, stranger) = solana_key(2);
        let short = svm_payment(&sol, &native_tx(&payer, sol_pay_to(), 33_833_333));
        assert_eq!(
            r.match_payment(&short, &o).map_err(|e| e.reason()),
            Err(svm::REASON_AMOUNT)
        );
        let elsewhere = svm_payment(&sol, &native_tx(&payer, stranger, 33_833_334));
        assert_eq!(
            r.match_payment(&elsewhere, &o).map_err(|e| e.reason()),
            Err(svm::REASON_RECIPIENT)
        );
        // A native SOL payment is matched to the SOL rail, not the first Solana one.
        let mut wrong_asset = sol.clone();
        wrong_asset.asset = "So11111111111111111111111111111111111111112".into();
        let e = r
            .match_payment(
                &svm_payment(&wrong_asset, &native_tx(&payer, sol_pay_to(), 1)),
                &o,
            )
            .expect_err("unknown asset");
        assert_eq!(e.reason(), svm::REASON_MINT);
        assert!(e.to_string().contains("native"), "{e}");
    }

    #[test]
    fn an_spl_payment_must_pay_our_token_account() {
        let r = rails();
        let o = Offer::fixed(Tier::Basic.price(), "/v1/verdicts/basic");
        let usdc = r.accepts(&o)[1].1.clone();
        let (owner_key, owner) = solana_key(1);
        let fee_payer = solana_key(201).1;
        let mint = Pubkey::from_base58(SOL_USDC).expect("mint");
        let token = Pubkey::from_base58(svm::TOKEN_PROGRAM).expect("program");
        let ata = |o: &Pubkey| Pubkey::associated_token_account(o, &mint, &token).expect("ata");
        let pay = |to: Pubkey, amount: u64| {
            let m = svm::compile(
                fee_payer,
                &[svm::transfer_checked(
                    token,
                    ata(&owner),
                    mint,
                    to,
                    owner,
                    amount,
                    6,
                )],
                [3; 32],
            );
            let mut tx = Transaction::unsigned(m);
            let sig = owner_key.sign(&tx.message_bytes);
            tx.sign_with(&owner, sig).expect("owner signs");
            svm_payment(&usdc, &tx)
        };
        assert!(
            r.match_payment(&pay(ata(&sol_pay_to()), 1_000_000), &o)
                .is_ok()
        );
        assert_eq!(
            r.match_payment(&pay(ata(&owner), 1_000_000), &o)
                .map_err(|e| e.reason()),
            Err(svm::REASON_RECIPIENT)
        );
        assert_eq!(
            r.match_payment(&pay(ata(&sol_pay_to()), 999_999), &o)
                .map_err(|e| e.reason()),
            Err(svm::REASON_AMOUNT)
        );
    }

    #[test]
    fn v1_requirements_use_plain_network_names() {
        let resource = ResourceInfo {
            url: "https://umpire.example/v1/verdicts/basic".into(),
            description: "basic".into(),
            mime_type: "application/json".into(),
            ..ResourceInfo::default()
        };
        let key = LocalSigner::from_seed([9; 32]);
        let v1 = rails().accepts_v1(&offer(Tier::Basic.price(), Some(RATE), 0, &key), &resource);
        assert_eq!(v1.len(), 2, "native SOL has no v1 form");
        assert_eq!(v1[0].network, "base");
        assert_eq!(v1[0].max_amount_required, "1000000");
        assert_eq!(v1[0].resource, resource.url);
        assert_eq!(v1[1].network, "solana");
    }
}
