//! The S3 artifact store: files handed between jobs (plans) as objects in
//! the stack's artifact bucket, under a prefix. Containers that run jobs
//! get presigned URLs instead of credentials for the bucket.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use jiff::SignedDuration;
use vergence_model::JobId;
use vergence_model::ports::{ArtifactStore, UrlAccess};

use crate::error::AwsError;

type Result<T> = vergence_model::Result<T>;

/// The longest a presigned URL may live (SigV4's limit).
const MAX_URL_TTL: SignedDuration = SignedDuration::from_hours(7 * 24);

/// Artifacts as S3 objects.
#[derive(Clone, Debug)]
pub struct S3ArtifactStore {
    client: Client,
    bucket: String,
    prefix: String,
}

impl S3ArtifactStore {
    /// Objects go to `bucket` under `prefix` (empty, or ending in `/`).
    pub fn new(client: Client, bucket: impl Into<String>, prefix: impl Into<String>) -> Self {
        Self {
            client,
            bucket: bucket.into(),
            prefix: prefix.into(),
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The object key of an artifact key.
    pub fn object_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

#[async_trait]
impl ArtifactStore for S3ArtifactStore {
    #[tracing::instrument(name = "s3.put_artifact", level = "debug", skip_all, fields(key = %key, bytes = content.len()))]
    async fn put(&self, key: &str, content: &[u8]) -> Result<()> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .body(ByteStream::from(content.to_vec()))
            .send()
            .await
            .map_err(|e| AwsError::s3("put_artifact", e))?;
        Ok(())
    }

    #[tracing::instrument(name = "s3.get_artifact", level = "debug", skip_all, fields(key = %key))]
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let output = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.object_key(key))
            .send()
            .await
        {
            Ok(output) => output,
            Err(e) if e.as_service_error().is_some_and(|e| e.is_no_such_key()) => return Ok(None),
            Err(e) => return Err(AwsError::s3("get_artifact", e).into()),
        };
        let bytes = output
            .body
            .collect()
            .await
            .map_err(|e| AwsError::decode("get_artifact", format!("artifact {key}"), e))?;
        Ok(Some(bytes.into_bytes().to_vec()))
    }

    /// Lists `jobs/` one level deep: a prefix per job, not every object.
    #[tracing::instrument(name = "s3.list_artifact_jobs", level = "debug", skip_all)]
    async fn job_ids(&self) -> Result<Vec<JobId>> {
        let jobs = self.object_key("jobs/");
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&jobs)
            .delimiter("/")
            .into_paginator()
            .send();
        let mut ids = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::s3("list_artifact_jobs", e))?;
            for common in page.common_prefixes() {
                let id = common
                    .prefix()
                    .and_then(|p| p.strip_prefix(jobs.as_str()))
                    .and_then(|p| p.strip_suffix('/'))
                    .filter(|id| !id.is_empty());
                if let Some(id) = id {
                    ids.push(JobId(id.into()));
                }
            }
        }
        Ok(ids)
    }

    /// Deletes the job's objects, up to 1,000 a request.
    #[tracing::instrument(name = "s3.delete_artifact_job", level = "debug", skip_all, fields(job = %job))]
    async fn delete_job(&self, job: &JobId) -> Result<()> {
        let prefix = self.object_key(&format!("jobs/{job}/"));
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(&prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| AwsError::s3("delete_artifact_job", e))?;
            let objects = page
                .contents()
                .iter()
                .filter_map(|o| o.key())
                .map(|key| ObjectIdentifier::builder().key(key).build())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| AwsError::decode("delete_artifact_job", format!("job {job}"), e))?;
            if objects.is_empty() {
                continue;
            }
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| AwsError::decode("delete_artifact_job", format!("job {job}"), e))?;
            let output = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| AwsError::s3("delete_artifact_job", e))?;
            if let Some(failed) = output.errors().first() {
                return Err(AwsError::decode(
                    "delete_artifact_job",
                    format!("job {job}"),
                    format!(
                        "{} of its objects were not deleted: {} ({})",
                        output.errors().len(),
                        failed.key().unwrap_or_default(),
                        failed.message().unwrap_or_default()
                    ),
                )
                .into());
            }
        }
        Ok(())
    }

    async fn presign(
        &self,
        key: &str,
        access: UrlAccess,
        ttl: SignedDuration,
    ) -> Result<Option<String>> {
        let ttl =
            std::time::Duration::try_from(ttl.clamp(SignedDuration::from_secs(1), MAX_URL_TTL))
                .unwrap_or(std::time::Duration::from_secs(3600));
        let config = PresigningConfig::expires_in(ttl)
            .map_err(|e| AwsError::decode("presign_artifact", format!("artifact {key}"), e))?;
        let object = self.object_key(key);
        let request = match access {
            UrlAccess::Read => self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(object)
                .presigned(config)
                .await
                .map_err(|e| AwsError::s3("presign_artifact", e))?,
            UrlAccess::Write => self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(object)
                .presigned(config)
                .await
                .map_err(|e| AwsError::s3("presign_artifact", e))?,
        };
        Ok(Some(request.uri().to_owned()))
    }
}
