//! The deployed stack, locally, as AWS would run it: the template's tables, queues and
//! key created on the local AWS server from their own definitions
//! (`infra/local/stack_up.py`), the template resolved for them by the SAM transform
//! (`infra/local/stack.py`), IAM enforced between every function and those services
//! (`infra/local/iam_gate.mjs`: each function's credentials carry exactly its role's
//! policies), and, when asked, every function's bootstrap running in its own sandbox
//! behind API Gateway and its SQS trigger (`infra/local/stack_emulator.py`).
//!
//! Needs the local AWS server `make test` starts (`UMPIRE_TEST_AWS_ENDPOINT`), Python
//! with aws-sam-cli and Node.js with the test packages. Every process is stopped on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};

use crate::{TempDir, python, repo_root, request, umpire_bin};

/// The account moto (and so the gate) works in.
pub const ACCOUNT: &str = "123456789012";
pub const REGION: &str = "us-east-1";
/// The principal an account administrator acts as: `sdk_env(OPERATOR)` and
/// `sdk_config(OPERATOR)` carry AdministratorAccess through the gate.
pub const OPERATOR: &str = "Operator";

/// What a test asks of the stack.
#[derive(Default)]
pub struct StackOptions {
    /// Template parameters (`Issuer`, `EvmPayTo`, ...).
    pub params: Vec<(String, String)>,
    /// Secrets the operator creates before deploying, as (parameter, value): each is
    /// made in Secrets Manager and its ARN given as the parameter
    /// (`FacilitatorAuthSecretArn`, ...).
    pub secrets: Vec<(String, String)>,
    /// Variables every function gets on top of the template's (test switches).
    pub env: Vec<(String, String)>,
    /// `FUNCTION:POLICY:N` statements left out (and those `UMPIRE_STACK_DROP_STATEMENTS`
    /// names, comma-separated: infra/local/iam_removal.py).
    pub drop_statements: Vec<String>,
    /// Run every function of the template behind API Gateway and its SQS trigger.
    pub run_functions: bool,
    /// Deploy as an operator does the first time, before `umpire keygen`: no
    /// SigningSeedCiphertext, no SigningPublicKey.
    pub unsealed: bool,
    /// The account's concurrency quota the stack emulator holds every invocation to
    /// (None: a new account's 10).
    pub concurrency: Option<u32>,
}

pub struct LocalStack {
    /// Logical id -> its attributes in this stack (`Ref`, `Arn`), as stack_up.py made them.
    pub names: Json,
    /// The template resolved for this stack (infra/local/stack.py's output).
    pub resolved: Json,
    /// The IAM gate: every function's AWS endpoint.
    pub endpoint: String,
    /// The HTTP API, when the functions run.
    pub api: Option<std::net::SocketAddr>,
    gate: Child,
    emulator: Option<Child>,
    dir: TempDir,
    /// The parameters every deploy of this stack is given (an Issuer among them).
    given: Vec<(String, String)>,
    drop_statements: Vec<String>,
    concurrency: Option<u32>,
}

fn moto_endpoint() -> String {
    std::env::var("UMPIRE_TEST_AWS_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "UMPIRE_TEST_AWS_ENDPOINT is not set: the stack needs the local AWS-compatible \
             server that `make test` starts (infra/local/with-moto.sh)"
        )
    })
}

fn python_json(args: &[&str]) -> Json {
    let out = Command::new(python())
        .args(args)
        .output()
        .expect("python3 with aws-sam-cli and boto3 (make test installs them)");
    assert!(
        out.status.success(),
        "{args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON from the stack scripts")
}

