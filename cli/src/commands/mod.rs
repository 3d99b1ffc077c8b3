//! The commands, in one table ([`run`]). Each is written once, against
//! [`Backend`]: its arguments checked here, its answer printed here, its
//! exit code decided here, whether the state is local or behind an API.
//! Commands with no state (`validate`, `schema`, `completions`) need no
//! backend; `serve` is local by nature.

mod alert;
mod approve;
mod configs;
mod controls;
mod events;
mod explain;
mod metrics;
mod plan;
mod release;
mod serve;
mod status;
mod token;
mod up;
mod validate;

use std::path::Path;
use std::sync::Arc;

use anyhow::{Result, anyhow, bail};
use vergence_compiler::YamlCompiler;
use vergence_engine::control::{ApplyReport, PauseAction};
use vergence_model::ports::{CompiledConfig, Compiler, InstanceFilter, StateStore};
use vergence_model::{ConfigBundle, ConfigError, ConfigErrors, ConfigPart, DeploymentTarget};

use crate::args::{Command, Filter, Global};
use crate::backend::api::Api;
use crate::backend::local::Local;
use crate::backend::{Access, Backend, InvalidConfig};

/// Runs `command` where `global` says the state is.
pub async fn run(global: &Global, command: &Command) -> Result<u8> {
    let ctx = Context { global };
    match command {
        Command::Validate(args) => validate::validate(global, args),
        Command::Schema => validate::schema(),
        Command::Completions(args) => validate::completions(args),
        Command::Serve(args) => serve::run(&ctx, args).await,
        Command::Up(args) => up::run(&ctx, args).await,
        Command::Status(args) => status::run(&ctx, args).await,
        Command::Events(args) => events::run(&ctx, args).await,
        Command::Metrics(args) => metrics::run(&ctx, args).await,
        Command::Explain(args) => explain::run(&ctx, args).await,
        Command::Plan => plan::run(&ctx).await,
        Command::Release(args) => release::run(&ctx, args).await,
        Command::Approve(args) => approve::run(&ctx, args).await,
        Command::Pause(args) => controls::pause(&ctx, args, PauseAction::Pause).await,
        Command::Resume(args) => controls::pause(&ctx, args, PauseAction::Resume).await,
        Command::Pin(args) => controls::pin(&ctx, args).await,
        Command::Unpin(args) => controls::unpin(&ctx, args).await,
        Command::Rollback(args) => controls::rollback(&ctx, args).await,
        Command::Override(args) => controls::override_windows(&ctx, args).await,
        Command::Alert(command) => alert::run(&ctx, command).await,
        Command::Configs(command) => configs::run(&ctx, command).await,
        Command::Token(command) => token::run(&ctx, command).await,
    }
}

/// Where the state is: the API at `--endpoint`, else the state file.
struct Context<'a> {
    global: &'a Global,
}

impl Context<'_> {
    fn backend(&self, access: Access) -> Result<Box<dyn Backend>> {
        if self.global.endpoint.is_some() {
            return Ok(Box::new(Api::new(self.global)?));
        }
        Ok(Box::new(Local::open(self.global, access)?))
    }

    /// For `token` commands: a serverless deployment's table
    /// (`--dynamodb-table`), the API, or the state file.
    async fn token_backend(&self, access: Access) -> Result<Box<dyn Backend>> {
        let Some(table) = &self.global.dynamodb_table else {
            return self.backend(access);
        };
        if self.global.endpoint.is_some() {
            bail!(
                "--dynamodb-table and --endpoint both name where the tokens are: give one (the API manages its own application's tokens; the table, every token of a deployment)"
            );
        }
        let store = dynamodb_store(table).await?;
        Ok(Box::new(Local::over(
            store,
            &self.global.state_path(),
            self.global,
        )))
    }

    /// Whether a config is checked here before the state is opened: for
    /// the local state, so a rejected config creates none. An API checks
    /// what it receives, with its own version of the compiler.
    fn checks_configs_here(&self) -> bool {
        self.global.endpoint.is_none()
    }

    /// The state file, for what only runs here.
    fn local(&self, command: &str, why: &str) -> Result<Local> {
        if let Some(endpoint) = &self.global.endpoint {
            bail!(
                "`vergence {command}` {why}; it does not run against --endpoint {endpoint} (unset it, and VERGENCE_ENDPOINT)"
            );
        }
        Local::open(self.global, Access::Create)
    }
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

