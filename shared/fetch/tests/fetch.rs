//! The fetcher against local servers: redirects re-checked at every hop, the hop limit,
//! the read cap, the deadline, DNS rebinding, and TLS observations from a local HTTPS
//! server whose certificate (rcgen) only this test trusts.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use umpire_core::hash::sha256_hex;
use umpire_fetch::resolve::{Lookup, NameResolver};
use umpire_fetch::{FetchConfig, Fetcher, Policy, StaticResolver};

const PAGE: &str =
    "<html><head><title>Deployed</title></head><body><h1 id=\"v\">v2.3.1</h1></body></html>";

/// A small HTTP/1.1 server on 127.0.0.1 answering by path, one thread per connection.
fn serve() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn, addr));
        }
    });
    addr
}

fn answer(mut conn: TcpStream, me: SocketAddr) {
    let mut buf = [0u8; 8192];
    let n = conn.read(&mut buf).unwrap_or(0);
    let head = String::from_utf8_lossy(&buf[..n]).to_string();
    let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
    let respond = |conn: &mut TcpStream, status: &str, extra: &str, body: &[u8]| {
        let _ = write!(
            conn,
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
            body.len()
        );
        let _ = conn.write_all(body);
    };
    if path == "/echo" {
        // The request as it arrived, for tests of what the fetcher sends.
        respond(&mut conn, "200 OK", "", head.as_bytes());
    } else if path == "/long-server" {
        let server = format!("Server: {}\r\n", "s".repeat(300));
        respond(&mut conn, "200 OK", &server, b"ok");
    } else if path == "/page" {
        respond(
            &mut conn,
            "200 OK",
            "Content-Type: text/html\r\nETag: \"abc\"\r\nServer: test\r\n",
            PAGE.as_bytes(),
        );
    } else if let Some(n) = path.strip_prefix("/hops/") {
        let n: u32 = n.parse().unwrap_or(0);
        if n == 0 {
            respond(&mut conn, "200 OK", "", b"arrived");
        } else {
            let loc = format!("Location: http://{me}/hops/{}\r\n", n - 1);
            respond(&mut conn, "302 Found", &loc, b"");
        }
    } else if let Some(rest) = path.strip_prefix("/then-blocked/") {
        // n allowed hops, then a redirect to a private address.
        let n: u32 = rest.parse().unwrap_or(0);
        let loc = if n == 0 {
            "Location: http://10.1.2.3/secret\r\n".to_owned()
        } else {
            format!("Location: /then-blocked/{}\r\n", n - 1)
        };
        respond(&mut conn, "301 Moved Permanently", &loc, b"");
    } else if path == "/big" {
        let body = vec![b'x'; 3 * 1024 * 1024];
        respond(
            &mut conn,
            "200 OK",
            "Content-Type: application/octet-stream\r\n",
            &body,
        );
    } else if path == "/slow" {
        std::thread::sleep(Duration::from_secs(3));
        respond(&mut conn, "200 OK", "", b"late");
    } else if path == "/never" {
        // Past the fetcher's real deadline (12 s), then nothing anyway.
        std::thread::sleep(Duration::from_secs(20));
    } else {
        respond(&mut conn, "404 Not Found", "", b"nope");
    }
}

fn fetcher(addr: SocketAddr) -> Fetcher {
    fetcher_with(addr.ip(), Arc::new(StaticResolver::default()), Vec::new())
}

fn fetcher_with(allow: IpAddr, resolver: Arc<dyn NameResolver>, roots: Vec<Vec<u8>>) -> Fetcher {
    Fetcher::new(
        FetchConfig {
            policy: Policy {
                test_allow: vec![allow],
            },
            timeout: Duration::from_millis(1500),
            politeness: Duration::ZERO,
            extra_roots_pem: roots,
            ..FetchConfig::default()
        },
        resolver,
    )
    .expect("fetcher")
}

#[tokio::test]
async fn a_page_is_fetched_and_observed() {
    let addr = serve();
    let f = fetcher(addr).fetch(&format!("http://{addr}/page")).await;
    let body = f.body.expect("a response");
    assert_eq!(body.status, 200);
    assert_eq!(body.body, PAGE.as_bytes());
    let o = &f.observation;
    assert_eq!(o.http_status, Some(200));
    assert_eq!(o.resolved_address.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        o.body_sha256.as_deref(),
        Some(sha256_hex(PAGE.as_bytes()).as_str())
    );
    assert_eq!(o.body_bytes, PAGE.len() as u64);
    assert!(!o.truncated);
    assert!(o.tls.is_none(), "plain http has no TLS");
    assert!(o.headers.contains(&("etag".into(), "\"abc\"".into())));
    assert!(
        o.headers
            .contains(&("content-type".into(), "text/html".into()))
    );
    assert_eq!(o.error, None);
}

