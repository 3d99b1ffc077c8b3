//! Handing a job's result to the [`JobResultSink`], and holding on to it
//! until the sink takes it. A result is held (in memory, and in a file when
//! the runner has [`HeldResults`]) from the moment the job ends until it is
//! recorded: the engine asking about the job meanwhile gets it and records
//! it itself, and a process that ends first leaves it in a file for the
//! next one on the same state.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use vergence_model::ports::JobResultSink;
use vergence_model::{JobId, JobRecord, JobResult};

use crate::held::HeldResults;

/// Tries at recording a result on retryable errors, waiting 100 ms, then
/// twice as long each time (1.5 s in all).
const RECORD_ATTEMPTS: u32 = 5;
const RECORD_RETRY_FIRST_WAIT: Duration = Duration::from_millis(100);

/// After those, how long between further tries while the process lives.
const KEEP_TRYING_EVERY: Duration = Duration::from_secs(5);

/// A result not recorded yet.
#[derive(Debug)]
struct Held {
    job: JobRecord,
    result: JobResult,
    /// Why the sink refused it, once it did.
    error: Option<String>,
    /// The file it is kept in, or why no file would take it.
    kept: Option<Result<PathBuf, String>>,
}

pub(crate) struct Results {
    sink: Arc<dyn JobResultSink>,
    held: Mutex<HashMap<JobId, Held>>,
    files: Option<HeldResults>,
}

impl Results {
    pub(crate) fn new(sink: Arc<dyn JobResultSink>) -> Self {
        Self {
            sink,
            held: Mutex::default(),
            files: None,
        }
    }

    pub(crate) fn set_files(&mut self, files: HeldResults) {
        self.files = Some(files);
    }

    /// Hands a result to the sink, trying again on retryable errors.
    /// Returns whether it was recorded; if not, it stays held (and kept in
    /// a file, where there are folders for that) for [`Results::keep_trying`],
    /// for the engine's next question about the job, and for the next
    /// process.
    pub(crate) async fn deliver(&self, job: &JobRecord, result: JobResult) -> bool {
        // Held before the first try: the engine, stepped when a try fails,
        // asks the runner and must find the result, not a running job.
        self.lock().insert(
            job.id.clone(),
            Held {
                job: job.clone(),
                result: result.clone(),
                error: None,
                kept: None,
            },
        );
        let mut wait = RECORD_RETRY_FIRST_WAIT;
        for attempt in 1..=RECORD_ATTEMPTS {
            match self.sink.job_finished(job, result.clone()).await {
                Ok(()) => {
                    self.forget(&job.id);
                    return true;
                }
                Err(e) => {
                    self.refused(job, &result, &e.to_string());
                    if e.is_retryable() && attempt < RECORD_ATTEMPTS {
                        tracing::debug!(job = %job.id, attempt, error = %e, "recording a local job's result failed; trying again");
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    } else {
                        tracing::warn!(job = %job.id, kind = %job.kind, error = %e, kept = %self.where_kept(&job.id), "cannot record a local job's result; held until it can be");
                        return false;
                    }
                }
            }
        }
        false
    }

    /// Tries to record a held result every few seconds until it is recorded
    /// (by this, or by the engine, which got it when it asked). For as long
    /// as the process lives; a process that ends leaves it in its file.
    pub(crate) async fn keep_trying(self: Arc<Self>, id: JobId) {
        loop {
            tokio::time::sleep(KEEP_TRYING_EVERY).await;
            let Some((job, result)) = self.held(&id) else {
                return;
            };
            match self.sink.job_finished(&job, result.clone()).await {
                Ok(()) => {
                    tracing::info!(job = %id, "recorded a local job's result that was held");
                    self.forget(&id);
                    return;
                }
                Err(e) => self.refused(&job, &result, &e.to_string()),
            }
        }
    }

