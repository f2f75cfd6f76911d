//! The thin layer between AWS Lambda and the shared handlers: convert the API
//! Gateway (HTTP API, payload v2) event into `http::Request<Bytes>`, call the one
//! handler this function serves, convert back; or, for the worker, hand each SQS
//! message to the shared job runner. Everything else lives in `shared/`.

pub mod checker;
mod cold_start;
pub mod fns;
mod keys;
mod lambda;
mod logging;
pub mod paid;
pub mod pretraffic;
mod role;
mod vars;
pub mod worker;

pub use aws_lambda_events;

pub use cold_start::{CHECKER_BIN, ColdStart, published_from_env, state_from_env};
pub use fns::Function;
pub use keys::{
    NEXT_KEY_ENV, PUBLIC_KEY_ENV, RETIRED_KEYS_ENV, SEED_CIPHERTEXT_ENV, SEED_HEX_ENV,
    SIGNING_KEY_ENV, VALIDATOR_CIPHERTEXT_ENV, keygen_pending, next_key_from_vars, signer_from_env,
    signer_from_vars,
};
pub use lambda::{client_ip, invoke, invoke_function, run};
pub use logging::init_logging;
pub use role::{Needs, Part, Role};
pub use vars::{SECRET_VARS, Vars, refuse_local_switches};
