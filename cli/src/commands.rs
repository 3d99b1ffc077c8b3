//! What each command does, over the embedded adapters.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use vergence_api::wire::AgentView;
use vergence_compiler::YamlCompiler;
use vergence_embedded::{DirArtifactStore, DriveMode, Driver, LocalQueue, SqliteStore};
use vergence_engine::control::{Control, PauseAction};
use vergence_engine::{Engine, JobCompletion};
use vergence_model::ConfigBundle;
use vergence_model::ports::{
    ArtifactStore, Clock, CompiledConfig, Compiler, InstanceFilter, StateStore, SystemClock,
};
use vergence_model::{EventFilter, InstanceKey, RunnerKind, Status, TokenSubject};
use vergence_runner_kubernetes::{AgentJobs, AgentRunner};
use vergence_runner_local::LocalRunner;

use crate::args::{
    AlertCommand, AlertValue, ApproveArgs, EventsArgs, Filter, Global, InstanceArgs, Output,
    PinArgs, ReleaseArgs, RollbackArgs, ScopeArgs, StatusArgs, UpArgs,
};
use crate::output;
use crate::progress::LiveProgress;
use crate::shutdown::{self, Signals, Stop};

/// Exit codes of `vergence up` (a contract for scripts).
pub const EXIT_FAILED: u8 = 2;
pub const EXIT_WAITING: u8 = 3;

/// Who CLI actions are attributed to in events.
fn actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("USERNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}

/// The store and control operations over it.
struct Local {
    store: Arc<dyn StateStore>,
    queue: Arc<LocalQueue>,
    clock: Arc<dyn Clock>,
    /// Files handed between jobs, in `artifacts/` beside the state file.
    artifacts: Arc<dyn ArtifactStore>,
    control: Control,
}

impl Local {
    fn open(path: &Path) -> Result<Self> {
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::open(path)?);
        let artifacts: Arc<dyn ArtifactStore> = Arc::new(DirArtifactStore::new(
            path.parent().unwrap_or(Path::new(".")).join("artifacts"),
        ));
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let queue = Arc::new(LocalQueue::new(clock.clone()));
        let control = Control::new(
            store.clone(),
            queue.clone(),
            clock.clone(),
            Arc::new(YamlCompiler),
        );
        Ok(Self {
            store,
            queue,
            clock,
            artifacts,
            control,
        })
    }

    /// Opens an existing store: reading commands never create one.
    fn existing(global: &Global) -> Result<Self> {
        let path = global.state_path();
        if !path.exists() {
            bail!(
                "no Vergence state at {}; run `vergence up` in the config directory first (or pass --state)",
                path.display()
            );
        }
        Self::open(&path)
    }
}

pub(crate) fn load_bundle(config: &Path) -> Result<ConfigBundle> {
    Ok(vergence_compiler::read_dir(config)?)
}

/// Prints every config error, one per line, and a count.
pub(crate) fn report_config_errors(error: &vergence_model::Error) -> bool {
    if let vergence_model::Error::Config(errors) = error {
        for e in errors.iter() {
            eprintln!("{e}");
        }
        eprintln!("{} error(s); nothing was stored", errors.len());
        return true;
    }
    false
}

