//! Files handed between jobs: input artifacts fetched from the artifact
//! store into a job's `VERGENCE_INPUT_DIR` before it starts, and the outputs
//! it declares read back from its `VERGENCE_OUTPUT_DIR` and kept in the
//! store after it ends.

use std::path::Path;

use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use vergence_model::ports::ArtifactStore;
use vergence_model::{Artifact, JobId};

/// Largest output kept: a plan, not a build artifact.
pub(crate) const MAX_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;

/// A fresh, private directory, removed when the returned value is dropped.
pub(crate) fn temp_dir(prefix: &str) -> Result<TempDir, String> {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))
}

/// Writes each input into a new directory as a file named after it; `None`
/// when there are no inputs.
pub(crate) async fn write_inputs(
    inputs: &[Artifact],
    store: &dyn ArtifactStore,
) -> Result<Option<TempDir>, String> {
    if inputs.is_empty() {
        return Ok(None);
    }
    let dir = temp_dir("vergence-input-")?;
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
        let path = dir.path().join(&input.name);
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| format!("cannot write input artifact {}: {e}", input.name))?;
    }
    Ok(Some(dir))
}

/// Reads the declared outputs present in `dir` and keeps them in the
/// store. Outputs the job did not write are simply absent; problems with
/// the others are added to `notes`.
pub(crate) async fn collect_outputs(
    dir: &Path,
    job: &JobId,
    names: &[String],
    store: &dyn ArtifactStore,
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
