//! Checks `runtime` documents: the runner, the apply, fetch and getInfo
//! jobs, the retry policy and the parameters services fill in. The constants a runtime's
//! templates use are checked later, once per release channel that uses the
//! runtime, because only services say which channels those are.

use jiff::SignedDuration;

use super::field_path::FieldPath;
use super::job::{ConstantUse, JobInput};
use super::parameters::SecretParams;
use super::{Checker, DEFAULT_FETCH_TIMEOUT};
use crate::config::ParsedDocument;
use crate::config::schema::{
    FetchDoc, FetchModeDoc, GetInfoDoc, RetryPolicyDoc, RunnerDoc, RuntimeDoc, TaskConfigDoc,
};
use crate::model::{
    FetchTemplate, GetInfoTemplate, JobTemplate, ParamDecl, ReleaseChannel, Runtime,
};
use vergence_model::{
    ConfigError, FetchMode, LambdaRunnerSpec, RetryPolicy, RunnerKind, RunnerSpec, RunnerUser,
    RuntimeName, Source,
};

const DEFAULT_APPLY_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);
const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(10);
const DEFAULT_STEADY_STATE_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);
const DEFAULT_GET_INFO_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);
pub(super) const DEFAULT_GRACE_PERIOD: SignedDuration = SignedDuration::from_mins(10);

/// Where a runtime's templates use constants, checked per release channel
/// once services say which channels use the runtime.
pub(super) struct RuntimeSource<'a> {
    source: &'a Source,
    constant_uses: Vec<ConstantUse>,
}

/// What the jobs of one runtime share: where they are written, the runner
/// and directory they run in, and the parameters their templates may use.
struct RuntimeJobs<'r> {
    root: &'r FieldPath,
    runner: RunnerKind,
    dir: &'r str,
    params: &'r [ParamDecl],
    owner: String,
}

impl<'a> RuntimeSource<'a> {
    pub(super) fn new(source: &'a Source, constant_uses: Vec<ConstantUse>) -> Self {
        Self {
            source,
            constant_uses,
        }
    }
}

impl RuntimeJobs<'_> {
    /// The input for the job written under `key` (`apply`, `fetch`, `getInfo`).
    fn input<'i>(
        &'i self,
        key: &'i str,
        task: &'i TaskConfigDoc,
        timeout: SignedDuration,
        outputs: &'i [String],
    ) -> JobInput<'i> {
        JobInput {
            path: self.root.key(key),
            name: key,
            task,
            runner: self.runner,
            dir: self.dir,
            timeout,
            outputs,
            params: self.params,
            owner: &self.owner,
        }
    }
}

