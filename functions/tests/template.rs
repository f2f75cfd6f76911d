//! `template.yaml` as AWS deploys it: every binary deployed, the platform's limits held
//! (API Gateway's 30 s, pass 2's worst case inside the worker's timeout, the queue's
//! visibility at 6x it), a queue that keeps jobs through an outage, logs kept, access
//! logs and tracing on, alarms on what an operator must see, no secret in any function's
//! environment, the signing key opened only by the functions that sign. The template is
//! read as the SAM transform makes it (infra/local/stack.py), conditions resolved.

use std::collections::BTreeSet;

use serde_json::{Value as Json, json};
use umpire_api::Route;
use umpire_blackbox::stack::resolve_template;
use umpire_blackbox::{str_at, template_resources};
use umpire_core::json::Value;
use umpire_core::platform::{API_GATEWAY_TIMEOUT_SECS, LAMBDA_SYNC_PAYLOAD_BYTES};
use umpire_functions::Role;

/// CodeDeploy's PreTraffic hook (not deployed through itself, reads no setting).
const HOOK: &str = "PreTrafficHookFunction";

/// The deployed functions, by logical id.
fn deployed(t: &Json) -> Vec<(&str, &Json)> {
    t["functions"]
        .as_object()
        .expect("functions")
        .iter()
        .map(|(k, f)| (k.as_str(), f))
        .collect()
}

fn function<'a>(t: &'a Json, logical: &str) -> &'a Json {
    &t["functions"][logical]
}

fn resource<'a>(t: &'a Json, logical: &str) -> &'a Json {
    &t["resources"][logical]
}

fn num(v: &Json) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Every statement of a function's policies, as (actions, resources) text.
fn statements(f: &Json) -> Vec<(Vec<String>, String)> {
    let mut out = Vec::new();
    for p in f["policies"].as_array().into_iter().flatten() {
        let sts = match &p["document"]["Statement"] {
            Json::Array(a) => a.clone(),
            one => vec![one.clone()],
        };
        for s in sts {
            let actions = match &s["Action"] {
                Json::Array(a) => a
                    .iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect(),
                one => one.as_str().map(str::to_owned).into_iter().collect(),
            };
            out.push((actions, s["Resource"].to_string()));
        }
    }
    out
}

fn may(f: &Json, action: &str, resource: &str) -> bool {
    statements(f)
        .iter()
        .any(|(a, r)| a.iter().any(|x| x == action) && r.contains(resource))
}

#[test]
fn every_binary_is_deployed_and_only_the_checker_twice() {
    let t = resolve_template(&[]);
    let binaries: Vec<&str> = deployed(&t)
        .iter()
        .map(|(_, f)| f["binary"].as_str().expect("binary"))
        .collect();
    let unique: BTreeSet<&str> = binaries.iter().copied().collect();
    let twice: Vec<&str> = unique
        .iter()
        .copied()
        .filter(|b| binaries.iter().filter(|x| *x == b).count() > 1)
        .collect();
    assert_eq!(
        twice,
        vec!["checker"],
        "purchases and pass 2 each have a checker"
    );
    let bins: BTreeSet<String> = std::fs::read_dir(umpire_blackbox::crate_dir().join("src/bin"))
        .expect("src/bin")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".rs"))
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        unique
            .iter()
            .map(|s| (*s).to_owned())
            .collect::<BTreeSet<_>>(),
        bins,
        "functions in template.yaml vs functions/src/bin"
    );
}

/// API Gateway ends an integration at 30 s: every function behind a route stops before
/// that, and the paid ones fit their request budget (plus the time to answer) inside
/// their Timeout, so no paid request is cut off while it settles.
#[test]
fn http_functions_end_before_api_gateway_and_paid_ones_fit_their_budget() {
    let t = resolve_template(&[]);
    let mut routed = 0;
    for (name, f) in deployed(&t) {
        if f["http"].as_array().is_none_or(Vec::is_empty) {
            continue;
        }
        routed += 1;
        let timeout = num(&f["timeout"]);
        assert!(
            timeout < API_GATEWAY_TIMEOUT_SECS,
            "{name}: Timeout {timeout}s outlives API Gateway's {API_GATEWAY_TIMEOUT_SECS} s"
        );
        if matches!(f["binary"].as_str(), Some("verdicts" | "reputation")) {
            let budget = f["environment"]["UMPIRE_REQUEST_BUDGET_MS"]
                .as_str()
                .map_or(
                    umpire_api::plumbing::config::DEFAULT_REQUEST_BUDGET.as_millis() as u64,
                    |b| b.parse().expect("a number"),
                );
            assert!(
                budget + 2_000 <= timeout * 1000,
                "{name}: a {budget} ms budget leaves no time to answer inside {timeout}s"
            );
        }
    }
    assert!(
        routed >= 12,
        "every route's function was checked ({routed})"
    );
}

