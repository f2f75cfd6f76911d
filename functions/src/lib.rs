//! The thin layer between AWS Lambda and the shared handlers: convert the API
//! Gateway (HTTP API, payload v2) event into `http::Request<Bytes>`, call the one
//! handler this function serves, convert back; or, for the worker, hand each SQS
//! message to the shared job runner. Everything else lives in `shared/`.

pub mod checker;
pub mod paid;
pub mod worker;

pub use aws_lambda_events;

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use lambda_http::request::RequestContext;
use lambda_http::{Body, RequestExt, service_fn};
use umpire_api::plumbing::respond;
use umpire_api::{AppState, ClientIp, Config, Published, Route, handle_route};
use umpire_aws::{Service, for_service};
use umpire_checker::{CheckerPool, Judge, PoolConfig};
use umpire_core::product::MAX_BODY_BYTES;
use umpire_core::signer::{LocalSigner, NoKeyYet, PublicKey, PublicKeyOnly, Signer};
use umpire_core::{ApiError, ErrorCode};
use umpire_store::dynamo::{DynamoStore, TableNames};
use umpire_store::sqs::SqsQueue;
use umpire_store::{JobQueue, Store};

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

/// A function's state, built once per cold start for the role `N`.
pub trait ColdStart: Sized + Send + Sync + 'static {
    fn cold_start<N: Needs>() -> impl Future<Output = Result<Self, lambda_http::Error>> + Send;
}

impl ColdStart for AppState {
    fn cold_start<N: Needs>() -> impl Future<Output = Result<AppState, lambda_http::Error>> + Send {
        state_from_env::<N>()
    }
}

impl ColdStart for Published {
    fn cold_start<N: Needs>() -> impl Future<Output = Result<Published, lambda_http::Error>> + Send
    {
        published_from_env::<N>()
    }
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

/// One marker per deployed function.
pub mod fns {
    use super::{Function, Needs, Role};
    use umpire_api::products::quote::quote;
    use umpire_api::products::reputation::{self, feedback};
    use umpire_api::products::verdict::{buy, lookup, validate::validate};
    use umpire_api::routes::free as handlers;
    use umpire_api::routes::mcp;
    use umpire_api::{AppState, Published, Route};

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
}

/// The checker function's binary, which judging functions start as their local checker
/// when no checker function is configured.
pub const CHECKER_BIN: &str = "checker";

/// The sealed seed (`umpire keygen --kms-key-id` prints it), base64.
pub const SEED_CIPHERTEXT_ENV: &str = "UMPIRE_SIGNING_SEED_CIPHERTEXT";
/// The active public key, base64: what non-signing functions publish and name, and
/// what a decrypted seed must match.
pub const PUBLIC_KEY_ENV: &str = "UMPIRE_SIGNING_PUBLIC_KEY";
/// Earlier public keys still published (comma-separated base64), for key rotation.
pub const RETIRED_KEYS_ENV: &str = "UMPIRE_RETIRED_PUBLIC_KEYS";
/// The key a rotation's second deploy signs with, published by its first (base64).
pub const NEXT_KEY_ENV: &str = "UMPIRE_NEXT_PUBLIC_KEY";

/// The next key, if a rotation has begun.
pub fn next_key_from_vars(
    var: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<PublicKey>, lambda_http::Error> {
    match var(NEXT_KEY_ENV).filter(|v| !v.trim().is_empty()) {
        None => Ok(None),
        Some(text) => Ok(Some(PublicKey::from_base64(text.trim()).ok_or_else(
            || {
                format!(
                    "{NEXT_KEY_ENV} must be a base64 Ed25519 public key (umpire keygen prints it)"
                )
            },
        )?)),
    }
}
/// A plain seed in hex: local runs only (`cargo lambda watch`, tests), never in AWS.
pub const SEED_HEX_ENV: &str = "UMPIRE_SIGNING_SEED_HEX";
/// The KMS key the seed is sealed under (its ARN): Decrypt names it.
pub const SIGNING_KEY_ENV: &str = "UMPIRE_SIGNING_KEY_ARN";

/// Variables whose values are secrets. A function is given the secret's ARN in
/// `<NAME>_SECRET` and reads the value from Secrets Manager once, at cold start, so the
/// value never sits in its configuration (readable with lambda:GetFunctionConfiguration).
pub const SECRET_VARS: [&str; 5] = [
    "UMPIRE_EVM_RPC_URL",
    "UMPIRE_FACILITATOR_AUTH",
    "UMPIRE_FEEDBACK_RPC_URL",
    "UMPIRE_SOLANA_RPC_URL",
    "UMPIRE_VALIDATION_RPC_URL",
];

/// The function's variables as its configuration reads them: its environment, with the
/// secrets it was given read in.
#[derive(Default)]
pub struct Vars {
    secrets: std::collections::BTreeMap<String, String>,
}

impl Vars {
    pub fn get(&self, name: &str) -> Option<String> {
        self.secrets
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    }
}

/// Reads every secret this function was given, once; only functions that take payments
/// or read the chain have any, and link the Secrets Manager client.
fn secrets_for<'a, N: Needs>(aws: Option<&'a umpire_aws::SdkConfig>) -> Part<'a, Vars> {
    if const { !(N::ROLE.settles() || N::ROLE.reads_chain() || N::ROLE.validates()) } {
        return ready_part(Vars::default());
    }
    Box::pin(async move {
        let mut vars = Vars::default();
        for name in SECRET_VARS {
            let Some(arn) = std::env::var(format!("{name}_SECRET"))
                .ok()
                .filter(|a| !a.trim().is_empty())
            else {
                continue;
            };
            let aws = aws.ok_or_else(|| {
                format!("{name}_SECRET is set, but this function has no AWS client")
            })?;
            let answer =
                aws_sdk_secretsmanager::Client::new(&for_service(aws, Service::SecretsManager))
                    .get_secret_value()
                    .secret_id(&arn)
                    .send()
                    .await
                    .map_err(|e| {
                        format!(
                            "{name}_SECRET: could not read {arn}: {}",
                            aws_sdk_secretsmanager::error::DisplayErrorContext(e)
                        )
                    })?;
            let value = answer
                .secret_string()
                .ok_or_else(|| format!("{name}_SECRET: {arn} holds no text"))?;
            vars.secrets.insert(name.to_owned(), value.to_owned());
        }
        Ok(vars)
    })
}

