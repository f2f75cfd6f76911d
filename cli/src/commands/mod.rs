//! The `umpire` commands, one file each: the local ones (serve, judge, verify, keygen)
//! and the client of a running service (buy, status, find, validate, feedback,
//! reputation; `client` holds what they share).

pub mod buy;
pub mod client;
pub mod evaluate;
pub mod feedback;
pub mod guard;
pub mod held;
pub mod judge;
pub mod keygen;
pub mod lookup;
pub mod pay;
pub mod purchase;
pub mod reputation;
pub mod serve;
pub mod validate;
pub mod verify;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use umpire_api::{AppState, Config};
use umpire_checker::PoolConfig;
use umpire_core::json::{Value, parse};
use umpire_server::datadir::default_data_dir;
use umpire_store::sqlite::SqliteStore;

use umpire_core::product::Tier;

/// Where the service is.
#[derive(clap::Args)]
pub struct Remote {
    /// Base URL of the service. Default: $UMPIRE_BASE_URL, else http://127.0.0.1:8080.
    #[arg(long)]
    base: Option<String>,
}

/// The key file of the paying wallet: a file, or $UMPIRE_WALLET_KEY (never a flag
/// value).
#[derive(clap::Args)]
pub struct KeyArg {
    /// File holding the wallet's private key (0x + 64 hex). Default: $UMPIRE_WALLET_KEY.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
}

/// `--tier` and the tier arguments: witness, basic, probe or sworn.
pub fn parse_tier(text: &str) -> Result<Tier, String> {
    Tier::parse(text)
        .ok_or_else(|| format!("{text:?} is not a tier (witness, basic, probe or sworn)"))
}

/// A problem on our side of the wire (exit 2).
pub struct Local(pub String);

impl<E: std::fmt::Display> From<E> for Local {
    fn from(e: E) -> Self {
        Local(e.to_string())
    }
}

/// Runs a client command against the service; local problems exit 2.
pub async fn remote_call<F, Fut>(remote: Remote, f: F) -> ExitCode
where
    F: FnOnce(client::Api) -> Fut,
    Fut: std::future::Future<Output = Result<ExitCode, Local>>,
{
    let api = match client::Api::new(remote.base) {
        Ok(a) => a,
        Err(e) => return fail(2, &e.0),
    };
    match f(api).await {
        Ok(code) => code,
        Err(e) => fail(2, &e.0),
    }
}

pub fn fail(code: u8, message: &str) -> ExitCode {
    eprintln!("umpire: {message}");
    ExitCode::from(code)
}

/// What a command needs: the data directory's key, its embedded store (or a
/// throwaway one), and the isolated checker (this binary re-run as `check-worker`).
pub async fn state_for(
    data_dir: Option<PathBuf>,
    with_checker: bool,
    persistent: bool,
    request_budget_ms: Option<u64>,
) -> Result<(AppState, Arc<SqliteStore>), String> {
    let mut config = Config::from_env().map_err(|e| e.to_string())?;
    if let Some(ms) = request_budget_ms {
        if !(1_000..=umpire_api::plumbing::config::MAX_REQUEST_BUDGET_MS).contains(&ms) {
            return Err(format!(
                "--request-budget-ms {ms}: must be from 1000 to {}",
                umpire_api::plumbing::config::MAX_REQUEST_BUDGET_MS
            ));
        }
        config.request_budget = std::time::Duration::from_millis(ms);
        config.check_budget().map_err(|e| e.to_string())?;
    }
    let dir = data_dir.unwrap_or_else(default_data_dir);
    let checker = if with_checker {
        Some(
            PoolConfig::current_exe(config.check_limit)
                .map_err(|e| format!("cannot find the umpire binary: {e}"))?,
        )
    } else {
        None
    };
    umpire_server::embedded_state(config, &dir, persistent, checker).await
}

pub fn read_json(path: &Path) -> Result<Value, String> {
    let bytes = if path == Path::new("-") {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(|e| format!("stdin: {e}"))?;
        b
    } else {
        std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?
    };
    parse(&bytes).map_err(|e| format!("{}: not JSON: {e}", path.display()))
}
