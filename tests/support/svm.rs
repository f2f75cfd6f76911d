//! A local Solana chain for the tests (`infra/devnet/svm.mjs`: litesvm with the real
//! SPL Token program behind a JSON-RPC front), the reference facilitator settling on
//! it, the reference client paying on it, and servers selling on it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use umpire_x402::PaymentRequired;
use umpire_x402::client::{sign_exact_svm, solana_keypair};

use crate::chain::{Bought, FACILITATOR_TOKEN, node_json};
use crate::{Server, TempDir, repo_root};

/// The chain, its accounts (svm.json) and its process.
pub struct SolanaNet {
    child: Child,
    pub dir: TempDir,
    pub info: Value,
}

impl SolanaNet {
    pub fn start() -> SolanaNet {
        let dir = TempDir::new("svm");
        let out = dir.path().join("svm.json");
        let mut child = Command::new("node")
            .arg(repo_root().join("infra/devnet/svm.mjs"))
            .arg("--out")
            .arg(&out)
            .current_dir(repo_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start infra/devnet/svm.mjs");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the local Solana chain's port line");
        assert!(
            line.contains("port"),
            "the local Solana chain did not start: {line:?}"
        );
        let info: Value = serde_json::from_slice(&std::fs::read(&out).expect("svm.json"))
            .expect("svm.json is JSON");
        SolanaNet { child, dir, info }
    }

    pub fn get(&self, k: &str) -> String {
        self.info[k]
            .as_str()
            .unwrap_or_else(|| panic!("svm.json has no {k}"))
            .to_owned()
    }

    pub fn svm_json(&self) -> String {
        self.dir
            .path()
            .join("svm.json")
            .to_string_lossy()
            .into_owned()
    }

    /// One JSON-RPC call: its result (panics on an error answer).
    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let url = self.get("rpc_url");
        let addr: std::net::SocketAddr = url
            .trim_start_matches("http://")
            .parse()
            .expect("rpc address");
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let r = crate::request(
            addr,
            "POST",
            "/",
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        );
        let v: Value = serde_json::from_slice(&r.body).expect("JSON-RPC answer");
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    /// Lamports held by `address`.
    pub fn lamports(&self, address: &str) -> u64 {
        self.rpc("getBalance", json!([address]))["value"]
            .as_u64()
            .expect("lamports")
    }

