//! The command line, as users' scripts see it. Keep it stable.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use vergence_engine::metrics::Lookback;
use vergence_model::{DeploymentTarget, Version};
use vergence_runner_local::ContainerEngine;

#[derive(Debug, Parser)]
#[command(
    name = "vergence",
    version,
    about = "Intent-based deployments: declare what runs where, Vergence converges it.",
    long_about = None
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// The config directory (its *.yaml files, searched recursively).
    #[arg(long, global = true, default_value = ".", value_name = "DIR")]
    pub config: PathBuf,
    /// Whether `--config` was given rather than defaulted: `serve` and a
    /// first `release` then store that config.
    #[arg(skip)]
    pub config_given: bool,
    /// Follow links in the config directory that lead out of it (refused
    /// by default: the config is then what is in its directory).
    #[arg(long, global = true)]
    pub allow_external_links: bool,
    /// The state file [default: <config>/.vergence/state.db]
    #[arg(long, global = true, value_name = "FILE")]
    pub state: Option<PathBuf>,
    /// More logging (-v info, -vv debug); RUST_LOG also works.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// A Vergence API (deployed, or `vergence serve`): every command that
    /// reads or changes state then goes over HTTP (`serve` and the
    /// commands with no state excepted).
    #[arg(long, global = true, env = "VERGENCE_ENDPOINT", value_name = "URL")]
    pub endpoint: Option<String>,
    /// `token` commands work on this DynamoDB table (a serverless
    /// deployment's state) instead of the local state; AWS credentials and
    /// region come from the usual AWS environment.
    #[arg(
        long,
        global = true,
        env = "VERGENCE_DYNAMODB_TABLE",
        value_name = "TABLE"
    )]
    pub dynamodb_table: Option<String>,
    /// The API token (`vgt_…`) for --endpoint.
    #[arg(
        long,
        global = true,
        env = "VERGENCE_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// The webhook secret: `serve` then requires signed release and
    /// Alertmanager webhooks, and `release` with --endpoint signs its request.
    #[arg(
        long,
        global = true,
        env = "VERGENCE_WEBHOOK_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub webhook_secret: Option<String>,
    /// Where people reach this deployment's status pages: notifications
    /// link to `<URL>/ui/instances/…` [default for `serve`: the address
    /// it listens on].
    #[arg(long, global = true, env = "VERGENCE_PUBLIC_URL", value_name = "URL")]
    pub public_url: Option<String>,
}

