//! Payment rails: what we accept, in preference order, and matching a client's payment
//! against our own requirements (scheme, network, asset, payTo, amount). The client's
//! copy of the requirements is only used to find which of ours it means.

use serde_json::{Map, Value};
use umpire_core::product::{Price, SOL_QUOTE_BUFFER_BPS, USDC_DECIMALS};

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

/// Why a payment does not match what we asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatchError {
    #[error("no accepted rail has scheme {scheme} on network {network}")]
    UnknownRail { scheme: String, network: String },
    #[error("the payment is for asset {got}, not {want}")]
    WrongAsset { got: String, want: String },
    #[error("the payment pays {got}, not {want}")]
    WrongPayTo { got: String, want: String },
    #[error("the payment is for {got} base units, not {want}")]
    WrongAmount { got: String, want: String },
    #[error("the payment payload is malformed: {0}")]
    Malformed(String),
}

impl MatchError {
    /// The x402 `invalidReason` code for this mismatch.
    pub fn reason(&self) -> &'static str {
        match self {
            MatchError::UnknownRail { .. } => "unsupported_scheme",
            MatchError::WrongAsset { .. } => "invalid_exact_evm_payload_asset_mismatch",
            MatchError::WrongPayTo { .. } => "invalid_exact_evm_payload_recipient_mismatch",
            MatchError::WrongAmount { .. } => "invalid_exact_evm_payload_authorization_value",
            MatchError::Malformed(_) => "invalid_payload",
        }
    }
}

impl Rails {
    fn amount(&self, rail: &Rail, price: Price, sol: Option<SolRate>) -> Option<String> {
        match rail.pricing {
            RailPricing::Stablecoin { decimals } => {
                let units = if decimals >= USDC_DECIMALS {
                    u128::from(price.usdc_units) * 10u128.pow(decimals - USDC_DECIMALS)
                } else {
                    u128::from(price.usdc_units).div_ceil(10u128.pow(USDC_DECIMALS - decimals))
                };
                Some(units.to_string())
            }
            RailPricing::SolSpot => sol
                .and_then(|r| sol_lamports(price, r))
                .map(|l| l.to_string()),
        }
    }

    /// Our requirements for a product at `price`; the SOL rail is left out without a
    /// fresh rate rather than mispriced.
    pub fn accepts(&self, price: Price, sol: Option<SolRate>) -> Vec<(Rail, PaymentRequirements)> {
        self.rails
            .iter()
            .filter_map(|rail| {
                let amount = self.amount(rail, price, sol)?;
                Some((
                    rail.clone(),
                    PaymentRequirements {
                        scheme: rail.scheme.clone(),
                        network: rail.network.clone(),
                        amount,
                        asset: rail.asset.clone(),
                        pay_to: rail.pay_to.clone(),
                        max_timeout_seconds: self.max_timeout_seconds,
                        extra: rail.extra.clone(),
                    },
                ))
            })
            .collect()
    }

    pub fn payment_required(
        &self,
        price: Price,
        sol: Option<SolRate>,
        resource: ResourceInfo,
        error: &str,
    ) -> PaymentRequired {
        PaymentRequired {
            x402_version: 2,
            error: error.to_owned(),
            resource,
            accepts: self
                .accepts(price, sol)
                .into_iter()
                .map(|(_, r)| r)
                .collect(),
            extensions: Map::new(),
        }
    }