/// Compiles a config; `Ok(None)` when it has errors, which are printed.
fn compile(bundle: &ConfigBundle) -> Result<Option<Arc<dyn CompiledConfig>>> {
    match YamlCompiler.compile(bundle) {
        Ok(model) => Ok(Some(model)),
        Err(e) if report_config_errors(&e) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(crate) fn valid_summary(model: &dyn CompiledConfig) -> String {
    format!(
        "config is valid: {} application(s), {} runtime(s), {} service instance(s)",
        model.applications().len(),
        model.runtime_count(),
        model.instance_keys().len()
    )
}

pub fn validate(global: &Global) -> Result<u8> {
    let bundle = load_bundle(&global.config)?;
    let Some(model) = compile(&bundle)? else {
        return Ok(1);
    };
    warn_of_bare_scripts(model.as_ref(), &bundle, &global.config);
    println!("{}", valid_summary(model.as_ref()));
    Ok(0)
}

/// `vergence schema`: the config's JSON Schema, generated from its types.
pub fn schema() -> Result<u8> {
    let schema = vergence_compiler::config_json_schema();
    let text = serde_json::to_string_pretty(&schema)?;
    println!("{text}");
    Ok(0)
}

/// `vergence completions SHELL`: the shell's completion script, from the
/// same command definition that parses arguments.
pub fn completions(args: &crate::args::CompletionsArgs) -> Result<u8> {
    let mut command = <crate::args::Cli as clap::CommandFactory>::command();
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "vergence", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(0)
}

/// Says, on stderr, which job programs will not be found as written.
fn warn_of_bare_scripts(model: &dyn CompiledConfig, bundle: &ConfigBundle, dir: &Path) {
    for warning in crate::lint::bare_scripts(model, bundle, dir) {
        eprintln!("{warning}");
    }
}

pub async fn up(global: &Global, args: &UpArgs) -> Result<u8> {
    let bundle = load_bundle(&global.config)?;
    // Checked before the store is opened: a rejected config stores nothing.
    let Some(model) = compile(&bundle)? else {
        return Ok(1);
    };
    warn_of_bare_scripts(model.as_ref(), &bundle, &global.config);
    let local = Local::open(&global.state_path())?;
    let notifier = start_notifier(&local, global.public_url.clone())?;
    let actor = actor();
    let report = local.control.apply_compiled(model, bundle, &actor).await?;
    println!(
        "config {}: {} instance(s) added, {} updated, {} removed, {} unchanged",
        &report.hash[..10],
        report.added.len(),
        report.updated.len(),
        report.removed.len(),
        report.unchanged
    );
    // Rerunning `up` means "look again": fetch afresh, retry what failed.
    local
        .control
        .request_checks(&InstanceFilter::default(), &actor)
        .await?;

    let (driver, local_runner) = local_driver(&local, &args.runners, "`vergence up`", false);
    let mode = if args.watch {
        DriveMode::Forever
    } else {
        DriveMode::UntilSettled
    };
    let mut signals = Signals::install()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let shutdown = async {
        let stop = signals.next().await;
        let _ = stop_tx.send(stop);
    };
    let starting = local.control.status(&InstanceFilter::default()).await?;
    let progress = Arc::new(LiveProgress::for_up(&starting));
    let driven = driver.run(mode, progress.clone(), shutdown).await;
    progress.finish();
    if let Err(e) = driven {
        // No job is left running unwatched behind an error.
        local_runner.close("`vergence up` stopped on an error before the job started");
        local_runner
            .stop_all(&format!("`vergence up` stopped on an error: {e}"))
            .await;
        return Err(e.into());
    }
    let stopped = match stop_rx.await {
        Ok(stop) => {
            let said =
                shutdown::wind_down(&local_runner, stop, &mut signals, "`vergence up`").await;
            Some((stop, said))
        }
        Err(_) => None,
    };
    finish_notifier(notifier).await;

    let records = local.control.status(&InstanceFilter::default()).await?;
    println!();
    output::status_table(&mut std::io::stdout().lock(), &records)?;
    if let Some((stop, said)) = stopped {
        eprintln!("{said}");
        return Ok(stop.exit_code());
    }
    Ok(up_exit_code(&records))
}

/// 0 when all converged, 2 when any failed (a release that failed and was
/// rolled back too: what CI pushed does not run), 3 when some wait.
pub fn up_exit_code(records: &[vergence_model::InstanceRecord]) -> u8 {
    let mut code = 0;
    for record in records {
        let failed_and_rolled_back = record.state.status == Status::RolledBack
            && record
                .state
                .rollback
                .as_ref()
                .is_some_and(|r| r.requested_by.is_none());
        match record.state.status {
            Status::Converged => {}
            Status::Failed => return EXIT_FAILED,
            _ if failed_and_rolled_back => return EXIT_FAILED,
            _ => code = EXIT_WAITING,
        }
    }
    code
}

/// Parses an optional name given with `flag`, naming the flag when it is bad.
fn optional_name<T>(raw: Option<&str>, flag: &str) -> Result<Option<T>>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    raw.map(str::parse)
        .transpose()
        .map_err(|e| anyhow!("{flag}: {e}"))
}

fn filter(f: &Filter) -> Result<InstanceFilter> {
    Ok(InstanceFilter {
        application: optional_name(f.application.as_deref(), "--app")?,
        service: optional_name(f.service.as_deref(), "--service")?,
        release_channel: optional_name(f.release_channel.as_deref(), "--release-channel")?,
    })
}

pub async fn status(global: &Global, args: &StatusArgs) -> Result<u8> {
    let local = Local::existing(global)?;
    let records = local.control.status(&filter(&args.filter)?).await?;
    let now = local.clock.now();
    let agents: Vec<AgentView> = local
        .store
        .list_agents()
        .await?
        .iter()
        .map(|agent| AgentView::of(agent, now))
        .collect();
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => output::status_json(&mut out, &records, agents)?,
        Output::Table if records.is_empty() => writeln!(out, "no instances match")?,
        Output::Table => {
            output::status_table(&mut out, &records)?;
            output::agents_table(&mut out, &agents)?;
            if args.filter.service.is_some() {
                let plans = plan_texts(local.artifacts.as_ref(), &records).await;
                output::instance_details(&mut out, &records, &plans)?;
            }
        }
    }
    Ok(0)
}

