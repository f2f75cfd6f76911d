//! Self-settlement of the EVM rail: our RPC and gas-paying key, the receipt wait, and
//! the caps on what one settlement may spend.

use std::time::Duration;

use super::{PayConfigError, block_time, chain_id_of, err, whole};
use crate::evm::EvmChain;
use crate::settle::SelfSettler;
use umpire_x402::rails::Rail;

/// Settles `rail` on our own RPC (`UMPIRE_EVM_RPC_URL`) with our key
/// (`UMPIRE_SETTLER_PRIVATE_KEY`); connects, checking the chain id.
pub(super) async fn self_settler(
    rail: &Rail,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<SelfSettler, PayConfigError> {
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
        get,
        "UMPIRE_SETTLEMENT_TIMEOUT_SECONDS",
        1..=600,
        30,
        "must be seconds from 1 to 600",
    )?;
    let chain_id = chain_id_of(rail)?;
    let block_time = block_time(get, chain_id)?;
    let preconfirmations = preconfirmations(get)?;
    let fee_cap = fee_cap(get)?;
    let gas_cap = whole(
        get,
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
    Ok(SelfSettler { chain })
}

/// Whether a purchase is answered on a flashblocks RPC's preconfirmed receipt
/// (`UMPIRE_EVM_PRECONFIRMATIONS`).
fn preconfirmations(get: &impl Fn(&str) -> Option<String>) -> Result<bool, PayConfigError> {
    match get("UMPIRE_EVM_PRECONFIRMATIONS").as_deref() {
        None | Some("off") => Ok(false),
        Some("on") => Ok(true),
        Some(_) => Err(err(
            "UMPIRE_EVM_PRECONFIRMATIONS",
            "must be on (answer on a flashblocks RPC's preconfirmed receipt) or off",
        )),
    }
}

/// The most a replaced settlement may offer per gas, in wei (`UMPIRE_EVM_MAX_FEE_GWEI`).
fn fee_cap(get: &impl Fn(&str) -> Option<String>) -> Result<u128, PayConfigError> {
    match get("UMPIRE_EVM_MAX_FEE_GWEI") {
        None => Ok(crate::evm::DEFAULT_FEE_CAP_WEI),
        Some(g) => gwei_to_wei(&g).ok_or_else(|| {
            err(
                "UMPIRE_EVM_MAX_FEE_GWEI",
                "must be a positive number of gwei, e.g. 1 or 0.05",
            )
        }),
    }
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

#[cfg(test)]
mod tests {
    use super::gwei_to_wei;

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
}
