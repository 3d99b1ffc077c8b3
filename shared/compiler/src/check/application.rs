//! Checks `application` documents: each release channel's runtimes (and
//! its overrides of their runners), constants, preconditions, protections,
//! time windows and rollout, and that the
//! preconditions between channels form no cycle (a channel in one could
//! never deploy).

use std::collections::{BTreeMap, BTreeSet};

use super::field_path::FieldPath;
use super::runner::RuntimeRunner;
use super::{Checker, Located, unknown_name_message};
use crate::config::schema::{
    ApplicationDoc, ConstantDoc, DenyWindowDoc, PreconditionDoc, ReleaseChannelDoc,
};
use crate::model::{Application, ReleaseChannel};
use crate::template::check_identifier;
use vergence_model::{
    DenyWindow, Precondition, RecurringWindow, ReleaseChannelName, RunnerSpec, RuntimeName, Source,
    TimeWindows,
};

impl<'a> Checker<'a> {
    /// Checks an `application` document: its release channels, and which
    /// wait for which.
    pub(super) fn application(
        &mut self,
        app: &Located<'a, ApplicationDoc>,
        runtimes: &BTreeMap<RuntimeName, RuntimeRunner<'_>>,
    ) -> Application {
        let (source, doc) = (app.source, app.doc);
        let channels_path = FieldPath::root("application").key("releaseChannels");
        if doc.release_channels.is_empty() {
            self.err(
                source,
                &channels_path,
                "an application needs at least one release channel",
            );
        }
        let channel_names: Vec<&ReleaseChannelName> =
            doc.release_channels.iter().map(|c| &c.name).collect();
        let mut channels: Vec<ReleaseChannel> = Vec::new();
        for (i, channel) in doc.release_channels.iter().enumerate() {
            let path = channels_path.index(i);
            if channels.iter().any(|c| c.name == channel.name) {
                self.err(
                    source,
                    &path.key("name"),
                    format!("release channel '{}' is defined twice", channel.name),
                );
                continue;
            }
            let checked = self.release_channel(source, &path, channel, runtimes, &channel_names);
            channels.push(checked);
        }
        self.check_cycles(source, &channels);
        link_downstream(&mut channels);
        let notifications =
            self.notifications(source, &doc.name, &doc.notifications, &channel_names);
        let trust = self.trust(source, &doc.name, &doc.trust);
        Application {
            name: doc.name.clone(),
            release_channels: channels,
            services: BTreeMap::new(),
            notifications,
            trust,
        }
    }

    /// One release channel (at `path`); `channel_names` are all the
    /// application's, which its preconditions may wait for.
    fn release_channel(
        &mut self,
        source: &Source,
        path: &FieldPath,
        channel: &ReleaseChannelDoc,
        all_runtimes: &BTreeMap<RuntimeName, RuntimeRunner<'_>>,
        channel_names: &[&ReleaseChannelName],
    ) -> ReleaseChannel {
        let (runtimes, runner_overrides) =
            self.channel_runtimes(source, path, channel, all_runtimes);
        let constants = self.constants(source, path, &channel.constants);
        let preconditions = self.preconditions(source, path, channel, channel_names);
        let protections = self.protection_uses(
            source,
            path,
            &format!("release channel {}", channel.name),
            &channel.protections,
        );
        let windows = self.windows(source, path, channel);
        let rollout = self.channel_rollout(source, path, channel, &runtimes);
        ReleaseChannel {
            name: channel.name.clone(),
            runtimes,
            constants,
            preconditions,
            downstream: Vec::new(),
            protections,
            windows,
            runner_overrides,
            rollout,
        }
    }

