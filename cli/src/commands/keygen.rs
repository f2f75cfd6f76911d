//! `umpire keygen --kms-key-id`: a new signing seed sealed under the stack's KMS key. It
//! runs on an operator's machine, so AWS access comes through aws-config's full chain.

use std::process::ExitCode;

use super::fail;

pub async fn run(kms_key_id: &str) -> ExitCode {
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
