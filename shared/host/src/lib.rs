//! What Umpire reads from the machine it runs on: the wall clock, deadlines on the
//! monotonic clock, and the operating system's random numbers. Everything else is handed
//! them (a [`Clock`], a time, random bytes) as arguments, so `umpire-core` stays a pure
//! function of its inputs and tests can move time forward.

mod clock;
mod random;

pub use clock::{Clock, Deadline};
pub use random::{random_bytes, random_id};