impl Global {
    pub fn state_path(&self) -> PathBuf {
        self.state
            .clone()
            .unwrap_or_else(|| self.config.join(".vergence").join("state.db"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the config; exit 0 if valid, 1 with every error.
    Validate(ValidateArgs),
    /// Print the JSON Schema of a config document, for editors.
    ///
    /// Generated from the config's types. Put it next to your config
    /// (`vergence schema > vergence.schema.json`) and start each file with
    /// `# yaml-language-server: $schema=vergence.schema.json`.
    Schema,
    /// Store the config and converge every instance.
    ///
    /// Exits 0 when all converged, 2 when any failed (or a failed release
    /// was rolled back), 3 when some wait on something outside (an
    /// approval, a soak, a release).
    Up(UpArgs),
    /// Show every instance's status.
    Status(StatusArgs),
    /// Push a release: a new version of a service, with its parameters.
    Release(ReleaseArgs),
    /// Approve a version for one release channel.
    Approve(ApproveArgs),
    /// Show the audit trail.
    Events(EventsArgs),
    /// Show delivery metrics: deployment frequency, lead time, change
    /// failure rate and time to restore, from the events.
    Metrics(MetricsArgs),
    /// Show what applying the config would change, without running anything.
    Plan,
    /// Set or list alert states that protections refer to.
    #[command(subcommand)]
    Alert(AlertCommand),
    /// Stop applies (fetches go on) for an application, service or channel.
    Pause(ScopeArgs),
    /// Let paused instances apply again.
    Resume(ScopeArgs),
    /// Hold one instance on a released version until unpinned.
    Pin(PinArgs),
    /// Let a pinned instance follow its service's latest release again.
    Unpin(InstanceArgs),
    /// Roll one instance back to its last good version (or --version).
    Rollback(RollbackArgs),
    /// Break-glass: let one instance's next version apply through its
    /// freezes and closed windows, with a reason for the record.
    Override(OverrideArgs),
    /// Explain why an instance is where it is.
    Explain(InstanceArgs),
    /// Serve the HTTP API over the local state and run the engine, until Ctrl-C.
    Serve(ServeArgs),
    /// Create, list and revoke API tokens.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Push configs (whole, or one application's part), list and roll back
    /// an application's config versions.
    #[command(subcommand)]
    Configs(ConfigsCommand),
    /// Print a shell completion script: `vergence completions bash`.
    Completions(CompletionsArgs),
}

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// The deployment the config is for: `serverless` also refuses jobs
    /// of the local runner that the worker function cannot start (an
    /// image; a file or directory of the config directory).
    #[arg(long, value_enum, default_value_t = Target::Local)]
    pub target: Target,
}

/// A kind of deployment, as `--target` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// `vergence up` and `vergence serve`: local jobs run here, in the
    /// config directory.
    Local,
    /// The Lambda functions: local jobs run inside the worker function.
    Serverless,
}

impl From<Target> for DeploymentTarget {
    fn from(target: Target) -> Self {
        match target {
            Target::Local => DeploymentTarget::Local,
            Target::Serverless => DeploymentTarget::Serverless,
        }
    }
}

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// bash, zsh, fish, elvish or powershell.
    #[arg(value_enum, value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Subcommand)]
pub enum AlertCommand {
    /// Set an alert: `vergence alert set high-error-rate firing`.
    Set(AlertSetArgs),
    /// List alerts and their states.
    List,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AlertValue {
    Firing,
    Resolved,
}

#[derive(Debug, Args)]
pub struct AlertSetArgs {
    pub name: String,
    #[arg(value_enum, value_name = "STATE")]
    pub value: AlertValue,
    /// What is wrong, shown in reasons.
    #[arg(long)]
    pub summary: Option<String>,
}

#[derive(Debug, Args)]
pub struct ScopeArgs {
    #[arg(long = "app", value_name = "APP")]
    pub application: String,
    #[arg(long, value_name = "SERVICE")]
    pub service: Option<String>,
    #[arg(long, value_name = "RC")]
    pub release_channel: Option<String>,
}

#[derive(Debug, Args)]
pub struct InstanceArgs {
    pub service: String,
    #[arg(long, value_name = "RC")]
    pub release_channel: String,
    #[arg(long = "app", value_name = "APP")]
    pub application: Option<String>,
}

#[derive(Debug, Args)]
pub struct PinArgs {
    #[command(flatten)]
    pub instance: InstanceArgs,
    /// A released version.
    pub version: Version,
}

#[derive(Debug, Args)]
pub struct OverrideArgs {
    #[command(flatten)]
    pub instance: InstanceArgs,
    /// Why (required): kept in the audit trail and sent to notifications.
    #[arg(long)]
    pub reason: String,
    /// The version the instance is headed for; default: that version.
    #[arg(long)]
    pub version: Option<Version>,
    /// How long the override lasts at most, unless the version converges
    /// first (`30m`, `2h`; at most 24h).
    #[arg(long = "for", value_name = "DURATION", default_value = "2h")]
    pub lasting: jiff::SignedDuration,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    #[command(flatten)]
    pub instance: InstanceArgs,
    /// A released version; default: the last version that converged there.
    #[arg(long)]
    pub version: Option<Version>,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Keep converging and detect drift at the fetch intervals, until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// With --endpoint: wait at most this long for the server's engine
    /// (`90s`, `20m`, `1h`) [default: 30m].
    #[arg(long, value_name = "DURATION", value_parser = duration, conflicts_with = "watch")]
    pub timeout: Option<std::time::Duration>,
    #[command(flatten)]
    pub runners: RunnerArgs,
}

/// A positive duration: `90s`, `20m`, `1h 30m` (or ISO 8601, `PT20M`).
fn duration(raw: &str) -> Result<std::time::Duration, String> {
    let parsed: jiff::SignedDuration = raw
        .parse()
        .map_err(|e| format!("{raw:?} is not a duration such as 90s, 20m or 1h: {e}"))?;
    std::time::Duration::try_from(parsed)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{raw:?}: give a duration longer than zero"))
}

/// How this machine runs jobs.
#[derive(Debug, Args)]
pub struct RunnerArgs {
    /// Most jobs running at once.
    #[arg(long, default_value_t = 32, value_name = "N")]
    pub max_jobs: usize,
    /// What runs jobs whose program names an image: docker, podman, or auto
    /// (the first of them on PATH).
    #[arg(
        long,
        env = "VERGENCE_CONTAINER_ENGINE",
        default_value = "auto",
        value_name = "ENGINE"
    )]
    pub container_engine: ContainerEngine,
    /// S3 bucket where jobs on ECS, Cloud Run and Lambda hand files (plans)
    /// to the next job, and where Lambda jobs report how they ended; without
    /// one, such jobs cannot have files and Lambda jobs cannot run.
    #[arg(
        long,
        env = "VERGENCE_ARTIFACT_BUCKET",
        value_name = "BUCKET",
        value_parser = artifact_bucket
    )]
    pub artifact_bucket: Option<String>,
}

