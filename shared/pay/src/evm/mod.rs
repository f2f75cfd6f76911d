//! Settlement of the EVM `exact` scheme on a chain: verification's reads (the
//! authorization's state, the balance, a simulation of the transfer), our own
//! broadcast of `transferWithAuthorization` (self-settlement) and the proof that it
//! landed, with receipt polls timed to the chain's blocks. The offline half (the
//! signed fields and the signer) is `umpire_x402::evm`.

mod block_clock;
mod chain;

pub use chain::{
    DEFAULT_FEE_CAP_WEI, DEFAULT_GAS_CAP, EvmChain, OnChain, REPLACE_AFTER_BLOCKS,
    REVERT_COOLING_OFF, SpentBy, TRANSFER_GAS_LIMIT,
};
