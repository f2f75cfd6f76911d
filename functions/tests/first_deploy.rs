//! An operator's first deploys, in the order docs/aws.md gives them: the stack goes up
//! before its signing key exists (free routes answer, paid routes refuse with the step
//! that is missing and charge nothing), `umpire keygen` seals a seed under the stack's
//! own key, the second deploy sells; a key administrator other than the deployer does
//! not lock the key's creation (KMS's lockout check, which the local stack makes);
//! and a rotation in two deploys publishes the new key (NextPublicKey) before any
//! document is signed with it, and keeps the old one published after.
//!
//! `make test` starts the local AWS server and sets `UMPIRE_TEST_AWS_ENDPOINT`.

use serde_json::Value as Json;
use umpire_blackbox::chain::{Devnet, FACILITATOR_TOKEN, Facilitator, buy_v2};
use umpire_blackbox::stack::{LocalStack, OPERATOR, StackOptions};
use umpire_blackbox::{Reply, request, run_umpire};

fn get(stack: &LocalStack, path: &str) -> Reply {
    request(stack.api.expect("api"), "GET", path, &[], None)
}

fn json(r: &Reply) -> Json {
    serde_json::from_slice(&r.body)
        .unwrap_or_else(|_| panic!("JSON: {}", String::from_utf8_lossy(&r.body)))
}

/// `umpire keygen` as the operator: (ciphertext, public key) as printed.
fn keygen(stack: &LocalStack) -> (String, String) {
    let env = stack.sdk_env(OPERATOR);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let key_id = stack.name("SigningKey");
    let (code, stdout, stderr) = run_umpire(&["keygen", "--kms-key-id", &key_id], &env);
    assert_eq!(code, 0, "{stderr}");
    let value = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("keygen printed no {name}: {stdout}"))
            .to_owned()
    };
    (value("SigningSeedCiphertext"), value("SigningPublicKey"))
}

/// The published keys by status: (active, others).
fn published(stack: &LocalStack) -> (Vec<String>, Vec<String>) {
    let r = get(stack, "/.well-known/umpire-key.json");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let doc = json(&r);
    let mut active = Vec::new();
    let mut others = Vec::new();
    for k in doc["keys"].as_array().expect("keys") {
        let public = k["public_key_base64"]
            .as_str()
            .expect("public_key_base64")
            .to_owned();
        if k["status"] == "active" {
            active.push(public);
        } else {
            others.push(public);
        }
    }
    (active, others)
}

