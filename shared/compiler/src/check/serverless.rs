//! Jobs of the local runner that a serverless deployment cannot start.
//! There, local jobs run inside the worker function, which has no
//! container engine and no config directory (a push sends only the
//! config's YAML and JSON files, and the worker's working directory is its
//! own). A job is found as the checker walks it, at the field that makes
//! it so; the errors are kept in the model and reported only for a
//! serverless deployment (`CompiledConfig::target_errors`), since `vergence
//! up` and `vergence serve` run local jobs where both are at hand.
//!
//! A local job cannot start in the worker when
//! - its program has an `image` (it runs in a container);
//! - its command names a file of the config directory (see
//!   [`command_files`](super::command_files));
//! - it runs in a directory below the top of the config: the local runner
//!   runs a job in the directory of the file that defines its runtime or
//!   protection, which the worker does not have.
//!
//! Only the first that applies is reported for each job: moving it to a
//! runner that runs images fixes all three. The lambda runner fixes the
//! last two (the function's package carries the files) but takes no
//! image, so only their messages name it.

use super::Checker;
use super::command_files::{NamedFile, config_files_named};
use super::field_path::FieldPath;
use crate::config::resolve_in;
use crate::config::schema::ProgramDoc;
use vergence_model::{LocalProgram, RuntimeName, Source};

/// Why the worker cannot give a local job what it needs.
const NO_CONTAINER_ENGINE: &str = "in a serverless deployment local jobs run inside the worker function, which has no container engine";
const NO_CONFIG_DIRECTORY: &str = "in a serverless deployment local jobs run inside the worker function, which has no config directory (a push sends only the config's YAML and JSON files)";
/// The runners a job in an image can move to.
const IMAGE_RUNNERS: &str = "ecs, cloudRun or kubernetes (through vergence-agent)";
/// Where a job that needs files can also go: the lambda runner takes no
/// image, but the function's package carries the files (a job there runs
/// in the function's working directory, where the package is unpacked).
const LAMBDA_PACKAGE: &str = "in a Lambda function's package and run the job on lambda";
const LAMBDA_FUNCTION: &str = "in a Lambda function on lambda";

/// A job of the local runner, as the checker sees it.
pub(super) struct LocalJob<'j> {
    /// "the apply of runtime deploy", for messages.
    pub(super) what: String,
    /// Where its program is written.
    pub(super) program_path: &'j FieldPath,
    pub(super) program: &'j ProgramDoc,
    /// Its working directory, relative to the config root.
    pub(super) dir: &'j str,
}

impl Checker<'_> {
    /// Keeps a local job's program for [`LocalProgram`] readers, and what
    /// stops it from starting in the serverless worker, if anything.
    pub(super) fn local_job(&mut self, source: &Source, job: &LocalJob<'_>) {
        let cmd = &job.program.cmd;
        let cmd_path = job.program_path.key("cmd");
        if let Some(program) = cmd.first() {
            self.local_programs.push(LocalProgram {
                program: program.clone(),
                in_container: job.program.image.is_some(),
                working_dir: job.dir.to_owned(),
                at: source.location(cmd_path.index(0)),
            });
        }
        let named = config_files_named(cmd, job.dir, &self.bundle.files);
        let error = if let Some(image) = &job.program.image {
            source.error(
                job.program_path.key("image"),
                in_container(&job.what, image),
            )
        } else if let Some(first) = named.first() {
            source.error(
                cmd_path.index(first.index),
                needs_files(&job.what, &named, job.dir),
            )
        } else if !job.dir.is_empty() {
            source.error(job.program_path, in_subdirectory(&job.what, job.dir))
        } else {
            return;
        };
        self.serverless_errors.push(error);
    }

    /// What stops a terraform runtime on the local runner from running in
    /// the serverless worker: an image, a module that is a directory of
    /// the config (at `module_path`), or a file below the top of the
    /// config. A module elsewhere (`/dir`, a source terraform downloads)
    /// needs only `terraform` on the worker's PATH, like any program
    /// named by its name.
    pub(super) fn local_terraform(
        &mut self,
        source: &Source,
        runtime: &RuntimeName,
        module: (&FieldPath, &str),
        image: Option<&str>,
        dir: &str,
    ) {
        let what = format!("runtime {runtime} runs terraform, which");
        let tf = FieldPath::root("runtime").key("terraform");
        let (module_path, module) = module;
        let error = if let Some(image) = image {
            source.error(tf.key("image"), in_container(&what, image))
        } else if module.starts_with("./") || module.starts_with("../") || module == "." {
            let resolved = resolve_in(dir, module)
                .map(|p| format!(" ({})", if p.is_empty() { "its top" } else { &p }))
                .unwrap_or_default();
            source.error(
                module_path,
                format!(
                    "runtime {runtime} plans its module {module}, a directory of the config{resolved}, on the local runner; {NO_CONFIG_DIRECTORY}: put the module in an image with terraform and vergence-wrapper, give its path there as module (/module), and run the runtime on {IMAGE_RUNNERS}"
                ),
            )
        } else if !dir.is_empty() {
            source.error(&tf, in_subdirectory(&what, dir))
        } else {
            return;
        };
        self.serverless_errors.push(error);
    }
}

fn in_container(what: &str, image: &str) -> String {
    format!(
        "{what} runs on the local runner, in a container of image {image}; {NO_CONTAINER_ENGINE}: run it on a runner that runs images: {IMAGE_RUNNERS}"
    )
}

fn needs_files(what: &str, named: &[NamedFile], dir: &str) -> String {
    let words: Vec<String> = named
        .iter()
        .map(|n| match resolve_in(dir, &n.word) {
            Some(path) if path != n.word.trim_start_matches("./") && !path.is_empty() => {
                format!("{} ({path})", n.word)
            }
            _ => n.word.clone(),
        })
        .collect();
    let (them, it) = if words.len() == 1 {
        ("a file", "it")
    } else {
        ("files", "them")
    };
    format!(
        "{what} runs on the local runner and needs {}, {them} of the config directory; {NO_CONFIG_DIRECTORY}: put {it} in an image and run the job on {IMAGE_RUNNERS}, or {LAMBDA_PACKAGE}",
        words.join(", ")
    )
}

fn in_subdirectory(what: &str, dir: &str) -> String {
    format!(
        "{what} runs on the local runner in {dir}/, the directory of the file that defines it; {NO_CONFIG_DIRECTORY}: define it in a file at the top of the config directory, or run it in an image on {IMAGE_RUNNERS}, or {LAMBDA_FUNCTION}"
    )
}
