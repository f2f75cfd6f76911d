//! The fetcher: the only code in Umpire that opens a connection to a URL a customer
//! named. GET only, an honest user agent, redirects followed by hand (each hop
//! re-checked and counted), at most [`FETCH_READ_CAP_BYTES`] read, one deadline for
//! the whole fetch, and a per-host politeness interval.
//!
//! Where the policy is enforced, and why there:
//! - IP-literal hosts: reqwest dials them without asking any resolver, so every URL
//!   (the first and every redirect target) goes through [`Policy::check_url`] here.
//! - Names: the resolver handed to reqwest returns only allowed addresses, and reqwest
//!   dials exactly what it returns, so DNS rebinding (public at validation, private at
//!   connect) finds nothing to dial. There is no second lookup to race.
//! - Proxies: none (`no_proxy`), so no environment variable reroutes a fetch.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use umpire_core::ErrorCode;
use umpire_core::eval::FetchedBody;
use umpire_core::hash::sha256_hex;
use umpire_core::json::Value;
use umpire_core::problem::ProblemCode;
use umpire_core::product::{
    FETCH_MAX_REDIRECTS, FETCH_READ_CAP_BYTES, FETCH_TIMEOUT_SECS, FETCH_USER_AGENT,
    OBSERVED_HEADER_CAP_CHARS, OBSERVED_HEADERS,
};
use umpire_host::Clock;
use url::Url;

use crate::policy::{Policy, PolicyError};
use crate::resolve::NameResolver;

/// The least time between two fetches from one host by one process.
pub const POLITENESS_INTERVAL: Duration = Duration::from_millis(1000);

#[derive(Debug, Clone)]
pub struct FetchConfig {
    pub policy: Policy,
    pub read_cap: u64,
    pub max_redirects: u32,
    pub timeout: Duration,
    pub politeness: Duration,
    /// Extra trusted roots (PEM). Tests only: a local HTTPS server's certificate.
    pub extra_roots_pem: Vec<Vec<u8>>,
}

impl Default for FetchConfig {
    fn default() -> Self {
        FetchConfig {
            policy: Policy::default(),
            read_cap: FETCH_READ_CAP_BYTES,
            max_redirects: FETCH_MAX_REDIRECTS,
            timeout: Duration::from_secs(FETCH_TIMEOUT_SECS),
            politeness: POLITENESS_INTERVAL,
            extra_roots_pem: Vec::new(),
        }
    }
}

/// The leaf certificate of an https response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsObservation {
    pub subject: String,
    pub issuer: String,
    pub valid_from: String,
    pub valid_to: String,
    pub fingerprint_sha256: String,
}

/// What one fetch saw, as the signed document records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    pub requested_url: String,
    /// The last URL requested (after redirects).
    pub url: String,
    pub redirect_hops: u32,
    pub fetched_at: String,
    pub http_status: Option<u16>,
    pub resolved_address: Option<String>,
    pub tls: Option<TlsObservation>,
    pub headers: Vec<(String, String)>,
    pub body_sha256: Option<String>,
    pub body_bytes: u64,
    pub truncated: bool,
    /// Why the fetch stopped short of a final response, if it did.
    pub error: Option<String>,
}

impl Observation {
    pub fn to_value(&self) -> Value {
        let tls = self.tls.as_ref().map_or(Value::Null, |t| {
            Value::object()
                .with("subject", t.subject.as_str())
                .with("issuer", t.issuer.as_str())
                .with("valid_from", t.valid_from.as_str())
                .with("valid_to", t.valid_to.as_str())
                .with("fingerprint_sha256", t.fingerprint_sha256.as_str())
        });
        let mut headers = Value::object();
        for (k, v) in &self.headers {
            headers.insert(k.as_str(), v.as_str());
        }
        Value::object()
            .with("requested_url", self.requested_url.as_str())
            .with("url", self.url.as_str())
            .with("redirect_hops", u64::from(self.redirect_hops))
            .with("fetched_at", self.fetched_at.as_str())
            .with("http_status", self.http_status.map(u64::from))
            .with("resolved_address", self.resolved_address.clone())
            .with("tls", tls)
            .with("headers", headers)
            .with("body_sha256", self.body_sha256.clone())
            .with("body_bytes", self.body_bytes)
            .with("truncated", self.truncated)
            .with("error", self.error.clone())
    }
}

