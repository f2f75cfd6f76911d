//! What a function does, known at compile time: its [`Role`], the [`Needs`] marker
//! each binary names, and the [`Part`] a cold start builds only when the role needs it.

use std::future::Future;
use std::pin::Pin;

use umpire_api::Route;

/// What a function does, and so what its cold start builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Serves one API route.
    Api(Route),
    /// Runs delayed jobs from SQS (sworn pass 2, webhook deliveries).
    Worker,
}

impl Role {
    /// Judging needs the isolated checker: purchases (pass 1) and the worker (pass 2).
    pub const fn judges(self) -> bool {
        matches!(self, Role::Api(Route::Buy) | Role::Worker)
    }

    /// Routes that sign documents; the rest only name or publish the key.
    pub const fn signs(self) -> bool {
        matches!(
            self,
            Role::Api(Route::Buy | Route::Reputation) | Role::Worker
        )
    }

    /// Validation resolves names; purchases and pass 2 fetch; the worker posts webhooks.
    pub const fn reaches_out(self) -> bool {
        matches!(
            self,
            Role::Api(Route::Buy | Route::Validate | Route::Mcp) | Role::Worker
        )
    }

    /// Paid routes take payments.
    pub const fn sells(self) -> bool {
        matches!(self, Role::Api(Route::Buy | Route::Reputation))
    }

    /// Paid routes settle payments; the worker decides (and settles) the purchases
    /// whose settlement had no outcome in time (the reconciler's jobs).
    pub const fn settles(self) -> bool {
        self.sells() || matches!(self, Role::Worker)
    }

    /// Every route but the static documents (health, key, OpenAPI, verify page) reads
    /// or writes storage, if only to count requests against rate limits.
    pub const fn stores(self) -> bool {
        !matches!(
            self,
            Role::Api(Route::Health | Route::Key | Route::OpenApi | Route::VerifyPage)
        )
    }

    /// Purchases check the validation request they name; the worker posts answers.
    pub const fn validates(self) -> bool {
        matches!(self, Role::Api(Route::Buy) | Role::Worker)
    }

    /// Feedback proofs read the chain; reports name it.
    pub const fn reads_chain(self) -> bool {
        matches!(
            self,
            Role::Api(Route::Feedback | Route::Reputation | Route::Mcp)
        )
    }
}

/// What a function's cold start builds, known at compile time: each binary names its
/// own marker type, so the `if const { ... }` branches it does not need (payments,
/// the chain reader, the fetcher, KMS, the checker client, the AWS SDK) are not even
/// linked into it.
///
/// An async fn keeps every `.await` it contains in its state machine, reachable or not,
/// so a gated part that awaits is built by a [`Part`] chosen in a const branch: the
/// branch not taken, and everything only it awaits, then really is dead code.
pub trait Needs {
    const ROLE: Role;
}

/// A cold-start part that awaits, boxed so that a const branch can leave it out.
pub type Part<'a, T> = Pin<Box<dyn Future<Output = Result<T, lambda_http::Error>> + Send + 'a>>;

pub(crate) fn ready_part<'a, T: Send + 'a>(value: T) -> Part<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}
