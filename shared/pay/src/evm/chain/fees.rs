//! What a settlement pays for gas: the gas limit (fixed for EOA signatures, estimated
//! and capped for smart wallets), fees cached for a block, and the higher fee that
//! replaces a settlement the chain has left behind.
use std::time::{Duration, Instant};

use alloy::eips::BlockNumberOrTag;
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, Bytes};
use alloy::providers::Provider;
use alloy::rpc::types::TransactionRequest;

use umpire_x402::evm::{Eip3009Payment, invalid};
use umpire_x402::reason::{FailureReason, PaymentFailure};

use super::{
    BUMP_EIGHTHS, Broadcast, EvmChain, Fees, MIN_PRIORITY_FEE, SEND_CALL_TIMEOUT, SendState,
    Settler, TRANSFER_GAS_LIMIT, rpc_error,
};

impl EvmChain {
    /// The gas limit: fixed for an EOA signature, estimated for a smart wallet's.
    pub(super) async fn gas_limit(
        &self,
        settler: &Settler,
        token: Address,
        payment: &Eip3009Payment,
        input: &Bytes,
    ) -> Result<u64, PaymentFailure> {
        if payment.is_eoa_signature() {
            return Ok(TRANSFER_GAS_LIMIT);
        }
        self.smart_wallet_gas(settler.address, token, input).await
    }

    /// The gas limit of a smart-wallet settlement: the estimate and a quarter, refused
    /// past the cap (its wallet's check is paid by us).
    pub(super) async fn smart_wallet_gas(
        &self,
        from: Address,
        token: Address,
        input: &Bytes,
    ) -> Result<u64, PaymentFailure> {
        let tx = TransactionRequest::default()
            .with_from(from)
            .with_to(token)
            .with_input(input.clone());
        let gas = self
            .provider
            .estimate_gas(tx)
            .await
            .map_err(|e| rpc_error("eth_estimateGas", e))?
            .saturating_mul(5)
            / 4;
        if gas > self.gas_cap {
            return Err(invalid(
                FailureReason::EvmGasCap,
                format!(
                    "settling this wallet's payment needs {gas} gas (its signature check), more than the {} we pay for one settlement",
                    self.gas_cap
                ),
            ));
        }
        Ok(gas)
    }

    /// Fees for the next block: read once a block (a fee history of one block: the
    /// next base fee and what the last block's transactions tipped), then reused.
    pub(super) async fn fees(&self, state: &mut SendState) -> Result<Fees, PaymentFailure> {
        let fresh_for = self.block_time.max(Duration::from_millis(500));
        if let Some(f) = state.fees.filter(|f| f.read_at.elapsed() < fresh_for) {
            return Ok(f);
        }
        let (base, tip) = self.next_fees().await?;
        // Twice the next base fee: room for six full blocks of rises.
        let fees = Fees {
            max_fee_per_gas: base.saturating_mul(2).saturating_add(tip),
            max_priority_fee_per_gas: tip,
            read_at: Instant::now(),
        };
        state.fees = Some(fees);
        Ok(fees)
    }

    /// The fees the next block takes: its base fee, and what the last block tipped.
    pub(super) async fn next_fees(&self) -> Result<(u128, u128), PaymentFailure> {
        let history = tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider
                .get_fee_history(1, BlockNumberOrTag::Latest, &[50.0]),
        )
        .await
        .map_err(|_| rpc_error("eth_feeHistory", "no answer in time"))?
        .map_err(|e| rpc_error("eth_feeHistory", e))?;
        let base = history.base_fee_per_gas.last().copied().unwrap_or_default();
        let tip = history
            .reward
            .as_ref()
            .and_then(|r| r.first())
            .and_then(|r| r.first())
            .copied()
            .unwrap_or_default()
            .max(MIN_PRIORITY_FEE);
        Ok((base, tip))
    }

    /// Replaces the settlement this process sent for authorization `id` at `nonce`
    /// when the next block would not take it (its fee cap below the base fee, or its tip
    /// below what blocks tip now): the same call at the same nonce, never another
    /// nonce, with fees at least 12.5% higher and what the chain asks now, up to the
    /// fee cap. The replacement is remembered in its place (a resend sends it); the
    /// one it replaces can still be mined instead, which the token's logs show as the
    /// same payment. `None` when nothing was replaced.
    pub(super) async fn replace_if_underpriced(&self, id: &str, nonce: u64) -> Option<Broadcast> {
        let settler = self.settler.as_ref()?;
        let current = settler.remembered(id).filter(|b| b.nonce == nonce)?;
        let (base, tip) = self.next_fees().await.ok()?;
        let fees = current.fees;
        let (max_fee, tip) = match replacement_fees(
            (fees.max_fee_per_gas, fees.max_priority_fee_per_gas),
            base,
            tip,
            self.fee_cap,
        ) {
            Replacement::NotNeeded => return None,
            Replacement::OverTheCap => {
                tracing::error!(
                    nonce,
                    hash = %current.hash,
                    base_fee = base,
                    cap = self.fee_cap,
                    "a settlement priced out of the chain cannot be replaced within the fee cap (UMPIRE_EVM_MAX_FEE_GWEI); it waits for fees to fall"
                );
                return None;
            }
            Replacement::At { max_fee, tip } => (max_fee, tip),
        };
        let bumped = Fees {
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip,
            read_at: Instant::now(),
        };
        let replacement = self
            .sign(
                settler,
                current.to,
                &current.input,
                nonce,
                current.gas_limit,
                bumped,
            )
            .ok()?;
        match tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&replacement.raw)).await {
            Ok(Ok(())) => {
                tracing::warn!(
                    nonce,
                    old = %current.hash,
                    new = %replacement.hash,
                    max_fee_per_gas = max_fee,
                    base_fee = base,
                    "replaced a settlement the chain would not take at its fees"
                );
                settler.remember(id, &replacement);
                Some(replacement)
            }
            // Mined meanwhile ("nonce too low"), or another replacement got there:
            // the receipt or the logs tell.
            Ok(Err(e)) => {
                tracing::info!(nonce, error = %e, "a replacement was not taken");
                None
            }
            Err(_) => None,
        }
    }
}

