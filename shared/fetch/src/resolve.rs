//! Name lookup behind a trait: the system resolver in production, fixed answers in
//! tests (including answers that change between calls, to play DNS rebinding).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::time::Duration;

use tokio::sync::Semaphore;

pub type Lookup<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

pub trait NameResolver: Send + Sync {
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a>;
}

/// Lookups the system resolver runs at once, process-wide. getaddrinfo cannot be
/// cancelled: a lookup whose DNS server never answers holds its thread for the
/// resolver's own timeouts (20 s and more). Bounding them keeps tokio's blocking pool,
/// which the embedded store also runs on, free for everything else.
pub const MAX_LOOKUPS_AT_ONCE: usize = 32;

/// How long one lookup may take before it is a `dns_failure` (its thread may go on
/// until getaddrinfo gives up, still holding its place among the
/// [`MAX_LOOKUPS_AT_ONCE`]).
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

static LOOKUP_SLOTS: Semaphore = Semaphore::const_new(MAX_LOOKUPS_AT_ONCE);

/// The operating system's resolver (getaddrinfo on a blocking thread), at most
/// [`MAX_LOOKUPS_AT_ONCE`] at a time and each answered within [`LOOKUP_TIMEOUT`]
/// (waiting for a place included).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl NameResolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a> {
        Box::pin(async move {
            let timed_out = || {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no answer within {} s", LOOKUP_TIMEOUT.as_secs()),
                )
            };
            let host = host.to_owned();
            let lookup = async move {
                let slot = LOOKUP_SLOTS
                    .acquire()
                    .await
                    .map_err(|e| io::Error::other(e.to_string()))?;
                // The slot goes with the thread: freed when getaddrinfo returns, not
                // when this request stops waiting for it.
                slot.forget();
                tokio::task::spawn_blocking(move || {
                    let found = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), 0));
                    LOOKUP_SLOTS.add_permits(1);
                    found
                })
                .await
                .map_err(|e| io::Error::other(e.to_string()))?
            };
            let addrs = tokio::time::timeout(LOOKUP_TIMEOUT, lookup)
                .await
                .map_err(|_| timed_out())??;
            let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            if ips.is_empty() {
                return Err(io::Error::new(io::ErrorKind::NotFound, "no addresses"));
            }
            Ok(ips)
        })
    }
}

/// Fixed answers for some names, the system resolver for the rest. Tests only
/// (`UMPIRE_TEST_FETCH_HOSTS=name=ip,name=ip`), like curl's `--resolve`.
#[derive(Debug, Default, Clone)]
pub struct StaticResolver {
    pub hosts: HashMap<String, Vec<IpAddr>>,
}

impl StaticResolver {
    pub fn parse(spec: &str) -> Result<StaticResolver, String> {
        let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, ip) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?} is not name=ip"))?;
            let ip: IpAddr = ip
                .trim()
                .parse()
                .map_err(|_| format!("{ip:?} is not an IP address"))?;
            hosts
                .entry(name.trim().to_ascii_lowercase())
                .or_default()
                .push(ip);
        }
        Ok(StaticResolver { hosts })
    }
}

impl NameResolver for StaticResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a> {
        match self.hosts.get(&host.to_ascii_lowercase()) {
            Some(ips) => {
                let ips = ips.clone();
                Box::pin(async move { Ok(ips) })
            }
            None => SystemResolver.lookup(host),
        }
    }
}
