//! URL policy: http(s) only, ports 80/443/8080/8443, no credentials, public hosts only.
//!
//! The address table is written once, from the IANA IPv4 and IPv6 Special-Purpose
//! Address Registries: everything not globally reachable is refused, and IPv6 forms
//! that carry an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) are judged by
//! the address they carry. Numeric host spellings the `url` crate normalizes
//! (`2130706433`, `0x7f.1`, `017700000001`) arrive here as the IPv4 they denote.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use umpire_core::ErrorCode;
use umpire_core::problem::ProblemCode;
use umpire_core::product::ALLOWED_PORTS;
use url::{Host, Url};

/// URLs longer than this are refused outright.
pub const MAX_URL_CHARS: usize = 2048;

/// Host names that never point at the public internet (RFC 6761, RFC 8375, common
/// private suffixes). Matched as the whole name or a suffix after a dot.
const PRIVATE_SUFFIXES: &[&str] = &[
    "localhost",
    "local",
    "internal",
    "localdomain",
    "home.arpa",
    "lan",
    "intranet",
    "corp",
    "private",
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub code: ErrorCode,
    /// Problem code for validation lists: the error code, or `invalid_url`.
    pub problem_code: ProblemCode,
    pub message: String,
    pub hint: &'static str,
}

impl PolicyError {
    /// A name that did not resolve in the time the request had for it.
    pub fn dns_timeout(url: &str) -> PolicyError {
        PolicyError::new(
            ErrorCode::DnsFailure,
            format!("the host of {url} did not resolve in time"),
            "Check the host name; it must resolve in public DNS, promptly.",
        )
    }

    fn new(code: ErrorCode, message: String, hint: &'static str) -> PolicyError {
        PolicyError {
            code,
            problem_code: ProblemCode::of_url_error(code),
            message,
            hint,
        }
    }
}

const HINT_PUBLIC: &str = "Use a URL on a public host; private, loopback, link-local and internal names are never fetched.";

/// The policy in force. Production uses [`Policy::default`]: public addresses only.
/// Tests need servers the policy would refuse; they list those addresses in
/// `test_allow`, which only a process's own configuration can set (never a request)
/// and which `umpire serve` leaves empty unless told otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Addresses fetched despite the policy (and on any port). Tests only.
    pub test_allow: Vec<IpAddr>,
}

impl Policy {
    /// Whether an address may be dialed.
    pub fn allows_ip(&self, ip: IpAddr) -> bool {
        is_public_ip(ip) || self.test_allow.contains(&ip)
    }

    fn check_ip(&self, ip: IpAddr) -> Result<(), PolicyError> {
        if self.allows_ip(ip) {
            Ok(())
        } else {
            check_ip(ip)
        }
    }