/// A cold-start part that awaits, boxed so that a const branch can leave it out.
pub type Part<'a, T> = Pin<Box<dyn Future<Output = Result<T, lambda_http::Error>> + Send + 'a>>;

fn ready_part<'a, T: Send + 'a>(value: T) -> Part<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

/// The signing key this function may hold: functions that sign open the sealed seed
/// with KMS once, here, at cold start; the others hold only the public key, so they
/// need (and get) no kms:Decrypt. `aws` is None in functions without AWS clients.
pub async fn signer_from_env<N: Needs>(
    aws: Option<&umpire_aws::SdkConfig>,
) -> Result<(Arc<dyn Signer>, Vec<PublicKey>), lambda_http::Error> {
    signer_from_vars::<N>(aws, &|name| std::env::var(name).ok()).await
}

/// [`signer_from_env`] with the variables looked up by `var`.
pub async fn signer_from_vars<N: Needs>(
    aws: Option<&umpire_aws::SdkConfig>,
    var: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<(Arc<dyn Signer>, Vec<PublicKey>), lambda_http::Error> {
    let env_nonempty = |name: &str| var(name).filter(|v| !v.trim().is_empty());
    let retired = PublicKey::list_from_base64(&env_nonempty(RETIRED_KEYS_ENV).unwrap_or_default())
        .map_err(|bad| format!("{RETIRED_KEYS_ENV}: {bad:?} is not a base64 Ed25519 public key"))?;
    let published = match env_nonempty(PUBLIC_KEY_ENV) {
        Some(text) => Some(PublicKey::from_base64(&text).ok_or_else(|| {
            format!(
                "{PUBLIC_KEY_ENV} must be a base64 Ed25519 public key (umpire keygen prints it)"
            )
        })?),
        None => None,
    };
    let local = match env_nonempty(SEED_HEX_ENV) {
        Some(hex) => Some(
            LocalSigner::from_seed_hex(&hex)
                .ok_or_else(|| format!("{SEED_HEX_ENV} must be 64 hex characters"))?,
        ),
        None => None,
    };
    if const { !N::ROLE.signs() } {
        // Before the operator's first `umpire keygen` there is no key at all: the
        // function still starts (the first deploy is healthy), naming none.
        return Ok(
            match published.or_else(|| local.as_ref().map(|s| PublicKey::of(s))) {
                Some(public) => (Arc::new(PublicKeyOnly(public)), retired),
                None => (Arc::new(NoKeyYet), retired),
            },
        );
    }
    let signer = match (env_nonempty(SEED_CIPHERTEXT_ENV), local) {
        (Some(sealed), _) => {
            let key = env_nonempty(SIGNING_KEY_ENV).ok_or_else(|| {
                format!("{SIGNING_KEY_ENV} is not set: name the KMS key the seed is sealed under")
            })?;
            open_sealed_seed::<N>(aws, key, sealed).await?
        }
        (None, Some(local)) => {
            tracing::warn!("signing with a plain seed from {SEED_HEX_ENV}: for local runs only");
            local
        }
        (None, None) => {
            return Err(format!(
                "{SEED_CIPHERTEXT_ENV} is not set: run `umpire keygen --kms-key-id <the stack's SigningKeyId output>` and deploy its ciphertext and public key"
            )
            .into());
        }
    };
    if let Some(expected) = &published {
        umpire_keys::check_matches(&signer, expected)?;
    }
    Ok((Arc::new(signer), retired))
}

/// The sealed seed opened with KMS; only signing functions link the KMS client.
fn open_sealed_seed<'a, N: Needs>(
    aws: Option<&'a umpire_aws::SdkConfig>,
    key: String,
    sealed: String,
) -> Part<'a, LocalSigner> {
    match aws {
        Some(aws) if const { N::ROLE.signs() } => Box::pin(async move {
            Ok(umpire_keys::open(
                &aws_sdk_kms::Client::new(&for_service(aws, Service::Kms)),
                &key,
                &sealed,
            )
            .await?)
        }),
        _ => Box::pin(std::future::ready(Err(format!(
            "{SEED_CIPHERTEXT_ENV} is set, but this function has no KMS client"
        )
        .into()))),
    }
}

