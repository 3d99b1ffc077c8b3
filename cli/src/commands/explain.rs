//! `vergence explain`: why one instance is where it is.

use anyhow::Result;

use super::{Context, instance_key};
use crate::args::InstanceArgs;
use crate::backend::Access;

pub async fn run(ctx: &Context<'_>, args: &InstanceArgs) -> Result<u8> {
    let backend = ctx.backend(Access::Existing)?;
    let key = instance_key(backend.as_ref(), args).await?;
    for line in backend.explain(&key).await? {
        // Lines quote reasons and messages, which may come from a job.
        println!("{}", crate::output::terminal_lines(&line, "    "));
    }
    Ok(0)
}
