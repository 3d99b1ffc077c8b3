//! `vergence plan`: what storing the config in `--config` would change,
//! against the state as it is; nothing runs and nothing is stored.

use anyhow::Result;

use super::{Context, config_rejected, load_bundle};
use crate::backend::Access;
use crate::output;

pub async fn run(ctx: &Context<'_>) -> Result<u8> {
    let bundle = load_bundle(ctx.global, &ctx.global.config)?;
    // Planning reads state if there is some, and never creates it.
    let backend = ctx.backend(Access::IfPresent)?;
    let plan = match config_rejected(backend.plan(bundle).await)? {
        Ok(plan) => plan,
        Err(code) => return Ok(code),
    };
    output::plan_table(&mut std::io::stdout().lock(), &plan.instances)?;
    Ok(0)
}