    /// Token units in the token account `account`.
    pub fn token_units(&self, account: &str) -> u64 {
        self.rpc("getTokenAccountBalance", json!([account]))["value"]["amount"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .expect("token amount")
    }

    /// Transactions signed so far can no longer land.
    pub fn expire_blockhash(&self) {
        self.rpc("umpire_expireBlockhash", json!([]));
    }

    /// While `hold`, landed transactions are reported only processed (not confirmed).
    pub fn hold_statuses(&self, hold: bool) {
        self.rpc("umpire_holdStatuses", json!([hold]));
    }

    /// Landed transactions are reported only processed until `after` past landing, as a
    /// cluster confirms a transaction once its votes come in, slots later.
    pub fn confirm_after(&self, after: std::time::Duration) {
        self.rpc(
            "umpire_confirmAfter",
            json!([u64::try_from(after.as_millis()).unwrap_or(u64::MAX)]),
        );
    }

    /// How many calls of `method` the node has answered so far.
    pub fn calls_of(&self, method: &str) -> u64 {
        self.rpc("umpire_calls", json!([method]))
            .as_u64()
            .expect("a count")
    }

    /// The next `n` broadcasts are refused by the node.
    pub fn fail_sends(&self, n: u32) {
        self.rpc("umpire_failSends", json!([n]));
    }

    /// The environment of a server selling on this chain: USDC on Solana through
    /// `facilitator`, and native SOL (settled by the server on this chain) quoted from
    /// the price feed at `price_url`.
    pub fn server_env(&self, facilitator: &str, price_url: &str) -> Vec<(String, String)> {
        [
            ("UMPIRE_SOLANA_PAY_TO", self.get("pay_to")),
            ("UMPIRE_SOLANA_FEE_PAYER", self.get("fee_payer")),
            ("UMPIRE_SOLANA_NETWORK", self.get("network")),
            ("UMPIRE_SOLANA_USDC_MINT", self.get("usdc_mint")),
            ("UMPIRE_SOL_NATIVE", "on".into()),
            ("UMPIRE_SOLANA_RPC_URL", self.get("rpc_url")),
            ("UMPIRE_SOL_PRICE_URL", price_url.to_owned()),
            ("UMPIRE_FACILITATOR_URL", facilitator.to_owned()),
            (
                "UMPIRE_FACILITATOR_AUTH",
                format!("Bearer {FACILITATOR_TOKEN}"),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// `umpire serve` selling on this chain (see [`SolanaNet::server_env`]), plus `extra`.
    pub fn serve(
        &self,
        facilitator: &SvmFacilitator,
        price_url: &str,
        extra: &[(&str, &str)],
    ) -> Server {
        self.serve_in(TempDir::new("serve-svm"), facilitator, price_url, extra)
    }

    /// The same, on an existing data directory (one holding another server's signing
    /// key, say).
    pub fn serve_in(
        &self,
        data: TempDir,
        facilitator: &SvmFacilitator,
        price_url: &str,
        extra: &[(&str, &str)],
    ) -> Server {
        let env = self.server_env(&facilitator.url, price_url);
        let mut all: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        all.extend_from_slice(extra);
        Server::start_in(data, &all)
    }

    /// A native SOL payment (the PAYMENT-SIGNATURE value) for the SOL option of
    /// `required` (at `lamports` instead of its amount, if given), signed by the chain's
    /// SOL payer: what `umpire buy --rail sol` sends.
    pub fn sign_native(&self, required: &PaymentRequired, lamports: Option<u64>) -> String {
        let (payer, _) = solana_keypair(
            &std::fs::read_to_string(self.get("sol_payer_keypair")).expect("keypair file"),
        )
        .expect("keypair");
        let mut option = required
            .accepts
            .iter()
            .find(|r| r.asset == umpire_x402::svm::NATIVE_SOL_ASSET)
            .unwrap_or_else(|| panic!("no SOL option: {required:?}"))
            .clone();
        if let Some(l) = lamports {
            option.amount = umpire_x402::types::TokenAmount::from(l);
        }
        let hash = self.rpc("getLatestBlockhash", json!([]))["value"]["blockhash"]
            .as_str()
            .and_then(umpire_x402::svm::Pubkey::from_base58)
            .expect("blockhash")
            .0;
        sign_exact_svm(
            &payer,
            required,
            &option,
            hash,
            None,
            umpire_host::random_bytes::<16>(),
        )
        .expect("signed")
    }

    /// `umpire buy` arguments and environment paying from `keypair` on this chain.
    pub fn buy_args(&self, keypair: &str) -> Vec<String> {
        vec![
            "--solana-keypair".into(),
            self.get(keypair),
            "--solana-rpc".into(),
            self.get("rpc_url"),
        ]
    }
}

impl Drop for SolanaNet {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reference facilitator (`@x402/svm`'s exact scheme) settling on a [`SolanaNet`]
/// with its fee payer.
pub struct SvmFacilitator {
    child: Child,
    pub url: String,
}

impl SvmFacilitator {
    pub fn start(net: &SolanaNet) -> SvmFacilitator {
        let mut child = Command::new("node")
            .arg(repo_root().join("tests/js/facilitator.mjs"))
            .args(["--svm", &net.svm_json(), "--token", FACILITATOR_TOKEN])
            .current_dir(repo_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the facilitator");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("facilitator port line");
        let v: Value = serde_json::from_str(line.trim())
            .unwrap_or_else(|_| panic!("facilitator said {line:?}"));
        SvmFacilitator {
            child,
            url: format!("http://127.0.0.1:{}", v["port"]),
        }
    }
}

impl Drop for SvmFacilitator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Buys with the reference v2 client (`@x402/fetch` + `@x402/svm`) from the chain's
/// USDC payer.
pub fn buy_svm(net: &SolanaNet, url: &str, body: &str, key: Option<&str>) -> Bought {
    let svm = net.svm_json();
    let mut args = vec!["--svm", svm.as_str(), "--url", url, "--body", body];
    if let Some(k) = key {
        args.extend(["--key", k]);
    }
    let v = node_json("tests/js/buy.mjs", &args);
    Bought::printed(&v)
}

/// A PAYMENT-SIGNATURE header the reference client signs for `url`'s 402 (USDC on
/// Solana), not sent.
pub fn sign_svm_payment(net: &SolanaNet, url: &str, body: &str) -> String {
    let svm = net.svm_json();
    let v = node_json(
        "tests/js/buy.mjs",
        &["--svm", &svm, "--url", url, "--body", body, "--sign-only"],
    );
    v["header"]
        .as_str()
        .unwrap_or_else(|| panic!("no payment header: {v}"))
        .to_owned()
}
