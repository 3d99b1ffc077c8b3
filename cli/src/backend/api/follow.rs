//! `vergence up --endpoint`: after the push, the server's engine converges
//! (the worker, or `vergence serve`), never this process. `up` watches it:
//! it prints the rollout's events as they are recorded, and stops when
//! nothing can move without outside help, judged from the API's
//! `GET …/rollout` as the local engine loop judges it:
//!
//! - the config in force is still the one pushed (another push replacing
//!   it ends the wait with an error: what is converging is not ours);
//! - no instance was changed since the engine last looked at it (a push,
//!   a release, an approval, checks asked for: the engine has yet to act);
//! - every instance is converged, failed, waiting on a person or on time,
//!   or waiting on an upstream channel that is itself settled; none has a
//!   job in flight, checks or a rollback under way.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::bail;
use vergence_api::wire::{InstanceProgress, Standing};
use vergence_embedded::Progress as _;
use vergence_model::{ApplicationName, Event, EventFilter, InstanceKey};

use super::Api;
use crate::backend::{Backend, Converge, Converged, Result};
use crate::progress::LiveProgress;
use crate::shutdown::{Signals, Stop};

/// How often the API is asked; the local engine loop reads its store as
/// often.
const POLL: Duration = Duration::from_secs(2);

/// Events read per look: more recorded between two looks than this are
/// said to be left out.
const EVENTS_PER_LOOK: usize = 1000;

pub async fn converge(api: &Api, how: Converge<'_>) -> Result<Converged> {
    let Some(application) = how.application.clone() else {
        bail!("`vergence up --endpoint` follows one application: the token's");
    };
    let own = api.own_actor().await?;
    let deadline = how
        .timeout
        .map(|timeout| (Instant::now() + timeout, timeout));
    let mut signals = Signals::install()?;
    let mut events = EventCursor {
        floor: how.after_event.clone().unwrap_or_default(),
        seen: BTreeSet::new(),
        own,
    };
    loop {
        // A signal also ends a look that waits on a slow answer.
        let look = async {
            events.show(api, &application, &how.progress).await?;
            api.rollout(Some(&application)).await
        };
        let rollout = tokio::select! {
            stop = signals.next() => return Ok(stopped_by(stop, &how.progress)),
            rollout = look => rollout?,
        };
        if !how.watch {
            if rollout.config.as_deref() != Some(how.hash.as_str()) {
                how.progress.finish();
                bail!(
                    "the config in force is no longer the one pushed ({}): another push made it {} while `up` waited; see `vergence status` and `vergence events`",
                    short(&how.hash),
                    rollout.config.as_deref().map_or("none", short)
                );
            }
            if settled(&rollout.instances) {
                // The events were read before the rollout: what the engine
                // recorded between the two reads (the apply that settled
                // it) is shown before the table, not lost.
                events.show(api, &application, &how.progress).await?;
                break;
            }
            if let Some((at, timeout)) = deadline
                && Instant::now() >= at
            {
                how.progress.finish();
                return Ok(Converged {
                    stopped: None,
                    timed_out: Some(timed_out(timeout, &rollout.instances)),
                });
            }
        }
        tokio::select! {
            stop = signals.next() => return Ok(stopped_by(stop, &how.progress)),
            () = tokio::time::sleep(POLL) => {}
        }
    }
    how.progress.finish();
    Ok(Converged::default())
}

/// Following ended by a signal. Nothing here runs a job, so nothing is
/// left behind: the server's engine goes on.
fn stopped_by(stop: Stop, progress: &LiveProgress) -> Converged {
    progress.finish();
    let how = match stop {
        Stop::Interrupt => "interrupted",
        Stop::Terminate => "terminated",
    };
    Converged {
        stopped: Some((
            stop,
            format!(
                "{how}: stopped following; the server's engine goes on converging (see `vergence status` and `vergence events`)"
            ),
        )),
        timed_out: None,
    }
}

fn timed_out(timeout: Duration, instances: &[InstanceProgress]) -> String {
    let moving: Vec<String> = instances
        .iter()
        .filter(|i| i.awaiting_engine || i.standing == Standing::Progressing)
        .map(|i| format!("{} {}", i.key(), i.status))
        .collect();
    format!(
        "timed out after {}s (--timeout) waiting for the server's engine; still moving: {}",
        timeout.as_secs(),
        if moving.is_empty() {
            "none (an upstream channel)".to_owned()
        } else {
            moving.join(", ")
        }
    )
}

fn short(hash: &str) -> &str {
    &hash[..hash.len().min(10)]
}

/// Whether nothing can move without outside help: every instance settled
/// (an upstream wait counts when its upstream is) and none changed since
/// the engine last looked at it.
pub fn settled(instances: &[InstanceProgress]) -> bool {
    let by_key: BTreeMap<InstanceKey, &InstanceProgress> =
        instances.iter().map(|i| (i.key(), i)).collect();
    instances
        .iter()
        .all(|i| !i.awaiting_engine && is_settled(i, &by_key, 0))
}