/// One AWS configuration (region, credentials, endpoint) for every client; None in
/// functions that use no AWS service.
/// Read from the function's environment (region, the role's credentials), not through
/// aws-config's provider chain: see `umpire_aws`.
fn aws_config_for<N: Needs>() -> Result<Option<umpire_aws::SdkConfig>, lambda_http::Error> {
    if const { N::ROLE.stores() } {
        Ok(Some(umpire_aws::sdk_config_from_env()?))
    } else {
        Ok(None)
    }
}

/// The isolated checker, for functions that judge.
fn checker_for<'a, N: Needs>(
    aws: Option<&'a umpire_aws::SdkConfig>,
    config: &'a Config,
) -> Part<'a, Option<Arc<dyn Judge>>> {
    if const { !N::ROLE.judges() } {
        return ready_part(None);
    }
    Box::pin(async move {
        let judge: Arc<dyn Judge> = match (std::env::var(checker::CHECKER_FUNCTION_ENV), aws) {
            // In AWS: the checker function, whose timeout is the check limit.
            (Ok(function), Some(aws)) => Arc::new(checker::LambdaChecker::new(
                aws_sdk_lambda::Client::new(&for_service(aws, Service::Lambda)),
                function,
                config.check_limit,
            )),
            // Without one (cargo lambda watch, tests): the checker function's own
            // binary, built beside this one, run as a child process killed at the check
            // limit. So the judging code lives in the checker's bootstrap alone.
            _ => {
                let pool = CheckerPool::new(PoolConfig::sibling(CHECKER_BIN, config.check_limit)?);
                pool.prewarm(1).await?;
                Arc::new(pool)
            }
        };
        Ok(Some(judge))
    })
}

