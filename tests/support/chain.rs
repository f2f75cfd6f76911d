//! A local EVM chain for payment tests: anvil (from npm) on a free port with the test
//! EIP-3009 token deployed by `infra/devnet/deploy.mjs`, plus the reference x402 tools
//! in `tests/js/` run with node. Everything is stopped by PID on drop.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Server, TempDir, read_request, repo_root, request};

/// anvil: `$UMPIRE_ANVIL`, else the npm package's binary under node_modules.
pub fn anvil_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("UMPIRE_ANVIL") {
        return PathBuf::from(p);
    }
    let p = repo_root().join("node_modules/@foundry-rs/anvil-linux-amd64/bin/anvil");
    assert!(
        p.exists(),
        "{} is missing: run `npm ci` at the repository root (make test does)",
        p.display()
    );
    p
}

/// Runs a node script from the repository with arguments; returns its last stdout line
/// as JSON. Panics when it exits non-zero (with that line) or prints no JSON (with its
/// stderr).
pub fn node_json(script: &str, args: &[&str]) -> Value {
    // A script that failed fails its caller, whatever it printed last: a JSON line
    // from a script that then exited non-zero (a purchase refused, say) is not an
    // answer to go on with.
    let (succeeded, v) = node_json_verdict(script, args);
    assert!(succeeded, "node {script} failed, its last line: {v}");
    v
}

