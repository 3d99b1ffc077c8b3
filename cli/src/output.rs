//! How the CLI shows things: aligned tables for people, JSON for scripts.

use std::io::Write;

use vergence_api::wire::{
    AgentView, AlertView, EventsResponse, InstanceView, PlanActionName, PlanEntryView,
    StatusResponse, TokenView,
};
use vergence_model::{Event, EventKind, InstanceKey, Scope};

use crate::backend::PlanTexts;

/// Writes rows as columns separated by two spaces; the last column is not padded.
pub fn table(out: &mut impl Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    // Cells hold reasons, messages and names that may come from a job.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|cell| terminal_line(cell)).collect())
        .collect();
    let rows = rows.as_slice();
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

/// `vergence status --output json`: the API's status answer, as it is.
pub fn views_json(out: &mut impl Write, status: &StatusResponse) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, status)?;
    writeln!(out)
}

/// `vergence events --output json`: `{"events": [...]}`, each event's
/// fields in name order (a contract for scripts, whatever the source).
pub fn events_json(out: &mut impl Write, events: Vec<Event>) -> std::io::Result<()> {
    let value = serde_json::to_value(EventsResponse { events })?;
    serde_json::to_writer_pretty(&mut *out, &value)?;
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
    format!(
        "{time}  {:<28}  {}",
        terminal_line(&event_subject(event)),
        terminal_line(&what)
    )
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
                e.actor.to_string(),
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

pub fn plan_table(out: &mut impl Write, entries: &[PlanEntryView]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            let action = match e.action {
                PlanActionName::Add => "add",
                PlanActionName::Update => "update",
                PlanActionName::Reconfigure => "reconfigure",
                PlanActionName::NoChange => "no change",
                PlanActionName::Remove => "remove",
                PlanActionName::WaitForRelease => "wait for release",
                PlanActionName::StaysRolledBack => "stays rolled back",
            };
            let current = e.current_version.as_deref().unwrap_or("-");
            let desired = e.desired_version.as_deref().unwrap_or("-");
            // A rolled-back instance is not headed for its desired version.
            let versions = if current == desired || e.action == PlanActionName::StaysRolledBack {
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

pub fn alerts_table(out: &mut impl Write, alerts: &[AlertView]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = alerts
        .iter()
        .map(|a| {
            vec![
                a.name.clone(),
                if a.state.is_firing() {
                    "firing"
                } else {
                    "resolved"
                }
                .to_owned(),
                vergence_engine::moment(a.since),
                a.actor.clone(),
                a.summary.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        out,
        &["ALERT", "STATE", "SINCE", "SET BY", "SUMMARY"],
        &rows,
    )
}

pub fn tokens_table(out: &mut impl Write, tokens: &[TokenView]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = tokens
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                scope_list(&t.scopes),
                t.created_at.strftime("%Y-%m-%d %H:%M:%S").to_string(),
                t.created_by.clone(),
                t.description.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        out,
        &["ID", "SCOPES", "CREATED (UTC)", "CREATED BY", "DESCRIPTION"],
        &rows,
    )
}

pub fn scope_list(scopes: &[Scope]) -> String {
    scopes
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Details for one service: what getInfo reported and the pending plan of each
/// instance, under the status table. `plan_texts` holds the plan files
/// that are text, where they could be read; others are shown by name, size
/// and digest.
pub fn instance_details(
    out: &mut impl Write,
    views: &[InstanceView],
    plan_texts: &PlanTexts,
) -> std::io::Result<()> {
    for view in views {
        if view.plan.is_none()
            && view.info.is_empty()
            && view.info_text.is_none()
            && view.info_failure.is_none()
        {
            continue;
        }
        let key = InstanceKey::new(
            view.application.clone(),
            view.service.clone(),
            view.release_channel.clone(),
        );
        writeln!(out, "\n{key}:")?;
        if let Some(failure) = &view.info_failure {
            writeln!(out, "  {}", terminal_lines(failure, "    "))?;
        }
        for info in &view.info {
            writeln!(
                out,
                "  {}: {}",
                terminal_line(&info.name),
                terminal_lines(&info.text, "    ")
            )?;
        }
        // Freeform info, as printed: every line indented under a heading,
        // so no line of it can pass for one of Vergence's own.
        if let Some(text) = &view.info_text {
            writeln!(out, "  info:\n    {}", terminal_lines(text, "    "))?;
        }
        let Some(plan) = &view.plan else {
            continue;
        };
        writeln!(
            out,
            "  plan {} for {} (from the fetch at {}):",
            &plan.digest[..plan.digest.len().min(12)],
            plan.version,
            vergence_engine::moment(plan.at)
        )?;
        // A Terraform plan is read as its changes; its files are a binary
        // plan and a large JSON, shown by size and digest.
        if let Some(counts) = &plan.counts {
            writeln!(out, "    changes {counts}")?;
            for change in &plan.changes {
                writeln!(out, "      {}", terminal_line(&change.to_string()))?;
            }
        }
        for (index, file) in plan.files.iter().enumerate() {
            writeln!(out, "    {}", terminal_line(&file.to_string()))?;
            if let Some(text) = plan_texts.get(&(key.clone(), index)) {
                for line in text.lines() {
                    writeln!(out, "      {}", terminal_line(line))?;
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

/// Text that did not come from Vergence (a job's output, a getInfo name,
/// a reason quoting stderr, an event message, a config key, value or file
/// name, a server's error) for one line of a terminal. Every character a
/// terminal acts on instead of showing is written as an escape, so that a
/// job cannot set the title, clear the screen, move the cursor, or fake a
/// line of its own: C0 controls (line ends and tabs too: `\n`, `\t`,
/// `\r`, `\x1b`), DEL and C1 controls (`\x7f`, `\x9b`), and the
/// bidirectional marks, embeddings, overrides and isolates that reorder
/// what is shown (`\u{202e}`). Only text output is escaped:
/// `--output json` keeps the exact text.
pub fn terminal_line(text: &str) -> String {
    escaped(text, None)
}

/// [`terminal_line`] for text of several lines shown as lines: each line
/// end starts a new line indented by `indent`, so the text never starts
/// a line of its own (a fake `✓ converged`); tabs are kept.
pub fn terminal_lines(text: &str, indent: &str) -> String {
    escaped(text, Some(indent))
}

fn escaped(text: &str, indent: Option<&str>) -> String {
    use std::fmt::Write as _;
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match (c, indent) {
            ('\n', Some(indent)) => {
                shown.push('\n');
                shown.push_str(indent);
            }
            ('\t', Some(_)) => shown.push('\t'),
            ('\n', None) => shown.push_str("\\n"),
            ('\t', None) => shown.push_str("\\t"),
            ('\r', _) => shown.push_str("\\r"),
            (c, _) if c.is_control() => {
                let _ = write!(shown, "\\x{:02x}", u32::from(c));
            }
            (c, _) if reorders(c) => {
                let _ = write!(shown, "\\u{{{:x}}}", u32::from(c));
            }
            (c, _) => shown.push(c),
        }
    }
    shown
}

/// The characters that change the order text is shown in: marks,
/// embeddings, overrides and isolates (the "Trojan Source" characters).
fn reorders(c: char) -> bool {
    matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
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
    }

    #[test]
    fn text_for_a_terminal_shows_controls_and_reordering_as_escapes() {
        let hostile =
            "url\u{1b}]0;owned\u{7}\n\u{2713} converged\u{0}\u{7f}\u{9b}2J\r\tx\u{202e}cba";
        assert_eq!(
            terminal_line(hostile),
            "url\\x1b]0;owned\\x07\\n\u{2713} converged\\x00\\x7f\\x9b2J\\r\\tx\\u{202e}cba"
        );
        assert_eq!(
            terminal_lines(hostile, "    "),
            "url\\x1b]0;owned\\x07\n    \u{2713} converged\\x00\\x7f\\x9b2J\\r\tx\\u{202e}cba"
        );
        assert_eq!(
            terminal_line("plain text, ünïcode ✓"),
            "plain text, ünïcode ✓"
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
