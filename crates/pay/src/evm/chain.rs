//! What only the chain knows about an EIP-3009 payment: the nonce's state, the balance, a
//! simulation of the transfer; and settling it ourselves (submit, receipt).

use std::time::Duration;

use alloy::network::{EthereumWallet, TransactionBuilder};
use alloy::primitives::{Address, B256, U256};
use alloy::providers::{DynProvider, Provider, ProviderBuilder};
use alloy::rpc::types::{Filter, TransactionRequest};
use alloy::signers::local::PrivateKeySigner;
use alloy::sol_types::{SolCall, SolEvent};

use crate::evm::{Eip3009Payment, IEip3009, SETTLEMENT_LOOKBACK_BLOCKS, invalid};
use crate::reason::{FailureReason, PaymentFailure};

/// A chain reached over JSON-RPC, with an optional settler key for self-settlement.
#[derive(Clone)]
pub struct EvmChain {
    provider: DynProvider,
    settler: Option<Address>,
    chain_id: u64,
    receipt_timeout: Duration,
    /// The settler's next transaction nonce, kept here rather than by alloy's filler
    /// so it can be re-read from the chain when it goes wrong (a crash left a gap,
    /// another process used the key, a broadcast's answer was lost).
    next_nonce: std::sync::Arc<tokio::sync::Mutex<Option<u64>>>,
}

/// Nonce trouble the settler recovers from by re-reading its nonce and sending again.
pub(super) fn is_nonce_error(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "nonce too low",
        "nonce too high",
        "already known",
        "replacement transaction underpriced",
    ]
    .iter()
    .any(|needle| m.contains(needle))
}

/// How many times a settlement is re-sent after nonce trouble.
pub(super) const NONCE_ATTEMPTS: u32 = 3;

impl std::fmt::Debug for EvmChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmChain")
            .field("chain_id", &self.chain_id)
            .field("settler", &self.settler)
            .finish_non_exhaustive()
    }
}

pub(super) fn rpc_error(what: &str, e: impl std::fmt::Display) -> PaymentFailure {
    PaymentFailure::unavailable(format!("{what}: {e}"))
}

impl EvmChain {
    /// Connects and checks that the RPC serves `chain_id`, so a misconfigured RPC
    /// fails at start instead of rejecting every payment.
    pub async fn connect(
        rpc_url: &str,
        chain_id: u64,
        settler_key: Option<&str>,
        receipt_timeout: Duration,
    ) -> Result<EvmChain, PaymentFailure> {
        let url: reqwest::Url = rpc_url
            .parse()
            .map_err(|e| PaymentFailure::config(format!("RPC URL {rpc_url:?}: {e}")))?;
        let (provider, settler) = match settler_key {
            Some(key) => {
                let signer: PrivateKeySigner = key.trim().parse().map_err(|_| {
                    PaymentFailure::config("the settler key must be 32 bytes of hex")
                })?;
                let settler = signer.address();
                let p = ProviderBuilder::new()
                    .wallet(EthereumWallet::from(signer))
                    .connect_http(url)
                    .erased();
                (p, Some(settler))
            }
            None => (ProviderBuilder::new().connect_http(url).erased(), None),
        };
        let served = provider
            .get_chain_id()
            .await
            .map_err(|e| rpc_error("eth_chainId", e))?;
        if served != chain_id {
            return Err(PaymentFailure::config(format!(
                "the RPC serves chain {served}, the rail is on chain {chain_id}"
            )));
        }
        Ok(EvmChain {
            provider,
            settler,
            chain_id,
            receipt_timeout,
            next_nonce: Default::default(),
        })
    }

    pub fn chain_id(&self) -> u64 {
        self.chain_id
    }

    pub fn settler(&self) -> Option<Address> {
        self.settler
    }

    async fn read<C: SolCall>(&self, token: Address, call: C) -> Result<C::Return, PaymentFailure> {
        let tx = TransactionRequest::default()
            .with_to(token)
            .with_input(call.abi_encode());
        let out = self
            .provider
            .call(tx)
            .await
            .map_err(|e| rpc_error("eth_call", e))?;
        C::abi_decode_returns(&out).map_err(|e| rpc_error("decoding eth_call", e))
    }

    pub async fn authorization_used(
        &self,
        token: Address,
        authorizer: Address,
        nonce: B256,
    ) -> Result<bool, PaymentFailure> {
        self.read(
            token,
            IEip3009::authorizationStateCall { authorizer, nonce },
        )
        .await
    }

