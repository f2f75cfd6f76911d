//! What every handler may use: the state built once per process (cold start), the
//! request and response types, the caller's address, and our own failure's answer.

use std::sync::Arc;

use umpire_checker::Judge;
use umpire_core::signer::{PublicKey, Signer};
use umpire_core::{ApiError, ErrorCode};
use umpire_store::{JobQueue, Store};

use crate::plumbing::config::Config;
use crate::plumbing::routes::Route;
use crate::plumbing::validation::Validation;

pub use crate::plumbing::wire::{ClientIp, Request, Response};

/// Where the MCP endpoint's paid tools send their purchases: in-process to the paid
/// routes (`umpire serve`), or to the functions that sell them (AWS). Declared here,
/// below the routes, so the state can hold one without knowing who implements it.
#[async_trait::async_trait]
pub trait PaidRoutes: Send + Sync {
    /// Answers `req` as `route` (`Route::Buy` or `Route::Reputation`) does over HTTP.
    async fn call(&self, state: &AppState, route: Route, req: Request) -> Response;
}

/// What every handler may use. Cheap to share: build once per process (cold start).
pub struct AppState {
    pub config: Config,
    pub signer: Arc<dyn Signer>,
    /// Keys that signed earlier documents and are still published for verification.
    pub retired_keys: Vec<PublicKey>,
    /// The key the next deploy signs with, published ahead of its first document (a
    /// rotation's first step).
    pub next_key: Option<PublicKey>,
    /// The isolated checker; None in functions that never judge.
    pub checker: Option<Arc<dyn Judge>>,
    pub store: Arc<dyn Store>,
    /// Delayed jobs (sworn pass 2, webhook retries); None where nothing is scheduled.
    pub queue: Option<Arc<dyn JobQueue>>,
    /// How payments are verified and settled (empty: nothing can be bought).
    pub payments: umpire_pay::Payments,
    /// The SOL spot rate source, when native SOL is accepted.
    pub sol_price: Option<Arc<umpire_pay::price::SolPriceFeed>>,
    /// The one way out to the internet; None in functions that never resolve or fetch.
    pub fetcher: Option<Arc<umpire_fetch::Fetcher>>,
    /// Where feedback payments and signatures are read; None: `receipts_off`.
    pub feedback_chain: Option<Arc<umpire_chain::FeedbackChain>>,
    /// Where the MCP endpoint's paid tools send their purchases; None: not offered.
    pub paid_routes: Option<Arc<dyn PaidRoutes>>,
    /// The ERC-8004 Validation Registry this deployment answers on (with the
    /// validator's key where answers are posted); None: it answers none.
    pub validation: Option<Arc<Validation>>,
}

/// What the routes that store nothing read (health, the key document, the verify
/// page): the configuration and the published keys. A function serving one of those
/// holds this, not an [`AppState`], so it has no store, payments or checker to reach
/// for by mistake, and links none of them.
pub struct Published {
    pub config: Config,
    pub signer: Arc<dyn Signer>,
    /// Keys that signed earlier documents and are still published for verification.
    pub retired_keys: Vec<PublicKey>,
    /// The key the next deploy signs with, published ahead of its first document.
    pub next_key: Option<PublicKey>,
}

/// Read access to what [`Published`] holds, from it or from a whole [`AppState`].
pub trait Keys {
    fn config(&self) -> &Config;
    fn signer(&self) -> &dyn Signer;
    fn retired_keys(&self) -> &[PublicKey];
    fn next_key(&self) -> Option<&PublicKey>;

    /// The key signing now; None on a deployment whose key is not made yet.
    fn active_key(&self) -> Option<PublicKey> {
        self.signer().keyed().then(|| PublicKey::of(self.signer()))
    }

    /// Every published key, in the key document's order: active, next, retired.
    fn public_keys(&self) -> Vec<PublicKey> {
        self.active_key()
            .into_iter()
            .chain(self.next_key().cloned())
            .chain(self.retired_keys().iter().cloned())
            .collect()
    }
}

