//! The notifier's cursor, kept as a small JSON file in the artifact store:
//! `.vergence/artifacts/notifications/cursor.json` locally, the artifact
//! bucket in AWS (outside `jobs/`, which expires). Both deployments have
//! an artifact store already, so the cursor needs no table of its own.

use std::sync::Arc;

use async_trait::async_trait;
use vergence_model::notification::{NotificationCursor, NotificationCursorStore};
use vergence_model::ports::ArtifactStore;

use crate::NotifyError;

/// Where the cursor is kept in the artifact store.
pub const CURSOR_KEY: &str = "notifications/cursor.json";

#[derive(Clone)]
pub struct ArtifactCursorStore {
    artifacts: Arc<dyn ArtifactStore>,
}

impl std::fmt::Debug for ArtifactCursorStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ArtifactCursorStore({CURSOR_KEY})")
    }
}

impl ArtifactCursorStore {
    pub fn new(artifacts: Arc<dyn ArtifactStore>) -> Self {
        Self { artifacts }
    }
}

#[async_trait]
impl NotificationCursorStore for ArtifactCursorStore {
    async fn load(&self) -> vergence_model::Result<Option<NotificationCursor>> {
        let Some(bytes) = self.artifacts.get(CURSOR_KEY).await? else {
            return Ok(None);
        };
        let cursor =
            serde_json::from_slice(&bytes).map_err(|source| NotifyError::DecodeCursor {
                key: CURSOR_KEY.to_owned(),
                source,
            })?;
        Ok(Some(cursor))
    }

    async fn save(&self, cursor: &NotificationCursor) -> vergence_model::Result<()> {
        // Serialising a struct of strings and a timestamp cannot fail.
        let bytes = serde_json::to_vec(cursor).unwrap_or_default();
        self.artifacts.put(CURSOR_KEY, &bytes).await
    }
}
