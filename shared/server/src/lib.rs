//! `umpire serve`: every route in one process on a plain HTTP/1.1 listener, on the
//! embedded store. Tests start the same app in their own process ([`embedded_state`],
//! [`run`] on port 0) when they need nothing from outside it.

pub mod datadir;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use umpire_core::product::MAX_BODY_BYTES;
use umpire_core::{ApiError, ErrorCode};

use umpire_checker::{CheckerPool, PoolConfig};
use umpire_store::sqlite::SqliteStore;

use umpire_api::plumbing::respond;
use umpire_api::{AppState, ClientIp, Config, handle};

/// The app on the embedded store: the data directory's signing key (created on first
/// use), its SQLite file (or an in-memory one when not `persistent`), the isolated
/// checker when given, and the payment, fetch and feedback settings of the environment.
pub async fn embedded_state(
    config: Config,
    dir: &Path,
    persistent: bool,
    checker: Option<PoolConfig>,
) -> Result<(AppState, Arc<SqliteStore>), String> {
    // A Lambda function's local-run seed means nothing here: refused, not ignored, so
    // no one believes the documents are signed with the key they set.
    use umpire_api::plumbing::config::SEED_HEX_ENV;
    if std::env::var_os(SEED_HEX_ENV).is_some_and(|v| !v.is_empty()) {
        return Err(format!(
            "{SEED_HEX_ENV} is not read by umpire serve, which signs with the key in its \
             data directory ({}): remove it (`umpire keygen` makes a deployment's key)",
            dir.display()
        ));
    }
    let signer = datadir::load_or_create_signer(dir).map_err(|e| e.to_string())?;
    let store = if persistent {
        SqliteStore::open_in(dir).map_err(|e| format!("{}: {e}", dir.display()))?
    } else {
        SqliteStore::in_memory().map_err(|e| e.to_string())?
    };
    let store = Arc::new(store);
    let checker: Option<Arc<dyn umpire_checker::Judge>> = match checker {
        Some(pool_config) => {
            let pool = CheckerPool::new(pool_config);
            pool.prewarm(2)
                .await
                .map_err(|e| format!("the isolated checker does not work: {e}"))?;
            Some(Arc::new(pool))
        }
        None => None,
    };
    let payments = umpire_pay::config::payments_from_env(&config.rails)
        .await
        .map_err(|e| e.to_string())?;
    let sol_price =
        umpire_pay::config::sol_price_from_env(&config.rails).map_err(|e| e.to_string())?;
    let fetcher = Arc::new(umpire_fetch::Fetcher::from_env()?);
    let feedback_chain = umpire_chain::ChainConfig::from_env()?
        .map(umpire_chain::FeedbackChain::new)
        .transpose()?
        .map(Arc::new);
    // One process checks requests and posts answers: the registry with the key.
    let key = umpire_api::products::verdict::erc8004::key_from_env().map_err(|e| e.to_string())?;
    if config.validator.is_some() && key.is_none() {
        return Err(format!(
            "UMPIRE_VALIDATION_REGISTRY is set, so {} must be too: this process posts the answers",
            umpire_api::products::verdict::erc8004::KEY_HEX_ENV
        ));
    }
    let validation =
        umpire_api::plumbing::validation::Validation::from_config(&config, key)?.map(Arc::new);
    let state = AppState::new(config, Arc::new(signer), store.clone())
        .with_checker(checker)
        .with_queue(Some(store.clone()))
        .with_payments(payments)
        .with_sol_price(sol_price)
        .with_fetcher(Some(fetcher))
        .with_feedback_chain(feedback_chain)
        .with_paid_routes(Some(Arc::new(umpire_api::routes::mcp::InProcess)))
        .with_validation(validation);
    Ok((state, store))
}

/// Serves `listener` until `shutdown` resolves, with what `umpire serve` runs beside
/// the routes: sworn pass 2 and webhook jobs from the embedded store, the facilitator
/// start-up check, and the hourly purge of expired records.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    store: Arc<SqliteStore>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let mut background = tokio::task::JoinSet::new();
    // A facilitator that will not settle what we advertise is worth a loud warning,
    // not a refusal to start (it may be briefly down).
    {
        let state = state.clone();
        background.spawn(async move {
            match state
                .payments
                .facilitator_mismatches(&state.config.rails.rails)
                .await
            {
                Ok(problems) => {
                    for p in problems {
                        tracing::warn!(problem = p, "facilitator configuration");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "facilitator /supported unreachable"),
            }
        });
    }
    // Sworn pass 2 and webhook deliveries from the embedded store's delayed jobs.
    background.spawn(umpire_api::routes::jobs::work_forever(
        state.clone(),
        Duration::from_millis(500),
    ));
    // Retention: reads already hide expired records; this deletes them, hourly.
    let clock = state.config.clock.clone();
    background.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(3600));
        loop {
            every.tick().await;
            match store.purge_expired(clock.now()).await {
                Ok(n) if n > 0 => tracing::info!(deleted = n, "expired records purged"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "purging expired records failed"),
            }
        }
    });
    // The background tasks end with the server (dropping the set aborts them).
    serve(listener, state, shutdown).await
}

