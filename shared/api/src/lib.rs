//! Umpire's HTTP handlers: `http::Request<Bytes>` in, `http::Response<Bytes>` out.
//! The same functions serve every Lambda (one route each) and `umpire serve` (all
//! routes in one process), so both answer byte for byte alike.
//!
//! Four floors, each using only the floors below it (docs/development.md; `tests/house.rs`
//! holds them):
//!
//! - [`routes`]: the free routes, MCP and the job runner, calling products;
//! - [`products`]: what is sold (verdicts with their sworn and ERC-8004 follow-ups, the
//!   reputation report), each a [`checkout::Product`] plugged into checkout;
//! - [`checkout`]: the generic paid request (ledger, idempotency, settlement, answer),
//!   knowing no product by name;
//! - [`plumbing`]: the state, configuration, answers, bodies, limits, metrics, routing
//!   table and the contract's texts.
//!
//! This file only declares them and names what other crates use.

pub mod checkout;
pub mod plumbing;
pub mod products;
pub mod routes;

pub use plumbing::config::{self, Config};
pub use plumbing::routes::Route;
pub use plumbing::state::{AppState, ClientIp, Keys, Published, Request, Response, internal};
pub use routes::{handle, handle_route};
