//! Alertmanager's webhook payload (version 4) turned into Vergence alert
//! states. Only the fields Vergence needs are read; the rest is ignored so
//! newer Alertmanager versions keep working.

use std::collections::BTreeMap;

use serde::Deserialize;
use vergence_model::{MAX_NAME_LEN, check_name};

use crate::ApiError;

#[derive(Debug, Deserialize)]
pub(crate) struct Payload {
    alerts: Option<Vec<Alert>>,
}

#[derive(Debug, Deserialize)]
struct Alert {
    status: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// What to record for one Vergence alert name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct AlertUpdate {
    pub name: String,
    pub firing: bool,
    pub summary: Option<String>,
}

/// One update per Vergence alert name, validated before anything is
/// written. Alertmanager sends one entry per label set, so the same
/// alertname can appear several times: it is firing if any entry fires.
pub(crate) fn updates(payload: Payload) -> Result<Vec<AlertUpdate>, ApiError> {
    let alerts = payload
        .alerts
        .ok_or_else(|| ApiError::invalid("alerts", "missing field"))?;
    let mut by_name: BTreeMap<String, AlertUpdate> = BTreeMap::new();
    for (i, alert) in alerts.into_iter().enumerate() {
        let field = |rest: &str| format!("alerts[{i}].{rest}");
        let firing = match alert.status.as_deref() {
            Some("firing") => true,
            Some("resolved") => false,
            Some(other) => {
                return Err(ApiError::invalid(
                    field("status"),
                    format!("{other:?} is neither \"firing\" nor \"resolved\""),
                ));
            }
            None => return Err(ApiError::invalid(field("status"), "missing field")),
        };
        let raw = alert
            .labels
            .get("alertname")
            .ok_or_else(|| ApiError::invalid(field("labels.alertname"), "missing label"))?;
        let name = vergence_alert_name(raw)
            .map_err(|message| ApiError::invalid(field("labels.alertname"), message))?;
        let summary = alert.annotations.get("summary").cloned();
        let entry = by_name.entry(name.clone()).or_insert(AlertUpdate {
            name,
            firing: false,
            summary: None,
        });
        // The first firing entry's summary says what is wrong; a resolved
        // one's is kept only while nothing fires.
        match (firing, entry.firing) {
            (true, false) => entry.summary = summary,
            (false, false) if entry.summary.is_none() => entry.summary = summary,
            _ => {}
        }
        entry.firing |= firing;
    }
    Ok(by_name.into_values().collect())
}

/// The Vergence name of an Alertmanager alertname: lower-cased, every run
/// of characters outside `[a-z0-9]` becomes one `-`, no `-` at either end,
/// at most 63 characters. `HighErrorRate` → `higherrorrate`,
/// `disk_full:/var` → `disk-full-var`.
pub fn vergence_alert_name(alertname: &str) -> Result<String, String> {
    let mut name = String::with_capacity(alertname.len());
    for c in alertname.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    name.truncate(MAX_NAME_LEN);
    let name = name.trim_end_matches('-').to_owned();
    check_name(&name)
        .map(|()| name.clone())
        .map_err(|e| format!("alertname {alertname:?} has no usable Vergence name ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alertnames_map_to_vergence_names() {
        for (raw, want) in [
            ("HighErrorRate", "higherrorrate"),
            ("high-error-rate", "high-error-rate"),
            ("disk_full:/var", "disk-full-var"),
            ("  Latency  p99 ", "latency-p99"),
            ("_leading", "leading"),
        ] {
            assert_eq!(vergence_alert_name(raw).as_deref(), Ok(want), "{raw}");
        }
        assert_eq!(
            vergence_alert_name(&"A".repeat(80)).map(|n| n.len()),
            Ok(MAX_NAME_LEN)
        );
    }

    #[test]
    fn alertnames_without_a_usable_name_are_refused() {
        for raw in ["", "5xxErrors", "___", "ÄÖÜ"] {
            assert!(vergence_alert_name(raw).is_err(), "{raw}");
        }
    }

    #[test]
    fn an_alertname_fires_when_any_of_its_entries_fires() {
        let payload: Payload = serde_json::from_str(
            r#"{"version":"4","status":"firing","alerts":[
                {"status":"resolved","labels":{"alertname":"HighErrorRate","pod":"a"},"annotations":{"summary":"fine on a"}},
                {"status":"firing","labels":{"alertname":"HighErrorRate","pod":"b"},"annotations":{"summary":"5% errors on b"}},
                {"status":"resolved","labels":{"alertname":"disk_full"}}
            ]}"#,
        )
        .unwrap();
        assert_eq!(
            updates(payload).unwrap(),
            vec![
                AlertUpdate {
                    name: "disk-full".into(),
                    firing: false,
                    summary: None
                },
                AlertUpdate {
                    name: "higherrorrate".into(),
                    firing: true,
                    summary: Some("5% errors on b".into())
                },
            ]
        );
    }
}