/// Payments and the SOL price feed, for functions that sell (and the worker, which
/// settles pending purchases).
fn payments_for<'a, N: Needs>(
    config: &'a Config,
    vars: &'a Vars,
) -> Part<
    'a,
    (
        umpire_pay::Payments,
        Option<Arc<umpire_pay::price::SolPriceFeed>>,
    ),
> {
    if const { !N::ROLE.settles() } {
        return ready_part((umpire_pay::Payments::default(), None));
    }
    Box::pin(async move {
        Ok((
            umpire_pay::config::payments_from(&config.rails, |name| vars.get(name)).await?,
            umpire_pay::config::sol_price_from_env(&config.rails)?,
        ))
    })
}

/// Switches that only a local process may take: `UMPIRE_RATE_LIMITS` turns per-IP
/// limits off for `umpire serve` (benchmarks, tests not about limits); a function
/// tunes its limits with `UMPIRE_RATE_LIMIT_<BUCKET>` instead. Set on a function, it
/// stops the cold start with its name. (The fetcher's `UMPIRE_TEST_FETCH_*` are not in
/// a release build at all: `umpire_fetch::policy::test_switch`.)
pub fn refuse_local_switches(var: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    const LOCAL_ONLY: &str = "UMPIRE_RATE_LIMITS";
    match var(LOCAL_ONLY) {
        Some(v) => Err(format!(
            "{LOCAL_ONLY}={v} is a switch for a local `umpire serve`, not a function: remove it \
             (tune a function's limits with UMPIRE_RATE_LIMIT_<BUCKET>)"
        )),
        None => Ok(()),
    }
}

/// The state of a function whose route stores nothing: the configuration and the
/// published keys, no AWS client at all.
pub async fn published_from_env<N: Needs>() -> Result<Published, lambda_http::Error> {
    refuse_local_switches(&|name| std::env::var(name).ok())?;
    let config = Config::from_env()?;
    let (signer, retired_keys) = signer_from_env::<N>(None).await?;
    Ok(Published {
        config,
        signer,
        retired_keys,
        next_key: next_key_from_vars(&|name| std::env::var(name).ok())?,
    })
}

/// Builds the state this function needs, once per cold start. Only the purchase
/// route takes payments, and only it and the worker start the checker.
pub async fn state_from_env<N: Needs>() -> Result<AppState, lambda_http::Error> {
    refuse_local_switches(&|name| std::env::var(name).ok())?;
    let mut config = Config::from_env()?;
    let aws = aws_config_for::<N>()?;
    let (signer, retired_keys) = signer_from_env::<N>(aws.as_ref()).await?;
    let checker = checker_for::<N>(aws.as_ref(), &config).await?;
    let vars = secrets_for::<N>(aws.as_ref()).await?;
    let (payments, sol_price) = payments_for::<N>(&config, &vars).await?;
    let fetcher = if const { N::ROLE.reaches_out() } {
        Some(Arc::new(umpire_fetch::Fetcher::from_env()?))
    } else {
        None
    };
    // Feedback reads the chain for payments to merchants; reports name that chain.
    let feedback_chain = if const { N::ROLE.reads_chain() } {
        umpire_chain::ChainConfig::from_vars(&|name| vars.get(name))?
            .map(umpire_chain::FeedbackChain::new)
            .transpose()?
            .map(Arc::new)
    } else {
        None
    };
    let (store, queue): (Arc<dyn Store>, Option<Arc<dyn JobQueue>>) = match &aws {
        Some(aws) => (
            Arc::new(DynamoStore::from_config(
                &for_service(aws, Service::DynamoDb),
                TableNames::from_env(),
            )),
            match std::env::var("UMPIRE_JOBS_QUEUE_URL") {
                Ok(url) => Some(Arc::new(SqsQueue::from_config(
                    &for_service(aws, Service::Sqs),
                    url,
                ))),
                Err(_) => None,
            },
        ),
        // Functions whose route stores nothing hold a `Published`, not an AppState.
        None => {
            return Err(format!(
                "{:?} stores nothing: its function holds the published keys, not a store",
                N::ROLE
            )
            .into());
        }
    };
    // The registry's RPC is a secret (it may carry an API key).
    if let Some(v) = config.validator.as_mut()
        && let Some(url) = vars.get("UMPIRE_VALIDATION_RPC_URL")
    {
        v.rpc_url = Some(url);
    }
    let validation = validation_for::<N>(aws.as_ref(), &config).await?;
    // The MCP function's paid tools invoke the paid routes' own functions.
    let paid_routes: Option<Arc<dyn umpire_api::plumbing::state::PaidRoutes>> = match &aws {
        Some(aws) if const { matches!(N::ROLE, Role::Api(Route::Mcp)) } => {
            paid::LambdaRoutes::from_env(aws).map(|r| Arc::new(r) as _)
        }
        _ => None,
    };
    Ok(AppState::new(config, signer, store)
        .with_retired_keys(retired_keys)
        .with_next_key(next_key_from_vars(&|name| std::env::var(name).ok())?)
        .with_checker(checker)
        .with_queue(queue)
        .with_payments(payments)
        .with_sol_price(sol_price)
        .with_fetcher(fetcher)
        .with_feedback_chain(feedback_chain)
        .with_paid_routes(paid_routes)
        .with_validation(validation))
}

