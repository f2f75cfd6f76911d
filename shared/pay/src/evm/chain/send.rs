//! Sending settlements: signed here with nonces counted here, sent under one lock in
//! JSON-RPC batches (group commit), a lost answer resent with the same bytes before any
//! later nonce, a gap below a refused nonce filled with a no-op.
use std::sync::Arc;
use std::time::{Duration, Instant};

use alloy::consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy::eips::Encodable2718;
use alloy::network::TxSignerSync;
use alloy::primitives::{Address, B256, Bytes, TxKind, U256};
use alloy::providers::Provider;
use alloy::rpc::client::BatchRequest;
use alloy::transports::{RpcError, TransportErrorKind};
use tracing::Instrument as _;

use umpire_x402::evm::Eip3009Payment;
use umpire_x402::reason::{FailureReason, PaymentFailure};

use super::watch::Sending;
use super::{
    Broadcast, EvmChain, FILLER_GAS, Fees, Outcome, Queued, RESENDS, SEND_ATTEMPTS,
    SEND_CALL_TIMEOUT, SendState, Sent, Settler, authorization_id, is_definite_refusal,
    is_fee_error, is_known, is_nonce_error, is_settler_unfunded, rpc_error,
};

impl EvmChain {
    /// Settles the payment: signs and sends the transfer (or resends the one this
    /// process already sent for it), then waits up to `wait` (and the configured receipt
    /// timeout) for proof that the authorization's transfer paid us, whoever's
    /// transaction made it. Without proof by then the outcome is unknown:
    /// [`PaymentFailure::pending`] with our transaction's hash.
    pub async fn settle(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        wait: Duration,
    ) -> Result<B256, PaymentFailure> {
        let settler = self.settler_or_config()?;
        let until = Instant::now() + self.receipt_timeout.min(wait);
        let id = authorization_id(token, payment);
        let sent = match settler.remembered(&id) {
            Some(b) if !self.stale(&b).await => b,
            _ => match self.broadcast(settler, token, payment, pay_to).await? {
                Sent::Broadcast(b) => b,
                Sent::PaidBy(tx) => return Ok(tx),
            },
        };
        let decided = self
            .confirm(
                token,
                payment,
                pay_to,
                Sending::of(&id, &sent),
                until,
                self.preconfirmations,
            )
            .await;
        match decided {
            Ok(c) if !c.sealed => self.follow(token, payment, pay_to, c.tx, id),
            Err(ref f) if f.transaction.is_some() => {}
            // Only this broadcast (or its replacement at its nonce): a later settlement
            // may have signed anew.
            _ => settler.forget_nonce(&id, sent.nonce),
        }
        decided.map(|c| c.tx)
    }

    /// Watches a transaction answered on its preconfirmation until its block is sealed
    /// (resending it if it left the pool, as a late broadcast is), for as long as its
    /// authorization is valid. In `umpire serve` this runs to the end; on Lambda only
    /// while the instance runs (a frozen instance resumes it on its next event).
    pub(super) fn follow(
        &self,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
        tx: B256,
        id: String,
    ) {
        let chain = self.clone();
        let payment = payment.clone();
        let valid_before = u64::try_from(payment.authorization.validBefore).unwrap_or(u64::MAX);
        let now = umpire_host::Clock::system().now();
        let until =
            Instant::now() + Duration::from_secs(valid_before.saturating_sub(now).min(3600));
        tokio::spawn(async move {
            let sending = Sending {
                id: &id,
                hash: tx,
                nonce: None,
            };
            match chain
                .confirm(token, &payment, pay_to, sending, until, false)
                .await
            {
                Ok(c) => tracing::info!(tx = %c.tx, "a preconfirmed settlement is sealed"),
                Err(e) => tracing::error!(
                    %tx,
                    reason = %e.message,
                    "a purchase answered on a preconfirmation was not included: the transfer did not land"
                ),
            }
            if let Some(settler) = &chain.settler {
                // Only this broadcast: a later settlement may have signed anew.
                settler.forget(&id, tx);
            }
        }
        // Its lines belong to the purchase it answered.
        .in_current_span()
        );
    }