/// One fetch: what the checks judge (None when no final response arrived) and what
/// the document records.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub body: Option<FetchedBody>,
    pub observation: Observation,
}

/// Refused by policy at connect time: carried through reqwest's error chain.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
struct ConnectRefused(String);

/// The resolver reqwest uses: our lookup, then only addresses the policy allows.
struct FilteringResolver {
    inner: Arc<dyn NameResolver>,
    policy: Policy,
}

impl Resolve for FilteringResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let inner = self.inner.clone();
        let policy = self.policy.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found = inner.lookup(&host).await.map_err(|e| {
                ConnectRefused(format!("dns_failure: {host} does not resolve ({e})"))
            })?;
            let allowed: Vec<SocketAddr> = found
                .iter()
                .filter(|ip| policy.allows_ip(**ip))
                .map(|ip| SocketAddr::new(*ip, 0))
                .collect();
            if allowed.is_empty() {
                let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
                return Err(Box::new(ConnectRefused(format!(
                    "blocked_host: {host} resolves only to non-public addresses ({})",
                    shown.join(", ")
                )))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// The policy's refusal if one is in the error chain, else the error itself.
fn describe(e: &reqwest::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(r) = s.downcast_ref::<ConnectRefused>() {
            return r.0.clone();
        }
        source = s.source();
    }
    if e.is_timeout() {
        return "timeout: no complete answer in time".into();
    }
    if e.is_connect() {
        return format!("connection failed: {e}");
    }
    format!("request failed: {e}")
}

pub struct Fetcher {
    client: reqwest::Client,
    config: FetchConfig,
    resolver: Arc<dyn NameResolver>,
    /// host → the earliest instant the next fetch from it may start.
    next_slot: Mutex<HashMap<String, Instant>>,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Fetcher {
    pub fn new(config: FetchConfig, resolver: Arc<dyn NameResolver>) -> Result<Fetcher, String> {
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(FETCH_USER_AGENT)
            .tls_info(true)
            .connect_timeout(config.timeout)
            .pool_max_idle_per_host(0)
            .dns_resolver(Arc::new(FilteringResolver {
                inner: resolver.clone(),
                policy: config.policy.clone(),
            }));
        for pem in &config.extra_roots_pem {
            let cert = reqwest::Certificate::from_pem(pem)
                .map_err(|e| format!("root certificate: {e}"))?;
            builder = builder.tls_certs_merge([cert]);
        }
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(Fetcher {
            client,
            config,
            resolver,
            next_slot: Mutex::new(HashMap::new()),
        })
    }

    /// The production fetcher, plus the test-only switches a test build takes (feature
    /// `test-switches`; any other build refuses them, see [`crate::policy::test_switch`]):
    /// `UMPIRE_TEST_FETCH_ALLOW` (addresses fetched despite the policy),
    /// `UMPIRE_TEST_FETCH_HOSTS` (name=ip answers), `UMPIRE_TEST_FETCH_ROOTS` (a PEM file
    /// of extra trusted roots). Each one that is set is logged as a warning.
    pub fn from_env() -> Result<Fetcher, String> {
        let policy = Policy::from_env()?;
        if !policy.test_allow.is_empty() {
            tracing::warn!(allow = ?policy.test_allow, "TEST ONLY: the fetch policy admits non-public addresses");
        }
        let mut extra_roots_pem = Vec::new();
        if let Some(path) = crate::policy::test_switch("UMPIRE_TEST_FETCH_ROOTS")? {
            tracing::warn!(path, "TEST ONLY: extra trusted roots for fetches");
            extra_roots_pem.push(
                std::fs::read(&path).map_err(|e| format!("UMPIRE_TEST_FETCH_ROOTS {path}: {e}"))?,
            );
        }
        let resolver = match crate::policy::test_switch("UMPIRE_TEST_FETCH_HOSTS")? {
            Some(spec) => {
                tracing::warn!(hosts = spec, "TEST ONLY: fixed DNS answers for fetches");
                crate::resolve::StaticResolver::parse(&spec)
                    .map_err(|e| format!("UMPIRE_TEST_FETCH_HOSTS: {e}"))?
            }
            None => crate::resolve::StaticResolver::default(),
        };
        Fetcher::new(
            FetchConfig {
                policy,
                extra_roots_pem,
                ..FetchConfig::default()
            },
            Arc::new(resolver),
        )
    }

    pub fn policy(&self) -> &Policy {
        &self.config.policy
    }

    /// Validation-time check of a URL: the static policy, then (for names) a lookup
    /// whose answers must all be allowed. Nothing is fetched.
    pub async fn precheck(&self, raw: &str) -> Result<(), PolicyError> {
        let url = self.config.policy.check_url(raw)?;
        let Some(url::Host::Domain(host)) = url.host() else {
            return Ok(());
        };
        let found = self.resolver.lookup(host).await.map_err(|e| PolicyError {
            code: ErrorCode::DnsFailure,
            problem_code: ProblemCode::DnsFailure,
            message: format!("{host} does not resolve: {e}"),
            hint: "Check the host name; it must resolve in public DNS.",
        })?;
        if let Some(ip) = found.iter().find(|ip| !self.config.policy.allows_ip(**ip)) {
            return Err(PolicyError {
                code: ErrorCode::BlockedHost,
                problem_code: ProblemCode::BlockedHost,
                message: format!("{host} resolves to {ip}, which is not a public address"),
                hint: "Use a URL on a public host; private, loopback, link-local and internal names are never fetched.",
            });
        }
        Ok(())
    }

    /// Waits for this host's turn, keeping `politeness` between fetches from it.
    async fn take_turn(&self, host: &str) {
        let wait = {
            let mut slots = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let start = slots.get(host).copied().filter(|t| *t > now).unwrap_or(now);
            slots.insert(host.to_owned(), start + self.config.politeness);
            // Forget hosts whose slots are long past, so the map does not grow forever.
            slots.retain(|_, t| *t + Duration::from_secs(60) > now);
            start - now
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// GETs `raw`, following at most `max_redirects` redirects, within one deadline.
    pub async fn fetch(&self, raw: &str) -> Fetched {
        let mut obs = Observation {
            requested_url: raw.to_owned(),
            url: raw.to_owned(),
            redirect_hops: 0,
            fetched_at: umpire_core::time::rfc3339(Clock::system().now()),
            http_status: None,
            resolved_address: None,
            tls: None,
            headers: Vec::new(),
            body_sha256: None,
            body_bytes: 0,
            truncated: false,
            error: None,
        };
        let deadline = tokio::time::Instant::now() + self.config.timeout;
        let body = match tokio::time::timeout_at(deadline, self.follow(raw, &mut obs)).await {
            Ok(Ok(b)) => Some(b),
            Ok(Err(e)) => {
                obs.error = Some(e);
                None
            }
            Err(_) => {
                obs.error = Some(format!(
                    "timeout: no complete answer within {} ms",
                    self.config.timeout.as_millis()
                ));
                None
            }
        };
        Fetched {
            body,
            observation: obs,
        }
    }

    /// POSTs a JSON body (webhook delivery) under the same policy, resolver and
    /// politeness as fetches. Redirects are not followed: a delivery answered with a
    /// redirect failed. Returns the status of a 2xx answer, or why it failed.
    pub async fn post_json(
        &self,
        raw: &str,
        body: Vec<u8>,
        headers: &[(&str, String)],
    ) -> Result<u16, String> {
        let url = self
            .config
            .policy
            .check_url(raw)
            .map_err(|e| format!("{}: {}", e.problem_code, e.message))?;
        self.take_turn(url.host_str().unwrap_or_default()).await;
        let mut req = self
            .client
            .post(url)
            .timeout(self.config.timeout)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let resp = req.send().await.map_err(|e| describe(&e))?;
        let status = resp.status();
        if status.is_success() {
            Ok(status.as_u16())
        } else {
            Err(format!("the receiver answered {}", status.as_u16()))
        }
    }

    /// GETs `raw` and every redirect target in turn (each checked against the policy
    /// before it is requested), recording the last hop in `obs`, and reads the final
    /// answer's body.
    async fn follow(&self, raw: &str, obs: &mut Observation) -> Result<FetchedBody, String> {
        let mut current = raw.to_owned();
        loop {
            let url = self
                .config
                .policy
                .check_url(&current)
                .map_err(|e| format!("{}: {}", e.problem_code, e.message))?;
            obs.url = current.clone();
            self.take_turn(url.host_str().unwrap_or_default()).await;
            obs.fetched_at = umpire_core::time::rfc3339(Clock::system().now());
            let resp = self
                .client
                .get(url.clone())
                .send()
                .await
                .map_err(|e| describe(&e))?;
            record_response(&resp, obs);
            if let Some(next) = self.redirect_target(&url, &resp, obs)? {
                current = next;
                continue;
            }
            return self.read_body(resp, obs).await;
        }
    }

    /// Where a redirect answer sends the fetch next, counted as a hop in `obs`; `None`
    /// when `resp` is not a redirect or names no `Location` (it is then the final
    /// answer). Refused past `max_redirects` or when the policy refuses the target.
    fn redirect_target(
        &self,
        url: &Url,
        resp: &reqwest::Response,
        obs: &mut Observation,
    ) -> Result<Option<String>, String> {
        if !resp.status().is_redirection() {
            return Ok(None);
        }
        let location = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let Some(location) = location else {
            return Ok(None);
        };
        if obs.redirect_hops >= self.config.max_redirects {
            return Err(format!(
                "too_many_redirects: more than {} redirects",
                self.config.max_redirects
            ));
        }
        let next = url
            .join(&location)
            .map_err(|e| format!("invalid redirect Location {location:?}: {e}"))?;
        // Checked before it counts as a hop: a refused target is not followed.
        self.config.policy.check_url(next.as_str()).map_err(|e| {
            format!(
                "{}: redirect to {next} refused: {}",
                e.problem_code, e.message
            )
        })?;
        obs.redirect_hops += 1;
        Ok(Some(next.to_string()))
    }

    /// Reads at most `read_cap` bytes of the final answer's body, recording its hash,
    /// size and truncation in `obs`.
    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        obs: &mut Observation,
    ) -> Result<FetchedBody, String> {
        let mut body = Vec::new();
        let mut truncated = false;
        let cap = usize::try_from(self.config.read_cap).unwrap_or(usize::MAX);
        while let Some(chunk) = resp.chunk().await.map_err(|e| describe(&e))? {
            let room = cap - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        obs.body_sha256 = Some(sha256_hex(&body));
        obs.body_bytes = body.len() as u64;
        obs.truncated = truncated;
        Ok(FetchedBody {
            status: resp.status().as_u16(),
            body,
            truncated,
        })
    }
}

/// Records what one answer shows before its body is read: status, the address dialed,
/// the leaf certificate and the observed headers (each capped).
fn record_response(resp: &reqwest::Response, obs: &mut Observation) {
    obs.http_status = Some(resp.status().as_u16());
    obs.resolved_address = resp.remote_addr().map(|a| a.ip().to_string());
    obs.tls = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .and_then(|i| i.peer_certificate())
        .and_then(tls_observation);
    obs.headers = OBSERVED_HEADERS
        .iter()
        .filter_map(|h| {
            let v = resp.headers().get(*h)?;
            let text = String::from_utf8_lossy(v.as_bytes());
            Some((
                (*h).to_owned(),
                text.chars().take(OBSERVED_HEADER_CAP_CHARS).collect(),
            ))
        })
        .collect();
}

fn tls_observation(der: &[u8]) -> Option<TlsObservation> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let time = |t: x509_parser::time::ASN1Time| {
        u64::try_from(t.timestamp())
            .map(umpire_core::time::rfc3339)
            .unwrap_or_else(|_| t.to_string())
    };
    Some(TlsObservation {
        subject: cert.subject().to_string(),
        issuer: cert.issuer().to_string(),
        valid_from: time(cert.validity().not_before),
        valid_to: time(cert.validity().not_after),
        fingerprint_sha256: sha256_hex(der),
    })
}
