//! Who verifies and settles each rail (`UMPIRE_SETTLEMENT`: ourselves or the
//! facilitator; native SOL always ourselves), checked to cover every rail offered; and
//! the SOL price source.

use std::sync::Arc;
use std::time::Duration;

use super::facilitator::facilitator_from;
use super::self_settle::self_settler;
use super::{PayConfigError, env, err, whole};
use crate::price::{DEFAULT_SOL_PRICE_URL, SolPriceFeed};
use crate::settle::{Payments, Settler};
use umpire_x402::rails::{RailPricing, Rails};

/// How this deployment verifies and settles, for the rails it accepts. Connects to the
/// RPC (checking its chain id) when self-settling.
pub async fn payments_from(
    rails: &Rails,
    get: impl Fn(&str) -> Option<String>,
) -> Result<Payments, PayConfigError> {
    let facilitator = facilitator_from(rails, &get).await?;
    let mode = get("UMPIRE_SETTLEMENT").unwrap_or_else(|| {
        if facilitator.is_some() {
            "facilitator"
        } else {
            "self"
        }
        .into()
    });
    let evm = evm_settler(&mode, rails, facilitator.is_some(), &get).await?;
    let native_sol = native_sol_settler(rails, &get)?;
    let payments = Payments {
        evm,
        native_sol,
        facilitator,
    };
    every_rail_settles(rails, &payments)?;
    Ok(payments)
}

pub async fn payments_from_env(rails: &Rails) -> Result<Payments, PayConfigError> {
    payments_from(rails, env).await
}

/// Who settles the EVM rail in settlement `mode`: ourselves (`Some`), or the
/// facilitator (`None`, and there must be one).
async fn evm_settler(
    mode: &str,
    rails: &Rails,
    has_facilitator: bool,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn Settler>>, PayConfigError> {
    match (mode, rails.rails.iter().find(|r| r.is_evm())) {
        // Facilitator mode with no rail to settle (a stack deployed before its payment
        // parameters): nothing to settle, so nothing is missing; purchases answer 503.
        ("facilitator", None) if rails.rails.is_empty() => Ok(None),
        ("facilitator", _) => {
            if !has_facilitator {
                return Err(err(
                    "UMPIRE_FACILITATOR_URL",
                    "UMPIRE_SETTLEMENT=facilitator needs the facilitator's URL",
                ));
            }
            Ok(None)
        }
        ("self", None) => Ok(None),
        ("self", Some(rail)) => Ok(Some(
            Arc::new(self_settler(rail, get).await?) as Arc<dyn Settler>
        )),
        (other, _) => Err(err(
            "UMPIRE_SETTLEMENT",
            format!("{other:?} is not a settlement mode (use self or facilitator)"),
        )),
    }
}

/// Our own verifier and broadcaster of native SOL, when it is accepted: no facilitator
/// speaks our extension, so it needs a Solana node (`UMPIRE_SOLANA_RPC_URL`).
fn native_sol_settler(
    rails: &Rails,
    get: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Arc<dyn Settler>>, PayConfigError> {
    if !rails.rails.iter().any(|r| r.is_native_sol()) {
        return Ok(None);
    }
    let url = get("UMPIRE_SOLANA_RPC_URL").ok_or_else(|| {
        err(
            "UMPIRE_SOLANA_RPC_URL",
            "native SOL (UMPIRE_SOL_NATIVE=on) is verified and settled on a Solana RPC node: set its URL",
        )
    })?;
    let rpc =
        crate::solana::SolanaRpc::new(&url).map_err(|e| err("UMPIRE_SOLANA_RPC_URL", e.message))?;
    let slot_time = Duration::from_millis(whole(
        get,
        "UMPIRE_SOLANA_SLOT_MS",
        0..=10_000,
        crate::solana::SLOT_MS,
        "must be milliseconds from 0 (slots at once) to 10000",
    )?);
    Ok(Some(
        Arc::new(crate::solana::NativeSolSettler { rpc, slot_time }) as Arc<dyn Settler>,
    ))
}

/// Refuses `payments` that leave a rail without anyone to verify and settle it.
fn every_rail_settles(rails: &Rails, payments: &Payments) -> Result<(), PayConfigError> {
    match rails.rails.iter().find(|r| !payments.can_settle(r)) {
        Some(rail) => Err(err(
            "UMPIRE_FACILITATOR_URL",
            format!(
                "the rail on {} needs a facilitator to verify and settle its payments",
                rail.network
            ),
        )),
        None => Ok(()),
    }
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
