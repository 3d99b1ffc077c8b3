//! Checks the metric protections: a `prometheus` query held to a
//! threshold, and `cloudwatchAlarm` names. Their text (the server's URL,
//! the query, the alarm names) may use the protection's parameters and the
//! built-ins, as a check job's command may, and no constants.

use super::Checker;
use super::field_path::FieldPath;
use super::job::{ConstantUse, TemplateScope};
use super::runner_fields::check_aws_region;
use crate::config::schema::{CloudwatchAlarmDoc, PrometheusDoc, ProtectionDoc, ThresholdDoc};
use crate::model::MetricTemplate;
use crate::template::Template;
use vergence_model::{Bound, Source, Threshold};

/// DescribeAlarms takes at most this many names in one request.
const MAX_ALARMS: usize = 100;
/// CloudWatch's longest alarm name.
const MAX_ALARM_NAME: usize = 255;

/// "a prometheus", "an alert": for messages naming a kind of check.
pub(super) fn article(kind: &str) -> String {
    let vowel = kind.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {kind}", if vowel { "an" } else { "a" })
}

impl Checker<'_> {
    /// The metric check of a protection that gives `prometheus` or
    /// `cloudwatchAlarm`; `None` after saying what is wrong.
    pub(super) fn metric(
        &mut self,
        source: &Source,
        root: &FieldPath,
        doc: &ProtectionDoc,
        scope: &TemplateScope<'_>,
    ) -> Option<MetricTemplate> {
        let mut constants = Vec::new();
        let metric = match (&doc.prometheus, &doc.cloudwatch_alarm) {
            (Some(prometheus), _) => self.prometheus(
                source,
                &root.key("prometheus"),
                prometheus,
                scope,
                &mut constants,
            ),
            (None, Some(alarms)) => {
                let path = root.key("cloudwatchAlarm");
                self.cloudwatch_alarm(source, &path, alarms, scope, &mut constants)
            }
            (None, None) => None,
        };
        // One error says it: the rest of a rejected check is not used.
        if let Some(constant) = constants.into_iter().next() {
            self.constant_in_protection(source, constant);
            return None;
        }
        metric
    }

    fn prometheus(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &PrometheusDoc,
        scope: &TemplateScope<'_>,
        constants: &mut Vec<ConstantUse>,
    ) -> Option<MetricTemplate> {
        let url_path = path.key("url");
        let url = self.job_template(source, scope, &url_path, &doc.url, false, constants);
        if let Some(url) = &url
            && let Err(e) = check_url(url)
        {
            self.err(source, &url_path, e);
            return None;
        }
        let query_path = path.key("query");
        if doc.query.trim().is_empty() {
            self.err(source, &query_path, "give the PromQL query to evaluate");
            return None;
        }
        let query = self.job_template(source, scope, &query_path, &doc.query, false, constants);
        let threshold = self.threshold(source, &path.key("threshold"), &doc.threshold);
        Some(MetricTemplate::Prometheus {
            url: url?,
            query: query?,
            threshold: threshold?,
            for_: doc.for_.map_or(jiff::SignedDuration::ZERO, |d| d.0),
        })
    }

    fn threshold(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &ThresholdDoc,
    ) -> Option<Threshold> {
        let mut bound = |key: &str, value: Option<f64>| match value {
            Some(v) if !v.is_finite() => {
                self.err(
                    source,
                    &path.key(key),
                    format!("{key} must be a finite number"),
                );
                Err(())
            }
            other => Ok(other.map(Bound)),
        };
        let (min, max) = (bound("min", doc.min), bound("max", doc.max));
        let (min, max) = (min.ok()?, max.ok()?);
        match (min, max) {
            (None, None) => {
                self.err(
                    source,
                    path,
                    "give min, max or both: the bounds every series of the query must stay within",
                );
                None
            }
            (Some(min), Some(max)) if min.0 > max.0 => {
                self.err(source, path, format!("min {min} is above max {max}"));
                None
            }
            _ => Some(Threshold { min, max }),
        }
    }

    fn cloudwatch_alarm(
        &mut self,
        source: &Source,
        path: &FieldPath,
        doc: &CloudwatchAlarmDoc,
        scope: &TemplateScope<'_>,
        constants: &mut Vec<ConstantUse>,
    ) -> Option<MetricTemplate> {
        let names_path = path.key("names");
        if doc.names.is_empty() || doc.names.len() > MAX_ALARMS {
            self.err(
                source,
                &names_path,
                format!("name between 1 and {MAX_ALARMS} alarms (one DescribeAlarms request)"),
            );
            return None;
        }
        let mut names = Vec::new();
        for (i, name) in doc.names.iter().enumerate() {
            let at = names_path.index(i);
            if name.trim().is_empty() || name.len() > MAX_ALARM_NAME {
                self.err(
                    source,
                    &at,
                    format!("an alarm name has 1 to {MAX_ALARM_NAME} characters"),
                );
                return None;
            }
            if doc.names[..i].contains(name) {
                self.err(source, &at, format!("alarm {name:?} is named twice"));
                return None;
            }
            names.push(self.job_template(source, scope, &at, name, false, constants)?);
        }
        let region = match &doc.region {
            Some(raw) => {
                let at = path.key("region");
                let region = self.job_template(source, scope, &at, raw, false, constants)?;
                if region.references().next().is_none()
                    && let Err(e) = check_aws_region(raw)
                {
                    self.err(source, &at, e);
                    return None;
                }
                Some(region)
            }
            None => None,
        };
        Some(MetricTemplate::CloudwatchAlarm { names, region })
    }
}

/// Whether a URL template renders an http(s) URL with a host: its scheme
/// is written out, and its host is, or starts with a template.
fn check_url(url: &Template) -> Result<(), String> {
    let raw = url.literal_prefix();
    let rest = raw
        .strip_prefix("http://")
        .or_else(|| raw.strip_prefix("https://"))
        .ok_or_else(|| {
            "give the Prometheus server's URL with its scheme and host, like http://prometheus:9090"
                .to_owned()
        })?;
    let no_host = rest.is_empty() && url.references().next().is_none();
    if no_host || rest.starts_with(['/', ':']) {
        return Err("the URL names no host (like http://prometheus:9090)".to_owned());
    }
    Ok(())
}