/// The text of each pending plan file that is text and small enough to
/// read on a terminal, by artifact key; binary or large plans (a Terraform
/// plan is a zip, whose bytes a terminal would act on) are shown by size
/// and digest only.
async fn plan_texts(
    artifacts: &dyn ArtifactStore,
    records: &[vergence_model::InstanceRecord],
) -> BTreeMap<String, String> {
    const MAX_SHOWN: u64 = 64 * 1024;
    let mut texts = BTreeMap::new();
    let files = records
        .iter()
        .filter_map(|r| r.state.plan.as_ref())
        .flat_map(|p| &p.artifacts)
        .filter(|a| a.size <= MAX_SHOWN);
    for artifact in files {
        if let Ok(Some(bytes)) = artifacts.get(&artifact.key).await
            && let Ok(text) = String::from_utf8(bytes)
            && output::is_terminal_text(&text)
        {
            texts.insert(artifact.key.clone(), text);
        }
    }
    texts
}

pub(crate) fn parse_params(raw: &[String]) -> Result<BTreeMap<String, String>> {
    let mut params = BTreeMap::new();
    for pair in raw {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("--param {pair:?}: write NAME=VALUE"))?;
        if params.insert(name.to_owned(), value.to_owned()).is_some() {
            bail!("--param {name} is given twice");
        }
    }
    Ok(params)
}

pub async fn release(global: &Global, args: &ReleaseArgs) -> Result<u8> {
    let params = parse_params(&args.params)?;
    let version = args
        .version
        .as_ref()
        .or(args.version_flag.as_ref())
        .ok_or_else(|| anyhow!("give the version: vergence release SERVICE VERSION"))?;
    let service = args.service.parse().map_err(|e| anyhow!("SERVICE: {e}"))?;
    let application = optional_name(args.application.as_deref(), "--app")?;
    let path = global.state_path();
    // Before the first `up`, a config given with --config is stored first,
    // as `configs push` would, so that CI can release into a fresh state.
    let local = if path.exists() {
        Local::open(&path)?
    } else if global.config_given {
        let Some(local) = store_config_first(global).await? else {
            return Ok(1);
        };
        local
    } else {
        bail!(
            "no Vergence state at {}; pass --config DIR to store that config first, or run `vergence up` in the config directory first (or pass --state)",
            path.display()
        );
    };
    let release = local
        .control
        .push_release(application, &service, version, &params, &actor())
        .await?;
    println!(
        "release {} of {}/{} recorded; run `vergence up` (or keep `vergence up --watch` running) to roll it out",
        release.version, release.application, release.service
    );
    Ok(0)
}

