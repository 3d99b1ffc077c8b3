//! `vergence status`: every instance's status, for people or scripts.

use std::io::Write;

use anyhow::Result;

use super::{Context, filter};
use crate::args::{Output, StatusArgs};
use crate::backend::Access;
use crate::output;

pub async fn run(ctx: &Context<'_>, args: &StatusArgs) -> Result<u8> {
    let filter = filter(&args.filter)?;
    let backend = ctx.backend(Access::Existing)?;
    let status = backend.status(&filter).await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => output::views_json(&mut out, &status)?,
        Output::Table if status.instances.is_empty() => writeln!(out, "no instances match")?,
        Output::Table => {
            output::views_table(&mut out, &status.instances)?;
            output::agents_table(&mut out, &status.agents)?;
            // One service's details: its getInfo outputs and pending plans.
            if args.filter.service.is_some() {
                let texts = backend.plan_texts(&status.instances).await?;
                output::instance_details(&mut out, &status.instances, &texts)?;
            }
        }
    }
    Ok(0)
}
