//! One contract on one chain, as both the escrow evaluator and the ERC-8004 validator
//! use it: calls whose revert is the contract's answer (not the node's failure), logs
//! looked for back from the head in chunks, and transactions simulated first, sent
//! only when nothing of ours is pending, and waited for.

use std::time::Duration;

use alloy::network::{EthereumWallet, TransactionBuilder};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::{Filter, Log, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEvent};

use crate::{ContractRef, EscrowError};

/// One RPC call may take this long.
const RPC_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a transaction of ours may take to be mined.
const RECEIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// A transaction's gas limit is its estimate plus 1/this of it.
const GAS_HEADROOM_DIVISOR: u64 = 4;
/// Blocks per `eth_getLogs` call: the range most RPC providers allow.
pub(crate) const LOG_CHUNK_BLOCKS: u64 = 10_000;
/// How far back events are looked for: about 11 days of Base blocks.
pub const DEFAULT_LOOKBACK_BLOCKS: u64 = 500_000;

/// The `eth_getLogs` ranges (inclusive) covering the `lookback` blocks before `head`
/// and `head` itself, newest first, each at most [`LOG_CHUNK_BLOCKS`] long (what RPC
/// providers allow a call).
pub(crate) fn ranges_back(head: u64, lookback: u64) -> impl Iterator<Item = (u64, u64)> {
    let floor = head.saturating_sub(lookback);
    let mut next = Some(head);
    std::iter::from_fn(move || {
        let to = next?;
        let from = to.saturating_sub(LOG_CHUNK_BLOCKS - 1).max(floor);
        next = (from > floor).then(|| from - 1);
        Some((from, to))
    })
}

/// Whether an RPC error is the EVM's revert (JSON-RPC code 3, revert data, or a node's
/// "execution reverted" message), not a failure of the node itself.
fn is_revert(e: &alloy::transports::RpcError<alloy::transports::TransportErrorKind>) -> bool {
    e.as_error_resp().is_some_and(|r| {
        r.code == 3 || r.as_revert_data().is_some() || r.message.contains("revert")
    })
}

pub(crate) fn rpc(what: &'static str) -> impl Fn(String) -> EscrowError {
    move |message| EscrowError::Rpc { what, message }
}

/// The event `E` in `log` (one that does not decode is reported as the RPC's failure).
pub(crate) fn decode<E: SolEvent>(log: &Log) -> Result<E, EscrowError> {
    E::decode_log(&log.inner)
        .map(|e| e.data)
        .map_err(|e| rpc("decoding an event")(format!("{}: {e}", E::SIGNATURE)))
}

pub(crate) async fn timed<T, E: std::fmt::Display>(
    what: &'static str,
    f: impl std::future::IntoFuture<Output = Result<T, E>>,
) -> Result<T, EscrowError> {
    match tokio::time::timeout(RPC_TIMEOUT, f.into_future()).await {
        Ok(r) => r.map_err(|e| rpc(what)(e.to_string())),
        Err(_) => Err(rpc(what)(format!(
            "no answer within {} s",
            RPC_TIMEOUT.as_secs()
        ))),
    }
}

pub(crate) struct Contract {
    provider: DynProvider,
    address: Address,
    /// Whose key signs what is sent, when one was given.
    sender: Option<Address>,
}

impl Contract {
    /// Connects to `rpc_url`, checks that it serves `on`'s chain and that the address
    /// holds code (an address without any answers every call with nothing, which would
    /// read as "nothing there" for everything asked).
    pub(crate) async fn connect(
        rpc_url: &str,
        on: &ContractRef,
        key: Option<PrivateKeySigner>,
    ) -> Result<Contract, EscrowError> {
        let url: alloy::transports::http::reqwest::Url = rpc_url
            .parse()
            .map_err(|e| EscrowError::Config(format!("RPC URL {rpc_url:?}: {e}")))?;
        let (provider, sender) = match key {
            Some(signer) => {
                let address = signer.address();
                let p = ProviderBuilder::new()
                    .wallet(EthereumWallet::from(signer))
                    .connect_http(url)
                    .erased();
                (p, Some(address))
            }
            None => (ProviderBuilder::new().connect_http(url).erased(), None),
        };
        let served = timed("eth_chainId", provider.get_chain_id()).await?;
        if served != on.chain_id {
            return Err(EscrowError::Config(format!(
                "the RPC serves chain {served}, the contract is on chain {}",
                on.chain_id
            )));
        }
        let code = timed(
            "eth_getCode",
            provider.get_code_at(on.contract).into_future(),
        )
        .await?;
        if code.is_empty() {
            return Err(EscrowError::Config(format!(
                "no contract at {} on chain {}",
                on.contract, on.chain_id
            )));
        }
        Ok(Contract {
            provider,
            address: on.contract,
            sender,
        })
    }

