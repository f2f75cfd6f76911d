//! Settlement of the EVM `exact` scheme on a chain: verification's reads (the
//! authorization's state, the balance, a simulation of the transfer), our own
//! broadcast of `transferWithAuthorization` (self-settlement) and the proof that it
//! landed, with receipt polls timed to the chain's blocks. The offline half (the
//! signed fields and the signer) is `umpire_x402::evm`.

mod block_clock;
mod chain;

pub use chain::{EvmChain, OnChain, SpentBy, TRANSFER_GAS_LIMIT};
