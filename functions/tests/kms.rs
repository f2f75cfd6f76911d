//! The signing key as a KMS envelope, against the local AWS-compatible server's KMS:
//! `umpire keygen --kms-key-id` seals a fresh seed; a signing function opens it once at
//! cold start and signs; a non-signing function holds only the public key; rotation
//! publishes retired keys; every way the envelope can be wrong stops the cold start
//! with a message saying what to fix.
//!
//! `make test` starts the server and sets `UMPIRE_TEST_AWS_ENDPOINT`.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::json;
use umpire_blackbox::run_umpire;
use umpire_blackbox::stack::{LocalStack, OPERATOR, StackOptions};
use umpire_core::signer::{PublicKey, Signer};
use umpire_functions::{
    Needs, PUBLIC_KEY_ENV, RETIRED_KEYS_ENV, SEED_CIPHERTEXT_ENV, SIGNING_KEY_ENV, fns,
    signer_from_vars,
};

/// The stack (its key from template.yaml, its key policy and roles enforced).
async fn stack() -> LocalStack {
    tokio::task::spawn_blocking(|| LocalStack::start(StackOptions::default()))
        .await
        .expect("the stack")
}

/// Runs `umpire keygen` as the operator (an account administrator, through the IAM
/// gate): (ciphertext, public key) as printed.
fn keygen(stack: &LocalStack, key_id: &str) -> (String, String) {
    let env = stack.sdk_env(OPERATOR);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, stdout, stderr) = run_umpire(&["keygen", "--kms-key-id", key_id], &env);
    assert_eq!(code, 0, "{stderr}");
    let value = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("keygen printed no {name}: {stdout}"))
            .to_owned()
    };
    assert!(
        stderr.contains("RetiredPublicKeys"),
        "keygen explains rotation: {stderr}"
    );
    (value("SigningSeedCiphertext"), value("SigningPublicKey"))
}

fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

