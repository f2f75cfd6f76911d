//! Which rails this deployment offers, read from the `UMPIRE_EVM_*`, `UMPIRE_SOLANA_*`,
//! `UMPIRE_SOL_NATIVE` and `UMPIRE_PAYMENT_TIMEOUT_SECONDS` variables.

use serde_json::{Map, Value};

use super::{
    BASE_MAINNET, BASE_SEPOLIA, BASE_SEPOLIA_USDC, BASE_USDC, PayConfigError, SOLANA_MAINNET,
    SOLANA_USDC, env, err, v1_network_name, whole,
};
use umpire_x402::rails::{Rail, RailPricing, Rails};
use umpire_x402::types::{Account, Asset, Namespace, Network, Scheme};

/// Reads the rails from a lookup function (the environment in production, a map in tests).
pub fn rails_from(get: impl Fn(&str) -> Option<String>) -> Result<Rails, PayConfigError> {
    let mut rails = Vec::new();
    if let Some(pay_to) = get("UMPIRE_EVM_PAY_TO") {
        rails.push(evm_rail(&pay_to, &get)?);
    }
    match (get("UMPIRE_SOLANA_PAY_TO"), get("UMPIRE_SOLANA_FEE_PAYER")) {
        (None, None) => {}
        (Some(pay_to), Some(fee_payer)) => rails.extend(solana_rails(&pay_to, fee_payer, &get)?),
        _ => {
            return Err(err(
                "UMPIRE_SOLANA_PAY_TO",
                "the Solana rails need both UMPIRE_SOLANA_PAY_TO and UMPIRE_SOLANA_FEE_PAYER",
            ));
        }
    }
    let max_timeout_seconds = whole(
        &get,
        "UMPIRE_PAYMENT_TIMEOUT_SECONDS",
        10..=3600,
        60,
        "must be seconds from 10 to 3600",
    )?;
    Ok(Rails {
        rails,
        max_timeout_seconds,
    })
}

pub fn rails_from_env() -> Result<Rails, PayConfigError> {
    rails_from(env)
}

/// The EVM USDC rail paying `pay_to` (`UMPIRE_EVM_PAY_TO`), on the configured network
/// and token.
fn evm_rail(pay_to: &str, get: &impl Fn(&str) -> Option<String>) -> Result<Rail, PayConfigError> {
    let pay_to = evm_address(pay_to).map(Account::Evm).ok_or_else(|| {
        err(
            "UMPIRE_EVM_PAY_TO",
            "must be a 0x-prefixed 20-byte hex address",
        )
    })?;
    let network = get("UMPIRE_EVM_NETWORK").unwrap_or_else(|| BASE_MAINNET.into());
    let network = network
        .parse::<Network>()
        .ok()
        .filter(|n| n.chain_id().is_some())
        .ok_or_else(|| err("UMPIRE_EVM_NETWORK", "must be CAIP-2, e.g. eip155:8453"))?;
    let sepolia = network.as_str() == BASE_SEPOLIA;
    let asset = get("UMPIRE_EVM_ASSET").unwrap_or_else(|| {
        if sepolia {
            BASE_SEPOLIA_USDC
        } else {
            BASE_USDC
        }
        .to_owned()
    });
    let asset = evm_address(&asset)
        .map(Asset::Evm)
        .ok_or_else(|| err("UMPIRE_EVM_ASSET", "must be the token's 0x address"))?;
    let extra = eip712_domain(get, sepolia);
    let decimals = match get("UMPIRE_EVM_ASSET_DECIMALS") {
        None => 6,
        Some(d) => d.parse::<u32>().ok().filter(|d| *d <= 30).ok_or_else(|| {
            err(
                "UMPIRE_EVM_ASSET_DECIMALS",
                "must be an integer from 0 to 30",
            )
        })?,
    };
    Ok(Rail {
        scheme: Scheme::Exact,
        v1_network: get("UMPIRE_EVM_V1_NETWORK")
            .or_else(|| v1_network_name(network.as_str()).map(str::to_owned)),
        network,
        asset,
        pay_to,
        extra,
        pricing: RailPricing::Stablecoin { decimals },
    })
}

