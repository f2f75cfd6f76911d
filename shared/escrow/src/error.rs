//! What can go wrong reading or writing an escrow (or a registry), and whether trying
//! again later could help.

use alloy::primitives::{Address, B256, U256};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EscrowError {
    #[error("{0}")]
    Config(String),
    #[error("the RPC failed on {what}: {message}")]
    Rpc { what: &'static str, message: String },
    #[error("job {0} does not exist on this contract")]
    UnknownJob(U256),
    #[error("the chain refused {what}: {message}")]
    Refused { what: &'static str, message: String },
    /// A transaction of ours whose simulation passed reverted once mined: the chain's
    /// state moved in between (someone acted first), or it ran out of gas. Worth trying
    /// again: the next attempt simulates first and re-reads what is there.
    #[error(
        "transaction {transaction} ({what}) reverted once mined though its simulation passed (gas used {gas_used} of {gas_limit}); run again: it is simulated first"
    )]
    Reverted {
        what: &'static str,
        transaction: B256,
        gas_used: u64,
        gas_limit: u64,
    },
    /// A transaction from our key (the evaluator's, the validator's) is not mined yet:
    /// sending another could act twice (the second one reverting, or answering twice).
    #[error("a transaction from {0} (our key) is still pending; wait for it, then run again")]
    Pending(Address),
    /// The contract's `getJob` answers in none of the layouts known to be deployed:
    /// asking again will not change that.
    #[error(
        "not an ERC-8183 escrow we can read: {0}'s getJob answers in neither the reference implementation's layout nor the earlier eight-field one (docs/erc8183.md)"
    )]
    Unreadable(Address),
}

impl EscrowError {
    /// Worth trying again later: the chain did not answer, is still busy with us, or
    /// moved between a simulation and its transaction.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            EscrowError::Rpc { .. } | EscrowError::Pending(_) | EscrowError::Reverted { .. }
        )
    }
}