async fn open<N: Needs>(
    aws: &aws_config::SdkConfig,
    vars: &HashMap<String, String>,
) -> Result<(std::sync::Arc<dyn Signer>, Vec<PublicKey>), String> {
    signer_from_vars::<N>(Some(aws), &|name| vars.get(name).cloned())
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_seed_opens_once_and_signs_and_only_signing_functions_hold_it() {
    let stack = stack().await;
    // Each function opens the seed under its own role; the operator seals it.
    let buyer = stack.sdk_config("VerdictsFunction").await;
    let worker = stack.sdk_config("WorkerFunction").await;
    let operator = stack.sdk_config(OPERATOR).await;
    let key_id = stack.name("SigningKey");
    let key_arn = stack.arn("SigningKey");
    let (ciphertext, public) = keygen(&stack, &key_id);
    let public_key = PublicKey::from_base64(&public).expect("a public key");
    // The printed ciphertext is not the seed in disguise: 32 bytes of seed, KMS framing around.
    assert!(B64.decode(&ciphertext).expect("base64").len() > 32);

    let (old_ciphertext, old_public) = keygen(&stack, &key_id);
    let env = vars(&[
        (SEED_CIPHERTEXT_ENV, &ciphertext),
        (SIGNING_KEY_ENV, &key_arn),
        (PUBLIC_KEY_ENV, &public),
        (RETIRED_KEYS_ENV, &old_public),
    ]);

    // A signing function: the seed opens to the published key and signs.
    let (signer, retired) = open::<fns::Buy>(&buyer, &env).await.expect("opened");
    assert_eq!(signer.public_key(), public_key.bytes);
    assert_eq!(signer.key_id(), public_key.key_id);
    let sig = signer.sign(b"a verdict");
    assert!(public_key.verify(b"a verdict", &sig));
    assert_eq!(retired.len(), 1, "rotation keeps the old key published");
    assert_eq!(
        retired[0],
        PublicKey::from_base64(&old_public).expect("old key")
    );
    assert_ne!(
        retired[0].key_id,
        signer.key_id(),
        "each key has its own id"
    );

    // A function that never signs holds the public key only (no kms:Decrypt needed).
    let public_only = vars(&[(PUBLIC_KEY_ENV, &public)]);
    let (named, _) = open::<fns::Health>(&buyer, &public_only)
        .await
        .expect("public key only");
    assert_eq!(named.key_id(), public_key.key_id);
    assert!(
        open::<fns::Buy>(&buyer, &public_only)
            .await
            .err()
            .expect("a signing function without the sealed seed")
            .contains("umpire keygen"),
        "says how to make one"
    );

    // Ciphertext and public key from different keygen runs: refused at cold start.
    let crossed = vars(&[
        (SEED_CIPHERTEXT_ENV, &old_ciphertext),
        (SIGNING_KEY_ENV, &key_arn),
        (PUBLIC_KEY_ENV, &public),
    ]);
    let err = open::<fns::Worker>(&worker, &crossed)
        .await
        .err()
        .expect("mismatch");
    assert!(
        err.contains("deploy the ciphertext and public key"),
        "{err}"
    );

    // Not base64; another purpose's ciphertext (no encryption context); a bad retired key.
    let garbage = vars(&[
        (SEED_CIPHERTEXT_ENV, "not base64!"),
        (SIGNING_KEY_ENV, &key_arn),
    ]);
    let err = open::<fns::Worker>(&worker, &garbage)
        .await
        .err()
        .expect("garbage");
    assert!(err.contains("not base64"), "{err}");
    let other_purpose = aws_sdk_kms::Client::new(&operator)
        .encrypt()
        .key_id(&key_id)
        .plaintext(aws_sdk_kms::primitives::Blob::new(vec![7u8; 32]))
        .send()
        .await
        .expect("encrypt without context");
    let other = vars(&[
        (
            SEED_CIPHERTEXT_ENV,
            &B64.encode(other_purpose.ciphertext_blob().expect("blob").as_ref()),
        ),
        (SIGNING_KEY_ENV, &key_arn),
    ]);
    let err = open::<fns::Worker>(&worker, &other)
        .await
        .err()
        .expect("wrong context");
    assert!(err.contains("KMS refused to decrypt"), "{err}");
    let bad_retired = vars(&[(PUBLIC_KEY_ENV, &public), (RETIRED_KEYS_ENV, "abc")]);
    let err = open::<fns::Key>(&buyer, &bad_retired)
        .await
        .err()
        .expect("bad retired key");
    assert!(err.contains(RETIRED_KEYS_ENV), "{err}");

    // A function that does not sign has no kms:Decrypt: its role cannot open the seed.
    let status = stack.sdk_config("StatusFunction").await;
    let refused = umpire_keys::open(&aws_sdk_kms::Client::new(&status), &key_id, &ciphertext)
        .await
        .err()
        .expect("the status function's role may not decrypt");
    assert!(refused.to_string().contains("AccessDenied"), "{refused}");
    // Nor can an account administrator: the key policy lets them manage the key and
    // seal a seed (above), never open one, whatever their IAM policies allow.
    let kms = aws_sdk_kms::Client::new(&operator);
    kms.describe_key()
        .key_id(&key_id)
        .send()
        .await
        .expect("administrators manage the key");
    let refused = umpire_keys::open(&kms, &key_id, &ciphertext)
        .await
        .err()
        .expect("an administrator may not decrypt the seed");
    assert!(refused.to_string().contains("AccessDenied"), "{refused}");
    // The refusals IAM made were the ones this test asked for (the ciphertext of
    // another purpose passed IAM, naming the right context, and KMS itself refused it).
    let denied = tokio::task::block_in_place(|| stack.denied());
    let who: Vec<_> = denied.iter().map(|d| d["principal"].clone()).collect();
    assert_eq!(
        who,
        vec![json!("StatusFunction"), json!(OPERATOR)],
        "only the refusals this test asked for: {denied:?}"
    );
}

/// `umpire keygen --receiver-authorizer`: a fresh secp256k1 key sealed under the stack's
/// key for batch-settlement claims. The worker opens it under its own context and gets
/// the address keygen printed; the verdicts function (it signs documents, not claims)
/// may not, nor may the worker open it as another purpose's secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_worker_opens_the_receiver_authorizer_key() {
    let stack = stack().await;
    let key_id = stack.name("SigningKey");
    let env = stack.sdk_env(OPERATOR);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (code, stdout, stderr) = run_umpire(
        &["keygen", "--receiver-authorizer", "--kms-key-id", &key_id],
        &env,
    );
    assert_eq!(code, 0, "{stderr}");
    let printed = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("keygen printed no {name}: {stdout}"))
            .to_owned()
    };
    let (ciphertext, address) = (
        printed("ReceiverAuthorizerKeyCiphertext"),
        printed("ReceiverAuthorizerAddress"),
    );
    assert!(
        stderr.contains("ParameterKey=ReceiverAuthorizerAddress"),
        "keygen says how to deploy it: {stderr}"
    );
    let purpose = umpire_keys::Purpose::ReceiverAuthorizer;
    let worker = aws_sdk_kms::Client::new(&stack.sdk_config("WorkerFunction").await);
    let secret = umpire_keys::open_secret(&worker, &key_id, &ciphertext, purpose)
        .await
        .expect("the worker opens it");
    let key = alloy::signers::local::PrivateKeySigner::from_bytes(&secret.into()).expect("a key");
    assert_eq!(key.address().to_string(), address);
    let as_validator = umpire_keys::open_secret(
        &worker,
        &key_id,
        &ciphertext,
        umpire_keys::Purpose::ValidatorKey,
    )
    .await;
    assert!(
        as_validator.is_err(),
        "sealed for claims, not for validation"
    );
    let verdicts = aws_sdk_kms::Client::new(&stack.sdk_config("VerdictsFunction").await);
    let refused = umpire_keys::open_secret(&verdicts, &key_id, &ciphertext, purpose)
        .await
        .expect_err("the verdicts function's role may not open it");
    assert!(refused.to_string().contains("AccessDenied"), "{refused}");
}
