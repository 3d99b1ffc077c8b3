//! What `vergence up` shows while it runs. Each event is a line, as it
//! always was; on a terminal a summary line (converged / waiting / running
//! / failed of N, and what is running now) stays under them, redrawn in
//! place. Output that is not a terminal (CI logs, files, pipes) gets the
//! event lines only, byte for byte as before.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::sync::{Mutex, PoisonError};

use vergence_embedded::Progress;
use vergence_model::{Event, EventKind, InstanceKey, JobRecord, Status};

use crate::output;

/// Erases the terminal line the cursor is on and returns to its start.
const CLEAR_LINE: &str = "\r\x1b[2K";

/// Prints events as they happen, with the summary line on a terminal.
pub struct LiveProgress {
    /// Every instance's status, kept from the events; `None` when stdout is
    /// not a terminal (no summary).
    summary: Option<Mutex<BTreeMap<InstanceKey, Status>>>,
}

impl LiveProgress {
    /// Event lines only: for `serve`, and for stdout that is no terminal.
    pub fn lines() -> Self {
        Self { summary: None }
    }

    /// With the summary line when stdout is a terminal that can redraw
    /// (not `TERM=dumb`); `statuses` are where the instances start.
    pub fn for_up(statuses: impl IntoIterator<Item = (InstanceKey, Status)>) -> Self {
        let redraws = std::io::stdout().is_terminal()
            && std::env::var("TERM").map_or(true, |term| term != "dumb");
        if !redraws {
            return Self::lines();
        }
        let statuses = statuses.into_iter().collect();
        Self {
            summary: Some(Mutex::new(statuses)),
        }
    }

    /// Removes the summary line, before whatever `up` prints at the end.
    pub fn finish(&self) {
        if self.summary.is_some() {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{CLEAR_LINE}");
            let _ = out.flush();
        }
    }

    /// Prints `lines` (stdout), then the summary again on a terminal.
    fn print(&self, lines: &[String], events: &[Event]) {
        let Some(summary) = &self.summary else {
            for line in lines {
                println!("{line}");
            }
            return;
        };
        let mut statuses = summary.lock().unwrap_or_else(PoisonError::into_inner);
        for event in events {
            if let EventKind::StatusChanged { to, .. } = &event.kind
                && let Some(key) = instance_of(event)
            {
                statuses.insert(key, *to);
            }
        }
        let mut text = String::from(CLEAR_LINE);
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(&summary_line(&statuses, terminal_width()));
        let mut out = std::io::stdout().lock();
        // A closed stdout is noticed by the next plain print.
        let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    }
}

impl Progress for LiveProgress {
    fn events(&self, events: &[Event]) {
        let lines: Vec<String> = output::live_lines(events).map(output::event_line).collect();
        self.print(&lines, events);
    }

    fn step_failed(&self, key: &InstanceKey, error: &vergence_model::Error) {
        self.finish();
        let error = output::terminal_line(&error.to_string());
        eprintln!("warning: step of {key} failed: {error}; retrying");
        self.print(&[], &[]);
    }

    fn held_elsewhere(&self, key: &InstanceKey, job: &JobRecord) {
        let held_by = job
            .handle()
            .map_or_else(|| "another process".to_owned(), |h| h.to_string());
        let mine = format!(";pid={};", std::process::id());
        if !held_by.contains(&mine) {
            self.print(
                &[output::terminal_line(&format!(
                    "{key}: waiting for its {} job {}, started by another vergence process ({held_by}); its result is taken up here once recorded",
                    job.kind, job.id
                ))],
                &[],
            );
        }
    }
}

fn instance_of(event: &Event) -> Option<InstanceKey> {
    Some(InstanceKey::new(
        event.application.clone(),
        event.service.clone()?,
        event.release_channel.clone()?,
    ))
}

/// The terminal's width from `COLUMNS`, else 80: the summary must fit on
/// one line, or redrawing it in place would leave its wrapped part behind.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|&c| c > 0)
        .unwrap_or(80)
}

/// Where an instance is, for the summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Standing {
    Converged,
    Waiting,
    Running,
    Failed,
}

fn standing(status: Status) -> Standing {
    match status {
        Status::Converged => Standing::Converged,
        Status::Failed => Standing::Failed,
        Status::Pending | Status::Applying | Status::Verifying | Status::RollingBack => {
            Standing::Running
        }
        Status::WaitingPreconditions
        | Status::WaitingApproval
        | Status::Blocked
        | Status::Drifted
        | Status::RolledBack
        | Status::Paused => Standing::Waiting,
    }
}

/// The summary line: `converged 3 · waiting 1 · running 2 · failed 0 of 6 |
/// now: shop/web@prod APPLYING, …`, cut to `width` characters.
pub fn summary_line(statuses: &BTreeMap<InstanceKey, Status>, width: usize) -> String {
    let count = |s: Standing| {
        statuses
            .values()
            .filter(|status| standing(**status) == s)
            .count()
    };
    let mut line = format!(
        "converged {} · waiting {} · running {} · failed {} of {}",
        count(Standing::Converged),
        count(Standing::Waiting),
        count(Standing::Running),
        count(Standing::Failed),
        statuses.len()
    );
    let now: Vec<String> = statuses
        .iter()
        .filter(|(_, status)| {
            matches!(
                status,
                Status::Applying | Status::Verifying | Status::RollingBack
            )
        })
        .map(|(key, status)| format!("{key} {status}"))
        .collect();
    if !now.is_empty() {
        line.push_str(" | now: ");
        line.push_str(&now.join(", "));
    }
    cut(line, width)
}

/// `text` in at most `width` characters, an ellipsis marking a cut.
fn cut(text: String, width: usize) -> String {
    if text.chars().count() <= width {
        return text;
    }
    let mut cut: String = text.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(service: &str, channel: &str) -> InstanceKey {
        InstanceKey::new(
            "shop".parse().unwrap(),
            service.parse().unwrap(),
            channel.parse().unwrap(),
        )
    }

    fn statuses(of: &[(&str, &str, Status)]) -> BTreeMap<InstanceKey, Status> {
        of.iter()
            .map(|(service, channel, status)| (key(service, channel), *status))
            .collect()
    }

    #[test]
    fn the_summary_counts_each_standing_and_names_what_runs_now() {
        let all = statuses(&[
            ("api", "staging", Status::Converged),
            ("api", "prod", Status::WaitingApproval),
            ("web", "staging", Status::Applying),
            ("web", "prod", Status::WaitingPreconditions),
            ("db", "staging", Status::Failed),
            ("db", "prod", Status::Verifying),
        ]);
        assert_eq!(
            summary_line(&all, 200),
            "converged 1 · waiting 2 · running 2 · failed 1 of 6 | now: shop/db@prod VERIFYING, shop/web@staging APPLYING"
        );
    }

    #[test]
    fn a_summary_with_nothing_running_names_nothing() {
        let all = statuses(&[
            ("api", "staging", Status::Converged),
            ("api", "prod", Status::RolledBack),
        ]);
        assert_eq!(
            summary_line(&all, 80),
            "converged 1 · waiting 1 · running 0 · failed 0 of 2"
        );
    }

    #[test]
    fn the_summary_is_cut_to_the_terminal_width() {
        let all = statuses(&[("web", "staging", Status::Applying)]);
        let line = summary_line(&all, 40);
        assert_eq!(line.chars().count(), 40);
        assert!(line.ends_with('…'), "{line}");
        assert!(line.starts_with("converged 0 · waiting 0 · running 1"));
    }
}
