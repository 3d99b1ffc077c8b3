//! Operator controls: `pause` and `resume` (applies of an application, a
//! service or a channel), `pin` and `unpin` (one instance's version), and
//! `rollback` (one instance).

use anyhow::Result;
use vergence_engine::control::PauseAction;

use super::{Context, filter, instance_key};
use crate::args::{Filter, InstanceArgs, OverrideArgs, PinArgs, RollbackArgs, ScopeArgs};
use crate::backend::{Access, Backend, Place};

/// Who carries a recorded change out, for confirmations.
fn carried_out_by(backend: &dyn Backend) -> &'static str {
    match backend.place() {
        Place::Local => "`vergence up`",
        Place::Server => "the server",
    }
}

pub async fn pause(ctx: &Context<'_>, args: &ScopeArgs, action: PauseAction) -> Result<u8> {
    let filter = filter(&Filter {
        application: Some(args.application.clone()),
        service: args.service.clone(),
        release_channel: args.release_channel.clone(),
    })?;
    let backend = ctx.backend(Access::Existing)?;
    for key in backend.pause(&filter, action).await? {
        println!("{} {key}", action.done());
    }
    Ok(0)
}

pub async fn pin(ctx: &Context<'_>, args: &PinArgs) -> Result<u8> {
    let backend = ctx.backend(Access::Existing)?;
    let key = instance_key(backend.as_ref(), &args.instance).await?;
    backend.pin(&key, &args.version).await?;
    println!(
        "pinned {key} to {}; {} converges it there, `vergence unpin` lets it follow releases again",
        args.version,
        carried_out_by(backend.as_ref())
    );
    Ok(0)
}

pub async fn unpin(ctx: &Context<'_>, args: &InstanceArgs) -> Result<u8> {
    let backend = ctx.backend(Access::Existing)?;
    let key = instance_key(backend.as_ref(), args).await?;
    backend.unpin(&key).await?;
    println!("unpinned {key}");
    Ok(0)
}

pub async fn rollback(ctx: &Context<'_>, args: &RollbackArgs) -> Result<u8> {
    let backend = ctx.backend(Access::Existing)?;
    let key = instance_key(backend.as_ref(), &args.instance).await?;
    backend.rollback(&key, args.version.as_ref()).await?;
    println!(
        "rollback of {key} requested; {} carries it out",
        carried_out_by(backend.as_ref())
    );
    Ok(0)
}

/// Break-glass: what was granted, and that it is on the record.
pub async fn override_windows(ctx: &Context<'_>, args: &OverrideArgs) -> Result<u8> {
    let backend = ctx.backend(Access::Existing)?;
    let key = instance_key(backend.as_ref(), &args.instance).await?;
    let granted = backend
        .override_windows(&key, args.version.as_ref(), &args.reason, args.lasting)
        .await?;
    println!(
        "{key}: {} may apply through its freezes and closed windows until {} or until it converges; recorded with the reason {:?}. Approvals, protections and pauses still hold; {} applies it",
        granted.version,
        vergence_engine::moment(granted.expires_at),
        granted.reason,
        carried_out_by(backend.as_ref())
    );
    Ok(0)
}
