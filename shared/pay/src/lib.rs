//! Settling x402 payments (the protocol itself is `umpire-x402`): verifying a matched
//! payment against the chain and settling it, on our own (EVM
//! `transferWithAuthorization` broadcast by our settler, Solana transactions
//! co-signed and sent) or through a facilitator; the SOL price feed that prices native
//! SOL; and the rails' configuration from the environment.

pub mod config;
pub mod evm;
pub mod price;
pub mod settle;
pub mod settler;
pub mod solana;

pub use settle::{PaymentContext, Payments, Settler};
