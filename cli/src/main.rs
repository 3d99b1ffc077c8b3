//! `vergence`: the command line. Parses arguments, sets up logging, runs the
//! command and turns errors into one clear line and a non-zero exit.

mod args;
mod backend;
mod commands;
mod lint;
mod listen;
mod output;
mod progress;
mod runners;
mod shutdown;

use std::process::ExitCode;

use args::Cli;

/// Exit code for a command line that does not parse.
const USAGE_ERROR: u8 = 64;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    // reqwest's TLS (`--endpoint`, notifications) uses the process's
    // provider: ring, so the local build needs no aws-lc. Another one
    // already installed (none is, this early) would be kept.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = match parse() {
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
    let result = runtime.block_on(commands::run(&cli.global, &cli.command));
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) if closed_stdout(&e) => ExitCode::SUCCESS,
        Err(e) => {
            // Errors can quote a config, a job or a server's answer.
            eprintln!("error: {}", output::terminal_line(&one_line(&e)));
            ExitCode::FAILURE
        }
    }
}

/// The command line, and whether `--config` was given on it (a default
/// `.` is not a config someone asked `serve` or `release` to store).
fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    cli.global.config_given = matches.value_source("config") == Some(ValueSource::CommandLine);
    Ok(cli)
}

/// Whether an error is stdout's reader having gone (`vergence … | head`):
/// then there is nobody left to tell, and nothing went wrong.
fn closed_stdout(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `println!` panics when stdout's reader has gone; like `head`'s other
/// writers, the command then ends quietly instead of printing a panic.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or_default();
        // std's message: "failed printing to stdout: Broken pipe (os error 32)".
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(0);
        }
        default(info);
    }));
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
