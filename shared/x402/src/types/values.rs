//! The values inside x402 messages that the protocol gives a shape: a CAIP-2 network,
//! an amount in base units, an account paid and an asset paid in. Each parses once,
//! where it enters (configuration, a client's payment), and prints as the wire spells it.

use std::fmt;
use std::str::FromStr;

use alloy::primitives::{Address, U256};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::svm::{NATIVE_SOL_ASSET, Pubkey};

/// Why a value of an x402 message does not parse, saying what was read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("network {0:?} is not a CAIP-2 chain id (namespace:reference, as in eip155:8453)")]
    Network(String),
    #[error("amount {0:?} is not a whole number of base units in decimal digits")]
    Amount(String),
    #[error("amount {0:?} does not fit in 256 bits")]
    AmountTooLarge(String),
    #[error("{0:?} is not an EVM address (0x and 40 hex digits)")]
    EvmAccount(String),
    #[error("{0:?} is neither an EVM address nor a Solana address")]
    Account(String),
    #[error("asset {0:?} is neither a token address, a Solana mint nor {NATIVE_SOL_ASSET:?}")]
    Asset(String),
}

/// Serde through `FromStr` and `Display`, the way every value here is spelled on the wire.
macro_rules! serde_as_string {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                let text = String::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }

        impl PartialEq<&str> for $t {
            fn eq(&self, other: &&str) -> bool {
                other.parse::<$t>().is_ok_and(|o| o == *self)
            }
        }

        impl PartialEq<String> for $t {
            fn eq(&self, other: &String) -> bool {
                *self == other.as_str()
            }
        }
    };
}

/// How a payment is made: `exact` (a transfer of exactly the amount asked), the one
/// scheme we sell on; other names (a client's, a facilitator's) are kept as spelled.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scheme {
    Exact,
    Other(String),
}

impl Scheme {
    pub fn as_str(&self) -> &str {
        match self {
            Scheme::Exact => "exact",
            Scheme::Other(name) => name,
        }
    }
}

impl FromStr for Scheme {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Scheme, Self::Err> {
        Ok(match s {
            "exact" => Scheme::Exact,
            other => Scheme::Other(other.to_owned()),
        })
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

serde_as_string!(Scheme);

/// A CAIP-2 chain id: `namespace:reference`, as in `eip155:8453` or
/// `solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Network {
    text: String,
    colon: usize,
}

/// The chain families we pay on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    Eip155,
    Solana,
    Other,
}

impl Network {
    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn namespace(&self) -> Namespace {
        match &self.text[..self.colon] {
            "eip155" => Namespace::Eip155,
            "solana" => Namespace::Solana,
            _ => Namespace::Other,
        }
    }

    pub fn reference(&self) -> &str {
        &self.text[self.colon + 1..]
    }

    /// The EIP-155 chain id of an `eip155:` network.
    pub fn chain_id(&self) -> Option<u64> {
        (self.namespace() == Namespace::Eip155)
            .then(|| self.reference().parse().ok())
            .flatten()
    }
}

impl FromStr for Network {
    type Err = ParseError;

