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
        if fees.max_fee_per_gas >= base.saturating_add(fees.max_priority_fee_per_gas)
            && fees.max_priority_fee_per_gas >= tip
        {
            return None;
        }
        let bump = |x: u128| (x.saturating_mul(BUMP_EIGHTHS)).div_ceil(8).max(x + 1);
        let tip = bump(fees.max_priority_fee_per_gas).max(tip);
        let wanted = bump(fees.max_fee_per_gas).max(base.saturating_mul(2).saturating_add(tip));
        let max_fee = wanted.min(self.fee_cap);
        if max_fee < bump(fees.max_fee_per_gas) {
            tracing::error!(
                nonce,
                hash = %current.hash,
                base_fee = base,
                cap = self.fee_cap,
                "a settlement priced out of the chain cannot be replaced within the fee cap (UMPIRE_EVM_MAX_FEE_GWEI); it waits for fees to fall"
            );
            return None;
        }
        let bumped = Fees {
            max_fee_per_gas: max_fee,
            max_priority_fee_per_gas: tip.min(max_fee),
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