/// The token's EIP-712 domain (`UMPIRE_EVM_ASSET_NAME`, `UMPIRE_EVM_ASSET_VERSION`) as
/// the EVM rail's `extra`.
fn eip712_domain(get: &impl Fn(&str) -> Option<String>, sepolia: bool) -> Map<String, Value> {
    // Base Sepolia's USDC signs with domain name "USDC"; mainnet's with "USD Coin".
    let name = get("UMPIRE_EVM_ASSET_NAME")
        .unwrap_or_else(|| if sepolia { "USDC" } else { "USD Coin" }.into());
    let version = get("UMPIRE_EVM_ASSET_VERSION").unwrap_or_else(|| "2".into());
    let mut extra = Map::new();
    extra.insert("name".into(), Value::String(name));
    extra.insert("version".into(), Value::String(version));
    extra
}

/// The Solana rails paying `pay_to` (`UMPIRE_SOLANA_PAY_TO`) with the facilitator's
/// `fee_payer`: USDC, then native SOL when `UMPIRE_SOL_NATIVE` is `on`.
fn solana_rails(
    pay_to: &str,
    fee_payer: String,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Vec<Rail>, PayConfigError> {
    let pay_to = solana_address(pay_to)
        .map(Account::Solana)
        .ok_or_else(|| err("UMPIRE_SOLANA_PAY_TO", "must be a base58 Solana address"))?;
    if solana_address(&fee_payer).is_none() {
        return Err(err(
            "UMPIRE_SOLANA_FEE_PAYER",
            "must be a base58 Solana address",
        ));
    }
    let network = get("UMPIRE_SOLANA_NETWORK").unwrap_or_else(|| SOLANA_MAINNET.into());
    let network = network
        .parse::<Network>()
        .ok()
        .filter(|n| n.namespace() == Namespace::Solana)
        .ok_or_else(|| {
            err(
                "UMPIRE_SOLANA_NETWORK",
                "must be CAIP-2, e.g. solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp",
            )
        })?;
    let mint = get("UMPIRE_SOLANA_USDC_MINT").unwrap_or_else(|| SOLANA_USDC.into());
    let mint = solana_address(&mint)
        .map(Asset::SplMint)
        .ok_or_else(|| err("UMPIRE_SOLANA_USDC_MINT", "must be a base58 Solana address"))?;
    let mut extra = Map::new();
    extra.insert("feePayer".into(), Value::String(fee_payer));
    let mut rails = vec![Rail {
        scheme: Scheme::Exact,
        v1_network: v1_network_name(network.as_str()).map(str::to_owned),
        network: network.clone(),
        asset: mint,
        pay_to,
        extra: extra.clone(),
        pricing: RailPricing::Stablecoin { decimals: 6 },
    }];
    if get("UMPIRE_SOL_NATIVE").as_deref() == Some("on") {
        rails.push(Rail {
            scheme: Scheme::Exact,
            // Native SOL is our extension of the exact scheme; v1 clients cannot use it.
            v1_network: None,
            network,
            asset: Asset::NativeSol,
            pay_to,
            extra: native_sol_extra(),
            pricing: RailPricing::SolSpot,
        });
    }
    Ok(rails)
}

/// What the native SOL option's `extra` says about the payment it wants (each 402 adds
/// the quote: `quote.expiresAt`, `quote.mac`): a transaction the payer signs alone and
/// pays the fee of, moving `amount` lamports with one `SystemProgram.Transfer` to
/// `payTo` (ComputeBudget and one Memo may accompany it), sent base64 as the exact
/// scheme's `payload.transaction`.
fn native_sol_extra() -> Map<String, Value> {
    let mut extra = Map::new();
    extra.insert(
        "decimals".into(),
        Value::from(umpire_x402::svm::SOL_DECIMALS),
    );
    extra.insert("transfer".into(), Value::from("system"));
    extra
}

fn evm_address(s: &str) -> Option<alloy::primitives::Address> {
    s.parse::<Account>().ok()?.evm()
}

fn solana_address(s: &str) -> Option<umpire_x402::svm::Pubkey> {
    s.parse::<Account>().ok()?.solana()
}
