//! Native SOL, verified and settled by us on a Solana JSON-RPC node: the payer's
//! transaction is complete (signed, its fee paid by the payer), so verifying is reading
//! it (`svm::native_transfer`) and simulating it, and settling is broadcasting it and
//! waiting for its confirmation. No key of ours is involved.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use umpire_host::Deadline;

use crate::settler::{ANSWER_MARGIN, PaymentContext, Settler, Verified, polls_every};
use umpire_x402::reason::{FailureReason, PaymentFailure};
use umpire_x402::svm::{self, Transaction};
use umpire_x402::types::Account;
use umpire_x402::types::SettlementResponse;

/// A Solana JSON-RPC endpoint.
#[derive(Debug, Clone)]
pub struct SolanaRpc {
    url: String,
    http: reqwest::Client,
}

/// Where a signature stands.
#[derive(Debug, Clone, PartialEq)]
pub enum Landed {
    /// Unknown to the node (not yet seen, or dropped).
    No,
    /// Seen, not yet confirmed.
    Processed,
    /// Confirmed (or finalized) and succeeded.
    Ok,
    /// Confirmed and failed: the transfer did not happen (the fee was still paid).
    Failed(Value),
}

/// How long one RPC call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl SolanaRpc {
    pub fn new(url: &str) -> Result<SolanaRpc, PaymentFailure> {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(PaymentFailure::config(format!(
                "the Solana RPC URL must be http(s), not {url:?}"
            )));
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| PaymentFailure::config(format!("HTTP client: {e}")))?;
        Ok(SolanaRpc {
            url: url.to_owned(),
            http,
        })
    }

    /// One call: its `result`, or its JSON-RPC `error` object as `Err(Ok(error))`;
    /// `Err(Err(failure))` when the node could not be asked.
    async fn call(
        &self,
        method: &str,
        params: Value,
    ) -> Result<Value, Result<Value, PaymentFailure>> {
        let unavailable = |e: String| {
            Err(PaymentFailure::unavailable(format!(
                "Solana RPC {method}: {e}"
            )))
        };
        let resp = self
            .http
            .post(&self.url)
            .timeout(CALL_TIMEOUT)
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let status = resp.status();
        let body: Value = resp
            .json()
            .await
            .map_err(|e| unavailable(format!("{status}: {e}")))?;
        if let Some(error) = body.get("error") {
            return Err(Ok(error.clone()));
        }
        body.get("result")
            .cloned()
            .ok_or_else(|| unavailable(format!("{status}: an answer without a result")))
    }

    /// Runs the transaction against the node's state, signatures checked: `Ok` when it
    /// would succeed, else the error it would fail with (`"AlreadyProcessed"` for one
    /// that has landed already).
    pub async fn simulate(&self, tx_base64: &str) -> Result<Result<(), Value>, PaymentFailure> {
        let params = json!([tx_base64, {"encoding": "base64", "sigVerify": true, "commitment": "confirmed"}]);
        match self.call("simulateTransaction", params).await {
            Ok(result) => {
                let err = result.pointer("/value/err").cloned().unwrap_or(Value::Null);
                Ok(if err.is_null() { Ok(()) } else { Err(err) })
            }
            Err(Ok(error)) => Ok(Err(error)),
            Err(Err(f)) => Err(f),
        }
    }

    /// Broadcasts the transaction (after the node's own preflight): its signature, or
    /// the node's refusal.
    pub async fn send(&self, tx_base64: &str) -> Result<Result<String, Value>, PaymentFailure> {
        let params = json!([tx_base64, {"encoding": "base64", "preflightCommitment": "confirmed"}]);
        match self.call("sendTransaction", params).await {
            Ok(Value::String(sig)) => Ok(Ok(sig)),
            Ok(other) => Err(PaymentFailure::unavailable(format!(
                "Solana RPC sendTransaction answered {other}"
            ))),
            Err(Ok(error)) => Ok(Err(error)),
            Err(Err(f)) => Err(f),
        }
    }

    fn read_failure(method: &str) -> impl Fn(Result<Value, PaymentFailure>) -> PaymentFailure + '_ {
        move |e| match e {
            Ok(error) => {
                PaymentFailure::unavailable(format!("Solana RPC {method} refused: {error}"))
            }
            Err(f) => f,
        }
    }

    /// The latest blockhash (a transaction's lifetime starts there).
    pub async fn latest_blockhash(&self) -> Result<[u8; 32], PaymentFailure> {
        let method = "getLatestBlockhash";
        let result = self
            .call(method, json!([{"commitment": "confirmed"}]))
            .await
            .map_err(Self::read_failure(method))?;
        result
            .pointer("/value/blockhash")
            .and_then(Value::as_str)
            .and_then(svm::Pubkey::from_base58)
            .map(|h| h.0)
            .ok_or_else(|| {
                PaymentFailure::unavailable(format!(
                    "Solana RPC {method}: no blockhash in {result}"
                ))
            })
    }

    /// An account's owner program and data; None when it does not exist.
    pub async fn account(
        &self,
        address: &str,
    ) -> Result<Option<(String, Vec<u8>)>, PaymentFailure> {
        use base64::Engine as _;
        let method = "getAccountInfo";
        let result = self
            .call(
                method,
                json!([address, {"encoding": "base64", "commitment": "confirmed"}]),
            )
            .await
            .map_err(Self::read_failure(method))?;
        let Some(value) = result.get("value").filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let owner = value.get("owner").and_then(Value::as_str);
        let data = value
            .pointer("/data/0")
            .and_then(Value::as_str)
            .and_then(|d| base64::engine::general_purpose::STANDARD.decode(d).ok());
        match (owner, data) {
            (Some(o), Some(d)) => Ok(Some((o.to_owned(), d))),
            _ => Err(PaymentFailure::unavailable(format!(
                "Solana RPC {method}: unreadable account {value}"
            ))),
        }
    }

    /// Where `signature` stands; `history` searches past the node's recent statuses (a
    /// transaction from before this process; a confirmation poll of a fresh broadcast
    /// needs only the recent ones, and costs the node less).
    pub async fn status(&self, signature: &str, history: bool) -> Result<Landed, PaymentFailure> {
        let params = json!([[signature], {"searchTransactionHistory": history}]);
        let result = self
            .call("getSignatureStatuses", params)
            .await
            .map_err(Self::read_failure("getSignatureStatuses"))?;
        let Some(s) = result.pointer("/value/0").filter(|s| !s.is_null()) else {
            return Ok(Landed::No);
        };
        let confirmed = matches!(
            s.get("confirmationStatus").and_then(Value::as_str),
            Some("confirmed" | "finalized")
        );
        let err = s.get("err").cloned().unwrap_or(Value::Null);
        Ok(match (confirmed, err.is_null()) {
            (false, _) => Landed::Processed,
            (true, true) => Landed::Ok,
            (true, false) => Landed::Failed(err),
        })
    }
}

