//! What buyers say of merchants: payment-verified feedback, and the paid reputation
//! report read from it.

pub mod feedback;
pub mod reputation;