    /// CAIP-2: a namespace of 3–8 of `[-a-z0-9]`, a colon, a reference of 1–32 of
    /// `[-_a-zA-Z0-9]`.
    fn from_str(s: &str) -> Result<Network, ParseError> {
        let bad = || ParseError::Network(s.to_owned());
        let (ns, reference) = s.split_once(':').ok_or_else(bad)?;
        let ns_ok = (3..=8).contains(&ns.len())
            && ns
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let ref_ok = (1..=32).contains(&reference.len())
            && reference
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if !(ns_ok && ref_ok) {
            return Err(bad());
        }
        Ok(Network {
            text: s.to_owned(),
            colon: ns.len(),
        })
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

serde_as_string!(Network);

/// An amount of a token in its base units (USDC micro-units, lamports), written on the
/// wire as a decimal integer string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TokenAmount(pub U256);

impl TokenAmount {
    /// The amount as a u64, where it fits (Solana amounts always must).
    pub fn to_u64(self) -> Option<u64> {
        u64::try_from(self.0).ok()
    }
}

impl From<u64> for TokenAmount {
    fn from(n: u64) -> TokenAmount {
        TokenAmount(U256::from(n))
    }
}

impl From<u128> for TokenAmount {
    fn from(n: u128) -> TokenAmount {
        TokenAmount(U256::from(n))
    }
}

impl FromStr for TokenAmount {
    type Err = ParseError;

    /// Decimal digits only: no sign, no exponent, no fraction, no hex (leading zeros are
    /// allowed and mean nothing).
    fn from_str(s: &str) -> Result<TokenAmount, ParseError> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ParseError::Amount(s.to_owned()));
        }
        U256::from_str_radix(s, 10)
            .map(TokenAmount)
            .map_err(|_| ParseError::AmountTooLarge(s.to_owned()))
    }
}

impl fmt::Display for TokenAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

serde_as_string!(TokenAmount);

/// Who is paid: an EVM address (compared by its 20 bytes, whatever the checksum casing)
/// or a Solana account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Account {
    Evm(Address),
    Solana(Pubkey),
}

impl Account {
    pub fn evm(&self) -> Option<Address> {
        match self {
            Account::Evm(a) => Some(*a),
            Account::Solana(_) => None,
        }
    }

    pub fn solana(&self) -> Option<Pubkey> {
        match self {
            Account::Solana(k) => Some(*k),
            Account::Evm(_) => None,
        }
    }
}

/// `0x` (or `0X`) and 40 hex digits (any casing; the checksum is not required).
fn evm_address(s: &str) -> Option<Address> {
    let hex = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    (hex.len() == 40 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| hex.parse().ok())
        .flatten()
}

impl FromStr for Account {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Account, ParseError> {
        if s.starts_with("0x") || s.starts_with("0X") {
            evm_address(s)
                .map(Account::Evm)
                .ok_or_else(|| ParseError::EvmAccount(s.to_owned()))
        } else {
            Pubkey::from_base58(s)
                .map(Account::Solana)
                .ok_or_else(|| ParseError::Account(s.to_owned()))
        }
    }
}

impl fmt::Display for Account {
    /// EVM addresses in their EIP-55 checksum casing, Solana ones in base58.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Account::Evm(a) => write!(f, "{}", a.to_checksum(None)),
            Account::Solana(k) => f.write_str(&k.to_base58()),
        }
    }
}

serde_as_string!(Account);

/// What a payment is made in: an EVM token contract, an SPL mint, or native SOL (our
/// extension of `exact`, spelled `native`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Asset {
    Evm(Address),
    SplMint(Pubkey),
    NativeSol,
}

impl Asset {
    pub fn evm(&self) -> Option<Address> {
        match self {
            Asset::Evm(a) => Some(*a),
            _ => None,
        }
    }

    pub fn spl_mint(&self) -> Option<Pubkey> {
        match self {
            Asset::SplMint(k) => Some(*k),
            _ => None,
        }
    }
}

impl FromStr for Asset {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Asset, ParseError> {
        if s == NATIVE_SOL_ASSET {
            return Ok(Asset::NativeSol);
        }
        match s.parse::<Account>() {
            Ok(Account::Evm(a)) => Ok(Asset::Evm(a)),
            Ok(Account::Solana(k)) => Ok(Asset::SplMint(k)),
            Err(_) => Err(ParseError::Asset(s.to_owned())),
        }
    }
}

impl fmt::Display for Asset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Asset::Evm(a) => write!(f, "{}", a.to_checksum(None)),
            Asset::SplMint(k) => f.write_str(&k.to_base58()),
            Asset::NativeSol => f.write_str(NATIVE_SOL_ASSET),
        }
    }
}