/// Purchases running in their own tasks, so a shutdown can let them end.
#[derive(Default)]
struct Purchases {
    running: std::sync::atomic::AtomicUsize,
    ended: tokio::sync::Notify,
}

/// Held by a purchase's task for as long as it runs.
struct Running(Arc<Purchases>);

impl Purchases {
    /// A place for one more purchase, unless [`MAX_PURCHASES_IN_FLIGHT`] run already.
    fn start(self: &Arc<Self>) -> Option<Running> {
        use std::sync::atomic::Ordering;
        let taken = self
            .running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_PURCHASES_IN_FLIGHT).then_some(n + 1)
            });
        taken.ok().map(|_| Running(self.clone()))
    }

    /// Waits for the running purchases to end, at most `limit`.
    async fn drain(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let ended = self.ended.notified();
                if self.running.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                    return;
                }
                ended.await;
            }
        })
        .await;
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0
            .running
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        self.0.ended.notify_waiters();
    }
}

/// Purchases (requests carrying a payment) running at once; past it a purchase is
/// answered `503` with `Retry-After` before anything is looked at or charged. Each one
/// holds a task to its end whatever its client does, so without a cap a flood of
/// payment headers (valid or not) would hold as many tasks.
pub const MAX_PURCHASES_IN_FLIGHT: usize = 256;

/// How long a shutdown waits for purchases in progress (longer than any runs).
const DRAIN_PURCHASES: Duration = Duration::from_secs(60);

/// A connection that has not sent a request's headers within this time is closed
/// (slow or idle clients hold a connection each, not the server).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// A request whose body has not arrived in full within this time is refused with 408:
/// 1 MiB at 100 KB/s, far longer than any real client needs.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; past it a new connection is closed at accept, so a
/// flood of idle sockets cannot use up the process's file descriptors.
pub const MAX_CONNECTIONS: usize = 4096;

/// How long, past the purchases' drain, a stopping server waits for the answers of the
/// last ones to be written.
const ANSWER_AFTER_DRAIN: Duration = Duration::from_secs(5);

/// Serves until `shutdown` resolves; then takes no more connections, closes the idle
/// ones, and waits (up to a minute) for each request in progress to be answered and
/// each purchase in progress to end before it returns, so stopping the server cuts no
/// purchase between its settlement and its record, nor loses its answer.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    serve_capped(listener, state, shutdown, MAX_CONNECTIONS).await
}

/// [`serve`] with at most `max_connections` connections at once (a test reaches a cap
/// of a few dozen in milliseconds, where [`MAX_CONNECTIONS`] takes seconds to open).
pub async fn serve_capped(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
    max_connections: usize,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    let purchases = Arc::new(Purchases::default());
    let connections = Arc::new(tokio::sync::Semaphore::new(max_connections));
    // Told to every connection at shutdown: finish the request in progress (write its
    // answer), then close; an idle one closes at once.
    let (stopping, stop) = tokio::sync::watch::channel(false);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: keep serving the others.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => {
                drop(listener);
                let _ = stopping.send(true);
                // Every connection's answer written (each gives back its slot when it
                // ends), and every purchase ended, its client there or not; at most
                // DRAIN_PURCHASES. A purchase's end alone is not enough: its answer is
                // written by its connection after it, and the process would end first.
                let all = u32::try_from(max_connections).unwrap_or(u32::MAX);
                // A few seconds past the purchases' wait: a purchase ending at its last
                // moment still has its answer written.
                let answered = async {
                    let wait = DRAIN_PURCHASES + ANSWER_AFTER_DRAIN;
                    let _ = tokio::time::timeout(wait, connections.acquire_many(all)).await;
                };
                tokio::join!(answered, purchases.drain(DRAIN_PURCHASES));
                return Ok(());
            }
        };
        let Ok(slot) = connections.clone().try_acquire_owned() else {
            tracing::warn!(%peer, limit = max_connections, "connection limit reached; connection closed");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (state, purchases, mut stop) = (state.clone(), purchases.clone(), stop.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let service = service_fn(move |req| {
                let (state, purchases) = (state.clone(), purchases.clone());
                async move {
                    Ok::<_, std::convert::Infallible>(serve_one(state, &purchases, req, peer).await)
                }
            });
            let connection = http1::Builder::new()
                .keep_alive(true)
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            tokio::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = stop.wait_for(|stopping| *stopping) => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
    }
}

