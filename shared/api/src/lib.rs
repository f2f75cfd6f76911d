//! Umpire's HTTP handlers: `http::Request<Bytes>` in, `http::Response<Bytes>` out.
//! The same functions serve every Lambda (one route each) and `umpire serve` (all
//! routes in one process), so both answer byte for byte alike.

pub mod config;
pub mod erc8004;
pub mod free;
pub mod mcp;
pub mod merchant;
pub mod paid;
pub mod plumbing;
pub mod sworn;

use free::{handlers, lookup};
use merchant::{feedback, reputation};
use paid::buy;
use plumbing::{respond, routes};

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use umpire_checker::Judge;
use umpire_core::signer::{PublicKey, Signer};
use umpire_core::{ApiError, ErrorCode};
use umpire_store::{JobQueue, Store};

pub use config::Config;
pub use routes::Route;

pub type Request = http::Request<Bytes>;
pub type Response = http::Response<Bytes>;

/// The caller's address as the platform saw it (API Gateway's `sourceIp`, or the
/// socket peer locally); never taken from a client-supplied header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

impl ClientIp {
    /// The address the transport attached to the request, if any.
    pub fn of(req: &Request) -> Option<ClientIp> {
        req.extensions().get::<ClientIp>().copied()
    }
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
    pub paid_routes: Option<Arc<dyn mcp::PaidRoutes>>,
    /// The ERC-8004 Validation Registry this deployment answers on (with the
    /// validator's key where answers are posted); None: it answers none.
    pub validation: Option<Arc<erc8004::Validation>>,
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

    pub fn with_validation(self, validation: Option<Arc<erc8004::Validation>>) -> AppState {
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

    pub fn with_paid_routes(self, paid_routes: Option<Arc<dyn mcp::PaidRoutes>>) -> AppState {
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

/// Routes by method and path, then handles.
pub async fn handle(state: &AppState, req: Request) -> Response {
    match routes::route_for(req.method(), req.uri().path()) {
        Ok(route) => handle_route(state, route, req).await,
        Err(e) => respond::error(&e),
    }
}

/// Handles a request already known to be for `route` (a Lambda serves exactly one).
pub async fn handle_route(state: &AppState, route: Route, req: Request) -> Response {
    match route {
        Route::Health => handlers::health(state),
        Route::Key => handlers::key(state),
        Route::Quote => handlers::quote(state, &req).await,
        Route::Validate => handlers::validate(state, &req).await,
        Route::Status => lookup::status(state, &req).await,
        Route::Find => lookup::find(state, &req).await,
        Route::Buy => buy::buy(state, &req).await,
        Route::Feedback => feedback::submit(state, &req).await,
        Route::Reputation => reputation::reputation(state, &req).await,
        Route::Mcp => mcp::mcp(state, &req).await,
        Route::OpenApi => handlers::openapi(),
        Route::VerifyPage => handlers::verify_page(state),
        Route::AgentRegistration => handlers::agent_registration(state),
    }
}