impl<'a> Checker<'a> {
    /// Checks a `runtime` document; `None` when it has errors, all of them
    /// reported.
    pub(super) fn runtime(
        &mut self,
        document: &'a ParsedDocument,
        doc: &RuntimeDoc,
    ) -> Option<Runtime> {
        if let Some(kubernetes) = &doc.kubernetes {
            return self.kubernetes_runtime(document, doc, kubernetes);
        }
        if let Some(terraform) = &doc.terraform {
            return self.terraform_runtime(document, doc, terraform);
        }
        if let Some(ecs) = &doc.ecs {
            return self.ecs_runtime(document, doc, ecs);
        }
        if let Some(cloud_run) = &doc.cloud_run {
            return self.cloud_run_runtime(document, doc, cloud_run);
        }
        let source = &document.source;
        let root = FieldPath::root("runtime");
        let by = RunnerUser::Runtime(doc.name.clone());
        let runner = self.runner(source, &root, doc.runner.as_ref(), by);
        let params = self.params(source, &root, &doc.parameters, SecretParams::Allowed);
        let Some(apply_doc) = &doc.apply else {
            self.err(
                source,
                &root,
                "a custom runtime needs 'apply': the command that makes the runtime match the desired version",
            );
            return None;
        };
        let jobs = RuntimeJobs {
            root: &root,
            runner: doc
                .runner
                .as_ref()
                .map_or(RunnerKind::Local, RunnerDoc::kind),
            dir: &document.dir,
            params: &params,
            owner: format!("runtime {}", doc.name),
        };
        let mut constant_uses = Vec::new();
        // A Lambda invocation runs at most 15 minutes: that is its default.
        let default_apply_timeout = if jobs.runner == RunnerKind::Lambda {
            LambdaRunnerSpec::MAX_TIMEOUT
        } else {
            DEFAULT_APPLY_TIMEOUT
        };
        let apply_timeout = apply_doc.timeout.map_or(default_apply_timeout, |d| d.0);
        let apply_input = jobs.input("apply", &apply_doc.task_config, apply_timeout, &[]);
        let apply_job = self.job(source, apply_input, &mut constant_uses);
        let retry_path = root.key("apply").key("retryPolicy");
        let retry_policy = self.retry_policy(source, &retry_path, apply_doc.retry_policy.as_ref());
        let fetch = doc.fetch.as_ref();
        let fetch = fetch.map(|f| self.fetch(source, &jobs, f, &mut constant_uses));
        let get_info = doc.get_info.as_ref();
        let get_info = get_info.map(|g| self.get_info(source, &jobs, g, &mut constant_uses));
        let runtime_source = RuntimeSource {
            source,
            constant_uses,
        };
        self.runtime_sources
            .insert(doc.name.clone(), runtime_source);
        // A fetch or getInfo that is written but invalid makes the runtime invalid.
        let (apply, fetch, get_info) = match (apply_job, fetch, get_info) {
            (None, _, _) | (_, Some(None), _) | (_, _, Some(None)) => return None,
            (Some(apply), fetch, get_info) => (apply, fetch.flatten(), get_info.flatten()),
        };
        Some(Runtime {
            name: doc.name.clone(),
            runner: runner?,
            params,
            apply,
            retryable_exit_codes: apply_doc.retryable_exit_codes.clone(),
            retry_policy,
            fetch,
            get_info,
            convergence_grace_period: doc
                .convergence_grace_period
                .map_or(DEFAULT_GRACE_PERIOD, |d| d.0),
            require_approval_before_apply: doc.require_approval_before_apply.unwrap_or(false),
            kubernetes: None,
            ecs: None,
            cloud_run: None,
        })
    }

    /// A first-class runtime whose jobs are Vergence's own (no command of
    /// the user's): `job` on `runner` applies, and reads back as a
    /// structured fetch at the given intervals. The caller sets its
    /// platform's own settings.
    pub(super) fn builtin_runtime(
        doc: &RuntimeDoc,
        runner: RunnerSpec,
        job: JobTemplate,
        poll_interval: SignedDuration,
        steady_state_poll_interval: SignedDuration,
    ) -> Runtime {
        Runtime {
            name: doc.name.clone(),
            runner,
            params: Vec::new(),
            apply: job.clone(),
            retryable_exit_codes: Vec::new(),
            retry_policy: RetryPolicy::default(),
            fetch: Some(FetchTemplate {
                job,
                mode: FetchMode::Structured,
                poll_interval,
                steady_state_poll_interval,
            }),
            get_info: None,
            convergence_grace_period: doc
                .convergence_grace_period
                .map_or(DEFAULT_GRACE_PERIOD, |d| d.0),
            require_approval_before_apply: doc.require_approval_before_apply.unwrap_or(false),
            kubernetes: None,
            ecs: None,
            cloud_run: None,
        }
    }

    /// Reports the keys of `doc` a first-class runtime (`a {what}`, which
    /// `does` its work itself) has no use for: every key but those in
    /// `used`, and the other first-class blocks.
    pub(super) fn keys_without_effect(
        &mut self,
        source: &Source,
        doc: &RuntimeDoc,
        what: &str,
        does: &str,
        used: &[&str],
    ) {
        let root = FieldPath::root("runtime");
        let set = [
            ("apply", doc.apply.is_some()),
            ("fetch", doc.fetch.is_some()),
            ("getInfo", doc.get_info.is_some()),
            ("runner", doc.runner.is_some()),
            ("parameters", !doc.parameters.is_empty()),
            ("kubernetes", doc.kubernetes.is_some()),
            ("ecs", doc.ecs.is_some()),
            ("cloudRun", doc.cloud_run.is_some()),
            ("terraform", doc.terraform.is_some()),
        ];
        let own = what.rsplit(' ').next().unwrap_or(what);
        for (key, _) in set
            .iter()
            .filter(|(key, is_set)| *is_set && *key != own && !used.contains(key))
        {
            self.err(
                source,
                &root.key(key),
                format!(
                    "{what} runtime {does}; '{key}' has no effect here (remove it, or write a custom runtime to run your own commands)"
                ),
            );
        }
    }