/// A purchase's work in a task of its own that the connection does not own: it runs
/// to its end whatever the client does, as on Lambda (a client that hangs up loses only
/// the answer; resending the same payment gets the purchase).
async fn run_to_its_end(
    state: Arc<AppState>,
    req: umpire_api::Request,
    running: Running,
) -> http::Response<Bytes> {
    let task = async move {
        let response = handle(&state, req).await;
        drop(running);
        response
    };
    match tokio::spawn(task).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "a paid request's task failed");
            // As every `internal` answer: safe to retry, and says when.
            respond::error(
                &ApiError::new(
                    ErrorCode::Internal,
                    "the request failed inside the server",
                    "Resend the identical request with the same payment: you are never charged twice.",
                )
                .with_retry_after(1),
            )
        }
    }
}

/// Whether a request is a purchase: a paid route (a verdict, a reputation report) with
/// an x402 payment, or an MCP call carrying one (a paid tool), the work that may move
/// money. Anything else stays cancellable.
fn carries_payment(req: &umpire_api::Request) -> bool {
    use umpire_api::Route;
    // The route as the router reads it, and a payment header that reads as one (any
    // value would let anyone take purchase slots for free).
    match umpire_api::plumbing::routes::route_for(req.method(), req.uri().path()) {
        Ok(Route::Mcp) => req
            .body()
            .windows(umpire_api::routes::mcp::PAYMENT_META_KEY.len())
            .any(|w| w == umpire_api::routes::mcp::PAYMENT_META_KEY.as_bytes()),
        Ok(Route::Buy | Route::Reputation) => umpire_api::checkout::carries_readable_payment(req),
        _ => false,
    }
}

/// One request from hyper: its body read (within [`BODY_READ_TIMEOUT`] and
/// [`MAX_BODY_BYTES`]), answered, logged to `umpire::access`, and handed back to hyper
/// (with no body for `HEAD`).
async fn serve_one(
    state: Arc<AppState>,
    purchases: &Arc<Purchases>,
    req: http::Request<Incoming>,
    peer: SocketAddr,
) -> http::Response<Full<Bytes>> {
    let started = Instant::now();
    let (mut parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let read = tokio::time::timeout(
        BODY_READ_TIMEOUT,
        Limited::new(body, MAX_BODY_BYTES).collect(),
    );
    let response = match read.await {
        Err(_) => body_timed_out(),
        Ok(Ok(collected)) => {
            parts.extensions.insert(ClientIp(peer.ip()));
            let req = http::Request::from_parts(parts, collected.to_bytes());
            answer(state, purchases, req).await
        }
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            body_too_large()
        }
        Ok(Err(e)) => body_unreadable(&e),
    };
    log_access(&method, &path, &response, started, peer);
    for_hyper(&method, response)
}

/// The answer to a request read in full: a purchase runs to its end in a task of its
/// own (or is refused when [`MAX_PURCHASES_IN_FLIGHT`] run already), anything else is
/// handled here, cancellable with the connection.
async fn answer(
    state: Arc<AppState>,
    purchases: &Arc<Purchases>,
    req: umpire_api::Request,
) -> http::Response<Bytes> {
    if !carries_payment(&req) {
        return handle(&state, req).await;
    }
    // Paid work runs to its end whatever the client does, as on Lambda: a
    // client that hangs up loses only the answer (hyper drops this future
    // with the connection; the task goes on), and resending the same payment
    // gets the purchase. Free routes stay cancellable.
    match purchases.start() {
        Some(running) => run_to_its_end(state, req, running).await,
        None => purchases_busy(),
    }
}

