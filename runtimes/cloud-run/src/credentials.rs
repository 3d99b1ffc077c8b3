//! Google credentials that recover. google-cloud-auth keeps a token cache
//! per credentials object, and when getting a token fails for good (the
//! token exchange refused: a workload identity binding not made yet, a
//! provider's attribute condition, a disabled service account) that cache
//! stops and answers the same error for as long as the object lives — in
//! the worker, for the life of its container. [`Renewing`] makes the
//! credentials anew after such a failure, on a later use, at most once per
//! backoff (30 s, doubling up to 10 min), so a fixed binding is picked up
//! without a redeploy and a broken one does not cost an exchange per call.
//! Transient failures are left to the cache, which retries those itself.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use google_cloud_auth::credentials::{CacheableResource, Credentials, CredentialsProvider};
use google_cloud_auth::errors::CredentialsError;
use http::{Extensions, HeaderMap};
use tokio::time::Instant;

/// Makes credentials afresh; the error is the builder's, in words.
pub(crate) type Make = Box<dyn Fn() -> Result<Credentials, String> + Send + Sync>;

/// When credentials that failed for good are made again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RenewBackoff {
    pub(crate) first: Duration,
    pub(crate) max: Duration,
}

impl Default for RenewBackoff {
    fn default() -> Self {
        Self {
            first: Duration::from_secs(30),
            max: Duration::from_secs(600),
        }
    }
}

/// Credentials made by `make`, made again after a permanent failure.
pub(crate) struct Renewing {
    make: Make,
    backoff: RenewBackoff,
    state: Mutex<State>,
}

struct State {
    current: Credentials,
    /// When the credentials may be made again; `None` while they work.
    renew_at: Option<Instant>,
    /// The wait after the next renewal that fails too.
    wait: Duration,
}

impl std::fmt::Debug for Renewing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renewing")
            .field("backoff", &self.backoff)
            .finish_non_exhaustive()
    }
}

