//! What only the chain knows about a payment before we settle it: the transfer
//! simulated from the settler, and when it would revert, why (the authorization's
//! state, the payer's balance, who spent it and whether its transfer paid us).
use std::time::Instant;

use alloy::consensus::Transaction as _;
use alloy::eips::BlockNumberOrTag;
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, B256, Bytes};
use alloy::providers::Provider;
use alloy::rpc::client::BatchRequest;
use alloy::rpc::types::{Filter, Log, TransactionRequest};
use alloy::sol_types::{SolCall, SolEvent};

use umpire_x402::evm::{
    Eip3009Payment, IEip3009, SETTLEMENT_LOOKBACK_BLOCKS, credits_transfer_at, invalid,
};
use umpire_x402::reason::{FailureReason, PaymentFailure};

use super::watch::settlement_in;
use super::{EvmChain, OnChain, SpentBy, rpc_error, unseen, used_otherwise};

impl EvmChain {
    pub async fn authorization_used(
        &self,
        token: Address,
        authorizer: Address,
        nonce: B256,
    ) -> Result<bool, PaymentFailure> {
        let call = IEip3009::authorizationStateCall { authorizer, nonce };
        let out = self.call(token, call.abi_encode().into()).await?;
        IEip3009::authorizationStateCall::abi_decode_returns(&out)
            .map_err(|e| rpc_error("decoding authorizationState", e))
    }

    /// Whether transaction `hash` is mined and reverted (`Some(true)`), mined and
    /// succeeded (`Some(false)`), or not mined (`None`), as its receipt says.
    pub async fn reverted(&self, hash: B256) -> Result<Option<bool>, PaymentFailure> {
        let receipt = self
            .provider
            .get_transaction_receipt(hash)
            .await
            .map_err(|e| rpc_error("eth_getTransactionReceipt", e))?;
        Ok(receipt.map(|r| !r.status()))
    }

    /// An `eth_call` against the latest block: what is mined, never the pool (alloy's
    /// default, `pending`, would count our own unconfirmed broadcast as done, or a
    /// stranger's as spent, before the chain does).
    pub(super) async fn call(&self, to: Address, input: Bytes) -> Result<Bytes, PaymentFailure> {
        let tx = TransactionRequest::default().with_to(to).with_input(input);
        self.provider
            .call(tx)
            .block(BlockNumberOrTag::Latest.into())
            .await
            .map_err(|e| rpc_error("eth_call", e))
    }

