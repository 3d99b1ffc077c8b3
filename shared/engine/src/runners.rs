//! Routing jobs to runners: a deployment has a runner per kind it supports
//! (local processes, ECS tasks, Cloud Run jobs, Kubernetes Jobs through an
//! agent), and every job goes to the one its [`RunnerSpec`] names.
//!
//! A job whose runner this deployment does not have never starts: the
//! instance waits with a reason that names the runtime's runner and says
//! what would run it, instead of burning its retry attempts.
//!
//! The jobs of first-class runtimes that are API calls made in-process
//! (ECS) go by their builtin platform first: they run no program, so the
//! runner of their kind (which starts containers) is not theirs.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use vergence_model::ports::{Availability, JobProgress, Runner, Started};
use vergence_model::{
    BuiltinPlatform, Error, JobHandle, JobRecord, Result, RunnerKind, RunnerSpec,
};

/// The runners of one deployment, by kind.
#[derive(Clone, Default)]
pub struct RunnerRouter {
    runners: BTreeMap<RunnerKind, Arc<dyn Runner>>,
    /// What carries out the jobs of in-process first-class runtimes.
    builtins: BTreeMap<BuiltinPlatform, Arc<dyn Runner>>,
    /// Kinds this deployment knows it cannot run, and why (a runner whose
    /// credentials are missing): said instead of the generic hint.
    absent: BTreeMap<RunnerKind, String>,
    /// What this deployment is, for reasons ("`vergence up`", "the worker
    /// function").
    deployment: String,
}

impl fmt::Debug for RunnerRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerRouter")
            .field("kinds", &self.kinds())
            .field("builtins", &self.builtins.keys().collect::<Vec<_>>())
            .field("deployment", &self.deployment)
            .finish()
    }
}

impl RunnerRouter {
    /// A router with no runners yet; `deployment` names what is running,
    /// for reasons.
    pub fn new(deployment: impl Into<String>) -> Self {
        Self {
            runners: BTreeMap::new(),
            builtins: BTreeMap::new(),
            absent: BTreeMap::new(),
            deployment: deployment.into(),
        }
    }

    /// Routes jobs of `kind` to `runner`.
    pub fn with(mut self, kind: RunnerKind, runner: Arc<dyn Runner>) -> Self {
        self.runners.insert(kind, runner);
        self
    }

    /// Routes the jobs of `platform`'s first-class runtime to `runner`,
    /// whatever their runner spec.
    pub fn with_builtin(mut self, platform: BuiltinPlatform, runner: Arc<dyn Runner>) -> Self {
        self.builtins.insert(platform, runner);
        self
    }

    /// Jobs of `kind` cannot run here because of `why`.
    pub fn without(mut self, kind: RunnerKind, why: impl Into<String>) -> Self {
        self.runners.remove(&kind);
        self.absent.insert(kind, why.into());
        self
    }

    /// The kinds this deployment can run.
    pub fn kinds(&self) -> Vec<RunnerKind> {
        self.runners.keys().copied().collect()
    }

    /// The runner of a job: its builtin platform's, else its spec's.
    fn runner_of(&self, job: &JobRecord) -> Result<&Arc<dyn Runner>> {
        match job.spec.builtin.as_ref().and_then(|b| b.platform()) {
            Some(platform) => self.builtins.get(&platform).ok_or_else(|| Error::Runner {
                runner: platform.as_str().to_owned(),
                message: format!(
                    "{} cannot carry out {} (it was built without them)",
                    self.deployment,
                    platform.jobs()
                ),
            }),
            None => self.runner(&job.spec.runner),
        }
    }

    fn runner(&self, spec: &RunnerSpec) -> Result<&Arc<dyn Runner>> {
        self.runners.get(&spec.kind()).ok_or_else(|| Error::Runner {
            runner: spec.name().to_owned(),
            message: self.missing(spec.kind()),
        })
    }

