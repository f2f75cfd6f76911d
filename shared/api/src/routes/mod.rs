//! The top floor: every route's handler by name, the free routes of their own, the MCP
//! endpoint and the job runner. Routes call products and the floors below, never each
//! other.

pub mod free;
pub mod jobs;
pub mod mcp;

use crate::plumbing::respond;
use crate::plumbing::routes::{self, Route};
use crate::plumbing::state::{AppState, Request, Response};
use crate::products::quote;
use crate::products::reputation::{self, feedback};
use crate::products::verdict::{buy, lookup, validate};

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
        Route::Health => free::health(state),
        Route::Key => free::key(state),
        Route::Quote => quote::quote(state, &req).await,
        Route::Validate => validate::validate(state, &req).await,
        Route::Status => lookup::status(state, &req).await,
        Route::Find => lookup::find(state, &req).await,
        Route::Buy => buy::buy(state, &req).await,
        Route::Feedback => feedback::submit(state, &req).await,
        Route::Reputation => reputation::reputation(state, &req).await,
        Route::Mcp => mcp::mcp(state, &req).await,
        Route::OpenApi => free::openapi(),
        Route::VerifyPage => free::verify_page(state),
        Route::AgentRegistration => free::agent_registration(state),
    }
}