/// Runs a Node script whose exit status is part of its answer (a check that says no
/// by exiting 1): whether it exited 0, and the JSON of its last line.
pub fn node_json_verdict(script: &str, args: &[&str]) -> (bool, Value) {
    let out = Command::new("node")
        .arg(repo_root().join(script))
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run node (is Node.js installed?)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let v = serde_json::from_str(last).unwrap_or_else(|_| {
        panic!(
            "node {script} printed no JSON ({}):\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

/// A running anvil with the token deployed; `info` is devnet.json.
pub struct Devnet {
    anvil: Child,
    pub dir: TempDir,
    pub info: Value,
}

impl Devnet {
    pub fn start() -> Devnet {
        Devnet::start_on(None)
    }

    /// With a chain id of our choosing (x402 v1 clients know chains by name only).
    pub fn start_on(chain_id: Option<u64>) -> Devnet {
        let mut cmd = Command::new(anvil_bin());
        cmd.args(["--host", "127.0.0.1", "--port", "0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(id) = chain_id {
            cmd.args(["--chain-id", &id.to_string()]);
        }
        let mut anvil = cmd.spawn().expect("start anvil");
        let stdout = anvil.stdout.take().expect("anvil stdout");
        let mut lines = BufReader::new(stdout).lines();
        let addr: SocketAddr = loop {
            let line = lines
                .next()
                .expect("anvil exited before listening")
                .expect("read anvil output");
            if let Some(a) = line.trim().strip_prefix("Listening on ") {
                break a.parse().expect("anvil address");
            }
        };
        // anvil logs every request; keep its pipe drained.
        std::thread::spawn(move || lines.for_each(drop));
        let dir = TempDir::new("devnet");
        let out = dir.path().join("devnet.json");
        let rpc = format!("http://{addr}");
        let out_s = out.to_string_lossy().into_owned();
        // 1,000 test USDC for the payer: room for a few hundred purchases per test.
        let info = node_json(
            "infra/devnet/deploy.mjs",
            &["--rpc", &rpc, "--out", &out_s, "--mint", "1000000000"],
        );
        assert!(info.get("asset").is_some(), "deploy failed: {info}");
        Devnet { anvil, dir, info }
    }

    pub fn get(&self, k: &str) -> String {
        match &self.info[k] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    pub fn devnet_json(&self) -> String {
        self.dir
            .path()
            .join("devnet.json")
            .to_string_lossy()
            .into_owned()
    }

    pub fn rpc_addr(&self) -> SocketAddr {
        self.get("rpc_url")
            .trim_start_matches("http://")
            .parse()
            .expect("rpc address")
    }

    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let r = request(
            self.rpc_addr(),
            "POST",
            "/",
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        );
        let v: Value = serde_json::from_slice(&r.body).expect("JSON-RPC answer");
        if let Some(e) = v.get("error") {
            panic!("{method} failed: {e}");
        }
        v["result"].clone()
    }

    /// Transactions `address` has had mined (its nonce at the latest block).
    pub fn transactions_sent(&self, address: &str) -> u64 {
        let n = self.rpc("eth_getTransactionCount", json!([address, "latest"]));
        let hex = n.as_str().unwrap_or_default().trim_start_matches("0x");
        u64::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("a nonce: {n}"))
    }

    /// Switches how anvil mines: at once (the default), every `Every` interval (Base's
    /// two seconds), or only when the test calls [`Devnet::mine`].
    pub fn set_mining(&self, mining: Mining) {
        match mining {
            Mining::Instant => {
                self.rpc("evm_setIntervalMining", json!([0]));
                self.rpc("evm_setAutomine", json!([true]));
            }
            Mining::Every(interval) => {
                self.rpc("evm_setAutomine", json!([false]));
                self.rpc("evm_setIntervalMining", json!([interval.as_secs().max(1)]));
            }
            Mining::Manual => {
                self.rpc("evm_setAutomine", json!([false]));
                self.rpc("evm_setIntervalMining", json!([0]));
            }
        }
    }

    /// Mines one block with whatever is pending.
    pub fn mine(&self) {
        self.rpc("evm_mine", json!([]));
    }

    /// Removes a transaction from anvil's pool (never mined).
    pub fn drop_pending(&self, hash: &str) {
        self.rpc("anvil_dropTransaction", json!([hash]));
    }

    /// Hashes of the pool's pending transactions sent from `from`.
    pub fn pending_from(&self, from: &str) -> Vec<String> {
        let pool = self.rpc("txpool_content", json!([]));
        let mut hashes = Vec::new();
        for (sender, by_nonce) in pool["pending"].as_object().into_iter().flatten() {
            if sender.eq_ignore_ascii_case(from) {
                for tx in by_nonce.as_object().into_iter().flatten().map(|(_, t)| t) {
                    if let Some(h) = tx["hash"].as_str() {
                        hashes.push(h.to_owned());
                    }
                }
            }
        }
        hashes
    }

    /// The transactions on chain in which an EIP-3009 authorization paid `pay_to`: an
    /// `AuthorizationUsed` and a `Transfer` to `pay_to` in the same transaction.
    pub fn authorization_payments(&self) -> std::collections::BTreeSet<String> {
        // keccak256 of the two events' signatures.
        const AUTHORIZATION_USED: &str =
            "0x98de503528ee59b575ef0c0a2576a82497bfc029a5685b209e9ec333479b10a5";
        const TRANSFER: &str = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
        let logs = |topics: Value| {
            self.rpc(
                "eth_getLogs",
                json!([{"address": self.get("asset"), "fromBlock": "0x0", "toBlock": "latest",
                        "topics": topics}]),
            )
        };
        let tx_of = |l: &Value| l["transactionHash"].as_str().unwrap_or_default().to_owned();
        let used: std::collections::BTreeSet<String> = logs(json!([AUTHORIZATION_USED]))
            .as_array()
            .into_iter()
            .flatten()
            .map(tx_of)
            .collect();
        let pay_to = format!(
            "0x{:0>64}",
            self.get("pay_to").trim_start_matches("0x").to_lowercase()
        );
        logs(json!([TRANSFER, null, pay_to]))
            .as_array()
            .into_iter()
            .flatten()
            .map(tx_of)
            .filter(|tx| used.contains(tx))
            .collect()
    }

    /// The purchase ledger of `server` (a self-settling `umpire serve` on this chain)
    /// against the chain: every `Settled` entry names a transaction in which an
    /// authorization paid us, and every such transaction is in the ledger once. No
    /// payment kept without its purchase, no purchase recorded without its payment.
    pub fn assert_ledger_matches_chain(&self, server: &Server) {
        let db = server.data.path().join("umpire.sqlite3");
        let conn = rusqlite::Connection::open(&db).expect("open the server's store");
        let mut st = conn
            .prepare("SELECT tx_hash FROM payments WHERE phase = 'settled'")
            .expect("query");
        let mut settled: Vec<String> = st
            .query_map([], |r| r.get::<_, String>(0))
            .expect("rows")
            .map(|r| r.expect("row").to_lowercase())
            .collect();
        settled.sort();
        let on_chain: Vec<String> = self.authorization_payments().into_iter().collect();
        assert_eq!(
            settled, on_chain,
            "the ledger's settled payments (left) must be exactly the authorizations that paid us on chain (right)"
        );
    }

    /// The token balance of `owner` in base units.
    pub fn balance(&self, owner: &str) -> u128 {
        // balanceOf(address): selector 0x70a08231, then the address left-padded to 32 bytes.
        let data = format!(
            "0x70a08231{:0>64}",
            owner.trim_start_matches("0x").to_lowercase()
        );
        let out = self.rpc(
            "eth_call",
            json!([{"to": self.get("asset"), "data": data}, "latest"]),
        );
        u128::from_str_radix(out.as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)
            .expect("balance")
    }

    /// anvil's unlocked accounts (its test mnemonic, index 0 to 9).
    pub fn accounts(&self) -> Vec<String> {
        self.rpc("eth_accounts", json!([]))
            .as_array()
            .expect("accounts")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_owned))
            .collect()
    }

    /// Sends a transaction from an unlocked account and waits for its receipt.
    pub fn send(&self, tx: serde_json::Value) -> serde_json::Value {
        let hash = self.rpc("eth_sendTransaction", json!([tx]));
        // anvil mines on submission, but the receipt can lag a moment under load.
        for _ in 0..100 {
            let receipt = self.rpc("eth_getTransactionReceipt", json!([hash]));
            if !receipt.is_null() {
                return receipt;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("no receipt for {hash}");
    }

    /// Moves `amount` of the token from `from` (an unlocked anvil account) to `to`;
    /// returns the transaction hash.
    pub fn transfer(&self, from: &str, to: &str, amount: u128) -> String {
        let receipt = self.try_transfer(from, to, amount, None);
        assert_eq!(receipt["status"], "0x1", "transfer failed: {receipt}");
        receipt["transactionHash"]
            .as_str()
            .expect("hash")
            .to_owned()
    }

    /// Like `transfer`, with a fixed gas limit so a transfer that reverts is still mined;
    /// returns the receipt.
    pub fn try_transfer(
        &self,
        from: &str,
        to: &str,
        amount: u128,
        gas: Option<u64>,
    ) -> serde_json::Value {
        // transfer(address,uint256): selector 0xa9059cbb.
        let data = format!(
            "0xa9059cbb{:0>64}{:064x}",
            to.trim_start_matches("0x").to_lowercase(),
            amount
        );
        let mut tx = json!({"from": from, "to": self.get("asset"), "data": data});
        if let Some(gas) = gas {
            tx["gas"] = json!(format!("{gas:#x}"));
        }
        self.send(tx)
    }

    /// Executes the EIP-3009 authorization inside a PAYMENT-SIGNATURE header as a
    /// stranger would (`transferWithAuthorization` sent from `sender`, any unlocked
    /// account): the money moves to the authorization's payee without Umpire.
    /// Returns the receipt.
    pub fn execute_authorization(&self, sender: &str, payment_header: &str) -> Value {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(payment_header)
            .expect("base64 header");
        let v: Value = serde_json::from_slice(&raw).expect("payment JSON");
        let a = &v["payload"]["authorization"];
        let sig = v["payload"]["signature"]
            .as_str()
            .expect("signature")
            .trim_start_matches("0x")
            .to_owned();
        assert_eq!(sig.len(), 130, "an EOA signature");
        let word = |s: &str| format!("{:0>64}", s.trim_start_matches("0x").to_lowercase());
        let uint = |s: &str| format!("{:064x}", s.parse::<u128>().expect("uint"));
        let (r, s_, v_) = (&sig[..64], &sig[64..128], &sig[128..]);
        // transferWithAuthorization(address,address,uint256,uint256,uint256,bytes32,uint8,bytes32,bytes32)
        let data = format!(
            "0xe3ee160e{}{}{}{}{}{}{:0>64}{r}{s_}",
            word(a["from"].as_str().expect("from")),
            word(a["to"].as_str().expect("to")),
            uint(a["value"].as_str().expect("value")),
            uint(a["validAfter"].as_str().expect("validAfter")),
            uint(a["validBefore"].as_str().expect("validBefore")),
            word(a["nonce"].as_str().expect("nonce")),
            v_,
        );
        self.send(json!({"from": sender, "to": self.get("asset"), "data": data}))
    }

    /// The environment for `umpire serve` to accept feedback proven on this chain,
    /// with the test token standing in for USDC.
    pub fn feedback_env(&self) -> Vec<(String, String)> {
        vec![
            ("UMPIRE_FEEDBACK_RPC_URL".into(), self.get("rpc_url")),
            ("UMPIRE_FEEDBACK_CHAIN_ID".into(), self.get("chain_id")),
            ("UMPIRE_FEEDBACK_USDC".into(), self.get("asset")),
            ("UMPIRE_FEEDBACK_CONFIRMATIONS".into(), "1".into()),
        ]
    }

    /// The environment for `umpire serve` to sell on this chain.
    pub fn server_env(&self, settlement: Settlement) -> Vec<(String, String)> {
        let mut env = vec![
            ("UMPIRE_EVM_PAY_TO".into(), self.get("pay_to")),
            ("UMPIRE_EVM_NETWORK".into(), self.get("network")),
            ("UMPIRE_EVM_ASSET".into(), self.get("asset")),
            ("UMPIRE_EVM_ASSET_NAME".into(), self.get("asset_name")),
            ("UMPIRE_EVM_ASSET_VERSION".into(), self.get("asset_version")),
        ];
        match settlement {
            Settlement::SelfSettle => {
                env.push(("UMPIRE_SETTLEMENT".into(), "self".into()));
                env.push(("UMPIRE_EVM_RPC_URL".into(), self.get("rpc_url")));
                env.push((
                    "UMPIRE_SETTLER_PRIVATE_KEY".into(),
                    self.get("settler_private_key"),
                ));
            }
            Settlement::Facilitator(url) => {
                env.push(("UMPIRE_SETTLEMENT".into(), "facilitator".into()));
                env.push(("UMPIRE_FACILITATOR_URL".into(), url));
                env.push((
                    "UMPIRE_FACILITATOR_AUTH".into(),
                    format!("Bearer {FACILITATOR_TOKEN}"),
                ));
            }
        }
        env
    }

    /// `umpire serve` selling on this chain.
    pub fn serve(&self, settlement: Settlement, extra: &[(&str, &str)]) -> Server {
        self.serve_in(TempDir::new("serve"), settlement, extra)
    }

    /// `umpire serve` selling on this chain from an existing data directory (a
    /// restart after [`Server::crash`]).
    pub fn serve_in(
        &self,
        data: TempDir,
        settlement: Settlement,
        extra: &[(&str, &str)],
    ) -> Server {
        self.start_with(settlement, extra, |env| Server::start_in(data, env))
    }

    /// [`Devnet::serve`], logging at debug level into the data directory's `serve.log`
    /// (read with [`Server::logs`]): for a test that counts what the server did where
    /// nothing outside can see it (attempts at a port where nothing listens, say).
    pub fn serve_logged(&self, settlement: Settlement, extra: &[(&str, &str)]) -> Server {
        self.start_with(settlement, extra, Server::start_logged)
    }

    /// Starts a server with this chain's environment for `settlement`, then `extra`.
    fn start_with(
        &self,
        settlement: Settlement,
        extra: &[(&str, &str)],
        start: impl FnOnce(&[(&str, &str)]) -> Server,
    ) -> Server {
        let env = self.server_env(settlement);
        let mut all: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        start(&all)
    }
}

/// How anvil makes blocks.
#[derive(Debug, Clone, Copy)]
pub enum Mining {
    /// Each transaction mined as it arrives (anvil's default; the devnet's).
    Instant,
    /// A block every interval, as Base makes one every two seconds.
    Every(Duration),
    /// Only when the test calls [`Devnet::mine`].
    Manual,
}

impl Drop for Devnet {
    fn drop(&mut self) {
        let _ = self.anvil.kill();
        let _ = self.anvil.wait();
    }
}

pub const FACILITATOR_TOKEN: &str = "test-facilitator-token";

#[derive(Debug, Clone)]
pub enum Settlement {
    SelfSettle,
    Facilitator(String),
}

/// The reference facilitator (tests/js/facilitator.mjs) on this chain.
pub struct Facilitator {
    child: Child,
    pub url: String,
}

impl Facilitator {
    pub fn start(devnet: &Devnet, v1_network: Option<&str>) -> Facilitator {
        Facilitator::start_with(devnet, v1_network, None)
    }

    /// Settling on the devnet and, with `svm`, on a local Solana chain too.
    pub fn start_with(
        devnet: &Devnet,
        v1_network: Option<&str>,
        svm: Option<&crate::svm::SolanaNet>,
    ) -> Facilitator {
        Facilitator::start_args(devnet, v1_network, svm, &[])
    }

    /// Whose `/settle` waits `wait` for a receipt, then answers `settlement_pending`
    /// with the transaction (the reference facilitator's own timeout, 30 s shipped).
    pub fn start_confirming_within(devnet: &Devnet, wait: std::time::Duration) -> Facilitator {
        let ms = wait.as_millis().to_string();
        Facilitator::start_args(devnet, None, None, &["--confirmation-timeout-ms", &ms])
    }

    /// With the script's own arguments `extra` (`--confirmation-timeout-ms`, ...).
    pub fn start_args(
        devnet: &Devnet,
        v1_network: Option<&str>,
        svm: Option<&crate::svm::SolanaNet>,
        extra: &[&str],
    ) -> Facilitator {
        let mut cmd = Command::new("node");
        cmd.arg(repo_root().join("tests/js/facilitator.mjs"))
            .args([
                "--devnet",
                &devnet.devnet_json(),
                "--token",
                FACILITATOR_TOKEN,
            ])
            .current_dir(repo_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(n) = v1_network {
            cmd.args(["--v1-network", n]);
        }
        if let Some(net) = svm {
            cmd.args(["--svm", &net.svm_json()]);
        }
        cmd.args(extra);
        let mut child = cmd.spawn().expect("start the facilitator");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("facilitator port line");
        let v: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|_| panic!("facilitator said {line:?}"));
        Facilitator {
            child,
            url: format!("http://127.0.0.1:{}", v["port"]),
        }
    }
}

impl Drop for Facilitator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What a node client printed: status, headers, body text.
pub struct Bought {
    pub status: u16,
    pub headers: Value,
    pub body: String,
}

impl Bought {
    /// What a node client script printed (`{"status", "headers", "body"}`).
    pub fn printed(v: &Value) -> Bought {
        Bought {
            status: v["status"].as_u64().unwrap_or(0) as u16,
            headers: v["headers"].clone(),
            body: v["body"].as_str().unwrap_or_default().to_owned(),
        }
    }

    pub fn json(&self) -> umpire_core::Value {
        umpire_core::json::parse(self.body.as_bytes())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers[name].as_str().map(str::to_owned)
    }
}

/// Buys with the reference v2 client (`@x402/fetch` + `@x402/evm`).
pub fn buy_v2(devnet: &Devnet, url: &str, body: &str, key: Option<&str>) -> Bought {
    buy_with("tests/js/buy.mjs", devnet, url, body, key)
}

/// Buys a GET resource (the reputation report) with the reference v2 client.
pub fn buy_get_v2(devnet: &Devnet, url: &str) -> Bought {
    let dn = devnet.devnet_json();
    let v = node_json(
        "tests/js/buy.mjs",
        &["--devnet", dn.as_str(), "--method", "GET", "--url", url],
    );
    Bought::printed(&v)
}

/// Calls a paid MCP tool at `mcp_url` with x402's official MCP client (the Python SDK's
/// `x402.mcp`, tests/py/mcp_buy.py), paying with the devnet's demo payer: what it
/// printed (`is_error`, `payment_made`, `payment_response`, `structured`, `texts`).
pub fn buy_over_mcp(devnet: &Devnet, mcp_url: &str, tool: &str, arguments: &str) -> Value {
    let out = std::process::Command::new(crate::python())
        .arg(crate::repo_root().join("tests/py/mcp_buy.py"))
        .args(["--devnet", &devnet.devnet_json()])
        .args(["--url", mcp_url, "--tool", tool, "--arguments", arguments])
        .output()
        .expect("run tests/py/mcp_buy.py");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "mcp_buy.py failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Buys with the reference v1 client (`x402-fetch`).
pub fn buy_v1(devnet: &Devnet, url: &str, body: &str, key: Option<&str>) -> Bought {
    buy_with("tests/js/buy_v1.mjs", devnet, url, body, key)
}

fn buy_with(script: &str, devnet: &Devnet, url: &str, body: &str, key: Option<&str>) -> Bought {
    let dn = devnet.devnet_json();
    let mut args = vec!["--devnet", dn.as_str(), "--url", url, "--body", body];
    if let Some(k) = key {
        args.extend(["--key", k]);
    }
    let v = node_json(script, &args);
    Bought::printed(&v)
}

/// A PAYMENT-SIGNATURE header signed by the reference client for `url`'s 402, not sent.
pub fn sign_payment(devnet: &Devnet, url: &str, body: &str) -> String {
    let dn = devnet.devnet_json();
    let v = node_json(
        "tests/js/buy.mjs",
        &["--devnet", &dn, "--url", url, "--body", body, "--sign-only"],
    );
    v["header"]
        .as_str()
        .unwrap_or_else(|| panic!("no payment header: {v}"))
        .to_owned()
}

/// `count` distinct PAYMENT-SIGNATURE headers (each its own EIP-3009 nonce) for the
/// same 402, signed by the reference client in one run.
pub fn sign_payments(devnet: &Devnet, url: &str, body: &str, count: usize) -> Vec<String> {
    let dn = devnet.devnet_json();
    let n = count.to_string();
    let v = node_json(
        "tests/js/buy.mjs",
        &[
            "--devnet",
            &dn,
            "--url",
            url,
            "--body",
            body,
            "--sign-only",
            "--count",
            &n,
        ],
    );
    let headers: Vec<String> = v["headers"]
        .as_array()
        .unwrap_or_else(|| panic!("no payment headers: {v}"))
        .iter()
        .filter_map(|h| h.as_str().map(str::to_owned))
        .collect();
    assert_eq!(headers.len(), count, "{v}");
    headers
}

/// A JSON-RPC proxy in front of anvil that behaves like a public RPC provider on a bad
/// day: every call can cost a fixed latency; chosen calls can be delayed, failed,
/// answered `null`, or forwarded with their answer dropped (the transaction went out,
/// the reply never came back); receipts can come late or be held; every connection can
/// be refused; and every call is counted by method. Lives as long as the test process.
pub struct RpcProxy {
    pub url: String,
    ctl: Arc<ProxyControl>,
}

/// What the proxy does to one call of a method (see [`RpcProxy::fault`]).
#[derive(Debug, Clone)]
pub enum Fault {
    /// Waits this long, then forwards and answers.
    Delay(Duration),
    /// Forwards the call (it reaches the chain), then closes the connection unanswered.
    LoseAnswer,
    /// Forwards the call, then holds the connection this long and closes it unanswered
    /// (the answer lost while the chain goes on: a block may seal meanwhile).
    LoseAnswerAfter(Duration),
    /// Answers this JSON-RPC error without forwarding.
    Fail(String),
    /// Answers this result without forwarding (a node that lags: `[]` for logs).
    Result(Value),
}

#[derive(Default)]
struct ProxyControl {
    down: AtomicBool,
    receipt_delay_ms: AtomicU64,
    latency_ms: AtomicU64,
    /// Receipts answered `null` until this long after a transaction was first asked
    /// about (the chain mined it; the provider has not caught up).
    late_receipts_ms: AtomicU64,
    first_asked: Mutex<std::collections::HashMap<String, std::time::Instant>>,
    lose_answers_of: Mutex<Option<String>>,
    /// (method, fault, calls left; `None`: every call).
    faults: Mutex<Vec<(String, Fault, Option<usize>)>>,
    /// Calls of a method that pass before its faults apply.
    spared: Mutex<std::collections::HashMap<String, usize>>,
    calls: Mutex<Vec<String>>,
    /// Each call that reached the chain (its answer kept or lost), by method: counted
    /// once the chain has it, where `calls` counts on arrival.
    reached: Mutex<Vec<String>>,
    /// The chain's error message for each call it refused, by method (whether or not
    /// the answer then reached the server): which path a test took.
    refusals: Mutex<Vec<(String, String)>>,
    /// When each transaction sent through the proxy was accepted, by hash.
    sent_at: Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// Receipts are preconfirmed this long after a send (0: never), as a flashblocks
    /// RPC does.
    preconfirm_ms: AtomicU64,
    /// A preconfirmed transaction then leaves the pool.
    drop_preconfirmed: AtomicBool,
    /// How many preconfirmed receipts the proxy has answered.
    preconfirmed_answers: AtomicUsize,
    /// The next call of this method waits until [`Paused::resume`].
    pause_on: Mutex<Option<String>>,
    paused: Mutex<PauseState>,
    paused_changed: std::sync::Condvar,
}

#[derive(Default, PartialEq)]
enum PauseState {
    #[default]
    None,
    Holding,
    Released,
}

/// A call held by the proxy: the server is in the middle of a request.
pub struct Paused<'a> {
    ctl: &'a ProxyControl,
}

impl Paused<'_> {
    /// Lets the held call go on to the chain.
    pub fn resume(self) {
        *lock(&self.ctl.paused) = PauseState::Released;
        self.ctl.paused_changed.notify_all();
    }
}

impl RpcProxy {
    pub fn start(devnet: &Devnet) -> RpcProxy {
        let upstream = devnet.rpc_addr();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let ctl = Arc::new(ProxyControl::default());
        let shared = ctl.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let ctl = shared.clone();
                std::thread::spawn(move || ctl.serve(conn, upstream));
            }
        });
        RpcProxy { url, ctl }
    }

    /// While down, every connection is closed unanswered.
    pub fn set_down(&self, down: bool) {
        self.ctl.down.store(down, Ordering::SeqCst);
    }

    /// Every round trip (a call, or a batch of calls) costs this much first: a provider
    /// tens of milliseconds away.
    pub fn set_latency(&self, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self.ctl.latency_ms.store(ms, Ordering::SeqCst);
    }

    pub fn delay_receipts(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.ctl.receipt_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// Receipts are `null` until `after` past the first question about each transaction.
    pub fn late_receipts(&self, after: Duration) {
        let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
        self.ctl.late_receipts_ms.store(ms, Ordering::SeqCst);
    }

    /// Answers like an RPC that streams flashblocks: a transaction sent through the
    /// proxy has a (preconfirmed) receipt `after` its send, in the block being built,
    /// before the chain seals it (`None`: receipts only for sealed blocks).
    pub fn preconfirm(&self, after: Option<Duration>) {
        let ms = after.map_or(0, |a| {
            u64::try_from(a.as_millis()).unwrap_or(u64::MAX).max(1)
        });
        self.ctl.preconfirm_ms.store(ms, Ordering::SeqCst);
    }

    /// How many preconfirmed receipts (of blocks not sealed yet) were answered so far.
    pub fn preconfirmed_answers(&self) -> usize {
        self.ctl.preconfirmed_answers.load(Ordering::SeqCst)
    }

    /// A transaction preconfirmed from now on leaves the pool at once: its flashblock
    /// is not included.
    pub fn drop_preconfirmed(&self, drop: bool) {
        self.ctl.drop_preconfirmed.store(drop, Ordering::SeqCst);
    }

    /// Calls of `method` reach the chain, their answers are dropped.
    pub fn lose_answers_of(&self, method: Option<&str>) {
        *lock(&self.ctl.lose_answers_of) = method.map(str::to_owned);
    }

    /// `fault` for the next `times` calls of `method` (`None`: every call from now on).
    pub fn fault(&self, method: &str, fault: Fault, times: Option<usize>) {
        lock(&self.ctl.faults).push((method.to_owned(), fault, times));
    }

    /// As [`RpcProxy::fault`], once `spare` more calls of `method` went through (each
    /// call of a batch counts: the second transaction of a batch, say).
    pub fn fault_after(&self, method: &str, spare: usize, fault: Fault, times: Option<usize>) {
        lock(&self.ctl.spared).insert(method.to_owned(), spare);
        self.fault(method, fault, times);
    }

    /// Blinds the server to the chain from now on, and drops the answer of the call it
    /// is about to make (a broadcast, say): nothing it asks can tell it whether that call
    /// went through. The chain itself goes on; [`RpcProxy::see_again`] lifts it.
    pub fn blind(&self) {
        self.fault("eth_sendRawTransaction", Fault::LoseAnswer, None);
        for method in [
            "eth_getTransactionReceipt",
            "eth_call",
            "eth_getLogs",
            "eth_blockNumber",
            "eth_getTransactionCount",
            "eth_feeHistory",
        ] {
            self.fault(method, Fault::Fail("the RPC is overloaded".into()), None);
        }
    }

    /// Ends [`RpcProxy::blind`] (and every other fault).
    pub fn see_again(&self) {
        lock(&self.ctl.faults).clear();
    }

    /// Holds the next call of `method` (the server stops mid-request there) and returns
    /// once it arrived; the call goes on after [`Paused::resume`].
    pub fn pause_next(&self, method: &str, trigger: impl FnOnce()) -> Paused<'_> {
        *lock(&self.ctl.paused) = PauseState::None;
        *lock(&self.ctl.pause_on) = Some(method.to_owned());
        trigger();
        let mut state = lock(&self.ctl.paused);
        while *state != PauseState::Holding {
            let (next, timeout) = self
                .ctl
                .paused_changed
                .wait_timeout(state, Duration::from_secs(60))
                .unwrap_or_else(|p| p.into_inner());
            assert!(!timeout.timed_out(), "no {method} call came");
            state = next;
        }
        Paused { ctl: &self.ctl }
    }

    /// How many calls of `method` came through so far (each call of a batch counts).
    pub fn calls_of(&self, method: &str) -> usize {
        lock(&self.ctl.calls)
            .iter()
            .filter(|m| *m == method)
            .count()
    }

    /// Every call so far, by method.
    pub fn counts(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for m in lock(&self.ctl.calls).iter() {
            *counts.entry(m.clone()).or_default() += 1;
        }
        counts
    }

    /// How many calls of `method` the chain has received so far (through the proxy,
    /// answered or not): a transaction counted here is in the node's pool, so a block
    /// mined after it can hold it.
    pub fn reached_chain(&self, method: &str) -> usize {
        lock(&self.ctl.reached)
            .iter()
            .filter(|m| *m == method)
            .count()
    }

    /// The chain's error messages for the calls of `method` it refused so far.
    pub fn refusals_of(&self, method: &str) -> Vec<String> {
        lock(&self.ctl.refusals)
            .iter()
            .filter(|(m, _)| m == method)
            .map(|(_, e)| e.clone())
            .collect()
    }

    pub fn reset_counts(&self) {
        lock(&self.ctl.calls).clear();
    }
}

