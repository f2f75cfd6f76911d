//! Payment rails: what we accept, in preference order, and matching a client's payment
//! against our own requirements (scheme, network, asset, payTo, amount). The client's
//! copy of the requirements is only used to find which of ours it means.

use serde_json::{Map, Value};
use umpire_core::product::{Price, SOL_QUOTE_BUFFER_BPS, USDC_DECIMALS};
use umpire_core::signer::Signer;

use crate::reason::FailureReason;
use crate::types::{
    Account, Asset, EvmExactPayload, Namespace, Network, PaymentPayload, PaymentRequired,
    PaymentRequirements, PaymentRequirementsV1, ResourceInfo, Scheme, TokenAmount, X402Version,
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
    pub scheme: Scheme,
    pub network: Network,
    /// The v1 name of the network (`base`, `base-sepolia`, `solana`), if v1 clients may use it.
    pub v1_network: Option<String>,
    pub asset: Asset,
    pub pay_to: Account,
    pub extra: Map<String, Value>,
    pub pricing: RailPricing,
}

impl Rail {
    pub fn is_evm(&self) -> bool {
        self.network.namespace() == Namespace::Eip155
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

impl MatchError {
    /// The x402 `invalidReason` code for this mismatch, named for the rail's chain.
    pub fn reason(&self) -> FailureReason {
        match self {
            MatchError::UnknownRail { .. } => FailureReason::UnsupportedScheme,
            MatchError::WrongAsset {
                family: Family::Evm,
                ..
            } => FailureReason::EvmAsset,
            MatchError::WrongAsset {
                family: Family::Svm,
                ..
            } => FailureReason::SvmMint,
            MatchError::WrongPayTo {
                family: Family::Evm,
                ..
            } => FailureReason::EvmRecipient,
            MatchError::WrongPayTo {
                family: Family::Svm,
                ..
            } => FailureReason::SvmRecipient,
            MatchError::WrongAmount {
                family: Family::Evm,
                ..
            } => FailureReason::EvmValue,
            MatchError::WrongAmount {
                family: Family::Svm,
                ..
            } => FailureReason::SvmAmount,
            MatchError::Malformed(_) => FailureReason::InvalidPayload,
            MatchError::Svm(r) => r.reason.clone(),
            MatchError::QuoteExpired { .. } => FailureReason::SolQuoteExpired,
            MatchError::QuoteInvalid(_) => FailureReason::SolQuoteInvalid,
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
fn quote_message(resource: &str, rail: &Rail, amount: TokenAmount, expires_at: u64) -> Vec<u8> {
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
    fn amount(&self, rail: &Rail, offer: &Offer<'_>) -> Option<TokenAmount> {
        match rail.pricing {
            RailPricing::Stablecoin { decimals } => {
                let price = offer.price;
                let units = if decimals >= USDC_DECIMALS {
                    u128::from(price.usdc_units) * 10u128.pow(decimals - USDC_DECIMALS)
                } else {
                    u128::from(price.usdc_units).div_ceil(10u128.pow(USDC_DECIMALS - decimals))
                };
                Some(TokenAmount::from(units))
            }
            RailPricing::SolSpot => offer
                .sol
                .and_then(|r| sol_lamports(offer.price, r))
                .map(TokenAmount::from),
        }
    }

    /// The `extra` of a rail's requirements for this offer: a SOL quote adds its
    /// expiry and MAC (`{"quote": {"expiresAt", "mac"}}`); None when a SOL quote cannot
    /// be sealed.
    fn extra(
        &self,
        rail: &Rail,
        amount: TokenAmount,
        offer: &Offer<'_>,
    ) -> Option<Map<String, Value>> {
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
                let extra = self.extra(rail, amount, offer)?;
                Some((
                    rail.clone(),
                    PaymentRequirements {
                        scheme: rail.scheme.clone(),
                        network: rail.network.clone(),
                        amount,
                        asset: rail.asset,
                        pay_to: rail.pay_to,
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
            x402_version: X402Version::V2,
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
            PaymentPayload::V2 { accepted, .. } => (&accepted.scheme, accepted.network.as_str()),
            PaymentPayload::V1 {
                scheme, network, ..
            } => (scheme, network.as_str()),
        };
        let on_network = |rail: &&Rail| {
            rail.scheme == *scheme
                && match payment {
                    PaymentPayload::V2 { .. } => rail.network.as_str() == network,
                    PaymentPayload::V1 { .. } => rail.v1_network.as_deref() == Some(network),
                }
        };
        let mut candidates = self.rails.iter().filter(on_network).peekable();
        let first = *candidates.peek().ok_or_else(|| MatchError::UnknownRail {
            scheme: scheme.to_string(),
            network: network.to_owned(),
        })?;
        match payment {
            PaymentPayload::V1 { .. } => Ok(first),
            PaymentPayload::V2 { accepted, .. } => candidates
                .find(|rail| accepted.asset == rail.asset)
                .ok_or_else(|| MatchError::WrongAsset {
                    family: first.family(),
                    got: accepted.asset.to_string(),
                    want: self
                        .rails
                        .iter()
                        .filter(on_network)
                        .map(|r| r.asset.to_string())
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
                    scheme: rail.scheme.to_string(),
                    network: rail.network.to_string(),
                })?,
        };
        if let PaymentPayload::V2 { accepted, .. } = payment {
            if accepted.pay_to != req.pay_to {
                return Err(MatchError::WrongPayTo {
                    family,
                    got: accepted.pay_to.to_string(),
                    want: req.pay_to.to_string(),
                });
            }
            if accepted.amount != req.amount {
                return Err(MatchError::WrongAmount {
                    family,
                    got: accepted.amount.to_string(),
                    want: req.amount.to_string(),
                });
            }
        }
        match family {
            Family::Evm if rail.scheme == Scheme::Exact => {
                let evm: EvmExactPayload = serde_json::from_value(payment.scheme_payload().clone())
                    .map_err(|e| MatchError::Malformed(e.to_string()))?;
                let a = &evm.authorization;
                // The signed strings are read, not trusted: one that does not parse is
                // a payment to no one we know, of no amount we asked.
                if a.to.parse::<Account>().ok() != Some(req.pay_to) {
                    return Err(MatchError::WrongPayTo {
                        family,
                        got: a.to.clone(),
                        want: req.pay_to.to_string(),
                    });
                }
                if a.value.parse::<TokenAmount>().ok() != Some(req.amount) {
                    return Err(MatchError::WrongAmount {
                        family,
                        got: a.value.clone(),
                        want: req.amount.to_string(),
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
            &quote_message(offer.resource, rail, accepted.amount, expires_at),
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
            amount: accepted.amount,
            asset: rail.asset,
            pay_to: rail.pay_to,
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
    let amount_ok = |got: u64| TokenAmount::from(got) == req.amount;
    if rail.pricing == RailPricing::SolSpot {
        let t = svm::native_transfer(&tx).map_err(MatchError::Svm)?;
        if Account::Solana(t.to) != req.pay_to {
            return Err(MatchError::WrongPayTo {
                family,
                got: t.to.to_base58(),
                want: req.pay_to.to_string(),
            });
        }
        if !amount_ok(t.lamports) {
            return Err(MatchError::WrongAmount {
                family,
                got: t.lamports.to_string(),
                want: req.amount.to_string(),
            });
        }
        return Ok(());
    }
    let t = svm::spl_transfer(&tx).ok_or_else(|| {
        MatchError::Svm(svm::Refusal {
            reason: FailureReason::SvmNoTransfer,
            message: "the transaction has no single TransferChecked".into(),
        })
    })?;
    if Asset::SplMint(t.mint) != req.asset {
        return Err(MatchError::WrongAsset {
            family,
            got: t.mint.to_base58(),
            want: req.asset.to_string(),
        });
    }
    let pay_to = req.pay_to.solana();
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
            want: req.amount.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