serde_as_string!(Asset);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes_other_than_exact_are_kept_as_spelled() {
        assert_eq!("exact".parse::<Scheme>(), Ok(Scheme::Exact));
        let upto: Scheme = "upto".parse().expect("infallible");
        assert_eq!(upto, Scheme::Other("upto".into()));
        assert_eq!(serde_json::to_value(&upto).expect("json"), "upto");
        assert_eq!(
            serde_json::from_value::<Scheme>(serde_json::json!("exact")).expect("reads"),
            Scheme::Exact
        );
    }

    #[test]
    fn networks_parse_as_caip2_and_refuse_the_rest() {
        let base: Network = "eip155:8453".parse().expect("base");
        assert_eq!(base.namespace(), Namespace::Eip155);
        assert_eq!(base.chain_id(), Some(8453));
        let sol: Network = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp"
            .parse()
            .expect("sol");
        assert_eq!(sol.namespace(), Namespace::Solana);
        assert_eq!(sol.chain_id(), None);
        for bad in [
            "base",
            "eip155:",
            ":8453",
            "EIP155:8453",
            "ei:1",
            "eip155:84 53",
            "",
        ] {
            assert!(bad.parse::<Network>().is_err(), "{bad:?} parsed");
        }
        let json = serde_json::to_value(&base).expect("json");
        assert_eq!(json, "eip155:8453");
        assert!(serde_json::from_value::<Network>(serde_json::json!("base")).is_err());
    }

    #[test]
    fn amounts_are_decimal_digits_only() {
        let a: TokenAmount = "0001000000".parse().expect("amount");
        assert_eq!(a, TokenAmount::from(1_000_000u64));
        assert_eq!(a.to_string(), "1000000");
        for bad in ["", "-1", "+1", "1e6", "1.0", "0x10", " 1", "1_000"] {
            assert!(bad.parse::<TokenAmount>().is_err(), "{bad:?} parsed");
        }
        let max = U256::MAX.to_string();
        assert_eq!(max.parse::<TokenAmount>().expect("max").0, U256::MAX);
        assert!(format!("{max}0").parse::<TokenAmount>().is_err());
        assert_eq!(TokenAmount::from(u64::MAX).to_u64(), Some(u64::MAX));
        assert_eq!(TokenAmount::from(u128::MAX).to_u64(), None);
        assert!(serde_json::from_value::<TokenAmount>(serde_json::json!(1000000)).is_err());
    }

    #[test]
    fn accounts_and_assets_compare_by_their_bytes() {
        let lower: Account = "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913"
            .parse()
            .expect("evm");
        let checksummed: Account = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
            .parse()
            .expect("evm");
        assert_eq!(lower, checksummed);
        let upper_prefix: Account = "0X833589FCD6EDB6E08F4C7C32D4F71B54BDA02913"
            .parse()
            .expect("0X");
        assert_eq!(upper_prefix, checksummed);
        assert_eq!(
            lower.to_string(),
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
        );
        let sol: Account = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
            .parse()
            .expect("sol");
        assert_eq!(
            sol.to_string(),
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"
        );
        for bad in [
            "0x1234",
            "0xzz3589fcd6edb6e08f4c7c32d4f71b54bda02913",
            "",
            "native",
            "not base58 0OIl",
        ] {
            assert!(bad.parse::<Account>().is_err(), "{bad:?} parsed");
        }
        assert_eq!("native".parse::<Asset>(), Ok(Asset::NativeSol));
        assert_eq!(Asset::NativeSol.to_string(), "native");
        assert!(matches!(
            "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v".parse::<Asset>(),
            Ok(Asset::SplMint(_))
        ));
        assert!(Asset::NativeSol == "native");
        assert!(
            Asset::Evm(lower.evm().expect("evm")) == "0x833589FCD6EDB6E08F4C7C32D4F71B54BDA02913"
        );
    }
}