/// The `503` for a purchase past [`MAX_PURCHASES_IN_FLIGHT`], answered before anything
/// is looked at or charged.
fn purchases_busy() -> http::Response<Bytes> {
    tracing::warn!(
        limit = MAX_PURCHASES_IN_FLIGHT,
        "purchase limit reached; answered 503"
    );
    respond::error(
        &ApiError::new(
            ErrorCode::Unavailable,
            "too many purchases are in progress on this server right now",
            "Retry the identical request in a moment; nothing was looked at or charged.",
        )
        .with_detail("reason", "busy")
        .with_retry_after(1),
    )
}

/// The `408` for a body that did not arrive within [`BODY_READ_TIMEOUT`].
fn body_timed_out() -> http::Response<Bytes> {
    let mut r = respond::error(&ApiError::new(
        ErrorCode::InvalidRequest,
        format!(
            "the request body did not arrive within {} s",
            BODY_READ_TIMEOUT.as_secs()
        ),
        "Send the whole body at once, right after the headers.",
    ));
    *r.status_mut() = http::StatusCode::REQUEST_TIMEOUT;
    r
}

/// The answer to a body larger than [`MAX_BODY_BYTES`].
fn body_too_large() -> http::Response<Bytes> {
    respond::error(&ApiError::new(
        ErrorCode::PayloadTooLarge,
        format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
        format!(
            "Send at most {} MiB; deliverable text is capped at {} KB.",
            MAX_BODY_BYTES / (1024 * 1024),
            umpire_core::product::MAX_TEXT_BYTES / 1024
        ),
    ))
}

/// The answer to a body that could not be read for another reason than its size.
fn body_unreadable(e: &dyn std::fmt::Display) -> http::Response<Bytes> {
    respond::error(&ApiError::new(
        ErrorCode::InvalidRequest,
        format!("the request body could not be read: {e}"),
        "Send the body in full with a correct Content-Length or chunked encoding.",
    ))
}

/// One line of the access log (`umpire::access`) for an answered request.
fn log_access(
    method: &http::Method,
    path: &str,
    response: &http::Response<Bytes>,
    started: Instant,
    peer: SocketAddr,
) {
    let status = response.status().as_u16();
    tracing::info!(
        target: "umpire::access",
        %method,
        path,
        status,
        micros = started.elapsed().as_micros() as u64,
        ip = %peer.ip(),
        "request"
    );
}

/// The answer as hyper sends it, with its body dropped for a `HEAD` request.
fn for_hyper(
    method: &http::Method,
    response: http::Response<Bytes>,
) -> http::Response<Full<Bytes>> {
    let (parts, body) = response.into_parts();
    let mut r = http::Response::from_parts(parts, Full::new(body));
    if method == http::Method::HEAD {
        *r.body_mut() = Full::new(Bytes::new());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/api.md: `umpire serve` runs at most 256 purchases at once; the next is
    /// answered `503 unavailable` with `reason: busy` and `Retry-After`, and a place
    /// frees as soon as one ends (and wakes a drain waiting on it). Would catch: the cap
    /// changed or lost (a flood of payment headers holding a task each), a place never
    /// given back, or the refusal losing the detail a client retries on.
    #[tokio::test]
    async fn the_257th_purchase_at_once_is_answered_busy() {
        assert_eq!(MAX_PURCHASES_IN_FLIGHT, 256);
        let purchases = Arc::new(Purchases::default());
        let mut held: Vec<Running> = (0..MAX_PURCHASES_IN_FLIGHT)
            .map(|i| purchases.start().unwrap_or_else(|| panic!("place {i}")))
            .collect();
        assert!(purchases.start().is_none(), "the 257th waits for a place");
        let busy = purchases_busy();
        assert_eq!(busy.status(), 503);
        assert_eq!(
            busy.headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok()),
            Some("1")
        );
        let body = umpire_core::json::parse(busy.body()).expect("a JSON error");
        let field = |k: &str| {
            body.get("error")
                .and_then(|e| e.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        assert_eq!(field("code").as_deref(), Some("unavailable"));
        assert_eq!(field("reason").as_deref(), Some("busy"));
        held.pop();
        let again = purchases.start().expect("a place once one ended");
        // A drain (Ctrl-C) waits for every running purchase, and no longer.
        let draining = {
            let purchases = purchases.clone();
            tokio::spawn(async move { purchases.drain(Duration::from_secs(60)).await })
        };
        tokio::task::yield_now().await;
        assert!(!draining.is_finished(), "purchases still run");
        drop(held);
        drop(again);
        tokio::time::timeout(Duration::from_secs(5), draining)
            .await
            .expect("the drain ends with the last purchase")
            .expect("drain");
    }
}