    pub async fn balance_of(
        &self,
        token: Address,
        account: Address,
    ) -> Result<U256, PaymentFailure> {
        self.read(token, IEip3009::balanceOfCall { account }).await
    }

    /// Chain-side checks: nonce unused, balance, and a simulation of the settlement
    /// transaction (from the settler when there is one).
    pub async fn check_onchain(
        &self,
        token: Address,
        payment: &Eip3009Payment,
    ) -> Result<(), PaymentFailure> {
        let a = &payment.authorization;
        if self.authorization_used(token, a.from, a.nonce).await? {
            return Err(invalid(
                FailureReason::EvmNonceUsed,
                "this authorization's nonce was already used or canceled: the payment was spent",
            ));
        }
        let balance = self.balance_of(token, a.from).await?;
        if balance < a.value {
            return Err(invalid(
                FailureReason::InsufficientFunds,
                format!(
                    "{} holds {balance} base units, the payment needs {}",
                    a.from, a.value
                ),
            ));
        }
        let mut tx = TransactionRequest::default()
            .with_to(token)
            .with_input(payment.transfer_calldata()?);
        if let Some(settler) = self.settler {
            tx = tx.with_from(settler);
        }
        if let Err(e) = self.provider.call(tx).await {
            let text = e.to_string();
            // A revert is the payment's fault; anything else is the RPC's.
            return Err(if e.as_error_resp().is_some() {
                invalid(
                    FailureReason::EvmSimulation,
                    format!("the transfer would revert: {text}"),
                )
            } else {
                rpc_error("simulating the transfer", text)
            });
        }
        Ok(())
    }

    /// The settler's nonce for the next transaction: the chain's pending count the
    /// first time (and after [`EvmChain::forget_nonce`]), then counted here.
    async fn take_nonce(&self, settler: Address) -> Result<u64, PaymentFailure> {
        let mut next = self.next_nonce.lock().await;
        let nonce = match *next {
            Some(n) => n,
            None => self
                .provider
                .get_transaction_count(settler)
                .pending()
                .await
                .map_err(|e| rpc_error("eth_getTransactionCount", e))?,
        };
        *next = Some(nonce + 1);
        Ok(nonce)
    }

    async fn forget_nonce(&self) {
        *self.next_nonce.lock().await = None;
    }

