//! Settling EVM payments ourselves: the EIP-3009 transfer submitted from our own gas
//! wallet.

use alloy::primitives::{Address, B256};
use async_trait::async_trait;
use umpire_host::Deadline;

use crate::evm::{EvmChain, OnChain, SpentBy};
use crate::settler::{ANSWER_MARGIN, PaymentContext, Settler, Verified};
use umpire_x402::evm::Eip3009Payment;
use umpire_x402::rails::Rail;
use umpire_x402::reason::{FailureReason, PaymentFailure};
use umpire_x402::types::{Account, SettlementResponse};

/// Settles EVM payments ourselves: chain reads and simulation to verify, then
/// `transferWithAuthorization` from the settler key.
#[derive(Debug, Clone)]
pub struct SelfSettler {
    pub chain: EvmChain,
}

pub(super) fn token_of(rail: &Rail) -> Result<Address, PaymentFailure> {
    rail.asset.evm().ok_or_else(|| {
        PaymentFailure::config(format!("asset {} is not a token address", rail.asset))
    })
}

pub(super) fn pay_to_of(rail: &Rail) -> Result<Address, PaymentFailure> {
    rail.pay_to.evm().ok_or_else(|| {
        PaymentFailure::config(format!("payTo {} is not an EVM address", rail.pay_to))
    })
}

/// What a self-settled payment answers: the transaction that moved it.
pub(super) fn settled(ctx: &PaymentContext, p: &Eip3009Payment, hash: B256) -> SettlementResponse {
    SettlementResponse {
        success: true,
        transaction: hash.to_string(),
        network: Some(ctx.rail.network.clone()),
        payer: Some(Account::Evm(p.payer())),
        error_reason: None,
        extensions: Default::default(),
        extra: Default::default(),
    }
}

pub(super) fn eip3009_or_unsupported(
    ctx: &PaymentContext,
) -> Result<Eip3009Payment, PaymentFailure> {
    ctx.eip3009().unwrap_or_else(|| {
        Err(PaymentFailure::config(format!(
            "self-settlement handles EVM exact payments, not {} on {}",
            ctx.rail.scheme, ctx.rail.network
        )))
    })
}

#[async_trait]
impl Settler for SelfSettler {
    async fn verify(&self, ctx: &PaymentContext) -> Result<Verified, PaymentFailure> {
        let p = eip3009_or_unsupported(ctx)?;
        let on_chain = self
            .chain
            .check_onchain(token_of(&ctx.rail)?, &p, pay_to_of(&ctx.rail)?)
            .await?;
        Ok(Verified {
            payer: Account::Evm(p.payer()),
            settled: match on_chain {
                OnChain::Unspent => None,
                OnChain::PaidUs(tx) => Some(settled(ctx, &p, tx)),
            },
        })
    }

    async fn settle(
        &self,
        ctx: &PaymentContext,
        deadline: Deadline,
    ) -> Result<SettlementResponse, PaymentFailure> {
        let p = eip3009_or_unsupported(ctx)?;
        // Proof is waited for until shortly before the deadline; past it the outcome is
        // unknown and the prepared answer waits for the customer's retry.
        let wait = deadline.remaining().saturating_sub(ANSWER_MARGIN);
        let tx = self
            .chain
            .settle(token_of(&ctx.rail)?, &p, pay_to_of(&ctx.rail)?, wait)
            .await?;
        Ok(settled(ctx, &p, tx))
    }

    async fn find_settlement(
        &self,
        ctx: &PaymentContext,
    ) -> Result<Option<SettlementResponse>, PaymentFailure> {
        let p = eip3009_or_unsupported(ctx)?;
        let token = token_of(&ctx.rail)?;
        let a = &p.authorization;
        if !self
            .chain
            .authorization_used(token, a.from, a.nonce)
            .await?
        {
            return Ok(None);
        }
        match self
            .chain
            .spent_by(token, &p, pay_to_of(&ctx.rail)?)
            .await?
        {
            SpentBy::Us(tx) => Ok(Some(settled(ctx, &p, tx))),
            SpentBy::Otherwise => Err(PaymentFailure::invalid(
                FailureReason::EvmNonceUsed,
                "this authorization's nonce was used, but not by a transfer of this payment to us",
            )),
            // Used, by what the logs do not say yet: neither paid nor refused.
            SpentBy::Unseen => Err(PaymentFailure::unavailable(
                "the authorization is used, and the chain's logs do not show by what yet",
            )),
        }
    }
}
