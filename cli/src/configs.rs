//! `vergence configs push --app`, `configs list` and `configs rollback`:
//! one application's part of the config, pushed, listed and rolled back on
//! its own, on the local state or through the API
//! (docs/per-application-configs.md).

use anyhow::{Result, anyhow};
use reqwest::Method;
use serde::{Deserialize, Serialize};
use vergence_engine::control::{ApplyReport, Control, PartVersion, PreparedPush};
use vergence_model::{ApplicationName, ConfigBundle, ConfigPart, Error};

use crate::args::{ConfigsListArgs, ConfigsPushArgs, ConfigsRollbackArgs};
use crate::commands::{apply_summary, report_config_errors, valid_summary};
use crate::output;
use crate::remote::Remote;

fn application(raw: &str) -> Result<ApplicationName> {
    raw.parse().map_err(|e| anyhow!("--app {raw:?}: {e}"))
}

/// Locally there are no tokens, but a push of one application's part
/// still changes nothing outside it.
fn within_scope(prepared: &PreparedPush) -> Result<(), anyhow::Error> {
    match prepared.scope_refusal() {
        Some(refusal) => Err(anyhow!(refusal)),
        None => Ok(()),
    }
}

/// Exit 1 with every error for a config that does not compile, as
/// `vergence validate` does.
fn config_errors<T>(result: Result<T>) -> Result<Result<T, u8>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(e) => match e.downcast_ref::<Error>() {
            Some(error) if report_config_errors(error) => Ok(Err(1)),
            _ => Err(e),
        },
    }
}

pub async fn push_part_local(
    control: &Control,
    bundle: ConfigBundle,
    raw_application: &str,
    args: &ConfigsPushArgs,
    actor: &str,
) -> Result<u8> {
    let application = application(raw_application)?;
    if args.validate_only {
        let prepared = control
            .prepare_push(&bundle, Some(&application), None)
            .await;
        let prepared = match config_errors(prepared.map_err(anyhow::Error::from))? {
            Ok(prepared) => prepared,
            Err(code) => return Ok(code),
        };
        within_scope(&prepared)?;
        println!("{}", valid_summary(prepared.model().as_ref()));
        return Ok(0);
    }
    let report = control
        .push_config(&bundle, Some(&application), actor, None, within_scope)
        .await;
    match config_errors(report)? {
        Ok(report) => {
            println!("{}", part_summary(&application, &report));
            Ok(0)
        }
        Err(code) => Ok(code),
    }
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

/// A push's summary: the parts it changed (if any), then the apply summary.
pub fn push_summary(report: &ApplyReport) -> String {
    if report.changed_parts.is_empty() {
        return apply_summary(report);
    }
    let parts: Vec<String> = report
        .changed_parts
        .iter()
        .map(|key| ConfigPart::from_key(key).map_or_else(|| key.clone(), |p| p.to_string()))
        .collect();
    format!("changed {}; {}", parts.join(", "), apply_summary(report))
}

pub async fn list_local(control: &Control, args: &ConfigsListArgs) -> Result<u8> {
    let application = application(&args.application)?;
    let versions = control
        .part_versions(&ConfigPart::Application(application.clone()), args.limit)
        .await?;
    print_versions(&application, &versions)
}

pub async fn rollback_local(
    control: &Control,
    args: &ConfigsRollbackArgs,
    actor: &str,
) -> Result<u8> {
    let application = application(&args.application)?;
    let report = control
        .rollback_config(&application, args.to.as_deref(), actor, within_scope)
        .await;
    match config_errors(report)? {
        Ok(report) => {
            println!("{}", rollback_summary(&application, &report));
            Ok(0)
        }
        Err(code) => Ok(code),
    }
}

fn rollback_summary(application: &ApplicationName, report: &ApplyReport) -> String {
    format!(
        "rolled application {application}'s config back: {}",
        part_summary(application, report)
    )
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

#[derive(Deserialize)]
struct VersionsResponse {
    application: ApplicationName,
    versions: Vec<PartVersion>,
}

#[derive(Serialize)]
struct RollbackRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
}

pub async fn list_remote(remote: &Remote, args: &ConfigsListArgs) -> Result<u8> {
    let application = application(&args.application)?;
    let request = remote
        .request(
            Method::GET,
            &format!("/v1/applications/{application}/configs"),
        )
        .query(&[("limit", args.limit.to_string())]);
    let answer: VersionsResponse = remote.call(request).await?;
    print_versions(&answer.application, &answer.versions)
}

pub async fn rollback_remote(remote: &Remote, args: &ConfigsRollbackArgs) -> Result<u8> {
    let application = application(&args.application)?;
    let request = remote.json_body(
        remote.request(
            Method::POST,
            &format!("/v1/applications/{application}/configs/rollback"),
        ),
        &RollbackRequest {
            to: args.to.as_deref(),
        },
        false,
    )?;
    let report: ApplyReport = remote.call(request).await?;
    println!("{}", rollback_summary(&application, &report));
    Ok(0)
}
