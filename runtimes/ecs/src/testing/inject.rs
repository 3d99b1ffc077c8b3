//! Fault injection at the wire: an SDK interceptor on the runner's ECS
//! client that rewrites moto's HTTP responses before the client parses
//! them, for what moto cannot do (a task that exits non-zero, an image that
//! cannot be pulled, ECS refusing or deduplicating a RunTask, a task ECS no
//! longer knows, a service deployment that completes or fails). The real
//! client deserialises the rewritten body.
//!
//! The response body is still streaming when the interceptor runs, and
//! interceptors are synchronous, so it is read with `block_in_place`:
//! tests that inject run on the multi-threaded runtime.

use std::sync::{Arc, Mutex};

use aws_sdk_ecs::config::interceptors::BeforeDeserializationInterceptorContextMut;
use aws_sdk_ecs::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_ecs::error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::byte_stream::ByteStream;
use serde_json::{Value, json};

/// How the `job` container of a stopped task ended, as ECS would say.
#[derive(Clone, Debug, Default)]
pub struct StoppedAs {
    pub exit_code: Option<i32>,
    pub stop_code: Option<String>,
    pub stopped_reason: Option<String>,
    pub container_reason: Option<String>,
}

impl StoppedAs {
    /// The container exited with `code`, as ECS reports a finished job.
    pub fn exited(code: i32) -> Self {
        Self {
            exit_code: Some(code),
            stop_code: Some("EssentialContainerExited".into()),
            stopped_reason: Some("Essential container in task exited".into()),
            container_reason: None,
        }
    }
}

#[derive(Clone, Debug)]
enum Rewrite {
    /// DescribeTasks: once the task of `job` is STOPPED, it ended so.
    Stopped { job: String, as_: StoppedAs },
    /// RunTask: a ConflictException for the client token, naming `task`.
    RunTaskConflict { task: String },
    /// RunTask: ECS answers with `failures[]` and no task.
    RunTaskFailure { reason: String },
    /// StopTask: the task is not found.
    StopTaskNotFound,
    /// `operation` is answered with `status` and `body` as they are (a
    /// proxy's error page, no AWS error in it).
    Raw {
        operation: String,
        status: u16,
        body: String,
    },
    /// DescribeServices: the deployments of `service` for
    /// `task_definition` (any, when `None`) have rollout state `state`.
    Rollout {
        service: String,
        task_definition: Option<String>,
        state: &'static str,
    },
    /// DescribeTaskDefinition: the task's `cpu` and `memory` in units, as
    /// ECS keeps them whatever was registered (`0.25 vCPU` is `256`).
    TaskSizeInUnits,
    /// DescribeServices: `service` deploys with ECS's own `strategy`
    /// (its deploymentConfiguration as ECS returns it) and its current
    /// service deployment is `deployment`, which DescribeServiceDeployments
    /// answers (moto knows neither).
    ServiceDeployment {
        service: String,
        configuration: Value,
        deployment: Value,
    },
}

/// A deployment's rollout state, as ECS reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rollout {
    InProgress,
    Completed,
    Failed,
}

impl Rollout {
    fn as_str(self) -> &'static str {
        match self {
            Rollout::InProgress => "IN_PROGRESS",
            Rollout::Completed => "COMPLETED",
            Rollout::Failed => "FAILED",
        }
    }
}

/// The interceptor; clones share their rewrites.
#[derive(Clone, Debug, Default)]
pub struct Injector {
    rewrites: Arc<Mutex<Vec<Rewrite>>>,
    /// The operations answered, in order: what tests count calls by.
    calls: Arc<Mutex<Vec<String>>>,
}

impl Injector {
    pub fn stopped(&self, job: &str, as_: StoppedAs) {
        self.push(Rewrite::Stopped {
            job: job.to_owned(),
            as_,
        });
    }

    pub fn run_task_conflict(&self, task: &str) {
        self.push(Rewrite::RunTaskConflict {
            task: task.to_owned(),
        });
    }

    pub fn run_task_failure(&self, reason: &str) {
        self.push(Rewrite::RunTaskFailure {
            reason: reason.to_owned(),
        });
    }

    /// From now on, DescribeServices shows `service` as ECS would after
    /// each UpdateService: one PRIMARY deployment of the service's task
    /// definition (moto keeps its first deployment forever and reports it
    /// IN_PROGRESS), rolled out as `state` says. Rules for one task
    /// definition (`Some(arn)`) win over a rule for any, whatever the order.
    pub fn rollout(&self, service: &str, task_definition: Option<&str>, state: Rollout) {
        self.push(Rewrite::Rollout {
            service: service.to_owned(),
            task_definition: task_definition.map(str::to_owned),
            state: state.as_str(),
        });
    }

