//! `vergence approve`: one version for one instance.

use anyhow::Result;
use vergence_model::InstanceKey;

use super::{Context, name};
use crate::args::ApproveArgs;
use crate::backend::Access;

pub async fn run(ctx: &Context<'_>, args: &ApproveArgs) -> Result<u8> {
    let key = InstanceKey::new(
        name(&args.application, "--app")?,
        name(&args.service, "--service")?,
        name(&args.release_channel, "--release-channel")?,
    );
    let backend = ctx.backend(Access::Existing)?;
    let approval = backend.approve(&key, args.version.as_ref()).await?;
    let (service, channel) = (&key.service, &key.release_channel);
    match &approval.plan_sha256 {
        Some(plan) => println!(
            "approved {} of {service} for {channel}, bound to plan {} (a different plan needs a new approval)",
            approval.version,
            &plan[..12.min(plan.len())]
        ),
        None => println!("approved {} of {service} for {channel}", approval.version),
    }
    Ok(0)
}
