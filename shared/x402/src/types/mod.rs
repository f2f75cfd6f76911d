//! x402 wire types, v2 first, v1 where clients still send it. Field names follow the
//! specification exactly (camelCase); amounts are integer strings in base units.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::reason::FailureReason;

mod values;
pub use values::{Account, Asset, Namespace, Network, ParseError, Scheme, TokenAmount};

/// The protocol version a message is written in: `x402Version` on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum X402Version {
    /// Plain network names, `X-PAYMENT`, requirements in the 402 body.
    V1,
    /// CAIP-2 networks, `PAYMENT-SIGNATURE`, requirements in `PAYMENT-REQUIRED`.
    V2,
}

impl X402Version {
    pub fn number(self) -> u32 {
        match self {
            X402Version::V1 => 1,
            X402Version::V2 => 2,
        }
    }

    pub fn from_number(n: u64) -> Result<X402Version, String> {
        match n {
            1 => Ok(X402Version::V1),
            2 => Ok(X402Version::V2),
            other => Err(format!("x402Version {other} is not supported (use 2 or 1)")),
        }
    }
}

impl PartialEq<u32> for X402Version {
    fn eq(&self, n: &u32) -> bool {
        self.number() == *n
    }
}

impl fmt::Display for X402Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl Serialize for X402Version {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.number())
    }
}

impl<'de> Deserialize<'de> for X402Version {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<X402Version, D::Error> {
        X402Version::from_number(u64::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceInfo {
    pub url: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub mime_type: String,
    /// The service's name in discovery catalogs (x402 Bazaar: printable ASCII, ≤ 32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Catalog tags (Bazaar keeps the first 5 of ≤ 32 printable ASCII characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
}

/// One entry of `accepts` (v2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    pub scheme: Scheme,
    /// CAIP-2: `eip155:8453`, `solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp`.
    pub network: Network,
    pub amount: TokenAmount,
    pub asset: Asset,
    pub pay_to: Account,
    pub max_timeout_seconds: u64,
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// The 402 answer (v2): header `PAYMENT-REQUIRED`, mirrored in the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequired {
    pub x402_version: X402Version,
    pub error: String,
    pub resource: ResourceInfo,
    /// Read leniently: an entry this code cannot parse (another chain's address form,
    /// a scheme's own amount syntax) is left out, so one odd option does not make the
    /// whole 402 unreadable to a client that can pay another.
    #[serde(deserialize_with = "the_readable_entries")]
    pub accepts: Vec<PaymentRequirements>,
    #[serde(default)]
    pub extensions: Map<String, Value>,
}

fn the_readable_entries<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Vec<PaymentRequirements>, D::Error> {
    let entries = Vec::<Value>::deserialize(d)?;
    Ok(entries
        .into_iter()
        .filter_map(|e| serde_json::from_value(e).ok())
        .collect())
}

/// One entry of `accepts` (v1): plain network names and `maxAmountRequired`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirementsV1 {
    pub scheme: Scheme,
    /// The v1 name of the network (`base`, `solana-devnet`), not CAIP-2.
    pub network: String,
    pub max_amount_required: TokenAmount,
    pub resource: String,
    pub description: String,
    pub mime_type: String,
    pub pay_to: Account,
    pub max_timeout_seconds: u64,
    pub asset: Asset,
    #[serde(default)]
    pub extra: Map<String, Value>,
}

/// A client's payment, as sent in `PAYMENT-SIGNATURE` (v2) or `X-PAYMENT` (v1).
#[derive(Debug, Clone, PartialEq)]
pub enum PaymentPayload {
    V2 {
        /// The requirements the client says it paid against (checked against ours).
        accepted: PaymentRequirements,
        /// Boxed: rarely read, and large next to a v1 payload.
        resource: Option<Box<ResourceInfo>>,
        payload: Value,
    },
    V1 {
        scheme: Scheme,
        network: String,
        payload: Value,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct V2Wire {
    accepted: PaymentRequirements,
    #[serde(default)]
    resource: Option<ResourceInfo>,
    payload: Value,
}

#[derive(Deserialize)]
struct V1Wire {
    scheme: Scheme,
    network: String,
    payload: Value,
}

impl PaymentPayload {
    /// Reads the JSON of either version, by its `x402Version`.
    pub fn from_json(v: Value) -> Result<PaymentPayload, String> {
        let version = match v.get("x402Version") {
            None => return Err("x402Version is missing".into()),
            Some(n) => n
                .as_u64()
                .ok_or_else(|| format!("x402Version must be 2 or 1, not {n}"))
                .and_then(X402Version::from_number)?,
        };
        match version {
            X402Version::V2 => {
                let w: V2Wire = serde_json::from_value(v).map_err(|e| e.to_string())?;
                Ok(PaymentPayload::V2 {
                    accepted: w.accepted,
                    resource: w.resource.map(Box::new),
                    payload: w.payload,
                })
            }
            X402Version::V1 => {
                let w: V1Wire = serde_json::from_value(v).map_err(|e| e.to_string())?;
                Ok(PaymentPayload::V1 {
                    scheme: w.scheme,
                    network: w.network,
                    payload: w.payload,
                })
            }
        }
    }

    pub fn version(&self) -> X402Version {
        match self {
            PaymentPayload::V2 { .. } => X402Version::V2,
            PaymentPayload::V1 { .. } => X402Version::V1,
        }
    }

    pub fn scheme_payload(&self) -> &Value {
        match self {
            PaymentPayload::V2 { payload, .. } | PaymentPayload::V1 { payload, .. } => payload,
        }
    }
}

/// EIP-3009 `TransferWithAuthorization` as the `exact` scheme carries it on EVM.
/// Unknown fields are refused here and in [`EvmExactPayload`]: a payment means exactly
/// what it signs, and a copy padded with extra fields is not another payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EvmAuthorization {
    pub from: String,
    pub to: String,
    pub value: String,
    pub valid_after: String,
    pub valid_before: String,
    pub nonce: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvmExactPayload {
    pub signature: String,
    pub authorization: EvmAuthorization,
}

/// The outcome of settlement, in `PAYMENT-RESPONSE` / `X-PAYMENT-RESPONSE`, on
/// failures too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettlementResponse {
    pub success: bool,
    #[serde(default)]
    pub transaction: String,
    /// The network paid on; `None` (spelled `""`) for a payment refused before it
    /// matched any rail of ours.
    #[serde(with = "network_or_empty")]
    pub network: Option<Network>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<Account>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<FailureReason>,
    /// What extensions add to the answer (`offer-receipt`'s signed receipt).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extensions: Map<String, Value>,
    /// What the scheme adds (batch-settlement: `chargedAmount`, `channelState`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub extra: Map<String, Value>,
}

/// `SettlementResponse.network`: the spec requires the field, so a refusal that
/// matched no network says `""`.
mod network_or_empty {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Network;