    /// From now on, `service` deploys with ECS's own strategy: its
    /// `deploymentConfiguration` is `configuration`, and its current
    /// service deployment, as DescribeServiceDeployments describes it, is
    /// `deployment` (its ARN is made up here).
    pub fn service_deployment(&self, service: &str, configuration: Value, mut deployment: Value) {
        deployment["serviceDeploymentArn"] = json!(Self::service_deployment_arn(service));
        self.push(Rewrite::ServiceDeployment {
            service: service.to_owned(),
            configuration,
            deployment,
        });
    }

    fn service_deployment_arn(service: &str) -> String {
        format!("arn:aws:ecs:us-east-1:123456789012:service-deployment/vergence/{service}/injected")
    }

    pub fn stop_task_not_found(&self) {
        self.push(Rewrite::StopTaskNotFound);
    }

    /// How many `operation` calls (`UpdateService`) were answered.
    pub fn calls(&self, operation: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|o| *o == operation)
            .count()
    }

    /// From now on, task definitions are described with their size in
    /// units, as ECS describes them (moto keeps what was registered).
    pub fn task_size_in_units(&self) {
        self.push(Rewrite::TaskSizeInUnits);
    }

    /// From now on, `operation` (`RunTask`) is answered with `status` and
    /// `body` as they are: what a proxy or load balancer in front of ECS
    /// answers, with no AWS error in it.
    pub fn raw(&self, operation: &str, status: u16, body: &str) {
        self.push(Rewrite::Raw {
            operation: operation.to_owned(),
            status,
            body: body.to_owned(),
        });
    }

    fn push(&self, rewrite: Rewrite) {
        self.rewrites.lock().unwrap().push(rewrite);
    }

    fn rewrites(&self) -> Vec<Rewrite> {
        self.rewrites.lock().unwrap().clone()
    }
}

impl Intercept for Injector {
    fn name(&self) -> &'static str {
        "ecs-wire-injector"
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // The request is gone by now (sent); the operation's name stays.
        let operation = cfg
            .load::<Metadata>()
            .map(|m| m.name().to_owned())
            .unwrap_or_default();
        self.calls.lock().unwrap().push(operation.clone());
        let rewrites = self.rewrites();
        let relevant = rewrites.iter().any(|r| applies(r, &operation));
        if !relevant {
            return Ok(());
        }
        let response = context.response_mut();
        let raw = rewrites.iter().find_map(|r| match r {
            Rewrite::Raw {
                operation: of,
                status,
                body,
            } if *of == operation => Some((*status, body.clone())),
            _ => None,
        });
        if let Some((status, body)) = raw {
            *response.status_mut() = status.try_into()?;
            response.headers_mut().remove("content-length");
            response.headers_mut().insert("content-type", "text/html");
            *response.body_mut() = SdkBody::from(body);
            return Ok(());
        }
        let body = response.take_body();
        let bytes = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(ByteStream::new(body).collect())
        })?
        .into_bytes();
        let mut body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        let mut status = response.status().as_u16();
        if operation == "DescribeServices" {
            roll_out(&rewrites, &mut body);
        }
        if operation == "DescribeServiceDeployments" {
            // moto has no such operation: the newest rule answers it.
            if let Some(Rewrite::ServiceDeployment { deployment, .. }) = rewrites
                .iter()
                .rev()
                .find(|r| matches!(r, Rewrite::ServiceDeployment { .. }))
            {
                body = json!({"serviceDeployments": [deployment], "failures": []});
                status = 200;
            }
        }
        for rewrite in rewrites.iter().filter(|r| applies(r, &operation)) {
            status = rewrite_body(rewrite, &mut body).unwrap_or(status);
        }
        let text = body.to_string();
        *response.status_mut() = status.try_into()?;
        response.headers_mut().remove("content-length");
        *response.body_mut() = SdkBody::from(text);
        Ok(())
    }
}

fn applies(rewrite: &Rewrite, operation: &str) -> bool {
    if let Rewrite::Raw { operation: of, .. } = rewrite {
        return of == operation;
    }
    matches!(
        (rewrite, operation),
        (Rewrite::Stopped { .. }, "DescribeTasks")
            | (
                Rewrite::RunTaskConflict { .. } | Rewrite::RunTaskFailure { .. },
                "RunTask"
            )
            | (Rewrite::StopTaskNotFound, "StopTask")
            | (Rewrite::Rollout { .. }, "DescribeServices")
            | (Rewrite::TaskSizeInUnits, "DescribeTaskDefinition")
            | (
                Rewrite::ServiceDeployment { .. },
                "DescribeServices" | "DescribeServiceDeployments"
            )
    )
}