/// docs/fetching.md: a fetch is a GET with `User-Agent: UmpireProbe/1.0
/// (+https://umpire.vimabrosta.com/bot)`, and an observed header value is capped at 200
/// characters. Would catch: another method or agent (site owners allow-list the bot by
/// it), or a server's header growing the signed document without bound.
#[tokio::test]
async fn a_fetch_is_a_get_named_umpireprobe_and_observed_headers_are_capped() {
    let addr = serve();
    let f = fetcher(addr).fetch(&format!("http://{addr}/echo")).await;
    let seen = String::from_utf8(f.body.expect("a response").body).expect("text");
    assert!(seen.starts_with("GET /echo HTTP/1.1\r\n"), "{seen}");
    let agent = seen
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
                .map(|(_, v)| v.trim().to_owned())
        })
        .expect("a User-Agent header");
    assert_eq!(agent, umpire_core::product::FETCH_USER_AGENT);
    assert_eq!(
        agent,
        "UmpireProbe/1.0 (+https://umpire.vimabrosta.com/bot)"
    );
    let long = fetcher(addr)
        .fetch(&format!("http://{addr}/long-server"))
        .await;
    let server = long
        .observation
        .headers
        .iter()
        .find(|(k, _)| k == "server")
        .map(|(_, v)| v.clone())
        .expect("the server header observed");
    assert_eq!(server, "s".repeat(200), "capped at 200 characters");
}

#[tokio::test]
async fn four_redirects_are_followed_and_a_fifth_is_refused() {
    let addr = serve();
    let f = fetcher(addr);
    let ok = f.fetch(&format!("http://{addr}/hops/4")).await;
    assert_eq!(ok.observation.redirect_hops, 4);
    assert_eq!(ok.observation.url, format!("http://{addr}/hops/0"));
    assert_eq!(ok.body.expect("arrived").body, b"arrived");
    let too_many = f.fetch(&format!("http://{addr}/hops/5")).await;
    assert!(too_many.body.is_none());
    let e = too_many.observation.error.expect("refused");
    assert!(e.starts_with("too_many_redirects"), "{e}");
}

#[tokio::test]
async fn a_redirect_to_a_private_address_is_refused_at_every_hop() {
    let addr = serve();
    let f = fetcher(addr);
    for allowed_hops in 0..4 {
        let r = f
            .fetch(&format!("http://{addr}/then-blocked/{allowed_hops}"))
            .await;
        assert!(r.body.is_none(), "hop {}", allowed_hops + 1);
        let e = r.observation.error.expect("refused");
        assert!(
            e.starts_with("blocked_host"),
            "hop {}: {e}",
            allowed_hops + 1
        );
        assert!(e.contains("http://10.1.2.3/secret"), "{e}");
        // The refused target was never requested: the observation ends at the last hop served.
        assert_eq!(r.observation.url, format!("http://{addr}/then-blocked/0"));
        assert_eq!(r.observation.redirect_hops, allowed_hops);
        assert_eq!(r.observation.http_status, Some(301));
    }
}

#[tokio::test]
async fn a_large_body_is_truncated_at_the_cap_and_hashed_as_read() {
    let addr = serve();
    let f = fetcher(addr).fetch(&format!("http://{addr}/big")).await;
    let body = f.body.expect("response");
    let cap = umpire_core::product::FETCH_READ_CAP_BYTES as usize;
    // docs/fetching.md's figure: 2 MB (MiB) read, then truncated.
    assert_eq!(cap, 2 * 1024 * 1024);
    assert!(body.truncated);
    assert_eq!(body.body.len(), cap);
    assert!(f.observation.truncated);
    assert_eq!(f.observation.body_bytes, cap as u64);
    assert_eq!(
        f.observation.body_sha256,
        Some(sha256_hex(&vec![b'x'; cap]))
    );
}

#[tokio::test]
async fn a_slow_server_hits_the_deadline() {
    let addr = serve();
    // The server answers after 3 s; the 1.5 s deadline ends the fetch first.
    let f = fetcher(addr).fetch(&format!("http://{addr}/slow")).await;
    assert!(f.body.is_none(), "the late answer must not be judged");
    let e = f.observation.error.expect("timed out");
    assert!(e.starts_with("timeout"), "{e}");
}

/// Public at the first lookup (validation), loopback at every later one (connect).
struct Rebinding {
    calls: AtomicUsize,
}

impl NameResolver for Rebinding {
    fn lookup<'a>(&'a self, _host: &'a str) -> Lookup<'a> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            Ok(vec![if n == 0 {
                "93.184.215.14".parse().expect("ip")
            } else {
                "127.0.0.1".parse().expect("ip")
            }])
        })
    }
}

