//! How paid commands pay: an EVM wallet (USDC on Base) or a Solana keypair (USDC or
//! native SOL), and the keys they are read from.

use super::Local;
use super::client::Api;
use super::guard::{Guard, GuardArgs, Room};
use alloy::signers::local::PrivateKeySigner;
use std::path::{Path, PathBuf};
use umpire_core::signer::LocalSigner;
use umpire_pay::solana::SolanaRpc;
use umpire_x402::client::{Mint, RailChoice, pick, sign_exact_evm, sign_exact_svm, solana_keypair};
use umpire_x402::types::{Asset, PaymentRequirements};
use umpire_x402::{PaymentRequired, svm};

/// Who pays, and what every payment is checked against before it is signed (see
/// `guard`): nothing is signed that the guard refuses.
pub struct Payer {
    wallet: Wallet,
    guard: Guard,
}

/// The wallet, and on which rail: an EVM wallet (USDC on Base), or a Solana keypair
/// (USDC on Solana, or native SOL at the 402's quote) with the RPC node its
/// transaction's blockhash and the token's mint are read from.
pub enum Wallet {
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

/// How a paid command pays: the rail, and the wallet for it (files or the environment,
/// never a flag value), guarded (see [`GuardArgs`]).
#[derive(clap::Args)]
pub struct PayArgs {
    /// The rail to pay on: base (USDC on Base), solana (USDC on Solana) or sol (native
    /// SOL at the 402's quote, the keypair paying the fee).
    #[arg(long, value_enum, default_value = "base")]
    pub rail: RailArg,
    /// For --rail base: file holding the wallet's private key (0x + 64 hex). Default:
    /// $UMPIRE_WALLET_KEY.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// For --rail solana|sol: the keypair file (solana-keygen's JSON array of 64 bytes).
    /// Default: $UMPIRE_SOLANA_KEYPAIR.
    #[arg(long)]
    pub solana_keypair: Option<PathBuf>,
    /// For --rail solana|sol: the Solana RPC the blockhash and the mint are read from.
    /// Default: $UMPIRE_SOLANA_RPC_URL, else Solana's public mainnet RPC.
    #[arg(long)]
    pub solana_rpc: Option<String>,
    #[command(flatten)]
    pub guard: GuardArgs,
}

/// Solana's public mainnet RPC (rate-limited; pass your own with --solana-rpc).
const SOLANA_PUBLIC_RPC: &str = "https://api.mainnet-beta.solana.com";

impl Payer {
    /// The paying wallet, which also signs in to read what it bought.
    pub fn wallet(&self) -> &Wallet {
        &self.wallet
    }

    /// The wallet `args` names, guarded by the pin of `api`'s service (made on first
    /// use where that is safe).
    pub async fn new(api: &Api, args: &PayArgs) -> Result<Payer, Local> {
        let wallet = Wallet::from_args(args)?;
        let guard = Guard::load(api, &args.guard).await?;
        Ok(Payer { wallet, guard })
    }

    /// What the spending budget leaves for buying `path`, at its pinned price (the
    /// price the guard will approve), else at `price` (USDC base units).
    pub fn room(&self, path: &str, price: u128) -> Room {
        let price = self.guard.pinned_price(path).unwrap_or(price);
        self.guard.room(price, umpire_host::Clock::system().now())
    }

    /// Signs a payment of the 402's option on this payer's rail for `path`, once the
    /// guard approves it: the header value.
    pub(crate) async fn pay(
        &self,
        required: &PaymentRequired,
        path: &str,
    ) -> Result<String, Local> {
        let choice = self.wallet.choice();
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
        let index = required
            .accepts
            .iter()
            .position(|r| std::ptr::eq(r, accepted))
            .unwrap_or_default();
        let now = umpire_host::Clock::system().now();
        let approval = self.guard.approve(required, index, path, now)?;
        let header = self.wallet.sign(required, accepted, now).await?;
        self.guard.signed(approval, now);
        Ok(header)
    }
}

impl Wallet {
    pub fn from_args(args: &PayArgs) -> Result<Wallet, Local> {
        let choice = match args.rail {
            RailArg::Base => return Ok(Wallet::Evm(wallet(args.key_file.as_deref())?)),
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
        Ok(Wallet::Solana {
            keypair,
            address,
            rpc,
            choice,
        })
    }

    fn choice(&self) -> RailChoice {
        match self {
            Wallet::Evm(_) => RailChoice::Evm,
            Wallet::Solana { choice, .. } => *choice,
        }
    }

    /// Signs a payment of `accepted` (an option of `required`) at `now`: the header value.
    async fn sign(
        &self,
        required: &PaymentRequired,
        accepted: &PaymentRequirements,
        now: u64,
    ) -> Result<String, Local> {
        let from = match self {
            Wallet::Evm(w) => w.address().to_string(),
            Wallet::Solana { address, .. } => address.to_base58(),
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
            Wallet::Evm(wallet) => sign_exact_evm(
                wallet,
                required,
                accepted,
                now,
                umpire_host::random_bytes::<32>(),
            )
            .map_err(Local),
            Wallet::Solana { keypair, rpc, .. } => {
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