/// A bucket this build can use: refused, before anything runs, by a build
/// without S3 rather than left unused.
fn artifact_bucket(bucket: &str) -> Result<String, String> {
    if cfg!(feature = "aws") {
        Ok(bucket.to_owned())
    } else {
        Err(crate::runners::left_out("aws", "keeps job files in S3"))
    }
}

#[derive(Debug, Args)]
pub struct Filter {
    /// Only this application.
    #[arg(long = "app", value_name = "APP")]
    pub application: Option<String>,
    /// Only this service.
    #[arg(long, value_name = "SERVICE")]
    pub service: Option<String>,
    /// Only this release channel.
    #[arg(long, value_name = "RC")]
    pub release_channel: Option<String>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub filter: Filter,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The service to release.
    pub service: String,
    /// The new version (v42, 1.2.3, sha-abc1234).
    #[arg(
        required_unless_present = "version_flag",
        conflicts_with = "version_flag"
    )]
    pub version: Option<Version>,
    /// The new version, as a flag (same as the positional VERSION).
    #[arg(long = "version", id = "version_flag", value_name = "VERSION")]
    pub version_flag: Option<Version>,
    /// The service's application (needed only when several have this service).
    #[arg(long = "app", value_name = "APP")]
    pub application: Option<String>,
    /// A release parameter; repeatable.
    #[arg(long = "param", value_name = "NAME=VALUE")]
    pub params: Vec<String>,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[arg(long = "app", value_name = "APP")]
    pub application: String,
    #[arg(long, value_name = "RC")]
    pub release_channel: String,
    #[arg(long, value_name = "SERVICE")]
    pub service: String,
    /// The version to approve [default: the instance's desired version].
    #[arg(long)]
    pub version: Option<Version>,
}