/// What to do with a settlement whose fees are `(max_fee, tip)` when the next block
/// asks `base` and blocks tip `tip_now`, under the operator's `cap` (wei per gas).
#[derive(Debug, PartialEq, Eq)]
enum Replacement {
    /// The next block takes it as it is.
    NotNeeded,
    /// A replacement would have to pay more than the cap: it waits for fees to fall.
    OverTheCap,
    /// Replace it at these fees: each at least 12.5% above the old (nodes refuse less
    /// than 10%) and what the chain asks now, the fee cap within `cap`.
    At { max_fee: u128, tip: u128 },
}

fn replacement_fees(
    (max_fee, tip): (u128, u128),
    base: u128,
    tip_now: u128,
    cap: u128,
) -> Replacement {
    if max_fee >= base.saturating_add(tip) && tip >= tip_now {
        return Replacement::NotNeeded;
    }
    let bump = |x: u128| (x.saturating_mul(BUMP_EIGHTHS)).div_ceil(8).max(x + 1);
    let new_tip = bump(tip).max(tip_now);
    let wanted = bump(max_fee).max(base.saturating_mul(2).saturating_add(new_tip));
    let new_max = wanted.min(cap);
    if new_max < bump(max_fee) {
        return Replacement::OverTheCap;
    }
    Replacement::At {
        max_fee: new_max,
        tip: new_tip.min(new_max),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GWEI: u128 = 1_000_000_000;

    /// docs/paying.md: a replacement's fees are each at least 12.5% higher than the
    /// settlement's and what the chain asks now; past the fee cap (1 gwei by default)
    /// there is no replacement (the settlement waits, pending); a settlement the next
    /// block takes is left alone. Would catch: a bump nodes refuse (under 10%), a
    /// replacement past the operator's cap, or replacing what needs no replacing.
    #[test]
    fn a_replacement_pays_an_eighth_more_within_the_cap() {
        assert_eq!(super::super::DEFAULT_FEE_CAP_WEI, GWEI);
        let cap = GWEI;
        // Base 0.01 gwei, tip 0.001 gwei: fine as it is.
        let (max_fee, tip) = (30_000_000, 1_000_000);
        assert_eq!(
            replacement_fees((max_fee, tip), 10_000_000, 1_000_000, cap),
            Replacement::NotNeeded
        );
        // The base fee tripled: replaced, each fee at least 9/8 of the old.
        let Replacement::At { max_fee: m, tip: t } =
            replacement_fees((max_fee, tip), 30_000_000, 1_000_000, cap)
        else {
            panic!("replaced");
        };
        assert!(m * 8 >= max_fee * 9 && t * 8 >= tip * 9, "{m} {t}");
        assert!(m >= 2 * 30_000_000 + t, "what the chain asks now: {m}");
        assert!(m <= cap && t <= m);
        // Tips rose: the tip follows the chain's.
        let Replacement::At { tip: t, .. } =
            replacement_fees((max_fee, tip), 10_000_000, 5_000_000, cap)
        else {
            panic!("replaced");
        };
        assert!(t >= 5_000_000);
        // A forty-fold spike under a low cap: no replacement, it waits.
        assert_eq!(
            replacement_fees((max_fee, tip), 400_000_000, 1_000_000, 32_000_000),
            Replacement::OverTheCap
        );
        // Near the cap: the cap holds (the bump still fits under it).
        let Replacement::At { max_fee: m, .. } =
            replacement_fees((max_fee, tip), 400_000_000, 1_000_000, 40_000_000)
        else {
            panic!("replaced within the cap");
        };
        assert_eq!(m, 40_000_000);
    }
}