/// The worker outlasts its longest job, SQS hides a job for 6x that (AWS's advice for an
/// event source), jobs survive a four-day outage, and a burst runs a few at a time.
/// The contract deletes documents and specs at 90 days and answers and ledger entries
/// after a day: the verdicts keep no restorable copy (PITR keeps 35 days by default);
/// the ledger and the idempotency keys, whose loss would sell a payment twice, keep one
/// for a day (the shortest window), so a copy outlives an entry by a day at most.
/// Feedback rows are kept for good, and so is their recovery.
#[test]
fn no_backup_outlives_what_the_contract_deletes() {
    let t = resolve_template(&[]);
    for (table, recoverable, days) in [
        ("VerdictsTable", false, None),
        ("IdempotencyTable", true, Some(1)),
        ("PaymentsTable", true, Some(1)),
        ("RateLimitsTable", false, None),
        ("FeedbackTable", true, None),
        // batch-settlement channels: payment records kept with their channel.
        ("ChannelsTable", true, None),
    ] {
        let spec = &resource(&t, table)["Properties"]["PointInTimeRecoverySpecification"];
        assert_eq!(
            spec["PointInTimeRecoveryEnabled"],
            json!(recoverable),
            "{table}: point-in-time recovery"
        );
        assert_eq!(
            spec["RecoveryPeriodInDays"].as_u64(),
            days,
            "{table}: its recovery window"
        );
    }
    // docs/api.md: feedback rows never expire, so their table has no TTL, nor do the
    // channels' (they last as long as the channel); the others expire what the contract
    // deletes.
    for table in [
        "VerdictsTable",
        "IdempotencyTable",
        "PaymentsTable",
        "FeedbackTable",
        "ChannelsTable",
    ] {
        let ttl = &resource(&t, table)["Properties"]["TimeToLiveSpecification"];
        assert_eq!(
            ttl.is_null(),
            matches!(table, "FeedbackTable" | "ChannelsTable"),
            "{table}: time to live {ttl}"
        );
    }
    // Every table is listed above.
    let tables = t["resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter(|r| r["Type"] == "AWS::DynamoDB::Table")
        .count();
    assert_eq!(tables, 6);
}

#[test]
fn the_worker_outlasts_pass_two_and_the_queue_keeps_its_jobs() {
    let t = resolve_template(&[]);
    let worker = function(&t, "WorkerFunction");
    let timeout = num(&worker["timeout"]);
    let checker = function(&t, "PassTwoCheckerFunction");
    let limit = std::time::Duration::from_secs(num(&checker["timeout"]));
    let worst = umpire_api::products::verdict::sworn::job_worst_case(limit).as_secs();
    assert!(
        timeout >= worst,
        "the worker's {timeout}s Timeout is under a job's worst case, {worst}s"
    );
    let queue = &resource(&t, "JobsQueue")["Properties"];
    assert_eq!(
        num(&queue["VisibilityTimeout"]),
        6 * timeout,
        "visibility = 6 x the worker's timeout"
    );
    let retention = num(&queue["MessageRetentionPeriod"]);
    assert!(
        (4 * 86_400..=14 * 86_400).contains(&retention),
        "jobs kept 4 to 14 days, not {retention}s"
    );
    assert_eq!(
        num(&queue["RedrivePolicy"]["maxReceiveCount"]),
        u64::from(umpire_store::JOB_MAX_RECEIVES),
        "a job that failed 5 times rests in the dead-letter queue, and the worker knows \
         which receive is its last"
    );
    // docs/sworn.md: one job per invocation, failures kept 14 days in the DLQ.
    let dlq = &resource(&t, "JobsDeadLetterQueue")["Properties"];
    assert_eq!(
        num(&dlq["MessageRetentionPeriod"]),
        14 * 86_400,
        "the dead-letter queue keeps a failed job 14 days (SQS's longest)"
    );
    let sqs = &worker["sqs"][0];
    // One job per invocation, so a worker and its checker are two executions: at the
    // default concurrency the jobs take 4 of a new account's 10. Would catch: a batch
    // whose jobs run side by side (2 workers and 10 checkers: past the quota, throttling
    // purchases and /healthz).
    assert_eq!(sqs["batch_size"], 1, "the worker takes one job at a time");
    let default_workers = umpire_blackbox::template_section("Parameters")
        .get("WorkerConcurrency")
        .and_then(|p| p.get("Default"))
        .and_then(|d| {
            d.as_u64()
                .or_else(|| d.as_str().and_then(|s| s.parse().ok()))
        })
        .expect("WorkerConcurrency's default");
    assert!(
        2 * default_workers <= 4,
        "the jobs' share of a quota of 10: {}",
        2 * default_workers
    );
    assert_eq!(
        sqs["report_failures"], true,
        "failures reported per message"
    );
    assert!(
        sqs["maximum_concurrency"]
            .as_str()
            .is_some_and(|c| c.parse::<u64>().is_ok_and(|c| c >= 2)),
        "the trigger caps its concurrency: {sqs}"
    );
    assert!(
        sqs["queue_arn"]
            .as_str()
            .is_some_and(|a| a.ends_with("JobsQueue")),
        "the worker reads the jobs queue"
    );
}

/// Both checkers are isolated (no permissions, no variables of their own), their timeout
/// is the limit the judging functions name, each judging function invokes its own, and a
/// reserved pool is reserved only when asked for (new accounts may not have the quota).
#[test]
fn each_checker_is_isolated_and_its_timeout_is_the_check_limit() {
    let t = resolve_template(&[]);
    for (checker, caller) in [
        ("CheckerFunction", "VerdictsFunction"),
        ("PassTwoCheckerFunction", "WorkerFunction"),
    ] {
        let f = function(&t, checker);
        // Its effective permissions, every policy attached (AWS-managed ones included,
        // as stack.py expands them): writing its own log group, nothing else. Would
        // catch: SAM's AWSLambdaBasicExecutionRole (logs on `*`), X-Ray's write access
        // that global tracing adds, or any grant slipped in beside them.
        let names: Vec<&str> = f["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert_eq!(names, ["OwnLogs"], "{checker}: its policies");
        for (actions, resource) in statements(f) {
            assert!(
                actions
                    .iter()
                    .all(|a| a == "logs:CreateLogStream" || a == "logs:PutLogEvents"),
                "{checker} may {actions:?}"
            );
            assert!(
                resource.contains(&format!("{checker}Logs")),
                "{checker} writes only its own log group, not {resource}"
            );
        }
        assert_eq!(
            resource(&t, checker)["Properties"]["TracingConfig"]["Mode"],
            "PassThrough",
            "{checker}: no X-Ray"
        );
        // A hostile check killed at its limit is expected: its errors alarm is not a
        // page per kill.
        let alarm = &resource(&t, &checker.replace("Function", "ErrorsAlarm"))["Properties"];
        assert!(
            alarm["Threshold"].as_u64().is_some_and(|n| n >= 10),
            "{checker}: {alarm}"
        );
        // Only what it reads (its log level): no table or queue name, no key, no
        // secret, nothing a hostile check could learn the stack's layout from.
        let names: Vec<&String> = f["environment"]
            .as_object()
            .map(|e| e.keys().collect())
            .unwrap_or_default();
        assert_eq!(names, ["RUST_LOG"], "{checker}'s environment");
        let timeout = num(&f["timeout"]);
        assert!(timeout <= 5, "a short hard timeout, not {timeout}s");
        let judge = function(&t, caller);
        assert_eq!(
            num(&judge["environment"]["UMPIRE_CHECK_LIMIT_MS"]),
            timeout * 1000,
            "{caller} names the checker's real limit"
        );
        // Through its alias (a qualified ARN): a rollout moves caller and callee alike.
        assert_eq!(
            judge["environment"]["UMPIRE_CHECKER_FUNCTION"],
            format!("arn:aws:lambda:us-east-1:123456789012:function:{checker}:live")
        );
        assert_eq!(
            f["reserved_concurrency"],
            Json::Null,
            "no reservation by default"
        );
    }
    for (name, f) in deployed(&t) {
        let invokes: Vec<&str> = [
            "CheckerFunction",
            "PassTwoCheckerFunction",
            "VerdictsFunction",
            "ReputationFunction",
        ]
        .into_iter()
        .filter(|c| may(f, "lambda:InvokeFunction", &format!(":{c}:live\"")))
        .collect();
        let expected: Vec<&str> = match name {
            "VerdictsFunction" => vec!["CheckerFunction"],
            "WorkerFunction" => vec!["PassTwoCheckerFunction"],
            // MCP's paid tools go to the paid routes themselves.
            "McpFunction" => vec!["VerdictsFunction", "ReputationFunction"],
            _ => vec![],
        };
        assert_eq!(invokes, expected, "{name}: who it may invoke");
    }
    let reserved = resolve_template(&[
        ("CheckerConcurrency", "20"),
        ("PassTwoCheckerConcurrency", "5"),
    ]);
    assert_eq!(
        function(&reserved, "CheckerFunction")["reserved_concurrency"],
        "20"
    );
    assert_eq!(
        function(&reserved, "PassTwoCheckerFunction")["reserved_concurrency"],
        "5"
    );
}

/// The seed is opened only by the three functions that sign, with its encryption
/// context: the key's policy names their roles by `aws:PrincipalArn` (delegating to the
/// account, whose IAM policy `SigningSeedDecrypt` gives those roles, and only them,
/// Decrypt on this key); the key's administrators may not decrypt. No statement of the
/// key's policy names a role of this stack as its principal: KMS checks principals
/// exist at `CreateKey`, and a role created moments before may not be visible yet.
/// Would catch: a key whose first create fails on IAM propagation, a signing role that
/// cannot decrypt, or a non-signing function that can.
/// docs/aws.md: `CheckerNetwork=isolated` runs both checkers in a VPC of the stack's own
/// with no route out (no gateway, endpoint, route or peering; a security group whose
/// only egress leads to 127.0.0.1 and no ingress), and only then may their roles manage
/// network interfaces; no other function is in it. Would catch: a way out added to the
/// checkers' network, the default allow-all egress left in place, one checker outside
/// it, or network rights given to a checker outside any VPC.
#[test]
fn an_isolated_checker_network_has_no_way_out() {
    let t = resolve_template(&[("CheckerNetwork", "isolated")]);
    let res = t["resources"].as_object().expect("resources");
    for (logical, r) in res {
        let kind = r["Type"].as_str().unwrap_or_default();
        assert!(
            ![
                "AWS::EC2::InternetGateway",
                "AWS::EC2::EgressOnlyInternetGateway",
                "AWS::EC2::NatGateway",
                "AWS::EC2::VPCGatewayAttachment",
                "AWS::EC2::VPCEndpoint",
                "AWS::EC2::Route",
                "AWS::EC2::VPCPeeringConnection",
                "AWS::EC2::TransitGatewayAttachment",
                "AWS::EC2::SecurityGroupEgress",
                "AWS::EC2::SecurityGroupIngress",
            ]
            .contains(&kind),
            "{logical}: a {kind} in the template"
        );
    }
    let sg = &res["CheckerSecurityGroup"]["Properties"];
    let egress = sg["SecurityGroupEgress"].as_array().expect("egress rules");
    assert_eq!(egress.len(), 1, "{egress:?}");
    assert_eq!(egress[0]["CidrIp"], "127.0.0.1/32", "{egress:?}");
    assert!(sg["SecurityGroupIngress"].is_null(), "no ingress: {sg}");
    for (name, f) in deployed(&t) {
        let vpc = res[name]["Properties"]["VpcConfig"].to_string();
        let names: Vec<&str> = f["policies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str())
            .collect();
        if name.ends_with("CheckerFunction") {
            for part in ["CheckerSubnetA", "CheckerSubnetB", "CheckerSecurityGroup"] {
                assert!(vpc.contains(part), "{name} in the isolated network: {vpc}");
            }
            assert_eq!(names, ["OwnLogs", "NetworkInterfaces"], "{name}");
        } else {
            assert!(
                !vpc.contains("Checker"),
                "{name} is not in the checkers' network"
            );
        }
    }
    let default = resolve_template(&[]);
    for checker in ["CheckerFunction", "PassTwoCheckerFunction"] {
        assert!(
            !statements(function(&default, checker))
                .iter()
                .any(|(a, _)| a.iter().any(|x| x.starts_with("ec2:"))),
            "{checker}: no network rights outside a VPC"
        );
    }
}

/// The settings every function but the checkers reads (tables, queue, keys, issuer,
/// registries) are written out in each function of template.yaml, not in Globals, as
/// the checkers must not see them. Read with every parameter given a value of its own,
/// each function carries every one of the health function's settings, with the same
/// value. Would catch: a shared setting added to some functions and not others, or one
/// copy edited and another left behind (a rotation publishing a key that the signing
/// function does not use).
#[test]
fn every_function_but_the_checkers_reads_the_same_shared_settings() {
    let t = resolve_template(&[
        ("Issuer", "https://umpire.example"),
        ("SigningPublicKey", "cHVibGlj"),
        ("RetiredPublicKeys", "cmV0aXJlZA=="),
        ("NextPublicKey", "bmV4dA=="),
        (
            "ValidationRegistry",
            "eip155:8453:0x0000000000000000000000000000000000008004",
        ),
        (
            "ValidatorAddress",
            "0x0000000000000000000000000000000000000009",
        ),
        ("AgentId", "7"),
    ]);
    let shared = function(&t, "HealthFunction")["environment"]
        .as_object()
        .expect("the health function's environment");
    for var in [
        "UMPIRE_VERDICTS_TABLE",
        "UMPIRE_SIGNING_PUBLIC_KEY",
        "UMPIRE_ISSUER",
    ] {
        assert!(shared.contains_key(var), "{var} is shared: {shared:?}");
    }
    let mut compared = 0;
    for (name, f) in deployed(&t) {
        if name.contains("Checker") || name == HOOK {
            continue;
        }
        for (var, value) in shared {
            assert_eq!(&f["environment"][var], value, "{name}: {var}");
        }
        compared += 1;
    }
    assert_eq!(compared, 13, "every function but the two checkers");
}

#[test]
fn only_signing_functions_may_open_the_sealed_seed() {
    let t = resolve_template(&[]);
    let policy = &resource(&t, "SigningKey")["Properties"]["KeyPolicy"]["Statement"];
    let statements = policy.as_array().expect("key policy statements");
    let roles: Vec<&str> = t["resources"]
        .as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::IAM::Role")
        .map(|(k, _)| k.as_str())
        .collect();
    assert!(roles.contains(&"WorkerFunctionRole"), "{roles:?}");
    for s in statements {
        let principal = s["Principal"].to_string();
        for role in &roles {
            assert!(
                !principal.contains(&format!("\"{role}\"")),
                "a role of this stack as a key-policy principal: {s}"
            );
        }
    }
    let all_decrypters: Vec<&Json> = statements
        .iter()
        .filter(|s| s.to_string().contains("kms:Decrypt") || s["Action"] == "kms:*")
        .collect();
    assert_eq!(
        all_decrypters.len(),
        3,
        "three statements grant Decrypt: the seed's, the validator key's, the receiver authorizer's: {policy}"
    );
    let who = |s: &Json| s["Condition"]["ArnEquals"]["aws:PrincipalArn"].to_string();
    // The validator's key and the receiver authorizer's: the worker alone, each with its
    // own context.
    let worker_only = ["umpire-validator-key", "umpire-receiver-authorizer"];
    for context in worker_only {
        let opening: Vec<&&Json> = all_decrypters
            .iter()
            .filter(|s| s.to_string().contains(context))
            .collect();
        assert_eq!(opening.len(), 1, "{context}: {policy}");
        assert!(
            who(opening[0]).contains("WorkerFunctionRole")
                && !opening[0]["Condition"]["ArnEquals"]["aws:PrincipalArn"].is_array(),
            "only the worker opens {context}: {}",
            opening[0]
        );
    }
    let decrypters: Vec<&Json> = all_decrypters
        .into_iter()
        .filter(|s| !worker_only.iter().any(|c| s.to_string().contains(c)))
        .collect();
    for role in [
        "VerdictsFunctionRole",
        "ReputationFunctionRole",
        "WorkerFunctionRole",
    ] {
        assert!(
            who(decrypters[0]).contains(role),
            "{role} may decrypt: {}",
            decrypters[0]
        );
    }
    assert_eq!(
        decrypters[0]["Condition"]["ArnEquals"]["aws:PrincipalArn"]
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    assert!(
        decrypters[0].to_string().contains("umpire-signing-seed"),
        "Decrypt only with the seed's encryption context"
    );
    for (name, f) in deployed(&t) {
        let signs = matches!(
            name,
            "VerdictsFunction" | "WorkerFunction" | "ReputationFunction"
        );
        assert_eq!(
            may(f, "kms:Decrypt", "SigningKey"),
            signs,
            "{name}: Decrypt of the signing key in its role's policies"
        );
        assert_eq!(
            f["environment"]["UMPIRE_SIGNING_SEED_CIPHERTEXT"].is_string(),
            signs,
            "{name}: the sealed seed in its environment"
        );
        assert_eq!(
            f["environment"]["UMPIRE_SIGNING_KEY_ARN"].is_string(),
            signs,
            "{name}: Decrypt names the key"
        );
    }
    // keygen is pointed at the key's ARN, which names its region: an operator whose
    // default region is another still reaches it.
    let outputs = umpire_blackbox::template_section("Outputs");
    let key_output = outputs
        .get("SigningKeyId")
        .and_then(|o| o.get("Value"))
        .map(|v| v.to_canonical_string())
        .unwrap_or_default();
    assert!(
        key_output.contains("SigningKey") && key_output.contains("Arn"),
        "SigningKeyId is the key's ARN: {key_output}"
    );
    // Each role's Decrypt carries its context: the seed's for the three, the validator
    // key's for the worker alone.
    for (name, f) in deployed(&t) {
        let text = f["policies"].to_string();
        assert_eq!(
            text.contains("umpire-validator-key"),
            name == "WorkerFunction",
            "{name}"
        );
    }
}

/// The account always administers the signing key (never decrypts it), so a named
/// KeyAdministrator cannot lock out the deployer: KMS refuses to create a key whose
/// policy would not let its creator change the policy again.
#[test]
fn the_account_keeps_administering_the_signing_key() {
    for admin in ["", "arn:aws:iam::123456789012:role/KeyAdmin"] {
        let t = resolve_template(&[("KeyAdministrator", admin)]);
        // The policy as deployed (conditions resolved).
        let statements = t["key_policies"]
            .as_object()
            .and_then(|p| p.values().next())
            .and_then(|p| p["Statement"].as_array())
            .expect("key policy statements")
            .clone();
        let root = statements
            .iter()
            .find(|s| s["Principal"]["AWS"].to_string().ends_with(":root\""))
            .unwrap_or_else(|| panic!("no statement for the account: {statements:?}"));
        let actions = root["Action"].to_string();
        assert!(
            actions.contains("kms:Put*") && !actions.contains("Decrypt"),
            "{actions}"
        );
        // A grant is a way to Decrypt: an administrator must not make one to itself.
        assert!(
            !actions.contains("kms:Create*") && !actions.contains("CreateGrant"),
            "an administrator could grant itself Decrypt: {actions}"
        );
        let named = statements
            .iter()
            .any(|s| s["Principal"]["AWS"] == admin && s["Action"] == root["Action"]);
        assert_eq!(
            named,
            !admin.is_empty(),
            "KeyAdministrator {admin:?}: {statements:?}"
        );
    }
}

/// Secrets are given as the ARNs of secrets the operator made, read at cold start, each
/// only by the functions that need it: no secret value reaches a function's
/// configuration, and none is typed into a deploy (no NoEcho parameter: a guided deploy
/// can leave each empty, and saves what it was given).
#[test]
fn no_secret_is_in_any_environment() {
    let arn =
        |name: &str| format!("arn:aws:secretsmanager:us-east-1:123456789012:secret:{name}-AbCdEf");
    let (auth, rpc, solana, validation, evm) = (
        arn("auth"),
        arn("rpc"),
        arn("solana"),
        arn("validation"),
        arn("evm"),
    );
    let t = resolve_template(&[
        ("EvmRpcUrlSecretArn", &evm),
        ("FacilitatorAuthSecretArn", &auth),
        ("FeedbackRpcUrlSecretArn", &rpc),
        ("SolanaRpcUrlSecretArn", &solana),
        (
            "ValidationRegistry",
            "eip155:8453:0x0000000000000000000000000000000000008004",
        ),
        (
            "ValidatorAddress",
            "0x0000000000000000000000000000000000000009",
        ),
        ("ValidatorKeyCiphertext", "c2VhbGVk"),
        ("ValidationRpcUrlSecretArn", &validation),
    ]);
    for (name, f) in deployed(&t) {
        for var in umpire_functions::SECRET_VARS {
            assert!(
                f["environment"][var].is_null(),
                "{name}: {var} in plain text"
            );
            let given = f["environment"][format!("{var}_SECRET")]
                .as_str()
                .unwrap_or("");
            let secret = match var {
                "UMPIRE_FACILITATOR_AUTH" => &auth,
                "UMPIRE_SOLANA_RPC_URL" => &solana,
                "UMPIRE_EVM_RPC_URL" => &evm,
                "UMPIRE_VALIDATION_RPC_URL" => &validation,
                _ => &rpc,
            };
            assert!(
                given.is_empty() || given == secret,
                "{name}: {var}_SECRET={given}"
            );
            assert_eq!(
                !given.is_empty(),
                may(f, "secretsmanager:GetSecretValue", secret),
                "{name}: reads {secret} exactly when it is given it"
            );
        }
    }
    for (secret, readers) in [
        // The paying functions, and the worker that decides their pending purchases.
        (
            &auth,
            vec!["ReputationFunction", "VerdictsFunction", "WorkerFunction"],
        ),
        (&rpc, vec!["FeedbackFunction", "McpFunction"]),
        (
            &solana,
            vec!["ReputationFunction", "VerdictsFunction", "WorkerFunction"],
        ),
        (
            &evm,
            vec!["ReputationFunction", "VerdictsFunction", "WorkerFunction"],
        ),
        (&validation, vec!["VerdictsFunction", "WorkerFunction"]),
    ] {
        let got: Vec<&str> = deployed(&t)
            .into_iter()
            .filter(|(_, f)| may(f, "secretsmanager:GetSecretValue", secret))
            .map(|(n, _)| n)
            .collect();
        assert_eq!(got, readers, "{secret}'s readers");
    }
    let text = std::fs::read_to_string(umpire_blackbox::repo_root().join("template.yaml"))
        .expect("template.yaml");
    assert!(
        !text.contains("NoEcho"),
        "a guided deploy re-asks an empty NoEcho parameter"
    );
    // Without the parameters nobody may read a secret.
    let bare = resolve_template(&[]);
    for (name, f) in deployed(&bare) {
        assert!(!may(f, "secretsmanager:GetSecretValue", ""), "{name}");
        // Optional statements come last, so statement N is the same statement whatever
        // the parameters (infra/local/iam_removal.py drops statements by number).
        for policy in f["policies"].as_array().into_iter().flatten() {
            let named = |p: &Json| p["name"] == policy["name"];
            let with = function(&t, name)["policies"]
                .as_array()
                .and_then(|ps| ps.iter().find(|p| named(p)))
                .map(|p| statements(&json!({ "policies": [p] })))
                .unwrap_or_default();
            let without = statements(&json!({ "policies": [policy] }));
            assert_eq!(
                with.get(..without.len()),
                Some(&without[..]),
                "{name}: a statement under a Condition before an unconditional one"
            );
        }
    }
}

/// No function is deployed with a test switch: no `UMPIRE_TEST_*` variable (the
/// fetcher's are not even in a release build, which refuses them) and no
/// `UMPIRE_RATE_LIMITS` (limits off: a switch for a local `umpire serve`, which a
/// function refuses at cold start). Would catch: a test switch added to Globals or to
/// one function, which would turn the SSRF defence or the per-IP limits off in
/// production with only a line in a log.
#[test]
fn no_function_is_deployed_with_a_test_switch() {
    let text = std::fs::read_to_string(umpire_blackbox::repo_root().join("template.yaml"))
        .expect("template.yaml");
    assert!(
        !text.contains("UMPIRE_TEST_"),
        "a test switch in template.yaml"
    );
    let t = resolve_template(&[]);
    let functions = deployed(&t);
    assert!(
        functions.len() >= 14,
        "every function read: {}",
        functions.len()
    );
    for (name, f) in functions {
        let env = f["environment"].as_object().expect("an environment");
        assert!(!env.is_empty(), "{name}: its environment is read");
        // Also what only a local run or a test sets: a seed or a validator key in the
        // clear, windows and back-offs shortened for tests, and any AWS endpoint of an
        // emulator (`AWS_ENDPOINT_URL`, or one service's, such as
        // `AWS_ENDPOINT_URL_LAMBDA`, which would send the isolated checker's
        // invocations anywhere).
        const LOCAL_ONLY: [&str; 5] = [
            "UMPIRE_RATE_LIMITS",
            "UMPIRE_SIGNING_SEED_HEX",
            "UMPIRE_VALIDATOR_KEY_HEX",
            "UMPIRE_RATE_LIMIT_WINDOW_MS",
            "UMPIRE_WEBHOOK_RETRY_BASE_MS",
        ];
        for key in env.keys() {
            assert!(
                !key.starts_with("UMPIRE_TEST_")
                    && !key.starts_with("AWS_ENDPOINT_URL")
                    && !LOCAL_ONLY.contains(&key.as_str()),
                "{name}: the test switch {key}"
            );
        }
        // As each function's cold start reads it (this test's build of the functions
        // has no test switches, as a deploy's has none): the judging functions name
        // their checker, and nothing local-only is there.
        let role = match name {
            "VerdictsFunction" => Role::Api(Route::Buy),
            "WorkerFunction" => Role::Worker,
            _ => Role::Api(Route::Health),
        };
        let var = |n: &str| env.get(n).and_then(|v| v.as_str()).map(str::to_owned);
        umpire_functions::refuse_local_switches(role, &var)
            .unwrap_or_else(|e| panic!("{name} would not start: {e}"));
    }
    // And the cold start's rule refuses each local-only variable when it is there, and
    // a judging function without its checker (a release bootstrap is held to the same
    // in tests/release_bootstrap.rs).
    for (switch, value) in [
        ("UMPIRE_RATE_LIMITS", "off"),
        ("UMPIRE_SIGNING_SEED_HEX", "11"),
        ("UMPIRE_VALIDATOR_KEY_HEX", "22"),
    ] {
        let var = |n: &str| match n {
            "UMPIRE_CHECKER_FUNCTION" => Some("checker".to_owned()),
            n if n == switch => Some(value.to_owned()),
            _ => None,
        };
        let refused =
            umpire_functions::refuse_local_switches(Role::Worker, &var).expect_err("refused");
        assert!(refused.contains(switch), "{refused}");
    }
    let refused = umpire_functions::refuse_local_switches(Role::Api(Route::Buy), &|_| None)
        .expect_err("a judge without its checker");
    assert!(refused.contains("UMPIRE_CHECKER_FUNCTION"), "{refused}");
    umpire_functions::refuse_local_switches(Role::Api(Route::Health), &|_| None)
        .expect("a function that does not judge needs no checker");
}

/// What an operator needs: every function's logs kept a set time, API Gateway's access
/// logs, tracing, and an alarm on each thing that must be looked at.
#[test]
fn an_operator_sees_logs_traces_and_alarms() {
    let t = resolve_template(&[]);
    let res = t["resources"].as_object().expect("resources");
    for (name, _) in deployed(&t) {
        let props = &res[name]["Properties"];
        let group = props["LoggingConfig"]["LogGroup"]["Ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: its own log group"));
        assert!(
            res[group]["Properties"]["RetentionInDays"].is_object()
                || res[group]["Properties"]["RetentionInDays"].is_number(),
            "{name}: its logs are kept a set time"
        );
        // Every function is traced but the checkers (X-Ray would give the sandbox that
        // runs hostile patterns write access to traces, docs/aws.md) and the PreTraffic
        // hook (it serves deployments, not requests).
        let traced = !name.ends_with("CheckerFunction") && name != HOOK;
        assert_eq!(
            props["TracingConfig"]["Mode"],
            if traced { "Active" } else { "PassThrough" },
            "{name}: traced"
        );
    }
    let stage = res
        .values()
        .find(|r| r["Type"] == "AWS::ApiGatewayV2::Stage")
        .expect("the API's stage");
    let format = stage["Properties"]["AccessLogSettings"]["Format"]
        .as_str()
        .expect("access logs");
    for field in [
        "$context.identity.sourceIp",
        "$context.status",
        "$context.integrationErrorMessage",
    ] {
        assert!(format.contains(field), "access logs carry {field}");
    }
    let alarms: Vec<String> = res
        .values()
        .filter(|r| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|r| {
            format!(
                "{}/{} {}",
                r["Properties"]["Namespace"].as_str().unwrap_or(""),
                r["Properties"]["MetricName"].as_str().unwrap_or(""),
                r["Properties"]["Dimensions"]
            )
        })
        .collect();
    for (what, needle) in [
        ("DLQ depth", "AWS/SQS/ApproximateNumberOfMessagesVisible"),
        (
            "the oldest job's age",
            "AWS/SQS/ApproximateAgeOfOldestMessage",
        ),
        ("checker throttles", "AWS/Lambda/Throttles"),
        ("verdicts errors", "AWS/Lambda/Errors"),
        ("voids", "Umpire/Voids"),
        (
            "rate limiting failing open",
            "Umpire/RateLimitStoreFailures",
        ),
        ("pass 2 giving up", "Umpire/SwornUnresolved"),
        (
            "a purchase pending past its payment's window",
            "Umpire/PendingOverdue",
        ),
        (
            "a stack selling nothing for want of a key",
            "Umpire/NotKeyed",
        ),
        ("API 5xx", "AWS/ApiGateway/5xx"),
        ("validation answers given up", "Umpire/ValidationFailures"),
        ("the validator's gas running low", "Umpire/ValidatorGasLow"),
    ] {
        assert!(
            alarms.iter().any(|a| a.starts_with(needle)),
            "an alarm on {what}: {alarms:#?}"
        );
    }
    // Custom metrics by service, stable across deployments; only the rollout's
    // per-version 500s are by function version (they judge one version).
    for a in alarms
        .iter()
        .filter(|a| a.starts_with("Umpire/") && !a.starts_with("Umpire/Internal5xx "))
    {
        assert!(
            a.contains("Service"),
            "custom metrics by service, not function: {a}"
        );
    }
    for name in ["VerdictsFunction", "WorkerFunction"] {
        assert!(
            alarms
                .iter()
                .any(|a| a.starts_with("AWS/Lambda/Errors") && a.contains(name)),
            "{name}'s errors are alarmed on"
        );
    }
}

/// The local emulators the tests run the functions under hold the platform's limits.
#[test]
fn the_emulators_hold_the_platforms_limits() {
    let root = umpire_blackbox::repo_root();
    let lambda = std::fs::read_to_string(root.join("infra/local/lambda_emulator.py"))
        .expect("lambda emulator");
    assert!(
        lambda.contains(&format!(
            "MAX_PAYLOAD_BYTES = {}",
            group_digits(LAMBDA_SYNC_PAYLOAD_BYTES as u64)
        )),
        "lambda_emulator.py refuses payloads over {LAMBDA_SYNC_PAYLOAD_BYTES} bytes"
    );
    let stack = std::fs::read_to_string(root.join("infra/local/stack_emulator.py"))
        .expect("stack emulator");
    assert!(
        stack.contains(&format!(
            "INTEGRATION_TIMEOUT_S = {API_GATEWAY_TIMEOUT_SECS}.0"
        )),
        "stack_emulator.py ends integrations at {API_GATEWAY_TIMEOUT_SECS} s"
    );
    assert!(
        stack.contains("MAX_REQUEST_LINE_AND_HEADER_VALUES = 10_240"),
        "stack_emulator.py refuses a request line and header values past 10,240 bytes"
    );
}

/// `6291456` as Python writes it with separators: `6_291_456`.
fn group_digits(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('_');
        }
        out.push(c);
    }
    out
}

/// The raw SAM functions (for the cargo lambda watch router, which names binaries).
fn functions(res: &Value) -> Vec<(&str, &Value)> {
    res.as_object()
        .expect("resources")
        .iter()
        .filter(|(_, r)| str_at(r, &["Type"]) == Some("AWS::Serverless::Function"))
        .map(|(k, r)| (k.as_str(), r))
        .collect()
}

/// Cargo.toml's router section, read with Python's own TOML parser.
const LOAD_ROUTER: &str = r#"
import json, sys, tomllib
print(json.dumps(tomllib.load(open(sys.argv[1], "rb"))["workspace"]["metadata"]["lambda"]["watch"]["router"]))
"#;

/// (path, method or "*", function) from `[workspace.metadata.lambda.watch.router]`.
fn watch_routes() -> BTreeSet<(String, String, String)> {
    let out = std::process::Command::new(umpire_blackbox::python())
        .args(["-c", LOAD_ROUTER])
        .arg(umpire_blackbox::repo_root().join("Cargo.toml"))
        .output()
        .expect("python3 (3.11+, for tomllib)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let router = umpire_core::json::parse(&out.stdout).expect("router JSON");
    let mut routes = BTreeSet::new();
    for (path, target) in router.as_object().expect("a table of paths") {
        match target {
            Value::String(function) => {
                routes.insert((path.clone(), "*".into(), function.clone()));
            }
            Value::Array(entries) => {
                for e in entries {
                    let field = |k: &str| str_at(e, &[k]).expect("method and function").to_owned();
                    routes.insert((path.clone(), field("method"), field("function")));
                }
            }
            other => panic!("{path}: unexpected router entry {other:?}"),
        }
    }
    routes
}

#[test]
fn cargo_lambda_watch_routes_the_api_as_the_http_api_does() {
    let res = template_resources();
    let watch = watch_routes();
    assert!(!watch.is_empty(), "the watch router is configured");
    let mut deployed = BTreeSet::new();
    for (_, f) in functions(&res) {
        let binary = str_at(f, &["Metadata", "BuildProperties", "Binary"]).expect("binary");
        for event in f
            .get("Properties")
            .and_then(|p| p.get("Events"))
            .and_then(Value::as_object)
            .map(|m| m.values().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            if str_at(&event, &["Type"]) != Some("HttpApi") {
                continue;
            }
            let path = str_at(&event, &["Properties", "Path"])
                .expect("path")
                .to_owned();
            let method = str_at(&event, &["Properties", "Method"])
                .expect("method")
                .to_owned();
            deployed.insert((path, method, binary.to_owned()));
        }
    }
    for (path, method, binary) in &deployed {
        assert!(
            watch.contains(&(path.clone(), method.clone(), binary.clone()))
                || watch.contains(&(path.clone(), "*".into(), binary.clone())),
            "{method} {path} -> {binary} is deployed but not routed by cargo lambda watch"
        );
    }
    for (path, method, binary) in &watch {
        assert!(
            deployed
                .iter()
                .any(|(p, m, b)| p == path && b == binary && (method == "*" || m == method)),
            "cargo lambda watch routes {method} {path} -> {binary}, which the template does not"
        );
    }
}

/// The deploy steps run as written: `make deploy`'s sam commands use the repository's
/// config file, which validates the template (the SAM transform, lint) from the
/// repository's root as `make deploy` runs it, and deploys with the capabilities the
/// template needs; no document tells an operator to run sam without it.
/// A new operator's first `make deploy`: the guided prompts, answered with the Issuer and
/// defaults everywhere else (every optional secret left empty), each asked once, reach
/// the first call to AWS (tests/py/guided_deploy.py; AWS points nowhere here).
#[test]
fn a_guided_deploy_with_empty_optional_secrets_goes_on_to_aws() {
    let dir = umpire_blackbox::TempDir::new("guided");
    let config = dir.write(
        "samconfig.toml",
        &std::fs::read(umpire_blackbox::repo_root().join("infra/samconfig.toml"))
            .expect("infra/samconfig.toml"),
    );
    // An answer an earlier deploy saved is offered again.
    let saved = std::fs::read_to_string(&config).expect("config");
    std::fs::write(
        &config,
        saved.replace(
            "[default.deploy.parameters]\n",
            "[default.deploy.parameters]\nparameter_overrides = \"EvmPayTo=\\\"0x00000000000000000000000000000000000000aa\\\"\"\n",
        ),
    )
    .expect("an answer saved by an earlier deploy");
    let run = guided_deploy(&config, &[]);
    let prompts: Vec<&str> = run["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .filter_map(Json::as_str)
        .collect();
    let unique: BTreeSet<&str> = prompts.iter().copied().collect();
    assert_eq!(
        unique.len(),
        prompts.len(),
        "a prompt asked twice: {prompts:?}"
    );
    // Every parameter of the template was asked (its names, two spaces in under
    // `Parameters:`).
    let text = std::fs::read_to_string(umpire_blackbox::repo_root().join("template.yaml"))
        .expect("template.yaml");
    let names: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Parameters:")
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter_map(|l| l.strip_prefix("  ")?.strip_suffix(':'))
        .filter(|n| n.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    assert!(names.len() > 10, "{names:?}");
    for name in names {
        let asked = format!("Parameter {name}");
        assert!(
            prompts.contains(&asked.as_str()),
            "{name} not asked: {prompts:?}"
        );
    }
    assert!(
        run["reached_aws"] == true,
        "the guided deploy stopped before AWS: {}",
        run["output"]
    );
    // The saved answer is what it offers.
    let output = run["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("Parameter EvmPayTo [0x00000000000000000000000000000000000000aa]"),
        "{output}"
    );
}

/// `sam deploy --guided` as tests/py/guided_deploy.py drives it (`extra`: its options).
fn guided_deploy(config: &std::path::Path, extra: &[&str]) -> Json {
    let python = umpire_blackbox::python();
    let sam = std::path::Path::new(&python).with_file_name("sam");
    let out = std::process::Command::new(&python)
        .arg(umpire_blackbox::repo_root().join("tests/py/guided_deploy.py"))
        .arg("--sam")
        .arg(&sam)
        .arg("--template")
        .arg(umpire_blackbox::repo_root().join("template.yaml"))
        .arg("--config-file")
        .arg(config)
        .args(["--issuer", "https://umpire.example.com"])
        .args(extra)
        .output()
        .expect("tests/py/guided_deploy.py");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

/// keygen's next step (docs/aws.md), `make deploy DEPLOY_PARAMS='ParameterKey=…,
/// ParameterValue=…'`, reaches the guided prompts as their defaults, base64 padding and
/// all, and the Makefile passes it on. Would catch: a printed step that deploys nothing
/// new (a bare `sam deploy`, no REVISION mark), or values SAM splits on their `=`.
#[test]
fn keygens_next_step_offers_its_values_to_the_guided_deploy() {
    let makefile =
        std::fs::read_to_string(umpire_blackbox::repo_root().join("Makefile")).expect("Makefile");
    let deploy = makefile.split("\ndeploy:").nth(1).expect("a deploy target");
    assert!(
        deploy.contains("--parameter-overrides \"$$state $(DEPLOY_PARAMS)\""),
        "make deploy passes DEPLOY_PARAMS on"
    );
    assert!(
        deploy.contains("cargo build --profile fast -p umpire-cli --bin umpire"),
        "make deploy builds the umpire binary keygen needs"
    );
    let dir = umpire_blackbox::TempDir::new("guided-keygen");
    let config = dir.write(
        "samconfig.toml",
        &std::fs::read(umpire_blackbox::repo_root().join("infra/samconfig.toml"))
            .expect("infra/samconfig.toml"),
    );
    let ciphertext = "AQICAHh+/x9Zk3c0ZmVk+b2E=";
    let public = "3q2+7wAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let params = format!(
        "ParameterKey=SigningSeedCiphertext,ParameterValue={ciphertext} ParameterKey=SigningPublicKey,ParameterValue={public}"
    );
    let run = guided_deploy(&config, &["--parameter-overrides", &params]);
    let output = run["output"].as_str().unwrap_or_default();
    for (name, value) in [
        ("SigningSeedCiphertext", ciphertext),
        ("SigningPublicKey", public),
    ] {
        assert!(
            output.contains(&format!("Parameter {name} [{value}]")),
            "{name} offered as {value}: {output}"
        );
    }
    assert!(run["reached_aws"] == true, "{output}");
}

/// A deploy that changes only parameters still publishes new versions: SAM's version
/// hash sees the code's package and the environment as written (parameter references
/// unresolved), so `make deploy` marks every build as new between `sam build` and `sam
/// deploy` (infra/deploy_revision.py), and SAM's own package hash changes each time.
#[test]
fn every_make_deploy_packages_every_function_anew() {
    let root = umpire_blackbox::repo_root();
    let makefile = std::fs::read_to_string(root.join("Makefile")).expect("Makefile");
    let deploy = makefile.split("\ndeploy:").nth(1).expect("a deploy target");
    let revise = deploy
        .find("deploy_revision.py .aws-sam/build")
        .expect("marks the build");
    assert!(
        revise < deploy.find("sam deploy").expect("sam deploy"),
        "before sam deploy"
    );
    let dir = umpire_blackbox::TempDir::new("build");
    for f in ["HealthFunction", "VerdictsFunction"] {
        std::fs::create_dir_all(dir.path().join(f)).expect("mkdir");
        std::fs::write(dir.path().join(f).join("bootstrap"), b"the same binary")
            .expect("bootstrap");
    }
    let python = umpire_blackbox::python();
    // samcli's own hash of a function's folder: what names its package in S3.
    let checksums = || -> Vec<String> {
        let out = std::process::Command::new(&python)
            .args([
                "-c",
                "import sys; from samcli.lib.utils.hash import dir_checksum; \
                 print(' '.join(dir_checksum(sys.argv[1] + '/' + f) for f in sys.argv[2:]))",
            ])
            .arg(dir.path())
            .args(["HealthFunction", "VerdictsFunction"])
            .output()
            .expect("samcli");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    let mark = || {
        let out = std::process::Command::new(&python)
            .arg(root.join("infra/deploy_revision.py"))
            .arg(dir.path())
            .output()
            .expect("infra/deploy_revision.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let before = checksums();
    mark();
    let first = checksums();
    mark();
    let second = checksums();
    assert_eq!(before.len(), 2);
    for (a, b) in [(&before, &first), (&first, &second)] {
        for (x, y) in a.iter().zip(b.iter()) {
            assert_ne!(x, y, "every function's package changes on every deploy");
        }
    }
}

/// `make test` installs the SAM CLI and cfn-lint at the versions the Makefile pins, and
/// those are the versions that run. Would catch: a new release changing the transform,
/// the guided prompts or a lint rule under an unchanged tree.
#[test]
fn sam_and_cfn_lint_are_pinned_and_those_versions_run() {
    let makefile =
        std::fs::read_to_string(umpire_blackbox::repo_root().join("Makefile")).expect("Makefile");
    let pinned = |var: &str, package: &str| -> String {
        makefile
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{var} := {package}==")))
            .unwrap_or_else(|| panic!("{var} pins {package}"))
            .trim()
            .to_owned()
    };
    let bin = std::path::Path::new(&umpire_blackbox::python()).to_path_buf();
    for (var, package, tool) in [
        ("SAM_CLI", "aws-sam-cli", "sam"),
        ("CFN_LINT", "cfn-lint", "cfn-lint"),
    ] {
        let version = pinned(var, package);
        let out = std::process::Command::new(bin.with_file_name(tool))
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("{tool} (make test installs it): {e}"));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            said.trim().ends_with(&version),
            "{tool} runs {said:?}, the Makefile pins {version}"
        );
    }
}

#[test]
fn the_deploy_steps_validate_with_the_repositorys_config() {
    let root = umpire_blackbox::repo_root();
    let makefile = std::fs::read_to_string(root.join("Makefile")).expect("Makefile");
    assert!(makefile.contains("SAM_CONFIG := --config-file infra/samconfig.toml"));
    // `deploy` runs `sam-build` (sam build), then sam deploy.
    let recipe_of = |target: &str| -> Vec<&str> {
        makefile
            .split(&format!("\n{target}:"))
            .nth(1)
            .unwrap_or_else(|| panic!("a {target} target"))
            .lines()
            .skip(1)
            .take_while(|l| l.starts_with('\t') || l.is_empty())
            .filter(|l| l.contains(" sam "))
            .collect()
    };
    assert!(
        makefile.contains("\ndeploy: sam-build | $(DEPLOY_CONFIG)\n"),
        "deploy builds first, and has its own config"
    );
    let build = recipe_of("sam-build");
    assert_eq!(build.len(), 1, "sam build: {build:?}");
    assert!(build[0].contains("$(SAM_CONFIG)"), "{build:?}");
    // The guided deploy saves the operator's answers to an ignored copy of the
    // repository's config: the tracked file never holds a deployment's settings.
    let deploy = recipe_of("deploy");
    assert_eq!(deploy.len(), 1, "sam deploy: {deploy:?}");
    assert!(
        deploy[0].contains("--config-file $(DEPLOY_CONFIG)"),
        "{deploy:?}"
    );
    assert!(makefile.contains("DEPLOY_CONFIG := infra/samconfig.local.toml"));
    assert!(makefile.contains("$(DEPLOY_CONFIG):\n\tcp infra/samconfig.toml $@\n"));
    let ignored = std::process::Command::new("git")
        .args(["check-ignore", "-q", "infra/samconfig.local.toml"])
        .current_dir(&root)
        .status()
        .expect("git");
    assert!(ignored.success(), "infra/samconfig.local.toml is ignored");

    let sam = std::path::Path::new(&umpire_blackbox::python()).with_file_name("sam");
    let out = std::process::Command::new(&sam)
        .args(["validate", "--config-file", "infra/samconfig.toml"])
        .current_dir(&root)
        .env("SAM_CLI_TELEMETRY", "0")
        .output()
        .unwrap_or_else(|e| panic!("run {} (make test installs it): {e}", sam.display()));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && said.contains("is a valid SAM Template"),
        "{said}"
    );

    let config = std::fs::read_to_string(root.join("infra/samconfig.toml")).expect("samconfig");
    for capability in ["CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND"] {
        assert!(
            config.contains(capability),
            "samconfig deploys with {capability}"
        );
    }
    for doc in std::iter::once(root.join("README.md")).chain(
        std::fs::read_dir(root.join("docs"))
            .expect("docs")
            .filter_map(|e| e.ok().map(|e| e.path())),
    ) {
        let text = std::fs::read_to_string(&doc).unwrap_or_default();
        for line in text.lines().filter(|l| l.trim_start().starts_with("sam ")) {
            assert!(
                line.contains("--config-file infra/samconfig.toml"),
                "{}: {line:?} runs sam without the repository's config",
                doc.display()
            );
        }
    }
}

/// What a production HTTP API has (issue 41's list): every function's errors and
/// throttles alarmed, the account's concurrency, every table's throttles and system
/// errors, each alarm telling the topic when it clears too; a dashboard; stage and
/// per-route throttling; the custom domain wired to the API and to the issuer; the
/// retained tables protected from deletion; the DLQ's ARN an output; parameters held
/// to patterns, and rules pairing those that go together.
#[test]
fn a_production_api_has_alarms_throttles_a_domain_and_checked_parameters() {
    let t = resolve_template(&[]);
    let res = t["resources"].as_object().expect("resources");
    let alarms: Vec<&Json> = res
        .values()
        .filter(|r| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|r| &r["Properties"])
        .collect();
    for a in &alarms {
        assert_eq!(
            a["OKActions"], a["AlarmActions"],
            "clears are told too: {a}"
        );
    }
    let on = |metric: &str, needle: &str| {
        alarms.iter().any(|a| {
            a.to_string().contains(&format!("\"{metric}\"")) && a.to_string().contains(needle)
        })
    };
    for (name, _) in deployed(&t) {
        assert!(
            on("Errors", &format!("\"{name}\"")),
            "{name}: errors alarmed"
        );
        assert!(
            on("Throttles", &format!("\"{name}\"")),
            "{name}: throttles alarmed"
        );
    }
    assert!(
        on("ConcurrentExecutions", ""),
        "account concurrency alarmed"
    );
    for table in [
        "VerdictsTable",
        "IdempotencyTable",
        "PaymentsTable",
        "RateLimitsTable",
        "FeedbackTable",
    ] {
        for metric in ["ReadThrottleEvents", "WriteThrottleEvents", "SystemErrors"] {
            assert!(
                on(metric, &format!("\"{table}\"")),
                "{table}: {metric} alarmed"
            );
        }
    }
    let dashboard = res
        .values()
        .find(|r| r["Type"] == "AWS::CloudWatch::Dashboard")
        .expect("a dashboard")
        .to_string();
    for needle in [
        "ConcurrentExecutions",
        "Voids",
        "ApproximateAgeOfOldestMessage",
        "5xx",
    ] {
        assert!(dashboard.contains(needle), "the dashboard shows {needle}");
    }

    // Throttling: the stage's default and the costly free routes.
    let stage = res
        .values()
        .find(|r| r["Type"] == "AWS::ApiGatewayV2::Stage")
        .expect("the API's stage");
    let settings = &stage["Properties"];
    assert!(settings["DefaultRouteSettings"]["ThrottlingRateLimit"].is_object());
    for route in ["POST /v1/validate", "POST /mcp"] {
        assert!(
            settings["RouteSettings"][route]["ThrottlingRateLimit"].is_object(),
            "{route} throttled: {settings}"
        );
    }

    // What the stack keeps when it goes it does not keep from a failed first create
    // (RetainExceptOnCreate): the next deploy starts afresh, nothing to delete by hand.
    for (logical, r) in res.iter() {
        assert!(
            r["DeletionPolicy"].is_null()
                || r["DeletionPolicy"] == "Delete"
                || r["DeletionPolicy"] == "RetainExceptOnCreate",
            "{logical}: {} keeps what a failed first create made",
            r["DeletionPolicy"]
        );
    }
    // Retained tables cannot be deleted by a stray call; the DLQ's ARN is an output.
    for (logical, r) in res
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::DynamoDB::Table")
    {
        let retained = r["DeletionPolicy"] == "RetainExceptOnCreate";
        assert_eq!(
            r["Properties"]["DeletionProtectionEnabled"]
                == serde_json::json!({"Ref": "TableDeletionProtection"}),
            retained,
            "{logical}: deletion protection exactly when retained"
        );
    }
    let outputs = umpire_blackbox::template_section("Outputs");
    let dlq = outputs
        .get("JobsDeadLetterQueueArn")
        .and_then(|o| o.get("Value"))
        .map(|v| v.to_canonical_string())
        .unwrap_or_default();
    assert!(
        dlq.contains("JobsDeadLetterQueue") && dlq.contains("Arn"),
        "the DLQ's ARN is an output: {dlq}"
    );

    // The domain: mapped to the API, a record when a zone is named, and the issuer.
    let domain = resolve_template(&[
        ("Issuer", ""),
        ("DomainName", "api.example.com"),
        (
            "CertificateArn",
            "arn:aws:acm:us-east-1:123456789012:certificate/0f0f0f0f-0000-4000-8000-000000000000",
        ),
        ("HostedZoneId", "Z0123456789ABC"),
    ]);
    let types: BTreeSet<&str> = domain["resources"]
        .as_object()
        .expect("resources")
        .values()
        .filter_map(|r| r["Type"].as_str())
        .collect();
    for ty in [
        "AWS::ApiGatewayV2::DomainName",
        "AWS::ApiGatewayV2::ApiMapping",
        "AWS::Route53::RecordSet",
    ] {
        assert!(types.contains(ty), "{ty} with a domain");
    }
    // Every function that names documents (all but the checkers and the PreTraffic
    // hook, which read only their log level).
    for (name, f) in deployed(&domain)
        .into_iter()
        .filter(|(n, _)| !n.ends_with("CheckerFunction") && *n != HOOK)
    {
        assert_eq!(
            f["environment"]["UMPIRE_ISSUER"], "https://api.example.com",
            "{name}: documents name the domain"
        );
    }

    // Parameters: every free-text one that names an address, key, URL or ARN has a
    // pattern; rules pair what goes together.
    let params = umpire_blackbox::template_section("Parameters");
    for name in [
        "Issuer",
        "DomainName",
        "CertificateArn",
        "HostedZoneId",
        "SigningSeedCiphertext",
        "SigningPublicKey",
        "RetiredPublicKeys",
        "KeyAdministrator",
        "EvmPayTo",
        "EvmNetwork",
        "FacilitatorUrl",
        "FacilitatorAuthSecretArn",
        "SolanaPayTo",
        "SolanaFeePayer",
        "SolPriceUrl",
        "SolanaRpcUrlSecretArn",
        "FeedbackRpcUrlSecretArn",
        "AlarmEmail",
    ] {
        assert!(
            params
                .get(name)
                .and_then(|p| p.get("AllowedPattern"))
                .is_some(),
            "{name} has an AllowedPattern"
        );
    }
    // A secret's ARN without its random suffix names no secret IAM can match: the
    // function's GetSecretValue would be denied at cold start. Held at the deploy.
    let secret_params: Vec<&String> = match &params {
        umpire_core::Value::Object(p) => p.keys().filter(|k| k.ends_with("SecretArn")).collect(),
        other => panic!("Parameters: {other:?}"),
    };
    assert!(secret_params.len() >= 5, "{secret_params:?}");
    for name in secret_params {
        let pattern = params
            .get(name)
            .and_then(|p| p.get("AllowedPattern"))
            .and_then(|p| p.as_str())
            .unwrap_or_default();
        assert!(
            pattern.ends_with(":secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6})?$"),
            "{name}: the six-character suffix required: {pattern}"
        );
    }
    let rules: Vec<String> = match umpire_blackbox::template_section("Rules") {
        umpire_core::Value::Object(rules) => rules
            .values()
            .map(|rule| rule.to_canonical_string())
            .collect(),
        other => panic!("Rules: {other:?}"),
    };
    for pair in [
        ("DomainName", "CertificateArn"),
        ("SigningSeedCiphertext", "SigningPublicKey"),
        ("EvmPayTo", "FacilitatorUrl"),
        ("SolanaPayTo", "SolanaFeePayer"),
        ("SolNative", "SolanaRpcUrlSecretArn"),
        ("Issuer", "DomainName"),
    ] {
        assert!(
            rules.iter().any(|r| r.contains(&format!("\"{}\"", pair.0))
                && r.contains(&format!("\"{}\"", pair.1))),
            "a rule pairs {pair:?}"
        );
    }
}

/// Safe rollouts: every function is published behind the alias `live`, moved by
/// CodeDeploy gradually and rolled back by its own errors alarm (and API 5xx, voided
/// purchases); API Gateway, the SQS trigger and every function that invokes another
/// call the alias, so a caller and its callee move together, and the IAM grants name
/// the alias.
#[test]
fn every_function_rolls_out_behind_an_alias_that_alarms_roll_back() {
    let t = resolve_template(&[]);
    let res = t["resources"].as_object().expect("resources");
    let of_type = |ty: &str| -> Vec<(&String, &Json)> {
        res.iter().filter(|(_, r)| r["Type"] == ty).collect()
    };
    let aliases = of_type("AWS::Lambda::Alias");
    let groups = of_type("AWS::CodeDeploy::DeploymentGroup");
    let f_http = |name: &str| {
        function(&t, name)["http"]
            .as_array()
            .is_some_and(|h| !h.is_empty())
    };
    for (name, _) in deployed(&t).into_iter().filter(|(n, _)| *n != HOOK) {
        let alias = aliases
            .iter()
            .find(|(_, a)| a["Properties"]["FunctionName"]["Ref"] == name)
            .unwrap_or_else(|| panic!("{name}: an alias"));
        assert_eq!(alias.1["Properties"]["Name"], "live");
        let update = &alias.1["UpdatePolicy"]["CodeDeployLambdaAliasUpdate"];
        // Proved by the PreTraffic hook before any traffic moves, canary or not.
        assert_eq!(
            update["BeforeAllowTrafficHook"]["Ref"], HOOK,
            "{name}: its new versions are probed"
        );
        assert!(
            umpire_functions::pretraffic::probe_for(name).is_some(),
            "{name}: the hook has a probe for it"
        );
        let group = update["DeploymentGroupName"]["Ref"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: moved by CodeDeploy"));
        let group = &res[group]["Properties"];
        let config = group["DeploymentConfigName"].to_string();
        assert!(
            config.contains("Canary10Percent5Minutes"),
            "{name}: gradual by default: {config}"
        );
        let short = name.trim_end_matches("Function");
        let alarms = group["AlarmConfiguration"]["Alarms"]
            .as_array()
            .expect("rollback alarms");
        let alarm = format!("{short}NewVersionErrorsAlarm");
        let mut expected = vec![Json::from(alarm.clone())];
        if f_http(name) {
            // And the 500s it answers itself (a failed invocation it is not).
            expected.push(Json::from(format!("{short}NewVersion5xxAlarm")));
        }
        assert_eq!(
            alarms
                .iter()
                .map(|a| a["Name"]["Ref"].clone())
                .collect::<Vec<_>>(),
            expected,
            "{name}: rolled back by its new version's own alarms alone (not by the 503s it answers on purpose)"
        );
        let dims = res[&alarm]["Properties"]["Dimensions"].to_string();
        assert!(
            dims.contains("ExecutedVersion") && dims.contains(":live"),
            "{alarm}: the version behind the alias: {dims}"
        );
        assert_eq!(group["AutoRollbackConfiguration"]["Enabled"], true);
    }
    // Every function but the hook (not deployed through itself).
    assert_eq!(groups.len(), deployed(&t).len() - 1);
    // Canaries side by side: no function, role or policy waits on another function's
    // alias (whose update is that function's canary, five minutes by default); callers
    // name the alias by its qualified name instead. Would catch: a `!Ref X.Alias`
    // chaining the checker's canary before the verdicts function's, then MCP's.
    for (logical, r) in res {
        let kind = r["Type"].as_str().unwrap_or_default();
        if [
            "AWS::Lambda::Function",
            "AWS::IAM::Role",
            "AWS::IAM::Policy",
        ]
        .contains(&kind)
        {
            let text = r.to_string();
            assert!(
                !text.contains("Aliaslive\""),
                "{logical} depends on an alias: {text}"
            );
        }
    }
    // The hook: named as CodeDeploy's role for Lambda deployments may invoke it, and
    // allowed to invoke and read the tags of every function it probes, nothing else.
    let hook = &res[HOOK]["Properties"];
    assert!(
        hook["FunctionName"].to_string().contains("CodeDeployHook_"),
        "{}",
        hook["FunctionName"]
    );
    let probed: BTreeSet<String> = deployed(&t)
        .into_iter()
        .filter(|(n, _)| *n != HOOK)
        .map(|(n, _)| n.to_owned())
        .collect();
    for name in &probed {
        let arn = format!("arn:aws:lambda:us-east-1:123456789012:function:{name}");
        assert!(
            may(
                function(&t, HOOK),
                "lambda:InvokeFunction",
                &format!("{arn}:*")
            ),
            "the hook may invoke {name}'s versions"
        );
        assert!(
            may(function(&t, HOOK), "lambda:ListTags", &format!("\"{arn}\"")),
            "the hook may read {name}'s tags"
        );
    }
    for (actions, _) in statements(function(&t, HOOK)) {
        for a in actions {
            assert!(
                [
                    "logs:CreateLogStream",
                    "logs:PutLogEvents",
                    "codedeploy:GetDeployment",
                    "codedeploy:GetApplicationRevision",
                    "codedeploy:PutLifecycleEventHookExecutionStatus",
                    "lambda:InvokeFunction",
                    "lambda:ListTags",
                ]
                .contains(&a.as_str()),
                "the hook may {a}"
            );
        }
    }
    // Callers name the alias (a qualified ARN), and may invoke only it.
    for (caller, var, callee) in [
        (
            "VerdictsFunction",
            "UMPIRE_CHECKER_FUNCTION",
            "CheckerFunction",
        ),
        (
            "WorkerFunction",
            "UMPIRE_CHECKER_FUNCTION",
            "PassTwoCheckerFunction",
        ),
        (
            "McpFunction",
            "UMPIRE_VERDICTS_FUNCTION",
            "VerdictsFunction",
        ),
        (
            "McpFunction",
            "UMPIRE_REPUTATION_FUNCTION",
            "ReputationFunction",
        ),
    ] {
        let target = function(&t, caller)["environment"][var]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            target.ends_with(&format!("function:{callee}:live")),
            "{caller}: {var}={target}"
        );
        assert!(
            may(function(&t, caller), "lambda:InvokeFunction", &target),
            "{caller} may invoke {target}"
        );
        assert!(
            !may(
                function(&t, caller),
                "lambda:InvokeFunction",
                &format!("\"{}\"", target.trim_end_matches(":live"))
            ),
            "{caller}: the unqualified function is not granted"
        );
    }
    let api = of_type("AWS::ApiGatewayV2::Api");
    let body = api[0].1["Properties"]["Body"].to_string();
    for (name, f) in deployed(&t) {
        if f["http"].as_array().is_some_and(|h| !h.is_empty()) {
            assert!(
                body.contains(&format!("${{{name}Aliaslive}}")),
                "{name}: API Gateway calls the alias"
            );
        }
    }
    for (_, m) in of_type("AWS::Lambda::EventSourceMapping") {
        let target = m["Properties"]["FunctionName"]["Ref"]
            .as_str()
            .unwrap_or("");
        assert!(
            target.ends_with("Aliaslive"),
            "the SQS trigger calls the alias: {target}"
        );
    }
}
