//! Which rails are enabled and how, from configuration. A rail is enabled by naming
//! where the money goes (its payTo); everything else has the contract's defaults.
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `UMPIRE_EVM_PAY_TO` | enables the EVM USDC rail: the address paid | — (rail off) |
//! | `UMPIRE_EVM_NETWORK` | CAIP-2 network | `eip155:8453` (Base) |
//! | `UMPIRE_EVM_ASSET` | the EIP-3009 token | Base USDC (Base Sepolia USDC on 84532) |
//! | `UMPIRE_EVM_ASSET_NAME`, `UMPIRE_EVM_ASSET_VERSION` | its EIP-712 domain | `USD Coin`/`2` (`USDC`/`2` on Base Sepolia) |
//! | `UMPIRE_EVM_ASSET_DECIMALS` | token decimals | `6` |
//! | `UMPIRE_SOLANA_PAY_TO`, `UMPIRE_SOLANA_FEE_PAYER` | enable the Solana USDC rail (the fee payer is the facilitator's, pinned so every cold start advertises the same requirements) | — (rail off) |
//! | `UMPIRE_SOLANA_NETWORK`, `UMPIRE_SOLANA_USDC_MINT` | network and mint | mainnet, mainnet USDC |
//! | `UMPIRE_SOL_NATIVE` | `on` adds native SOL (quoted from the spot rate; needs `UMPIRE_SOLANA_RPC_URL`) | off |
//! | `UMPIRE_PAYMENT_TIMEOUT_SECONDS` | `maxTimeoutSeconds` | `60` |
//!
//! Settlement (see [`payments_from`]):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `UMPIRE_SETTLEMENT` | `self` (EVM on our RPC with our key) or `facilitator` | `facilitator` when `UMPIRE_FACILITATOR_URL` is set, else `self` |
//! | `UMPIRE_FACILITATOR_URL`, `UMPIRE_FACILITATOR_AUTH` | the facilitator and its `Authorization` header value; required for Solana rails | — |
//! | `UMPIRE_EVM_RPC_URL`, `UMPIRE_SETTLER_PRIVATE_KEY` | self-settlement's RPC and gas-paying key; with a facilitator, the RPC alone is read (never written) to decide settlements the facilitator leaves unknown (`settlement_pending`, a reverted or duplicate settlement) | — |
//! | `UMPIRE_SETTLEMENT_TIMEOUT_SECONDS` | how long to wait for a settlement receipt | `30` |
//! | `UMPIRE_EVM_BLOCK_TIME_MS` | the chain's block interval, which receipt polls follow (`0`: blocks at once) | `2000` on Base and Base Sepolia, else `0` |
//! | `UMPIRE_EVM_PRECONFIRMATIONS` | `on`: answer a purchase on the preconfirmed receipt a flashblocks RPC gives (docs/paying.md states the risk) | `off` |
//! | `UMPIRE_EVM_MAX_FEE_GWEI` | the most a settlement replaced for its fees (a base-fee spike) may offer per gas, in gwei (decimals allowed) | `1` |
//! | `UMPIRE_EVM_MAX_SETTLEMENT_GAS` | the most gas one smart-wallet settlement may use (its signature check runs on our gas; a costlier wallet is refused) | `300000` |
//! | `UMPIRE_SOL_PRICE_URL` | the SOL spot price source (Coinbase's API shape) | Coinbase's spot price |
//! | `UMPIRE_SOLANA_RPC_URL` | the Solana node native SOL payments are verified and broadcast on, and USDC settlements the facilitator leaves unknown are looked up on | — |
//! | `UMPIRE_SOLANA_SLOT_MS` | the cluster's slot time, which native SOL's confirmation polls follow (`0`: a node that confirms at once) | `400` |
//!
//! This module holds what every part shares (the known networks and assets, the error,
//! the readers of a whole number and of the chain's timing); [`rails_from`] reads the
//! rails and [`payments_from`] how they are settled.

mod facilitator;
mod rails;
mod self_settle;
mod settlement;
#[cfg(test)]
mod tests;

use std::time::Duration;

use umpire_x402::rails::Rail;

pub use rails::{rails_from, rails_from_env};
pub use settlement::{payments_from, payments_from_env, sol_price_from_env};
pub use umpire_core::product::BASE_USDC;

pub const BASE_MAINNET: &str = "eip155:8453";
pub const BASE_SEPOLIA: &str = "eip155:84532";
pub const BASE_SEPOLIA_USDC: &str = "0x036CbD53842c5426634e7929541eC2318f3dCF7e";
pub const SOLANA_MAINNET: &str = "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp";
pub const SOLANA_DEVNET: &str = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
pub const SOLANA_USDC: &str = "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payment configuration {name}: {problem}")]
pub struct PayConfigError {
    pub name: &'static str,
    pub problem: String,
}

/// `name` as a whole number within `range`, `default` when unset; `problem` otherwise.
fn whole(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
    problem: &str,
) -> Result<u64, PayConfigError> {
    match get(name) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| range.contains(n))
            .ok_or_else(|| err(name, problem)),
    }
}

fn err(name: &'static str, problem: impl Into<String>) -> PayConfigError {
    PayConfigError {
        name,
        problem: problem.into(),
    }
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// The v1 name x402 v1 clients use for a CAIP-2 network, where there is one.
pub fn v1_network_name(caip2: &str) -> Option<&'static str> {
    match caip2 {
        BASE_MAINNET => Some("base"),
        BASE_SEPOLIA => Some("base-sepolia"),
        SOLANA_MAINNET => Some("solana"),
        SOLANA_DEVNET => Some("solana-devnet"),
        _ => None,
    }
}

/// The EVM rail's chain id, which its network names.
fn chain_id_of(rail: &Rail) -> Result<u64, PayConfigError> {
    rail.network
        .chain_id()
        .ok_or_else(|| err("UMPIRE_EVM_NETWORK", "must be eip155:<chain id>"))
}

/// The chain's block interval (`UMPIRE_EVM_BLOCK_TIME_MS`), which receipt polls follow.
fn block_time(
    get: &impl Fn(&str) -> Option<String>,
    chain_id: u64,
) -> Result<Duration, PayConfigError> {
    Ok(Duration::from_millis(whole(
        get,
        "UMPIRE_EVM_BLOCK_TIME_MS",
        0..=60_000,
        default_block_time_ms(chain_id),
        "must be milliseconds from 0 (blocks at once) to 60000",
    )?))
}

/// Base and Base Sepolia make a block every two seconds; other chains are polled as if
/// they mined at once unless `UMPIRE_EVM_BLOCK_TIME_MS` says otherwise.
fn default_block_time_ms(chain_id: u64) -> u64 {
    match chain_id {
        8453 | 84532 => 2000,
        _ => 0,
    }
}
