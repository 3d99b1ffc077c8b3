//! Jobs whose program names an image run through the local container
//! engine: `docker run` (or `podman run`) with the config directory, the
//! job's input and output directories mounted, its environment passed with
//! `-e`, and its command as the entrypoint, so that the job runs as it
//! would as a process, only inside the image.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::process::Command;
use vergence_container::{CONTAINER_INPUT_DIR, CONTAINER_OUTPUT_DIR, env};
use vergence_model::{JobId, JobRecord};

use crate::artifacts::JobFiles;
use crate::engine::Engine;

/// Where the config directory is mounted in the container.
pub(crate) const CONTAINER_WORKSPACE: &str = "/workspace";

/// How long a `docker kill` may take before it is given up on.
const KILL_TIMEOUT: Duration = Duration::from_secs(10);

/// Exit codes with which `docker run` and `podman run` report that they,
/// not the container's command, failed: 125 the engine itself (no daemon,
/// no image), 126 an entrypoint that cannot be invoked, 127 one not found.
const ENGINE_EXIT_CODES: [i32; 3] = [125, 126, 127];

/// A variable of the container's environment.
pub(crate) enum EnvValue {
    /// Passed as `-e NAME=value`.
    Plain(String),
    /// Passed as `-e NAME`, the value in the engine process's environment,
    /// so it never appears on a command line (`ps`, audit logs).
    Secret(OsString),
}

/// What goes into one `docker run`.
pub(crate) struct ContainerRun<'a> {
    /// The config directory on this machine, mounted at [`CONTAINER_WORKSPACE`].
    pub(crate) workspace: &'a Path,
    /// The job's working directory, relative to the workspace.
    pub(crate) working_dir: &'a str,
    pub(crate) files: &'a JobFiles,
    pub(crate) env: &'a BTreeMap<String, EnvValue>,
    /// The entrypoint, run as written, and its arguments.
    pub(crate) program: &'a str,
    pub(crate) args: &'a [String],
}

/// A job's container, by the name it runs under.
#[derive(Clone, Debug)]
pub(crate) struct Container {
    pub(crate) engine: Engine,
    pub(crate) name: String,
    pub(crate) image: String,
}

impl Container {
    pub(crate) fn new(engine: Engine, job: &JobId, image: &str) -> Self {
        Self {
            engine,
            name: container_name(job),
            image: image.to_owned(),
        }
    }

    /// The `docker run` command of `job`, its variables in `env`.
    /// `workspace` is the config directory on this machine.
    pub(crate) fn run_command(&self, run: &ContainerRun<'_>) -> Command {
        let mut command = Command::new(&self.engine.program);
        command.args(self.run_args(run));
        for (name, value) in run.env {
            if let EnvValue::Secret(value) = value {
                command.env(name, value);
            }
        }
        command
    }

    fn run_args(&self, run: &ContainerRun<'_>) -> Vec<OsString> {
        let mut args: Vec<OsString> = ["run", "--rm", "--name", &self.name]
            .map(OsString::from)
            .to_vec();
        args.extend(mount(run.workspace, CONTAINER_WORKSPACE, ""));
        if let Some(input) = &run.files.input {
            args.extend(mount(input, CONTAINER_INPUT_DIR, ":ro"));
        }
        args.extend(mount(&run.files.output, CONTAINER_OUTPUT_DIR, ""));
        args.push("-w".into());
        args.push(container_working_dir(run.working_dir).into());
        for (name, value) in run.env {
            args.push("-e".into());
            args.push(match value {
                EnvValue::Plain(value) => format!("{name}={value}").into(),
                EnvValue::Secret(_) => name.into(),
            });
        }
        args.push("--entrypoint".into());
        args.push(run.program.into());
        args.push((&self.image).into());
        args.extend(run.args.iter().map(OsString::from));
        args
    }

