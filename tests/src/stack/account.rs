//! The emulated AWS account (`tests/stack/account.py`): template.yaml
//! expanded by aws-sam-translator and deployed into one moto server with
//! IAM enforced, each function's role assumed. This side starts that
//! process, reads its contract (`stack.json`) and its log of authorization
//! decisions.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;
use vergence_testkit::workspace;

/// The Python that has moto 5.2.5 and aws-sam-translator
/// (`scripts/test.sh` installs them into `.tools/py`).
pub fn python() -> Option<PathBuf> {
    let path = std::env::var_os("VERGENCE_STACK_PYTHON")
        .map_or_else(|| workspace().join(".tools/py/bin/python3"), PathBuf::from);
    if path.is_file() {
        return Some(path);
    }
    assert!(
        std::env::var("VERGENCE_REQUIRE_SERVICES").as_deref() != Ok("1"),
        "{} is missing: run scripts/test.sh, which installs moto and aws-sam-translator there",
        path.display()
    );
    println!(
        "skipped: {} (moto, aws-sam-translator) is not installed",
        path.display()
    );
    None
}

/// What `account.py` writes once the stack is deployed (its docstring
/// has the whole contract; this is the part the tests read).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Contract {
    pub endpoint: String,
    pub region: String,
    pub account: String,
    pub admin: Keys,
    pub functions: BTreeMap<String, Function>,
    pub resources: BTreeMap<String, Resource>,
    #[serde(default)]
    pub outputs: BTreeMap<String, Value>,
    pub seeded: Seeded,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Keys {
    pub access_key_id: String,
    pub secret_access_key: String,
    #[serde(default)]
    pub session_token: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Function {
    pub logical_id: String,
    pub name: String,
    pub arn: String,
    pub timeout_seconds: u64,
    pub memory_mb: u32,
    #[serde(default)]
    pub environment: BTreeMap<String, String>,
    pub role: Role,
    pub credentials: Keys,
    #[serde(default)]
    pub granted: Vec<Grant>,
    #[serde(default)]
    pub events: Vec<Value>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Role {
    pub name: String,
    pub arn: String,
}

/// One statement of one policy of a function's role.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    pub policy: String,
    #[serde(default)]
    pub sid: Option<String>,
    pub effect: String,
    #[serde(default)]
    pub actions: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub conditions: Option<Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    #[serde(rename = "type")]
    pub kind: String,
    pub created_by: String,
    #[serde(default)]
    pub physical_id: Option<String>,
    #[serde(default)]
    pub arn: Option<String>,
    #[serde(default)]
    pub url: Option<String>,
    /// A function URL's function.
    #[serde(default)]
    pub target_arn: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Seeded {
    pub ecs_cluster: NamedArn,
    pub task_role_arn: String,
    pub execution_role_arn: String,
    #[serde(default)]
    pub subnets: Vec<String>,
    #[serde(default)]
    pub security_groups: Vec<String>,
    pub notification_secret: NotificationSecret,
    /// The Lambda function `runner: lambda` jobs run in (the stack's
    /// `LambdaFunctionArns`).
    pub jobs_function: NamedArn,
}

#[derive(Debug, Clone, Deserialize)]
pub struct NamedArn {
    pub name: String,
    pub arn: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NotificationSecret {
    pub value: String,
    pub ssm_parameter_name: String,
    pub ssm_parameter_arn: String,
    pub secret_name: String,
    pub secret_arn: String,
}

/// One authorization decision the account made.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub seq: u64,
    #[serde(default)]
    pub caller: Option<String>,
    pub action: String,
    pub resource: String,
    pub allowed: bool,
    pub effect: String,
    #[serde(default)]
    pub sid: Option<String>,
    #[serde(default)]
    pub policy: Option<String>,
    #[serde(default)]
    pub fallback: bool,
    #[serde(default)]
    pub note: Option<String>,
}

impl Contract {
    pub fn function(&self, name: &str) -> &Function {
        self.functions
            .get(name)
            .unwrap_or_else(|| panic!("the stack has no function {name}"))
    }

    /// A resource's physical id (a table's name, a bucket's, a queue's URL).
    pub fn physical(&self, logical: &str) -> &str {
        self.resources
            .get(logical)
            .and_then(|r| r.physical_id.as_deref())
            .unwrap_or_else(|| panic!("the stack has no {logical}"))
    }
}

/// The account process; stopped when dropped.
#[derive(Debug)]
pub struct Account {
    process: Child,
    pub contract: Contract,
    _dir: tempfile::TempDir,
}

impl Account {
    /// Deploys template.yaml with `params` (`Name=Value`); `None` (the test
    /// skips) without the Python tools, unless services are required.
    pub fn deploy(params: &[String], lambda_endpoint: &str) -> Option<Self> {
        let python = python()?;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("stack.json");
        let mut command = Command::new(python);
        command
            .current_dir(workspace())
            .arg("tests/stack/account.py")
            .arg("--out")
            .arg(&out)
            .args(["--template", "template.yaml"])
            // moto starts no tasks for a service: each reports this many
            // running, so a deployment of up to as many completes.
            .env("MOTO_ECS_SERVICE_RUNNING", "100")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for param in params {
            command.args(["--param", param]);
        }
        command.args(["--lambda-endpoint", lambda_endpoint]);
        let mut process = command.spawn().expect("start tests/stack/account.py");
        let stdout = process.stdout.take().unwrap();
        let started = Instant::now();
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        assert!(
            line.starts_with("ready "),
            "tests/stack/account.py did not get ready (it printed {line:?} after {:?})",
            started.elapsed()
        );
        let contract: Contract =
            serde_json::from_slice(&std::fs::read(&out).unwrap()).expect("the stack contract");
        Some(Self {
            process,
            contract,
            _dir: dir,
        })
    }

    /// Every authorization decision since the account was ready.
    pub async fn decisions(&self) -> Vec<Decision> {
        let url = format!("{}/_stack/decisions", self.contract.endpoint);
        let answer: Value = reqwest::Client::new()
            .get(url)
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        serde_json::from_value(answer["decisions"].clone()).unwrap()
    }

    /// Plays the platform for a job's ECS task that ended: its output in
    /// the awslogs stream, the task stopped, and ECS's task-state-change
    /// event on the default bus, routed by the template's rule.
    pub async fn ecs_task_stopped(&self, task_arn: &str, exit_code: i32, stdout: &[&str]) {
        let url = format!(
            "{}/_stack/platform/ecs-task-stopped",
            self.contract.endpoint
        );
        let answer: Value = reqwest::Client::new()
            .post(url)
            .json(
                &serde_json::json!({"taskArn": task_arn, "exitCode": exit_code, "stdout": stdout}),
            )
            .timeout(Duration::from_secs(30))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer["failedEntryCount"], 0, "{answer}");
    }

    /// An SDK configuration with `keys`, against the account.
    pub async fn sdk_config(&self, keys: &Keys) -> aws_config::SdkConfig {
        let credentials = aws_sdk_dynamodb::config::Credentials::new(
            &keys.access_key_id,
            &keys.secret_access_key,
            keys.session_token.clone(),
            None,
            "stack",
        );
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new(self.contract.region.clone()))
            .endpoint_url(&self.contract.endpoint)
            .credentials_provider(credentials)
            .load()
            .await
    }
}

impl Drop for Account {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}
