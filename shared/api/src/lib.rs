//! Umpire's HTTP handlers: `http::Request<Bytes>` in, `http::Response<Bytes>` out.
//! The same functions serve every Lambda (one route each) and `umpire serve` (all
//! routes in one process), so both answer byte for byte alike.

pub mod config;
pub mod datadir;
pub mod local;
pub mod purchase;
pub mod respond;
pub mod routes;
pub mod verdict;

mod handlers;

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use umpire_checker::CheckerPool;
use umpire_core::signer::{PublicKey, Signer};

pub use config::Config;
pub use routes::Route;

pub type Request = http::Request<Bytes>;
pub type Response = http::Response<Bytes>;

/// The caller's address as the platform saw it (API Gateway's `sourceIp`, or the
/// socket peer locally); never taken from a client-supplied header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

/// What every handler may use. Cheap to share: build once per process (cold start).
pub struct AppState {
    pub config: Config,
    pub signer: Arc<dyn Signer>,
    /// Keys that signed earlier documents and are still published for verification.
    pub retired_keys: Vec<PublicKey>,
    /// The isolated checker; None in functions that never judge.
    pub checker: Option<Arc<CheckerPool>>,
}

impl AppState {
    pub fn public_keys(&self) -> Vec<PublicKey> {
        let mut keys = vec![PublicKey::of(self.signer.as_ref())];
        keys.extend(self.retired_keys.iter().cloned());
        keys
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
        Route::Quote => handlers::quote(state),
        Route::Validate => handlers::validate(state, &req),
    }
}
