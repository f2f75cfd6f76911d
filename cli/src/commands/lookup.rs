//! `umpire status` and `umpire find`: free reads of verdicts.

use std::process::ExitCode;

use alloy::signers::SignerSync as _;
use reqwest::Method;
use umpire_core::signer::Signer as _;
use umpire_core::urlenc::component;
use umpire_x402::siwx::{Proof, SIGN_IN_WITH_X, siwe_message, siws_message};

use super::Local;
use super::client::{Api, free};
use super::pay::Wallet;

/// How a status read proves it may read the verdict.
pub enum Credential {
    /// The one-time secret its purchase returned.
    Secret(String),
    /// The wallet that paid (sign-in-with-x).
    Wallet(Wallet),
}

/// A verdict's status and document, with the one-time secret from the purchase.
#[derive(clap::Args)]
pub struct Status {
    id: String,
    /// The one-time secret the purchase returned. Without it, the wallet that paid
    /// proves itself instead (sign-in-with-x): --rail and its key, as for `buy`.
    #[arg(long)]
    secret: Option<String>,
    #[command(flatten)]
    remote: super::Remote,
    #[command(flatten)]
    pay: super::pay::PayArgs,
}

impl Status {
    pub async fn run(self) -> ExitCode {
        let credential = match self.secret {
            Some(s) => Credential::Secret(s),
            None => match Wallet::from_args(&self.pay) {
                Ok(w) => Credential::Wallet(w),
                Err(e) => {
                    return super::fail(
                        2,
                        &format!("no --secret, and no wallet to sign in with: {}", e.0),
                    );
                }
            },
        };
        let id = self.id;
        super::remote_call(self.remote, |api| async move {
            status(&api, &id, credential).await
        })
        .await
    }
}

/// Sworn verdict ids bought with this spec_hash and webhook URL.
#[derive(clap::Args)]
pub struct Find {
    #[arg(long)]
    spec_hash: String,
    #[arg(long)]
    webhook: String,
    #[command(flatten)]
    remote: super::Remote,
}

impl Find {
    pub async fn run(self) -> ExitCode {
        let (spec_hash, webhook) = (self.spec_hash, self.webhook);
        super::remote_call(self.remote, |api| async move {
            find(&api, &spec_hash, &webhook).await
        })
        .await
    }
}

/// A verdict by id, with its secret or the paying wallet's proof.
pub async fn status(api: &Api, id: &str, credential: Credential) -> Result<ExitCode, Local> {
    let path = format!("/v1/verdicts/{}", component(id));
    let header = match credential {
        Credential::Secret(secret) => ("authorization", format!("Bearer {secret}")),
        Credential::Wallet(wallet) => (SIGN_IN_WITH_X, sign_in(api, &path, &wallet).await?),
    };
    free(api, Method::GET, &path, &[header], None).await
}

/// The header that reads verdict `id`: its one-time secret when the purchase gave one,
/// else a sign-in proof from the wallet that paid (a replay of a spent payment withholds
/// the secret).
pub async fn read_header(
    api: &Api,
    id: &str,
    secret: &str,
    wallet: &Wallet,
) -> Result<(&'static str, String), Local> {
    if secret.is_empty() {
        let path = format!("/v1/verdicts/{}", component(id));
        return Ok((SIGN_IN_WITH_X, sign_in(api, &path, wallet).await?));
    }
    Ok(("authorization", format!("Bearer {secret}")))
}

/// A proof from `wallet` answering the challenge the service gives for `path`; only a
/// challenge for the service asked (its host, its URI) is signed.
async fn sign_in(api: &Api, path: &str, wallet: &Wallet) -> Result<String, Local> {
    let asked = api.send(Method::GET, path, &[], None).await?;
    let declaration = asked
        .body
        .get("error")
        .and_then(|e| e.get("extensions"))
        .and_then(|e| e.get(SIGN_IN_WITH_X))
        .ok_or_else(|| {
            Local(format!(
                "the service offers no sign-in with a wallet here (it answered {}); pass --secret",
                asked.status
            ))
        })?
        .to_serde();
    let host = umpire_x402::siwx::domain_of(api.base())
        .ok_or_else(|| Local(format!("{} is not a URL with a host", api.base())))?;
    let (kind, address) = match wallet {
        Wallet::Evm(w) => ("eip191", w.address().to_checksum(None)),
        Wallet::Solana { address, .. } => ("ed25519", address.to_base58()),
    };
    let mut proof = Proof::answering(&declaration, kind, &address).map_err(Local)?;
    let uri = format!("{}{path}", api.base());
    if proof.domain != host || proof.uri != uri {
        return Err(Local(format!(
            "refusing to sign a sign-in for {} ({}) asked by {}: a proof is only for the service it is sent to",
            proof.domain,
            proof.uri,
            api.base()
        )));
    }
    proof.signature = match wallet {
        Wallet::Evm(w) => {
            let chain_id = proof
                .chain_id
                .parse::<umpire_x402::types::Network>()
                .ok()
                .and_then(|n| n.chain_id())
                .ok_or_else(|| Local(format!("{} is not an EVM chain", proof.chain_id)))?;
            let signature = w
                .sign_message_sync(siwe_message(&proof, chain_id).as_bytes())
                .map_err(|e| Local(format!("signing failed: {e}")))?;
            alloy::primitives::hex::encode_prefixed(signature.as_bytes())
        }
        Wallet::Solana { keypair, .. } => {
            bs58::encode(keypair.sign(siws_message(&proof).as_bytes())).into_string()
        }
    };
    Ok(proof.to_header())
}

/// The verdicts bought for a spec with a webhook.
pub async fn find(api: &Api, spec_hash: &str, webhook: &str) -> Result<ExitCode, Local> {
    let path = format!(
        "/v1/find?spec_hash={}&webhook={}",
        component(spec_hash),
        component(webhook)
    );
    free(api, Method::GET, &path, &[], None).await
}