    fn missing(&self, kind: RunnerKind) -> String {
        if let Some(why) = self.absent.get(&kind) {
            return format!("{} cannot run {kind} jobs: {why}", self.deployment);
        }
        let hint = match kind {
            RunnerKind::Kubernetes => {
                "Kubernetes jobs run through vergence-agent, which connects to `vergence serve` or the api function"
            }
            RunnerKind::Local => "local jobs run under `vergence up` and `vergence serve`",
            RunnerKind::Ecs | RunnerKind::CloudRun | RunnerKind::Lambda => {
                "this build of Vergence was made without that runner"
            }
        };
        format!(
            "{} has no {kind} runner ({hint}); it runs: {}",
            self.deployment,
            self.kinds()
                .iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

#[async_trait]
impl Runner for RunnerRouter {
    async fn dispatch(&self, job: &JobRecord) -> Result<Option<JobHandle>> {
        self.runner_of(job)?.dispatch(job).await
    }

    async fn start(&self, job: &JobRecord) -> Result<Started> {
        self.runner_of(job)?.start(job).await
    }

    fn runs_inline(&self, job: &JobRecord) -> bool {
        self.runner_of(job)
            .is_ok_and(|runner| runner.runs_inline(job))
    }

    async fn poll(&self, job: &JobRecord) -> Result<JobProgress> {
        self.runner_of(job)?.poll(job).await
    }

    async fn stop(&self, job: &JobRecord, reason: &str) -> Result<()> {
        self.runner_of(job)?.stop(job, reason).await
    }

    async fn availability(&self, spec: &RunnerSpec) -> Availability {
        match self.runners.get(&spec.kind()) {
            Some(runner) => runner.availability(spec).await,
            None => Availability::Unavailable(self.missing(spec.kind())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Refusing;

    #[async_trait]
    impl Runner for Refusing {
        async fn dispatch(&self, _: &JobRecord) -> Result<Option<JobHandle>> {
            Err(Error::Runner {
                runner: "local".into(),
                message: "reached".into(),
            })
        }

        async fn availability(&self, _: &RunnerSpec) -> Availability {
            Availability::Unavailable("agent a last seen 6m ago".into())
        }
    }

    fn ecs() -> RunnerSpec {
        serde_json::from_str(r#"{"kind":"ecs","cluster":"c","subnets":["s"]}"#).unwrap()
    }

    #[tokio::test]
    async fn a_missing_runner_is_unavailable_with_a_reason_naming_it() {
        let router = RunnerRouter::new("`vergence up`").with(RunnerKind::Local, Arc::new(Refusing));
        let Availability::Unavailable(reason) = router.availability(&ecs()).await else {
            panic!("ecs is not routed");
        };
        assert!(
            reason.contains("`vergence up` has no ecs runner"),
            "{reason}"
        );
        assert!(reason.contains("it runs: local"), "{reason}");
    }

    #[tokio::test]
    async fn a_runner_left_out_says_why_in_its_reason_and_its_error() {
        let router = RunnerRouter::new("the worker function")
            .with(RunnerKind::Local, Arc::new(Refusing))
            .without(RunnerKind::Ecs, "no credentials");
        let Availability::Unavailable(reason) = router.availability(&ecs()).await else {
            panic!("ecs is left out");
        };
        assert_eq!(
            reason,
            "the worker function cannot run ecs jobs: no credentials"
        );
        assert_eq!(router.kinds(), [RunnerKind::Local]);
    }

    /// A runner that says who it is when a job reaches it.
    struct Named(&'static str);

    #[async_trait]
    impl Runner for Named {
        async fn dispatch(&self, _: &JobRecord) -> Result<Option<JobHandle>> {
            Err(Error::Runner {
                runner: self.0.into(),
                message: "reached".into(),
            })
        }
    }

    fn job(builtin: Option<vergence_model::BuiltinJob>) -> JobRecord {
        let key = vergence_model::InstanceKey::new(
            "shop".parse().unwrap(),
            "web".parse().unwrap(),
            "prod".parse().unwrap(),
        );
        JobRecord {
            id: vergence_model::JobId("apply-1".into()),
            ids: vergence_model::InstanceIds::of(&key),
            instance: key,
            kind: vergence_model::JobKind::Apply,
            version: "v1".parse().unwrap(),
            attempt: 1,
            spec: vergence_model::JobSpec {
                runner: ecs(),
                builtin,
                ..crate::tests::job_spec("./apply")
            }
            .into(),
            workspace_root: None,
            inputs: Vec::new(),
            created_at: jiff::Timestamp::UNIX_EPOCH,
            deadline: jiff::Timestamp::UNIX_EPOCH,
            state: vergence_model::JobState::Created,
        }
    }

    fn ecs_service() -> vergence_model::BuiltinJob {
        vergence_model::BuiltinJob::EcsApply(vergence_model::EcsService {
            cluster: "c".into(),
            region: None,
            service_name: "web".into(),
            task_definition: "{}".into(),
            settings: "{}".into(),
            service_id: "svc".into(),
            version: "v1".into(),
            task_definition_file: "ecs/task.json".into(),
            service_file: "ecs/service.json".into(),
            adopt: Default::default(),
        })
    }

    async fn reached(router: &RunnerRouter, job: &JobRecord) -> (String, String) {
        match router.dispatch(job).await {
            Err(Error::Runner { runner, message }) => (runner, message),
            other => panic!("a runner error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn jobs_of_in_process_runtimes_go_by_their_platform_before_their_runner() {
        let router = RunnerRouter::new("the worker function")
            .with(RunnerKind::Ecs, Arc::new(Named("ecs tasks")))
            .with_builtin(BuiltinPlatform::Ecs, Arc::new(Named("ecs services")));
        assert_eq!(
            reached(&router, &job(Some(ecs_service()))).await.0,
            "ecs services"
        );
        assert_eq!(reached(&router, &job(None)).await.0, "ecs tasks");
        // Never to the task runner, which would start a container.
        let without = RunnerRouter::new("the worker function")
            .with(RunnerKind::Ecs, Arc::new(Named("ecs tasks")));
        let (runner, message) = reached(&without, &job(Some(ecs_service()))).await;
        assert_eq!(runner, "ecs");
        assert_eq!(
            message,
            "the worker function cannot carry out the jobs of first-class ecs runtimes (it was built without them)"
        );
    }

    #[tokio::test]
    async fn availability_and_dispatch_reach_the_runner_of_the_kind() {
        let router = RunnerRouter::new("test").with(RunnerKind::Local, Arc::new(Refusing));
        assert_eq!(
            router.availability(&RunnerSpec::Local).await,
            Availability::Unavailable("agent a last seen 6m ago".into())
        );
    }
}
