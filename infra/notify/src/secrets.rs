//! Secrets read when a message is sent, from sources other than the
//! environment: a reader injected by whoever wires the notifier (the AWS
//! one of `vergence-aws` in the scheduler function and in `vergence`
//! built with `aws`), behind a short cache, so a pass that sends many
//! messages reads each secret once and a rotated value is still picked up
//! within [`SECRET_CACHE_TTL`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;
use vergence_model::SecretRef;
use vergence_model::notification::{SecretFailure, SecretFailureKind, SecretReader};

/// How long a value read from AWS is used before it is read again: short
/// enough that a rotated webhook URL or signing secret is used within a
/// minute, long enough that `vergence up` (a pass a second) does not call
/// AWS for every pass.
pub const SECRET_CACHE_TTL: Duration = Duration::from_secs(60);

/// The reader of a process that has no AWS SDK: every reference fails,
/// saying why, instead of a delivery failing obscurely.
#[derive(Clone, Debug)]
pub struct NoCloudSecrets {
    why: String,
}

impl NoCloudSecrets {
    /// `why` says what this process lacks and what to do instead.
    pub fn new(why: impl Into<String>) -> Self {
        Self { why: why.into() }
    }
}

impl Default for NoCloudSecrets {
    fn default() -> Self {
        Self::new(
            "this process was not given a reader for AWS secrets (vergence reads them when built \
             with its `aws` feature, the default); use {fromEnv: VARIABLE} here",
        )
    }
}

#[async_trait]
impl SecretReader for NoCloudSecrets {
    async fn read(&self, _secret: &SecretRef) -> Result<String, SecretFailure> {
        Err(SecretFailure::new(
            SecretFailureKind::NoReader,
            self.why.clone(),
        ))
    }
}

/// Keeps each value read by `inner` for `ttl`. Failures are not kept: the
/// next message tries again, so a permission granted or a secret created
/// in the meantime is seen at once.
pub(crate) struct CachedSecrets {
    inner: Arc<dyn SecretReader>,
    ttl: Duration,
    values: Mutex<HashMap<SecretRef, (Instant, String)>>,
}

impl std::fmt::Debug for CachedSecrets {
    // Never the values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedSecrets")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl CachedSecrets {
    pub(crate) fn new(inner: Arc<dyn SecretReader>, ttl: Duration) -> Self {
        Self {
            inner,
            ttl,
            values: Mutex::default(),
        }
    }

    fn cached(&self, secret: &SecretRef) -> Option<String> {
        let values = self.values.lock().unwrap_or_else(PoisonError::into_inner);
        values
            .get(secret)
            .filter(|(read_at, _)| read_at.elapsed() < self.ttl)
            .map(|(_, value)| value.clone())
    }
}

#[async_trait]
impl SecretReader for CachedSecrets {
    async fn read(&self, secret: &SecretRef) -> Result<String, SecretFailure> {
        if let Some(value) = self.cached(secret) {
            return Ok(value);
        }
        let value = self.inner.read(secret).await?;
        self.values
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(secret.clone(), (Instant::now(), value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// Answers from a script and counts the reads.
    #[derive(Default)]
    struct Scripted {
        answers: Mutex<VecDeque<Result<String, SecretFailure>>>,
        reads: Mutex<usize>,
    }

    #[async_trait]
    impl SecretReader for Scripted {
        async fn read(&self, _secret: &SecretRef) -> Result<String, SecretFailure> {
            *self.reads.lock().unwrap() += 1;
            self.answers.lock().unwrap().pop_front().unwrap()
        }
    }

    fn parameter() -> SecretRef {
        SecretRef::AwsSsmParameter("/vergence/hook-url".into())
    }

    #[tokio::test(start_paused = true)]
    async fn a_value_is_read_once_per_ttl_and_a_rotated_one_is_picked_up_after() {
        let inner = Arc::new(Scripted::default());
        inner.answers.lock().unwrap().extend([
            Ok("https://hooks.example.com/old".to_owned()),
            Ok("https://hooks.example.com/rotated".to_owned()),
        ]);
        let cache = CachedSecrets::new(inner.clone(), SECRET_CACHE_TTL);
        for _ in 0..3 {
            assert_eq!(
                cache.read(&parameter()).await.unwrap(),
                "https://hooks.example.com/old"
            );
            tokio::time::advance(Duration::from_secs(10)).await;
        }
        assert_eq!(*inner.reads.lock().unwrap(), 1, "read once within the TTL");
        tokio::time::advance(SECRET_CACHE_TTL).await;
        assert_eq!(
            cache.read(&parameter()).await.unwrap(),
            "https://hooks.example.com/rotated"
        );
        assert_eq!(*inner.reads.lock().unwrap(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_is_not_kept_so_a_permission_granted_is_seen_at_once() {
        let inner = Arc::new(Scripted::default());
        inner.answers.lock().unwrap().extend([
            Err(SecretFailure::new(
                SecretFailureKind::AccessDenied,
                "not authorized to perform: ssm:GetParameter",
            )),
            Ok("https://hooks.example.com/x".to_owned()),
        ]);
        let cache = CachedSecrets::new(inner.clone(), SECRET_CACHE_TTL);
        let failure = cache.read(&parameter()).await.unwrap_err();
        assert_eq!(failure.kind, SecretFailureKind::AccessDenied);
        assert!(!failure.is_retryable());
        assert_eq!(
            cache.read(&parameter()).await.unwrap(),
            "https://hooks.example.com/x"
        );
    }

    #[tokio::test]
    async fn without_a_reader_a_reference_says_what_this_process_lacks() {
        let failure = NoCloudSecrets::default()
            .read(&parameter())
            .await
            .unwrap_err();
        assert_eq!(failure.kind, SecretFailureKind::NoReader);
        assert!(failure.to_string().contains("`aws` feature"), "{failure}");
    }
}