/// Applies one rewrite; returns the HTTP status it sets, if any.
fn rewrite_body(rewrite: &Rewrite, body: &mut Value) -> Option<u16> {
    match rewrite {
        Rewrite::Stopped { job, as_ } => {
            let tasks = body["tasks"].as_array_mut()?;
            for task in tasks.iter_mut().filter(|t| {
                t["startedBy"].as_str() == Some(job) && t["lastStatus"].as_str() == Some("STOPPED")
            }) {
                stop_as(task, as_);
            }
            None
        }
        Rewrite::RunTaskConflict { task } => {
            *body = json!({
                "__type": "ConflictException",
                "message": "The specified client token has already been used in a request with different parameters.",
                "resourceIds": [task],
            });
            Some(400)
        }
        Rewrite::RunTaskFailure { reason } => {
            *body = json!({
                "tasks": [],
                "failures": [{ "arn": "arn:aws:ecs:us-east-1:123456789012:container-instance/none", "reason": reason }],
            });
            Some(200)
        }
        // Answered before the body is read as JSON.
        Rewrite::Raw { .. } => None,
        Rewrite::StopTaskNotFound => {
            *body = json!({
                "__type": "InvalidParameterException",
                "message": "The referenced task was not found.",
            });
            Some(400)
        }
        // All of a response's rollout rules are applied together.
        Rewrite::Rollout { .. } => None,
        Rewrite::ServiceDeployment {
            service,
            configuration,
            ..
        } => {
            for described in body["services"].as_array_mut()? {
                if described["serviceName"].as_str() == Some(service) {
                    described["deploymentConfiguration"] = configuration.clone();
                    described["currentServiceDeployment"] =
                        json!(Injector::service_deployment_arn(service));
                }
            }
            None
        }
        Rewrite::TaskSizeInUnits => {
            let task = body["taskDefinition"].as_object_mut()?;
            for (key, unit) in [("cpu", "vcpu"), ("memory", "gb")] {
                let written = task.get(key)?.as_str()?.trim().to_ascii_lowercase();
                if let Some(amount) = written.strip_suffix(unit) {
                    let amount: f64 = amount.trim().parse().ok()?;
                    task.insert(key.to_owned(), json!(format!("{}", amount * 1024.0)));
                }
            }
            None
        }
    }
}

/// Gives each described service with a rollout rule the PRIMARY deployment
/// ECS would show: of its current task definition, in the state of the
/// most specific rule, with its tasks running once COMPLETED.
fn roll_out(rewrites: &[Rewrite], body: &mut Value) {
    let Some(services) = body["services"].as_array_mut() else {
        return;
    };
    for service in services {
        let name = service["serviceName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let arn = service["taskDefinition"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        // The newest rule for this task definition, else the newest for any.
        let rule = |for_arn: bool| {
            rewrites.iter().rev().find_map(|r| match r {
                Rewrite::Rollout {
                    service,
                    task_definition,
                    state,
                } if *service == name && task_definition.is_some() == for_arn => {
                    (task_definition.as_deref().is_none_or(|t| t == arn)).then_some(*state)
                }
                _ => None,
            })
        };
        let Some(state) = rule(true).or_else(|| rule(false)) else {
            continue;
        };
        let desired = service["desiredCount"].as_i64().unwrap_or(0);
        let running = if state == "COMPLETED" { desired } else { 0 };
        let failed = if state == "FAILED" { desired.max(1) } else { 0 };
        service["runningCount"] = json!(running);
        service["pendingCount"] = json!(desired - running);
        service["deployments"] = json!([{
            "id": format!("ecs-svc/{}", arn.rsplit(':').next().unwrap_or("0")),
            "status": "PRIMARY",
            "taskDefinition": arn,
            "desiredCount": desired,
            "runningCount": running,
            "pendingCount": desired - running,
            "failedTasks": failed,
            "rolloutState": state,
            "rolloutStateReason": format!("ECS deployment {state} (injected by the test)"),
        }]);
    }
}

fn stop_as(task: &mut Value, as_: &StoppedAs) {
    if let Some(code) = &as_.stop_code {
        task["stopCode"] = json!(code);
    }
    if let Some(reason) = &as_.stopped_reason {
        task["stoppedReason"] = json!(reason);
    }
    let Some(containers) = task["containers"].as_array_mut() else {
        return;
    };
    for container in containers
        .iter_mut()
        .filter(|c| c["name"].as_str() == Some("job"))
    {
        let fields = container.as_object_mut().expect("a container object");
        fields.remove("exitCode");
        if let Some(code) = as_.exit_code {
            fields.insert("exitCode".into(), json!(code));
        }
        if let Some(reason) = &as_.container_reason {
            fields.insert("reason".into(), json!(reason));
        }
        fields.insert("lastStatus".into(), json!("STOPPED"));
    }
}
