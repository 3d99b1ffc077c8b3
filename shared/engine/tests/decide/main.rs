//! How many heap allocations one `decide()` makes. The scheduler decides for
//! every instance whose check is due, and an allocation costs more than most
//! of what a decision computes: the count is what `benches/decide.rs`
//! measures in time (issue 28: 1,000,000 apply decisions a second on one
//! core), as a number that does not depend on the machine.
//!
//! The decision's own output is counted too (its state, job and events): a
//! job that copies its spec, or an event that copies its actor, shows here.

mod fixtures;

use fixtures::{compiled, converged, fresh, now};
use vergence_engine::{Decision, Facts, decide};
use vergence_model::{FetchMode, InstanceRecord};

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// The decision for `record` and how many allocations making it took.
/// dhat counts every thread's: this binary's one test decides alone.
fn counted(record: &InstanceRecord) -> (Decision, u64) {
    let facts = Facts::at(now());
    let before = dhat::HeapStats::get().total_blocks;
    let decision = decide(record, &facts);
    let after = dhat::HeapStats::get().total_blocks;
    (decision, after - before)
}

/// One test: dhat's profiler is one per process, and its counts are every
/// thread's.
#[test]
fn a_decision_shares_the_job_spec_actor_and_ids_instead_of_copying_them() {
    let _profiler = dhat::Profiler::builder().testing().build();

    let apply = fresh(compiled(None), now());
    let (decision, allocations) = counted(&apply);
    assert_eq!(decision.jobs.len(), 1, "starts the apply: {decision:?}");
    let apply_allocations = allocations;

    let fetch = fresh(compiled(Some(FetchMode::ExitCode)), now());
    let (decision, allocations) = counted(&fetch);
    assert_eq!(decision.jobs.len(), 1, "starts the fetch: {decision:?}");
    let fetch_allocations = allocations;

    let idle = converged(now());
    let (decision, allocations) = counted(&idle);
    assert!(decision.is_noop(&idle), "{decision:?}");
    let noop_allocations = allocations;

    // What is left is what a decision says that is new: the job's id, its
    // sentences (events, the status reason), the state's own fields and
    // the lists they go in.
    let counts = (apply_allocations, fetch_allocations, noop_allocations);
    assert!(
        apply_allocations <= 9 && fetch_allocations <= 7 && noop_allocations <= 5,
        "allocations of an apply, a fetch and a no-op decision: {counts:?}"
    );
}