const BASIC: &str =
    r#"{"spec":{"checks":[{"type":"length","min":1}]},"deliverable":{"text":"hello"}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_deploy_is_healthy_and_the_documented_order_makes_it_sell() {
    let devnet = Devnet::start();
    let facilitator = Facilitator::start(&devnet, None);
    let params = vec![
        ("EvmPayTo".to_owned(), devnet.get("pay_to")),
        ("EvmNetwork".to_owned(), devnet.get("network")),
        ("FacilitatorUrl".to_owned(), facilitator.url.clone()),
        // Another principal administers the key: the account keeps its own statement,
        // so the deployer passes KMS's lockout check (stack_up.py makes it).
        (
            "KeyAdministrator".to_owned(),
            format!(
                "arn:aws:iam::{}:role/KeyAdmin",
                umpire_blackbox::stack::ACCOUNT
            ),
        ),
    ];
    let env = vec![
        ("UMPIRE_EVM_ASSET".to_owned(), devnet.get("asset")),
        ("UMPIRE_EVM_ASSET_NAME".to_owned(), devnet.get("asset_name")),
        (
            "UMPIRE_EVM_ASSET_VERSION".to_owned(),
            devnet.get("asset_version"),
        ),
    ];
    let mut stack = tokio::task::block_in_place(|| {
        LocalStack::start(StackOptions {
            params,
            secrets: vec![(
                "FacilitatorAuthSecretArn".to_owned(),
                format!("Bearer {FACILITATOR_TOKEN}"),
            )],
            env: env.clone(),
            run_functions: true,
            unsealed: true,
            ..StackOptions::default()
        })
    });
    let api = stack.api.expect("api");

    tokio::task::block_in_place(|| {
        // Deploy 1, no key: the free routes answer.
        let health = get(&stack, "/healthz");
        assert_eq!(
            health.status,
            200,
            "{}",
            String::from_utf8_lossy(&health.body)
        );
        assert_eq!(json(&health)["key_id"], Json::Null, "no key named yet");
        for path in ["/v1/quote", "/openapi.json", "/verify"] {
            let r = get(&stack, path);
            assert_eq!(
                r.status,
                200,
                "{path}: {}",
                String::from_utf8_lossy(&r.body)
            );
        }
        // Nothing to publish, nothing to sign with: 503 naming the missing step.
        let refusals = [
            get(&stack, "/.well-known/umpire-key.json"),
            request(
                api,
                "POST",
                "/v1/verdicts/basic",
                &[("Content-Type", "application/json")],
                Some(BASIC.as_bytes()),
            ),
            get(
                &stack,
                "/v1/reputation?merchant=0x1111111111111111111111111111111111111111",
            ),
        ];
        for r in &refusals {
            assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
            // docs/api.md: no `Retry-After` (waiting does not help; a deploy does).
            assert_eq!(
                r.header("retry-after"),
                None,
                "a missing key is not a pause"
            );
            let e = &json(r)["error"];
            assert_eq!(e["code"], "unavailable");
            assert!(
                e["hint"].as_str().unwrap_or("").contains("umpire keygen"),
                "the hint names the step: {e}"
            );
        }
    });
    // An operator hears of it: every refusal counts toward the NotKeyed alarm.
    assert!(
        stack.logs().contains("\"NotKeyed\""),
        "the NotKeyed metric: {}",
        stack.logs()
    );
    // A payment offered to the keyless stack is refused before anything happens to it.
    let refused = tokio::task::block_in_place(|| {
        buy_v2(
            &devnet,
            &format!("http://{api}/v1/verdicts/basic"),
            BASIC,
            None,
        )
    });
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(
        devnet.balance(&devnet.get("pay_to")),
        0,
        "nothing charged before the key exists"
    );

    // keygen, then deploy 2 with what it printed: the stack publishes and sells.
    let (ciphertext, public) = tokio::task::block_in_place(|| keygen(&stack));
    tokio::task::block_in_place(|| {
        stack.redeploy(
            &[
                ("SigningSeedCiphertext", &ciphertext),
                ("SigningPublicKey", &public),
            ],
            &env,
        )
    });
    let (active, retired) = tokio::task::block_in_place(|| published(&stack));
    assert_eq!((active, retired), (vec![public.clone()], vec![]));
    let bought = tokio::task::block_in_place(|| {
        buy_v2(
            &devnet,
            &format!("http://{}/v1/verdicts/basic", stack.api.expect("api")),
            BASIC,
            None,
        )
    });
    assert_eq!(bought.status, 201, "{}", bought.body);
    let doc = bought.json();
    assert_eq!(
        umpire_core::signer::PublicKey::from_base64(&public)
            .expect("public key")
            .key_id,
        doc.get("document")
            .and_then(|d| d.get("key_id"))
            .and_then(|k| k.as_str())
            .unwrap_or(""),
        "signed with the key keygen made"
    );

    // A rotation in two deploys. First the new key is published (status next) while
    // the old one still signs: a document the new key signs later verifies against
    // any key document fetched from here on.
    let (new_ciphertext, new_public) = tokio::task::block_in_place(|| keygen(&stack));
    tokio::task::block_in_place(|| stack.redeploy(&[("NextPublicKey", &new_public)], &env));
    let doc = tokio::task::block_in_place(|| json(&get(&stack, "/.well-known/umpire-key.json")));
    let status_of = |doc: &Json, key: &str| {
        doc["keys"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|k| k["public_key_base64"] == key)
            .and_then(|k| k["status"].as_str())
            .map(str::to_owned)
    };
    assert_eq!(status_of(&doc, &public).as_deref(), Some("active"), "{doc}");
    assert_eq!(
        status_of(&doc, &new_public).as_deref(),
        Some("next"),
        "{doc}"
    );
    let key_id_of = |b: &umpire_blackbox::chain::Bought| {
        b.json()
            .get("document")
            .and_then(|d| d.get("key_id"))
            .and_then(|k| k.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let id_of = |k: &str| {
        umpire_core::signer::PublicKey::from_base64(k)
            .expect("public key")
            .key_id
    };
    let url = format!("http://{}/v1/verdicts/basic", stack.api.expect("api"));
    let during = tokio::task::block_in_place(|| buy_v2(&devnet, &url, BASIC, None));
    assert_eq!(during.status, 201, "{}", during.body);
    assert_eq!(
        key_id_of(&during),
        id_of(&public),
        "the old key signs until the second deploy"
    );

    // Then the second deploy signs with it; the old key stays published, retired.
    tokio::task::block_in_place(|| {
        stack.redeploy(
            &[
                ("SigningSeedCiphertext", &new_ciphertext),
                ("SigningPublicKey", &new_public),
                ("RetiredPublicKeys", &public),
                ("NextPublicKey", ""),
            ],
            &env,
        )
    });
    let doc = tokio::task::block_in_place(|| json(&get(&stack, "/.well-known/umpire-key.json")));
    assert_eq!(
        status_of(&doc, &new_public).as_deref(),
        Some("active"),
        "{doc}"
    );
    assert_eq!(
        status_of(&doc, &public).as_deref(),
        Some("retired"),
        "{doc}"
    );
    let url = format!("http://{}/v1/verdicts/basic", stack.api.expect("api"));
    let after = tokio::task::block_in_place(|| buy_v2(&devnet, &url, BASIC, None));
    assert_eq!(after.status, 201, "{}", after.body);
    assert_eq!(
        key_id_of(&after),
        id_of(&new_public),
        "the new key signs now"
    );
}
