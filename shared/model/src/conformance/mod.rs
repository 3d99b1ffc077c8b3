//! The state store conformance suite: the behaviour every [`StateStore`]
//! adapter must have. Adapters run it with [`store_conformance_tests!`]:
//!
//! ```ignore
//! vergence_model::store_conformance_tests!(async { Arc::new(MyStore::new().await) });
//! ```
//!
//! Each check gets a fresh, empty store from the expression.

// Test code: a failed expectation should stop the check with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};

use crate::error::{Error, Result};
use crate::instance::InstanceIds;
use crate::ports::*;

mod agents;
mod instances;
mod records;

use crate::*;
pub use agents::*;
pub use instances::*;
pub use records::*;

/// Generates one `#[tokio::test]` per conformance check.
#[macro_export]
macro_rules! store_conformance_tests {
    ($make:expr) => {
        $crate::store_conformance_tests!(@tests $make;
            snapshots_are_immutable_and_idempotent,
            current_config_moves_only_from_the_revision_read,
            creating_an_instance_requires_that_it_does_not_exist,
            updates_require_the_revision_read_and_a_lost_race_writes_nothing,
            a_commit_writes_instance_jobs_and_events_together,
            an_existing_job_id_fails_the_whole_commit,
            deleting_an_instance_is_conditional_too,
            a_quiet_check_is_read_back_until_the_instance_is_written_again,
            a_deleted_instance_added_again_has_none_of_its_old_checks,
            instances_are_listed_by_filter,
            instances_read_together_come_in_the_order_asked,
            due_instances_are_the_ones_whose_time_has_come_earliest_first,
            a_job_is_claimed_once_and_finished_once,
            a_commit_records_a_job_result_once_with_the_instance,
            releases_are_immutable_versions_and_the_last_pushed_is_latest,
            a_release_is_pushed_with_its_instances_all_or_nothing,
            approvals_are_listed_per_instance,
            alerts_are_replaced_by_name,
            tokens_are_unique_by_id_and_listed_per_application,
            a_webhook_signature_is_used_once_until_it_expires,
            events_are_appended_once_and_listed_by_filter_and_limit,
            two_events_of_one_instance_in_one_millisecond_are_both_kept,
            concurrent_writers_of_one_revision_have_exactly_one_winner,
            agent_work_is_queued_once_and_leased_oldest_first,
            an_expired_lease_hands_the_item_out_again_unless_renewed,
            two_concurrent_leases_never_get_the_same_item,
            agents_are_touched_and_listed_by_name,
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let store: std::sync::Arc<dyn $crate::ports::StateStore> = $make.await;
                $crate::conformance::$name(store).await;
            }
        )*
    };
}

/// A fixed instant `seconds` after the suite's epoch.
pub fn t(seconds: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + seconds).expect("valid timestamp")
}

fn key(app: &str, service: &str, channel: &str) -> InstanceKey {
    InstanceKey::new(
        app.parse().expect("name"),
        service.parse().expect("name"),
        channel.parse().expect("name"),
    )
}

/// A new instance record with nothing resolved yet.
pub fn record(key: &InstanceKey, next_check_at: Option<Timestamp>) -> InstanceRecord {
    InstanceRecord {
        key: key.clone(),
        revision: 0,
        config_hash: "hash".into(),
        desired: Desired::Unresolved {
            reason: "test".into(),
        },
        state: InstanceState::new_pending("new"),
        next_check_at,
        controls: Default::default(),
        updated_at: t(0),
        watchdog_at: None,
        quiet_checks: 0,
    }
}

/// A created apply job of `key`.
pub fn job(id: &str, key: &InstanceKey) -> JobRecord {
    JobRecord {
        id: JobId(id.into()),
        instance: key.clone(),
        ids: InstanceIds::of(key),
        kind: JobKind::Apply,
        version: "v1".parse().expect("version"),
        attempt: 1,
        spec: JobSpec {
            runner: RunnerSpec::Local,
            image: None,
            cmd: vec!["./apply".into()],
            env: BTreeMap::new(),
            secret_env: BTreeMap::new(),
            working_dir: String::new(),
            timeout: SignedDuration::from_mins(1),
            outputs: Vec::new(),
            builtin: None,
        }
        .into(),
        workspace_root: None,
        inputs: Vec::new(),
        created_at: t(0),
        deadline: t(120),
        state: JobState::Created,
    }
}

fn event(id: &str, key: &InstanceKey, at: Timestamp) -> Event {
    let mut event = Event::for_instance(
        key,
        at,
        "test",
        EventKind::InstanceAdded,
        format!("event {id}"),
    );
    event.id = id.to_owned();
    event
}

fn put(record: InstanceRecord, expected: Option<u64>) -> InstanceCommit {
    InstanceCommit {
        change: InstanceChange::Put(Box::new(record)),
        expected_revision: expected,
        new_jobs: Vec::new(),
        finished_jobs: Vec::new(),
        events: Vec::new(),
    }
}

fn is_conflict<T: std::fmt::Debug>(result: &Result<T>) -> bool {
    matches!(result, Err(Error::Conflict { .. }))
}