#[tokio::test]
async fn dns_rebinding_is_refused_at_connect() {
    // Production policy: nothing allowed beyond public addresses.
    let f = Fetcher::new(
        FetchConfig {
            politeness: Duration::ZERO,
            ..FetchConfig::default()
        },
        Arc::new(Rebinding {
            calls: AtomicUsize::new(0),
        }),
    )
    .expect("fetcher");
    let url = "http://deploy.example.com/";
    assert_eq!(
        f.precheck(url).await,
        Ok(()),
        "validation saw a public address"
    );
    let r = f.fetch(url).await;
    assert!(r.body.is_none());
    let e = r.observation.error.expect("refused");
    assert!(e.starts_with("blocked_host"), "{e}");
    assert_eq!(r.observation.resolved_address, None, "nothing was dialed");
}

#[tokio::test]
async fn validation_resolves_names_and_refuses_private_answers() {
    let resolver =
        StaticResolver::parse("intranet.example.com=10.0.0.7,public.example.com=93.184.215.14")
            .expect("hosts");
    let f = Fetcher::new(FetchConfig::default(), Arc::new(resolver)).expect("fetcher");
    assert_eq!(f.precheck("https://public.example.com/").await, Ok(()));
    let e = f
        .precheck("https://intranet.example.com/")
        .await
        .expect_err("private");
    assert_eq!(e.problem_code, "blocked_host");
    let e = f
        .precheck("https://no-such-name.invalid/")
        .await
        .expect_err("nxdomain");
    assert_eq!(e.problem_code, "dns_failure");
    let e = f.precheck("http://127.0.0.1/").await.expect_err("literal");
    assert_eq!(e.problem_code, "blocked_host");
}

/// A local HTTPS server (Python's ssl module) with a certificate made here.
struct HttpsServer {
    child: std::process::Child,
    port: u16,
    _dir: std::path::PathBuf,
}

impl Drop for HttpsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

fn https_server(cert_pem: &str, key_pem: &str) -> HttpsServer {
    let dir = std::env::temp_dir().join(format!("umpire-tls-{}", umpire_host::random_id("t")));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("cert.pem"), cert_pem).expect("cert");
    std::fs::write(dir.join("key.pem"), key_pem).expect("key");
    std::fs::write(dir.join("index.html"), PAGE).expect("page");
    let script = r#"
import http.server, ssl, sys, os
os.chdir(sys.argv[1])
srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("cert.pem", "key.pem")
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
print(srv.server_address[1], flush=True)
srv.serve_forever()
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("port");
    HttpsServer {
        port: line.trim().parse().expect("port number"),
        child,
        _dir: dir,
    }
}

#[tokio::test]
async fn tls_observations_come_from_the_leaf_certificate() {
    // An IP-literal URL (allow-listed, so any port) with the address in the SAN.
    let mut params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "umpire-test.example");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = params.self_signed(&key).expect("certificate");
    let server = https_server(&cert.pem(), &key.serialize_pem());
    let f = fetcher_with(
        "127.0.0.1".parse().expect("ip"),
        Arc::new(StaticResolver::default()),
        vec![cert.pem().into_bytes()],
    );
    let r = f
        .fetch(&format!("https://127.0.0.1:{}/index.html", server.port))
        .await;
    let o = &r.observation;
    assert_eq!(o.error, None);
    assert_eq!(o.http_status, Some(200));
    let tls = o.tls.as_ref().expect("TLS observation");
    assert_eq!(tls.fingerprint_sha256, sha256_hex(cert.der()));
    assert_eq!(tls.subject, "CN=umpire-test.example");
    assert_eq!(tls.issuer, "CN=umpire-test.example", "self-signed");
    assert!(tls.valid_from < tls.valid_to);
    assert_eq!(r.body.expect("body").body, PAGE.as_bytes());
}

#[tokio::test]
async fn one_host_is_fetched_at_most_once_per_interval() {
    let addr = serve();
    let f = Arc::new(
        Fetcher::new(
            FetchConfig {
                policy: Policy {
                    test_allow: vec![addr.ip()],
                },
                politeness: Duration::from_millis(300),
                ..FetchConfig::default()
            },
            Arc::new(StaticResolver::default()),
        )
        .expect("fetcher"),
    );
    let started = std::time::Instant::now();
    let url = format!("http://{addr}/page");
    let (a, b, c) = tokio::join!(f.fetch(&url), f.fetch(&url), f.fetch(&url));
    assert!(a.body.is_some() && b.body.is_some() && c.body.is_some());
    assert!(
        started.elapsed() >= Duration::from_millis(600),
        "three fetches from one host take at least two intervals"
    );
}