    /// Sends `signal` to the container. Failures are logged only: the
    /// container may be gone already, or never have started.
    pub(crate) async fn kill(&self, signal: Signal) {
        let mut command = Command::new(&self.engine.program);
        command
            .args(["kill", "--signal", signal_name(signal), &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match tokio::time::timeout(KILL_TIMEOUT, command.output()).await {
            Ok(Ok(output)) if output.status.success() => {
                tracing::debug!(container = %self.name, %signal, "container signalled");
            }
            Ok(Ok(output)) => tracing::debug!(
                container = %self.name,
                %signal,
                stderr = %String::from_utf8_lossy(&output.stderr).trim(),
                "{} kill failed", self.engine.name
            ),
            Ok(Err(e)) => {
                tracing::warn!(container = %self.name, error = %e, "cannot run {} kill", self.engine.name)
            }
            Err(_) => {
                tracing::warn!(container = %self.name, "{} kill did not return in time", self.engine.name)
            }
        }
    }

    /// Kills the container without waiting, for when a job is abandoned
    /// half-way (the runtime shuts down) and nothing can be awaited any more.
    pub(crate) fn kill_detached(&self) {
        let started = std::process::Command::new(&self.engine.program)
            .args(["kill", &self.name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        if let Err(e) = started {
            tracing::warn!(container = %self.name, error = %e, "cannot kill an abandoned job's container");
        }
    }

    /// Why the container did not run, when `code` and `stderr` of the
    /// engine say that it failed itself (no image, no daemon, no such
    /// entrypoint) rather than the command in it. Engines prefix their own
    /// messages (`docker: …`, podman's `Error: …`); a command that exits
    /// with one of those codes on its own is taken at its word.
    pub(crate) fn engine_failure(&self, code: i32, stderr: &str) -> Option<String> {
        if !ENGINE_EXIT_CODES.contains(&code) {
            return None;
        }
        let lines: Vec<&str> = stderr
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            // The engine's pointer to its own help says nothing about the job.
            .filter(|line| !line.starts_with("Run '") && !line.starts_with("See '"))
            .collect();
        let from_engine = lines.iter().any(|line| {
            line.starts_with(&format!("{}: ", self.engine.name)) || line.starts_with("Error: ")
        });
        if !from_engine {
            return None;
        }
        let tail = &lines[lines.len().saturating_sub(3)..];
        Some(format!(
            "{} could not run image {} (exit {code}): {}",
            self.engine.name,
            self.image,
            tail.join(" / ")
        ))
    }
}

/// `vergence-<job id>`, with what container names cannot hold replaced;
/// a replaced name gets a digest of the id so that names stay apart.
fn container_name(job: &JobId) -> String {
    let id = job.as_str();
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    if safe == id {
        format!("vergence-{id}")
    } else {
        let digest = vergence_model::hashing::sha256_hex(id.as_bytes());
        format!("vergence-{safe}-{}", &digest[..8])
    }
}

/// `-v host:container[options]`.
fn mount(host: &Path, container: &str, options: &str) -> [OsString; 2] {
    let mut spec = host.as_os_str().to_owned();
    spec.push(":");
    spec.push(container);
    spec.push(options);
    ["-v".into(), spec]
}

fn container_working_dir(working_dir: &str) -> String {
    let relative = working_dir.trim_matches('/');
    if relative.is_empty() {
        CONTAINER_WORKSPACE.to_owned()
    } else {
        format!("{CONTAINER_WORKSPACE}/{relative}")
    }
}

/// A host path `-v` can mount: `:` separates its fields.
pub(crate) fn check_mountable(path: &Path) -> Result<(), String> {
    if path.as_os_str().as_encoded_bytes().contains(&b':') {
        Err(format!(
            "{} cannot be mounted into a container: its path contains ':'",
            path.display()
        ))
    } else {
        Ok(())
    }
}

/// The container's variables: the job's own, its secrets, the context
/// variables and the two directories, later ones winning as they do for a
/// process, so a job's own `env` cannot fake the context variables.
pub(crate) fn environment(
    job: &JobRecord,
    secrets: Vec<(String, OsString)>,
) -> BTreeMap<String, EnvValue> {
    let mut vars: BTreeMap<String, EnvValue> = job
        .spec
        .env
        .iter()
        .map(|(name, value)| (name.clone(), EnvValue::Plain(value.clone())))
        .collect();
    vars.extend(
        secrets
            .into_iter()
            .map(|(name, value)| (name, EnvValue::Secret(value))),
    );
    vars.extend(
        job.context_env()
            .into_iter()
            .map(|(name, value)| (name, EnvValue::Plain(value))),
    );
    // Both always exist in a container, as they do on every container
    // runner (see `vergence_container::Launch`).
    for (name, dir) in [
        (env::INPUT_DIR, CONTAINER_INPUT_DIR),
        (env::OUTPUT_DIR, CONTAINER_OUTPUT_DIR),
    ] {
        vars.insert(name.to_owned(), EnvValue::Plain(dir.to_owned()));
    }
    vars
}

fn signal_name(signal: Signal) -> &'static str {
    // `docker kill --signal` takes names without the SIG prefix.
    signal.as_str().trim_start_matches("SIG")
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    fn container(name: &'static str) -> Container {
        Container::new(
            Engine {
                name,
                program: PathBuf::from(format!("/usr/bin/{name}")),
            },
            &JobId("apply-1".into()),
            "hashicorp/terraform:1.9",
        )
    }

    #[test]
    fn container_names_are_the_job_id_made_safe() {
        assert_eq!(
            container_name(&JobId("apply-0123abcd".into())),
            "vergence-apply-0123abcd"
        );
        let odd = container_name(&JobId("apply/1 2".into()));
        assert!(odd.starts_with("vergence-apply-1-2-"), "{odd}");
        assert_ne!(odd, container_name(&JobId("apply-1-2".into())));
    }

    #[test]
    fn the_working_directory_is_under_the_mounted_workspace() {
        assert_eq!(container_working_dir(""), "/workspace");
        assert_eq!(container_working_dir("infra/prod"), "/workspace/infra/prod");
    }

    #[test]
    fn engine_failures_are_told_from_the_commands_own_exit_codes() {
        let docker = container("docker");
        let stderr = "Unable to find image 'nope:latest' locally\ndocker: Error response from daemon: pull access denied for nope\n\nRun 'docker run --help' for more information\n";
        assert_eq!(
            docker.engine_failure(125, stderr).as_deref(),
            Some(
                "docker could not run image hashicorp/terraform:1.9 (exit 125): Unable to find image 'nope:latest' locally / docker: Error response from daemon: pull access denied for nope"
            )
        );
        assert_eq!(docker.engine_failure(1, stderr), None);
        assert_eq!(docker.engine_failure(125, "my tool failed\n"), None);
        let podman = container("podman");
        assert!(
            podman
                .engine_failure(125, "Error: initializing source docker://nope:latest\n")
                .is_some()
        );
    }
}