    /// The held result of `id`, if any: in memory, or else in a file a
    /// process that ended left (taken in hand then, to be recorded).
    pub(crate) fn result_of(
        self: &Arc<Self>,
        job: &JobRecord,
        from_files: bool,
    ) -> Option<JobResult> {
        if let Some((_, result)) = self.held(&job.id) {
            return Some(result);
        }
        if !from_files {
            return None;
        }
        let (path, file) = self.files.as_ref()?.find(&job.id)?;
        tracing::info!(job = %job.id, file = %path.display(), "found the result of a job whose vergence process ended before recording it");
        self.lock().insert(
            job.id.clone(),
            Held {
                job: file.job,
                result: file.result.clone(),
                error: Some(file.error),
                kept: Some(Ok(path)),
            },
        );
        // Recorded by the engine that asked, most likely; then this finds
        // it recorded and removes the file.
        tokio::spawn(Arc::clone(self).keep_trying(job.id.clone()));
        Some(file.result)
    }

    /// Records every result a process that ended left in a file. Fails with
    /// the store's error when the state still refuses one; it stays kept.
    pub(crate) async fn recover(&self) -> vergence_model::Result<usize> {
        let Some(files) = &self.files else {
            return Ok(0);
        };
        let mut recorded = 0;
        for (path, file) in files.all() {
            if self.lock().contains_key(&file.job.id) {
                continue;
            }
            self.sink.job_finished(&file.job, file.result).await?;
            tracing::info!(job = %file.job.id, file = %path.display(), "recorded a job result kept by a vergence process that ended");
            files.forget(&file.job.id);
            recorded += 1;
        }
        Ok(recorded)
    }

    /// One last try at every held result; then a sentence for each that is
    /// still not recorded, saying where it is kept.
    pub(crate) async fn flush(&self) -> Vec<String> {
        let ids: Vec<JobId> = self.lock().keys().cloned().collect();
        let mut said = Vec::new();
        for id in ids {
            let Some((job, result)) = self.held(&id) else {
                continue;
            };
            match self.sink.job_finished(&job, result.clone()).await {
                Ok(()) => self.forget(&id),
                Err(e) => {
                    self.refused(&job, &result, &e.to_string());
                    said.push(self.describe(&id));
                }
            }
        }
        said
    }

    /// How many results are held.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn held(&self, id: &JobId) -> Option<(JobRecord, JobResult)> {
        self.lock()
            .get(id)
            .map(|held| (held.job.clone(), held.result.clone()))
    }

    /// Notes the sink's refusal, and keeps the result in a file the first
    /// time (or again, when no file would take it before).
    fn refused(&self, job: &JobRecord, result: &JobResult, error: &str) {
        let needs_file = self
            .lock()
            .get(&job.id)
            .is_some_and(|held| !matches!(held.kept, Some(Ok(_))));
        let kept = match (&self.files, needs_file) {
            (Some(files), true) => Some(files.keep(job, result, error)),
            _ => None,
        };
        if let Some(held) = self.lock().get_mut(&job.id) {
            held.error = Some(error.to_owned());
            if kept.is_some() {
                held.kept = kept;
            }
        }
    }

    fn forget(&self, id: &JobId) {
        let kept = self.lock().remove(id).and_then(|held| held.kept);
        if let (Some(files), Some(Ok(_))) = (&self.files, kept) {
            files.forget(id);
        }
    }

    fn where_kept(&self, id: &JobId) -> String {
        match self.lock().get(id).and_then(|held| held.kept.clone()) {
            Some(Ok(path)) => path.display().to_string(),
            Some(Err(why)) => format!("in memory only ({why})"),
            None => "in memory only".to_owned(),
        }
    }

    /// What became of a held result, for the user of a process that ends.
    fn describe(&self, id: &JobId) -> String {
        let held = self.lock();
        let Some(held) = held.get(id) else {
            return String::new();
        };
        let what = format!(
            "the result of the {} of {} {} (job {}; it {})",
            held.job.kind,
            held.job.instance,
            held.job.version,
            id,
            held.result.describe()
        );
        let error = held.error.as_deref().unwrap_or("not recorded yet");
        match &held.kept {
            Some(Ok(path)) => format!(
                "{what} could not be recorded ({error}); it is kept in {}, and the next `vergence up` records it",
                path.display()
            ),
            Some(Err(why)) => format!(
                "{what} could not be recorded ({error}) nor kept in a file ({why}): it is lost when this process ends"
            ),
            None => {
                format!("{what} could not be recorded ({error}): it is lost when this process ends")
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<JobId, Held>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