fn is_settled(
    instance: &InstanceProgress,
    by_key: &BTreeMap<InstanceKey, &InstanceProgress>,
    depth: usize,
) -> bool {
    match instance.standing {
        Standing::Progressing => false,
        Standing::Upstream => {
            let upstream = instance
                .upstream
                .as_ref()
                .and_then(|channel| by_key.get(&instance.key().in_channel(channel)));
            // Preconditions cannot form cycles; the bound is a guard.
            match upstream {
                // The upstream channel converged, yet this one still says
                // it waits for it: the engine has yet to look at it since
                // (the server's engine wakes it through its queue, which
                // this side cannot see), and it is about to move.
                Some(upstream) if upstream.standing == Standing::Converged => false,
                Some(upstream) => {
                    depth < 64
                        && !upstream.awaiting_engine
                        && is_settled(upstream, by_key, depth + 1)
                }
                None => true,
            }
        }
        Standing::Converged | Standing::Failed | Standing::Waiting => true,
    }
}

/// The events shown so far: the rollout's are those after the newest one
/// before the push, except this token's own (the push and the checks `up`
/// asked for, which a local `up` does not print either).
struct EventCursor {
    /// The newest event before the push.
    floor: String,
    /// Ids already looked at. Ids sort by time, but two workers can record
    /// in one millisecond, or a little out of order: an id not seen yet is
    /// new, wherever it sorts.
    seen: BTreeSet<String>,
    own: String,
}

/// How long an id is remembered after newer ones were seen: longer than
/// any commit takes to show up in a read.
const REMEMBERED_MS: u64 = 10 * 60 * 1000;

impl EventCursor {
    async fn show(
        &mut self,
        api: &Api,
        application: &ApplicationName,
        progress: &LiveProgress,
    ) -> Result<()> {
        let events = api
            .events(&EventFilter {
                application: Some(application.clone()),
                limit: Some(EVENTS_PER_LOOK),
                ..EventFilter::default()
            })
            .await?;
        let looked_at = events.len();
        let new: Vec<Event> = events
            .into_iter()
            .filter(|e| e.id > self.floor && !self.seen.contains(&e.id))
            .collect();
        if looked_at == EVENTS_PER_LOOK && new.len() == looked_at && !self.seen.is_empty() {
            eprintln!(
                "warning: more than {EVENTS_PER_LOOK} events since the last look; the oldest are not shown (see `vergence events`)"
            );
        }
        self.seen.extend(new.iter().map(|e| e.id.clone()));
        if let Some(newest) = self.seen.last().and_then(|id| millis(id)) {
            let horizon = newest.saturating_sub(REMEMBERED_MS);
            self.seen
                .retain(|id| millis(id).is_none_or(|at| at >= horizon));
        }
        let theirs: Vec<Event> = new.into_iter().filter(|e| e.actor != self.own).collect();
        for step in steps(&theirs) {
            progress.events(step);
        }
        Ok(())
    }
}

/// The milliseconds an event id starts with.
fn millis(id: &str) -> Option<u64> {
    id.split_once('-').and_then(|(at, _)| at.parse().ok())
}

/// The events of one engine step together (their ids share the step's
/// scope, `…-<instance>@<revision>-NNN`), as the local engine reports
/// them: a status change then says what a job start in the same step
/// would.
fn steps(events: &[Event]) -> Vec<&[Event]> {
    let scope = |e: &Event| {
        e.id.rsplit_once('-')
            .map_or(e.id.clone(), |(s, _)| s.to_owned())
    };
    let mut groups = Vec::new();
    let mut start = 0;
    for i in 1..=events.len() {
        if i == events.len() || scope(&events[i]) != scope(&events[start]) {
            groups.push(&events[start..i]);
            start = i;
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use vergence_api::wire::{InstanceProgress, Standing};
    use vergence_model::Status;

    use super::settled;

    fn instance(channel: &str, standing: Standing, awaiting_engine: bool) -> InstanceProgress {
        InstanceProgress {
            application: "shop".parse().unwrap(),
            service: "web".parse().unwrap(),
            release_channel: channel.parse().unwrap(),
            status: Status::Converged,
            standing,
            upstream: (standing == Standing::Upstream).then(|| "staging".parse().unwrap()),
            awaiting_engine,
            failed_release: false,
        }
    }

    #[test]
    fn an_instance_the_engine_has_yet_to_look_at_is_not_settled_whatever_its_status() {
        let converged = instance("staging", Standing::Converged, false);
        assert!(settled(std::slice::from_ref(&converged)));
        // Just pushed: CONVERGED on the old version until the engine looks.
        let pushed = instance("staging", Standing::Converged, true);
        assert!(!settled(&[pushed]));
    }

    #[test]
    fn a_wait_on_an_upstream_channel_is_settled_only_when_that_channel_is() {
        let prod = instance("prod", Standing::Upstream, false);
        for (staging, expected) in [
            // A converged upstream lets prod move: the engine has yet to
            // look at prod since (a race seen in `up --endpoint`, which
            // then exited 3 with prod about to apply).
            (Standing::Converged, false),
            (Standing::Failed, true),
            (Standing::Waiting, true),
            (Standing::Progressing, false),
        ] {
            let both = [instance("staging", staging, false), prod.clone()];
            assert_eq!(settled(&both), expected, "staging {staging:?}");
        }
        assert!(!settled(&[instance("prod", Standing::Progressing, false)]));
    }
}
