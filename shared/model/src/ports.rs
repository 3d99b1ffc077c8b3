//! Ports: the narrow interfaces the core needs from the outside world.
//! Adapters (SQLite, DynamoDB, SQS, local processes, containers) implement
//! them; the core only ever sees these traits, injected as `Arc<dyn …>`.
//!
//! The store is split by what a caller needs, so a function's signature (and
//! the IAM policy of the Lambda running it) shows which rights it uses.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use crate::agent::protocol::{AgentReport, PollRequest, ReportAnswer, Task};
use crate::bundle::ConfigBundle;
use crate::error::Result;
use crate::{
    AgentName, AgentState, AgentWork, AlertState, ApiToken, ApplicationName, Approval,
    ConfigErrors, DeploymentTarget, Desired, Event, EventFilter, InstanceKey, InstanceRecord,
    JobHandle, JobId, JobRecord, JobResult, LocalProgram, ParamValue, QuietCheck, Release,
    ReleaseChannelName, RunnerSpec, RunnerUse, ServiceName, TokenSubject,
};

/// The compiler, as the control operations need it. Implemented by
/// `vergence-compiler` and injected, so the engine never sees YAML.
pub trait Compiler: Send + Sync {
    /// Checks every document of `bundle` against the others. A config with
    /// problems is [`crate::Error::Config`] listing all of them.
    fn compile(&self, bundle: &ConfigBundle) -> Result<Arc<dyn CompiledConfig>>;
}

/// A config that passed every check, ready to give each service instance
/// its desired state.
pub trait CompiledConfig: Send + Sync + fmt::Debug {
    /// Content hash of the bundle it was compiled from.
    fn hash(&self) -> &str;
    fn applications(&self) -> Vec<ApplicationName>;
    fn runtime_count(&self) -> usize;
    /// Every service, with its application, in a stable order.
    fn services(&self) -> Vec<(ApplicationName, ServiceName)>;
    /// Every instance the config defines, in a stable order.
    fn instance_keys(&self) -> Vec<InstanceKey>;
    /// The application's release channels in promotion order.
    fn promotion_order(&self, application: &ApplicationName) -> Vec<ReleaseChannelName>;
    /// The application of a service named without one: the only one that has it.
    fn application_of(&self, service: &ServiceName) -> Result<ApplicationName>;
    /// Types raw `NAME=VALUE` release parameters against the service's
    /// declarations; unknown names and missing required values are errors.
    fn release_params(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        raw: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, ParamValue>>;
    /// Fingerprint of everything the service's jobs run with these release
    /// parameters; a release records it so a later config change shows.
    fn fingerprint(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        params: &BTreeMap<String, ParamValue>,
    ) -> Result<String>;
    /// Every runner the config names, with where: each runtime's and
    /// protection's runner and each release channel's override of a
    /// runtime's runner, in file and line order. A command can warn about
    /// the kinds its deployment has no runner for before any job is due.
    fn runner_uses(&self) -> Vec<RunnerUse>;
    /// What stops jobs of the config from starting on `target`, each at
    /// the field that makes it so, in file and line order: for a
    /// serverless deployment, jobs of the local runner that need an image
    /// or the config directory, which the worker function has neither of.
    /// Empty for a local deployment. A config with such errors is refused
    /// where it would run on `target`, as an invalid one is.
    fn target_errors(&self, target: DeploymentTarget) -> ConfigErrors;
    /// The program of every job of the local runner, as written, in file
    /// and line order.
    fn local_programs(&self) -> Vec<LocalProgram>;
    /// Every file of the bundle with the applications it concerns: their
    /// documents and services, the runtimes and protections they use, the
    /// files their services name. A config is split into per-application
    /// parts by it; a file of several applications or of none is the
    /// platform's.
    fn file_applications(&self) -> BTreeMap<String, std::collections::BTreeSet<ApplicationName>>;
    /// The desired state of every instance of a service, running `release`
    /// (or the config-derived version without one).
    fn compile_service(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        release: Option<&Release>,
    ) -> Result<Vec<(InstanceKey, Desired)>>;
    /// Every application's `notifications:` rules, in the order written.
    fn notifications(&self) -> Vec<crate::notification::NotificationRule>;
    /// Every application's `trust:` entries: which outside OIDC identities
    /// (a CI job's token) may act on it, with what scopes.
    fn trust(&self) -> Vec<crate::trust::TrustRule>;
}

/// An immutable, content-hashed config as it was applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigSnapshot {
    pub hash: String,
    pub bundle: ConfigBundle,
    pub created_at: Timestamp,
    pub actor: String,
}