/// Whether a node's error says the transaction has landed already: the transaction
/// error itself (`simulateTransaction`'s `value.err`) or the one a JSON-RPC refusal
/// carries in `data.err`. Never a search of the text: the error's `data.logs` hold
/// what the transaction's programs logged, and a memo logs whatever the payer wrote
/// ("AlreadyProcessed" included).
fn already_processed(error: &Value) -> bool {
    const ALREADY: &str = "AlreadyProcessed";
    error.as_str() == Some(ALREADY)
        || error.pointer("/data/err").and_then(Value::as_str) == Some(ALREADY)
}

/// Verifies and settles native SOL payments on a Solana node.
#[derive(Debug, Clone)]
pub struct NativeSolSettler {
    pub rpc: SolanaRpc,
    /// How often the cluster makes a slot (`ZERO`: at once, as a local node does); the
    /// confirmation polls follow it.
    pub slot_time: Duration,
}

/// Solana's target slot time, in milliseconds.
pub const SLOT_MS: u64 = 400;

fn transaction_of(ctx: &PaymentContext) -> Result<Transaction, PaymentFailure> {
    let tx = svm::payload_transaction(ctx.payment.scheme_payload())
        .map_err(|r| PaymentFailure::invalid(r.reason, r.message))?;
    svm::native_transfer(&tx).map_err(|r| PaymentFailure::invalid(r.reason, r.message))?;
    Ok(tx)
}

fn settled(ctx: &PaymentContext, tx: &Transaction) -> SettlementResponse {
    SettlementResponse {
        success: true,
        transaction: tx.id(),
        network: Some(ctx.rail.network.clone()),
        payer: Some(Account::Solana(tx.message.fee_payer())),
        error_reason: None,
        extensions: Default::default(),
        extra: Default::default(),
    }
}

fn failed_on_chain(err: &Value) -> PaymentFailure {
    PaymentFailure::invalid(
        FailureReason::SvmFailed,
        format!("the transfer failed on chain: {err}"),
    )
}

#[async_trait]
impl Settler for NativeSolSettler {
    async fn verify(&self, ctx: &PaymentContext) -> Result<Verified, PaymentFailure> {
        let tx = transaction_of(ctx)?;
        let payer = Account::Solana(tx.message.fee_payer());
        match self.rpc.simulate(&tx.to_base64()).await? {
            Ok(()) => Ok(Verified {
                payer,
                settled: None,
            }),
            // Broadcast already (by the payer, or by whoever saw the header): it paid
            // us if it landed well, and the ledger lets it buy one purchase.
            Err(e) if already_processed(&e) => match self.rpc.status(&tx.id(), true).await? {
                Landed::Ok => Ok(Verified {
                    payer,
                    settled: Some(settled(ctx, &tx)),
                }),
                Landed::Failed(err) => Err(failed_on_chain(&err)),
                Landed::No | Landed::Processed => Err(PaymentFailure::unavailable(
                    "the transaction is being processed; retry in a few seconds",
                )),
            },
            Err(e) => Err(PaymentFailure::invalid(
                FailureReason::SvmSimulation,
                format!("the transfer would fail: {e}"),
            )),
        }
    }

