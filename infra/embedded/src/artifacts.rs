//! The embedded artifact store: files handed between jobs (plans) kept in a
//! directory next to the state file, one file per key.

use std::path::{Component, Path, PathBuf};

use async_trait::async_trait;
use vergence_model::JobId;
use vergence_model::ports::ArtifactStore;

use crate::error::EmbeddedError;

type Result<T> = vergence_model::Result<T>;

/// Artifacts under one directory (`.vergence/artifacts` beside the state).
#[derive(Clone, Debug)]
pub struct DirArtifactStore {
    root: PathBuf,
}

impl DirArtifactStore {
    /// A store under `root`, created on the first write.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The file of `key`. Keys are relative paths made by Vergence
    /// (`jobs/<job>/outputs/<name>`); anything that could leave the root is
    /// refused rather than trusted.
    fn path_of(&self, key: &str) -> std::result::Result<PathBuf, EmbeddedError> {
        let relative = Path::new(key);
        let plain = !key.is_empty()
            && relative
                .components()
                .all(|c| matches!(c, Component::Normal(_)));
        if !plain {
            return Err(EmbeddedError::Artifact {
                key: key.to_owned(),
                message: "not a relative path inside the artifact store".to_owned(),
            });
        }
        Ok(self.root.join(relative))
    }
}

fn io_error(key: &str, e: &std::io::Error) -> EmbeddedError {
    EmbeddedError::Artifact {
        key: key.to_owned(),
        message: e.to_string(),
    }
}

#[async_trait]
impl ArtifactStore for DirArtifactStore {
    async fn put(&self, key: &str, content: &[u8]) -> Result<()> {
        let path = self.path_of(key)?;
        if let Some(dir) = path.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| io_error(key, &e))?;
        }
        // Written aside and renamed, so a reader never sees half a file.
        let partial = path.with_extension("partial");
        tokio::fs::write(&partial, content)
            .await
            .map_err(|e| io_error(key, &e))?;
        tokio::fs::rename(&partial, &path)
            .await
            .map_err(|e| io_error(key, &e))?;
        Ok(())
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path_of(key)?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(key, &e).into()),
        }
    }

    async fn job_ids(&self) -> Result<Vec<JobId>> {
        let dir = self.root.join("jobs");
        let mut entries = match tokio::fs::read_dir(&dir).await {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_error("jobs", &e).into()),
        };
        let mut ids = Vec::new();
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(|e| io_error("jobs", &e))?
        {
            if let Some(name) = entry.file_name().to_str() {
                ids.push(JobId(name.into()));
            }
        }
        Ok(ids)
    }

    async fn delete_job(&self, job: &JobId) -> Result<()> {
        let key = format!("jobs/{job}");
        let dir = self.path_of(&key)?;
        match tokio::fs::remove_dir_all(&dir).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_error(&key, &e).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stores_and_reads_back_bytes_and_refuses_keys_outside_its_root() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirArtifactStore::new(dir.path().join("artifacts"));
        store
            .put("jobs/fetch-1/outputs/plan", b"\x00plan\xff")
            .await
            .unwrap();
        assert_eq!(
            store.get("jobs/fetch-1/outputs/plan").await.unwrap(),
            Some(b"\x00plan\xff".to_vec())
        );
        assert_eq!(store.get("jobs/none/outputs/plan").await.unwrap(), None);
        for bad in ["../escape", "/etc/passwd", "jobs/../../x", ""] {
            assert!(store.put(bad, b"x").await.is_err(), "{bad}");
            assert!(store.get(bad).await.is_err(), "{bad}");
        }
    }
}