/// Each application's release channels in promotion order.
pub type ChannelOrder = BTreeMap<ApplicationName, Vec<ReleaseChannelName>>;

/// The pointer to the config in force, with what reads need of that config
/// (the applications and their channel order), so reads never compile it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CurrentConfig {
    pub hash: String,
    /// Incremented by the store on every move; ignored when setting.
    pub revision: u64,
    #[serde(default)]
    pub channels: ChannelOrder,
}

impl CurrentConfig {
    /// The place of a release channel in its application's promotion order.
    pub fn rank(
        &self,
        application: &ApplicationName,
        channel: &ReleaseChannelName,
    ) -> Option<usize> {
        self.channels
            .get(application)?
            .iter()
            .position(|c| c == channel)
    }
}

#[async_trait]
pub trait ConfigStore: Send + Sync {
    /// Stores a snapshot. Idempotent: the same hash is the same content.
    async fn put_snapshot(&self, snapshot: &ConfigSnapshot) -> Result<()>;
    async fn get_snapshot(&self, hash: &str) -> Result<Option<ConfigSnapshot>>;
    async fn current_config(&self) -> Result<Option<CurrentConfig>>;
    /// Points at another snapshot (or stores new read data for the same one).
    /// `expected_revision` is the pointer's revision as read (`None`: there
    /// must be no pointer yet); a mismatch is [`crate::Error::Conflict`].
    /// Returns the new revision.
    async fn set_current_config(
        &self,
        next: &CurrentConfig,
        expected_revision: Option<u64>,
    ) -> Result<u64>;
}

/// Which instances to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstanceFilter {
    pub application: Option<ApplicationName>,
    pub service: Option<ServiceName>,
    pub release_channel: Option<ReleaseChannelName>,
}

impl InstanceFilter {
    pub fn matches(&self, key: &InstanceKey) -> bool {
        self.application
            .as_ref()
            .is_none_or(|a| *a == key.application)
            && self.service.as_ref().is_none_or(|s| *s == key.service)
            && self
                .release_channel
                .as_ref()
                .is_none_or(|rc| *rc == key.release_channel)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum InstanceChange {
    /// Create or replace the record (its `revision` field is ignored).
    Put(Box<InstanceRecord>),
    Delete(InstanceKey),
}

impl InstanceChange {
    pub fn key(&self) -> &InstanceKey {
        match self {
            InstanceChange::Put(record) => &record.key,
            InstanceChange::Delete(key) => key,
        }
    }
}

/// One atomic write: an instance change with the jobs and events it implies.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceCommit {
    pub change: InstanceChange,
    /// The revision read before deciding; `None` means "must not exist".
    pub expected_revision: Option<u64>,
    /// Jobs to record before they are dispatched. A job id that already
    /// exists is a conflict: the same decision was already committed.
    pub new_jobs: Vec<JobRecord>,
    /// Results of jobs that ran inline, recorded with the decision that
    /// takes them up so that taking a result up costs no write of its own.
    /// A job that already has a result is a conflict: someone else recorded
    /// one first (a stop, a duplicate step).
    pub finished_jobs: Vec<(JobId, JobResult)>,
    pub events: Vec<Event>,
}

#[async_trait]
pub trait InstanceStore: Send + Sync {
    async fn get_instance(&self, key: &InstanceKey) -> Result<Option<InstanceRecord>>;
    /// Instances of one service in several channels (a step's instance and
    /// the upstream channels its preconditions look at), in the order of
    /// `keys`. The default reads them one by one; a store that charges by
    /// the request reads them in one.
    async fn get_instances(&self, keys: &[InstanceKey]) -> Result<Vec<Option<InstanceRecord>>> {
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            found.push(self.get_instance(key).await?);
        }
        Ok(found)
    }
    async fn list_instances(&self, filter: &InstanceFilter) -> Result<Vec<InstanceRecord>>;
    /// Instances whose [`InstanceRecord::due_at`] is at or before `now`,
    /// earliest first.
    async fn due_instances(&self, now: Timestamp, limit: usize) -> Result<Vec<InstanceKey>>;
    /// Applies the commit atomically if the instance is still at
    /// `expected_revision`; returns the new revision (0 after a delete).
    async fn commit(&self, commit: InstanceCommit) -> Result<u64>;

