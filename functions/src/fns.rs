//! One marker type per deployed function: the [`Function`] trait each API function
//! implements (its role and its one handler), the `api_function!` macro that writes
//! them, and the markers themselves.

use umpire_api::products::quote::quote;
use umpire_api::products::reputation::{self, feedback};
use umpire_api::products::verdict::{buy, lookup, validate::validate};
use umpire_api::routes::free as handlers;
use umpire_api::routes::mcp;
use umpire_api::{AppState, Published, Route};

use crate::cold_start::ColdStart;
use crate::role::{Needs, Role};

/// An API function: its role and its one handler, called statically (no routing
/// table in the binary, so other routes' handlers are not linked either).
pub trait Function: Needs {
    /// What the function holds from its cold start on: [`Published`] for the routes
    /// that store nothing, [`AppState`] for the rest.
    type State: ColdStart;

    fn handle(
        state: &Self::State,
        req: umpire_api::Request,
    ) -> impl std::future::Future<Output = umpire_api::Response> + Send;
}

macro_rules! api_function {
    ($(#[$doc:meta])* $name:ident, $route:ident, $state_ty:ty, |$state:ident, $req:ident| $body:expr) => {
        $(#[$doc])*
        pub struct $name;
        impl Needs for $name {
            const ROLE: Role = Role::Api(Route::$route);
        }
        impl Function for $name {
            type State = $state_ty;

            #[allow(unused_variables)]
            async fn handle($state: &$state_ty, $req: umpire_api::Request) -> umpire_api::Response {
                $body
            }
        }
    };
}

api_function!(Health, Health, Published, |s, r| handlers::health(s));
// The key function serves both .well-known documents: the verification keys and
// the ERC-8004 registration file (both published, neither stored).
api_function!(Key, Key, Published, |s, r| {
    // API Gateway sends every /.well-known/{name} here: the two documents, and
    // the table's 404 (with its list of routes) for any other name.
    match umpire_api::plumbing::routes::route_for(r.method(), r.uri().path()) {
        Ok(Route::AgentRegistration) => handlers::agent_registration(s),
        Ok(_) => handlers::key(s),
        Err(e) => umpire_api::plumbing::respond::error(&e),
    }
});
api_function!(Quote, Quote, AppState, |s, r| quote(s, &r).await);
api_function!(Validate, Validate, AppState, |s, r| validate(s, &r).await);
api_function!(Status, Status, AppState, |s, r| lookup::status(s, &r).await);
api_function!(Find, Find, AppState, |s, r| lookup::find(s, &r).await);
api_function!(Buy, Buy, AppState, |s, r| buy::buy(s, &r).await);
api_function!(Feedback, Feedback, AppState, |s, r| feedback::submit(s, &r)
    .await);
api_function!(Reputation, Reputation, AppState, |s, r| {
    reputation::reputation(s, &r).await
});
api_function!(Mcp, Mcp, AppState, |s, r| mcp::mcp(s, &r).await);
api_function!(OpenApi, OpenApi, Published, |s, r| handlers::openapi());
api_function!(VerifyPage, VerifyPage, Published, |s, r| {
    handlers::verify_page(s)
});

/// The SQS worker (sworn pass 2, webhooks).
pub struct Worker;
impl Needs for Worker {
    const ROLE: Role = Role::Worker;
}