    /// The transaction that executed this very authorization as a transfer to `pay_to`,
    /// if one did: `None` while its nonce is unused. A nonce used by something else (a
    /// cancellation, or another authorization with the same nonce) is an `invalid`
    /// failure: the payment cannot be ours any more. For a purchase whose settlement
    /// outcome was lost (a crash between broadcast and record).
    pub async fn find_settlement(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<Option<B256>, PaymentFailure> {
        let a = &payment.authorization;
        if !self.authorization_used(token, a.from, a.nonce).await? {
            return Ok(None);
        }
        let latest = self
            .provider
            .get_block_number()
            .await
            .map_err(|e| rpc_error("eth_blockNumber", e))?;
        let filter = Filter::new()
            .address(token)
            .event_signature(IEip3009::AuthorizationUsed::SIGNATURE_HASH)
            .topic1(a.from.into_word())
            .topic2(a.nonce)
            .from_block(latest.saturating_sub(SETTLEMENT_LOOKBACK_BLOCKS))
            .to_block(latest);
        let logs = self
            .provider
            .get_logs(&filter)
            .await
            .map_err(|e| rpc_error("eth_getLogs", e))?;
        for tx in logs.iter().filter_map(|l| l.transaction_hash) {
            let receipt = self
                .provider
                .get_transaction_receipt(tx)
                .await
                .map_err(|e| rpc_error("eth_getTransactionReceipt", e))?;
            let Some(receipt) = receipt.filter(|r| r.status()) else {
                continue;
            };
            let paid_us = receipt.inner.logs().iter().any(|log| {
                log.address() == token
                    && log.log_decode::<IEip3009::Transfer>().is_ok_and(|t| {
                        let t = t.inner.data;
                        t.from == a.from && t.to == pay_to && t.value == a.value
                    })
            });
            if paid_us {
                return Ok(Some(tx));
            }
        }
        Err(invalid(
            FailureReason::EvmNonceUsed,
            "this authorization's nonce was used, but not by a transfer of this payment to us",
        ))
    }

    /// Submits the transfer and waits for its receipt, at most the configured receipt
    /// timeout and at most `receipt_wait` (what the request's deadline leaves). A
    /// receipt that does not come in time is reported as pending with its hash: the
    /// transfer was broadcast and may still land, so the purchase is not voided.
    pub async fn submit(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        receipt_wait: Duration,
    ) -> Result<Submitted, PaymentFailure> {
        let Some(settler) = self.settler else {
            return Err(PaymentFailure::config("no settler key is configured"));
        };
        let mut attempt = 0;
        let pending = loop {
            attempt += 1;
            let nonce = self.take_nonce(settler).await?;
            let tx = TransactionRequest::default()
                .with_to(token)
                .with_nonce(nonce)
                .with_input(payment.transfer_calldata()?);
            match self.provider.send_transaction(tx).await {
                Ok(p) => break p,
                Err(e) if e.as_error_resp().is_some() => {
                    let text = e.to_string();
                    if is_nonce_error(&text) && attempt < NONCE_ATTEMPTS {
                        tracing::warn!(nonce, error = %text, "settler nonce out of step; re-reading it");
                        self.forget_nonce().await;
                        continue;
                    }
                    self.forget_nonce().await;
                    // Say why in the payer's terms when the chain can tell (funds moved
                    // away, authorization used or canceled since verification).
                    self.check_onchain(token, payment).await?;
                    return Err(invalid(
                        FailureReason::SettlementFailed,
                        format!("the chain refused the transfer: {text}"),
                    ));
                }
                Err(e) => {
                    // The transaction may or may not have arrived: ask the chain next time.
                    self.forget_nonce().await;
                    return Err(rpc_error("eth_sendRawTransaction", e));
                }
            }
        };
        let hash = *pending.tx_hash();
        // Bounded as a whole: any one receipt call can hang on a slow RPC.
        let wait = self.receipt_timeout.min(receipt_wait);
        let receipt = tokio::time::timeout(wait, self.poll_receipt(hash))
            .await
            .map_err(|_| format!("no receipt within {} ms", wait.as_millis()));
        match receipt {
            Ok(receipt) if receipt.status() => Ok(Submitted::Confirmed(hash)),
            Ok(_) => {
                // Reverted: most likely the authorization was executed first by
                // another transaction; say so if the chain can tell.
                self.check_onchain(token, payment).await?;
                Err(invalid(
                    FailureReason::SettlementFailed,
                    format!("the transfer {hash} reverted on chain"),
                ))
            }
            Err(e) => {
                tracing::warn!(%hash, error = %e, "settlement receipt did not arrive in time");
                Ok(Submitted::Pending(hash))
            }
        }
    }
}

impl EvmChain {
    /// Asks for the receipt at once, then again after `RECEIPT_POLL_FIRST`, doubling
    /// up to `RECEIPT_POLL_MAX`. Not alloy's `get_receipt`: it re-polls at the client's
    /// poll interval, 250 ms for a local RPC and 7 s for a remote one, so a purchase
    /// on a chain with 2 s blocks would wait 7 s for a receipt that came after 2.
    /// A failed call is polled again like a missing receipt: the transfer is broadcast,
    /// and giving up early would report it pending while time is left. The caller
    /// bounds the whole loop.
    async fn poll_receipt(&self, hash: B256) -> alloy::rpc::types::TransactionReceipt {
        let mut pause = RECEIPT_POLL_FIRST;
        loop {
            match self.provider.get_transaction_receipt(hash).await {
                Ok(Some(receipt)) => return receipt,
                Ok(None) => {}
                Err(e) => tracing::debug!(%hash, error = %e, "receipt poll failed; polling again"),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RECEIPT_POLL_MAX);
        }
    }
}

/// The first pause between receipt polls (a local chain mines within milliseconds)
/// and the longest (a quarter of Base's 2 s block time): about ten calls per purchase
/// on Base, one or two on a local chain.
pub(super) const RECEIPT_POLL_FIRST: Duration = Duration::from_millis(5);

pub(super) const RECEIPT_POLL_MAX: Duration = Duration::from_millis(500);

/// Where a submitted settlement stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Submitted {
    Confirmed(B256),
    /// Broadcast, no receipt yet.
    Pending(B256),
}
