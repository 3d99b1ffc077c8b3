//! `vergence events`: the audit trail, newest last.

use anyhow::Result;
use vergence_model::EventFilter;

use super::{Context, filter};
use crate::args::{EventsArgs, Output};
use crate::backend::Access;
use crate::output;

pub async fn run(ctx: &Context<'_>, args: &EventsArgs) -> Result<u8> {
    let f = filter(&args.filter)?;
    let backend = ctx.backend(Access::Existing)?;
    let events = backend
        .events(&EventFilter {
            application: f.application,
            service: f.service,
            release_channel: f.release_channel,
            limit: Some(args.limit),
        })
        .await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => output::events_json(&mut out, events)?,
        Output::Table => output::events_table(&mut out, &events)?,
    }
    Ok(0)
}
