//! `vergence`: the command line. Parses arguments, sets up logging, runs the
//! command and turns errors into one clear line and a non-zero exit.

mod args;
mod commands;
mod output;
mod remote;
mod runners;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use vergence_engine::control::PauseAction;

/// Exit code for a command line that does not parse.
const USAGE_ERROR: u8 = 64;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Usage errors exit 64 (EX_USAGE), not clap's 2, which `up`
            // uses for "an instance failed".
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(USAGE_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_tracing(cli.global.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let global = &cli.global;
    let result = runtime.block_on(async {
        if global.endpoint.is_some() {
            return remote::run(global, &cli.command).await;
        }
        match &cli.command {
            Command::Validate => commands::validate(global),
            Command::Up(args) => commands::up(global, args).await,
            Command::Status(args) => commands::status(global, args).await,
            Command::Release(args) => commands::release(global, args).await,
            Command::Approve(args) => commands::approve(global, args).await,
            Command::Events(args) => commands::events(global, args).await,
            Command::Plan => commands::plan(global).await,
            Command::Alert(cmd) => commands::alert(global, cmd).await,
            Command::Pause(args) => commands::pause(global, args, PauseAction::Pause).await,
            Command::Resume(args) => commands::pause(global, args, PauseAction::Resume).await,
            Command::Pin(args) => commands::pin(global, args).await,
            Command::Unpin(args) => commands::unpin(global, args).await,
            Command::Rollback(args) => commands::rollback(global, args).await,
            Command::Explain(args) => commands::explain(global, args).await,
            Command::Serve(args) => commands::serve(global, args).await,
            Command::Token(cmd) => commands::token(global, cmd).await,
            Command::Configs(cmd) => commands::configs(global, cmd).await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            // One line: the error and its causes.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}
