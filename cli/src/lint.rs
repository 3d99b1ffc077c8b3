//! Warnings about configs that are valid but will not run as written: a
//! job's program named as a bare word (`cmd: [apply.sh]`) while the job's
//! directory has a file of that name. The program is looked up on PATH,
//! not in the config directory: locally, when it is not on PATH, the job
//! fails with "No such file or directory" and `./apply.sh` is what was
//! meant; in a serverless deployment the worker's PATH is searched, and
//! the config directory's file never reaches it. The compiler says where
//! each program is written; only this command can look at the directory.

use std::path::Path;

use vergence_model::ports::CompiledConfig;
use vergence_model::{DeploymentTarget, LocalProgram};

/// One line per bare program found, naming the file and line that says it.
pub fn bare_scripts(
    model: &dyn CompiledConfig,
    dir: &Path,
    target: DeploymentTarget,
) -> Vec<String> {
    model
        .local_programs()
        .into_iter()
        .filter(|p| is_bare(p) && dir.join(&p.working_dir).join(&p.program).is_file())
        .filter_map(|p| warning(&p, target))
        .collect()
}

/// A process (not a container) whose program has no directory part.
fn is_bare(program: &LocalProgram) -> bool {
    let name = &program.program;
    !program.in_container && !name.is_empty() && !name.contains(['/', '{'])
}

fn warning(p: &LocalProgram, target: DeploymentTarget) -> Option<String> {
    let program = &p.program;
    let file = if p.working_dir.is_empty() {
        program.clone()
    } else {
        format!("{}/{program}", p.working_dir)
    };
    match target {
        DeploymentTarget::Local => (!on_path(program)).then(|| {
            format!(
                "warning: {}: {program} is not on PATH, and the config directory has {file}: write ./{program} to run it",
                p.at
            )
        }),
        DeploymentTarget::Serverless => Some(format!(
            "warning: {}: {program} is looked up on the PATH of the serverless worker, which the config directory's {file} does not reach: put it in an image and run the job on ecs, cloudRun or kubernetes (through vergence-agent)",
            p.at
        )),
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}
