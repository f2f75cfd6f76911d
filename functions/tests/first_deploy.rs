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

fn assert_free_routes_answer(stack: &LocalStack, paths: &[&str]) {
    for path in paths {
        let r = get(stack, path);
        assert_eq!(
            r.status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
}

/// An unpaid request to each paying route: the verdicts and the reputation functions.
fn paid_routes(stack: &LocalStack) -> [Reply; 2] {
    let api = stack.api.expect("api");
    [
        request(
            api,
            "POST",
            "/v1/verdicts/basic",
            &[("Content-Type", "application/json")],
            Some(BASIC.as_bytes()),
        ),
        get(
            stack,
            "/v1/reputation?merchant=0x1111111111111111111111111111111111111111",
        ),
    ]
}

/// `503 unavailable` whose hint names each of `named` (what the operator must do).
fn assert_unavailable(r: &Reply, named: &[&str]) {
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    let e = &json(r)["error"];
    assert_eq!(e["code"], "unavailable", "{e}");
    let hint = e["hint"].as_str().unwrap_or("");
    assert!(
        named.iter().all(|n| hint.contains(n)),
        "the hint names {named:?}: {e}"
    );
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
    let (ciphertext, public) = (value("SigningSeedCiphertext"), value("SigningPublicKey"));
    // The next step it prints publishes: `make deploy` (new versions) offered both.
    let next = format!(
        "make deploy DEPLOY_PARAMS='ParameterKey=SigningSeedCiphertext,ParameterValue={ciphertext} ParameterKey=SigningPublicKey,ParameterValue={public}'"
    );
    assert!(stderr.contains(&next), "keygen's next step: {stderr}");
    (ciphertext, public)
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
        assert_free_routes_answer(&stack, &["/v1/quote", "/openapi.json", "/verify"]);
        // Nothing to publish, nothing to sign with: 503 naming the missing step.
        let key = get(&stack, "/.well-known/umpire-key.json");
        for r in std::iter::once(&key).chain(&paid_routes(&stack)) {
            assert_unavailable(r, &["umpire keygen"]);
            // docs/api.md: no `Retry-After` (waiting does not help; a deploy does).
            assert_eq!(
                r.header("retry-after"),
                None,
                "a missing key is not a pause"
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

/// A keyed stack deployed before its payment parameters (no EvmPayTo, no SolanaPayTo,
/// no FacilitatorUrl: the template's defaults): every paying function starts, the paid
/// routes answer `503 unavailable` with a hint naming the parameters, and the free
/// routes answer. Would catch: a paying function that fails its cold start on the
/// template's empty values (API Gateway's bare 500, and a canary rolled back for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_stack_without_payment_rails_sells_nothing_and_says_why() {
    let stack = tokio::task::block_in_place(|| {
        LocalStack::start(StackOptions {
            run_functions: true,
            ..StackOptions::default()
        })
    });
    tokio::task::block_in_place(|| {
        assert_free_routes_answer(
            &stack,
            &["/healthz", "/.well-known/umpire-key.json", "/openapi.json"],
        );
        for r in &paid_routes(&stack) {
            assert_unavailable(r, &["EvmPayTo", "FacilitatorUrl"]);
        }
    });
}

/// infra/stack_state.py, as `make deploy` runs it against CloudFormation (the local AWS
/// server's): no stack yet → `TableDeletionProtection=false` (a failed first create
/// rolls back completely, every retained resource being `RetainExceptOnCreate`); a stack
/// that exists → `true`; a stack left in ROLLBACK_COMPLETE (a failed first create) →
/// deleted and waited for, then `false`. Would catch: a first create whose rollback
/// cannot delete a protected table, or the empty husk of one that the next deploy cannot
/// update (hand work, both).
#[test]
fn make_deploy_creates_unprotected_then_protects_and_clears_a_failed_create() {
    let root = umpire_blackbox::repo_root();
    let python = umpire_blackbox::python();
    let endpoint = std::env::var("UMPIRE_TEST_AWS_ENDPOINT")
        .expect("UMPIRE_TEST_AWS_ENDPOINT (make test starts the local AWS server)");
    let name = format!("stack-state-{}", std::process::id());
    let state = || {
        let out = std::process::Command::new(&python)
            .arg(root.join("infra/stack_state.py"))
            .args(["--config", "infra/samconfig.toml", "--stack-name", &name])
            .current_dir(&root)
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .output()
            .expect("infra/stack_state.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        state(),
        "ParameterKey=TableDeletionProtection,ParameterValue=false",
        "a first create"
    );
    let made = std::process::Command::new(&python)
        .args([
            "-c",
            "import boto3, sys; boto3.client('cloudformation', endpoint_url=sys.argv[1], \
             region_name='us-east-1', aws_access_key_id='test', aws_secret_access_key='test')\
             .create_stack(StackName=sys.argv[2], TemplateBody='{\"Resources\": {\"Q\": \
             {\"Type\": \"AWS::SQS::Queue\"}}}')",
        ])
        .args([&endpoint, &name])
        .output()
        .expect("python");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert_eq!(
        state(),
        "ParameterKey=TableDeletionProtection,ParameterValue=true",
        "a stack that exists"
    );
    // The husk of a failed first create: the local server cannot make one, so the
    // script's own logic meets a CloudFormation that answers ROLLBACK_COMPLETE once.
    let husk = std::process::Command::new(&python)
        .arg("-c")
        .arg(
            r#"
import sys
sys.path.insert(0, sys.argv[1])
import stack_state
from botocore.exceptions import ClientError

class Cfn:
    def __init__(self):
        self.calls = []
        self.gone = False
    def describe_stacks(self, StackName):
        self.calls.append("describe")
        if self.gone:
            raise ClientError({"Error": {"Code": "ValidationError", "Message": f"Stack with id {StackName} does not exist"}}, "DescribeStacks")
        return {"Stacks": [{"StackStatus": "ROLLBACK_COMPLETE"}]}
    def delete_stack(self, StackName):
        self.calls.append("delete")
        self.gone = True
    def get_waiter(self, name):
        cfn = self
        class W:
            def wait(self, StackName):
                cfn.calls.append("wait:" + name)
        return W()

cfn = Cfn()
print(stack_state.override(cfn, "umpire"), cfn.calls)
"#,
        )
        .arg(root.join("infra"))
        .output()
        .expect("python");
    let said = String::from_utf8_lossy(&husk.stdout);
    assert!(
        husk.status.success(),
        "{}",
        String::from_utf8_lossy(&husk.stderr)
    );
    assert_eq!(
        said.trim(),
        "ParameterKey=TableDeletionProtection,ParameterValue=false ['describe', 'delete', 'wait:stack_delete_complete']",
        "deleted, waited for, created afresh"
    );
}
