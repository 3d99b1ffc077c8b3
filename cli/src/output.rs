//! How the CLI shows things: aligned tables for people, JSON for scripts.

use std::collections::BTreeMap;
use std::io::Write;

use vergence_api::wire::{AgentView, InstanceView, StatusResponse};
use vergence_engine::control::{PlanAction, PlanEntry};
use vergence_model::{Event, EventKind, InstanceRecord};

/// Writes rows as columns separated by two spaces; the last column is not padded.
pub fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |out: &mut dyn Write, cells: Vec<&str>| -> std::io::Result<()> {
        let last = cells.len().saturating_sub(1);
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, header.to_vec())?;
    for row in rows {
        line(out, row.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

/// Status as a table, one instance a row.
pub fn status_table(out: &mut impl Write, records: &[InstanceRecord]) -> std::io::Result<()> {
    let views: Vec<InstanceView> = records.iter().map(InstanceView::of).collect();
    views_table(out, &views)
}

/// Status as a table, from instance views (local records or the API's answer).
pub fn views_table(out: &mut impl Write, views: &[InstanceView]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.application.to_string(),
                v.service.to_string(),
                v.release_channel.to_string(),
                v.desired_version.as_deref().unwrap_or("-").to_owned(),
                v.current_version.as_deref().unwrap_or("-").to_owned(),
                v.status.to_string(),
                v.reason.clone(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "APPLICATION",
            "SERVICE",
            "CHANNEL",
            "DESIRED",
            "CURRENT",
            "STATUS",
            "REASON",
        ],
        &rows,
    )
}

/// `vergence status --output json`: the same shape as the API's status answer.
pub fn status_json(
    out: &mut impl Write,
    records: &[InstanceRecord],
    agents: Vec<AgentView>,
) -> std::io::Result<()> {
    views_json(
        out,
        StatusResponse {
            instances: records.iter().map(InstanceView::of).collect(),
            agents,
        },
    )
}

/// The agents' last contact, under the instances (nothing without agents).
pub fn agents_table(out: &mut impl Write, agents: &[AgentView]) -> std::io::Result<()> {
    if agents.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    let rows: Vec<Vec<String>> = agents
        .iter()
        .map(|a| {
            vec![
                a.name.to_string(),
                if a.alive { "connected" } else { "silent" }.to_owned(),
                a.last_contact.clone(),
                a.version.clone(),
                a.namespace.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    table(
        out,
        &["AGENT", "STATE", "LAST CONTACT", "VERSION", "NAMESPACE"],
        &rows,
    )
}

pub fn views_json(out: &mut impl Write, status: StatusResponse) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, &status)?;
    writeln!(out)
}

/// `shop/web@prod` or just the application for events about no instance.
pub fn event_subject(event: &Event) -> String {
    match (&event.service, &event.release_channel) {
        (Some(s), Some(rc)) => format!("{}/{s}@{rc}", event.application),
        (Some(s), None) => format!("{}/{s}", event.application),
        _ => event.application.to_string(),
    }
}

/// One event as a line of live progress.
pub fn event_line(event: &Event) -> String {
    let time = event.at.strftime("%H:%M:%S");
    let what = match &event.kind {
        EventKind::StatusChanged { from, to } => format!("{from} → {to}: {}", event.message),
        _ => event.message.clone(),
    };
    format!("{time}  {:<28}  {what}", event_subject(event))
}

pub fn events_table(out: &mut impl Write, events: &[Event]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            let what = match &e.kind {
                EventKind::StatusChanged { from, to } => format!("{from} → {to}: {}", e.message),
                _ => e.message.clone(),
            };
            vec![
                e.at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
                event_subject(e),
                e.kind.name().to_owned(),
                e.actor.clone(),
                what,
            ]
        })
        .collect();
    table(
        out,
        &["TIME (UTC)", "INSTANCE", "EVENT", "ACTOR", "MESSAGE"],
        &rows,
    )
}

