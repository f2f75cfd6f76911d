//! A JSON-RPC proxy in front of anvil that behaves like a public RPC provider on a bad
//! day: it adds latency to every call, and delays, drops or fails chosen calls (the
//! answer of `eth_sendRawTransaction` lost while the transaction goes through, receipts
//! that come late, `eth_estimateGas` failing), and counts every call by method. A test
//! points the service at [`RpcProxy::url`] and anvil keeps the truth.
//!
//! Plain threads and blocking sockets: one thread per connection, HTTP/1.1 with
//! keep-alive (alloy's client reuses connections), batches forwarded whole.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::{read_request, request};

/// What the proxy does to one call of a method.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Waits this long, then forwards and answers.
    Delay(Duration),
    /// Forwards the call (it reaches the chain), then closes the connection without an
    /// answer: the caller cannot know whether it went through.
    LoseAnswer,
    /// Answers this JSON-RPC error without forwarding.
    Fail(String),
    /// Answers `null` (as for a transaction not yet mined) without forwarding.
    Null,
}

/// A rule: the fault for the next `times` calls of `method` (every call when `None`).
#[derive(Debug, Clone)]
struct Rule {
    method: String,
    fault: Fault,
    times: Option<usize>,
}

#[derive(Default)]
struct State {
    rules: VecDeque<Rule>,
    /// Added to every call, before any rule.
    latency: Duration,
    counts: BTreeMap<String, u64>,
    /// Receipts answered `null` until this long after the transaction was first asked
    /// about.
    receipts_after: Option<Duration>,
    first_asked: HashMap<String, Instant>,
}

pub struct RpcProxy {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl RpcProxy {
    /// A proxy on a free port of 127.0.0.1 forwarding to `upstream` (anvil).
    pub fn start(upstream: SocketAddr) -> RpcProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let state = shared.clone();
                std::thread::spawn(move || serve(conn, upstream, &state));
            }
        });
        RpcProxy { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every call waits this long first (a provider tens of milliseconds away).
    pub fn set_latency(&self, latency: Duration) {
        lock(&self.state).latency = latency;
    }

    /// `fault` for the next `times` calls of `method`.
    pub fn fault(&self, method: &str, fault: Fault, times: usize) {
        lock(&self.state).rules.push_back(Rule {
            method: method.to_owned(),
            fault,
            times: Some(times),
        });
    }

    /// `fault` for every call of `method` until [`RpcProxy::clear`].
    pub fn always(&self, method: &str, fault: Fault) {
        lock(&self.state).rules.push_back(Rule {
            method: method.to_owned(),
            fault,
            times: None,
        });
    }

    /// Receipts are answered `null` until `after` past the first question about each
    /// transaction (the chain mined it; the provider has not caught up).
    pub fn late_receipts(&self, after: Duration) {
        lock(&self.state).receipts_after = Some(after);
    }

    /// Removes every rule and the receipt delay (latency stays).
    pub fn clear(&self) {
        let mut s = lock(&self.state);
        s.rules.clear();
        s.receipts_after = None;
    }

    /// Calls seen so far, by method (each call of a batch counted).
    pub fn counts(&self) -> BTreeMap<String, u64> {
        lock(&self.state).counts.clone()
    }

    pub fn reset_counts(&self) {
        lock(&self.state).counts.clear();
    }
}

/// The fault for one call, counting it and using up a rule.
fn decide(state: &Mutex<State>, call: &Value) -> (Duration, Option<Fault>) {
    let method = call["method"].as_str().unwrap_or_default().to_owned();
    let mut s = lock(state);
    *s.counts.entry(method.clone()).or_default() += 1;
    let latency = s.latency;
    if let Some(i) = s.rules.iter().position(|r| r.method == method) {
        let fault = s.rules[i].fault.clone();
        if let Some(n) = s.rules[i].times.as_mut() {
            *n -= 1;
            if *n == 0 {
                s.rules.remove(i);
            }
        }
        return (latency, Some(fault));
    }
    if method == "eth_getTransactionReceipt"
        && let Some(after) = s.receipts_after
    {
        let hash = call["params"][0].as_str().unwrap_or_default().to_owned();
        let first = *s.first_asked.entry(hash).or_insert_with(Instant::now);
        if first.elapsed() < after {
            return (latency, Some(Fault::Null));
        }
    }
    (latency, None)
}

fn answer(conn: &mut TcpStream, body: &[u8]) -> bool {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).is_ok() && conn.write_all(body).is_ok()
}

fn forward(upstream: SocketAddr, body: &[u8]) -> Value {
    let r = request(
        upstream,
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        Some(body),
    );
    serde_json::from_slice(&r.body).unwrap_or(Value::Null)
}

/// One call, answered (or `None`: the connection is dropped after forwarding).
fn one(upstream: SocketAddr, state: &Mutex<State>, call: &Value) -> Option<Value> {
    let (latency, fault) = decide(state, call);
    std::thread::sleep(latency);
    let id = call.get("id").cloned().unwrap_or(Value::Null);
    match fault {
        Some(Fault::Delay(d)) => std::thread::sleep(d),
        Some(Fault::LoseAnswer) => {
            let _ = forward(upstream, call.to_string().as_bytes());
            return None;
        }
        Some(Fault::Fail(message)) => {
            return Some(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32000, "message": message}}));
        }
        Some(Fault::Null) => return Some(json!({"jsonrpc": "2.0", "id": id, "result": null})),
        None => {}
    }
    Some(forward(upstream, call.to_string().as_bytes()))
}

fn serve(mut conn: TcpStream, upstream: SocketAddr, state: &Mutex<State>) {
    while let Some(req) = read_request(&mut conn) {
        let Ok(body) = serde_json::from_slice::<Value>(&req.body) else {
            return;
        };
        let reply = match &body {
            Value::Array(calls) => {
                let mut answers = Vec::new();
                for call in calls {
                    match one(upstream, state, call) {
                        Some(a) => answers.push(a),
                        None => return,
                    }
                }
                Value::Array(answers)
            }
            call => match one(upstream, state, call) {
                Some(a) => a,
                None => return,
            },
        };
        if !answer(&mut conn, reply.to_string().as_bytes()) {
            return;
        }
    }
}
