//! The ground floor, what every other floor shares: the state and configuration,
//! routing, answers and errors, JSON bodies, rate limits, metrics, the contract's texts
//! and protocol constants, the ERC-8004 registry connection, and CPU work kept off the
//! async threads. Nothing here knows what is sold or how it is paid for.

pub mod body;
pub mod config;
pub mod cpu;
pub mod limits;
pub mod metrics;
pub mod protocol;
pub mod rate_limits;
pub mod respond;
pub mod routes;
pub mod state;
pub mod validation;
pub mod wire;
