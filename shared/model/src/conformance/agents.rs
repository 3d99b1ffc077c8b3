//! Conformance: agents' last contact and their work queues with leases.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::ports::*;
use crate::*;

use super::*;

fn agent(name: &str) -> AgentName {
    name.parse().expect("agent name")
}

fn run(agent_name: &str, job: &str, at: i64) -> AgentWork {
    AgentWork::new(
        agent(agent_name),
        AgentTask::RunJob {
            job_id: JobId(job.into()),
        },
        t(at),
    )
}

fn ids(work: &[AgentWork]) -> Vec<String> {
    work.iter().map(|w| w.id.clone()).collect()
}

pub async fn agent_work_is_queued_once_and_leased_oldest_first(store: Arc<dyn StateStore>) {
    let eu = agent("prod-eu");
    assert!(store.put_agent_work(&run("prod-eu", "b", 2)).await.unwrap());
    assert!(store.put_agent_work(&run("prod-eu", "a", 1)).await.unwrap());
    assert!(store.put_agent_work(&run("prod-eu", "c", 3)).await.unwrap());
    assert!(store.put_agent_work(&run("prod-us", "d", 0)).await.unwrap());
    assert!(
        !store.put_agent_work(&run("prod-eu", "a", 9)).await.unwrap(),
        "the same id again is a redelivered dispatch: nothing changes"
    );
    let leased = store.lease_agent_work(&eu, t(10), t(70), 2).await.unwrap();
    assert_eq!(ids(&leased), vec!["run-a", "run-b"], "oldest first");
    assert!(
        leased
            .iter()
            .all(|w| w.leased_until == Some(t(70)) && w.deliveries == 1)
    );
    assert_eq!(leased[0].created_at, t(1), "the first put is kept");
    let rest = store.lease_agent_work(&eu, t(11), t(71), 10).await.unwrap();
    assert_eq!(ids(&rest), vec!["run-c"], "leased items are not handed out");
    assert!(
        store
            .lease_agent_work(&eu, t(12), t(72), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let stored = store.get_agent_work(&eu, "run-b").await.unwrap().unwrap();
    assert_eq!(stored.leased_until, Some(t(70)));
    assert_eq!(stored.task.job_id().as_str(), "b");
    assert!(store.finish_agent_work(&eu, "run-b").await.unwrap());
    assert!(!store.finish_agent_work(&eu, "run-b").await.unwrap());
    assert_eq!(store.get_agent_work(&eu, "run-b").await.unwrap(), None);
    assert!(
        !store
            .finish_agent_work(&agent("prod-us"), "run-a")
            .await
            .unwrap(),
        "items belong to their agent"
    );
    let us = store
        .lease_agent_work(&agent("prod-us"), t(13), t(73), 10)
        .await
        .unwrap();
    assert_eq!(ids(&us), vec!["run-d"]);
}

pub async fn an_expired_lease_hands_the_item_out_again_unless_renewed(store: Arc<dyn StateStore>) {
    let eu = agent("prod-eu");
    store.put_agent_work(&run("prod-eu", "a", 0)).await.unwrap();
    store.put_agent_work(&run("prod-eu", "b", 1)).await.unwrap();
    let first = store.lease_agent_work(&eu, t(5), t(65), 10).await.unwrap();
    assert_eq!(ids(&first), vec!["run-a", "run-b"]);
    // The agent still runs b at t(30); a's agent went away.
    store
        .renew_agent_work(&eu, &["run-b".to_owned(), "run-gone".to_owned()], t(90))
        .await
        .unwrap();
    assert_eq!(store.get_agent_work(&eu, "run-gone").await.unwrap(), None);
    assert!(
        store
            .lease_agent_work(&eu, t(64), t(124), 10)
            .await
            .unwrap()
            .is_empty()
    );
    let again = store
        .lease_agent_work(&eu, t(65), t(125), 10)
        .await
        .unwrap();
    assert_eq!(ids(&again), vec!["run-a"], "a's lease ended at t(65)");
    assert_eq!(again[0].deliveries, 2);
    assert_eq!(again[0].leased_until, Some(t(125)));
    let renewed = store.get_agent_work(&eu, "run-b").await.unwrap().unwrap();
    assert_eq!(renewed.leased_until, Some(t(90)));
    assert_eq!(renewed.deliveries, 1, "renewing is not a delivery");
    let later = store
        .lease_agent_work(&eu, t(91), t(151), 10)
        .await
        .unwrap();
    assert_eq!(ids(&later), vec!["run-b"]);
}

pub async fn two_concurrent_leases_never_get_the_same_item(store: Arc<dyn StateStore>) {
    let eu = agent("prod-eu");
    for i in 0..24 {
        store
            .put_agent_work(&run("prod-eu", &format!("job-{i:02}"), i))
            .await
            .unwrap();
    }
    let mut leases = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let store = store.clone();
        let eu = eu.clone();
        leases.spawn(async move { store.lease_agent_work(&eu, t(30), t(90), 8).await });
    }
    let mut seen = BTreeSet::new();
    let mut total = 0;
    while let Some(leased) = leases.join_next().await {
        for item in leased.unwrap().unwrap() {
            total += 1;
            assert!(seen.insert(item.id.clone()), "{} leased twice", item.id);
        }
    }
    assert_eq!(total, 24, "every item was leased by exactly one caller");
}

pub async fn agents_are_touched_and_listed_by_name(store: Arc<dyn StateStore>) {
    assert!(store.list_agents().await.unwrap().is_empty());
    assert_eq!(store.get_agent(&agent("prod-eu")).await.unwrap(), None);
    let state = |name: &str, at: i64, version: &str| AgentState {
        name: agent(name),
        last_seen: t(at),
        version: version.into(),
        namespace: Some("vergence".into()),
        cluster: None,
    };
    store
        .touch_agent(&state("prod-eu", 1, "0.1.0"))
        .await
        .unwrap();
    store
        .touch_agent(&state("prod-us", 2, "0.1.0"))
        .await
        .unwrap();
    store
        .touch_agent(&state("prod-eu", 3, "0.2.0"))
        .await
        .unwrap();
    assert_eq!(
        store.get_agent(&agent("prod-eu")).await.unwrap(),
        Some(state("prod-eu", 3, "0.2.0"))
    );
    let names: Vec<String> = store
        .list_agents()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.name.to_string())
        .collect();
    assert_eq!(names, vec!["prod-eu", "prod-us"]);
}
