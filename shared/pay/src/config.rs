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

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::evm::EvmChain;
use crate::price::{DEFAULT_SOL_PRICE_URL, SolPriceFeed};
use crate::settle::{FacilitatorClient, Payments, SelfSettler, Settler};
use umpire_x402::rails::{Rail, RailPricing, Rails};
use umpire_x402::types::{Account, Asset, Namespace, Network, Scheme};

pub const BASE_MAINNET: &str = "eip155:8453";
pub const BASE_SEPOLIA: &str = "eip155:84532";
pub use umpire_core::product::BASE_USDC;
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

fn evm_address(s: &str) -> Option<alloy::primitives::Address> {
    s.parse::<Account>().ok()?.evm()
}

fn solana_address(s: &str) -> Option<umpire_x402::svm::Pubkey> {
    s.parse::<Account>().ok()?.solana()
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

/// Reads the rails from a lookup function (the environment in production, a map in tests).
pub fn rails_from(get: impl Fn(&str) -> Option<String>) -> Result<Rails, PayConfigError> {
    let mut rails = Vec::new();
    if let Some(pay_to) = get("UMPIRE_EVM_PAY_TO") {
        let pay_to = evm_address(&pay_to).map(Account::Evm).ok_or_else(|| {
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
        // Base Sepolia's USDC signs with domain name "USDC"; mainnet's with "USD Coin".
        let name = get("UMPIRE_EVM_ASSET_NAME")
            .unwrap_or_else(|| if sepolia { "USDC" } else { "USD Coin" }.into());
        let version = get("UMPIRE_EVM_ASSET_VERSION").unwrap_or_else(|| "2".into());
        let decimals = match get("UMPIRE_EVM_ASSET_DECIMALS") {
            None => 6,
            Some(d) => d.parse::<u32>().ok().filter(|d| *d <= 30).ok_or_else(|| {
                err(
                    "UMPIRE_EVM_ASSET_DECIMALS",
                    "must be an integer from 0 to 30",
                )
            })?,
        };
        let mut extra = Map::new();
        extra.insert("name".into(), Value::String(name));
        extra.insert("version".into(), Value::String(version));
        rails.push(Rail {
            scheme: Scheme::Exact,
            v1_network: get("UMPIRE_EVM_V1_NETWORK")
                .or_else(|| v1_network_name(network.as_str()).map(str::to_owned)),
            network,
            asset,
            pay_to,
            extra,
            pricing: RailPricing::Stablecoin { decimals },
        });
    }
    match (get("UMPIRE_SOLANA_PAY_TO"), get("UMPIRE_SOLANA_FEE_PAYER")) {
        (None, None) => {}
        (Some(pay_to), Some(fee_payer)) => {
            let pay_to = solana_address(&pay_to)
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
            rails.push(Rail {
                scheme: Scheme::Exact,
                v1_network: v1_network_name(network.as_str()).map(str::to_owned),
                network: network.clone(),
                asset: mint,
                pay_to,
                extra: extra.clone(),
                pricing: RailPricing::Stablecoin { decimals: 6 },
            });
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
        }
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

pub fn rails_from_env() -> Result<Rails, PayConfigError> {
    rails_from(env)
}

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// How this deployment verifies and settles, for the rails it accepts. Connects to the
/// RPC (checking its chain id) when self-settling.
pub async fn payments_from(
    rails: &Rails,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Payments, PayConfigError> {
    let facilitator = match get("UMPIRE_FACILITATOR_URL") {
        Some(url) => Some(
            FacilitatorClient::new(&url, get("UMPIRE_FACILITATOR_AUTH"))
                .map_err(|e| err("UMPIRE_FACILITATOR_URL", e.message))?,
        ),
        None => None,
    };
    let facilitator = match facilitator {
        Some(f) => Some(Arc::new(with_readers(f, rails, &get).await?)),
        None => None,
    };
    let mode = get("UMPIRE_SETTLEMENT").unwrap_or_else(|| {
        if facilitator.is_some() {
            "facilitator"
        } else {
            "self"
        }
        .into()
    });
    let evm_rail = rails.rails.iter().find(|r| r.is_evm());
    let evm = match (mode.as_str(), evm_rail) {
        ("facilitator", _) => {
            if facilitator.is_none() {
                return Err(err(
                    "UMPIRE_FACILITATOR_URL",
                    "UMPIRE_SETTLEMENT=facilitator needs the facilitator's URL",
                ));
            }
            None
        }
        ("self", None) => None,
        ("self", Some(rail)) => {
            let rpc = get("UMPIRE_EVM_RPC_URL").ok_or_else(|| {
                err(
                    "UMPIRE_EVM_RPC_URL",
                    "self-settlement of the EVM rail needs an RPC URL (or set UMPIRE_FACILITATOR_URL)",
                )
            })?;
            let key = get("UMPIRE_SETTLER_PRIVATE_KEY").ok_or_else(|| {
                err(
                    "UMPIRE_SETTLER_PRIVATE_KEY",
                    "self-settlement needs the key that pays gas for transferWithAuthorization",
                )
            })?;
            let timeout = whole(
                &get,
                "UMPIRE_SETTLEMENT_TIMEOUT_SECONDS",
                1..=600,
                30,
                "must be seconds from 1 to 600",
            )?;
            let chain_id = rail
                .network
                .chain_id()
                .ok_or_else(|| err("UMPIRE_EVM_NETWORK", "must be eip155:<chain id>"))?;
            let block_time = Duration::from_millis(whole(
                &get,
                "UMPIRE_EVM_BLOCK_TIME_MS",
                0..=60_000,
                default_block_time_ms(chain_id),
                "must be milliseconds from 0 (blocks at once) to 60000",
            )?);
            let preconfirmations = match get("UMPIRE_EVM_PRECONFIRMATIONS").as_deref() {
                None | Some("off") => false,
                Some("on") => true,
                Some(_) => {
                    return Err(err(
                        "UMPIRE_EVM_PRECONFIRMATIONS",
                        "must be on (answer on a flashblocks RPC's preconfirmed receipt) or off",
                    ));
                }
            };
            let fee_cap = match get("UMPIRE_EVM_MAX_FEE_GWEI") {
                None => crate::evm::DEFAULT_FEE_CAP_WEI,
                Some(g) => gwei_to_wei(&g).ok_or_else(|| {
                    err(
                        "UMPIRE_EVM_MAX_FEE_GWEI",
                        "must be a positive number of gwei, e.g. 1 or 0.05",
                    )
                })?,
            };
            let gas_cap = whole(
                &get,
                "UMPIRE_EVM_MAX_SETTLEMENT_GAS",
                crate::evm::TRANSFER_GAS_LIMIT..=30_000_000,
                crate::evm::DEFAULT_GAS_CAP,
                "must be gas from 150000 to 30000000",
            )?;
            let chain = EvmChain::connect(
                &rpc,
                chain_id,
                Some(&key),
                Duration::from_secs(timeout),
                block_time,
            )
            .await
            .map_err(|e| err("UMPIRE_EVM_RPC_URL", e.message))?
            .with_preconfirmations(preconfirmations)
            .with_fee_cap(fee_cap)
            .with_gas_cap(gas_cap);
            Some(Arc::new(SelfSettler { chain }) as Arc<dyn Settler>)
        }
        (other, _) => {
            return Err(err(
                "UMPIRE_SETTLEMENT",
                format!("{other:?} is not a settlement mode (use self or facilitator)"),
            ));
        }
    };
    let native_sol = match rails.rails.iter().find(|r| r.is_native_sol()) {
        None => None,
        Some(_) => {
            let url = get("UMPIRE_SOLANA_RPC_URL").ok_or_else(|| {
                err(
                    "UMPIRE_SOLANA_RPC_URL",
                    "native SOL (UMPIRE_SOL_NATIVE=on) is verified and settled on a Solana RPC node: set its URL",
                )
            })?;
            let rpc = crate::solana::SolanaRpc::new(&url)
                .map_err(|e| err("UMPIRE_SOLANA_RPC_URL", e.message))?;
            let slot_time = Duration::from_millis(whole(
                &get,
                "UMPIRE_SOLANA_SLOT_MS",
                0..=10_000,
                crate::solana::SLOT_MS,
                "must be milliseconds from 0 (slots at once) to 10000",
            )?);
            Some(Arc::new(crate::solana::NativeSolSettler { rpc, slot_time }) as Arc<dyn Settler>)
        }
    };
    let payments = Payments {
        evm,
        native_sol,
        facilitator,
    };
    if let Some(rail) = rails.rails.iter().find(|r| !payments.can_settle(r)) {
        return Err(err(
            "UMPIRE_FACILITATOR_URL",
            format!(
                "the rail on {} needs a facilitator to verify and settle its payments",
                rail.network
            ),
        ));
    }
    Ok(payments)
}

/// The facilitator with the chains it settles on read beside it (`UMPIRE_EVM_RPC_URL`,
/// `UMPIRE_SOLANA_RPC_URL`, when set): a settlement its answer leaves unknown is
/// decided there. Without them such a settlement is decided only by asking the
/// facilitator again, and a purchase can stay pending past its payment's window (the
/// `PendingOverdue` alarm says so).
async fn with_readers(
    f: FacilitatorClient,
    rails: &Rails,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<FacilitatorClient, PayConfigError> {
    let mut f = f;
    if let (Some(rail), Some(rpc)) = (
        rails.rails.iter().find(|r| r.is_evm()),
        get("UMPIRE_EVM_RPC_URL"),
    ) {
        let chain_id = rail
            .network
            .chain_id()
            .ok_or_else(|| err("UMPIRE_EVM_NETWORK", "must be eip155:<chain id>"))?;
        let block_time = Duration::from_millis(whole(
            get,
            "UMPIRE_EVM_BLOCK_TIME_MS",
            0..=60_000,
            default_block_time_ms(chain_id),
            "must be milliseconds from 0 (blocks at once) to 60000",
        )?);
        match EvmChain::connect(&rpc, chain_id, None, Duration::from_secs(30), block_time).await {
            Ok(chain) => f = f.with_evm_reader(chain),
            // Unreachable now: the facilitator still settles; only unknown outcomes wait
            // for the facilitator to be asked again (a cold start must not fail on it).
            Err(e) if e.kind == umpire_x402::FailureKind::Unavailable => tracing::error!(
                error = %e,
                "the EVM RPC could not be reached: settlements the facilitator leaves unknown are not read on the chain by this process"
            ),
            Err(e) => return Err(err("UMPIRE_EVM_RPC_URL", e.message)),
        }
    }
    if rails.rails.iter().any(|r| !r.is_evm())
        && let Some(url) = get("UMPIRE_SOLANA_RPC_URL")
    {
        let rpc = crate::solana::SolanaRpc::new(&url)
            .map_err(|e| err("UMPIRE_SOLANA_RPC_URL", e.message))?;
        f = f.with_svm_reader(rpc);
    }
    Ok(f)
}

pub async fn payments_from_env(rails: &Rails) -> Result<Payments, PayConfigError> {
    payments_from(rails, env).await
}

/// The SOL price source, when native SOL is accepted.
pub fn sol_price_from_env(rails: &Rails) -> Result<Option<Arc<SolPriceFeed>>, PayConfigError> {
    if !rails
        .rails
        .iter()
        .any(|r| r.pricing == RailPricing::SolSpot)
    {
        return Ok(None);
    }
    let url = env("UMPIRE_SOL_PRICE_URL").unwrap_or_else(|| DEFAULT_SOL_PRICE_URL.into());
    SolPriceFeed::new(&url)
        .map(|f| Some(Arc::new(f)))
        .map_err(|e| err("UMPIRE_SOL_PRICE_URL", e))
}

/// Gwei as written (`1`, `0.05`, at most 9 decimals) in wei; `None` for anything else,
/// zero included.
fn gwei_to_wei(text: &str) -> Option<u128> {
    let (whole, frac) = text.trim().split_once('.').unwrap_or((text.trim(), ""));
    if frac.len() > 9
        || !(whole.chars().all(|c| c.is_ascii_digit()) && frac.chars().all(|c| c.is_ascii_digit()))
        || (whole.is_empty() && frac.is_empty())
    {
        return None;
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let frac: u128 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().ok()?
    };
    Some(whole.checked_mul(1_000_000_000)?.checked_add(frac)?).filter(|w| *w > 0)
}

/// Base and Base Sepolia make a block every two seconds; other chains are polled as if
/// they mined at once unless `UMPIRE_EVM_BLOCK_TIME_MS` says otherwise.
fn default_block_time_ms(chain_id: u64) -> u64 {
    match chain_id {
        8453 | 84532 => 2000,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_fee_cap_reads_gwei_as_written() {
        assert_eq!(gwei_to_wei("1"), Some(1_000_000_000));
        assert_eq!(gwei_to_wei("0.05"), Some(50_000_000));
        assert_eq!(gwei_to_wei(" 12.000000001 "), Some(12_000_000_001));
        assert_eq!(gwei_to_wei(".5"), Some(500_000_000));
        for bad in [
            "",
            "0",
            "0.0",
            "-1",
            "1e9",
            "0.0000000001",
            "abc",
            "1.2.3",
            ".",
        ] {
            assert_eq!(gwei_to_wei(bad), None, "{bad:?}");
        }
    }

    fn rails(pairs: &[(&str, &str)]) -> Result<Rails, PayConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        rails_from(|k| m.get(k).cloned())
    }

    #[test]
    fn nothing_configured_means_no_rails() {
        assert!(rails(&[]).expect("ok").rails.is_empty());
    }

    #[test]
    fn base_defaults_follow_the_contract() {
        let r = rails(&[(
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        )])
        .expect("ok");
        let base = &r.rails[0];
        assert_eq!(base.network, BASE_MAINNET);
        assert_eq!(base.asset, BASE_USDC);
        assert_eq!(base.extra["name"], "USD Coin");
        assert_eq!(base.extra["version"], "2");
        assert_eq!(base.v1_network.as_deref(), Some("base"));
        assert_eq!(r.max_timeout_seconds, 60);
        let sepolia = rails(&[
            (
                "UMPIRE_EVM_PAY_TO",
                "0x1111111111111111111111111111111111111111",
            ),
            ("UMPIRE_EVM_NETWORK", BASE_SEPOLIA),
        ])
        .expect("ok");
        assert_eq!(sepolia.rails[0].asset, BASE_SEPOLIA_USDC);
        assert_eq!(sepolia.rails[0].extra["name"], "USDC");
        assert_eq!(sepolia.rails[0].v1_network.as_deref(), Some("base-sepolia"));
    }

    #[test]
    fn solana_rails_in_preference_order() {
        let r = rails(&[
            (
                "UMPIRE_EVM_PAY_TO",
                "0x1111111111111111111111111111111111111111",
            ),
            (
                "UMPIRE_SOLANA_PAY_TO",
                "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
            ),
            (
                "UMPIRE_SOLANA_FEE_PAYER",
                "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
            ),
            ("UMPIRE_SOL_NATIVE", "on"),
        ])
        .expect("ok");
        let assets: Vec<String> = r.rails.iter().map(|x| x.asset.to_string()).collect();
        let order: Vec<(&str, &str)> = r
            .rails
            .iter()
            .zip(&assets)
            .map(|(x, asset)| (x.network.as_str(), asset.as_str()))
            .collect();
        assert_eq!(
            order,
            vec![
                (BASE_MAINNET, BASE_USDC),
                (SOLANA_MAINNET, SOLANA_USDC),
                (SOLANA_MAINNET, "native")
            ]
        );
        assert_eq!(
            r.rails[1].extra["feePayer"],
            "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4"
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (pairs, name) in [
            (vec![("UMPIRE_EVM_PAY_TO", "0x123")], "UMPIRE_EVM_PAY_TO"),
            (
                vec![
                    (
                        "UMPIRE_EVM_PAY_TO",
                        "0x1111111111111111111111111111111111111111",
                    ),
                    ("UMPIRE_EVM_NETWORK", "base"),
                ],
                "UMPIRE_EVM_NETWORK",
            ),
            (
                vec![(
                    "UMPIRE_SOLANA_PAY_TO",
                    "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
                )],
                "UMPIRE_SOLANA_PAY_TO",
            ),
            (
                vec![("UMPIRE_PAYMENT_TIMEOUT_SECONDS", "1")],
                "UMPIRE_PAYMENT_TIMEOUT_SECONDS",
            ),
        ] {
            assert_eq!(rails(&pairs).map_err(|e| e.name), Err(name));
        }
    }

    #[tokio::test]
    async fn settlement_must_cover_every_rail() {
        let evm_only = rails(&[(
            "UMPIRE_EVM_PAY_TO",
            "0x1111111111111111111111111111111111111111",
        )])
        .expect("rails");
        let get = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        let e = payments_from(&evm_only, get(&[]))
            .await
            .expect_err("no RPC");
        assert_eq!(e.name, "UMPIRE_EVM_RPC_URL");
        let e = payments_from(&evm_only, get(&[("UMPIRE_SETTLEMENT", "facilitator")]))
            .await
            .expect_err("no facilitator");
        assert_eq!(e.name, "UMPIRE_FACILITATOR_URL");
        let e = payments_from(&evm_only, get(&[("UMPIRE_SETTLEMENT", "both")]))
            .await
            .expect_err("unknown mode");
        assert_eq!(e.name, "UMPIRE_SETTLEMENT");
        let with_solana = rails(&[
            (
                "UMPIRE_SOLANA_PAY_TO",
                "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
            ),
            (
                "UMPIRE_SOLANA_FEE_PAYER",
                "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
            ),
        ])
        .expect("rails");
        let e = payments_from(&with_solana, get(&[]))
            .await
            .expect_err("Solana needs a facilitator");
        assert_eq!(e.name, "UMPIRE_FACILITATOR_URL");
        let p = payments_from(
            &with_solana,
            get(&[("UMPIRE_FACILITATOR_URL", "https://facilitator.example")]),
        )
        .await
        .expect("facilitator settles Solana");
        assert!(p.can_settle(&with_solana.rails[0]));
        assert!(p.evm.is_none());
        // Native SOL is ours to verify and broadcast: it needs a Solana node.
        let with_sol = rails(&[
            (
                "UMPIRE_SOLANA_PAY_TO",
                "9WzDXwBbmkg8ZTbNMqUxvQRAyrZzDsGYdLVL9zYtAWWM",
            ),
            (
                "UMPIRE_SOLANA_FEE_PAYER",
                "2wKupLR9q6wXYppw8Gr2NvWxKBUqm4PPJKkQfoxHDBg4",
            ),
            ("UMPIRE_SOL_NATIVE", "on"),
        ])
        .expect("rails");
        assert_eq!(with_sol.rails[1].extra["transfer"], "system");
        assert!(
            with_sol.rails[1].extra.get("feePayer").is_none(),
            "the payer pays its own fee"
        );
        let e = payments_from(
            &with_sol,
            get(&[("UMPIRE_FACILITATOR_URL", "https://facilitator.example")]),
        )
        .await
        .expect_err("no Solana node");
        assert_eq!(e.name, "UMPIRE_SOLANA_RPC_URL");
        let p = payments_from(
            &with_sol,
            get(&[
                ("UMPIRE_FACILITATOR_URL", "https://facilitator.example"),
                ("UMPIRE_SOLANA_RPC_URL", "http://127.0.0.1:8899"),
            ]),
        )
        .await
        .expect("both Solana rails settle");
        assert!(with_sol.rails.iter().all(|r| p.can_settle(r)));
        assert!(p.native_sol.is_some());
    }
}
