//! How paid commands pay: an EVM wallet (USDC on Base) or a Solana keypair (USDC or
//! native SOL), and the keys they are read from.

use super::Local;
use alloy::signers::local::PrivateKeySigner;
use std::path::{Path, PathBuf};
use umpire_core::signer::LocalSigner;
use umpire_pay::client::{Mint, RailChoice, pick, sign_exact_evm, sign_exact_svm, solana_keypair};
use umpire_pay::solana::SolanaRpc;
use umpire_pay::types::Asset;
use umpire_pay::{PaymentRequired, svm};

/// Who pays, and on which rail: an EVM wallet (USDC on Base), or a Solana keypair
/// (USDC on Solana, or native SOL at the 402's quote) with the RPC node its
/// transaction's blockhash and the token's mint are read from.
pub enum Payer {
    Evm(PrivateKeySigner),
    Solana {
        keypair: LocalSigner,
        address: svm::Pubkey,
        rpc: SolanaRpc,
        choice: RailChoice,
    },
}

/// What `--rail` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RailArg {
    /// USDC on Base (an EVM wallet: --key-file or $UMPIRE_WALLET_KEY).
    Base,
    /// USDC on Solana (a Solana keypair: --solana-keypair or $UMPIRE_SOLANA_KEYPAIR).
    Solana,
    /// Native SOL on Solana, at the quote in the 402 (the same keypair; it pays the fee).
    Sol,
}

/// How a paid command pays.
pub struct PayArgs {
    pub rail: RailArg,
    pub key_file: Option<PathBuf>,
    pub solana_keypair: Option<PathBuf>,
    pub solana_rpc: Option<String>,
}

/// Solana's public mainnet RPC (rate-limited; pass your own with --solana-rpc).
const SOLANA_PUBLIC_RPC: &str = "https://api.mainnet-beta.solana.com";

impl Payer {
    pub fn from_args(args: &PayArgs) -> Result<Payer, Local> {
        let choice = match args.rail {
            RailArg::Base => return Ok(Payer::Evm(wallet(args.key_file.as_deref())?)),
            RailArg::Solana => RailChoice::SolanaUsdc,
            RailArg::Sol => RailChoice::NativeSol,
        };
        let path = args
            .solana_keypair
            .clone()
            .or_else(|| std::env::var_os("UMPIRE_SOLANA_KEYPAIR").map(PathBuf::from))
            .ok_or_else(|| {
                Local("no Solana keypair: pass --solana-keypair FILE (solana-keygen's JSON) or set UMPIRE_SOLANA_KEYPAIR".into())
            })?;
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Local(format!("{}: {e}", path.display())))?;
        let (keypair, address) =
            solana_keypair(&text).map_err(|e| Local(format!("{}: {e}", path.display())))?;
        let url = args
            .solana_rpc
            .clone()
            .or_else(|| std::env::var("UMPIRE_SOLANA_RPC_URL").ok())
            .unwrap_or_else(|| SOLANA_PUBLIC_RPC.to_owned());
        let rpc = SolanaRpc::new(&url).map_err(|e| Local(e.message))?;
        Ok(Payer::Solana {
            keypair,
            address,
            rpc,
            choice,
        })
    }

    /// Signs a payment for the 402's option on this payer's rail: the header value.
    pub(crate) async fn pay(&self, required: &PaymentRequired) -> Result<String, Local> {
        let choice = match self {
            Payer::Evm(_) => RailChoice::Evm,
            Payer::Solana { choice, .. } => *choice,
        };
        let accepted = pick(required, choice).ok_or_else(|| {
            Local(format!(
                "none of the accepted rails is one this client pays on {choice:?}: {}",
                required
                    .accepts
                    .iter()
                    .map(|r| format!("{} {} {}", r.scheme, r.network, r.asset))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let from = match self {
            Payer::Evm(w) => w.address().to_string(),
            Payer::Solana { address, .. } => address.to_base58(),
        };
        let what = if accepted.asset == Asset::NativeSol {
            "lamports of native SOL".to_owned()
        } else {
            format!("base units of {}", accepted.asset)
        };
        eprintln!(
            "paying {} {what} on {} to {} from {from}",
            accepted.amount, accepted.network, accepted.pay_to
        );
        match self {
            Payer::Evm(wallet) => sign_exact_evm(
                wallet,
                required,
                accepted,
                umpire_host::Clock::system().now(),
                umpire_host::random_bytes::<32>(),
            )
            .map_err(Local),
            Payer::Solana { keypair, rpc, .. } => {
                let mint = if accepted.asset == Asset::NativeSol {
                    None
                } else {
                    let (owner, data) = rpc
                        .account(&accepted.asset.to_string())
                        .await
                        .map_err(|e| Local(e.message))?
                        .ok_or_else(|| {
                            Local(format!(
                                "the mint {} does not exist on this RPC's chain",
                                accepted.asset
                            ))
                        })?;
                    Some(Mint::from_account(&owner, &data).map_err(Local)?)
                };
                let blockhash = rpc.latest_blockhash().await.map_err(|e| Local(e.message))?;
                sign_exact_svm(
                    keypair,
                    required,
                    accepted,
                    blockhash,
                    mint,
                    umpire_host::random_bytes::<16>(),
                )
                .map_err(Local)
            }
        }
    }
}

pub fn wallet(key_file: Option<&Path>) -> Result<PrivateKeySigner, Local> {
    let (text, source) = match key_file {
        Some(p) => (
            std::fs::read_to_string(p).map_err(|e| Local(format!("{}: {e}", p.display())))?,
            p.display().to_string(),
        ),
        None => (
            std::env::var("UMPIRE_WALLET_KEY").map_err(|_| {
                Local("no wallet: set UMPIRE_WALLET_KEY to the paying wallet's private key (0x + 64 hex), or pass --key-file FILE".into())
            })?,
            "UMPIRE_WALLET_KEY".to_owned(),
        ),
    };
    text.trim().parse::<PrivateKeySigner>().map_err(|_| {
        Local(format!(
            "{source} does not hold a private key (0x + 64 hex characters)"
        ))
    })
}
