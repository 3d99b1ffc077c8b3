//! Warnings about configs that are valid but will not run as written here:
//! a job's program named as a bare word (`cmd: [apply.sh]`) that is not on
//! PATH while the config directory has a file of that name. The process
//! would be looked up on PATH and fail with "No such file or directory";
//! `./apply.sh` is what was meant.

use std::collections::BTreeSet;
use std::path::Path;

use vergence_model::ports::CompiledConfig;
use vergence_model::{ConfigBundle, Desired, JobSpec, ProtectionCheck, RunnerSpec};

/// One line per bare program found, naming the file and line that says it.
pub fn bare_scripts(model: &dyn CompiledConfig, bundle: &ConfigBundle, dir: &Path) -> Vec<String> {
    let mut programs = BTreeSet::new();
    for (application, service) in model.services() {
        let Ok(instances) = model.compile_service(&application, &service, None) else {
            continue;
        };
        for (_, desired) in instances {
            if let Desired::Ready(spec) = desired {
                let jobs = [Some(&spec.apply.job), spec.fetch.as_ref().map(|f| &f.job)]
                    .into_iter()
                    .chain([spec.get_info.as_ref().map(|g| &g.job)])
                    .flatten()
                    .chain(spec.protections.iter().filter_map(|p| match &p.check {
                        ProtectionCheck::Job { job } => Some(job.as_ref()),
                        ProtectionCheck::Alert { .. } => None,
                    }));
                programs.extend(jobs.filter_map(bare_local_program));
            }
        }
    }
    programs
        .into_iter()
        .filter(|program| dir.join(program).is_file() && !on_path(program))
        .map(|program| {
            format!(
                "warning: {}cmd names {program}, which is not on PATH; the config directory has {program}: write ./{program} to run it",
                written_at(bundle, &program)
                    .map(|at| format!("{at}: "))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// The program of a local process job when it has no directory part.
fn bare_local_program(job: &JobSpec) -> Option<String> {
    let program = job.cmd.first()?;
    let local = matches!(job.runner, RunnerSpec::Local) && job.image.is_none();
    (local && !program.is_empty() && !program.contains('/')).then(|| program.clone())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// `file:line` of the first `cmd` line that names `program`.
fn written_at(bundle: &ConfigBundle, program: &str) -> Option<String> {
    bundle.files.iter().find_map(|(file, text)| {
        text.lines()
            .position(|line| line.contains("cmd") && line.contains(program))
            .map(|index| format!("{file}:{}", index + 1))
    })
}
