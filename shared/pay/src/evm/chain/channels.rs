//! A batch-settlement channel as the contract holds it: three reads in one JSON-RPC
//! batch, all at one block (the latest when asked), so a withdrawal finalized between
//! them cannot show a balance it took away beside no withdrawal.

use alloy::eips::BlockNumberOrTag;
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, B256, Bytes};
use alloy::providers::Provider;
use alloy::rpc::client::BatchRequest;
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;

use umpire_x402::batch::{IBatchSettlement, OnChainChannel};
use umpire_x402::reason::PaymentFailure;

use super::{EvmChain, rpc_error};

impl EvmChain {
    /// The channel `channel` of the contract at `contract`: balance, claimed, a pending
    /// withdrawal, the refund nonce. A channel nobody deposited into reads as zeros.
    pub async fn batch_channel(
        &self,
        contract: Address,
        channel: B256,
    ) -> Result<OnChainChannel, PaymentFailure> {
        let inputs: [Bytes; 3] = [
            IBatchSettlement::channelsCall { channelId: channel }
                .abi_encode()
                .into(),
            IBatchSettlement::pendingWithdrawalsCall { channelId: channel }
                .abi_encode()
                .into(),
            IBatchSettlement::refundNonceCall { channelId: channel }
                .abi_encode()
                .into(),
        ];
        let block = self
            .provider
            .get_block_number()
            .await
            .map_err(|e| rpc_error("eth_blockNumber", e))?;
        let mut batch = BatchRequest::new(self.provider.client());
        let [a, b, c] = inputs.map(|input| {
            let tx = TransactionRequest::default()
                .with_to(contract)
                .with_input(input);
            batch.add_call::<_, Bytes>("eth_call", &(tx, BlockNumberOrTag::Number(block)))
        });
        let err = |e| rpc_error("eth_call", e);
        let (a, b, c) = (a.map_err(err)?, b.map_err(err)?, c.map_err(err)?);
        batch.send().await.map_err(err)?;
        let (a, b, c) = (
            a.await.map_err(err)?,
            b.await.map_err(err)?,
            c.await.map_err(err)?,
        );
        let bad = |what: &str, e: alloy::sol_types::Error| {
            PaymentFailure::unavailable(format!(
                "the channel contract's {what} does not decode: {e}"
            ))
        };
        let ch = IBatchSettlement::channelsCall::abi_decode_returns(&a)
            .map_err(|e| bad("channels", e))?;
        let w = IBatchSettlement::pendingWithdrawalsCall::abi_decode_returns(&b)
            .map_err(|e| bad("pendingWithdrawals", e))?;
        let nonce = IBatchSettlement::refundNonceCall::abi_decode_returns(&c)
            .map_err(|e| bad("refundNonce", e))?;
        Ok(OnChainChannel {
            balance: ch.balance,
            total_claimed: ch.totalClaimed,
            withdraw_initiated_at: u64::try_from(w.initiatedAt).unwrap_or(u64::MAX),
            withdraw_amount: w.amount,
            refund_nonce: nonce,
        })
    }
}
