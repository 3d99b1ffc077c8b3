//! `cloudwatchAlarm` protections: one DescribeAlarms call for the named
//! alarms (metric and composite), failing while any is in ALARM. An alarm
//! that does not exist is no pass: it is inconclusive, as is a call that
//! fails (no permission, no network).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use async_trait::async_trait;
use aws_sdk_cloudwatch::types::{AlarmType, StateValue};
use vergence_model::{BuiltinJob, CloudwatchAlarmCheck, JobRecord};

use crate::{Check, MetricsError, Reading, time_limit};

/// Reads `cloudwatchAlarm` protections with one set of credentials.
#[derive(Debug)]
pub struct CloudwatchAlarms {
    client: aws_sdk_cloudwatch::Client,
    /// Clients of regions other than `client`'s own, made on first use.
    regional: Mutex<HashMap<String, aws_sdk_cloudwatch::Client>>,
}

/// What DescribeAlarms returns in one page at most; the compiler allows no
/// more names than this, so one call answers.
const MAX_RECORDS: i32 = 100;

impl CloudwatchAlarms {
    /// Reads through `client`, whose region is the one of protections
    /// that name none.
    pub fn new(client: aws_sdk_cloudwatch::Client) -> Self {
        Self {
            client,
            regional: Mutex::new(HashMap::new()),
        }
    }

    fn client(&self, region: Option<&str>) -> aws_sdk_cloudwatch::Client {
        let own = self.client.config().region().map(|r| r.as_ref().to_owned());
        match region {
            Some(region) if own.as_deref() != Some(region) => {
                let mut regional = self.regional.lock().unwrap_or_else(PoisonError::into_inner);
                regional
                    .entry(region.to_owned())
                    .or_insert_with(|| {
                        let config = self
                            .client
                            .config()
                            .to_builder()
                            .region(aws_sdk_cloudwatch::config::Region::new(region.to_owned()))
                            .build();
                        aws_sdk_cloudwatch::Client::from_conf(config)
                    })
                    .clone()
            }
            _ => self.client.clone(),
        }
    }

    /// Reads the alarms of `check` now, within `limit`.
    pub async fn read_check(
        &self,
        check: &CloudwatchAlarmCheck,
        limit: std::time::Duration,
    ) -> Reading {
        let client = self.client(check.region.as_deref());
        let region = check
            .region
            .clone()
            .or_else(|| self.client.config().region().map(ToString::to_string))
            .unwrap_or_else(|| "the default region".to_owned());
        let call = client
            .describe_alarms()
            .set_alarm_names(Some(check.names.clone()))
            .alarm_types(AlarmType::MetricAlarm)
            .alarm_types(AlarmType::CompositeAlarm)
            .max_records(MAX_RECORDS)
            .send();
        let described = match tokio::time::timeout(limit, call).await {
            Ok(Ok(described)) => described,
            Ok(Err(e)) => {
                let detail = aws_sdk_cloudwatch::error::DisplayErrorContext(&e);
                return Reading::Inconclusive(format!(
                    "DescribeAlarms in {region} failed: {detail}"
                ));
            }
            Err(_) => {
                return Reading::Inconclusive(format!(
                    "DescribeAlarms in {region} did not answer within {limit:?}"
                ));
            }
        };
        let states: Vec<(String, StateValue, String)> = described
            .metric_alarms()
            .iter()
            .map(|a| (a.alarm_name(), a.state_value(), a.state_reason()))
            .chain(
                described
                    .composite_alarms()
                    .iter()
                    .map(|a| (a.alarm_name(), a.state_value(), a.state_reason())),
            )
            .filter_map(|(name, state, reason)| {
                Some((
                    name?.to_owned(),
                    state?.clone(),
                    reason.unwrap_or_default().to_owned(),
                ))
            })
            .collect();
        judge(check, &region, &states)
    }
}

#[async_trait]
impl Check for CloudwatchAlarms {
    async fn read(&self, job: &JobRecord) -> Reading {
        match &job.spec.builtin {
            Some(BuiltinJob::CloudwatchAlarm(check)) => {
                self.read_check(check, time_limit(job)).await
            }
            _ => Reading::Inconclusive(
                MetricsError::WrongJob {
                    job: job.id.to_string(),
                    expected: "cloudwatchAlarm",
                }
                .to_string(),
            ),
        }
    }
}

/// The verdict on the alarms' states: failing while any is in ALARM,
/// inconclusive while any named one is missing.
fn judge(
    check: &CloudwatchAlarmCheck,
    region: &str,
    states: &[(String, StateValue, String)],
) -> Reading {
    let missing: Vec<&str> = check
        .names
        .iter()
        .filter(|name| !states.iter().any(|(n, _, _)| n == *name))
        .map(String::as_str)
        .collect();
    let alarming: Vec<String> = states
        .iter()
        .filter(|(n, state, _)| *state == StateValue::Alarm && check.names.contains(n))
        .map(|(n, _, reason)| {
            if reason.is_empty() {
                format!("alarm {n} is in ALARM")
            } else {
                format!("alarm {n} is in ALARM: {reason}")
            }
        })
        .collect();
    // An alarm seen firing fails even when another is missing: what was
    // read is evidence.
    if !alarming.is_empty() {
        return Reading::Fail(alarming.join("; "));
    }
    if !missing.is_empty() {
        return Reading::Inconclusive(format!(
            "no CloudWatch alarm named {} in {region}",
            missing.join(", ")
        ));
    }
    let waiting = states
        .iter()
        .filter(|(_, state, _)| *state == StateValue::InsufficientData)
        .count();
    Reading::Pass(format!(
        "{} alarm{} not in ALARM ({waiting} with insufficient data)",
        check.names.len(),
        if check.names.len() == 1 { "" } else { "s" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(names: &[&str]) -> CloudwatchAlarmCheck {
        CloudwatchAlarmCheck {
            names: names.iter().map(|n| (*n).to_owned()).collect(),
            region: None,
        }
    }

    #[test]
    fn an_alarm_in_alarm_fails_and_a_missing_one_is_inconclusive() {
        let states = [
            (
                "errors".to_owned(),
                StateValue::Alarm,
                "Threshold Crossed".to_owned(),
            ),
            ("latency".to_owned(), StateValue::Ok, String::new()),
        ];
        assert_eq!(
            judge(&check(&["errors", "latency"]), "eu-west-1", &states),
            Reading::Fail("alarm errors is in ALARM: Threshold Crossed".into())
        );
        assert_eq!(
            judge(&check(&["latency", "gone"]), "eu-west-1", &states),
            Reading::Inconclusive("no CloudWatch alarm named gone in eu-west-1".into())
        );
        assert_eq!(
            judge(&check(&["latency"]), "eu-west-1", &states),
            Reading::Pass("1 alarm not in ALARM (0 with insufficient data)".into())
        );
    }
}
