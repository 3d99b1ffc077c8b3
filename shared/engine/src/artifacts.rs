//! Files of jobs (a fetch's plan) go with their jobs: a store that prunes
//! finished jobs (SQLite keeps the newest few per instance) would otherwise
//! keep every plan a polled fetch ever made, megabytes a day per instance.

use std::collections::HashSet;

use vergence_model::error::Result;
use vergence_model::ports::{ArtifactStore, InstanceFilter, StateStore};
use vergence_model::{Artifact, JobId};

/// Deletes the files of every job the store no longer has, except those a
/// decision may still hand to a job: the plan an instance keeps for its
/// apply (its fetch may be pruned long before the apply is approved) and
/// the inputs of a job in flight. Returns how many jobs' files went.
///
/// A job's record is written before the job runs, so files are never
/// written for a job the store does not have yet.
pub async fn prune_artifacts(
    store: &dyn StateStore,
    artifacts: &dyn ArtifactStore,
) -> Result<usize> {
    let with_files = artifacts.job_ids().await?;
    if with_files.is_empty() {
        return Ok(0);
    }
    let mut needed: HashSet<JobId> = HashSet::new();
    let mut note = |artifacts: &[Artifact]| {
        needed.extend(artifacts.iter().filter_map(|a| Artifact::job_of(&a.key)));
    };
    let mut in_flight = Vec::new();
    for record in store.list_instances(&InstanceFilter::default()).await? {
        if let Some(plan) = &record.state.plan {
            note(&plan.artifacts);
        }
        if let Some(flight) = &record.state.in_flight {
            in_flight.push(flight.job_id.clone());
        }
    }
    for id in &in_flight {
        if let Some(job) = store.get_job(id).await? {
            note(&job.inputs);
        }
    }
    needed.extend(in_flight);
    let mut deleted = 0;
    for job in with_files {
        if needed.contains(&job) || store.get_job(&job).await?.is_some() {
            continue;
        }
        artifacts.delete_job(&job).await?;
        deleted += 1;
    }
    Ok(deleted)
}