    /// Reads `UMPIRE_TEST_FETCH_ALLOW` (comma-separated IP addresses), a test switch
    /// (see [`test_switch`]).
    pub fn from_env() -> Result<Policy, String> {
        let Some(list) = test_switch("UMPIRE_TEST_FETCH_ALLOW")? else {
            return Ok(Policy::default());
        };
        let test_allow = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpAddr>()
                    .map_err(|_| format!("UMPIRE_TEST_FETCH_ALLOW: {s:?} is not an IP address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy { test_allow })
    }
}

/// The value of test switch `name` (`UMPIRE_TEST_FETCH_*`), in a build made for tests
/// (feature `test-switches`). A build without the feature has no test switches: one set
/// in its environment is an error that names it, so the process refuses to start rather
/// than run with its SSRF defence quietly in a state nobody chose.
#[cfg(feature = "test-switches")]
pub fn test_switch(name: &str) -> Result<Option<String>, String> {
    Ok(std::env::var(name).ok())
}

/// Any build but a test one has no code that honours a switch (`#[cfg]`, not a
/// run-time `if`): set, it stops the process with its name.
#[cfg(not(feature = "test-switches"))]
pub fn test_switch(name: &str) -> Result<Option<String>, String> {
    match std::env::var_os(name) {
        None => Ok(None),
        Some(_) => Err(format!(
            "{name} is a test switch, and this build has none (it was built without the \
             test-switches feature, as every release is): remove {name} from the environment"
        )),
    }
}

/// The static production policy: everything that can be judged without resolving the name.
pub fn check_url(raw: &str) -> Result<Url, PolicyError> {
    Policy::default().check_url(raw)
}

impl Policy {
    /// Everything that can be judged without resolving the name. A literal host is
    /// judged before the port (the host is the graver problem); an allow-listed
    /// literal passes on any port.
    pub fn check_url(&self, raw: &str) -> Result<Url, PolicyError> {
        if raw.chars().count() > MAX_URL_CHARS {
            return Err(PolicyError {
                code: ErrorCode::InvalidRequest,
                problem_code: ProblemCode::InvalidUrl,
                message: format!("the URL is longer than {MAX_URL_CHARS} characters"),
                hint: "Use a shorter URL.",
            });
        }
        let url = Url::parse(raw).map_err(|e| PolicyError {
            code: ErrorCode::InvalidRequest,
            problem_code: ProblemCode::InvalidUrl,
            message: format!("not a valid absolute URL: {e}"),
            hint: "Write a full URL such as https://example.com/path.",
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(PolicyError::new(
                ErrorCode::InvalidScheme,
                format!("scheme {:?} is not fetched", url.scheme()),
                "Use an http:// or https:// URL.",
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(PolicyError::new(
                ErrorCode::CredentialsInUrl,
                "the URL embeds credentials".into(),
                "Remove user:password@ from the URL; Umpire never logs in anywhere.",
            ));
        }
        let literal = match url.host() {
            Some(Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal {
            self.check_ip(ip)?;
            if self.test_allow.contains(&ip) {
                return Ok(url);
            }
        }
        let port = url.port_or_known_default().unwrap_or(0);
        if !ALLOWED_PORTS.contains(&port) {
            return Err(PolicyError::new(
                ErrorCode::BlockedPort,
                format!("port {port} is not allowed"),
                "Serve the URL on port 80, 443, 8080 or 8443.",
            ));
        }
        match url.host() {
            None => Err(PolicyError::new(
                ErrorCode::BlockedHost,
                "the URL has no host".into(),
                HINT_PUBLIC,
            )),
            Some(Host::Ipv4(_) | Host::Ipv6(_)) => Ok(url.clone()),
            Some(Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                if !name.contains('.') {
                    return Err(PolicyError::new(
                        ErrorCode::BlockedHost,
                        format!("{name:?} is not a public DNS name"),
                        HINT_PUBLIC,
                    ));
                }
                for s in PRIVATE_SUFFIXES {
                    if name == *s || name.ends_with(&format!(".{s}")) {
                        return Err(PolicyError::new(
                            ErrorCode::BlockedHost,
                            format!("{name} is a private name (.{s})"),
                            HINT_PUBLIC,
                        ));
                    }
                }
                Ok(url.clone())
            }
        }
    }
}

/// Refuses any address that is not globally reachable.
pub fn check_ip(ip: IpAddr) -> Result<(), PolicyError> {
    if is_public_ip(ip) {
        Ok(())
    } else {
        Err(PolicyError::new(
            ErrorCode::BlockedHost,
            format!("{ip} is not a public address"),
            HINT_PUBLIC,
        ))
    }
}

pub fn is_public_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

/// IANA IPv4 Special-Purpose Address Registry, entries not globally reachable,
/// plus multicast and the reserved 240/4 (which holds the broadcast address).
const V4_BLOCKED: &[([u8; 4], u32)] = &[
    ([0, 0, 0, 0], 8),        // "this network"
    ([10, 0, 0, 0], 8),       // private
    ([100, 64, 0, 0], 10),    // shared address space (CGNAT)
    ([127, 0, 0, 0], 8),      // loopback
    ([169, 254, 0, 0], 16),   // link local (cloud metadata lives here)
    ([172, 16, 0, 0], 12),    // private
    ([192, 0, 0, 0], 24),     // IETF protocol assignments
    ([192, 0, 2, 0], 24),     // documentation TEST-NET-1
    ([192, 88, 99, 0], 24),   // deprecated 6to4 relay anycast
    ([192, 168, 0, 0], 16),   // private
    ([198, 18, 0, 0], 15),    // benchmarking
    ([198, 51, 100, 0], 24),  // documentation TEST-NET-2
    ([203, 0, 113, 0], 24),   // documentation TEST-NET-3
    ([224, 0, 0, 0], 4),      // multicast
    ([240, 0, 0, 0], 4),      // reserved, includes 255.255.255.255 broadcast
    ([168, 63, 129, 16], 32), // public on paper, a cloud host's internal endpoint in practice
];

fn is_public_v4(ip: Ipv4Addr) -> bool {
    !V4_BLOCKED.iter().any(|(net, p)| in_v4(ip, *net, *p))
}

fn in_v6(ip: Ipv6Addr, net: [u16; 8], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(Ipv6Addr::from(net)) & mask)
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    // IPv4-mapped ::ffff:0:0/96 and the deprecated IPv4-compatible ::/96.
    if in_v6(ip, [0, 0, 0, 0, 0, 0xffff, 0, 0], 96) || (in_v6(ip, [0; 8], 96) && bits > 1) {
        return is_public_v4(Ipv4Addr::from(bits as u32));
    }
    // NAT64 well-known prefix 64:ff9b::/96 carries the IPv4 in the low 32 bits.
    if in_v6(ip, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        return is_public_v4(Ipv4Addr::from(bits as u32));
    }
    // 6to4 2002::/16 carries the IPv4 in bits 16..48.
    if in_v6(ip, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        return is_public_v4(Ipv4Addr::from((bits >> 80) as u32));
    }
    // Teredo 2001::/32: the client's IPv4 is the low 32 bits, inverted; the server's
    // IPv4 sits in bits 64..96. Both must be public.
    if in_v6(ip, [0x2001, 0, 0, 0, 0, 0, 0, 0], 32) {
        let client = Ipv4Addr::from(!(bits as u32));
        let server = Ipv4Addr::from((bits >> 64) as u32);
        return is_public_v4(client) && is_public_v4(server);
    }
    // Only global unicast 2000::/3 is public, minus its special-purpose blocks.
    if !in_v6(ip, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        return false; // ::, ::1, 64:ff9b:1::/48, 100::/64, fc00::/7, fe80::/10, ff00::/8, …
    }
    const V6_BLOCKED: &[([u16; 8], u32)] = &[
        ([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), // IETF protocol assignments
        ([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation
        ([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), // documentation
    ];
    !V6_BLOCKED.iter().any(|(net, p)| in_v6(ip, *net, *p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(url: &str) -> &'static str {
        match check_url(url) {
            Ok(_) => "ok",
            Err(e) => e.problem_code.as_str(),
        }
    }

    #[test]
    fn allows_public_urls() {
        for u in [
            "https://example.com/",
            "http://example.com:8080/x?y=1",
            "https://example.com:8443/",
            "http://93.184.215.14/",
            "https://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/",
            "https://[::ffff:93.184.215.14]/",
            "https://[2002:5db8:d70e::1]/",
        ] {
            assert_eq!(code(u), "ok", "{u}");
        }
    }

    #[test]
    fn refuses_schemes_ports_credentials() {
        assert_eq!(code("ftp://example.com/"), "invalid_scheme");
        assert_eq!(code("file:///etc/passwd"), "invalid_scheme");
        assert_eq!(code("gopher://example.com/"), "invalid_scheme");
        assert_eq!(code("https://example.com:22/"), "blocked_port");
        assert_eq!(code("http://example.com:443/"), "ok");
        assert_eq!(code("https://user:pw@example.com/"), "credentials_in_url");
        assert_eq!(code("https://user@example.com/"), "credentials_in_url");
        assert_eq!(code("not a url"), "invalid_url");
    }

    #[test]
    fn refuses_every_private_spelling() {
        for u in [
            "http://localhost/",
            "http://LOCALHOST./",
            "http://api.localhost/",
            "http://metadata.google.internal/",
            "http://printer.local/",
            "http://intranet/",
            "http://127.0.0.1/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://017700000001/",
            "http://0/",
            "http://10.1.2.3/",
            "http://100.64.0.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://172.31.255.255/",
            "http://192.168.1.1/",
            "http://192.0.2.1/",
            "http://198.18.0.1/",
            "http://198.19.255.255/",
            "http://198.51.100.7/",
            "http://203.0.113.9/",
            "http://224.0.0.1/",
            "http://255.255.255.255/",
            "http://240.0.0.1/",
            "http://[::1]/",
            "http://[::]/",
            "http://[::ffff:127.0.0.1]/",
            "http://[::ffff:7f00:1]/",
            "http://[::127.0.0.1]/",
            "http://[64:ff9b::10.0.0.1]/",
            "http://[64:ff9b:1::1]/",
            "http://[2002:7f00:0001::1]/",
            "http://[2002:c0a8:0101::1]/",
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
            "http://[2001:db8::1]/",
            "http://[fc00::1]/",
            "http://[fd00:ec2::254]/",
            "http://[fe80::1]/",
            "http://[ff02::1]/",
            "http://[100::1]/",
        ] {
            assert_eq!(code(u), "blocked_host", "{u}");
        }
    }

    #[test]
    fn the_test_allow_list_admits_only_its_addresses() {
        let p = Policy {
            test_allow: vec!["127.0.0.1".parse().expect("ip")],
        };
        assert!(p.check_url("http://127.0.0.1:45678/page").is_ok());
        assert_eq!(
            p.check_url("http://127.0.0.2/")
                .map(|_| ())
                .map_err(|e| e.problem_code.as_str()),
            Err("blocked_host")
        );
        assert_eq!(
            p.check_url("http://10.0.0.1:22/")
                .map(|_| ())
                .map_err(|e| e.problem_code.as_str()),
            Err("blocked_host")
        );
        assert_eq!(
            p.check_url("https://example.com:22/")
                .map(|_| ())
                .map_err(|e| e.problem_code.as_str()),
            Err("blocked_port")
        );
        assert_eq!(
            Policy::default()
                .check_url("http://127.0.0.1:8080/")
                .map(|_| ())
                .map_err(|e| e.problem_code.as_str()),
            Err("blocked_host")
        );
    }
}
