//! The deployed stack, as a user deploys and operates it: template.yaml in
//! an emulated account with IAM enforced ([`account`]), the `api`,
//! `scheduler` and `worker` binaries each behind a Lambda runtime API with
//! only its own role's credentials and the environment the template gives
//! it, API Gateway's HTTP API in front of the api function ([`gateway`]),
//! and the api function's own URL (vergence-agent's front), the worker's
//! SQS event source mapping ([`mapping`]), and the schedule's
//! ticks. The `vergence` CLI reaches it with `--endpoint`, as an operator
//! or a CI job would.

pub mod account;
pub mod gateway;
pub mod mapping;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use vergence_testkit::{WrapperFunction, workspace_binary};

use crate::lambda::{FunctionSpec, LambdaFunction};
pub use account::{Account, Contract, Decision, Function, Grant, Keys, python};
use gateway::{Gateway, Route};
use mapping::EventSourceMapping;

/// The webhook secret the stack is deployed with (the `WebhookSecret`
/// parameter): CI signs its release requests with it.
pub const WEBHOOK_SECRET: &str = "stack-webhook-secret-0123456789";

/// The three functions running over the account; everything stops when
/// dropped.
#[derive(Debug)]
pub struct Stack {
    pub account: Account,
    pub api: Arc<LambdaFunction>,
    pub scheduler: Arc<LambdaFunction>,
    pub worker: Arc<LambdaFunction>,
    pub gateway: Gateway,
    /// The api function's URL (the `AgentUrl` output).
    pub function_url: Gateway,
    pub mapping: EventSourceMapping,
    /// The seeded jobs function (`vergence-wrapper` behind `cargo lambda
    /// watch`), which the account hands authorized invocations to.
    pub jobs_function: WrapperFunction,
    /// Where the jobs function runs its commands.
    pub jobs_dir: tempfile::TempDir,
}

impl Stack {
    /// Deploys template.yaml with `params` (beside the webhook secret) and
    /// starts the functions; `None` when the tools are missing and services
    /// are not required.
    pub async fn deploy(params: &[(&str, &str)]) -> Option<Self> {
        let mut all = vec![format!("WebhookSecret={WEBHOOK_SECRET}")];
        all.extend(params.iter().map(|(k, v)| format!("{k}={v}")));
        let cargo_lambda = vergence_testkit::endpoint(vergence_testkit::CARGO_LAMBDA)?;
        let jobs_dir = tempfile::tempdir().unwrap();
        let jobs_path = jobs_dir.path().to_owned();
        let jobs_function =
            tokio::task::spawn_blocking(move || WrapperFunction::start(&cargo_lambda, &jobs_path))
                .await
                .unwrap();
        let lambda_endpoint = jobs_function.url.clone();
        let account = tokio::task::spawn_blocking(move || Account::deploy(&all, &lambda_endpoint))
            .await
            .unwrap()?;
        let contract = account.contract.clone();
        // As many environments as Lambda would run at once here: the api
        // serves the CLI and an agent's long poll together; the scheduler
        // is reserved to one; the mapping hands the worker one batch at a
        // time.
        let start = |name: &str, environments: usize| {
            let function = contract.function(name);
            LambdaFunction::start(spec(&contract, name, function).concurrency(environments))
        };
        let api = Arc::new(start("api", 4).await);
        let scheduler = Arc::new(start("scheduler", 1).await);
        let worker = Arc::new(start("worker", 1).await);
        let routes = contract
            .function("api")
            .events
            .iter()
            .filter(|e| e["type"] == "HttpApi")
            .map(|e| Route {
                method: e["method"].as_str().unwrap_or("ANY").to_uppercase(),
                path: e["path"].as_str().unwrap_or("/").to_owned(),
            })
            .collect();
        let gateway = Gateway::start(api.clone(), routes, &contract.account).await;
        let api_arn = &contract.function("api").arn;
        let deployed_url = contract
            .resources
            .values()
            .find(|r| r.kind == "AWS::Lambda::Url" && r.target_arn.as_ref() == Some(api_arn))
            .and_then(|r| r.url.clone())
            .expect("the api function's URL");
        let function_url = Gateway::function_url(
            api.clone(),
            &deployed_url,
            Duration::from_secs(contract.function("api").timeout_seconds),
        )
        .await;
        let sqs_event = contract
            .function("worker")
            .events
            .iter()
            .find(|e| e["type"] == "SQS")
            .expect("the worker's SQS event")
            .clone();
        let worker_sqs = aws_sdk_sqs::Client::new(
            &account
                .sdk_config(&contract.function("worker").credentials)
                .await,
        );
        let mapping = EventSourceMapping::start(
            worker_sqs,
            sqs_event["queueUrl"].as_str().unwrap().to_owned(),
            sqs_event["queueArn"].as_str().unwrap().to_owned(),
            i32::try_from(sqs_event["batchSize"].as_i64().unwrap_or(10)).unwrap_or(10),
            worker.clone(),
        );
        Some(Self {
            account,
            api,
            scheduler,
            worker,
            gateway,
            function_url,
            mapping,
            jobs_function,
            jobs_dir,
        })
    }