#[tokio::test]
async fn webhook_posts_keep_the_policy_and_never_follow_redirects() {
    let addr = serve();
    let f = fetcher(addr);
    let body = br#"{"verdict":"pass"}"#.to_vec();
    let headers = [("x-umpire-signature", "sha256=00".to_owned())];
    // A redirect is a failed delivery, wherever it points (here: to a private address).
    let e = f
        .post_json(
            &format!("http://{addr}/then-blocked/0"),
            body.clone(),
            &headers,
        )
        .await
        .expect_err("a 301 is not a delivery");
    assert_eq!(e, "the receiver answered 301");
    let e = f
        .post_json(&format!("http://{addr}/hops/1"), body.clone(), &headers)
        .await
        .expect_err("a 302 is not a delivery, even to an allowed host");
    assert_eq!(e, "the receiver answered 302");
    // A private receiver is refused before anything is dialed.
    let e = f
        .post_json("http://10.1.2.3/hook", body.clone(), &headers)
        .await
        .expect_err("private");
    assert!(e.starts_with("blocked_host"), "{e}");
    // A name that rebinds to loopback is refused at connect time.
    let rebinding = Fetcher::new(
        FetchConfig {
            politeness: Duration::ZERO,
            ..FetchConfig::default()
        },
        Arc::new(Rebinding {
            calls: AtomicUsize::new(1),
        }),
    )
    .expect("fetcher");
    let e = rebinding
        .post_json("http://hooks.example.com/x", body, &headers)
        .await
        .expect_err("rebinding");
    assert!(e.contains("blocked_host"), "{e}");
}

/// The fetcher as it ships (FetchConfig::default, only the loopback admitted): a server
/// that never answers is given up at the contract's 12 s, and reported as a timeout.
/// Would catch: a default deadline changed, or lost (a fetch waiting on a dead server
/// until the request's budget ends).
#[tokio::test]
async fn the_shipped_deadline_is_twelve_seconds() {
    let addr = serve();
    let f = Fetcher::new(
        FetchConfig {
            policy: Policy {
                test_allow: vec![addr.ip()],
            },
            ..FetchConfig::default()
        },
        Arc::new(StaticResolver::default()),
    )
    .expect("fetcher");
    assert_eq!(
        FetchConfig::default().timeout,
        Duration::from_secs(umpire_core::product::FETCH_TIMEOUT_SECS)
    );
    let started = std::time::Instant::now();
    let r = f.fetch(&format!("http://{addr}/never")).await;
    let took = started.elapsed();
    assert!(r.body.is_none());
    let e = r.observation.error.expect("timed out");
    assert!(e.starts_with("timeout"), "{e}");
    assert!(took >= Duration::from_secs(12), "gave up after {took:?}");
    // And not much later: the deadline is the fetch's own, not the caller's. (Slack
    // for a loaded machine; a deadline lost would wait on the dead server for ever.)
    assert!(
        took < Duration::from_secs(16),
        "still waiting after {took:?}"
    );
}

/// The shipped politeness: one host is fetched at most once a second by a process
/// (three fetches of one host start a second apart), and another host is not held up
/// by it (its fetch starts at once). Would catch: the interval's default changed, or
/// kept per process instead of per host (every host serialized behind one another).
#[tokio::test]
async fn the_shipped_politeness_is_per_host() {
    let one = serve();
    // A second host: another loopback address, where the same kind of server answers.
    let listener = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let other = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || answer(conn, other));
        }
    });
    let f = Arc::new(
        Fetcher::new(
            FetchConfig {
                policy: Policy {
                    test_allow: vec![one.ip(), other.ip()],
                },
                ..FetchConfig::default()
            },
            Arc::new(StaticResolver::default()),
        )
        .expect("fetcher"),
    );
    assert_eq!(FetchConfig::default().politeness, Duration::from_secs(1));
    let same = format!("http://{one}/page");
    let elsewhere = format!("http://{other}/page");
    let started = std::time::Instant::now();
    let timed = |url: String| {
        let f = f.clone();
        async move {
            let r = f.fetch(&url).await;
            assert!(r.body.is_some(), "{url}: {:?}", r.observation.error);
            started.elapsed()
        }
    };
    let (a, b, c, d) = tokio::join!(
        timed(same.clone()),
        timed(same.clone()),
        timed(same),
        timed(elsewhere)
    );
    let mut one_host = [a, b, c];
    one_host.sort();
    assert!(
        one_host[2] >= Duration::from_secs(2),
        "three fetches of one host end {one_host:?} after the start: a second apart"
    );
    assert!(
        d < Duration::from_secs(1),
        "the other host waited {d:?} behind the first"
    );
}
