//! Jobs: recorded with their instance's commit, claimed once, finished once.
//!
//! The job's state lives in its own attributes beside the body written at
//! creation, so claiming and finishing update a few attributes under a
//! condition instead of rewriting the (possibly large) record.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;
use jiff::{SignedDuration, Timestamp};

use vergence_model::ports::JobStore;
use vergence_model::{JobHandle, JobId, JobRecord, JobResult, JobState};

use super::payload::payload;
use super::write::{Expression, Outcome, Write};
use super::{DynamoStore, Item, get_attr, get_s, key, n, s, table};
use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

const BODY: &str = "body";
const INSTANCE: &str = "instance";
const STATE: &str = "state";
const DISPATCHED_AT: &str = "dispatched_at";
const HANDLE: &str = "handle";
const RESULT: &str = "result";
/// A random token per claim or finish call. The SDK sends a retried call
/// byte for byte again, so a retry of a write that did land (its response
/// was lost) finds its own token and counts as written, instead of failing
/// its condition and reading as someone else's claim or result.
const CLAIM_TOKEN: &str = "claim_token";
const FINISH_TOKEN: &str = "finish_token";

const CREATED: &str = "created";
const DISPATCHED: &str = "dispatched";
const FINISHED: &str = "finished";

const JOB_SK: &str = "job";

fn job_pk(id: &JobId) -> String {
    format!("job#{id}")
}

/// The TTL attribute of a record that may go `retention` after `from`.
pub(super) fn expiry(from: Timestamp, retention: SignedDuration) -> AttributeValue {
    n(from.as_second().saturating_add(retention.as_secs()))
}

/// Gives part items the TTL of the record they belong to.
pub(super) fn expire(parts: &mut [Item], from: Timestamp, retention: SignedDuration) {
    for part in parts {
        part.insert(table::TTL.to_owned(), expiry(from, retention));
    }
}

/// The item of a new job, and the parts its body or result spill into.
pub(crate) fn job_item(
    operation: &'static str,
    job: &JobRecord,
) -> std::result::Result<(Item, Vec<Item>), AwsError> {
    let pk = job_pk(&job.id);
    let body = payload(operation, || format!("job {}", job.id), &pk, job)?;
    let mut parts = body.parts;
    let mut item = key(&pk, JOB_SK);
    item.insert(INSTANCE.to_owned(), s(job.instance.storage_id()));
    item.insert(BODY.to_owned(), body.attribute);
    let state = match &job.state {
        JobState::Created => CREATED,
        JobState::Dispatched { at, handle } => {
            item.insert(DISPATCHED_AT.to_owned(), s(at.to_string()));
            if let Some(handle) = handle {
                item.insert(HANDLE.to_owned(), s(handle.as_str()));
            }
            DISPATCHED
        }
        JobState::Finished { result } => {
            let what = || format!("result of job {}", job.id);
            let result = payload(operation, what, &pk, result)?;
            item.insert(RESULT.to_owned(), result.attribute);
            parts.extend(result.parts);
            FINISHED
        }
    };
    item.insert(STATE.to_owned(), s(state));
    Ok((item, parts))
}

impl DynamoStore {
    async fn load_job(&self, id: &JobId) -> std::result::Result<Option<JobRecord>, AwsError> {
        let pk = job_pk(id);
        let Some(item) = self.get_item("get_job", key(&pk, JOB_SK)).await? else {
            return Ok(None);
        };
        let what = format!("job {id}");
        let body = get_attr("get_job", &item, BODY)?;
        let mut job: JobRecord = self.read_payload("get_job", &what, &pk, body).await?;
        // The state attributes are the truth; the body is the job as created.
        job.state = match get_s("get_job", &item, STATE)? {
            CREATED => JobState::Created,
            DISPATCHED => {
                let at = get_s("get_job", &item, DISPATCHED_AT)?;
                let at = at
                    .parse::<Timestamp>()
                    .map_err(|e| AwsError::decode("get_job", &what, e))?;
                let handle = match item.get(HANDLE) {
                    Some(_) => Some(JobHandle(get_s("get_job", &item, HANDLE)?.to_owned())),
                    None => None,
                };
                JobState::Dispatched { at, handle }
            }
            FINISHED => {
                let result = get_attr("get_job", &item, RESULT)?;
                JobState::Finished {
                    result: self.read_payload("get_job", &what, &pk, result).await?,
                }
            }
            other => {
                return Err(AwsError::decode(
                    "get_job",
                    what,
                    format!("unknown job state {other:?}"),
                ));
            }
        };
        Ok(Some(job))
    }

