//! `vergence metrics`: the four delivery measures (DORA) of an
//! application, or of every one, computed from the events.

use std::io::Write;

use anyhow::Result;
use vergence_engine::metrics::DeliveryMetrics;
use vergence_engine::moment;

use super::{Context, optional_name};
use crate::args::{MetricsArgs, Output};
use crate::backend::Access;
use crate::output;

pub async fn run(ctx: &Context<'_>, args: &MetricsArgs) -> Result<u8> {
    let application = optional_name(args.application.as_deref(), "--app")?;
    let backend = ctx.backend(Access::Existing)?;
    let metrics = backend.metrics(application.as_ref(), args.since).await?;
    let mut out = std::io::stdout().lock();
    match args.output {
        Output::Json => {
            serde_json::to_writer_pretty(&mut out, &metrics)?;
            writeln!(out)?;
        }
        Output::Table => table(&mut out, &metrics)?,
    }
    Ok(0)
}

/// What was measured, then one row per measure with what it counts.
fn table(out: &mut impl Write, m: &DeliveryMetrics) -> std::io::Result<()> {
    let whose = m
        .application
        .as_ref()
        .map_or_else(|| "every application".to_owned(), ToString::to_string);
    // Where deployments are counted: the channel, or with several
    // applications each one's.
    let last: Vec<String> = match m.last_release_channels.len() {
        1 => m
            .last_release_channels
            .values()
            .map(ToString::to_string)
            .collect(),
        _ => m
            .last_release_channels
            .iter()
            .map(|(app, channel)| format!("{channel} ({app})"))
            .collect(),
    };
    writeln!(
        out,
        "{whose}, the last {} days ({} to {}); deployed = converged in {}",
        number(m.window_days),
        moment(m.since),
        moment(m.until),
        last.join(", ")
    )?;
    let lead = &m.lead_time_seconds;
    let restore = &m.time_to_restore_seconds;
    let rows = vec![
        vec![
            "deployment frequency".to_owned(),
            format!("{:.2} per day", m.deployment_frequency_per_day),
            format!("{} deployment(s)", m.deployments),
        ],
        vec![
            "lead time for changes".to_owned(),
            match (lead.median, lead.p90) {
                (Some(median), Some(p90)) => {
                    format!("median {}, p90 {}", duration(median), duration(p90))
                }
                _ => "-".to_owned(),
            },
            format!("{} release(s) deployed", lead.count),
        ],
        vec![
            "change failure rate".to_owned(),
            m.change_failure_rate.map_or_else(
                || "-".to_owned(),
                |rate| format!("{}%", number(rate * 100.0)),
            ),
            format!("{} of {} release(s) failed", m.failed_releases, m.releases),
        ],
        vec![
            "time to restore".to_owned(),
            restore.median.map_or_else(
                || "-".to_owned(),
                |median| format!("median {}", duration(median)),
            ),
            format!("{} failure(s) restored", restore.count),
        ],
    ];
    output::table(out, &["MEASURE", "VALUE", "FROM"], &rows)
}

/// At most one decimal, none when whole: `30`, `33.3`.
fn number(value: f64) -> String {
    let rounded = format!("{value:.1}");
    rounded
        .strip_suffix(".0")
        .map_or_else(|| rounded.clone(), str::to_owned)
}

/// Seconds for people, in the two largest units: `45s`, `2m 5s`,
/// `1h 30m`, `2d 3h`.
fn duration(seconds: f64) -> String {
    if seconds < 60.0 {
        return format!("{}s", number(seconds));
    }
    let total = seconds.round() as u64;
    let units = [
        ("d", total / 86_400),
        ("h", total / 3600 % 24),
        ("m", total / 60 % 60),
        ("s", total % 60),
    ];
    let first = units.iter().position(|(_, n)| *n > 0).unwrap_or(3);
    units[first..]
        .iter()
        .take(2)
        .filter(|(_, n)| *n > 0)
        .map(|(unit, n)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_in_their_two_largest_units() {
        assert_eq!(duration(0.0), "0s");
        assert_eq!(duration(0.4), "0.4s");
        assert_eq!(duration(45.0), "45s");
        assert_eq!(duration(125.0), "2m 5s");
        assert_eq!(duration(3600.0), "1h");
        assert_eq!(duration(5400.4), "1h 30m");
        assert_eq!(duration(90_061.0), "1d 1h");
        assert_eq!(number(33.333), "33.3");
        assert_eq!(number(30.0), "30");
    }
}
