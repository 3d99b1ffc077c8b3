//! `vergence serve`: the HTTP API over the local state, and the engine
//! converging what it records, in one process until Ctrl-C or SIGTERM.
//! Local by nature: it is what `--endpoint` talks to.

use std::sync::Arc;

use anyhow::{Context as _, Result};
use vergence_embedded::DriveMode;
use vergence_engine::JobCompletion;
use vergence_runner_kubernetes::AgentJobs;

use super::{Context, apply_summary, compile, load_bundle};
use crate::args::ServeArgs;
use crate::backend::local::engine::{finish_notifier, local_driver, start_notifier};
use crate::progress::LiveProgress;
use crate::shutdown::{self, Signals, Stop};

pub async fn run(ctx: &Context<'_>, args: &ServeArgs) -> Result<u8> {
    let global = ctx.global;
    let path = global.state_path();
    // A config given with --config is checked before anything is opened
    // and applied before anything is served: one with errors stops serve
    // before it listens.
    let given = match global.config_given {
        true => {
            let bundle = load_bundle(global, &global.config)?;
            let Some(model) = compile(&bundle)? else {
                return Ok(1);
            };
            Some((model, bundle))
        }
        false => None,
    };
    let local = ctx.local("serve", "serves the local state and runs its engine here")?;
    let applied = match given {
        Some((model, bundle)) => Some(
            local
                .control
                .apply_compiled(model, bundle, &local.actor)
                .await?,
        ),
        None => None,
    };
    // Counted before listening, so the descriptors it leaves to jobs are
    // those of a process that has opened its state.
    let limits = crate::listen::Limits {
        header_read_timeout: args.header_read_timeout,
        idle_timeout: args.idle_timeout,
        max_connections: crate::listen::max_connections(args.max_connections)?,
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
                // Its local jobs run here, in the config directory.
                target: vergence_model::DeploymentTarget::Local,
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
    // What an earlier process ran but could not record, before any step
    // takes its job for lost.
    local_runner.recover_held().await?;
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
        crate::listen::serve(listener, api, limits, wait_for_stop(stopped.clone())).await;
        stop.send_replace(true);
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
    let (received, (), driven) = tokio::join!(signal, serving, driving);
    // Whatever stopped the server, the jobs it started end recorded.
    let said = shutdown::wind_down(
        &local_runner,
        local.store.as_ref(),
        received.unwrap_or(Stop::Terminate),
        &mut signals,
        "`vergence serve`",
    )
    .await;
    finish_notifier(notifier).await;
    eprintln!("{}", crate::output::terminal_lines(&said, "  "));
    driven?;
    // A result the state would not take is kept, but not recorded.
    Ok(if local_runner.held() > 0 { 1 } else { 0 })
}
