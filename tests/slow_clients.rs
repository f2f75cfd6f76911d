//! `umpire serve` against clients that hold connections without finishing a request:
//! idle sockets that never complete their headers, a body that never arrives in full.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use umpire_blackbox::Server;
use umpire_server::{BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT};

/// Reads until the server closes the connection (or `limit` passes); what it sent.
fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Result<Vec<u8>, String> {
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(got),
            Err(e) => return Err(format!("still open after {limit:?}: {e}")),
        }
    }
}

#[test]
fn idle_connections_that_never_finish_their_headers_are_closed_and_block_nothing() {
    let server = Server::start();
    let mut idle: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).expect("connect");
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: umpire\r\n")
                .expect("half the headers");
            s
        })
        .collect();
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(
            server.get("/healthz").status,
            200,
            "others are served meanwhile"
        );
    }
    // Each is closed once its headers are overdue: within the timeout and some slack,
    // not left open for as long as the client likes.
    let limit = HEADER_READ_TIMEOUT * 3;
    for s in &mut idle {
        let left = limit
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1));
        read_until_closed(s, left).expect("closed by the server");
    }
    assert_eq!(server.get("/healthz").status, 200);
}

#[test]
fn a_body_that_never_arrives_in_full_is_refused_with_408() {
    let server = Server::start();
    let mut s = TcpStream::connect(server.addr).expect("connect");
    s.write_all(
        b"POST /v1/validate HTTP/1.1\r\nHost: umpire\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"tier\":",
    )
    .expect("headers and a start");
    let answer = read_until_closed(&mut s, BODY_READ_TIMEOUT * 3).expect("answered and closed");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("did not arrive within"), "{text}");
    // The contract's code for it (docs/api.md: 408 invalid_request).
    assert!(text.contains(r#""code":"invalid_request""#), "{text}");
}

#[test]
fn a_kept_alive_connection_left_idle_is_closed_after_the_header_timeout() {
    let server = Server::start();
    let mut s = TcpStream::connect(server.addr).expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: umpire\r\n\r\n")
        .expect("one request, kept alive");
    // The answer arrives and the connection stays open for the next request...
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).expect("the answer");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // ...which never comes: the server closes it once the next headers are overdue.
    let started = Instant::now();
    read_until_closed(&mut s, HEADER_READ_TIMEOUT * 3).expect("closed by the server");
    assert!(
        started.elapsed() >= HEADER_READ_TIMEOUT / 2,
        "closed after {:?}, before the timeout",
        started.elapsed()
    );
}
