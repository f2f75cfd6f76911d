//! What every route shares: routing, answers and errors, rate limits, metrics, and
//! CPU work kept off the async threads.

pub mod cpu;
pub mod limits;
pub mod metrics;
pub mod respond;
pub mod routes;