    pub(crate) fn address(&self) -> Address {
        self.address
    }

    pub(crate) fn sender(&self) -> Option<Address> {
        self.sender
    }

    /// `eth_call` of `input` on the contract, from `from` when given: its raw answer. A
    /// revert is `Ok(Err(message))`: the contract's answer, not the RPC's failure.
    pub(crate) async fn call_raw(
        &self,
        what: &'static str,
        input: Vec<u8>,
        from: Option<Address>,
    ) -> Result<Result<Bytes, String>, EscrowError> {
        let mut tx = TransactionRequest::default()
            .with_to(self.address)
            .with_input(input);
        if let Some(from) = from {
            tx = tx.with_from(from);
        }
        match tokio::time::timeout(RPC_TIMEOUT, self.provider.call(tx)).await {
            Ok(Ok(out)) => Ok(Ok(out)),
            // A revert is the contract's answer; any other error answer (a rate limit,
            // a missing block) is the RPC's failure.
            Ok(Err(e)) if is_revert(&e) => Ok(Err(e.to_string())),
            Ok(Err(e)) => Err(rpc(what)(e.to_string())),
            Err(_) => Err(rpc(what)(format!(
                "no answer within {} s",
                RPC_TIMEOUT.as_secs()
            ))),
        }
    }

    /// [`Contract::call_raw`] of `call`, its answer decoded.
    pub(crate) async fn call<C: SolCall>(
        &self,
        what: &'static str,
        call: &C,
        from: Option<Address>,
    ) -> Result<Result<C::Return, String>, EscrowError> {
        match self.call_raw(what, call.abi_encode(), from).await? {
            Ok(out) => C::abi_decode_returns(&out)
                .map(Ok)
                .map_err(|e| rpc(what)(format!("undecodable answer: {e}"))),
            Err(revert) => Ok(Err(revert)),
        }
    }

    /// The latest block number.
    pub(crate) async fn head(&self) -> Result<u64, EscrowError> {
        timed("eth_blockNumber", self.provider.get_block_number()).await
    }

    /// The latest block's timestamp.
    pub(crate) async fn chain_time(&self) -> Result<u64, EscrowError> {
        let block = timed(
            "eth_getBlockByNumber",
            self.provider
                .get_block_by_number(alloy::eips::BlockNumberOrTag::Latest)
                .into_future(),
        )
        .await?
        .ok_or_else(|| rpc("eth_getBlockByNumber")("no latest block".into()))?;
        Ok(block.header.timestamp)
    }

    /// The balance of `who`, in wei.
    pub(crate) async fn balance(&self, who: Address) -> Result<U256, EscrowError> {
        timed(
            "eth_getBalance",
            self.provider.get_balance(who).into_future(),
        )
        .await
    }

    /// The contract's logs matching `filter` (its blocks set by the caller).
    pub(crate) async fn logs(&self, filter: Filter) -> Result<Vec<Log>, EscrowError> {
        let filter = filter.address(self.address);
        timed("eth_getLogs", self.provider.get_logs(&filter)).await
    }

    /// The contract's logs matching `filter` within the last `lookback` blocks, in
    /// chain order, looked for back from the head a chunk at a time; with `first_only`
    /// the scan stops at the newest chunk holding any.
    pub(crate) async fn logs_back(
        &self,
        filter: Filter,
        lookback: u64,
        first_only: bool,
    ) -> Result<Vec<Log>, EscrowError> {
        let head = self.head().await?;
        let mut chunks = Vec::new();
        for (from, to) in ranges_back(head, lookback) {
            let logs = self
                .logs(filter.clone().from_block(from).to_block(to))
                .await?;
            let found = !logs.is_empty();
            chunks.push(logs);
            if found && first_only {
                break;
            }
        }
        Ok(chunks.into_iter().rev().flatten().collect())
    }