/// A name given with `flag`, naming the flag when it is bad.
fn name<T>(raw: &str, flag: &str) -> Result<T>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    raw.parse().map_err(|e| anyhow!("{flag}: {e}"))
}

fn filter(f: &Filter) -> Result<InstanceFilter> {
    Ok(InstanceFilter {
        application: optional_name(f.application.as_deref(), "--app")?,
        service: optional_name(f.service.as_deref(), "--service")?,
        release_channel: optional_name(f.release_channel.as_deref(), "--release-channel")?,
    })
}

/// The config directory `dir`, read as `global` allows: every command
/// that reads a config directory reads it here.
fn load_bundle(global: &Global, dir: &Path) -> Result<ConfigBundle> {
    let options = vergence_compiler::ReadOptions {
        allow_external_links: global.allow_external_links,
    };
    Ok(vergence_compiler::read_dir_with(dir, options)?)
}

/// Prints the config errors, one per line, at most
/// [`MAX_LISTED_ERRORS`](vergence_model::MAX_LISTED_ERRORS), then how many more there are (`more` of them
/// beyond `errors`, as an API counts those it did not list) and a count.
fn print_config_errors(errors: &[ConfigError], more: usize) {
    let (listed, unlisted) = ConfigErrors(errors.to_vec()).listed();
    // Errors quote keys, values and file names of the config as written.
    for e in &listed {
        eprintln!("{}", crate::output::terminal_lines(&e.to_string(), "    "));
    }
    let total = errors.len() + more;
    if unlisted + more > 0 {
        eprintln!("… and {} more error(s), not listed", unlisted + more);
    }
    eprintln!("{total} error(s); nothing was stored");
}

/// Exit 1 with every error for a config that does not compile, as
/// `vergence validate` does, wherever it was found.
fn config_rejected<T>(result: Result<T>) -> Result<Result<T, u8>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(e) => match e.downcast_ref::<InvalidConfig>() {
            Some(invalid) => {
                print_config_errors(&invalid.errors, invalid.more);
                Ok(Err(1))
            }
            None => Err(e),
        },
    }
}

/// Compiles a config here; `Ok(None)` when it has errors, which are printed.
fn compile(bundle: &ConfigBundle) -> Result<Option<Arc<dyn CompiledConfig>>> {
    match YamlCompiler.compile(bundle) {
        Ok(model) => Ok(Some(model)),
        Err(vergence_model::Error::Config(errors)) => {
            print_config_errors(&errors.0, 0);
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// Says, on stderr, which job programs will not be found as written
/// where `target` runs them.
fn warn_of_bare_scripts(model: &dyn CompiledConfig, dir: &Path, target: DeploymentTarget) {
    for warning in crate::lint::bare_scripts(model, dir, target) {
        eprintln!("{}", crate::output::terminal_line(&warning));
    }
}

fn valid_summary(applications: usize, runtimes: usize, instances: usize) -> String {
    format!(
        "config is valid: {applications} application(s), {runtimes} runtime(s), {instances} service instance(s)"
    )
}

/// The one-line summary of an applied config.
fn apply_summary(report: &ApplyReport) -> String {
    format!(
        "config {}: {} instance(s) added, {} updated, {} removed, {} unchanged",
        &report.hash[..report.hash.len().min(10)],
        report.added.len(),
        report.updated.len(),
        report.removed.len(),
        report.unchanged
    )
}

/// A push's summary: the parts it changed (if any), then the apply summary.
fn push_summary(report: &ApplyReport) -> String {
    if report.changed_parts.is_empty() {
        return apply_summary(report);
    }
    let parts: Vec<String> = report
        .changed_parts
        .iter()
        .map(|key| ConfigPart::from_key(key).map_or_else(|| key.clone(), |p| p.to_string()))
        .collect();
    format!("changed {}; {}", parts.join(", "), apply_summary(report))
}

/// The instance an `InstanceArgs` names; the application may be left out
/// when it is clear.
async fn instance_key(
    backend: &dyn Backend,
    args: &crate::args::InstanceArgs,
) -> Result<vergence_model::InstanceKey> {
    let service = name(&args.service, "SERVICE")?;
    let channel = name(&args.release_channel, "--release-channel")?;
    let application = optional_name(args.application.as_deref(), "--app")?;
    backend.instance_key(application, service, channel).await
}
