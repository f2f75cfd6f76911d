//! `umpire keygen --kms-key-id`: a new signing seed sealed under the stack's KMS key. It
//! runs on an operator's machine, so AWS access comes through aws-config's full chain.

use std::process::ExitCode;

use super::fail;

/// Make a new signing key for an AWS deployment: a fresh Ed25519 seed, encrypted
/// under the KMS key (kms:Encrypt with the encryption context purpose=umpire-signing-seed)
/// and printed as the two stack parameters to deploy together. The seed itself is
/// never printed or written. AWS credentials and region come from the usual
/// environment (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL, ...).
#[derive(clap::Args)]
pub struct Keygen {
    /// The KMS key: id, ARN or alias (the stack's SigningKeyId output).
    #[arg(long)]
    kms_key_id: String,
}

impl Keygen {
    pub async fn run(self) -> ExitCode {
        run(&self.kms_key_id).await
    }
}

async fn run(kms_key_id: &str) -> ExitCode {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kms = aws_sdk_kms::Client::new(&aws);
    let seed = umpire_core::signer::LocalSigner::from_seed(umpire_host::random_bytes()).seed();
    match umpire_keys::seal(&kms, kms_key_id, seed).await {
        Ok(sealed) => {
            let public = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                sealed.public_key.bytes,
            );
            println!("SigningSeedCiphertext={}", sealed.ciphertext_base64);
            println!("SigningPublicKey={public}");
            eprintln!(
                "umpire: new key {} sealed under {kms_key_id}. Deploy both values together, e.g.\n  sam deploy --parameter-overrides SigningSeedCiphertext=... SigningPublicKey=...\nTo rotate, add the old SigningPublicKey to RetiredPublicKeys so documents it signed still verify.",
                sealed.public_key.key_id
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &e.to_string()),
    }
}