    /// The fetch job; its outputs are files handed to apply, so they must be
    /// plain names inside the job's directory.
    fn fetch(
        &mut self,
        source: &'a Source,
        jobs: &RuntimeJobs<'_>,
        fetch: &FetchDoc,
        constant_uses: &mut Vec<ConstantUse>,
    ) -> Option<FetchTemplate> {
        for (i, output) in fetch.outputs.iter().enumerate() {
            if output.is_empty() || output.contains(['/', '\\']) || output.starts_with('.') {
                self.err(
                    source,
                    &jobs.root.key("fetch").key("outputs").index(i),
                    format!("output {output:?} must be a plain file name"),
                );
            }
        }
        let timeout = fetch.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |d| d.0);
        let input = jobs.input("fetch", &fetch.task_config, timeout, &fetch.outputs);
        let job = self.job(source, input, constant_uses)?;
        Some(FetchTemplate {
            job,
            mode: match fetch.mode {
                None | Some(FetchModeDoc::ExitCode) => FetchMode::ExitCode,
                Some(FetchModeDoc::Structured) => FetchMode::Structured,
            },
            poll_interval: fetch.poll_interval.map_or(DEFAULT_POLL_INTERVAL, |d| d.0),
            steady_state_poll_interval: fetch
                .steady_state_poll_interval
                .map_or(DEFAULT_STEADY_STATE_POLL_INTERVAL, |d| d.0),
        })
    }

    /// The getInfo job, whose output is shown in status.
    fn get_info(
        &mut self,
        source: &'a Source,
        jobs: &RuntimeJobs<'_>,
        info: &GetInfoDoc,
        constant_uses: &mut Vec<ConstantUse>,
    ) -> Option<GetInfoTemplate> {
        let timeout = info.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |d| d.0);
        let input = jobs.input("getInfo", &info.task_config, timeout, &[]);
        let job = self.job(source, input, constant_uses)?;
        Some(GetInfoTemplate {
            job,
            poll_interval: info
                .poll_interval
                .map_or(DEFAULT_GET_INFO_POLL_INTERVAL, |d| d.0),
        })
    }

    /// How a failed apply is retried; the defaults where nothing is set.
    /// The retry policy written at `path` (default when absent).
    pub(super) fn retry_policy(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: Option<&RetryPolicyDoc>,
    ) -> RetryPolicy {
        let default = RetryPolicy::default();
        let Some(doc) = doc else { return default };
        let policy = RetryPolicy {
            base_interval: doc.base_interval.map_or(default.base_interval, |d| d.0),
            max_interval: doc.max_interval.map_or(default.max_interval, |d| d.0),
            max_attempts: doc.max_attempts.unwrap_or(default.max_attempts),
        };
        if policy.max_attempts == 0 {
            self.err(
                source,
                &path.key("maxAttempts"),
                "maxAttempts must be at least 1",
            );
        }
        if policy.base_interval > policy.max_interval {
            self.err(
                source,
                &path.key("baseInterval"),
                format!(
                    "baseInterval ({:#}) is longer than maxInterval ({:#})",
                    policy.base_interval, policy.max_interval
                ),
            );
        }
        policy
    }

    /// Reports the constants a runtime's templates use that `channel` lacks.
    pub(super) fn runtime_constants(&mut self, runtime: &RuntimeName, channel: &ReleaseChannel) {
        let Some(uses) = self.runtime_sources.get(runtime) else {
            return;
        };
        let missing: Vec<ConfigError> = uses
            .constant_uses
            .iter()
            .filter(|constant| !channel.constants.contains_key(&constant.name))
            .map(|ConstantUse { path, name }| {
                uses.source.error(
                    path,
                    format!("constant '{name}' is not defined in release channel '{}' (which uses runtime {runtime})", channel.name),
                )
            })
            .collect();
        self.errors.extend(missing);
    }
}
