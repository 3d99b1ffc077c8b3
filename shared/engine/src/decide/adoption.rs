//! Brownfield adoption as a fetch reports it: a live object the runtime
//! just marked as its own (it already ran the desired state) is recorded
//! with an `adopted` event; one that differs is kept on the fetch's
//! observation, where the takeover gate finds it (see `gates`).

use super::Decider;
use crate::fetch::parse_output;
use vergence_model::{EventKind, FetchMode, InFlightJob, JobResult};

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
                takeovers.push(takeover);
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