pub fn plan_table(out: &mut impl Write, entries: &[PlanEntry]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let action = match e.action {
                PlanAction::Add => "add",
                PlanAction::Update => "update",
                PlanAction::Reconfigure => "reconfigure",
                PlanAction::NoChange => "no change",
                PlanAction::Remove => "remove",
                PlanAction::WaitForRelease => "wait for release",
                PlanAction::StaysRolledBack => "stays rolled back",
            };
            let current = e.current_version.as_deref().unwrap_or("-");
            let desired = e.desired_version.as_deref().unwrap_or("-");
            // A rolled-back instance is not headed for its desired version.
            let versions = if current == desired || e.action == PlanAction::StaysRolledBack {
                current.to_owned()
            } else {
                format!("{current} → {desired}")
            };
            vec![
                e.instance.to_string(),
                action.to_owned(),
                versions,
                e.notes.join("; "),
            ]
        })
        .collect();
    table(out, &["INSTANCE", "ACTION", "VERSION", "NOTES"], &rows)
}

/// Details for one service: the pending plan and getInfo outputs of each
/// instance, under the status table. `plan_texts` holds the plan files that
/// are text, by artifact key; others are shown by size and digest.
pub fn instance_details(
    out: &mut impl Write,
    records: &[InstanceRecord],
    plan_texts: &BTreeMap<String, String>,
) -> std::io::Result<()> {
    for record in records {
        let state = &record.state;
        // The plan of what the instance is headed for: the desired version,
        // or the one a rollback goes back to.
        let headed_for = match &state.rollback {
            Some(rollback) => Some(&rollback.to.version),
            None => record.desired.version(),
        };
        let plan = state
            .plan
            .as_ref()
            .filter(|p| Some(&p.version) == headed_for);
        if plan.is_none() && state.info.is_empty() {
            continue;
        }
        writeln!(out, "\n{}:", record.key)?;
        for info in &state.info {
            writeln!(out, "  {}: {}", info.name, shown_on_terminal(&info.text))?;
        }
        if let Some(plan) = plan {
            writeln!(
                out,
                "  plan {} for {} (from the fetch at {}):",
                plan.short(),
                plan.version,
                vergence_engine::moment(plan.at)
            )?;
            // A Terraform plan is read as its changes; its files are a
            // binary plan and a large JSON, shown by size and digest.
            if let Some(content) = &plan.content {
                writeln!(out, "    changes {}", content.counts)?;
                for change in &content.changes {
                    writeln!(out, "      {change}")?;
                }
            }
            for (artifact, file) in plan.artifacts.iter().zip(plan.files()) {
                writeln!(out, "    {file}")?;
                if plan.content.is_some() {
                    continue;
                }
                if let Some(text) = plan_texts.get(&artifact.key) {
                    for line in text.lines() {
                        writeln!(out, "      {line}")?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether a file's text can go to a terminal as it is: control
/// characters other than line ends and tabs (escape sequences, bells, a
/// binary file's bytes) would be acted on by the terminal, not shown.
pub fn is_terminal_text(text: &str) -> bool {
    !text
        .chars()
        .any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
}

/// A job's output for a terminal, its control characters other than line
/// ends and tabs escaped (`\u{1b}`) so that they are seen, not acted on.
pub fn shown_on_terminal(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            c if c.is_control() && !matches!(c, '\n' | '\t') => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// The events of one step worth a line while `up` runs: a status change
/// already says what a job start or convergence in the same step would.
pub fn live_lines(events: &[Event]) -> impl Iterator<Item = &Event> {
    let status_changed = events
        .iter()
        .any(|e| matches!(e.kind, EventKind::StatusChanged { .. }));
    events.iter().filter(move |e| {
        !(status_changed
            && matches!(
                e.kind,
                EventKind::JobStarted { .. } | EventKind::Converged { .. }
            ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_with_control_characters_is_not_shown_as_it_is() {
        assert!(is_terminal_text("+ bucket logs\n\t~ data\r\n"));
        assert!(!is_terminal_text("PK\u{3}\u{4}\u{1b}[2J"));
        assert!(!is_terminal_text("bell\u{7}"));
        assert_eq!(
            shown_on_terminal("url\u{1b}]0;owned\u{7}\n\tnext"),
            "url\\u{1b}]0;owned\\u{7}\n\tnext"
        );
    }

    #[test]
    fn tables_align_columns_and_leave_the_last_unpadded() {
        let mut out = Vec::new();
        table(
            &mut out,
            &["A", "BB", "C"],
            &[vec!["xxx".into(), "y".into(), "last".into()]],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "A    BB  C\nxxx  y   last\n"
        );
    }
}