    /// Resends a broadcast this process made earlier (harmless if it arrived, the
    /// broadcast if not); `true` when it can never land: its nonce went to another
    /// transaction and it has no receipt, so it is forgotten and signed anew.
    pub(super) async fn stale(&self, b: &Broadcast) -> bool {
        match tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw)).await {
            Ok(Err(e)) if e.to_string().to_ascii_lowercase().contains("nonce too low") => {
                let receipt = tokio::time::timeout(
                    SEND_CALL_TIMEOUT,
                    self.provider.get_transaction_receipt(b.hash),
                )
                .await;
                let stale = matches!(receipt, Ok(Ok(None)));
                if stale {
                    tracing::warn!(hash = %b.hash, nonce = b.nonce, "a remembered settlement lost its nonce to another transaction; signing it again");
                }
                stale
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, hash = %b.hash, "resending a settlement");
                false
            }
            _ => false,
        }
    }

    /// Signs the transfer and sends it, in nonce order, with whatever other settlements
    /// wait for the send lock ([`EvmChain::send_queued`]). A node that refuses it for its
    /// nonce or its fees gets a new signing; one that refuses it otherwise took nothing,
    /// and the chain says why (or that the authorization already paid us).
    pub(super) async fn broadcast(
        &self,
        settler: &Arc<Settler>,
        token: Address,
        payment: &Eip3009Payment,
        pay_to: Address,
    ) -> Result<Sent, PaymentFailure> {
        let id = authorization_id(token, payment);
        let input = payment.transfer_calldata()?;
        let gas_limit = self.gas_limit(settler, token, payment, &input).await?;
        let (reply, outcome) = tokio::sync::oneshot::channel();
        settler
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Queued {
                id: id.clone(),
                to: token,
                input,
                gas_limit,
                reply,
            });
        // Sent from a task of its own: a request dropped at its deadline must not drop a
        // batch it leads halfway (the other purchases' transactions may be out).
        let chain = self.clone();
        let leader = settler.clone();
        tokio::spawn(async move { chain.send_queued(&leader).await });
        let refusal = match outcome.await {
            Ok(Outcome::Sent(b)) => return Ok(Sent::Broadcast(b)),
            Ok(Outcome::Failed(f)) => return Err(f),
            Ok(Outcome::Refused(text)) => text,
            // The batch ended without a word (its task panicked): what it signed is
            // remembered, and may be out.
            Err(_) => {
                return match settler.remembered(&id) {
                    Some(b) => Ok(Sent::Broadcast(b)),
                    None => Err(PaymentFailure::unavailable(
                        "the settlement was never signed; nothing moved",
                    )),
                };
            }
        };
        match self.why_not(token, payment, pay_to, &refusal).await {
            Ok(tx) => Ok(Sent::PaidBy(tx)),
            // The payer's side is sound (unused, funded): the node refused our own
            // transaction (its nonce, its fees, our key). Nothing moved and nothing is
            // the payer's fault: the purchase stays open for the retry to settle.
            Err(f) if f.reason == FailureReason::EvmSimulation => Err(PaymentFailure::unavailable(
                format!("the node refused our settlement transaction: {refusal}"),
            )),
            Err(f) => Err(f),
        }
    }

    /// Takes the send lock and sends every settlement waiting for it, in batches, until
    /// none is left to sign again. Finds nothing to do when an earlier holder took them.
    pub(super) async fn send_queued(&self, settler: &Arc<Settler>) {
        let mut state = settler.sending.lock().await;
        let mut todo =
            std::mem::take(&mut *settler.queue.lock().unwrap_or_else(|p| p.into_inner()));
        for attempt in 1..=SEND_ATTEMPTS {
            if todo.is_empty() {
                return;
            }
            todo = self
                .send_batch(settler, &mut state, todo, attempt == SEND_ATTEMPTS)
                .await;
        }
    }

    /// Signs `todo` with consecutive nonces and sends them in one round trip. Each gets
    /// its outcome, except those the node refused for their nonce or their fees, which
    /// are returned to be signed again (unless `last`). A refusal below a transaction
    /// that went out leaves a gap nothing behind it passes: filled at once with a no-op.
    pub(super) async fn send_batch(
        &self,
        settler: &Settler,
        state: &mut SendState,
        todo: Vec<Queued>,
        last: bool,
    ) -> Vec<Queued> {
        let (first, signed) = match self.sign_batch(settler, state, &todo).await {
            Ok(signed) => signed,
            Err(f) => {
                for q in todo {
                    let _ = q.reply.send(Outcome::Failed(f.clone()));
                }
                return Vec::new();
            }
        };
        let answers = self.send_signed(first, &signed).await;
        let mut tally = Tally::default();
        let mut again = Vec::new();
        for ((q, b), sent) in todo.into_iter().zip(signed).zip(answers) {
            if let Some(q) = self
                .answer_one(settler, state, (q, b, sent), last, &mut tally)
                .await
            {
                again.push(q);
            }
        }
        // Refused nonces above everything that went out are ours again; below it, gaps.
        let (gaps, tail): (Vec<u64>, Vec<u64>) = tally
            .refused_nonces
            .into_iter()
            .partition(|n| tally.out_up_to.is_some_and(|top| *n < top));
        if tally.unknown_count {
            state.next_nonce = None;
        } else if let Some(lowest) = tail.iter().min() {
            state.next_nonce = Some(*lowest);
        }
        if !gaps.is_empty() {
            self.fill(settler, state, &gaps).await;
        }
        again
    }

    /// Signs every queued settlement with consecutive nonces from the next one and the
    /// fees of the moment, each written down before it leaves: a retry finds its
    /// broadcast, and the nonces count as used (a gap one leaves is filled with these
    /// very bytes).
    async fn sign_batch(
        &self,
        settler: &Settler,
        state: &mut SendState,
        todo: &[Queued],
    ) -> Result<(u64, Vec<Broadcast>), PaymentFailure> {
        let first = match state.next_nonce {
            Some(n) => n,
            None => self.pending_nonce(settler.address).await?,
        };
        let fees = self.fees(state).await?;
        let signed = todo
            .iter()
            .zip(first..)
            .map(|(q, nonce)| self.sign(settler, q.to, &q.input, nonce, q.gas_limit, fees))
            .collect::<Result<Vec<Broadcast>, PaymentFailure>>()?;
        for (q, b) in todo.iter().zip(&signed) {
            settler.remember(&q.id, b);
        }
        state.next_nonce = Some(first + signed.len() as u64);
        Ok((first, signed))
    }

    /// Sends the signed batch; the whole answer lost, the same bytes again before any
    /// later nonce goes out.
    async fn send_signed(
        &self,
        first: u64,
        signed: &[Broadcast],
    ) -> Vec<Result<(), RpcError<TransportErrorKind>>> {
        let mut answers = self.send_raws(signed).await;
        let mut resent = false;
        for _ in 0..RESENDS {
            if !answers
                .iter()
                .all(|a| a.as_ref().is_err_and(|e| e.as_error_resp().is_none()))
            {
                break;
            }
            tracing::warn!(
                first,
                count = signed.len(),
                "a settlement batch's answer was lost; resending it"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            answers = self.send_raws(signed).await;
            resent = true;
        }
        // A resent transaction the node calls "nonce too low" may be these very bytes,
        // mined since the lost answer (a block can seal between the two sends): the
        // node knows it by its hash. Signed again, it would spend a nonce on a revert.
        // Not found (or not answered) is no proof it never landed (another node of a
        // load-balanced RPC may not have it yet): its outcome is unknown, as a lost
        // answer's is, and a later settlement's check of it re-signs one that never
        // will ([`EvmChain::stale`]).
        if resent {
            for (b, a) in signed.iter().zip(answers.iter_mut()) {
                let too_low = a.as_ref().is_err_and(|e| {
                    e.as_error_resp().is_some()
                        && e.to_string().to_ascii_lowercase().contains("nonce too low")
                });
                if too_low {
                    *a = if self.arrived(b).await {
                        Ok(())
                    } else {
                        Err(TransportErrorKind::custom_str(
                            "resent after a lost answer; its nonce is used and the node does not find it by hash",
                        ))
                    };
                }
            }
        }
        answers
    }

    /// Answers one queued settlement by what the node said of its transaction: sent (or
    /// maybe: its outcome is followed), refused (nothing went out; a fee or nonce out of
    /// step is tried again in the next batch unless this is the `last`), or unknown
    /// (resent with the same bytes). The queued settlement to try again, if any.
    async fn answer_one(
        &self,
        settler: &Settler,
        state: &mut SendState,
        (q, b, sent): (Queued, Broadcast, Result<(), RpcError<TransportErrorKind>>),
        last: bool,
        tally: &mut Tally,
    ) -> Option<Queued> {
        match sent {
            Ok(()) => {
                tally.out_up_to = Some(b.nonce);
                let _ = q.reply.send(Outcome::Sent(b));
                None
            }
            Err(e) if e.as_error_resp().is_some() && is_definite_refusal(&e.to_string()) => {
                // Refused: it never went out.
                settler.forget(&q.id, b.hash);
                let text = e.to_string();
                if is_nonce_error(&text) {
                    // Not a gap: the node counts the nonce used, or us out of step.
                    tally.unknown_count = true;
                    if last {
                        let _ = q.reply.send(Outcome::Refused(text));
                        return None;
                    }
                    tracing::warn!(nonce = b.nonce, error = %text, "settler nonce out of step; re-reading it");
                    return Some(q);
                }
                tally.refused_nonces.push(b.nonce);
                if is_fee_error(&text) && !last {
                    tracing::warn!(error = %text, "settlement fees out of date; reading them again");
                    state.fees = None;
                    return Some(q);
                }
                let answer = if is_settler_unfunded(&text) {
                    Outcome::Failed(PaymentFailure::config(format!(
                        "the settler key cannot pay for gas: {text}"
                    )))
                } else {
                    Outcome::Refused(text)
                };
                let _ = q.reply.send(answer);
                None
            }
            Err(e) => {
                // Sent or not, nobody knows: the same bytes again.
                tracing::warn!(nonce = b.nonce, hash = %b.hash, error = %e, "a settlement's answer was lost; resending it");
                if !self.resend(&b).await {
                    // Still unknown: the chain's pending count decides next time.
                    tally.unknown_count = true;
                }
                tally.out_up_to = Some(b.nonce);
                let _ = q.reply.send(Outcome::Sent(b));
                None
            }
        }
    }

    /// Sends a no-op to itself at each of `nonces` (left empty by a refusal between
    /// transactions that went out), in one round trip. One that fails stays a gap for
    /// the late-receipt refill ([`EvmChain::refill`]).
    pub(super) async fn fill(&self, settler: &Settler, state: &mut SendState, nonces: &[u64]) {
        let Ok(fees) = self.fees(state).await else {
            return;
        };
        let fillers: Vec<Broadcast> = nonces
            .iter()
            .filter_map(|n| {
                self.sign(
                    settler,
                    settler.address,
                    &Bytes::new(),
                    *n,
                    FILLER_GAS,
                    fees,
                )
                .ok()
            })
            .collect();
        for (b, sent) in fillers.iter().zip(self.send_raws(&fillers).await) {
            match sent {
                Ok(()) => {
                    tracing::warn!(nonce = b.nonce, hash = %b.hash, "filled a settler nonce a refusal left empty")
                }
                Err(e) => {
                    tracing::error!(nonce = b.nonce, error = %e, "a settler nonce left empty could not be filled yet")
                }
            }
        }
    }

    /// Sends signed transactions: one alone as a plain call, several in one JSON-RPC
    /// batch (one round trip); an answer per transaction, in order.
    pub(super) async fn send_raws(
        &self,
        bs: &[Broadcast],
    ) -> Vec<Result<(), RpcError<TransportErrorKind>>> {
        let lost = || TransportErrorKind::custom_str("no answer in time");
        if let [b] = bs {
            return vec![
                tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw))
                    .await
                    .unwrap_or_else(|_| Err(lost())),
            ];
        }
        let mut batch = BatchRequest::new(self.provider.client());
        let waiters: Vec<_> = bs
            .iter()
            .map(|b| batch.add_call::<_, B256>("eth_sendRawTransaction", &(b.raw.clone(),)))
            .collect();
        let sent = tokio::time::timeout(SEND_CALL_TIMEOUT, batch.send()).await;
        if !matches!(sent, Ok(Ok(()))) {
            return bs.iter().map(|_| Err(lost())).collect();
        }
        let mut out = Vec::with_capacity(bs.len());
        for w in waiters {
            let answer = match w {
                Err(e) => Err(e),
                Ok(w) => tokio::time::timeout(SEND_CALL_TIMEOUT, w)
                    .await
                    .unwrap_or_else(|_| Err(lost())),
            };
            out.push(match answer {
                Ok(_) => Ok(()),
                Err(e) if e.as_error_resp().is_some_and(|r| is_known(&r.message)) => Ok(()),
                Err(e) => Err(e),
            });
        }
        out
    }

    /// The account's next nonce as the node counts its pending transactions.
    pub(super) async fn pending_nonce(&self, account: Address) -> Result<u64, PaymentFailure> {
        tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider.get_transaction_count(account).pending(),
        )
        .await
        .map_err(|_| rpc_error("eth_getTransactionCount", "no answer in time"))?
        .map_err(|e| rpc_error("eth_getTransactionCount", e))
    }

    /// Sends `b` again after a lost answer; `true` once the node has it.
    pub(super) async fn resend(&self, b: &Broadcast) -> bool {
        for _ in 0..RESENDS {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let sent = tokio::time::timeout(SEND_CALL_TIMEOUT, self.send_raw(&b.raw)).await;
            let Ok(sent) = sent else { continue };
            match sent {
                Ok(()) => return true,
                Err(e) if e.as_error_resp().is_some() => {
                    let text = e.to_string();
                    if is_known(&text) {
                        return true;
                    }
                    // Its nonce is used: by these very bytes (they arrived), or by
                    // another transaction (they never will). The node knows which.
                    if text.to_ascii_lowercase().contains("nonce too low") {
                        return self.arrived(b).await;
                    }
                    return false;
                }
                Err(_) => {}
            }
        }
        false
    }

    /// Whether the node has the transaction `b` (pending or mined), by its hash.
    pub(super) async fn arrived(&self, b: &Broadcast) -> bool {
        let found = tokio::time::timeout(
            SEND_CALL_TIMEOUT,
            self.provider.get_transaction_by_hash(b.hash),
        )
        .await;
        matches!(found, Ok(Ok(Some(_))))
    }

    pub(super) async fn send_raw(&self, raw: &Bytes) -> Result<(), RpcError<TransportErrorKind>> {
        match self.provider.send_raw_transaction(raw).await {
            Ok(_) => Ok(()),
            Err(e) if e.as_error_resp().is_some_and(|r| is_known(&r.message)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    pub(super) fn sign(
        &self,
        settler: &Settler,
        to: Address,
        input: &Bytes,
        nonce: u64,
        gas_limit: u64,
        fees: Fees,
    ) -> Result<Broadcast, PaymentFailure> {
        let mut tx = TxEip1559 {
            chain_id: self.chain_id,
            nonce,
            gas_limit,
            max_fee_per_gas: fees.max_fee_per_gas,
            max_priority_fee_per_gas: fees.max_priority_fee_per_gas,
            to: TxKind::Call(to),
            value: U256::ZERO,
            access_list: Default::default(),
            input: input.clone(),
        };
        let signature = settler
            .signer
            .sign_transaction_sync(&mut tx)
            .map_err(|e| PaymentFailure::config(format!("signing the settlement: {e}")))?;
        let signed = tx.into_signed(signature);
        let hash = *signed.hash();
        let raw = TxEnvelope::from(signed).encoded_2718().into();
        Ok(Broadcast {
            hash,
            raw,
            nonce,
            sent_at: Instant::now(),
            to,
            input: input.clone(),
            gas_limit,
            fees,
        })
    }
}

/// What one batch's answers add up to: the nonces refused (gaps below what went out,
/// ours again above it), the highest nonce that went out, and whether the node's count
/// is unknown (read it again before the next batch).
#[derive(Default)]
struct Tally {
    refused_nonces: Vec<u64>,
    out_up_to: Option<u64>,
    unknown_count: bool,
}