/// Both states hold the same three fields under the same names.
macro_rules! keys_from_fields {
    ($($state:ty),*) => {$(
        impl Keys for $state {
            fn config(&self) -> &Config {
                &self.config
            }

            fn signer(&self) -> &dyn Signer {
                self.signer.as_ref()
            }

            fn retired_keys(&self) -> &[PublicKey] {
                &self.retired_keys
            }

            fn next_key(&self) -> Option<&PublicKey> {
                self.next_key.as_ref()
            }
        }
    )*};
}

keys_from_fields!(Published, AppState);

/// Our own failure, reported as `500 internal` (safe to retry) and logged; the
/// details stay in the log.
pub fn internal(e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "internal error");
    ApiError::new(
        ErrorCode::Internal,
        "Umpire could not complete the request",
        "Retry in a few seconds; nothing was charged or changed that a retry would repeat.",
    )
    .with_retry_after(1)
}

impl AppState {
    /// What every route needs: the configuration, the signing key and the store. Nothing
    /// is judged, bought, queued, fetched or read on chain until a `with_*` call below
    /// adds it. Every place that builds a state (the functions, `umpire serve`, the
    /// tests) starts here.
    pub fn new(config: Config, signer: Arc<dyn Signer>, store: Arc<dyn Store>) -> AppState {
        AppState {
            config,
            signer,
            retired_keys: Vec::new(),
            next_key: None,
            checker: None,
            store,
            queue: None,
            payments: umpire_pay::Payments::default(),
            sol_price: None,
            fetcher: None,
            feedback_chain: None,
            paid_routes: None,
            validation: None,
        }
    }

    pub fn with_validation(self, validation: Option<Arc<Validation>>) -> AppState {
        AppState { validation, ..self }
    }

    pub fn with_store(self, store: Arc<dyn Store>) -> AppState {
        AppState { store, ..self }
    }

    pub fn with_retired_keys(self, retired_keys: Vec<PublicKey>) -> AppState {
        AppState {
            retired_keys,
            ..self
        }
    }

    pub fn with_next_key(self, next_key: Option<PublicKey>) -> AppState {
        AppState { next_key, ..self }
    }

    pub fn with_checker(self, checker: Option<Arc<dyn Judge>>) -> AppState {
        AppState { checker, ..self }
    }

    pub fn with_queue(self, queue: Option<Arc<dyn JobQueue>>) -> AppState {
        AppState { queue, ..self }
    }

    pub fn with_payments(self, payments: umpire_pay::Payments) -> AppState {
        AppState { payments, ..self }
    }

    pub fn with_sol_price(
        self,
        sol_price: Option<Arc<umpire_pay::price::SolPriceFeed>>,
    ) -> AppState {
        AppState { sol_price, ..self }
    }

    pub fn with_fetcher(self, fetcher: Option<Arc<umpire_fetch::Fetcher>>) -> AppState {
        AppState { fetcher, ..self }
    }

    pub fn with_feedback_chain(
        self,
        feedback_chain: Option<Arc<umpire_chain::FeedbackChain>>,
    ) -> AppState {
        AppState {
            feedback_chain,
            ..self
        }
    }

    pub fn with_paid_routes(self, paid_routes: Option<Arc<dyn PaidRoutes>>) -> AppState {
        AppState {
            paid_routes,
            ..self
        }
    }

    /// The URL policy in force (the fetcher's, or the production default).
    pub fn fetch_policy(&self) -> umpire_fetch::Policy {
        self.fetcher
            .as_ref()
            .map(|f| f.policy().clone())
            .unwrap_or_default()
    }

    /// A fresh SOL spot rate, or None (the SOL option is then left out).
    pub async fn sol_rate(&self) -> Option<umpire_x402::rails::SolRate> {
        match &self.sol_price {
            Some(feed) => feed.rate(self.config.clock.now()).await,
            None => None,
        }
    }
}
