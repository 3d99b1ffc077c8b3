//! Brownfield adoption as a fetch reports it: a live object the runtime
//! just marked as its own (it already ran the desired state) is recorded
//! with an `adopted` event; one that differs is kept on the fetch's
//! observation, where the takeover gate finds it (see `gates`).

use super::Decider;
use crate::fetch::parse_output;
use vergence_model::adoption::MAX_DIFFERENCES;
use vergence_model::text::clip;
use vergence_model::{EventKind, FetchMode, InFlightJob, JobResult};

/// Objects to take over kept from one fetch (the rest wait for the next
/// apply's approval all the same: it is one approval of the version).
const MAX_TAKEOVERS: usize = 10;
/// Characters of one difference or object name kept.
const MAX_TEXT: usize = 300;

impl Decider<'_> {
    /// Reads what a structured fetch says about objects it did not make.
    pub(super) fn absorb_adoption(
        &mut self,
        mode: FetchMode,
        flight: &InFlightJob,
        result: &JobResult,
        stale: bool,
    ) {
        if mode != FetchMode::Structured || !result.exited_with(0) {
            return;
        }
        let Ok(output) = parse_output(&result.stdout) else {
            return;
        };
        let mut takeovers = Vec::new();
        for object in output.objects {
            if let Some(mut takeover) = object.takeover {
                if takeover.object.is_empty() {
                    takeover.object.clone_from(&object.name);
                }
                // Kept in the instance's state and shown in its reason:
                // bounded whatever a runtime prints.
                takeover.object = clip(takeover.object, MAX_TEXT);
                let more = takeover.differences.len().saturating_sub(MAX_DIFFERENCES);
                takeover.differences.truncate(MAX_DIFFERENCES);
                for difference in &mut takeover.differences {
                    *difference = clip(std::mem::take(difference), MAX_TEXT);
                }
                if more > 0 {
                    takeover.differences.push(format!("… and {more} more"));
                }
                if takeovers.len() < MAX_TAKEOVERS {
                    takeovers.push(takeover);
                }
            } else if object.adopted && !stale {
                self.event(
                    EventKind::Adopted {
                        version: flight.version.clone(),
                        object: object.name.clone(),
                    },
                    format!(
                        "adopted {}: it already ran {} (marked as Vergence's, nothing applied)",
                        object.name, flight.version
                    ),
                );
            }
        }
        if let Some(observed) = self.state.last_fetch.as_mut() {
            observed.takeovers = takeovers;
        }
    }
}