    /// Records a check of `record` (as read) that found nothing to do:
    /// the next read of the instance has `check` taken up. `false` when it
    /// was not recorded because the instance changed since it was read, or
    /// another check of the same read was recorded first (a duplicate
    /// message): whoever got there first scheduled what comes next.
    ///
    /// The default stores the whole record; a store where a write costs
    /// by its size keeps the check apart, in a small item that later
    /// commits of the instance supersede.
    async fn record_check(&self, record: &InstanceRecord, check: &QuietCheck) -> Result<bool> {
        let mut next = record.clone();
        next.take_check(check);
        write_unchanged(self, next, record.revision).await
    }
}

/// Writes `next` alone (no jobs, no events) if the instance is still at
/// `expected` revision; `false` when someone else wrote it first.
pub async fn write_unchanged(
    store: &(impl InstanceStore + ?Sized),
    mut next: InstanceRecord,
    expected: u64,
) -> Result<bool> {
    next.quiet_checks = 0;
    let commit = InstanceCommit {
        change: InstanceChange::Put(Box::new(next)),
        expected_revision: Some(expected),
        new_jobs: Vec::new(),
        finished_jobs: Vec::new(),
        events: Vec::new(),
    };
    match store.commit(commit).await {
        Ok(_) => Ok(true),
        Err(crate::Error::Conflict { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Marks an instance someone other than its step changed at `now` (a
/// config, a release, a person): due for a step now, its write time now.
pub fn changed_now(record: &mut InstanceRecord, now: Timestamp) {
    record.next_check_at = Some(now);
    // Due now: the index must find it if the message asking for the
    // step is lost, not a watchdog's time later.
    record.watchdog_at = None;
    record.updated_at = now;
}

/// How often a read-change-write of an instance is tried again when
/// another writer got there first. Conflicting writers are rare (a config
/// push racing a step); a few re-reads settle them.
pub const MAX_CONFLICT_RETRIES: usize = 5;

/// Reads an instance, lets `change` edit it and writes it back on the
/// condition that nobody wrote it meanwhile, reading again after a
/// conflict. The instance is due for a step now, its events get ids
/// unique to this write. `change` answers `None` to leave the record as it
/// is; then, and when there is no such instance, the answer is `None`.
/// Still conflicting after [`MAX_CONFLICT_RETRIES`] reads is
/// [`crate::Error::Conflict`].
pub async fn update_instance(
    store: &(impl InstanceStore + ?Sized),
    clock: &(impl Clock + ?Sized),
    key: &InstanceKey,
    change: impl Fn(&mut InstanceRecord) -> Option<Vec<Event>>,
) -> Result<Option<InstanceRecord>> {
    for _ in 0..MAX_CONFLICT_RETRIES {
        let Some(mut record) = store.get_instance(key).await? else {
            return Ok(None);
        };
        let expected = record.revision;
        let now = clock.now();
        let Some(mut events) = change(&mut record) else {
            return Ok(None);
        };
        Event::assign_ids(
            &mut events,
            &format!("{}@{}c", key.storage_id(), expected + 1),
        );
        changed_now(&mut record, now);
        let commit = InstanceCommit {
            change: InstanceChange::Put(Box::new(record.clone())),
            expected_revision: Some(expected),
            new_jobs: Vec::new(),
            finished_jobs: Vec::new(),
            events,
        };
        match store.commit(commit).await {
            Ok(revision) => {
                record.revision = revision;
                return Ok(Some(record));
            }
            Err(crate::Error::Conflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(crate::Error::Conflict {
        what: format!("instance {key}"),
    })
}

#[async_trait]
pub trait JobStore: Send + Sync {
    async fn get_job(&self, id: &JobId) -> Result<Option<JobRecord>>;
    /// Moves a job from created to dispatched. `false` when it was not in
    /// the created state: someone else dispatched it, or it already ended.
    async fn claim_job(&self, id: &JobId, at: Timestamp) -> Result<bool>;
    /// Records where a dispatched job runs. `false` when the job is not in
    /// the dispatched state (it already ended, or is unknown).
    async fn record_handle(&self, id: &JobId, handle: &JobHandle) -> Result<bool>;
    /// Records a job's result once. `false` when a result was already
    /// recorded (a duplicate report) or the job is unknown.
    async fn finish_job(&self, id: &JobId, result: &JobResult) -> Result<bool>;
}

/// A release and what it brings, written together by
/// [`ReleaseStore::push_release`].
#[derive(Clone, Debug)]
pub struct ReleasePush {
    pub release: Release,
    /// The config the instances' desired states were compiled from.
    pub config_hash: String,
    /// The service's instances with their new desired states, each at the
    /// revision it was read at (the write's condition).
    pub instances: Vec<InstanceRecord>,
    pub events: Vec<Event>,
}

#[async_trait]
pub trait ReleaseStore: Send + Sync {
    /// Records a release and makes it the service's latest. Pushing the same
    /// version again with the same parameters only makes it latest again; with
    /// other parameters it is a [`crate::Error::Conflict`] (versions are immutable).
    async fn put_release(&self, release: &Release) -> Result<()>;
    /// Records a release as [`ReleaseStore::put_release`] does, with the
    /// new desired states of the service's instances and the release's
    /// events, all or nothing: only while `push.config_hash` is the config
    /// in force and every instance is at the revision it carries. Anything
    /// else is a [`crate::Error::Conflict`] and writes nothing.
    async fn push_release(&self, push: &ReleasePush) -> Result<()>;
    async fn latest_release(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
    ) -> Result<Option<Release>>;
    /// Newest first.
    async fn list_releases(
        &self,
        application: &ApplicationName,
        service: &ServiceName,
        limit: usize,
    ) -> Result<Vec<Release>>;
}

#[async_trait]
pub trait ApprovalStore: Send + Sync {
    async fn put_approval(&self, approval: &Approval) -> Result<()>;
    async fn list_approvals(&self, key: &InstanceKey) -> Result<Vec<Approval>>;
}

/// API tokens, stored by id with only a hash of their secret.
#[async_trait]
pub trait TokenStore: Send + Sync {
    /// Stores a new token; an existing id is a [`crate::Error::Conflict`].
    async fn put_token(&self, token: &ApiToken) -> Result<()>;
    async fn get_token(&self, id: &str) -> Result<Option<ApiToken>>;
    /// The tokens of one application, or of one agent, by id.
    async fn list_tokens(&self, subject: &TokenSubject) -> Result<Vec<ApiToken>>;
    /// Returns whether a token was deleted.
    async fn delete_token(&self, id: &str) -> Result<bool>;
    /// Records the first use of a signed webhook, by its signature, until
    /// `expires_at`; false when the signature was used before and its
    /// record has not expired at `now` (a replay). Of two concurrent calls
    /// with one signature (two API instances), exactly one gets true.
    async fn use_webhook_signature(
        &self,
        signature: &str,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<bool>;
}

/// Alert states pushed from outside (CLI, API, Alertmanager webhooks).
#[async_trait]
pub trait AlertStore: Send + Sync {
    /// Stores the alert's state, replacing the previous one.
    async fn put_alert(&self, alert: &AlertState) -> Result<()>;
    async fn get_alert(&self, name: &str) -> Result<Option<AlertState>>;
    async fn list_alerts(&self) -> Result<Vec<AlertState>>;
}

#[async_trait]
pub trait EventStore: Send + Sync {
    /// Appends events that belong to no instance commit (config applied,
    /// release created). Events with an id already stored are skipped.
    async fn append_events(&self, events: &[Event]) -> Result<()>;
    /// Oldest first; with a limit, the newest `limit` events.
    async fn list_events(&self, filter: &EventFilter) -> Result<Vec<Event>>;
}

/// Agents' last contact and the work queued for them (see
/// [`crate::agent`]). Every write that two callers can race is conditional:
/// two polls never lease the same item.
#[async_trait]
pub trait AgentStore: Send + Sync {
    /// Queues an item. An id already queued is left as it is (a job
    /// dispatched again): returns whether the item was added.
    async fn put_agent_work(&self, work: &AgentWork) -> Result<bool>;
    async fn get_agent_work(&self, agent: &AgentName, id: &str) -> Result<Option<AgentWork>>;
    /// Leases up to `limit` of the agent's items that are free at `now`
    /// (never leased, or their lease ended), oldest first, until `until`,
    /// counting a delivery each; returns them as leased.
    async fn lease_agent_work(
        &self,
        agent: &AgentName,
        now: Timestamp,
        until: Timestamp,
        limit: usize,
    ) -> Result<Vec<AgentWork>>;
    /// Extends the leases of the items `ids` that exist to `until` (the
    /// agent still works on them).
    async fn renew_agent_work(
        &self,
        agent: &AgentName,
        ids: &[String],
        until: Timestamp,
    ) -> Result<()>;
    /// Removes a done item; `false` when it was not there.
    async fn finish_agent_work(&self, agent: &AgentName, id: &str) -> Result<bool>;
    /// Records an agent's call, replacing what was known of it.
    async fn touch_agent(&self, agent: &AgentState) -> Result<()>;
    async fn get_agent(&self, name: &AgentName) -> Result<Option<AgentState>>;
    /// Every agent that ever called, by name.
    async fn list_agents(&self) -> Result<Vec<AgentState>>;
}

/// Everything the engine and the control operations persist.
pub trait StateStore:
    ConfigStore
    + InstanceStore
    + JobStore
    + ReleaseStore
    + ApprovalStore
    + AlertStore
    + TokenStore
    + EventStore
    + AgentStore
{
}

impl<T> StateStore for T where
    T: ConfigStore
        + InstanceStore
        + JobStore
        + ReleaseStore
        + ApprovalStore
        + AlertStore
        + TokenStore
        + EventStore
        + AgentStore
{
}

/// The Vergence side of the agent protocol ([`crate::agent::protocol`]):
/// what the API's agent routes do once the caller is known to be `agent`.
#[async_trait]
pub trait AgentDesk: Send + Sync {
    /// Records the agent's call and renews the leases of the jobs it says
    /// it still runs.
    async fn check_in(&self, agent: &AgentName, poll: &PollRequest) -> Result<()>;
    /// Leases up to `limit` tasks waiting for the agent, with everything
    /// it needs to carry them out (none when nothing waits).
    async fn hand_out(&self, agent: &AgentName, limit: usize) -> Result<Vec<Task>>;
    /// Takes the agent's report of a task; `None` when the job is not one
    /// of this agent's.
    async fn take_report(
        &self,
        agent: &AgentName,
        report: AgentReport,
    ) -> Result<Option<ReportAnswer>>;
}

/// A request to step an instance, not before a time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkItem {
    pub instance: InstanceKey,
    pub not_before: Timestamp,
}

#[async_trait]
pub trait WorkQueue: Send + Sync {
    /// Asks for the instances to be stepped. Delivery is at least once; a
    /// queue may also drop items far in the future, because every instance's
    /// `next_check_at` is persisted and found again by the scheduler.
    async fn enqueue(&self, items: &[WorkItem]) -> Result<()>;
}

/// Executes jobs. Results come back through a [`JobResultSink`] (push:
/// local processes, platform events, the agent's reports), and through
/// [`Runner::poll`] on later steps, so a lost report only delays a result.
#[async_trait]
pub trait Runner: Send + Sync {
    /// Starts the job and returns at once; only a runner that runs jobs
    /// inline by design waits for it. Idempotent per job id: dispatching a
    /// job that already started (a redelivered message, a worker that died
    /// after starting it) adopts the running one instead of starting a
    /// second. Returns where the job runs when the runner needs that to
    /// find it again.
    async fn dispatch(&self, job: &JobRecord) -> Result<Option<JobHandle>>;

    /// Starts the job like [`Runner::dispatch`], for a caller that records
    /// results itself: a runner that runs jobs inline hands the result back
    /// instead of reporting it, so the step that started the job takes it
    /// up at once, without a round trip through its sink and the queue.
    async fn start(&self, job: &JobRecord) -> Result<Started> {
        self.dispatch(job).await.map(Started::Running)
    }

    /// Where a dispatched job is now. The default suits runners that only
    /// push results and keep no memory of what they ran.
    async fn poll(&self, _job: &JobRecord) -> Result<JobProgress> {
        Ok(JobProgress::Unknown)
    }

    /// Stops a job that is still running (past its deadline, or superseded
    /// by a newer version or a rollback). Idempotent: stopping a job that
    /// already ended does nothing.
    async fn stop(&self, _job: &JobRecord, _reason: &str) -> Result<()> {
        Ok(())
    }

    /// Whether [`Runner::start`] runs `job` to its end within the call
    /// (the worker's local runner). A step can then run a fetch before
    /// recording anything, and record only what it found.
    fn runs_inline(&self, _job: &JobRecord) -> bool {
        false
    }

    /// Whether jobs for `spec` can start now. A runner whose jobs go
    /// through something that comes and goes (an agent) says why not; the
    /// instance then waits with that reason instead of failing attempts.
    async fn availability(&self, _spec: &RunnerSpec) -> Availability {
        Availability::Ready
    }
}

/// What [`Runner::start`] did with a job.
#[derive(Clone, Debug, PartialEq)]
pub enum Started {
    /// It runs on and reports as [`Runner::dispatch`] says; where it runs,
    /// when the runner needs that to find it again.
    Running(Option<JobHandle>),
    /// It ran to its end inside the call. Nothing else reports this result:
    /// recording it is the caller's.
    Finished(JobResult),
}

/// Where a dispatched job is, as its runner sees it.
#[derive(Clone, Debug, PartialEq)]
pub enum JobProgress {
    Running,
    Finished(JobResult),
    /// The runner knows nothing of it (a process that went down with an
    /// earlier `vergence`); at its deadline the job is presumed lost.
    Unknown,
}

/// Whether a runner can take jobs now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    Ready,
    /// Not now, and why, in a sentence that says what to do.
    Unavailable(String),
}

/// Where files handed between jobs (plans) are kept: a directory locally,
/// S3 in AWS. Keys are paths such as `jobs/<job>/outputs/<name>`.
#[async_trait]
pub trait ArtifactStore: Send + Sync {
    async fn put(&self, key: &str, content: &[u8]) -> Result<()>;
    /// `None` when nothing is stored under `key` (never written, or expired).
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// The jobs that have files here: the `<job>` of every
    /// `jobs/<job>/…` key ([`crate::Artifact::output_key`]). Empty for a
    /// store that cannot list (its files expire by themselves).
    async fn job_ids(&self) -> Result<Vec<JobId>> {
        Ok(Vec::new())
    }
    /// Deletes every file of `job` (its job record is gone).
    async fn delete_job(&self, _job: &JobId) -> Result<()> {
        Ok(())
    }
    /// A URL that reads or writes `key` with no other credential, valid for
    /// `ttl`, for jobs in containers that cannot reach the store otherwise;
    /// `None` for a store that cannot hand out URLs.
    async fn presign(
        &self,
        _key: &str,
        _access: UrlAccess,
        _ttl: jiff::SignedDuration,
    ) -> Result<Option<String>> {
        Ok(None)
    }
}

/// What a presigned artifact URL allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UrlAccess {
    /// `GET` the content (a job's inputs).
    Read,
    /// `PUT` the content (a job's outputs).
    Write,
}

/// Where runners report finished jobs.
#[async_trait]
pub trait JobResultSink: Send + Sync {
    async fn job_finished(&self, job: &JobRecord, result: JobResult) -> Result<()>;
}

/// The time, injected so decisions are deterministic in tests.
pub trait Clock: Send + Sync {
    fn now(&self) -> Timestamp;
}

/// The machine's clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock tests move by hand.
#[derive(Debug)]
pub struct ManualClock {
    now: std::sync::Mutex<Timestamp>,
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        Self {
            now: std::sync::Mutex::new(start),
        }
    }

    pub fn advance(&self, by: jiff::SignedDuration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now = now.checked_add(by).unwrap_or(*now);
    }

    pub fn set(&self, to: Timestamp) {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self
            .now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}