    /// The runtimes a release channel offers its services, each defined,
    /// with the runners of those whose runner the channel overrides.
    fn channel_runtimes(
        &mut self,
        source: &Source,
        path: &FieldPath,
        channel: &ReleaseChannelDoc,
        all_runtimes: &BTreeMap<RuntimeName, RuntimeRunner<'_>>,
    ) -> (Vec<RuntimeName>, BTreeMap<RuntimeName, RunnerSpec>) {
        if channel.runtimes.is_empty() {
            self.err(
                source,
                &path.key("runtimes"),
                format!(
                    "release channel '{}' lists no runtimes; add e.g. `runtimes: [{{runtime: NAME}}]`",
                    channel.name
                ),
            );
        }
        let mut runtimes: Vec<RuntimeName> = Vec::new();
        let mut overrides = BTreeMap::new();
        for (j, reference) in channel.runtimes.iter().enumerate() {
            let entry = path.key("runtimes").index(j);
            let name = &reference.runtime;
            let Some(runner) = all_runtimes.get(name) else {
                let message = unknown_name_message(
                    "runtime",
                    name.as_str(),
                    all_runtimes.keys().map(|r| r.as_str()),
                );
                self.err(source, &entry.key("runtime"), message);
                continue;
            };
            let overridden = channel.runtimes[..j]
                .iter()
                .any(|r| &r.runtime == name && r.runner.is_some());
            if runtimes.contains(name) && (overridden || reference.runner.is_some()) {
                self.err(
                    source,
                    &entry.key("runtime"),
                    format!(
                        "runtime '{name}' is listed twice in release channel '{}' with a runner override; list it once",
                        channel.name
                    ),
                );
                continue;
            }
            if !runtimes.contains(name) {
                runtimes.push(name.clone());
            }
            let Some(over) = &reference.runner else {
                continue;
            };
            if let Some(spec) = self.runner_override(source, &entry, name, *runner, over) {
                overrides.insert(name.clone(), spec);
            }
        }
        (runtimes, overrides)
    }

    /// A release channel's constants by name: text, or an int written as text.
    fn constants(
        &mut self,
        source: &Source,
        path: &FieldPath,
        docs: &[ConstantDoc],
    ) -> BTreeMap<String, String> {
        let mut constants = BTreeMap::new();
        for (j, constant) in docs.iter().enumerate() {
            let cpath = path.key("constants").index(j);
            if let Err(e) = check_identifier(&constant.name) {
                self.err(source, &cpath.key("name"), e);
                continue;
            }
            let value = match (&constant.string, &constant.int) {
                (Some(s), None) => s.value.clone(),
                (None, Some(i)) => {
                    if i.value.parse::<i64>().is_err() {
                        self.err(
                            source,
                            &cpath.key("int").key("value"),
                            format!("{:?} is not an integer", i.value),
                        );
                    }
                    i.value.clone()
                }
                _ => {
                    self.err(
                        source,
                        &cpath,
                        format!("constant '{}' needs exactly one of string: {{value: …}} or int: {{value: …}}", constant.name),
                    );
                    continue;
                }
            };
            if constants.insert(constant.name.clone(), value).is_some() {
                self.err(
                    source,
                    &cpath.key("name"),
                    format!("constant '{}' is defined twice", constant.name),
                );
            }
        }
        constants
    }

    /// What a release channel waits for: another channel of the application
    /// to be stable (never itself), or a manual approval.
    fn preconditions(
        &mut self,
        source: &Source,
        path: &FieldPath,
        channel: &ReleaseChannelDoc,
        channel_names: &[&ReleaseChannelName],
    ) -> Vec<Precondition> {
        let mut preconditions = Vec::new();
        for (j, precondition) in channel.preconditions.iter().enumerate() {
            let ppath = path.key("preconditions").index(j);
            match precondition {
                PreconditionDoc::ReleaseChannelStable(stable) => {
                    let target = &stable.release_channel;
                    let rpath = ppath.key("releaseChannelStable").key("releaseChannel");
                    if target == &channel.name {
                        self.err(
                            source,
                            &rpath,
                            format!("release channel '{target}' cannot wait for itself"),
                        );
                    } else if !channel_names.contains(&target) {
                        let message = unknown_name_message(
                            "release channel",
                            target.as_str(),
                            channel_names.iter().map(|c| c.as_str()),
                        );
                        self.err(source, &rpath, message);
                    } else {
                        preconditions.push(Precondition::ReleaseChannelStable {
                            release_channel: target.clone(),
                            duration: stable.duration.map(|d| d.0),
                        });
                    }
                }
                PreconditionDoc::ManualApproval(approval) => {
                    if let Err(e) = vergence_model::check_name(&approval.name) {
                        self.err(source, &ppath.key("manualApproval").key("name"), e);
                    }
                    preconditions.push(Precondition::ManualApproval {
                        name: approval.name.clone(),
                    });
                }
            }
        }
        preconditions
    }

    /// `allowedTimes` and `deniedTimes` of a release channel.
    fn windows(
        &mut self,
        source: &Source,
        path: &FieldPath,
        channel: &ReleaseChannelDoc,
    ) -> TimeWindows {
        let mut windows = TimeWindows::default();
        for (i, w) in channel.allowed_times.iter().enumerate() {
            match RecurringWindow::parse(
                w.days.as_deref(),
                w.hours.as_deref(),
                w.timezone.as_deref(),
            ) {
                Ok(window) => windows.allowed.push(window),
                Err(e) => self.err(source, &path.key("allowedTimes").index(i), e),
            }
        }
        for (i, w) in channel.denied_times.iter().enumerate() {
            let wpath = path.key("deniedTimes").index(i);
            if let Some(window) = self.deny_window(source, &wpath, w) {
                windows.denied.push(window);
            }
        }
        windows
    }

