//! Files handed between jobs: input artifacts fetched from the artifact
//! store into a job's `VERGENCE_INPUT_DIR` before it starts, and the outputs
//! it declares read back from its `VERGENCE_OUTPUT_DIR` and kept in the
//! store after it ends. In a container both directories are mounted.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use vergence_model::ports::ArtifactStore;
use vergence_model::{Artifact, JobId, SecretMask};

/// Largest output kept: a plan, not a build artifact.
pub(crate) const MAX_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;

/// A job's files: a fresh private directory, removed when this is dropped,
/// holding the directory the job writes its outputs to and, when it has
/// any, the one its inputs are in.
pub(crate) struct JobFiles {
    _root: TempDir,
    pub(crate) output: PathBuf,
    pub(crate) input: Option<PathBuf>,
}

impl JobFiles {
    /// Creates the directories and writes the inputs. With `for_container`
    /// the input directory exists even without inputs, and both are open to
    /// every user: a container may run as any user, and the private
    /// directory around them still keeps other users of this machine out.
    pub(crate) async fn create(
        inputs: &[Artifact],
        store: &dyn ArtifactStore,
        for_container: bool,
    ) -> Result<Self, String> {
        let root = tempfile::Builder::new()
            .prefix("vergence-job-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        // A process without inputs writes its outputs into the private
        // directory itself: one directory fewer to make and remove for
        // most jobs (docs/performance.md: making them was 12% of an idle
        // local rerun's time).
        if inputs.is_empty() && !for_container {
            let output = root.path().to_owned();
            return Ok(Self {
                _root: root,
                output,
                input: None,
            });
        }
        let output = root.path().join("output");
        create_dir(&output, for_container.then_some(0o777)).await?;
        let input = root.path().join("input");
        create_dir(&input, for_container.then_some(0o755)).await?;
        write_inputs(&input, inputs, store).await?;
        Ok(Self {
            _root: root,
            output,
            input: Some(input),
        })
    }
}

async fn create_dir(path: &Path, mode: Option<u32>) -> Result<(), String> {
    tokio::fs::create_dir(path)
        .await
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    if let Some(mode) = mode {
        // Set after creating: the umask would narrow a mode given at creation.
        tokio::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .await
            .map_err(|e| format!("cannot open {} to the container: {e}", path.display()))?;
    }
    Ok(())
}

/// Writes each input into `dir` as a file named after it.
async fn write_inputs(
    dir: &Path,
    inputs: &[Artifact],
    store: &dyn ArtifactStore,
) -> Result<(), String> {
    for input in inputs {
        check_file_name(&input.name).map_err(|why| format!("input artifact {why}"))?;
        let content = store
            .get(&input.key)
            .await
            .map_err(|e| format!("cannot read input artifact {}: {e}", input.name))?
            .ok_or_else(|| {
                format!(
                    "input artifact {} is no longer in the artifact store (expired or deleted); the fetch that made it must run again",
                    input.name
                )
            })?;
        // An approval was given for this exact content.
        if vergence_model::hashing::sha256_hex(&content) != input.sha256 {
            return Err(format!(
                "input artifact {} changed in the artifact store since it was made; refusing to run with it",
                input.name
            ));
        }
        let path = dir.join(&input.name);
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| format!("cannot write input artifact {}: {e}", input.name))?;
    }
    Ok(())
}

/// Reads the declared outputs present in `dir` and keeps them in the
/// store, text files with the job's secrets masked. Outputs the job did not
/// write are simply absent; problems with the others are added to `notes`.
pub(crate) async fn collect_outputs(
    dir: &Path,
    job: &JobId,
    names: &[String],
    store: &dyn ArtifactStore,
    secrets: &SecretMask,
    notes: &mut Vec<String>,
) -> Vec<Artifact> {
    let mut artifacts = Vec::new();
    for name in names {
        if let Err(why) = check_file_name(name) {
            notes.push(format!("output {why}; it was ignored"));
            continue;
        }
        match read_capped(&dir.join(name)).await {
            Ok(Some(bytes)) => {
                let bytes = masked(bytes, secrets);
                let key = Artifact::output_key(job, name);
                match store.put(&key, &bytes).await {
                    Ok(()) => artifacts.push(Artifact::of(name.as_str(), key, &bytes)),
                    Err(e) => notes.push(format!("output {name} could not be kept: {e}")),
                }
            }
            Ok(None) => {
                notes.push(format!("output {name} larger than 4 MiB was dropped"));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::debug!(output = %name, "declared output was not written");
            }
            Err(e) => notes.push(format!("output {name} could not be read: {e}")),
        }
    }
    artifacts
}

/// A text output with the job's secret values masked, as in what it
/// prints: a plan is stored, shown (`status --service`) and approved by
/// its digest, so a value in it would be kept and shown like output. The
/// apply is handed the masked file; it gets the secrets it needs from its
/// own environment. Files that are not UTF-8 (a Terraform plan is a zip)
/// are kept as they are: masking bytes would break them.
fn masked(bytes: Vec<u8>, secrets: &SecretMask) -> Vec<u8> {
    if secrets.is_empty() {
        return bytes;
    }
    match String::from_utf8(bytes) {
        Ok(mut text) => {
            secrets.apply_in_place(&mut text);
            text.into_bytes()
        }
        Err(not_text) => not_text.into_bytes(),
    }
}

/// The file's content, or `None` when it is larger than [`MAX_OUTPUT_BYTES`].
/// Reads at most one byte past the limit, so a huge file costs nothing.
async fn read_capped(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = tokio::fs::File::open(path).await?;
    let mut bytes = Vec::new();
    file.take(MAX_OUTPUT_BYTES + 1)
        .read_to_end(&mut bytes)
        .await?;
    let too_large = u64::try_from(bytes.len()).map_or(true, |len| len > MAX_OUTPUT_BYTES);
    Ok((!too_large).then_some(bytes))
}

/// Artifact names become file names in a directory the job shares with
/// nothing else; a name with a path in it could write or read elsewhere.
fn check_file_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        Err(format!("name {name:?} is not a plain file name"))
    } else {
        Ok(())
    }
}