    /// Sends `input` to the contract from the key's address, after a simulation (so a
    /// refusal is reported by the chain, not paid for in gas) and only when no
    /// transaction of ours is pending (sending another could act twice); waits for it
    /// to be mined successfully.
    pub(crate) async fn send(
        &self,
        what: &'static str,
        input: Vec<u8>,
    ) -> Result<B256, EscrowError> {
        let from = self
            .sender
            .ok_or_else(|| EscrowError::Config("no key to sign with".into()))?;
        if let Err(message) = self.call_raw(what, input.clone(), Some(from)).await? {
            return Err(EscrowError::Refused { what, message });
        }
        let pending = timed(
            "eth_getTransactionCount",
            self.provider.get_transaction_count(from).pending(),
        )
        .await?;
        let mined = timed(
            "eth_getTransactionCount",
            self.provider.get_transaction_count(from).latest(),
        )
        .await?;
        if pending > mined {
            return Err(EscrowError::Pending(from));
        }
        // The nonce is the chain's, every time: a provider's own count would move on
        // past a send the node refused, and every later transaction would wait behind
        // the gap, never mined.
        let tx = TransactionRequest::default()
            .with_from(from)
            .with_to(self.address)
            .with_nonce(mined)
            .with_input(input);
        // Headroom over the estimate: a limit cut to the gas the estimate's state needed
        // runs out when the block it lands in costs a little more (a slot written zero,
        // a cold read), and a transaction out of gas reverts, paid for.
        let estimate = timed("eth_estimateGas", self.provider.estimate_gas(tx.clone())).await?;
        let limit = estimate.saturating_add(estimate / GAS_HEADROOM_DIVISOR);
        let tx = tx.with_gas_limit(limit);
        let pending = timed(what, self.provider.send_transaction(tx)).await?;
        let hash = *pending.tx_hash();
        let receipt = tokio::time::timeout(RECEIPT_TIMEOUT, self.receipt(hash))
            .await
            .map_err(|_| {
                rpc(what)(format!(
                    "transaction {hash} was not mined within {} s; run again to see whether it landed",
                    RECEIPT_TIMEOUT.as_secs()
                ))
            })?;
        if !receipt.status() {
            // Its simulation passed a moment ago: the chain moved between the two (or
            // the gas ran out). Trying again simulates again: a refusal is then the
            // contract's, by name, and a state already reached is seen and not re-sent.
            return Err(EscrowError::Reverted {
                what,
                transaction: hash,
                gas_used: receipt.gas_used,
                gas_limit: limit,
            });
        }
        Ok(hash)
    }

    /// Polls for a receipt, quickly at first (a local chain mines at once), then at
    /// most every second; the caller bounds the wait.
    async fn receipt(&self, hash: B256) -> alloy::rpc::types::TransactionReceipt {
        let mut pause = Duration::from_millis(20);
        loop {
            if let Ok(Some(receipt)) = self.provider.get_transaction_receipt(hash).await {
                return receipt;
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }
}

#[cfg(test)]
mod range_tests {
    use super::*;

    /// docs/erc8183.md: events are looked for `--lookback-blocks` back (500,000 by
    /// default) in `eth_getLogs` ranges of at most 10,000 blocks, newest first, with no
    /// block missed or asked twice. Would catch: a range a provider refuses (over
    /// 10,000), a gap where an event hides, or a lookback cut short.
    #[test]
    fn logs_are_asked_for_in_ranges_of_ten_thousand_back_to_the_lookback() {
        assert_eq!(
            (DEFAULT_LOOKBACK_BLOCKS, LOG_CHUNK_BLOCKS),
            (500_000, 10_000)
        );
        let head = 1_234_567;
        let ranges: Vec<(u64, u64)> = ranges_back(head, DEFAULT_LOOKBACK_BLOCKS).collect();
        assert_eq!(ranges[0].1, head, "from the head");
        assert_eq!(
            ranges.last().map(|r| r.0),
            Some(head - DEFAULT_LOOKBACK_BLOCKS)
        );
        for pair in ranges.windows(2) {
            assert_eq!(pair[1].1 + 1, pair[0].0, "contiguous: {pair:?}");
        }
        assert!(
            ranges
                .iter()
                .all(|(f, t)| f <= t && t - f < LOG_CHUNK_BLOCKS)
        );
        assert_eq!(ranges.len(), 51, "500,001 blocks in ranges of 10,000");
        // Near genesis: down to block 0, once.
        assert_eq!(ranges_back(5, 500_000).collect::<Vec<_>>(), vec![(0, 5)]);
        assert_eq!(ranges_back(0, 0).collect::<Vec<_>>(), vec![(0, 0)]);
    }
}