    async fn settle(
        &self,
        ctx: &PaymentContext,
        deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure> {
        let tx = transaction_of(ctx)?;
        let sig = tx.id();
        match self.rpc.send(&tx.to_base64()).await? {
            Ok(_) => {}
            Err(e) if already_processed(&e) => {}
            Err(e) => {
                return Err(PaymentFailure::invalid(
                    FailureReason::SvmFailed,
                    format!("the Solana node refused the transaction: {e}"),
                ));
            }
        }
        // Polled on the slots' schedule (`polls_every`) until shortly before the
        // deadline. Only a confirmed success is a settlement: a broadcast still
        // unconfirmed then has an unknown outcome (the payer may have emptied the
        // account so it is dropped), so the purchase stays prepared and the customer's
        // retry delivers it once the chain shows it landed (`find_settlement`).
        for pause in polls_every(self.slot_time) {
            if !deadline.allows(ANSWER_MARGIN + pause) {
                break;
            }
            tokio::time::sleep(pause).await;
            match self.rpc.status(&sig, false).await {
                Ok(Landed::Ok) => return Ok(settled(ctx, &tx)),
                Ok(Landed::Failed(err)) => return Err(failed_on_chain(&err)),
                Ok(Landed::No | Landed::Processed) | Err(_) => {}
            }
        }
        tracing::warn!(
            signature = sig,
            "SOL transfer unconfirmed at the deadline; outcome unknown"
        );
        Err(PaymentFailure::unavailable(
            "the SOL transfer was broadcast but not confirmed within this request's time; retry the identical request to get its verdict once it lands",
        ))
    }

    async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        let tx = transaction_of(ctx)?;
        match self.rpc.status(&tx.id(), true).await? {
            Landed::Ok => Ok(Some(settled(ctx, &tx))),
            Landed::Failed(err) => Err(failed_on_chain(&err)),
            // Processed, not confirmed yet: it may still land (or be dropped).
            Landed::Processed => Err(PaymentFailure::unavailable(
                "the transaction is processed and not confirmed yet",
            )),
            Landed::No => Ok(None),
        }
    }
}

/// A Solana payment settled through the facilitator, looked up on `rpc`: its
/// transaction's id is the fee payer's signature (the facilitator's), known once the
/// facilitator named it (`ctx.transaction`, from its pending answer). One transaction
/// runs once, so a named transaction that failed on chain means the payment can no
/// longer land; one not found is not landed (yet).
pub async fn find_spl_settlement(
    rpc: &SolanaRpc,
    ctx: &PaymentContext,
) -> Result<Option<SettlementResponse>, PaymentFailure> {
    let Some(signature) = &ctx.transaction else {
        return Err(PaymentFailure::unavailable(
            "a Solana payment settled through the facilitator is found by the transaction the facilitator names, and it named none",
        ));
    };
    match rpc.status(signature, true).await? {
        Landed::Ok => Ok(Some(SettlementResponse {
            success: true,
            transaction: signature.clone(),
            network: Some(ctx.rail.network.clone()),
            payer: ctx.claimed_payer(),
            error_reason: None,
            extensions: Default::default(),
            extra: Default::default(),
        })),
        Landed::Failed(err) => Err(failed_on_chain(&err)),
        // Processed, not confirmed yet: it may still land (or be dropped).
        Landed::Processed => Err(PaymentFailure::unavailable(
            "the transaction is processed and not confirmed yet",
        )),
        Landed::No => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn already_processed_is_read_from_the_error_not_from_the_logs() {
        assert!(already_processed(&json!("AlreadyProcessed")));
        assert!(already_processed(
            &json!({"code": -32002, "message": "Transaction simulation failed: This transaction has already been processed", "data": {"err": "AlreadyProcessed", "logs": []}})
        ));
        // A memo logs whatever the payer wrote: a transfer that fails for want of funds
        // must not pass for one that landed.
        let memo_trick = json!({
            "code": -32002,
            "message": "Transaction simulation failed: Error processing Instruction 1: custom program error: 0x1",
            "data": {
                "err": {"InstructionError": [1, {"Custom": 1}]},
                "logs": ["Program MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr invoke [1]", "Program log: Memo (len 16): \"AlreadyProcessed\"", "Program log: already been processed"]
            }
        });
        assert!(!already_processed(&memo_trick));
        assert!(!already_processed(
            &json!({"InstructionError": [0, "AlreadyProcessed?"]})
        ));
    }
}