    #[tracing::instrument(skip(self))]
    async fn claim(&self, id: &JobId, at: Timestamp) -> std::result::Result<bool, AwsError> {
        let token = format!("{:016x}", fastrand::u64(..));
        let claim = Write::Update {
            key: key(job_pk(id), JOB_SK),
            update: Expression::new("SET #state = :dispatched, #at = :at, #token = :token")
                .name("#state", STATE)
                .name("#at", DISPATCHED_AT)
                .name("#token", CLAIM_TOKEN)
                .value(":dispatched", s(DISPATCHED))
                .value(":at", s(at.to_string()))
                .value(":token", s(token)),
            // A missing job has no state, so this also fails for unknown ids.
            condition: Some(
                Expression::new("#state = :created OR (#state = :dispatched AND #token = :token)")
                    .name("#state", STATE)
                    .name("#token", CLAIM_TOKEN)
                    .value(":created", s(CREATED))
                    .value(":dispatched", s(DISPATCHED)),
            ),
        };
        Ok(self.write_one("claim_job", claim).await? == Outcome::Written)
    }

    async fn set_handle(
        &self,
        id: &JobId,
        handle: &JobHandle,
    ) -> std::result::Result<bool, AwsError> {
        let update = Write::Update {
            key: key(job_pk(id), JOB_SK),
            update: Expression::new("SET #handle = :handle")
                .name("#handle", HANDLE)
                .value(":handle", s(handle.as_str())),
            condition: Some(
                Expression::new("#state = :dispatched")
                    .name("#state", STATE)
                    .value(":dispatched", s(DISPATCHED)),
            ),
        };
        Ok(self.write_one("record_handle", update).await? == Outcome::Written)
    }

    #[tracing::instrument(skip(self, result))]
    async fn finish(&self, id: &JobId, result: &JobResult) -> std::result::Result<bool, AwsError> {
        let token = format!("{:016x}", fastrand::u64(..));
        let (finish, parts) =
            finish_write("finish_job", id, result, self.event_retention, Some(token))?;
        self.write_parts("finish_job", &parts).await?;
        let outcome = self.write_one("finish_job", finish).await;
        if !matches!(outcome, Ok(Outcome::Written)) {
            self.discard_parts("finish_job", &parts).await;
        }
        Ok(outcome? == Outcome::Written)
    }
}

/// The write that records a job's result once, and the parts the result
/// spills into (to write first). An ended job is read no more once its
/// instance took its result up; it is kept as long as events, then
/// DynamoDB's TTL deletes it, its parts with it. With a `token`, a retry
/// of the write that did land counts as written (see [`FINISH_TOKEN`]); a
/// write in a transaction needs none, the transaction's own token does that.
pub(super) fn finish_write(
    operation: &'static str,
    id: &JobId,
    result: &JobResult,
    retention: SignedDuration,
    token: Option<String>,
) -> std::result::Result<(Write, Vec<Item>), AwsError> {
    let pk = job_pk(id);
    let mut stored = payload(operation, || format!("result of job {id}"), &pk, result)?;
    let now = Timestamp::now();
    expire(&mut stored.parts, now, retention);
    let (set_token, unless_finished) = match token {
        Some(_) => (
            ", #token = :token",
            "(#state <> :finished OR #token = :token)",
        ),
        None => ("", "#state <> :finished"),
    };
    let mut update = Expression::new(format!(
        "SET #state = :finished, #result = :result, #ttl = :ttl{set_token}"
    ))
    .name("#state", STATE)
    .name("#result", RESULT)
    .name("#ttl", table::TTL)
    .value(":finished", s(FINISHED))
    .value(":result", stored.attribute)
    .value(":ttl", expiry(now, retention));
    let mut condition = Expression::new(format!("attribute_exists(#pk) AND {unless_finished}"))
        .name("#pk", table::PK)
        .name("#state", STATE);
    if let Some(token) = token {
        update = update
            .name("#token", FINISH_TOKEN)
            .value(":token", s(token));
        condition = condition.name("#token", FINISH_TOKEN);
    }
    let write = Write::Update {
        key: key(&pk, JOB_SK),
        update,
        condition: Some(condition),
    };
    Ok((write, stored.parts))
}

#[async_trait]
impl JobStore for DynamoStore {
    #[tracing::instrument(name = "dynamodb.get_job", level = "debug", skip_all, fields(job = %id))]
    async fn get_job(&self, id: &JobId) -> Result<Option<JobRecord>> {
        Ok(self.load_job(id).await?)
    }

    #[tracing::instrument(name = "dynamodb.claim_job", level = "debug", skip_all, fields(job = %id))]
    async fn claim_job(&self, id: &JobId, at: Timestamp) -> Result<bool> {
        Ok(self.claim(id, at).await?)
    }

    #[tracing::instrument(name = "dynamodb.record_handle", level = "debug", skip_all, fields(job = %id, handle = %handle))]
    async fn record_handle(&self, id: &JobId, handle: &JobHandle) -> Result<bool> {
        Ok(self.set_handle(id, handle).await?)
    }

    #[tracing::instrument(name = "dynamodb.finish_job", level = "debug", skip_all, fields(job = %id))]
    async fn finish_job(&self, id: &JobId, result: &JobResult) -> Result<bool> {
        Ok(self.finish(id, result).await?)
    }
}
