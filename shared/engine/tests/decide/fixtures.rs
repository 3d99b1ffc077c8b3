//! The instances `decide()` is measured and counted on: shared by the
//! benchmark (`benches/decide.rs`) and the allocation test, so the counted
//! decision is the measured one.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use vergence_engine::{Decision, Facts, decide};
use vergence_model::{
    ApplySpec, CompiledInstance, Desired, DriftPolicy, FetchMode, FetchSpec, InstanceControls,
    InstanceIds, InstanceKey, InstanceRecord, InstanceState, JobOutcome, JobResult, JobSpec,
    JobState, RetryPolicy, RunnerSpec, TimeWindows,
};

pub const NOW: i64 = 1_800_000_000;

fn parse<T: FromStr<Err: std::fmt::Debug>>(text: &str) -> T {
    match text.parse() {
        Ok(value) => value,
        Err(e) => panic!("{text:?} does not parse: {e:?}"),
    }
}

fn job(cmd: &str) -> Arc<JobSpec> {
    Arc::new(JobSpec {
        runner: RunnerSpec::Local,
        image: None,
        cmd: vec![cmd.to_owned()],
        env: BTreeMap::from([("REGION".to_owned(), "eu-west-1".to_owned())]),
        secret_env: BTreeMap::new(),
        working_dir: "deploy".to_owned(),
        timeout: SignedDuration::from_mins(5),
        outputs: Vec::new(),
        builtin: None,
    })
}

/// Service `web` of `shop` in `prod`, at a released version.
pub fn compiled(fetch: Option<FetchMode>) -> CompiledInstance {
    let key = InstanceKey::new(parse("shop"), parse("web"), parse("prod"));
    CompiledInstance {
        ids: InstanceIds::of(&key),
        key,
        version: parse("v1.4.2"),
        runtime: parse("web-runtime"),
        workspace_root: None,
        apply: ApplySpec {
            job: job("./apply"),
            retryable_exit_codes: vec![75],
            retry_policy: RetryPolicy::default(),
        },
        fetch: fetch.map(|mode| FetchSpec {
            job: job("./fetch"),
            mode,
            poll_interval: SignedDuration::from_secs(30),
            steady_state_poll_interval: SignedDuration::from_mins(5),
        }),
        get_info: None,
        convergence_grace_period: SignedDuration::from_mins(10),
        require_approval_before_apply: false,
        preconditions: Vec::new(),
        downstream: Vec::new(),
        drift_policy: DriftPolicy::Remediate,
        protections: Vec::new(),
        auto_rollback: true,
        windows: TimeWindows::default(),
        rollout: None,
    }
}

/// An instance the engine has never looked at.
pub fn fresh(spec: CompiledInstance, now: Timestamp) -> InstanceRecord {
    InstanceRecord {
        key: spec.key.clone(),
        revision: 1,
        config_hash: "config".to_owned(),
        desired: Desired::Ready(Box::new(spec)),
        state: InstanceState::new_pending("new"),
        next_check_at: Some(now),
        controls: InstanceControls::default(),
        updated_at: now,
        watchdog_at: None,
        quiet_checks: 0,
    }
}

/// `record` after storing `decision`, as the engine's step does.
fn stored(mut record: InstanceRecord, decision: Decision) -> InstanceRecord {
    record.state = decision.state;
    record.next_check_at = decision.next_check_at;
    record.revision += 1;
    record
}

/// An apply-only instance converged on its desired version: its apply ran
/// and succeeded, and nothing has happened since.
pub fn converged(now: Timestamp) -> InstanceRecord {
    let record = fresh(compiled(None), now);
    let started = decide(&record, &Facts::at(now));
    let Some(mut apply) = started.jobs.first().cloned() else {
        panic!("a fresh instance starts its apply: {started:?}");
    };
    let record = stored(record, started);
    apply.state = JobState::Finished {
        result: JobResult {
            exit_code: Some(0),
            ..JobResult::without_output(JobOutcome::Exited, now)
        },
    };
    let facts = Facts {
        finished_job: Some(apply),
        ..Facts::at(now)
    };
    let finished = decide(&record, &facts);
    let record = stored(record, finished);
    let settled = decide(&record, &Facts::at(now));
    let record = stored(record, settled);
    assert!(
        decide(&record, &Facts::at(now)).is_noop(&record),
        "the instance has converged: {:?}",
        record.state
    );
    record
}

/// The moment every fixture is decided at.
pub fn now() -> Timestamp {
    Timestamp::from_second(NOW).unwrap_or(Timestamp::UNIX_EPOCH)
}
