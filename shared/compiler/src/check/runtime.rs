//! Checks `runtime` documents: the apply, fetch and getInfo jobs, the retry
//! policy and the parameters services fill in. The constants a runtime's
//! templates use are checked later, once per release channel that uses the
//! runtime, because only services say which channels those are.

use jiff::SignedDuration;

use super::field_path::FieldPath;
use super::job::{ConstantUse, JobInput};
use super::{Checker, DEFAULT_FETCH_TIMEOUT};
use crate::config::ParsedDocument;
use crate::config::schema::{FetchModeDoc, RetryPolicyDoc, RuntimeDoc};
use crate::model::{FetchTemplate, GetInfoTemplate, ReleaseChannel, Runtime};
use vergence_model::{ConfigError, FetchMode, RetryPolicy, RuntimeName, Source};

const DEFAULT_APPLY_TIMEOUT: SignedDuration = SignedDuration::from_mins(30);
const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(10);
const DEFAULT_STEADY_STATE_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);
const DEFAULT_GET_INFO_POLL_INTERVAL: SignedDuration = SignedDuration::from_mins(5);
const DEFAULT_GRACE_PERIOD: SignedDuration = SignedDuration::from_mins(10);

/// Where a runtime's templates use constants, checked per release channel
/// once services say which channels use the runtime.
pub(super) struct RuntimeSource<'a> {
    source: &'a Source,
    constant_uses: Vec<ConstantUse>,
}

impl<'a> Checker<'a> {
    pub(super) fn runtime(
        &mut self,
        document: &'a ParsedDocument,
        doc: &RuntimeDoc,
    ) -> Option<Runtime> {
        let source = &document.source;
        let root = FieldPath::root("runtime");
        let first_class = [
            ("ecs", doc.ecs.is_some()),
            ("cloudRun", doc.cloud_run.is_some()),
            ("kubernetes", doc.kubernetes.is_some()),
            ("terraform", doc.terraform.is_some()),
        ];
        for (kind, _) in first_class.iter().filter(|(_, set)| *set) {
            self.err(
                source,
                &root.key(kind),
                format!(
                    "first-class {kind} runtimes are not available in this version of Vergence; \
                     describe the runtime with apply (and optionally fetch) commands instead"
                ),
            );
        }
        let params = self.params(source, &root, &doc.parameters, true);
        let Some(apply) = &doc.apply else {
            if first_class.iter().all(|(_, set)| !set) {
                self.err(
                    source,
                    &root,
                    "a custom runtime needs 'apply': the command that makes the runtime match the desired version",
                );
            }
            return None;
        };
        let owner = format!("runtime {}", doc.name);
        let mut constant_uses = Vec::new();
        let apply_job = self.job(
            source,
            JobInput {
                path: &root.key("apply"),
                task: &apply.task_config,
                runner: doc.runner.as_ref(),
                dir: &document.dir,
                timeout: apply.timeout.map_or(DEFAULT_APPLY_TIMEOUT, |d| d.0),
                outputs: &[],
                params: &params,
                owner: &owner,
            },
            &mut constant_uses,
        );
        let retry_policy = self.retry_policy(source, apply.retry_policy.as_ref());
        let fetch = doc.fetch.as_ref().and_then(|fetch| {
            for (i, output) in fetch.outputs.iter().enumerate() {
                if output.is_empty() || output.contains(['/', '\\']) || output.starts_with('.') {
                    self.err(
                        source,
                        &root.key("fetch").key("outputs").index(i),
                        format!("output {output:?} must be a plain file name"),
                    );
                }
            }
            let job = self.job(
                source,
                JobInput {
                    path: &root.key("fetch"),
                    task: &fetch.task_config,
                    runner: doc.runner.as_ref(),
                    dir: &document.dir,
                    timeout: fetch.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |d| d.0),
                    outputs: &fetch.outputs,
                    params: &params,
                    owner: &owner,
                },
                &mut constant_uses,
            )?;
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
        });
        let get_info = doc.get_info.as_ref().and_then(|info| {
            let job = self.job(
                source,
                JobInput {
                    path: &root.key("getInfo"),
                    task: &info.task_config,
                    runner: doc.runner.as_ref(),
                    dir: &document.dir,
                    timeout: info.timeout.map_or(DEFAULT_FETCH_TIMEOUT, |d| d.0),
                    outputs: &[],
                    params: &params,
                    owner: &owner,
                },
                &mut constant_uses,
            )?;
            Some(GetInfoTemplate {
                job,
                poll_interval: info
                    .poll_interval
                    .map_or(DEFAULT_GET_INFO_POLL_INTERVAL, |d| d.0),
            })
        });
        self.runtime_sources.insert(
            doc.name.clone(),
            RuntimeSource {
                source,
                constant_uses,
            },
        );
        Some(Runtime {
            name: doc.name.clone(),
            params,
            apply: apply_job?,
            retryable_exit_codes: apply.retryable_exit_codes.clone(),
            retry_policy,
            fetch: if doc.fetch.is_some() {
                Some(fetch?)
            } else {
                None
            },
            get_info: if doc.get_info.is_some() {
                Some(get_info?)
            } else {
                None
            },
            convergence_grace_period: doc
                .convergence_grace_period
                .map_or(DEFAULT_GRACE_PERIOD, |d| d.0),
            require_approval_before_apply: doc.require_approval_before_apply.unwrap_or(false),
        })
    }

    fn retry_policy(&mut self, source: &Source, doc: Option<&RetryPolicyDoc>) -> RetryPolicy {
        let default = RetryPolicy::default();
        let Some(doc) = doc else { return default };
        let policy = RetryPolicy {
            base_interval: doc.base_interval.map_or(default.base_interval, |d| d.0),
            max_interval: doc.max_interval.map_or(default.max_interval, |d| d.0),
            max_attempts: doc.max_attempts.unwrap_or(default.max_attempts),
        };
        let path = FieldPath::root("runtime").key("apply").key("retryPolicy");
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