/// Stores the config in `--config` into a new state; `None` when the
/// config has errors (printed).
async fn store_config_first(global: &Global) -> Result<Option<Local>> {
    let bundle = load_bundle(&global.config)?;
    let Some(model) = compile(&bundle)? else {
        return Ok(None);
    };
    let local = Local::open(&global.state_path())?;
    let report = local
        .control
        .apply_compiled(model, bundle, &actor())
        .await?;
    println!(
        "no Vergence state yet: stored the config in {} ({})",
        global.config.display(),
        apply_summary(&report)
    );
    Ok(Some(local))
}

pub async fn approve(global: &Global, args: &ApproveArgs) -> Result<u8> {
    let key = InstanceKey::new(
        args.application
            .parse()
            .map_err(|e| anyhow!("--app: {e}"))?,
        args.service
            .parse()
            .map_err(|e| anyhow!("--service: {e}"))?,
        args.release_channel
            .parse()
            .map_err(|e| anyhow!("--release-channel: {e}"))?,
    );
    let local = Local::existing(global)?;
    let approval = local
        .control
        .approve(&key, args.version.as_ref(), &actor())
        .await?;
    match &approval.plan_sha256 {
        Some(plan) => println!(
            "approved {} of {} for {}, bound to plan {} (a different plan needs a new approval)",
            approval.version,
            key.service,
            key.release_channel,
            &plan[..12.min(plan.len())]
        ),
        None => println!(
            "approved {} of {} for {}",
            approval.version, key.service, key.release_channel
        ),
    }
    Ok(0)
}

pub async fn events(global: &Global, args: &EventsArgs) -> Result<u8> {
    let f = filter(&args.filter)?;
    let local = Local::existing(global)?;
    let events = local
        .control
        .events(&EventFilter {
            application: f.application,
            service: f.service,
            release_channel: f.release_channel,
            limit: Some(args.limit),
        })
        .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &serde_json::json!({ "events": events }))?;
            writeln!(out)?;
        }
        Output::Table => output::events_table(&mut out, &events)?,
    }
    Ok(0)
}

pub async fn plan(global: &Global) -> Result<u8> {
    let bundle = load_bundle(&global.config)?;
    let Some(model) = compile(&bundle)? else {
        return Ok(1);
    };
    // Planning reads state if there is some, and never creates it.
    let path: PathBuf = global.state_path();
    let entries = if path.exists() {
        Local::open(&path)?.control.plan(model.as_ref()).await?
    } else {
        let store: Arc<dyn StateStore> = Arc::new(SqliteStore::in_memory()?);
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let queue = Arc::new(LocalQueue::new(clock.clone()));
        Control::new(store, queue, clock, Arc::new(YamlCompiler))
            .plan(model.as_ref())
            .await
            .context("planning")?
    };
    output::plan_table(&mut std::io::stdout().lock(), &entries)?;
    Ok(0)
}

/// The instance an `InstanceArgs` names; the application may be left out
/// when only one has the service.
async fn instance_key(local: &Local, args: &InstanceArgs) -> Result<InstanceKey> {
    let service = args.service.parse().map_err(|e| anyhow!("SERVICE: {e}"))?;
    let channel = args
        .release_channel
        .parse()
        .map_err(|e| anyhow!("--release-channel: {e}"))?;
    let application = optional_name(args.application.as_deref(), "--app")?;
    Ok(local
        .control
        .instance_key(application, service, channel)
        .await?)
}

