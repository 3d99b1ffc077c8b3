//! Embedded adapters: the one-file SQLite [`SqliteStore`], the in-process
//! [`LocalQueue`], the [`DirArtifactStore`] for files handed between jobs,
//! and the [`Driver`] that runs the engine over them on one
//! machine (what `vergence up` and `vergence serve` use).

mod artifacts;
mod driver;
mod error;
mod queue;
mod sqlite;

pub use artifacts::DirArtifactStore;
pub use driver::{DriveMode, Driver, Progress};
pub use error::EmbeddedError;
pub use queue::LocalQueue;
pub use sqlite::{FINISHED_JOBS_KEPT, SqliteStore};

#[cfg(test)]
mod conformance {
    use std::sync::Arc;

    use super::SqliteStore;

    vergence_model::store_conformance_tests!(async {
        Arc::new(SqliteStore::in_memory().expect("in-memory store"))
    });
}