/// The sealed validator key (`umpire keygen --validator` prints it), base64.
pub const VALIDATOR_CIPHERTEXT_ENV: &str = "UMPIRE_VALIDATOR_KEY_CIPHERTEXT";

/// The ERC-8004 registry this function reads (purchases) or answers on (the worker,
/// with the validator's key opened by KMS), when the deployment answers one. Connected
/// on first use, so a node that is down at a cold start fails only what needs it.
fn validation_for<'a, N: Needs>(
    aws: Option<&'a umpire_aws::SdkConfig>,
    config: &'a Config,
) -> Part<'a, Option<Arc<umpire_api::plumbing::validation::Validation>>> {
    if const { !N::ROLE.validates() } {
        return ready_part(None);
    }
    if config.validator.is_none() {
        return ready_part(None);
    }
    Box::pin(async move {
        let key = if matches!(N::ROLE, Role::Worker) {
            validator_key(aws).await?
        } else {
            None
        };
        Ok(umpire_api::plumbing::validation::Validation::from_config(config, key)?.map(Arc::new))
    })
}

/// The worker's validator key: sealed (`UMPIRE_VALIDATOR_KEY_CIPHERTEXT`, opened with
/// the signing key's KMS key under its own encryption context), or plain for local
/// runs (`UMPIRE_VALIDATOR_KEY_HEX`).
async fn validator_key(
    aws: Option<&umpire_aws::SdkConfig>,
) -> Result<Option<alloy::signers::local::PrivateKeySigner>, lambda_http::Error> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    match (var(VALIDATOR_CIPHERTEXT_ENV), aws) {
        (Some(sealed), Some(aws)) => {
            let key_id = var(SIGNING_KEY_ENV).ok_or_else(|| {
                format!("{SIGNING_KEY_ENV} is not set: name the KMS key the validator key is sealed under")
            })?;
            let bytes = umpire_keys::open_secret(
                &aws_sdk_kms::Client::new(&for_service(aws, Service::Kms)),
                &key_id,
                &sealed,
                umpire_keys::Purpose::ValidatorKey,
            )
            .await?;
            let key = alloy::signers::local::PrivateKeySigner::from_bytes(&bytes.into())
                .map_err(|e| format!("the sealed validator key is not a secp256k1 key: {e}"))?;
            Ok(Some(key))
        }
        (Some(_), None) => Err(format!(
            "{VALIDATOR_CIPHERTEXT_ENV} is set, but this function has no KMS client"
        )
        .into()),
        (None, _) => Ok(umpire_api::products::verdict::erc8004::key_from_env()?),
    }
}