fn wait_for_port(file: &std::path::Path, what: &str, child: &mut Child) -> u16 {
    let started = Instant::now();
    loop {
        if let Ok(p) = std::fs::read_to_string(file)
            && let Ok(p) = p.trim().parse()
        {
            return p;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited before it listened: {status}");
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn post(addr: std::net::SocketAddr, path: &str, body: &Json) {
    let r = request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        Some(body.to_string().as_bytes()),
    );
    assert_eq!(
        r.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&r.body)
    );
}

/// template.yaml as deployed with `params` (plus an Issuer), every resource named after
/// its logical id: what the template checks read (infra/local/stack.py --offline).
pub fn resolve_template(params: &[(&str, &str)]) -> Json {
    let mut args: Vec<String> = vec![
        repo_root()
            .join("infra/local/stack.py")
            .to_string_lossy()
            .into_owned(),
        repo_root()
            .join("template.yaml")
            .to_string_lossy()
            .into_owned(),
        "--offline".into(),
        "--param".into(),
        "Issuer=https://umpire.test".into(),
    ];
    for (k, v) in params {
        args.extend(["--param".into(), format!("{k}={v}")]);
    }
    python_json(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// The seed the stack's functions sign with (sealed under the stack's KMS key).
pub const SEED_HEX: &str = "7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a";

impl LocalStack {
    pub fn start(options: StackOptions) -> LocalStack {
        let dir = TempDir::new("stack");
        let template = repo_root().join("template.yaml");
        let template = template.to_str().expect("utf-8 path");
        // Table and queue names allow 80 characters, letters, digits, - and _.
        let id = umpire_host::random_id("s");
        let prefix = format!("{}-", &id[..id.len().min(14)]);
        let moto = moto_endpoint();
        // Every template parameter the test sets, and an Issuer (it has no default).
        let mut given: Vec<(String, String)> = options.params.clone();
        if !given.iter().any(|(k, _)| k == "Issuer") {
            given.push(("Issuer".into(), "https://umpire.test".into()));
        }
        let mut up: Vec<String> = vec![
            repo_root()
                .join("infra/local/stack_up.py")
                .to_string_lossy()
                .into_owned(),
            template.to_owned(),
            "--endpoint".into(),
            moto.clone(),
            "--prefix".into(),
            prefix.clone(),
            "--seed-hex".into(),
            SEED_HEX.into(),
        ];
        for (k, v) in &given {
            up.extend(["--param".into(), format!("{k}={v}")]);
        }
        for (k, v) in &options.secrets {
            up.extend(["--secret".into(), format!("{k}={v}")]);
        }
        let names = python_json(&up.iter().map(String::as_str).collect::<Vec<_>>());
        for (k, arn) in names["params"].as_object().into_iter().flatten() {
            given.push((k.clone(), arn.as_str().expect("a secret's ARN").to_owned()));
        }
        let names_file = dir.write("names.json", names.to_string().as_bytes());

        // The gate, in front of the local AWS server.
        let gate_port = dir.path().join("gate.port");
        let mut gate = Command::new("node")
            .arg(repo_root().join("infra/local/iam_gate.mjs"))
            .args(["--upstream", &moto, "--port-file"])
            .arg(&gate_port)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .spawn()
            .expect("start infra/local/iam_gate.mjs (node)");
        let port = wait_for_port(&gate_port, "the IAM gate", &mut gate);
        let gate_addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        let endpoint = format!("http://{gate_addr}");

        let mut params: Vec<(String, String)> = Vec::new();
        if !options.unsealed {
            let sealed = &names["sealed"];
            let value = |k: &str| sealed[k].as_str().expect("sealed").to_owned();
            params.push(("SigningSeedCiphertext".into(), value("ciphertext")));
            params.push(("SigningPublicKey".into(), value("public_key")));
        }
        params.extend(given.iter().cloned());
        let mut stack = LocalStack {
            names,
            resolved: Json::Null,
            endpoint,
            api: None,
            gate,
            emulator: None,
            dir,
            given: params,
            drop_statements: options.drop_statements.clone(),
            concurrency: options.concurrency,
        };
        stack.resolve(names_file);
        if options.run_functions {
            stack.run_functions(&options.env);
        }
        stack
    }

    /// Deploys again with `params` on top of the first deploy's (as `sam deploy` with
    /// new parameter values does): the template resolved anew, the roles and key
    /// policies as it now says, the functions restarted with `env`.
    pub fn redeploy(&mut self, params: &[(&str, &str)], env: &[(String, String)]) {
        if let Some(mut old) = self.emulator.take() {
            let _ = Command::new("kill").arg(old.id().to_string()).status();
            let _ = old.wait();
        }
        for (k, v) in params {
            self.given.retain(|(g, _)| g != k);
            self.given.push(((*k).to_owned(), (*v).to_owned()));
        }
        let names_file = self.dir.path().join("names.json");
        self.resolve(names_file);
        self.run_functions(env);
    }

    /// Resolves the template for this stack's parameters and gives the gate every
    /// function's role and every key's policy.
    fn resolve(&mut self, names_file: PathBuf) {
        let template = repo_root().join("template.yaml");
        let mut args: Vec<String> = vec![
            repo_root()
                .join("infra/local/stack.py")
                .to_string_lossy()
                .into_owned(),
            template.to_string_lossy().into_owned(),
            "--names".into(),
            names_file.to_string_lossy().into_owned(),
        ];
        for (k, v) in &self.given {
            args.extend(["--param".into(), format!("{k}={v}")]);
        }
        // infra/local/iam_removal.py leaves statements out through the environment.
        let from_env = std::env::var("UMPIRE_STACK_DROP_STATEMENTS").unwrap_or_default();
        for d in self
            .drop_statements
            .iter()
            .map(String::as_str)
            .chain(from_env.split(',').filter(|s| !s.is_empty()))
        {
            args.extend(["--drop-statement".into(), d.to_owned()]);
        }
        let resolved = python_json(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let gate_addr = self.gate_addr();

        // Every function's role, behind its own access key; every key's policy.
        let functions = resolved["functions"]
            .as_object()
            .expect("functions")
            .clone();
        for (logical, f) in &functions {
            post(
                gate_addr,
                "/__iam/principal",
                &json!({
                    "access_key_id": Self::access_key_of(logical),
                    "name": logical,
                    "role": f["role"],
                    "policies": f["policies"],
                }),
            );
        }
        // The operator: an account administrator (every IAM action allowed), whom the
        // key policy lets manage and seal with the signing key but never decrypt.
        post(
            gate_addr,
            "/__iam/principal",
            &json!({
                "access_key_id": Self::access_key_of(OPERATOR),
                "name": OPERATOR,
                "role": OPERATOR,
                "policies": [{"name": "AdministratorAccess", "document": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}],
                }}],
            }),
        );
        for (arn, policy) in resolved["key_policies"].as_object().expect("key policies") {
            post(
                gate_addr,
                "/__iam/resource-policy",
                &json!({"arn": arn, "policy": policy}),
            );
        }
        self.resolved = resolved;
    }

    fn run_functions(&mut self, extra_env: &[(String, String)]) {
        let bin_dir: PathBuf = umpire_bin()
            .parent()
            .expect("the binaries' directory")
            .to_owned();
        let functions = self.resolved["functions"]
            .as_object()
            .expect("functions")
            .clone();
        let mut spec_functions = serde_json::Map::new();
        let mut routes = Vec::new();
        let mut sqs = Vec::new();
        for (logical, f) in &functions {
            let mut env = f["environment"].as_object().cloned().unwrap_or_default();
            for (k, v) in self.sdk_env(logical) {
                env.insert(k, Json::from(v));
            }
            for (k, v) in extra_env {
                env.insert(k.clone(), Json::from(v.clone()));
            }
            let binary = f["binary"].as_str().expect("a binary per function");
            spec_functions.insert(
                logical.clone(),
                json!({
                    "bootstrap": bin_dir.join(binary),
                    "timeout": f["timeout"],
                    "memory": f["memory"],
                    "env": env,
                }),
            );
            for r in f["http"].as_array().into_iter().flatten() {
                routes.push(json!({"method": r["method"], "path": r["path"], "function": logical}));
            }
            for m in f["sqs"].as_array().into_iter().flatten() {
                let queue = self.queue_url_by_arn(m["queue_arn"].as_str().expect("queue arn"));
                sqs.push(json!({
                    "function": logical,
                    "queue_url": queue,
                    "batch_size": m["batch_size"],
                    "maximum_concurrency": m["maximum_concurrency"],
                    "report_failures": m["report_failures"],
                    "endpoint": self.endpoint,
                    "access_key": Self::access_key_of(logical),
                    "secret_key": "local",
                    "region": REGION,
                }));
            }
        }
        // CodeDeploy's side: the PreTraffic hook every alias names, the deployment
        // application and each function's deployment group (`deploy`).
        let hook = functions
            .iter()
            .find(|(_, f)| f["binary"] == "pretraffic")
            .map(|(logical, _)| logical.clone());
        let groups: serde_json::Map<String, Json> = functions
            .keys()
            .filter_map(|logical| {
                let group = self.names[format!("{logical}DeploymentGroup")]["Ref"].as_str()?;
                Some((logical.clone(), Json::from(group)))
            })
            .collect();
        let spec = json!({
            "functions": spec_functions,
            "routes": routes,
            "sqs": sqs,
            "concurrency": self.concurrency,
            "hook": hook,
            "stack_name": self.names["AWS::StackName"],
            "codedeploy": {
                "application": self.names["ServerlessDeploymentApplication"]["Ref"],
                "groups": groups,
            },
        });
        let spec_file = self.dir.write("stack.json", spec.to_string().as_bytes());
        let port_file = self.dir.path().join("stack.port");
        // A redeploy's emulator writes its own port.
        let _ = std::fs::remove_file(&port_file);
        // The functions' logs (their stderr and stdout, as CloudWatch would keep them)
        // go to a file the tests can read (`logs`).
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("functions.log"))
            .expect("the functions' log file");
        let mut child = Command::new(python())
            .arg(repo_root().join("infra/local/stack_emulator.py"))
            .arg("--stack")
            .arg(&spec_file)
            .arg("--port-file")
            .arg(&port_file)
            .stdin(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start infra/local/stack_emulator.py");
        let port = wait_for_port(&port_file, "the stack emulator", &mut child);
        let api: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        // Functions invoke functions (the checker) through the gate, which sends them on.
        self.route("lambda", &format!("http://{api}"));
        self.route("codedeploy", &format!("http://{api}"));
        self.api = Some(api);
        self.emulator = Some(child);
    }

    fn queue_url_by_arn(&self, arn: &str) -> String {
        self.names
            .as_object()
            .into_iter()
            .flatten()
            .find(|(_, v)| v["Arn"] == arn)
            .and_then(|(_, v)| v["Ref"].as_str())
            .unwrap_or_else(|| panic!("no queue {arn}"))
            .to_owned()
    }

    /// Sends the gate's allowed calls to `service` to `upstream` instead of the local AWS
    /// server (Lambda invocations to a Lambda emulator).
    pub fn route(&self, service: &str, upstream: &str) {
        post(
            self.gate_addr(),
            "/__iam/route",
            &json!({"service": service, "upstream": upstream}),
        );
    }

    fn gate_addr(&self) -> std::net::SocketAddr {
        self.endpoint
            .trim_start_matches("http://")
            .parse()
            .expect("gate address")
    }

    /// The access key whose requests carry `logical`'s role.
    pub fn access_key_of(logical: &str) -> String {
        format!("LOCAL{}", logical.to_uppercase())
    }

    /// The variables an AWS SDK reads to act as `logical` (its role) through the gate.
    pub fn sdk_env(&self, logical: &str) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".into(), self.endpoint.clone()),
            ("AWS_ACCESS_KEY_ID".into(), Self::access_key_of(logical)),
            ("AWS_SECRET_ACCESS_KEY".into(), "local".into()),
            ("AWS_REGION".into(), REGION.into()),
        ]
    }

    /// An AWS SDK configuration acting as `logical` (its role), through the gate.
    pub async fn sdk_config(&self, logical: &str) -> aws_config::SdkConfig {
        self.config_with(&Self::access_key_of(logical), "local")
            .await
    }

    /// The test's own access (its set-up and read-back), straight to the local server.
    pub async fn admin_config(&self) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(moto_endpoint())
            .region(aws_config::Region::new(REGION))
            .credentials_provider(aws_credential_types::Credentials::new(
                "test", "test", None, None, "admin",
            ))
            .load()
            .await
    }

    async fn config_with(&self, key: &str, secret: &str) -> aws_config::SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(&self.endpoint)
            .region(aws_config::Region::new(REGION))
            .credentials_provider(aws_credential_types::Credentials::new(
                key.to_owned(),
                secret.to_owned(),
                None,
                None,
                "stack",
            ))
            .load()
            .await
    }

    /// The stack's tables, as `UMPIRE_*_TABLE` names them.
    pub fn table_names(&self) -> umpire_store::dynamo::TableNames {
        umpire_store::dynamo::TableNames {
            verdicts: self.name("VerdictsTable"),
            idempotency: self.name("IdempotencyTable"),
            payments: self.name("PaymentsTable"),
            rate_limits: self.name("RateLimitsTable"),
            feedback: self.name("FeedbackTable"),
            channels: self.name("ChannelsTable"),
        }
    }

    /// A resource's physical name (or queue URL, or key id).
    pub fn name(&self, logical: &str) -> String {
        self.names[logical]["Ref"]
            .as_str()
            .unwrap_or_else(|| panic!("no {logical} in the stack"))
            .to_owned()
    }

    pub fn arn(&self, logical: &str) -> String {
        self.names[logical]["Arn"]
            .as_str()
            .unwrap_or_else(|| panic!("no {logical} in the stack"))
            .to_owned()
    }

    /// One function as the template resolved it.
    pub fn function(&self, logical: &str) -> &Json {
        &self.resolved["functions"][logical]
    }

    /// Every call the gate decided, in order.
    pub fn calls(&self) -> Vec<Json> {
        let r = request(self.gate_addr(), "GET", "/__iam/calls", &[], None);
        serde_json::from_slice(&r.body).expect("calls")
    }

    /// Calls a policy did not allow.
    /// Everything the functions logged so far (where CloudWatch Logs would keep it).
    pub fn logs(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("functions.log")).unwrap_or_default()
    }

    pub fn denied(&self) -> Vec<Json> {
        self.calls()
            .into_iter()
            .filter(|c| c["allowed"] != true)
            .collect()
    }

    /// Takes `slots` of the account's concurrency, as the account's other functions
    /// would (0 gives them back).
    /// Pauses (or resumes) every SQS trigger: jobs due meanwhile pile up in the queue.
    /// A deployment of a new version of `function`, as CodeDeploy runs it behind the
    /// alias: published with `change` (`{"env": {VAR: value or null}, "bootstrap_of":
    /// another function}`), the PreTraffic hook invoked on it, the alias moved only if
    /// the hook reported Succeeded. Answers `{deployment, version, reported, live,
    /// hook: {status, error, answer}}`.
    pub fn deploy(&self, function: &str, change: Json) -> Json {
        let mut change = change;
        change["function"] = Json::from(function);
        let r = request(
            self.api.expect("the stack's functions run"),
            "POST",
            "/__stack/deploy",
            &[("Content-Type", "application/json")],
            Some(change.to_string().as_bytes()),
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        serde_json::from_slice(&r.body).expect("the deployment's outcome")
    }

    pub fn pause_triggers(&self, paused: bool) {
        let r = request(
            self.api.expect("the functions run"),
            "POST",
            &format!("/__stack/triggers?paused={}", u8::from(paused)),
            &[],
            None,
        );
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    }

    pub fn hold(&self, slots: u32) {
        let path = if slots == 0 {
            "/__stack/release".to_owned()
        } else {
            format!("/__stack/hold?slots={slots}")
        };
        let r = request(
            self.api.expect("the functions run"),
            "POST",
            &path,
            &[],
            None,
        );
        assert_eq!(r.status, 200);
    }

    /// The stack emulator's counters (invocations and kills per function, SQS messages).
    pub fn stats(&self) -> Json {
        let r = request(
            self.api.expect("the functions run"),
            "GET",
            "/__stack/stats",
            &[],
            None,
        );
        serde_json::from_slice(&r.body).expect("stats")
    }
}

impl Drop for LocalStack {
    fn drop(&mut self) {
        for child in [Some(&mut self.gate), self.emulator.as_mut()]
            .into_iter()
            .flatten()
        {
            let _ = Command::new("kill").arg(child.id().to_string()).status();
            let _ = child.wait();
        }
    }
}
