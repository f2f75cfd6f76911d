//! `umpire serve`: the whole service on one port, on the embedded store.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use super::{fail, state_for};

/// Serve every endpoint in one process, with state in the data directory.
#[derive(clap::Args)]
pub struct Serve {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// Data directory (signing key, embedded store). Default: $UMPIRE_DATA_DIR, else
    /// ~/.local/share/umpire.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The time one paid request may take, in ms, from arrival to answer (fetches,
    /// checks and settlement fit inside it; settlement is not started past it).
    /// Default: $UMPIRE_REQUEST_BUDGET_MS, else 25000 (API Gateway ends requests at
    /// 30 s). At most 29000.
    #[arg(long)]
    request_budget_ms: Option<u64>,
}

impl Serve {
    pub async fn run(self) -> ExitCode {
        run(self.addr, self.data_dir, self.request_budget_ms).await
    }
}

async fn run(
    addr: SocketAddr,
    data_dir: Option<PathBuf>,
    request_budget_ms: Option<u64>,
) -> ExitCode {
    let (state, store) = match state_for(data_dir, true, true, request_budget_ms).await {
        Ok((s, store)) => (Arc::new(s), store),
        Err(e) => return fail(2, &e),
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => return fail(2, &format!("cannot listen on {addr}: {e}")),
    };
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, key_id = state.signer.key_id(), "umpire serving");
    // The one line tests and scripts wait for.
    println!("umpire listening on http://{bound}");
    // Ctrl-C, or SIGTERM (what systemd, Docker and `kill` send to stop a service): the
    // same graceful shutdown, every purchase in progress answered first.
    let shutdown = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        let terminated = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: finishing what is in progress"),
            () = terminated => tracing::info!("terminated: finishing what is in progress"),
        }
    };
    match umpire_server::run(listener, state, store, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e.to_string()),
    }
}
