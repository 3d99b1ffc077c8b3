//! `vergence up`: store the config and follow every instance until it
//! converged, failed or waits on something outside (a person, a window, a
//! release). Locally the engine runs here; against an API the server's
//! engine runs and `up` watches it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use vergence_api::wire::InstanceProgress;
use vergence_model::ports::InstanceFilter;
use vergence_model::{DeploymentTarget, EventFilter, Status};

use super::{Context, apply_summary, compile, config_rejected, load_bundle, warn_of_bare_scripts};
use crate::args::UpArgs;
use crate::backend::{Access, ConfigPush, Converge, Place, Pushed, is_not_found};
use crate::output;
use crate::progress::LiveProgress;

/// Exit codes of `vergence up` (a contract for scripts).
pub const EXIT_FAILED: u8 = 2;
pub const EXIT_WAITING: u8 = 3;

/// How long `up --endpoint` waits for the server's engine by default.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30 * 60);

pub async fn run(ctx: &Context<'_>, args: &UpArgs) -> Result<u8> {
    let global = ctx.global;
    let bundle = load_bundle(global, &global.config)?;
    // Checked before the state is opened: a rejected config stores nothing.
    let Some(model) = compile(&bundle)? else {
        return Ok(1);
    };
    warn_of_bare_scripts(model.as_ref(), &global.config, DeploymentTarget::Local);
    let backend = ctx.backend(Access::Create)?;
    // Locally the jobs run here, and `up` ends when nothing can move; a
    // server's engine is waited for, at most this long.
    let timeout = match (backend.place(), args.timeout) {
        (Place::Local, Some(_)) => bail!(
            "--timeout: a local `up` runs the jobs itself and ends when nothing can move; --timeout bounds the wait of `up --endpoint` on a server's engine"
        ),
        (Place::Local, None) => None,
        (Place::Server, _) if args.watch => None,
        (Place::Server, timeout) => Some(timeout.unwrap_or(DEFAULT_TIMEOUT)),
    };
    let application = backend.up_scope(model.as_ref()).await?;
    if let Some(application) = &application {
        let others: Vec<String> = model
            .applications()
            .into_iter()
            .filter(|a| a != application)
            .map(|a| a.to_string())
            .collect();
        if !others.is_empty() {
            eprintln!(
                "note: the config also has {}; this token reads only {application}'s instances, so `up` follows {application}'s",
                others.join(", ")
            );
        }
    }
    let instances = InstanceFilter {
        application: application.clone(),
        ..InstanceFilter::default()
    };
    // The rollout's events are those after the newest one before the push.
    let newest = backend
        .events(&EventFilter {
            application: application.clone(),
            limit: Some(1),
            ..EventFilter::default()
        })
        .await;
    let after_event = match newest {
        Ok(mut events) => events.pop().map(|event| event.id),
        // An application the server does not know yet has no events.
        Err(e) if is_not_found(&e) => None,
        Err(e) => return Err(e),
    };
    let push = ConfigPush {
        bundle,
        application: None,
        validate_only: false,
        compiled: Some(model),
    };
    let report = match config_rejected(backend.push_config(push).await)? {
        Ok(Pushed::Applied(report)) => report,
        Ok(Pushed::Validated(_)) => bail!("the config was only checked, not stored"),
        Err(code) => return Ok(code),
    };
    println!("{}", apply_summary(&report));
    // Rerunning `up` means "look again": fetch afresh, retry what failed.
    backend.request_checks(&instances).await?;

    let starting = backend.rollout(application.as_ref()).await?;
    let progress = Arc::new(LiveProgress::for_up(
        starting.instances.iter().map(|i| (i.key(), i.status)),
    ));
    let converged = backend
        .converge(Converge {
            watch: args.watch,
            runners: &args.runners,
            timeout,
            hash: report.hash.clone(),
            application: application.clone(),
            after_event,
            progress,
        })
        .await?;

    let status = backend.status(&instances).await?;
    println!();
    output::views_table(&mut std::io::stdout().lock(), &status.instances)?;
    if let Some((stop, said)) = converged.stopped {
        eprintln!("{}", output::terminal_lines(&said, "  "));
        return Ok(stop.exit_code());
    }
    if let Some(why) = converged.timed_out {
        eprintln!("{}", output::terminal_lines(&why, "  "));
    }
    let rollout = backend.rollout(application.as_ref()).await?;
    Ok(up_exit_code(&rollout.instances))
}

/// 0 when all converged, 2 when any failed (a release that failed and was
/// rolled back too: what CI pushed does not run), 3 when some wait.
pub fn up_exit_code(instances: &[InstanceProgress]) -> u8 {
    let mut code = 0;
    for instance in instances {
        match instance.status {
            Status::Converged => {}
            Status::Failed => return EXIT_FAILED,
            _ if instance.failed_release => return EXIT_FAILED,
            _ => code = EXIT_WAITING,
        }
    }
    code
}
