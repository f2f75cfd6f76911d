//! Name lookup behind a trait: the system resolver in production, fixed answers in
//! tests (including answers that change between calls, to play DNS rebinding).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;

pub type Lookup<'a> = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send + 'a>>;

pub trait NameResolver: Send + Sync {
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a>;
}

/// The operating system's resolver (getaddrinfo on a blocking thread).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemResolver;

impl NameResolver for SystemResolver {
    fn lookup<'a>(&'a self, host: &'a str) -> Lookup<'a> {
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host, 0)).await?;
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
