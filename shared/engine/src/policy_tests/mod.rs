//! Delivery policies driven through `decide()` with an injected clock:
//! windows open and close, protections block and fail, alerts fire and
//! resolve mid-rollout, post-deployment checks fail and the previous
//! version comes back, plans bind approvals.
//!
//! Grouped by what holds or undoes an apply: [`gates`], [`rollback`] and
//! [`approvals`]; this module holds the job protection they share.

use jiff::SignedDuration;

use super::tests::n;
use vergence_model::*;

mod approvals;
mod gates;
mod rollback;
mod rollout;

fn job_protection(name: &str, lifecycle: Lifecycle) -> CompiledProtection {
    CompiledProtection {
        name: n(name),
        lifecycle,
        check: ProtectionCheck::Job {
            job: std::sync::Arc::new(super::tests::job_spec(&format!("./{name}"))),
        },
        poll_interval: SignedDuration::from_mins(1),
        attached_to: "release channel prod".into(),
    }
}