impl Renewing {
    /// `first`, made by the caller (so what the configuration itself gets
    /// wrong is reported at once), and `make` to make them again.
    pub(crate) fn new(first: Credentials, make: Make, backoff: RenewBackoff) -> Self {
        Self {
            make,
            backoff,
            state: Mutex::new(State {
                current: first,
                renew_at: None,
                wait: backoff.first,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// After a permanent failure: fresh credentials when the backoff has
    /// run out (and the next renewal pushed further), else `None`. The
    /// first failure only starts the clock: credentials made a moment ago
    /// would fail the same way.
    fn renew(&self) -> Option<Credentials> {
        let now = Instant::now();
        let mut state = self.state();
        match state.renew_at {
            None => {
                state.renew_at = Some(now + state.wait);
                None
            }
            Some(at) if now < at => None,
            Some(_) => {
                let wait = state.wait;
                state.wait = (wait * 2).min(self.backoff.max);
                state.renew_at = Some(now + state.wait);
                match (self.make)() {
                    Ok(fresh) => {
                        tracing::info!("made the Google credentials again after they failed");
                        state.current = fresh.clone();
                        Some(fresh)
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot make the Google credentials again");
                        None
                    }
                }
            }
        }
    }

    fn succeeded(&self) {
        let mut state = self.state();
        state.renew_at = None;
        state.wait = self.backoff.first;
    }
}

impl CredentialsProvider for Renewing {
    async fn headers(
        &self,
        extensions: Extensions,
    ) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
        let current = self.state().current.clone();
        let error = match current.headers(extensions.clone()).await {
            Ok(headers) => {
                self.succeeded();
                return Ok(headers);
            }
            // The cache tries these again on its own.
            Err(e) if e.is_transient() => return Err(e),
            Err(e) => e,
        };
        let Some(fresh) = self.renew() else {
            return Err(error);
        };
        let headers = fresh.headers(extensions).await?;
        self.succeeded();
        Ok(headers)
    }

    async fn universe_domain(&self) -> Option<String> {
        let current = self.state().current.clone();
        current.universe_domain().await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use google_cloud_auth::credentials::EntityTag;

    use super::*;

    /// Credentials whose token exchange fails (transiently when
    /// `Some(true)`) or works (`None`).
    #[derive(Debug)]
    struct Exchange {
        fails: Option<bool>,
    }

    impl CredentialsProvider for Exchange {
        async fn headers(
            &self,
            _: Extensions,
        ) -> Result<CacheableResource<HeaderMap>, CredentialsError> {
            match self.fails {
                Some(transient) => Err(CredentialsError::from_msg(
                    transient,
                    "the token exchange was refused",
                )),
                None => Ok(CacheableResource::New {
                    entity_tag: EntityTag::new(),
                    data: HeaderMap::new(),
                }),
            }
        }

        async fn universe_domain(&self) -> Option<String> {
            None
        }
    }

    /// Makes credentials whose first `fixed_after` generations fail
    /// (transiently or not), counting how many were made.
    fn renewing(fixed_after: usize, transient: bool) -> (Renewing, Arc<AtomicUsize>) {
        let made = Arc::new(AtomicUsize::new(0));
        let count = made.clone();
        let make: Make = Box::new(move || {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let fails = (n < fixed_after).then_some(transient);
            Ok(Credentials::from(Exchange { fails }))
        });
        let first = make().unwrap();
        (Renewing::new(first, make, RenewBackoff::default()), made)
    }

    async fn works(credentials: &Renewing) -> bool {
        credentials.headers(Extensions::new()).await.is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn credentials_that_failed_for_good_are_made_again_after_a_backoff_not_on_every_call() {
        // The binding is fixed after the first two generations failed.
        let (credentials, made) = renewing(2, false);
        assert!(!works(&credentials).await, "the exchange is refused");
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(5)).await;
            assert!(!works(&credentials).await);
        }
        assert_eq!(made.load(Ordering::SeqCst), 1, "not made again within 30 s");

        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(!works(&credentials).await, "made again, and refused again");
        assert_eq!(made.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(!works(&credentials).await);
        assert_eq!(made.load(Ordering::SeqCst), 2, "the wait doubled to 60 s");

        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(works(&credentials).await, "the third generation works");
        assert_eq!(made.load(Ordering::SeqCst), 3);
        assert!(works(&credentials).await);
        assert_eq!(
            made.load(Ordering::SeqCst),
            3,
            "working credentials are kept"
        );
    }

    /// Through the Cloud Run client and the fake API: a call refused for
    /// its credentials, then the same client's call reaching the API once
    /// they were made again (anonymous ones, which the fake accepts).
    #[tokio::test]
    async fn a_cloud_run_client_recovers_when_its_credentials_are_made_again() {
        let fake = vergence_fake_cloud_run::FakeCloudRun::start()
            .await
            .unwrap();
        let made = Arc::new(AtomicUsize::new(0));
        let count = made.clone();
        let make: Make = Box::new(move || {
            Ok(match count.fetch_add(1, Ordering::SeqCst) {
                0 => Credentials::from(Exchange { fails: Some(false) }),
                _ => google_cloud_auth::credentials::anonymous::Builder::new().build(),
            })
        });
        let first = make().unwrap();
        let backoff = RenewBackoff {
            first: Duration::from_millis(200),
            max: Duration::from_secs(1),
        };
        let renewing = Renewing::new(first, make, backoff);
        let clients = crate::CloudRunClients::at_endpoint(fake.url(), Credentials::from(renewing))
            .await
            .unwrap();
        let get = || async {
            clients
                .jobs
                .get_job()
                .set_name("projects/p/locations/europe-west1/jobs/none")
                .send()
                .await
                .unwrap_err()
        };
        assert!(get().await.is_authentication());
        assert!(get().await.is_authentication(), "not made again at once");
        assert_eq!(made.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
        let reached = get().await;
        assert!(!reached.is_authentication(), "{reached}");
        assert_eq!(
            reached.status().map(|s| s.code),
            Some(google_cloud_gax::error::rpc::Code::NotFound),
            "the API answered: {reached}"
        );
        assert_eq!(made.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_left_to_the_token_cache() {
        let (credentials, made) = renewing(usize::MAX, true);
        for _ in 0..3 {
            assert!(!works(&credentials).await);
            tokio::time::advance(Duration::from_secs(60)).await;
        }
        assert_eq!(made.load(Ordering::SeqCst), 1);
    }
}
