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
    /// Make the ERC-8004 validator's key instead: a fresh secp256k1 key sealed under
    /// the same KMS key (encryption context purpose=umpire-validator-key, which only
    /// the worker may decrypt), printed as ValidatorKeyCiphertext and ValidatorAddress.
    /// Fund the address with a little ETH for gas.
    #[arg(long, conflicts_with = "receiver_authorizer")]
    validator: bool,
    /// Make the batch-settlement receiver authorizer's key instead: a fresh secp256k1
    /// key sealed under the same KMS key (encryption context
    /// purpose=umpire-receiver-authorizer), printed as ReceiverAuthorizerKeyCiphertext
    /// and ReceiverAuthorizerAddress. It signs claims of our channels; it is never the
    /// pay-to key and needs no ETH.
    #[arg(long)]
    receiver_authorizer: bool,
}

impl Keygen {
    pub async fn run(self) -> ExitCode {
        if self.validator {
            secp256k1_key(&self.kms_key_id, &VALIDATOR).await
        } else if self.receiver_authorizer {
            secp256k1_key(&self.kms_key_id, &RECEIVER_AUTHORIZER).await
        } else {
            run(&self.kms_key_id).await
        }
    }
}

/// A sealed secp256k1 key: what it is for, the parameters it prints, the next step.
struct KeyKind {
    purpose: umpire_keys::Purpose,
    ciphertext_parameter: &'static str,
    address_parameter: &'static str,
    /// Said after the deploy command; `{address}` is the new key's address.
    next: &'static str,
}

const VALIDATOR: KeyKind = KeyKind {
    purpose: umpire_keys::Purpose::ValidatorKey,
    ciphertext_parameter: "ValidatorKeyCiphertext",
    address_parameter: "ValidatorAddress",
    next: "Deploy both values together with ValidationRegistry and ValidationRpcUrlSecretArn (the guided prompts offer these two, press Enter), and send {address} a little ETH for gas (docs/erc8004.md).",
};

const RECEIVER_AUTHORIZER: KeyKind = KeyKind {
    purpose: umpire_keys::Purpose::ReceiverAuthorizer,
    ciphertext_parameter: "ReceiverAuthorizerKeyCiphertext",
    address_parameter: "ReceiverAuthorizerAddress",
    next: "Deploy both values together: {address} signs the claims of this deployment's batch-settlement channels (it needs no ETH; docs/paying.md).",
};

async fn secp256k1_key(kms_key_id: &str, kind: &KeyKind) -> ExitCode {
    let aws = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let kms = aws_sdk_kms::Client::new(&aws);
    let signer = alloy::signers::local::PrivateKeySigner::random();
    let secret: [u8; 32] = signer.credential().to_bytes().into();
    match umpire_keys::seal_secret(&kms, kms_key_id, secret, kind.purpose).await {
        Ok(ciphertext) => {
            let address = signer.address().to_string();
            println!("{}={ciphertext}", kind.ciphertext_parameter);
            println!("{}={address}", kind.address_parameter);
            eprintln!(
                "umpire: new key {address} sealed under {kms_key_id}.\n  {}\n{}",
                deploy_command(&[
                    (kind.ciphertext_parameter, &ciphertext),
                    (kind.address_parameter, &address),
                ]),
                kind.next.replace("{address}", &address),
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &e.to_string()),
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
                "umpire: new key {} sealed under {kms_key_id}. Deploy both values together (make deploy publishes new versions; the guided prompts offer them, press Enter):\n  {}\nTo rotate instead, deploy NextPublicKey first (docs/aws.md), then add the old SigningPublicKey to RetiredPublicKeys so documents it signed still verify.",
                sealed.public_key.key_id,
                deploy_command(&[
                    ("SigningSeedCiphertext", &sealed.ciphertext_base64),
                    ("SigningPublicKey", &public),
                ]),
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(1, &e.to_string()),
    }
}

/// The `make deploy` that publishes `values`: each as `ParameterKey=K,ParameterValue=V`,
/// the one form SAM reads unambiguously (a base64 value may end in `=`, which the
/// `K=V` form would split on).
pub fn deploy_command(values: &[(&str, &str)]) -> String {
    let params: Vec<String> = values
        .iter()
        .map(|(k, v)| format!("ParameterKey={k},ParameterValue={v}"))
        .collect();
    format!("make deploy DEPLOY_PARAMS='{}'", params.join(" "))
}