/// The caller's IP as API Gateway saw it (`requestContext.http.sourceIp`); headers
/// such as X-Forwarded-For are the client's to forge and are ignored.
pub fn client_ip(req: &lambda_http::Request) -> Option<ClientIp> {
    match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx
            .http
            .source_ip
            .as_deref()?
            .parse::<IpAddr>()
            .ok()
            .map(ClientIp),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// One invocation: event in, API Gateway response out. Never fails: every problem
/// becomes an error body. Routed at run time: tests drive every route through it;
/// deployed binaries use [`invoke_function`], which links only their own handler.
pub async fn invoke(
    state: &AppState,
    route: Route,
    req: lambda_http::Request,
) -> lambda_http::Response<Body> {
    convert(req, |r| handle_route(state, route, r)).await
}

/// [`invoke`] for the one function `F`.
pub async fn invoke_function<F: Function>(
    state: &F::State,
    req: lambda_http::Request,
) -> lambda_http::Response<Body> {
    convert(req, |r| F::handle(state, r)).await
}

async fn convert<Fut>(
    req: lambda_http::Request,
    handle: impl FnOnce(umpire_api::Request) -> Fut,
) -> lambda_http::Response<Body>
where
    Fut: std::future::Future<Output = umpire_api::Response>,
{
    let ip = client_ip(&req);
    let (mut parts, body) = req.into_parts();
    let bytes = match body {
        Body::Empty => Bytes::new(),
        Body::Text(t) => Bytes::from(t),
        Body::Binary(b) => Bytes::from(b),
        #[allow(unreachable_patterns)]
        _ => Bytes::new(),
    };
    let response = if bytes.len() > MAX_BODY_BYTES {
        respond::error(&ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
            "Send at most 1 MiB; deliverable text is capped at 200 KB.",
        ))
    } else {
        if let Some(ip) = ip {
            parts.extensions.insert(ip);
        }
        handle(http::Request::from_parts(parts, bytes)).await
    };
    // Our own failure (refusals are 4xx/503): counted against this version, which a
    // rollout rolls back on.
    if response.status() == http::StatusCode::INTERNAL_SERVER_ERROR {
        umpire_api::plumbing::metrics::record_for_version(
            umpire_api::plumbing::metrics::Metric::Internal5xx,
        );
    }
    let (parts, body) = response.into_parts();
    let body = match String::from_utf8(body.to_vec()) {
        Ok(text) if text.is_empty() => Body::Empty,
        Ok(text) => Body::Text(text),
        Err(e) => Body::Binary(e.into_bytes()),
    };
    lambda_http::Response::from_parts(parts, body)
}

/// JSON logs without timestamps: CloudWatch adds its own.
pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // RUST_LOG as `level` or `target=level,...` directives: `Targets` reads them without
    // EnvFilter's regex engine, which no bootstrap should carry just for logging.
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|text| text.parse::<tracing_subscriber::filter::Targets>().ok())
        .unwrap_or_else(|| {
            tracing_subscriber::filter::Targets::new().with_default(tracing::Level::INFO)
        });
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .json()
                // A purchase's and a job's fields (ids and hashes) on each of its lines.
                .with_current_span(true)
                .with_span_list(false)
                .with_ansi(false)
                .without_time(),
        )
        .with(filter)
        .init();
}

/// True when this function signs and the stack was deployed before its key was made
/// (no sealed seed, no local seed): it then answers every request with
/// [`umpire_api::routes::free::not_keyed`] rather than failing to start, so a paid
/// route on a first deploy says what step is missing, and charges nothing.
pub fn keygen_pending<N: Needs>(var: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |name: &str| var(name).is_some_and(|v| !v.trim().is_empty());
    N::ROLE.signs() && !set(SEED_CIPHERTEXT_ENV) && !set(SEED_HEX_ENV)
}

/// The whole life of an API function: log setup, cold start, then serve events.
pub async fn run<F: Function>() -> Result<(), lambda_http::Error> {
    init_logging();
    if keygen_pending::<F>(&|name| std::env::var(name).ok()) {
        tracing::warn!(
            "no signing key yet: every request is refused until `umpire keygen` is deployed"
        );
        return lambda_http::run(service_fn(|req: lambda_http::Request| async move {
            umpire_api::plumbing::metrics::record(umpire_api::plumbing::metrics::Metric::NotKeyed);
            let refusal = umpire_api::routes::free::not_keyed();
            Ok::<_, Infallible>(convert(req, |_| async move { respond::error(&refusal) }).await)
        }))
        .await;
    }
    let state = Arc::new(F::State::cold_start::<F>().await?);
    lambda_http::run(service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(invoke_function::<F>(&state, req).await) }
    }))
    .await
}