    pub fn serialize<S: Serializer>(n: &Option<Network>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(n.as_ref().map_or("", Network::as_str))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Network>, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode_header, encode_header};

    #[test]
    fn reads_a_v2_payment_like_the_reference_client_sends() {
        let json = serde_json::json!({
            "x402Version": 2,
            "resource": {"url": "http://127.0.0.1:8080/v1/verdicts/basic", "description": "basic verdict", "mimeType": "application/json"},
            "accepted": {"scheme": "exact", "network": "eip155:8453", "amount": "1000000",
                "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", "payTo": "0x1111111111111111111111111111111111111111",
                "maxTimeoutSeconds": 60, "extra": {"name": "USD Coin", "version": "2"}},
            "payload": {"signature": "0xabc", "authorization": {"from": "0x2222222222222222222222222222222222222222",
                "to": "0x1111111111111111111111111111111111111111", "value": "1000000", "validAfter": "0",
                "validBefore": "9999999999", "nonce": "0x00"}}
        });
        let header = encode_header(&json);
        let back: Value = decode_header(&header).expect("decodes");
        let p = PaymentPayload::from_json(back).expect("v2 payload");
        let PaymentPayload::V2 {
            accepted, payload, ..
        } = &p
        else {
            panic!("not v2")
        };
        assert_eq!(
            accepted.pay_to,
            "0x1111111111111111111111111111111111111111"
        );
        assert_eq!(accepted.max_timeout_seconds, 60);
        let evm: EvmExactPayload = serde_json::from_value(payload.clone()).expect("evm payload");
        assert_eq!(evm.authorization.valid_before, "9999999999");
    }

    #[test]
    fn reads_v1_and_refuses_unknown_versions() {
        let v1 = serde_json::json!({"x402Version": 1, "scheme": "exact", "network": "base", "payload": {}});
        assert_eq!(PaymentPayload::from_json(v1).expect("v1").version(), 1);
        assert!(PaymentPayload::from_json(serde_json::json!({"x402Version": 3})).is_err());
        assert!(PaymentPayload::from_json(serde_json::json!({"scheme": "exact"})).is_err());
        assert!(decode_header::<Value>("not base64 !!").is_err());
        assert!(decode_header::<Value>("aGVsbG8=").is_err()); // "hello": not JSON
    }

    #[test]
    fn a_402_with_an_option_this_client_cannot_read_keeps_the_others() {
        let required = serde_json::json!({
            "x402Version": 2, "error": "payment required",
            "resource": {"url": "http://127.0.0.1/v1/verdicts/basic"},
            "accepts": [
                {"scheme": "exact", "network": "aptos:1", "amount": "1000000",
                 "asset": "0x1::aptos_coin::AptosCoin", "payTo": "0x1", "maxTimeoutSeconds": 60},
                {"scheme": "exact", "network": "eip155:8453", "amount": "1000000",
                 "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                 "payTo": "0x1111111111111111111111111111111111111111", "maxTimeoutSeconds": 60}
            ]
        });
        let r: PaymentRequired = serde_json::from_value(required).expect("readable");
        assert_eq!(r.accepts.len(), 1);
        assert_eq!(r.accepts[0].network.chain_id(), Some(8453));
    }

    #[test]
    fn settlement_responses_serialize_as_the_spec_spells_them() {
        let s = SettlementResponse {
            success: false,
            transaction: String::new(),
            network: Some("eip155:8453".parse().expect("valid fixture")),
            payer: Some(
                "0x1111111111111111111111111111111111111111"
                    .parse()
                    .expect("valid fixture"),
            ),
            error_reason: Some("insufficient_funds".into()),
            extensions: Default::default(),
            extra: Default::default(),
        };
        let v = serde_json::to_value(&s).expect("json");
        assert_eq!(v["errorReason"], "insufficient_funds");
        assert_eq!(v["success"], false);
    }
}