pub async fn alert(global: &Global, command: &AlertCommand) -> Result<u8> {
    let local = Local::existing(global)?;
    match command {
        AlertCommand::Set(args) => {
            let firing = args.value == AlertValue::Firing;
            let keys = local
                .control
                .set_alert(&args.name, firing, args.summary.clone(), &actor())
                .await?;
            let state = if firing { "firing" } else { "resolved" };
            match keys.len() {
                0 => println!(
                    "alert {} is {state}; no protection in the current config refers to it",
                    args.name
                ),
                n => println!(
                    "alert {} is {state}; {n} instance(s) guarded by it",
                    args.name
                ),
            }
        }
        AlertCommand::List => {
            let alerts = local.control.alerts().await?;
            let rows: Vec<Vec<String>> = alerts
                .iter()
                .map(|a| {
                    vec![
                        a.name.clone(),
                        if a.firing { "firing" } else { "resolved" }.to_owned(),
                        vergence_engine::moment(a.since),
                        a.actor.clone(),
                        a.summary.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            output::table(
                &mut std::io::stdout().lock(),
                &["ALERT", "STATE", "SINCE", "SET BY", "SUMMARY"],
                &rows,
            )?;
        }
    }
    Ok(0)
}

pub async fn pause(global: &Global, args: &ScopeArgs, action: PauseAction) -> Result<u8> {
    let local = Local::existing(global)?;
    let filter = filter(&Filter {
        application: Some(args.application.clone()),
        service: args.service.clone(),
        release_channel: args.release_channel.clone(),
    })?;
    let keys = local.control.pause(&filter, action, &actor()).await?;
    for key in &keys {
        println!("{} {key}", action.done());
    }
    Ok(0)
}

pub async fn pin(global: &Global, args: &PinArgs) -> Result<u8> {
    let local = Local::existing(global)?;
    let key = instance_key(&local, &args.instance).await?;
    local.control.pin(&key, &args.version, &actor()).await?;
    println!(
        "pinned {key} to {}; `vergence up` converges it there, `vergence unpin` lets it follow releases again",
        args.version
    );
    Ok(0)
}

pub async fn unpin(global: &Global, args: &InstanceArgs) -> Result<u8> {
    let local = Local::existing(global)?;
    let key = instance_key(&local, args).await?;
    local.control.unpin(&key, &actor()).await?;
    println!("unpinned {key}");
    Ok(0)
}

pub async fn rollback(global: &Global, args: &RollbackArgs) -> Result<u8> {
    let local = Local::existing(global)?;
    let key = instance_key(&local, &args.instance).await?;
    local
        .control
        .rollback(&key, args.version.as_ref(), &actor())
        .await?;
    println!("rollback of {key} requested; `vergence up` carries it out");
    Ok(0)
}

pub async fn explain(global: &Global, args: &InstanceArgs) -> Result<u8> {
    let local = Local::existing(global)?;
    let key = instance_key(&local, args).await?;
    let lines = local.control.explain(&key).await?;
    for line in &lines {
        println!("{line}");
    }
    // The engine says when nothing runs it; here is how to, for this config.
    if lines
        .last()
        .is_some_and(|l| l.contains("nothing is running the engine"))
    {
        let dir = global.config.display();
        println!(
            "  to run it: `vergence up --config {dir}` (once), or keep `vergence up --watch --config {dir}` or `vergence serve --config {dir}` running"
        );
    }
    if let Some(line) = agent_line(&local, &key).await? {
        println!("{line}");
    }
    Ok(0)
}

/// For an instance whose jobs go through an agent: when it last called.
async fn agent_line(local: &Local, key: &InstanceKey) -> Result<Option<String>> {
    let Some(record) = local.store.get_instance(key).await? else {
        return Ok(None);
    };
    let vergence_model::Desired::Ready(compiled) = &record.desired else {
        return Ok(None);
    };
    let vergence_model::RunnerSpec::Kubernetes(spec) = &compiled.apply.job.runner else {
        return Ok(None);
    };
    let Ok(name) = spec.agent.parse() else {
        return Ok(None);
    };
    let now = local.clock.now();
    Ok(Some(match local.store.get_agent(&name).await? {
        Some(agent) => format!(
            "agent {name}: {}, {} (vergence-agent {})",
            if agent.is_alive(now) {
                "connected"
            } else {
                "silent"
            },
            agent.last_contact(now),
            agent.version
        ),
        None => format!("agent {name}: has never connected"),
    }))
}

/// The engine loop over the local state, with this machine's runners;
/// `deployment` names the command, for reasons. With `agents` (a server
/// agents can call), Kubernetes jobs go to the agents' queues.
fn local_driver(
    local: &Local,
    runners: &crate::args::RunnerArgs,
    deployment: &str,
    agents: bool,
) -> (Driver, Arc<LocalRunner>) {
    let max_jobs = runners.max_jobs;
    let sink = Arc::new(JobCompletion::new(
        local.store.clone(),
        local.queue.clone(),
        local.clock.clone(),
    ));
    let local_runner = Arc::new(
        LocalRunner::new(sink.clone(), local.artifacts.clone(), max_jobs)
            .with_container_engine(runners.container_engine),
    );
    let mut runners = crate::runners::router(
        runners,
        deployment,
        local_runner.clone(),
        local.artifacts.clone(),
        sink,
    );
    if agents {
        runners = runners.with(
            RunnerKind::Kubernetes,
            Arc::new(AgentRunner::new(local.store.clone(), local.clock.clone())),
        );
    }
    let engine = Engine::new(
        local.store.clone(),
        local.queue.clone(),
        runners,
        local.clock.clone(),
    )
    .with_artifacts(local.artifacts.clone());
    let driver = Driver::new(
        engine,
        local.store.clone(),
        local.queue.clone(),
        local.clock.clone(),
        max_jobs.max(4),
    );
    (driver, local_runner)
}

/// Delivers notifications beside the engine, never in its way
/// (docs/notifications.md).
fn start_notifier(
    local: &Local,
    public_url: Option<String>,
) -> Result<vergence_notify::Background> {
    Ok(vergence_notify::spawn_local(
        local.store.clone(),
        local.artifacts.clone(),
        local.clock.clone(),
        Arc::new(YamlCompiler),
        public_url,
    )?)
}

/// How long a command that ends waits for its last notifications.
const NOTIFY_ON_EXIT: std::time::Duration = std::time::Duration::from_secs(5);

async fn finish_notifier(notifier: vergence_notify::Background) {
    if !notifier.finish(NOTIFY_ON_EXIT).await {
        eprintln!(
            "warning: notifications not sent within {}s (a receiver is slow or down) are left for the next `vergence up` or `vergence serve`",
            NOTIFY_ON_EXIT.as_secs()
        );
    }
}

/// `vergence serve`: the HTTP API over the local state, and the engine
/// converging what it records, in one process until Ctrl-C or SIGTERM.
pub async fn serve(global: &Global, args: &crate::args::ServeArgs) -> Result<u8> {
    let path = global.state_path();
    // A config given with --config is checked before anything is opened
    // and applied before anything is served: one with errors stops serve
    // before it listens.
    let given = match global.config_given {
        true => {
            let bundle = load_bundle(&global.config)?;
            let Some(model) = compile(&bundle)? else {
                return Ok(1);
            };
            Some((model, bundle))
        }
        false => None,
    };
    let local = Local::open(&path)?;
    let applied = match given {
        Some((model, bundle)) => Some(
            local
                .control
                .apply_compiled(model, bundle, &actor())
                .await?,
        ),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let address = listener
        .local_addr()
        .context("reading the address listened on")?;
    let agent_jobs = AgentJobs::new(
        local.store.clone(),
        local.artifacts.clone(),
        Arc::new(JobCompletion::new(
            local.store.clone(),
            local.queue.clone(),
            local.clock.clone(),
        )),
        local.queue.clone(),
        local.clock.clone(),
    );
    let api = vergence_api::router(
        vergence_api::ApiState::new(
            Arc::new(local.control.clone()),
            local.store.clone(),
            local.clock.clone(),
            vergence_api::ApiConfig {
                webhook_secret: global.webhook_secret.clone(),
                ..vergence_api::ApiConfig::default()
            },
        )
        .with_agents(Arc::new(agent_jobs)),
    );
    let (driver, local_runner) = local_driver(&local, &args.runners, "`vergence serve`", true);
    let public_url = global
        .public_url
        .clone()
        .unwrap_or_else(|| format!("http://{address}"));
    let notifier = start_notifier(&local, Some(public_url))?;
    let mut signals = Signals::install()?;
    // The first line is the contract for scripts and tests: the base URL.
    println!("listening on http://{address}");
    println!(
        "API at http://{address}/v1, state in {}; push a config with `vergence --endpoint http://{address} --token … configs push DIR`; Ctrl-C stops",
        path.display()
    );
    println!(
        "status page at http://{address}{} (sign in with a token from `vergence token create`)",
        vergence_api::UI_PATH
    );
    if let Some(report) = &applied {
        println!(
            "applied the config in {}: {}",
            global.config.display(),
            apply_summary(report)
        );
    }

    // Either half stopping (a signal, or an error) stops the other.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let wait_for_stop = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        // An error means the sender is gone, which also means stop.
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    let signal = async {
        let received = tokio::select! {
            received = signals.next() => Some(received),
            () = wait_for_stop(stopped.clone()) => None,
        };
        stop.send_replace(true);
        received
    };
    let serving = async {
        let result = axum::serve(listener, api)
            .with_graceful_shutdown(wait_for_stop(stopped.clone()))
            .await
            .context("serving the API");
        stop.send_replace(true);
        result
    };
    let driving = async {
        let result = driver
            .run(
                DriveMode::Forever,
                Arc::new(LiveProgress::lines()),
                wait_for_stop(stopped.clone()),
            )
            .await
            .context("running the engine");
        stop.send_replace(true);
        result
    };
    let (received, served, driven) = tokio::join!(signal, serving, driving);
    // Whatever stopped the server, the jobs it started end recorded.
    let said = shutdown::wind_down(
        &local_runner,
        received.unwrap_or(Stop::Terminate),
        &mut signals,
        "`vergence serve`",
    )
    .await;
    finish_notifier(notifier).await;
    eprintln!("{said}");
    served?;
    driven?;
    Ok(0)
}

/// `vergence token create|list|revoke`, on the local state.
pub async fn token(global: &Global, command: &crate::args::TokenCommand) -> Result<u8> {
    use crate::args::TokenCommand;
    match command {
        TokenCommand::Create(args) => {
            let subject = token_subject(&args.subject)?;
            // Tokens may come before any config: creating one creates the state.
            let store = token_store(global, true).await?;
            let (token, full) = vergence_api::create_token(
                store.as_ref(),
                &subject,
                &args.scopes,
                args.description.clone(),
                &actor(),
                &SystemClock,
            )
            .await?;
            // Only the token on stdout, so `TOKEN=$(vergence token create …)` works.
            println!("{full}");
            let can = match &subject {
                TokenSubject::Application(_) => {
                    format!("with scope(s) {}", scope_list(&token.scopes))
                }
                TokenSubject::Agent(_) => "that can do only that agent's work".to_owned(),
                TokenSubject::Platform => {
                    "that pushes and rolls back configs, shared parts included, and nothing else"
                        .to_owned()
                }
            };
            eprintln!(
                "created token {} for {subject} {can}; store it now: it cannot be shown again",
                token.id,
            );
        }
        TokenCommand::List(args) => {
            let subject = token_subject(&args.subject)?;
            let store = token_store(global, false).await?;
            let tokens = store.list_tokens(&subject).await?;
            let rows: Vec<Vec<String>> = tokens
                .iter()
                .map(|t| {
                    vec![
                        t.id.clone(),
                        scope_list(&t.scopes),
                        t.created_at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
                        t.created_by.clone(),
                        t.description.clone().unwrap_or_default(),
                    ]
                })
                .collect();
            output::table(
                &mut std::io::stdout().lock(),
                &["ID", "SCOPES", "CREATED (UTC)", "CREATED BY", "DESCRIPTION"],
                &rows,
            )?;
        }
        TokenCommand::Revoke(args) => {
            let store = token_store(global, false).await?;
            if !store.delete_token(&args.id).await? {
                bail!("no token {} (see `vergence token list --app APP`)", args.id);
            }
            println!(
                "revoked token {}; requests with it are refused from now on",
                args.id
            );
        }
    }
    Ok(0)
}

/// The application or agent a token command names.
fn token_subject(args: &crate::args::TokenSubjectArgs) -> Result<TokenSubject> {
    match (&args.application, &args.agent) {
        (Some(application), _) => Ok(TokenSubject::Application(
            application.parse().map_err(|e| anyhow!("--app: {e}"))?,
        )),
        (None, Some(agent)) => Ok(TokenSubject::Agent(
            agent.parse().map_err(|e| anyhow!("--agent: {e}"))?,
        )),
        (None, None) if args.platform => Ok(TokenSubject::Platform),
        (None, None) => bail!("name whose token it is: --app APP, --agent NAME or --platform"),
    }
}

/// Where `token` commands keep tokens: a serverless deployment's table
/// (`--dynamodb-table`), or the local state (created only by `create`).
async fn token_store(global: &Global, create: bool) -> Result<Arc<dyn StateStore>> {
    if let Some(table) = &global.dynamodb_table {
        return dynamodb_store(table).await;
    }
    let local = if create {
        Local::open(&global.state_path())?
    } else {
        Local::existing(global)?
    };
    Ok(local.store)
}

#[cfg(feature = "aws")]
async fn dynamodb_store(table: &str) -> Result<Arc<dyn StateStore>> {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await;
    let client = aws_sdk_dynamodb::Client::new(&sdk);
    Ok(Arc::new(vergence_aws::DynamoStore::new(
        client,
        table.to_owned(),
    )))
}

/// Refused rather than falling back to the local state, where the tokens
/// would be made for no deployment that reads them.
#[cfg(not(feature = "aws"))]
async fn dynamodb_store(_: &str) -> Result<Arc<dyn StateStore>> {
    bail!(
        "--dynamodb-table: {}",
        crate::runners::left_out("aws", "reads and writes DynamoDB tables")
    )
}

fn scope_list(scopes: &[vergence_model::Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The one-line summary of an applied config.
pub(crate) fn apply_summary(report: &vergence_engine::control::ApplyReport) -> String {
    format!(
        "config {}: {} instance(s) added, {} updated, {} removed, {} unchanged",
        &report.hash[..report.hash.len().min(10)],
        report.added.len(),
        report.updated.len(),
        report.removed.len(),
        report.unchanged
    )
}

/// `vergence configs push [DIR]` on the local state: stores the config;
/// `vergence serve` (or the next `vergence up`) converges it.
pub async fn configs(global: &Global, command: &crate::args::ConfigsCommand) -> Result<u8> {
    use crate::args::ConfigsCommand;
    let args = match command {
        ConfigsCommand::Push(args) => args,
        ConfigsCommand::List(args) => {
            let local = Local::existing(global)?;
            return crate::configs::list_local(&local.control, args).await;
        }
        ConfigsCommand::Rollback(args) => {
            let local = Local::existing(global)?;
            return crate::configs::rollback_local(&local.control, args, &actor()).await;
        }
    };
    let bundle = load_bundle(args.dir.as_deref().unwrap_or(&global.config))?;
    if let Some(application) = &args.application {
        // One application's part is checked composed with the others.
        let local = Local::open(&global.state_path())?;
        return crate::configs::push_part_local(
            &local.control,
            bundle,
            application,
            args,
            &actor(),
        )
        .await;
    }
    let Some(model) = compile(&bundle)? else {
        return Ok(1);
    };
    if args.validate_only {
        println!("{}", valid_summary(model.as_ref()));
        return Ok(0);
    }
    let local = Local::open(&global.state_path())?;
    let report = local
        .control
        .apply_compiled(model, bundle, &actor())
        .await?;
    println!("{}", crate::configs::push_summary(&report));
    Ok(0)
}
