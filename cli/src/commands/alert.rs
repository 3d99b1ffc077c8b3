//! `vergence alert set|list`: alert states that protections refer to.

use anyhow::Result;

use super::Context;
use crate::args::{AlertCommand, AlertValue};
use crate::backend::Access;
use crate::output;

pub async fn run(ctx: &Context<'_>, command: &AlertCommand) -> Result<u8> {
    let backend = ctx.backend(Access::Existing)?;
    match command {
        AlertCommand::Set(args) => {
            let firing = args.value == AlertValue::Firing;
            let guarded = backend
                .set_alert(&args.name, firing, args.summary.clone())
                .await?;
            let state = if firing { "firing" } else { "resolved" };
            match guarded.len() {
                0 => println!(
                    "alert {} is {state}; no protection in the current config refers to it",
                    args.name
                ),
                n => println!(
                    "alert {} is {state}; {n} instance(s) guarded by it",
                    args.name
                ),
            }
        }
        AlertCommand::List => {
            let alerts = backend.alerts().await?;
            output::alerts_table(&mut std::io::stdout().lock(), &alerts)?;
        }
    }
    Ok(0)
}