    /// A freeze: between two instants, or recurring like an allowed window.
    fn deny_window(
        &mut self,
        source: &Source,
        path: &FieldPath,
        w: &DenyWindowDoc,
    ) -> Option<DenyWindow> {
        let recurring = w.days.is_some() || w.hours.is_some() || w.timezone.is_some();
        let checked = match (&w.start, &w.end, recurring) {
            (Some(start), Some(end), false) => {
                freeze_between(w, start, end).map_err(|(field, e)| (path.key(field), e))
            }
            (None, None, true) => RecurringWindow::parse(
                w.days.as_deref(),
                w.hours.as_deref(),
                w.timezone.as_deref(),
            )
            .map(|window| DenyWindow::Recurring {
                name: w.name.clone(),
                window,
            })
            .map_err(|e| (path.clone(), e)),
            _ => Err((
                path.clone(),
                "a freeze is either {start, end} (two instants) or {days, hours, timezone} (recurring), not both or a part of one".to_owned(),
            )),
        };
        match checked {
            Ok(window) => Some(window),
            Err((path, e)) => {
                self.err(source, &path, e);
                None
            }
        }
    }

    /// Reports the first cycle of `releaseChannelStable` preconditions.
    fn check_cycles(&mut self, source: &Source, channels: &[ReleaseChannel]) {
        // Depth-first search; a channel met again on the current path closes a cycle.
        fn visit<'c>(
            name: &'c ReleaseChannelName,
            channels: &'c [ReleaseChannel],
            path: &mut Vec<&'c ReleaseChannelName>,
            done: &mut BTreeSet<&'c ReleaseChannelName>,
        ) -> Option<Vec<&'c ReleaseChannelName>> {
            if let Some(start) = path.iter().position(|n| *n == name) {
                let mut cycle = path[start..].to_vec();
                cycle.push(name);
                return Some(cycle);
            }
            if !done.insert(name) {
                return None;
            }
            path.push(name);
            let channel = channels.iter().find(|c| &c.name == name)?;
            for upstream in Precondition::upstream_channels(&channel.preconditions) {
                if let Some(cycle) = visit(upstream, channels, path, done) {
                    return Some(cycle);
                }
            }
            path.pop();
            None
        }
        let mut done = BTreeSet::new();
        for (i, channel) in channels.iter().enumerate() {
            if let Some(cycle) = visit(&channel.name, channels, &mut Vec::new(), &mut done) {
                let rendered: Vec<&str> = cycle.iter().map(|c| c.as_str()).collect();
                let path = FieldPath::root("application")
                    .key("releaseChannels")
                    .index(i)
                    .key("preconditions");
                self.err(
                    source,
                    &path,
                    format!(
                        "release channel preconditions form a cycle: {}; no channel in it could ever deploy",
                        rendered.join(" → ")
                    ),
                );
                return;
            }
        }
    }
}

/// A freeze between two RFC 3339 instants; an error names the field
/// (`start` or `end`) it is about.
fn freeze_between(
    w: &DenyWindowDoc,
    start: &str,
    end: &str,
) -> Result<DenyWindow, (&'static str, String)> {
    let parse = |field: &'static str, raw: &str| {
        raw.parse::<jiff::Timestamp>().map_err(|e| {
            let message = format!(
                "{field} {raw:?} is not an RFC 3339 instant like 2026-12-20T00:00:00Z: {e}"
            );
            (field, message)
        })
    };
    let (start, end) = (parse("start", start)?, parse("end", end)?);
    if start < end {
        Ok(DenyWindow::Between {
            name: w.name.clone(),
            start,
            end,
        })
    } else {
        Err(("end", "end must be after start".to_owned()))
    }
}

/// Records on each release channel the channels whose preconditions wait
/// for it.
fn link_downstream(channels: &mut [ReleaseChannel]) {
    let upstream_of: Vec<(ReleaseChannelName, ReleaseChannelName)> = channels
        .iter()
        .flat_map(|c| {
            Precondition::upstream_channels(&c.preconditions)
                .map(move |u| (u.clone(), c.name.clone()))
        })
        .collect();
    for (upstream, downstream) in upstream_of {
        if let Some(c) = channels.iter_mut().find(|c| c.name == upstream)
            && !c.downstream.contains(&downstream)
        {
            c.downstream.push(downstream);
        }
    }
}
