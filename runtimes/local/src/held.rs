//! Results of jobs that ran but that the state would not take (a full disk,
//! a store gone away), kept in files until they are recorded. A result
//! thrown away makes its job run again: an apply-only runtime would apply
//! twice, and a successful apply could be counted as lost and rolled back.
//!
//! The first folder tried is beside the state file; when it cannot be
//! written (the disk that refused the result is full), folders on other
//! file systems are: `$XDG_STATE_HOME` (or `~/.local/state`), then the
//! temporary folder, each under a name derived from the state file's path,
//! so that the next process on the same state finds them.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use vergence_model::{JobId, JobRecord, JobResult};

/// Where held results of one state are kept, best first.
#[derive(Clone, Debug)]
pub struct HeldResults {
    dirs: Vec<PathBuf>,
}

/// One held result as it is written.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HeldFile {
    pub(crate) job: JobRecord,
    pub(crate) result: JobResult,
    /// Why it was not recorded, for whoever opens the file.
    pub(crate) error: String,
}

impl HeldResults {
    /// The folders for the state file at `state`: `<state>.held/` beside it,
    /// then folders elsewhere named after its absolute path.
    pub fn for_state(state: &Path) -> Self {
        let absolute = std::path::absolute(state).unwrap_or_else(|_| state.to_path_buf());
        let name = absolute
            .file_name()
            .map_or_else(|| "state".to_owned(), |n| n.to_string_lossy().into_owned());
        let beside = absolute.with_file_name(format!("{name}.held"));
        let digest = vergence_model::hashing::sha256_hex(absolute.as_os_str().as_encoded_bytes());
        let tag = &digest[..16];
        let mut dirs = vec![beside];
        let xdg = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".local/state")));
        if let Some(xdg) = xdg {
            dirs.push(xdg.join("vergence").join("held").join(tag));
        }
        // Per user: another user's folder of that name is not writable.
        let user = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m).to_string())
            .unwrap_or_else(|_| std::env::var("USER").unwrap_or_default());
        dirs.push(
            std::env::temp_dir()
                .join(format!("vergence-held-{user}"))
                .join(tag),
        );
        Self { dirs }
    }

    /// Exactly these folders, best first.
    pub fn in_dirs(dirs: Vec<PathBuf>) -> Self {
        Self { dirs }
    }

    /// Writes the result to the first folder that takes it and returns the
    /// file; or why none did.
    pub(crate) fn keep(
        &self,
        job: &JobRecord,
        result: &JobResult,
        error: &str,
    ) -> Result<PathBuf, String> {
        let held = HeldFile {
            job: job.clone(),
            result: result.clone(),
            error: error.to_owned(),
        };
        let bytes = serde_json::to_vec(&held).map_err(|e| format!("cannot encode it: {e}"))?;
        let name = file_name(&job.id);
        let mut failures = Vec::new();
        for dir in &self.dirs {
            let path = dir.join(&name);
            match write_whole(dir, &path, &bytes) {
                Ok(()) => return Ok(path),
                Err(e) => failures.push(format!("{}: {e}", path.display())),
            }
        }
        Err(failures.join("; "))
    }

    /// The held result of `job` and its file, if one is kept.
    pub(crate) fn find(&self, job: &JobId) -> Option<(PathBuf, HeldFile)> {
        let name = file_name(job);
        self.dirs.iter().find_map(|dir| {
            let path = dir.join(&name);
            read(&path)
                .filter(|held| &held.job.id == job)
                .map(|held| (path, held))
        })
    }

    /// Every held result, with its file.
    pub(crate) fn all(&self) -> Vec<(PathBuf, HeldFile)> {
        let mut found = Vec::new();
        for dir in &self.dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "json")
                    && let Some(held) = read(&path)
                {
                    found.push((path, held));
                }
            }
        }
        found
    }

    /// Removes every file kept for `job` (it was recorded).
    pub(crate) fn forget(&self, job: &JobId) {
        let name = file_name(job);
        for dir in &self.dirs {
            let path = dir.join(&name);
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    // The folder goes with its last file; one still in use stays.
                    let _ = std::fs::remove_dir(dir);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "cannot remove a job result that was recorded")
                }
            }
        }
    }
}

/// A file name for the job: its id where that is a plain name.
fn file_name(job: &JobId) -> String {
    let id = job.as_str();
    let plain = !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !id.starts_with('.');
    if plain {
        format!("{id}.json")
    } else {
        let digest = vergence_model::hashing::sha256_hex(id.as_bytes());
        format!("job-{}.json", &digest[..24])
    }
}

/// Writes the whole file or none of it: a half-written file on a full disk
/// would be read as damaged.
fn write_whole(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let partial = path.with_extension("json.partial");
    let written = (|| {
        let mut file = std::fs::File::create(&partial)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&partial, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    written
}

fn read(path: &Path) -> Option<HeldFile> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "cannot read a kept job result");
            return None;
        }
    };
    match serde_json::from_slice(&bytes) {
        Ok(held) => Some(held),
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "a kept job result is damaged; left as it is");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn file_names_are_plain_whatever_the_job_id() {
        assert_eq!(file_name(&JobId("apply-1.a_b".into())), "apply-1.a_b.json");
        let odd = file_name(&JobId("../x/y".into()));
        assert!(odd.starts_with("job-") && !odd.contains('/'), "{odd}");
    }

    #[test]
    fn the_first_folder_is_beside_the_state_and_the_others_are_named_after_it() {
        let a = HeldResults::for_state(Path::new("/srv/a/state.db"));
        let b = HeldResults::for_state(Path::new("/srv/b/state.db"));
        assert_eq!(a.dirs[0], Path::new("/srv/a/state.db.held"));
        assert!(a.dirs.len() >= 2);
        assert_ne!(a.dirs.last(), b.dirs.last());
    }
}
