//! Everything a job needs before it starts, checked before anything runs:
//! its command, timeout, working directory, secrets and files, and the
//! command that starts it — the program itself, or the container engine
//! when the program names an image.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use jiff::SignedDuration;
use tokio::process::Command;
use vergence_container::env;
use vergence_model::ports::ArtifactStore;
use vergence_model::{JobRecord, SecretMask, SecretRef};

use crate::artifacts::JobFiles;
use crate::container::{self, Container, ContainerRun};
use crate::engine::EngineLookup;

/// A job ready to start. Deliberately not `Debug`: the command's
/// environment holds secret values.
pub(crate) struct Prepared {
    /// What is started, for messages: the program as written, or the
    /// container engine.
    pub(crate) starter: String,
    /// The working directory on this machine, for messages.
    pub(crate) dir: PathBuf,
    pub(crate) command: Command,
    pub(crate) timeout: Duration,
    /// Set when the job runs in a container.
    pub(crate) container: Option<Container>,
    /// Held so the inputs exist until the job ends, and the outputs can be
    /// read after.
    pub(crate) files: JobFiles,
    /// The secret values handed to the job, masked in what it prints.
    pub(crate) secrets: SecretMask,
}

impl Prepared {
    pub(crate) async fn new(
        job: &JobRecord,
        artifacts: &dyn ArtifactStore,
        engines: &EngineLookup,
    ) -> Result<Self, String> {
        let (program, args) = job
            .spec
            .cmd
            .split_first()
            .ok_or_else(|| "the job has no command to run".to_owned())?;
        let timeout = positive_timeout(job.spec.timeout)?;
        let (root, dir) = working_dir(job).await?;
        let secrets = resolve_secrets(&job.spec.secret_env)?;
        let mask = SecretMask::new(secrets.iter().map(|(_, value)| value.to_string_lossy()));
        let (starter, mut command, container, files) = match &job.spec.image {
            None => {
                let files = JobFiles::create(&job.inputs, artifacts, false).await?;
                let env = process_environment(job, secrets, &files);
                let mut command = Command::new(resolve_program(program, &dir));
                // Inherited from a parent that is itself a job, it would point
                // at that job's inputs; it is set again when this job has any.
                command.env_remove(env::INPUT_DIR);
                command.args(args).current_dir(&dir).envs(env);
                (program.clone(), command, None, files)
            }
            Some(image) => {
                let engine = engines.find(job.kind.as_str(), image)?;
                container::check_mountable(&root)?;
                let files = JobFiles::create(&job.inputs, artifacts, true).await?;
                let container = Container::new(engine, &job.id, image);
                let env = container::environment(job, secrets);
                let command = container.run_command(&ContainerRun {
                    workspace: &root,
                    working_dir: &job.spec.working_dir,
                    files: &files,
                    env: &env,
                    program,
                    args,
                });
                let starter = container.engine.name.to_owned();
                (starter, command, Some(container), files)
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A group of its own, so a timeout reaches every process it starts.
            .process_group(0);
        Ok(Self {
            starter,
            dir,
            command,
            timeout,
            container,
            files,
            secrets: mask,
        })
    }
}

fn positive_timeout(timeout: SignedDuration) -> Result<Duration, String> {
    match Duration::try_from(timeout) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(format!("the job's timeout ({timeout:#}) is not positive")),
    }
}

/// `workspace_root` (or the current directory), and the job's working
/// directory in it, which must exist: otherwise spawning would fail with an
/// error that reads as if the program were missing.
async fn working_dir(job: &JobRecord) -> Result<(PathBuf, PathBuf), String> {
    let root = match &job.workspace_root {
        Some(root) => PathBuf::from(root),
        None => std::env::current_dir()
            .map_err(|e| format!("cannot determine the current directory: {e}"))?,
    };
    let dir = if job.spec.working_dir.is_empty() {
        root.clone()
    } else {
        root.join(&job.spec.working_dir)
    };
    match tokio::fs::metadata(&dir).await {
        Ok(meta) if meta.is_dir() => Ok((root, dir)),
        Ok(_) => Err(format!(
            "working directory {} is not a directory",
            dir.display()
        )),
        Err(e) => Err(format!(
            "cannot use working directory {}: {e}",
            dir.display()
        )),
    }
}

/// A program with a '/' is a path relative to the working directory (or
/// absolute); resolving it here avoids depending on whether the platform
/// resolves it against the parent's or the child's directory. A bare name
/// is looked up on PATH.
fn resolve_program(program: &str, dir: &Path) -> PathBuf {
    if program.contains('/') {
        dir.join(program)
    } else {
        PathBuf::from(program)
    }
}

/// Secret values, resolved at run time. Messages name variables only.
fn resolve_secrets(
    secret_env: &BTreeMap<String, SecretRef>,
) -> Result<Vec<(String, OsString)>, String> {
    secret_env
        .iter()
        .map(|(name, source)| match source {
            SecretRef::FromEnv(var) => std::env::var_os(var)
                .map(|value| (name.clone(), value))
                .ok_or_else(|| {
                    format!(
                        "secret {name} comes from environment variable {var}, which is not set where the local runner runs"
                    )
                }),
            other => Err(format!(
                "secret {name} comes from {}, which only the {} runner reads; the local runner reads secrets from its environment (fromEnv)",
                other.describe(),
                other.read_by()
            )),
        })
        .collect()
}

/// The variables added to the inherited environment of a process, in
/// order: later entries win, so a job's own `env` cannot fake the context
/// variables.
fn process_environment(
    job: &JobRecord,
    secrets: Vec<(String, OsString)>,
    files: &JobFiles,
) -> Vec<(String, OsString)> {
    let mut vars: Vec<(String, OsString)> = job
        .spec
        .env
        .iter()
        .map(|(name, value)| (name.clone(), value.into()))
        .collect();
    vars.extend(secrets);
    vars.extend(
        job.context_env()
            .into_iter()
            .map(|(name, value)| (name, value.into())),
    );
    vars.push((env::OUTPUT_DIR.to_owned(), files.output.clone().into()));
    if let Some(dir) = &files.input {
        vars.push((env::INPUT_DIR.to_owned(), dir.clone().into()));
    }
    vars
}