#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(flatten)]
    pub filter: Filter,
    /// Only the newest N events.
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub limit: usize,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// Only this application [default: every one; with --endpoint, the
    /// token's].
    #[arg(long = "app", value_name = "APP")]
    pub application: Option<String>,
    /// How far back from now: `30d`, `12h`, `2w`, `1d12h` (a day is 24
    /// hours).
    #[arg(long, default_value = "30d", value_name = "DURATION")]
    pub since: Lookback,
    #[arg(long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the URL is printed).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: String,
    /// A request's headers must arrive within this long of the server
    /// starting to wait for them; a client trickling them is cut off.
    #[arg(
        long,
        env = "VERGENCE_HEADER_READ_TIMEOUT",
        default_value = "30s",
        value_name = "DURATION",
        value_parser = duration
    )]
    pub header_read_timeout: std::time::Duration,
    /// A connection that sends and receives nothing for this long, while
    /// none of its requests is being answered, is closed.
    #[arg(
        long,
        env = "VERGENCE_IDLE_TIMEOUT",
        default_value = "15s",
        value_name = "DURATION",
        value_parser = duration
    )]
    pub idle_timeout: std::time::Duration,
    /// Most connections open at once; more wait until one closes [default:
    /// half the descriptors free at start (ulimit -n), at most 1024; the
    /// rest is kept for jobs].
    #[arg(long, env = "VERGENCE_MAX_CONNECTIONS", value_name = "N")]
    pub max_connections: Option<usize>,
    #[command(flatten)]
    pub runners: RunnerArgs,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token; it is printed once and cannot be shown again.
    Create(TokenCreateArgs),
    /// List an application's tokens (never their secrets).
    List(TokenListArgs),
    /// Revoke a token by id; requests with it fail from now on.
    Revoke(TokenRevokeArgs),
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    pub subject: TokenSubjectArgs,
    /// release (push releases), approve (record approvals) or admin
    /// (everything); repeatable. Application tokens need one; agent tokens
    /// take none.
    #[arg(long = "scope", value_name = "SCOPE", value_parser = parse_scope)]
    pub scopes: Vec<vergence_model::Scope>,
    /// What the token is for (shown in `token list`).
    #[arg(long)]
    pub description: Option<String>,
}

fn parse_scope(raw: &str) -> Result<vergence_model::Scope, String> {
    vergence_model::Scope::parse(raw)
}

#[derive(Debug, Args)]
pub struct TokenListArgs {
    #[command(flatten)]
    pub subject: TokenSubjectArgs,
}

/// Whose token: an application's (`--app`) or an agent's (`--agent`).
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct TokenSubjectArgs {
    #[arg(long = "app", value_name = "APP")]
    pub application: Option<String>,
    /// A `vergence-agent`'s token: it can poll for and report that agent's
    /// work, and nothing else.
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// The platform's token: it pushes and rolls back configs, including
    /// the runtimes and protections several applications share, and does
    /// nothing else (docs/per-application-configs.md).
    #[arg(long)]
    pub platform: bool,
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    /// The token's id (the part after `vgt_`, as `token list` shows it).
    pub id: String,
}

#[derive(Debug, Subcommand)]
pub enum ConfigsCommand {
    /// Store a config directory and make it the desired state, without
    /// running anything here (the server, or `vergence serve`, converges).
    Push(ConfigsPushArgs),
    /// List the versions of an application's config part, newest first.
    List(ConfigsListArgs),
    /// Bring back an earlier version of an application's config part (by
    /// default the one before the version in force); other parts stay.
    Rollback(ConfigsRollbackArgs),
}

#[derive(Debug, Args)]
pub struct ConfigsPushArgs {
    /// The config directory [default: --config].
    #[arg(value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Only check the config; store nothing.
    #[arg(long)]
    pub validate_only: bool,
    /// Push only this application's part: its files become DIR's, every
    /// other part stays as it is (an application's admin token may do this).
    #[arg(long = "app", value_name = "APP")]
    pub application: Option<String>,
}

#[derive(Debug, Args)]
pub struct ConfigsListArgs {
    #[arg(long = "app", value_name = "APP")]
    pub application: String,
    /// At most N versions.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub limit: usize,
}

#[derive(Debug, Args)]
pub struct ConfigsRollbackArgs {
    #[arg(long = "app", value_name = "APP")]
    pub application: String,
    /// The version to bring back: a hash from `configs list` (at least its
    /// first 7 characters) [default: the one before the version in force].
    #[arg(long, value_name = "HASH")]
    pub to: Option<String>,
}
