//! The S3 artifact store: files handed between jobs (plans) as objects in
//! the stack's artifact bucket, under a prefix. Containers that run jobs
//! get presigned URLs instead of credentials for the bucket.

use async_trait::async_trait;
use aws_sdk_s3::Client;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use jiff::SignedDuration;
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