    pub fn contract(&self) -> &Contract {
        &self.account.contract
    }

    /// One tick of the schedule: EventBridge Scheduler's event to the
    /// scheduler function; its answer.
    pub async fn tick(&self) -> Value {
        let event: Value =
            serde_json::from_slice(&std::fs::read(crate::event_file("schedule.json")).unwrap())
                .unwrap();
        self.scheduler.invoke(&event).await.json()
    }

    /// `vergence ARGS` against the stack's API (`--endpoint`), as an
    /// operator's terminal or a CI job runs it, in `dir`.
    pub fn vergence(&self, dir: &Path, token: &str, args: &[&str]) -> Output {
        self.vergence_at(&self.gateway.url, dir, token, args)
    }

    /// `vergence ARGS` against one of the stack's fronts, `endpoint`.
    pub fn vergence_at(&self, endpoint: &str, dir: &Path, token: &str, args: &[&str]) -> Output {
        Command::new(workspace_binary("vergence"))
            .args(["--endpoint", endpoint])
            .args(args)
            .current_dir(dir)
            .env("VERGENCE_TOKEN", token)
            .env_remove("VERGENCE_ENDPOINT")
            .env_remove("VERGENCE_WEBHOOK_SECRET")
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    }

    /// `vergence token create ARGS` straight into the deployment's table
    /// with the operator's own AWS credentials (the account's admin), as
    /// docs/serverless.md says the first token is made; the token.
    pub fn create_token(&self, args: &[&str]) -> String {
        let contract = self.contract();
        let output = Command::new(workspace_binary("vergence"))
            .args(["token", "create"])
            .args(args)
            .args(["--dynamodb-table", contract.physical("StateTable")])
            .env("AWS_ENDPOINT_URL", &contract.endpoint)
            .env("AWS_ACCESS_KEY_ID", &contract.admin.access_key_id)
            .env("AWS_SECRET_ACCESS_KEY", &contract.admin.secret_access_key)
            .env_remove("AWS_SESSION_TOKEN")
            .env("AWS_REGION", &contract.region)
            .env_remove("VERGENCE_ENDPOINT")
            .output()
            .unwrap();
        assert!(output.status.success(), "vergence token create: {output:?}");
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    /// Per function: the actions it used, those it was refused, and those
    /// its role grants that no request used; printed, and returned.
    pub async fn permissions(&self) -> BTreeMap<String, Permissions> {
        let decisions = self.account.decisions().await;
        let mut report = BTreeMap::new();
        for (name, function) in &self.contract().functions {
            let mine: Vec<&Decision> = decisions
                .iter()
                .filter(|d| d.caller.as_deref() == Some(function.role.name.as_str()))
                .collect();
            let used: BTreeSet<String> = mine
                .iter()
                .filter(|d| d.allowed)
                .map(|d| d.action.clone())
                .collect();
            let denied: Vec<String> = mine
                .iter()
                .filter(|d| !d.allowed)
                .map(|d| format!("{} on {} ({})", d.action, d.resource, d.effect))
                .collect();
            let granted: BTreeSet<(String, String)> = function
                .granted
                .iter()
                .filter(|g| g.effect == "Allow")
                .flat_map(|g| g.actions.iter().map(|a| (grant_name(g), a.clone())))
                .collect();
            let unused = granted
                .iter()
                .filter(|(_, action)| !used.iter().any(|u| action_matches(action, u)))
                .cloned()
                .collect();
            report.insert(
                name.clone(),
                Permissions {
                    used,
                    denied,
                    granted,
                    unused,
                },
            );
        }
        for (name, permissions) in &report {
            println!("== {name}");
            println!("   used:    {}", join(&permissions.used));
            println!("   denied:  {}", permissions.denied.join(", "));
            let unused: BTreeSet<String> = permissions
                .unused
                .iter()
                .map(|(grant, action)| format!("{action} ({grant})"))
                .collect();
            println!("   granted, unused: {}", join(&unused));
        }
        report
    }
}

/// What one function did with its role.
#[derive(Debug, Clone, Default)]
pub struct Permissions {
    pub used: BTreeSet<String>,
    pub denied: Vec<String>,
    /// (grant, action) of every Allow statement of its role; a grant is
    /// the statement's Sid, or the managed policy's name.
    pub granted: BTreeSet<(String, String)>,
    /// The granted (grant, action) pairs that no request used.
    pub unused: BTreeSet<(String, String)>,
}

/// A grant as docs/serverless.md names it: the statement's Sid, else the
/// managed policy's name (the last part of its ARN).
fn grant_name(grant: &Grant) -> String {
    grant.sid.clone().unwrap_or_else(|| {
        grant
            .policy
            .rsplit('/')
            .next()
            .unwrap_or(&grant.policy)
            .to_owned()
    })
}

fn join(set: &BTreeSet<String>) -> String {
    set.iter().cloned().collect::<Vec<_>>().join(", ")
}

/// Whether the granted `pattern` (`dynamodb:Get*`, `logs:*`) covers
/// `action`; IAM compares actions without regard to case, `*` and `?`
/// are wildcards.
pub fn action_matches(pattern: &str, action: &str) -> bool {
    fn glob(pattern: &[u8], text: &[u8]) -> bool {
        match (pattern.first(), text.first()) {
            (None, None) => true,
            (Some(b'*'), _) => {
                glob(&pattern[1..], text) || (!text.is_empty() && glob(pattern, &text[1..]))
            }
            (Some(b'?'), Some(_)) => glob(&pattern[1..], &text[1..]),
            (Some(p), Some(t)) if p == t => glob(&pattern[1..], &text[1..]),
            _ => false,
        }
    }
    glob(
        pattern.to_ascii_lowercase().as_bytes(),
        action.to_ascii_lowercase().as_bytes(),
    )
}

/// How Lambda starts `function`: the template's environment, the role's
/// session credentials, the account's endpoint for every AWS client.
fn spec(contract: &Contract, name: &str, function: &Function) -> FunctionSpec {
    let mut spec = FunctionSpec::new(&function.name, &workspace_binary(name))
        .timeout(Duration::from_secs(function.timeout_seconds));
    spec.memory_mb = function.memory_mb;
    for (key, value) in &function.environment {
        spec = spec.env(key, value);
    }
    let keys = &function.credentials;
    spec = spec
        .env("AWS_ACCESS_KEY_ID", &keys.access_key_id)
        .env("AWS_SECRET_ACCESS_KEY", &keys.secret_access_key)
        .env("AWS_ENDPOINT_URL", &contract.endpoint)
        // The functions' switch for S3 stand-ins: path-style addressing.
        .env("VERGENCE_S3_PATH_STYLE", "true");
    if let Some(token) = &keys.session_token {
        spec = spec.env("AWS_SESSION_TOKEN", token);
    }
    spec
}
