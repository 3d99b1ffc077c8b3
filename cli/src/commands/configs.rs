//! `vergence configs push|list|rollback`: store a config (whole, or one
//! application's part) without converging it here; list and roll back an
//! application's part (docs/per-application-configs.md).

use anyhow::Result;
use vergence_api::wire::ValidationReport;
use vergence_engine::control::{ApplyReport, PartVersion};
use vergence_model::ApplicationName;

use super::{
    Context, apply_summary, compile, config_rejected, load_bundle, name, optional_name,
    push_summary, valid_summary,
};
use crate::args::{ConfigsCommand, ConfigsListArgs, ConfigsPushArgs, ConfigsRollbackArgs};
use crate::backend::{Access, ConfigPush, Pushed};
use crate::output;

pub async fn run(ctx: &Context<'_>, command: &ConfigsCommand) -> Result<u8> {
    match command {
        ConfigsCommand::Push(args) => push(ctx, args).await,
        ConfigsCommand::List(args) => list(ctx, args).await,
        ConfigsCommand::Rollback(args) => rollback(ctx, args).await,
    }
}

async fn push(ctx: &Context<'_>, args: &ConfigsPushArgs) -> Result<u8> {
    let dir = args.dir.as_deref().unwrap_or(&ctx.global.config);
    let bundle = load_bundle(ctx.global, dir)?;
    let application: Option<ApplicationName> = optional_name(args.application.as_deref(), "--app")?;
    // A whole config is checked before the local state is opened, so a
    // rejected one creates none; an API checks what it receives.
    let compiled = match application {
        None if ctx.checks_configs_here() => {
            let Some(model) = compile(&bundle)? else {
                return Ok(1);
            };
            if args.validate_only {
                println!("{}", validated(&ValidationReport::of(model.as_ref())));
                return Ok(0);
            }
            Some(model)
        }
        _ => None,
    };
    // Checking only never creates a state; one application's part is
    // checked composed with the others, when there are some.
    let access = if args.validate_only {
        Access::IfPresent
    } else {
        Access::Create
    };
    let backend = ctx.backend(access)?;
    let push = ConfigPush {
        bundle,
        application: application.clone(),
        validate_only: args.validate_only,
        compiled,
    };
    let pushed = match config_rejected(backend.push_config(push).await)? {
        Ok(pushed) => pushed,
        Err(code) => return Ok(code),
    };
    match (pushed, &application) {
        (Pushed::Validated(report), _) => println!("{}", validated(&report)),
        (Pushed::Applied(report), Some(application)) => {
            println!("{}", part_summary(application, &report));
        }
        (Pushed::Applied(report), None) => println!("{}", push_summary(&report)),
    }
    Ok(0)
}

fn validated(report: &ValidationReport) -> String {
    valid_summary(report.applications.len(), report.runtimes, report.instances)
}

/// `configs push --app shop`: which parts changed, then the apply summary.
fn part_summary(application: &ApplicationName, report: &ApplyReport) -> String {
    if report.changed_parts.is_empty() {
        return format!(
            "application {application}'s config is unchanged; {}",
            apply_summary(report)
        );
    }
    push_summary(report)
}

async fn list(ctx: &Context<'_>, args: &ConfigsListArgs) -> Result<u8> {
    let application: ApplicationName = name(&args.application, "--app")?;
    let backend = ctx.backend(Access::Existing)?;
    let versions = backend.config_versions(&application, args.limit).await?;
    print_versions(&application, &versions)
}

async fn rollback(ctx: &Context<'_>, args: &ConfigsRollbackArgs) -> Result<u8> {
    let application: ApplicationName = name(&args.application, "--app")?;
    let backend = ctx.backend(Access::Existing)?;
    let rolled_back = backend
        .rollback_config(&application, args.to.as_deref())
        .await;
    match config_rejected(rolled_back)? {
        Ok(report) => {
            println!(
                "rolled application {application}'s config back: {}",
                part_summary(&application, &report)
            );
            Ok(0)
        }
        Err(code) => Ok(code),
    }
}

fn print_versions(application: &ApplicationName, versions: &[PartVersion]) -> Result<u8> {
    if versions.is_empty() {
        println!(
            "application {application} has no config versions yet; push one with `vergence configs push DIR --app {application}` or `vergence up`"
        );
        return Ok(0);
    }
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            vec![
                format!(
                    "{}{}",
                    &v.hash[..v.hash.len().min(12)],
                    if v.current { " (in force)" } else { "" }
                ),
                v.created_at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
                v.actor.clone(),
                v.files.join(", "),
            ]
        })
        .collect();
    output::table(
        &mut std::io::stdout().lock(),
        &["VERSION", "PUSHED (UTC)", "BY", "FILES"],
        &rows,
    )?;
    Ok(0)
}