/// One JSON-RPC call sent on to the chain, and its answer (an error object when the
/// chain's answer is not JSON).
fn forward(upstream: SocketAddr, call: &Value) -> Value {
    let answer = request(
        upstream,
        "POST",
        "/",
        &[("Content-Type", "application/json")],
        Some(call.to_string().as_bytes()),
    );
    serde_json::from_slice(&answer.body).unwrap_or_else(|_| {
        json!({"jsonrpc": "2.0", "id": call["id"], "error": {"code": -32603,
            "message": format!("upstream answered {}", answer.status)}})
    })
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ProxyControl {
    /// The fault for one call of `method`, using up a counted rule.
    fn fault_for(&self, method: &str) -> Option<Fault> {
        if let Some(left) = lock(&self.spared).get_mut(method).filter(|n| **n > 0) {
            *left -= 1;
            return None;
        }
        let mut faults = lock(&self.faults);
        let i = faults.iter().position(|(m, _, _)| m == method)?;
        let fault = faults[i].1.clone();
        if let Some(left) = faults[i].2.as_mut() {
            *left -= 1;
            if *left == 0 {
                faults.remove(i);
            }
        }
        Some(fault)
    }

    /// A receipt the provider has not caught up with yet.
    fn receipt_is_late(&self, call: &Value) -> bool {
        let late = self.late_receipts_ms.load(Ordering::SeqCst);
        if late == 0 || call["method"] != "eth_getTransactionReceipt" {
            return false;
        }
        let hash = call["params"][0].as_str().unwrap_or_default().to_owned();
        let first = *lock(&self.first_asked)
            .entry(hash)
            .or_insert_with(std::time::Instant::now);
        first.elapsed() < Duration::from_millis(late)
    }

    fn serve(&self, mut conn: std::net::TcpStream, upstream: SocketAddr) {
        // One call (or batch) per connection: the answer says Connection: close.
        if self.down.load(Ordering::SeqCst) {
            return;
        }
        let Some(req) = read_request(&mut conn) else {
            return;
        };
        let body: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let (calls, batch): (Vec<&Value>, bool) = match &body {
            Value::Array(calls) => (calls.iter().collect(), true),
            call => (vec![call], false),
        };
        lock(&self.calls).extend(
            calls
                .iter()
                .map(|c| c["method"].as_str().unwrap_or_default().to_owned()),
        );
        std::thread::sleep(Duration::from_millis(
            self.latency_ms.load(Ordering::SeqCst),
        ));
        // Each call of a batch meets the same faults, pauses and lost answers as a call
        // alone (a node answers a batch call by call); one lost answer loses the batch.
        let mut answers = Vec::with_capacity(calls.len());
        for call in calls {
            match self.answer(call, upstream) {
                Some(a) => answers.push(a),
                None => return,
            }
        }
        let answer = if batch {
            Value::Array(answers)
        } else {
            answers.pop().unwrap_or(Value::Null)
        };
        let body = answer.to_string();
        let _ = write!(
            conn,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = conn.write_all(body.as_bytes());
    }

    /// The answer to one call, or `None` when it is lost (the proxy went down, or the
    /// call went through and its answer is dropped).
    fn answer(&self, call: &Value, upstream: SocketAddr) -> Option<Value> {
        let method = call["method"].as_str().unwrap_or_default().to_owned();
        let hold = {
            let mut on = lock(&self.pause_on);
            let hit = !method.is_empty() && on.as_deref() == Some(method.as_str());
            if hit {
                *on = None;
            }
            hit
        };
        if hold {
            let mut state = lock(&self.paused);
            *state = PauseState::Holding;
            self.paused_changed.notify_all();
            while *state != PauseState::Released {
                state = self
                    .paused_changed
                    .wait(state)
                    .unwrap_or_else(|p| p.into_inner());
            }
        }
        if self.down.load(Ordering::SeqCst) {
            return None;
        }
        let id = call["id"].clone();
        let mut lose = false;
        let mut lost_after = Duration::ZERO;
        match self.fault_for(&method) {
            Some(Fault::Delay(d)) => std::thread::sleep(d),
            Some(Fault::Fail(message)) => {
                return Some(json!({"jsonrpc": "2.0", "id": id,
                    "error": {"code": -32000, "message": message}}));
            }
            Some(Fault::LoseAnswer) => lose = true,
            Some(Fault::LoseAnswerAfter(d)) => (lose, lost_after) = (true, d),
            Some(Fault::Result(result)) => {
                return Some(json!({"jsonrpc": "2.0", "id": id, "result": result}));
            }
            None => {}
        }
        if self.receipt_is_late(call) {
            return Some(json!({"jsonrpc": "2.0", "id": id, "result": null}));
        }
        let delay = self.receipt_delay_ms.load(Ordering::SeqCst);
        if method == "eth_getTransactionReceipt" && delay > 0 {
            std::thread::sleep(Duration::from_millis(delay));
        }
        let mut answer = forward(upstream, call);
        lock(&self.reached).push(method.clone());
        if let Some(message) = answer["error"]["message"].as_str() {
            lock(&self.refusals).push((method.clone(), message.to_owned()));
        }
        if lose || lock(&self.lose_answers_of).as_deref() == Some(method.as_str()) {
            std::thread::sleep(lost_after);
            return None;
        }
        if method == "eth_sendRawTransaction"
            && let Some(hash) = answer["result"].as_str()
        {
            lock(&self.sent_at).insert(hash.to_owned(), std::time::Instant::now());
        }
        if method == "eth_getTransactionReceipt"
            && answer["result"].is_null()
            && let Some(receipt) = self.preconfirmed(call, upstream)
        {
            answer["result"] = receipt;
            self.preconfirmed_answers.fetch_add(1, Ordering::SeqCst);
        }
        Some(answer)
    }

    /// What a flashblocks-aware RPC answers for a transaction the proxy forwarded and the
    /// chain has not sealed yet: once a flashblock has passed since it was sent (and it is
    /// still in the pool), a receipt in the block being built, its status what the
    /// transaction does on the latest state. With `drop_preconfirmed`, the transaction
    /// then leaves the pool (the flashblock is not included).
    fn preconfirmed(&self, call: &Value, upstream: SocketAddr) -> Option<Value> {
        let every = self.preconfirm_ms.load(Ordering::SeqCst);
        if every == 0 {
            return None;
        }
        let hash = call["params"][0].as_str()?.to_owned();
        let sent = *lock(&self.sent_at).get(&hash)?;
        if sent.elapsed() < Duration::from_millis(every) {
            return None;
        }
        let rpc = |method: &str, params: Value| {
            forward(
                upstream,
                &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}),
            )
        };
        let tx = rpc("eth_getTransactionByHash", json!([hash]))["result"].clone();
        if tx.is_null() || !tx["blockNumber"].is_null() {
            return None;
        }
        let simulated = rpc(
            "eth_call",
            json!([{"from": tx["from"], "to": tx["to"], "data": tx["input"],
                "gas": tx["gas"], "value": tx["value"]}, "latest"]),
        );
        let status = if simulated["error"].is_null() {
            "0x1"
        } else {
            "0x0"
        };
        let latest = rpc("eth_blockNumber", json!([]))["result"]
            .as_str()
            .and_then(|n| u64::from_str_radix(n.trim_start_matches("0x"), 16).ok())?;
        if self.drop_preconfirmed.load(Ordering::SeqCst) {
            rpc("anvil_dropTransaction", json!([hash]));
        }
        Some(json!({
            "transactionHash": hash,
            "transactionIndex": "0x1",
            "blockHash": format!("0x{}", "fb".repeat(32)),
            "blockNumber": format!("0x{:x}", latest + 1),
            "from": tx["from"],
            "to": tx["to"],
            "cumulativeGasUsed": "0x14c08",
            "gasUsed": "0x14c08",
            "effectiveGasPrice": tx["maxFeePerGas"].clone(),
            "contractAddress": null,
            "logs": [],
            "logsBloom": format!("0x{}", "00".repeat(256)),
            "type": tx["type"].clone(),
            "status": status,
        }))
    }
}