    /// The v1 form of the same requirements (rails with a v1 network name).
    pub fn accepts_v1(
        &self,
        price: Price,
        sol: Option<SolRate>,
        resource: &ResourceInfo,
    ) -> Vec<PaymentRequirementsV1> {
        self.accepts(price, sol)
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

    /// Which of our requirements this payment is for, checked field by field.
    pub fn match_payment(
        &self,
        payment: &PaymentPayload,
        price: Price,
        sol: Option<SolRate>,
    ) -> Result<(Rail, PaymentRequirements), MatchError> {
        let ours = self.accepts(price, sol);
        let (scheme, network) = match payment {
            PaymentPayload::V2 { accepted, .. } => {
                (accepted.scheme.as_str(), accepted.network.as_str())
            }
            PaymentPayload::V1 {
                scheme, network, ..
            } => (scheme.as_str(), network.as_str()),
        };
        let (rail, req) = ours
            .into_iter()
            .find(|(rail, r)| {
                r.scheme == scheme
                    && match payment {
                        PaymentPayload::V2 { .. } => r.network == network,
                        PaymentPayload::V1 { .. } => rail.v1_network.as_deref() == Some(network),
                    }
            })
            .ok_or_else(|| MatchError::UnknownRail {
                scheme: scheme.to_owned(),
                network: network.to_owned(),
            })?;
        if let PaymentPayload::V2 { accepted, .. } = payment {
            if !rail.same_address(&accepted.asset, &req.asset) {
                return Err(MatchError::WrongAsset {
                    got: accepted.asset.clone(),
                    want: req.asset.clone(),
                });
            }
            if !rail.same_address(&accepted.pay_to, &req.pay_to) {
                return Err(MatchError::WrongPayTo {
                    got: accepted.pay_to.clone(),
                    want: req.pay_to.clone(),
                });
            }
            if !same_amount(&accepted.amount, &req.amount) {
                return Err(MatchError::WrongAmount {
                    got: accepted.amount.clone(),
                    want: req.amount.clone(),
                });
            }
        }
        if rail.is_evm() && rail.scheme == "exact" {
            let evm: EvmExactPayload = serde_json::from_value(payment.scheme_payload().clone())
                .map_err(|e| MatchError::Malformed(e.to_string()))?;
            let a = &evm.authorization;
            if !rail.same_address(&a.to, &req.pay_to) {
                return Err(MatchError::WrongPayTo {
                    got: a.to.clone(),
                    want: req.pay_to.clone(),
                });
            }
            if !same_amount(&a.value, &req.amount) {
                return Err(MatchError::WrongAmount {
                    got: a.value.clone(),
                    want: req.amount.clone(),
                });
            }
        }
        Ok((rail, req))
    }
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
    use serde_json::json;
    use umpire_core::product::Tier;

    const PAY_TO: &str = "0x1111111111111111111111111111111111111111";
    const USDC: &str = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";

    fn rails() -> Rails {
        let mut evm_extra = Map::new();
        evm_extra.insert("name".into(), json!("USD Coin"));
        evm_extra.insert("version".into(), json!("2"));
        let mut svm_extra = Map::new();
        svm_extra.insert(
            "feePayer".into(),
            json!("FeePayer1111111111111111111111111111111111"),
        );
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
                    network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".into(),
                    v1_network: Some("solana".into()),
                    asset: "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".into(),
                    pay_to: "PayTo111111111111111111111111111111111111111".into(),
                    extra: svm_extra.clone(),
                    pricing: RailPricing::Stablecoin { decimals: 6 },
                },
                Rail {
                    scheme: "exact".into(),
                    network: "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp".into(),
                    v1_network: None,
                    asset: "native".into(),
                    pay_to: "PayTo111111111111111111111111111111111111111".into(),
                    extra: svm_extra,
                    pricing: RailPricing::SolSpot,
                },
            ],
            max_timeout_seconds: 60,
        }
    }

    #[test]
    fn accepts_lists_rails_in_order_and_drops_sol_without_a_rate() {
        let r = rails();
        let without = r.accepts(Tier::Basic.price(), None);
        assert_eq!(without.len(), 2);
        assert_eq!(without[0].1.network, "eip155:8453");
        assert_eq!(without[0].1.amount, "1000000");
        let rate = SolRate {
            micro_usd_per_sol: 150_000_000,
            fetched_at: 0,
        };
        let with = r.accepts(Tier::Sworn.price(), Some(rate));
        assert_eq!(with.len(), 3);
        // $5 at $150/SOL = 0.0333… SOL; +1.5% = 33_833_334 lamports (rounded up).
        assert_eq!(with[2].1.amount, "33833334");
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
        assert!(
            r.match_payment(
                &v2_payment("1000000", PAY_TO, "1000000", PAY_TO),
                price,
                None
            )
            .is_ok()
        );
        let upper = PAY_TO.to_uppercase().replace("0X", "0x");
        assert!(
            r.match_payment(
                &v2_payment("1000000", &upper, "1000000", PAY_TO),
                price,
                None
            )
            .is_ok()
        );
        assert!(matches!(
            r.match_payment(&v2_payment("250000", PAY_TO, "250000", PAY_TO), price, None),
            Err(MatchError::WrongAmount { .. })
        ));
        let other = "0x9999999999999999999999999999999999999999";
        assert!(matches!(
            r.match_payment(&v2_payment("1000000", other, "1000000", other), price, None),
            Err(MatchError::WrongPayTo { .. })
        ));
        // The client's copy says the right thing, the signed authorization does not.
        assert!(matches!(
            r.match_payment(
                &v2_payment("1000000", PAY_TO, "1000000", other),
                price,
                None
            ),
            Err(MatchError::WrongPayTo { .. })
        ));
        assert!(matches!(
            r.match_payment(
                &v2_payment("1000000", PAY_TO, "999999", PAY_TO),
                price,
                None
            ),
            Err(MatchError::WrongAmount { .. })
        ));
        let wrong_net = PaymentPayload::from_json(json!({"x402Version": 2, "accepted": {"scheme": "exact",
            "network": "eip155:1", "amount": "1000000", "asset": USDC, "payTo": PAY_TO, "maxTimeoutSeconds": 60},
            "payload": {}})).expect("payload");
        assert!(matches!(
            r.match_payment(&wrong_net, price, None),
            Err(MatchError::UnknownRail { .. })
        ));
        let v1 = PaymentPayload::from_json(json!({"x402Version": 1, "scheme": "exact", "network": "base",
            "payload": {"signature": "0x00", "authorization": {"from": "0x2222222222222222222222222222222222222222",
            "to": PAY_TO, "value": "1000000", "validAfter": "0", "validBefore": "1", "nonce": "0x00"}}})).expect("v1");
        assert_eq!(
            r.match_payment(&v1, price, None).map(|(_, q)| q.amount),
            Ok("1000000".into())
        );
    }

    #[test]
    fn v1_requirements_use_plain_network_names() {
        let resource = ResourceInfo {
            url: "https://umpire.example/v1/verdicts/basic".into(),
            description: "basic".into(),
            mime_type: "application/json".into(),
        };
        let v1 = rails().accepts_v1(Tier::Basic.price(), None, &resource);
        assert_eq!(v1.len(), 2);
        assert_eq!(v1[0].network, "base");
        assert_eq!(v1[0].max_amount_required, "1000000");
        assert_eq!(v1[0].resource, resource.url);
    }
}