    /// Whether the transfer would go through now (one `eth_call`, from the settler when
    /// there is one), or, when the authorization was already executed as a transfer to
    /// `pay_to`, by which transaction. Anything else is the refusal, named as precisely
    /// as the chain allows.
    pub async fn check_onchain(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<OnChain, PaymentFailure> {
        if let Some(until) = self.cooling_off_until(payment.payer()) {
            return Err(invalid(
                FailureReason::EvmPayerCoolingOff,
                format!(
                    "the last payment from this wallet that we settled reverted on chain (its funds moved, its authorization canceled, or its wallet's check failed), and we paid the gas: payments from it are refused for {} more seconds",
                    until
                        .saturating_duration_since(Instant::now())
                        .as_secs()
                        .max(1)
                ),
            ));
        }
        let mut tx = TransactionRequest::default()
            .with_to(token)
            .with_input(payment.transfer_calldata()?);
        if let Some(settler) = self.settler() {
            tx = tx.with_from(settler);
        }
        match self
            .provider
            .call(tx)
            .block(BlockNumberOrTag::Latest.into())
            .await
        {
            Ok(_) if payment.is_eoa_signature() => Ok(OnChain::Unspent),
            // A smart wallet's signature check runs on our gas: one that needs more
            // than we pay for a settlement is refused before any work.
            Ok(_) => match self.settler() {
                Some(from) => self
                    .smart_wallet_gas(from, token, &payment.transfer_calldata()?)
                    .await
                    .map(|_| OnChain::Unspent),
                None => Ok(OnChain::Unspent),
            },
            // A revert is the payment's fault; anything else (a rate limit, a node
            // behind, an internal error) is the RPC's.
            Err(e)
                if e.as_error_resp().is_some_and(|r| {
                    r.code == 3 || r.message.to_ascii_lowercase().contains("revert")
                }) =>
            {
                self.why_not(token, payment, pay_to, &e.to_string())
                    .await
                    .map(OnChain::PaidUs)
            }
            Err(e) => Err(rpc_error("simulating the transfer", e)),
        }
    }

    /// Why the transfer would not (or did not) go through: the authorization's state and
    /// the payer's balance, read together. A used authorization whose transfer paid us
    /// is the payment made (`Ok`, its transaction); used otherwise, it is spent (or
    /// canceled) for good; unused and funded, `revert` is the reason (`EvmSimulation`).
    pub(super) async fn why_not(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        revert: &str,
    ) -> Result<B256, PaymentFailure> {
        let a = &payment.authorization;
        let state = IEip3009::authorizationStateCall {
            authorizer: a.from,
            nonce: a.nonce,
        };
        let balance = IEip3009::balanceOfCall { account: a.from };
        let (used, held) = self
            .batch_calls(
                token,
                [state.abi_encode().into(), balance.abi_encode().into()],
            )
            .await?;
        let used = IEip3009::authorizationStateCall::abi_decode_returns(&used)
            .map_err(|e| rpc_error("decoding authorizationState", e))?;
        let held = IEip3009::balanceOfCall::abi_decode_returns(&held)
            .map_err(|e| rpc_error("decoding balanceOf", e))?;
        if used {
            return match self.spent_by(token, payment, pay_to).await? {
                SpentBy::Us(tx) => Ok(tx),
                SpentBy::Otherwise => Err(used_otherwise()),
                SpentBy::Unseen => Err(unseen()),
            };
        }
        if held < a.value {
            return Err(invalid(
                FailureReason::InsufficientFunds,
                format!(
                    "{} holds {held} base units, the payment needs {}",
                    a.from, a.value
                ),
            ));
        }
        Err(invalid(
            FailureReason::EvmSimulation,
            format!("the transfer would revert: {revert}"),
        ))
    }

    /// Two `eth_call`s to `to` in one JSON-RPC batch: one round trip.
    pub(super) async fn batch_calls(
        &self,
        to: Address,
        inputs: [Bytes; 2],
    ) -> Result<(Bytes, Bytes), PaymentFailure> {
        let mut batch = BatchRequest::new(self.provider.client());
        let [a, b] = inputs.map(|input| {
            let tx = TransactionRequest::default().with_to(to).with_input(input);
            batch.add_call::<_, Bytes>("eth_call", &(tx, BlockNumberOrTag::Latest))
        });
        let (a, b) = (
            a.map_err(|e| rpc_error("eth_call", e))?,
            b.map_err(|e| rpc_error("eth_call", e))?,
        );
        batch.send().await.map_err(|e| rpc_error("eth_call", e))?;
        Ok((
            a.await.map_err(|e| rpc_error("eth_call", e))?,
            b.await.map_err(|e| rpc_error("eth_call", e))?,
        ))
    }

    /// What spent this (used) authorization, from the token's logs alone, one call for
    /// the three events that can: `AuthorizationUsed(from, nonce)` with a `Transfer(from,
    /// pay_to, value)` in the same transaction (paid us, whoever sent it; no receipt
    /// needed, a reverted transaction leaves no logs), `AuthorizationCanceled(from,
    /// nonce)`, or `AuthorizationUsed` in a transaction that paid us nothing. A payment
    /// whose signature is not an EOA's (a smart wallet's) counts as ours only if the
    /// transaction that moved it carried that very signature: the offline check could
    /// not tie the presented header to its payer.
    pub async fn spent_by(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<SpentBy, PaymentFailure> {
        let a = &payment.authorization;
        let latest = self
            .provider
            .get_block_number()
            .await
            .map_err(|e| rpc_error("eth_blockNumber", e))?;
        let filter = Filter::new()
            .address(token)
            .event_signature(vec![
                IEip3009::AuthorizationUsed::SIGNATURE_HASH,
                IEip3009::AuthorizationCanceled::SIGNATURE_HASH,
                IEip3009::Transfer::SIGNATURE_HASH,
            ])
            .topic1(a.from.into_word())
            .topic2(vec![a.nonce, pay_to.into_word()])
            // The lookback counts the latest block: providers cap a range's length.
            .from_block(latest.saturating_sub(SETTLEMENT_LOOKBACK_BLOCKS - 1))
            .to_block(latest);
        let logs = self
            .provider
            .get_logs(&filter)
            .await
            .map_err(|e| rpc_error("eth_getLogs", e))?;
        if let Some(tx) = settlement_in(&logs, token, payment, pay_to) {
            if !self.recent_enough(&logs, tx).await? {
                // It paid us longer ago than the ledger remembers what it bought:
                // neither credited (it may have bought already) nor refused.
                tracing::warn!(transaction = %tx, "a transfer to us older than the ledger's memory is not credited");
                return Ok(SpentBy::Unseen);
            }
            if payment.is_eoa_signature() || self.carries_signature(tx, payment).await? {
                return Ok(SpentBy::Us(tx));
            }
            return Ok(SpentBy::Otherwise);
        }
        let spent = logs
            .iter()
            .filter(|l| l.address() == token && !l.removed)
            .any(|l| {
                let by =
                    |authorizer: Address, nonce: B256| authorizer == a.from && nonce == a.nonce;
                l.log_decode::<IEip3009::AuthorizationCanceled>()
                    .is_ok_and(|c| by(c.inner.data.authorizer, c.inner.data.nonce))
                    || l.log_decode::<IEip3009::AuthorizationUsed>()
                        .is_ok_and(|u| by(u.inner.data.authorizer, u.inner.data.nonce))
            });
        Ok(if spent {
            SpentBy::Otherwise
        } else {
            SpentBy::Unseen
        })
    }

    /// Whether the transfer in `tx` (one of `logs`) is young enough to credit
    /// ([`credits_transfer_at`]): by the log's block timestamp, or its block's when the
    /// node leaves it out. A log not in a block yet is as young as they come.
    async fn recent_enough(&self, logs: &[Log], tx: B256) -> Result<bool, PaymentFailure> {
        let Some(log) = logs.iter().find(|l| l.transaction_hash == Some(tx)) else {
            return Ok(true);
        };
        let stamped = match (log.block_timestamp, log.block_number) {
            (Some(at), _) => at,
            (None, Some(number)) => match self
                .provider
                .get_block_by_number(number.into())
                .await
                .map_err(|e| rpc_error("eth_getBlockByNumber", e))?
            {
                Some(block) => block.header.timestamp,
                None => return Ok(true),
            },
            (None, None) => return Ok(true),
        };
        Ok(credits_transfer_at(
            stamped,
            umpire_host::Clock::system().now(),
        ))
    }

    /// Whether transaction `tx` carried this payment's signature bytes.
    pub(super) async fn carries_signature(
        &self,
        tx: B256,
        payment: &Eip3009Payment,
    ) -> Result<bool, PaymentFailure> {
        let found = self
            .provider
            .get_transaction_by_hash(tx)
            .await
            .map_err(|e| rpc_error("eth_getTransactionByHash", e))?;
        let input = found.map(|t| t.inner.input().clone()).unwrap_or_default();
        let sig = payment.signature.as_ref();
        Ok(!sig.is_empty() && input.windows(sig.len()).any(|w| w == sig))
    }
}
