//! `vergence`: the command line. Parses arguments, sets up logging, runs the
//! command and turns errors into one clear line and a non-zero exit.

mod args;
mod commands;
mod output;
mod remote;
mod runners;
mod shutdown;

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
            eprintln!("error: {}", one_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line. Many errors already end with
/// their cause's text (`cannot open X: Not a directory`); a cause said
/// that way is not said again.
fn one_line(error: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
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

#[cfg(test)]
mod tests {
    use super::one_line;

    /// An error that says its cause, as thiserror's `{source}` does.
    #[derive(Debug)]
    struct Open(std::io::Error);

    impl std::fmt::Display for Open {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open the state store state.db: {}", self.0)
        }
    }

    impl std::error::Error for Open {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_message_is_said_once() {
        let io = || std::io::Error::from_raw_os_error(20);
        let error = anyhow::Error::new(Open(io())).context("vergence status");
        assert_eq!(
            one_line(&error),
            format!(
                "vergence status: cannot open the state store state.db: {}",
                io()
            )
        );
    }

    #[test]
    fn causes_not_in_the_message_are_added() {
        let error = anyhow::anyhow!("no such file").context("reading config.yaml");
        assert_eq!(one_line(&error), "reading config.yaml: no such file");
    }
}
