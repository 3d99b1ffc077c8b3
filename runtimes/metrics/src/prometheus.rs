//! `prometheus` protections: a PromQL query through the Prometheus HTTP API
//! (`/api/v1/query`, or `/api/v1/query_range` over the last `for`), each
//! series of the answer held to the threshold.

use std::collections::BTreeMap;

use async_trait::async_trait;
use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use vergence_model::{BuiltinJob, JobRecord, PrometheusCheck};

use crate::{Check, MetricsError, Reading, time_limit};
use vergence_model::text::with_causes;

/// Reads `prometheus` protections.
#[derive(Clone, Debug)]
pub struct PrometheusChecks {
    http: reqwest::Client,
}

/// Points a range query asks for over the `for` window, at most: enough
/// to see a breach that stopped, few enough to stay a small answer.
const RANGE_POINTS: i64 = 60;

impl PrometheusChecks {
    pub fn new(http: reqwest::Client) -> Self {
        Self { http }
    }

    /// Evaluates `check` now, within `limit`.
    pub async fn read_check(&self, check: &PrometheusCheck, limit: std::time::Duration) -> Reading {
        let base = check.url.trim_end_matches('/');
        let now = Timestamp::now();
        let request = if check.for_.is_zero() {
            self.http
                .get(format!("{base}/api/v1/query"))
                .query(&[("query", check.query.as_str())])
        } else {
            let start = now - check.for_;
            let step = step(check.for_);
            self.http.get(format!("{base}/api/v1/query_range")).query(&[
                ("query", check.query.clone()),
                ("start", seconds(start)),
                ("end", seconds(now)),
                ("step", format!("{}", step.as_secs())),
            ])
        };
        let answer = match request.timeout(limit).send().await {
            Ok(response) => read_answer(base, response).await,
            Err(e) => Err(format!(
                "cannot reach Prometheus at {base}: {}",
                with_causes(&e)
            )),
        };
        match answer {
            Ok(data) => judge(check, &data, now),
            Err(why) => Reading::Inconclusive(why),
        }
    }
}

#[async_trait]
impl Check for PrometheusChecks {
    async fn read(&self, job: &JobRecord) -> Reading {
        match &job.spec.builtin {
            Some(BuiltinJob::Prometheus(check)) => self.read_check(check, time_limit(job)).await,
            _ => Reading::Inconclusive(
                MetricsError::WrongJob {
                    job: job.id.to_string(),
                    expected: "prometheus",
                }
                .to_string(),
            ),
        }
    }
}

/// The range query's step: the window in [`RANGE_POINTS`], at least 1 s.
fn step(window: SignedDuration) -> SignedDuration {
    SignedDuration::from_secs((window.as_secs() / RANGE_POINTS).max(1))
}

fn seconds(at: Timestamp) -> String {
    format!("{:.3}", at.as_millisecond() as f64 / 1000.0)
}

#[derive(Debug, Deserialize)]
struct Envelope {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "resultType", content = "result", rename_all = "camelCase")]
enum Data {
    Vector(Vec<Sample>),
    Matrix(Vec<Series>),
    Scalar(Point),
    String(serde::de::IgnoredAny),
}

#[derive(Debug, Deserialize)]
struct Sample {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    value: Point,
}

#[derive(Debug, Deserialize)]
struct Series {
    #[serde(default)]
    metric: BTreeMap<String, String>,
    values: Vec<Point>,
}

/// `[unix seconds, "value"]`: Prometheus sends values as strings, so that
/// NaN and ±Inf survive JSON.
#[derive(Debug, Deserialize)]
struct Point(f64, String);

impl Point {
    fn value(&self) -> f64 {
        match self.1.as_str() {
            "+Inf" | "Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            text => text.parse().unwrap_or(f64::NAN),
        }
    }
}

/// The answer's data, or why there is none.
async fn read_answer(base: &str, response: reqwest::Response) -> Result<Data, String> {
    let status = response.status();
    let body = response.text().await.map_err(|e| {
        format!(
            "Prometheus at {base} answered HTTP {status} and then failed: {}",
            with_causes(&e)
        )
    })?;
    let envelope: Envelope = serde_json::from_str(&body).map_err(|_| {
        let excerpt: String = body.chars().take(200).collect();
        format!("Prometheus at {base} answered HTTP {status}, not the query API's JSON: {excerpt}")
    })?;
    match (envelope.status.as_str(), envelope.data) {
        ("success", Some(data)) => Ok(data),
        _ => Err(format!(
            "Prometheus at {base} refused the query: {}: {}",
            envelope.error_type.as_deref().unwrap_or("error"),
            envelope.error.as_deref().unwrap_or("no reason given")
        )),
    }
}

/// The series' name as Prometheus shows it: `name{label="value",…}`.
fn series_name(metric: &BTreeMap<String, String>) -> String {
    let name = metric.get("__name__").map_or("", String::as_str);
    let labels: Vec<String> = metric
        .iter()
        .filter(|(k, _)| k.as_str() != "__name__")
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect();
    if labels.is_empty() && !name.is_empty() {
        return name.to_owned();
    }
    format!("{name}{{{}}}", labels.join(","))
}

/// The verdict on what the query returned at `now`.
fn judge(check: &PrometheusCheck, data: &Data, now: Timestamp) -> Reading {
    let threshold = &check.threshold;
    let instant: Vec<(String, f64)> = match data {
        Data::Vector(samples) => samples
            .iter()
            .map(|s| (series_name(&s.metric), s.value.value()))
            .collect(),
        Data::Scalar(point) => vec![("scalar".to_owned(), point.value())],
        Data::String(_) => {
            return Reading::Inconclusive("the query returns a string, not a number".to_owned());
        }
        Data::Matrix(series) => return judge_range(check, series, now),
    };
    if instant.is_empty() {
        return Reading::Inconclusive(format!(
            "the query returned no series (no data yet? add `or vector(0)` if none means healthy): {}",
            check.query
        ));
    }
    let breaches: Vec<String> = instant
        .iter()
        .filter_map(|(name, value)| {
            threshold
                .breach(*value)
                .map(|why| format!("{name} = {value} {why}"))
        })
        .collect();
    if breaches.is_empty() {
        Reading::Pass(within(
            threshold,
            instant.len(),
            instant.iter().map(|(_, v)| *v),
        ))
    } else {
        Reading::Fail(breaches.join("; "))
    }
}

/// A range answer: a series fails when every point of it over the `for`
/// window is outside the threshold, from the window's start.
fn judge_range(check: &PrometheusCheck, series: &[Series], now: Timestamp) -> Reading {
    if series.iter().all(|s| s.values.is_empty()) {
        return Reading::Inconclusive(format!(
            "the query returned no series over the last {:#} (no data yet? add `or vector(0)` if none means healthy): {}",
            check.for_, check.query
        ));
    }
    let start = (now - check.for_).as_millisecond() as f64 / 1000.0;
    let step = step(check.for_).as_secs() as f64;
    let mut failures = Vec::new();
    let mut pending = Vec::new();
    let mut latest = Vec::new();
    for s in series.iter().filter(|s| !s.values.is_empty()) {
        let name = series_name(&s.metric);
        let last = s.values[s.values.len() - 1].value();
        latest.push(last);
        let Some(why) = check.threshold.breach(last) else {
            continue;
        };
        // The breach is as old as the run of out-of-bounds points that ends now.
        let since = s
            .values
            .iter()
            .rev()
            .take_while(|p| check.threshold.breach(p.value()).is_some())
            .last()
            .map_or(f64::INFINITY, |p| p.0);
        if since <= start + step {
            failures.push(format!("{name} = {last} {why} for {:#}", check.for_));
        } else {
            pending.push(format!(
                "{name} = {last} {why}, for less than {:#} so far",
                check.for_
            ));
        }
    }
    if !failures.is_empty() {
        return Reading::Fail(failures.join("; "));
    }
    let mut read = within(&check.threshold, latest.len(), latest.into_iter());
    if !pending.is_empty() {
        read.push_str(&format!("; pending: {}", pending.join("; ")));
    }
    Reading::Pass(read)
}

/// "2 series at most 0.05 (highest 0.01)": what a pass read.
fn within(
    threshold: &vergence_model::Threshold,
    count: usize,
    values: impl Iterator<Item = f64>,
) -> String {
    let values: Vec<f64> = values.collect();
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = if values.len() == 1 {
        format!("{high}")
    } else {
        format!("{low} to {high}")
    };
    format!("{count} series {threshold}: {range}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use vergence_model::{Bound, Threshold};

    fn check(max: f64, for_secs: i64) -> PrometheusCheck {
        PrometheusCheck {
            url: "http://prometheus:9090".into(),
            query: "errors".into(),
            threshold: Threshold {
                min: None,
                max: Some(Bound(max)),
            },
            for_: SignedDuration::from_secs(for_secs),
        }
    }

    fn data(json: &str) -> Data {
        serde_json::from_str::<Envelope>(json)
            .unwrap()
            .data
            .unwrap()
    }

    #[test]
    fn an_instant_answer_fails_on_any_series_out_of_bounds() {
        let answer = data(
            r#"{"status":"success","data":{"resultType":"vector","result":[
                {"metric":{"__name__":"errors","service":"web"},"value":[1,"0.01"]},
                {"metric":{"__name__":"errors","service":"api"},"value":[1,"0.2"]}]}}"#,
        );
        assert_eq!(
            judge(&check(0.05, 0), &answer, Timestamp::now()),
            Reading::Fail(r#"errors{service="api"} = 0.2 is above max 0.05"#.into())
        );
        assert_eq!(
            judge(&check(0.5, 0), &answer, Timestamp::now()),
            Reading::Pass("2 series at most 0.5: 0.01 to 0.2".into())
        );
    }

    #[test]
    fn no_series_and_nan_are_not_a_pass() {
        let empty = data(r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#);
        assert!(matches!(
            judge(&check(0.05, 0), &empty, Timestamp::now()),
            Reading::Inconclusive(_)
        ));
        let nan = data(r#"{"status":"success","data":{"resultType":"scalar","result":[1,"NaN"]}}"#);
        assert_eq!(
            judge(&check(0.05, 0), &nan, Timestamp::now()),
            Reading::Fail("scalar = NaN is NaN".into())
        );
    }

    #[test]
    fn a_range_answer_fails_only_when_out_of_bounds_for_the_whole_window() {
        let now = Timestamp::from_second(1000).unwrap();
        let range = |points: &str| {
            data(&format!(
                r#"{{"status":"success","data":{{"resultType":"matrix","result":[
                    {{"metric":{{"__name__":"errors"}},"values":[{points}]}}]}}}}"#
            ))
        };
        let window = check(0.05, 30);
        // Out of bounds from the window's start to now.
        let whole = range(r#"[970,"0.2"],[985,"0.3"],[1000,"0.2"]"#);
        assert_eq!(
            judge(&window, &whole, now),
            Reading::Fail("errors = 0.2 is above max 0.05 for 30s".into())
        );
        // Back within bounds once: not failing.
        let dipped = range(r#"[970,"0.2"],[985,"0.01"],[1000,"0.2"]"#);
        assert!(matches!(judge(&window, &dipped, now), Reading::Pass(_)));
        // Out of bounds only since 990: pending, not failing yet.
        let recent = range(r#"[990,"0.2"],[1000,"0.2"]"#);
        let Reading::Pass(read) = judge(&window, &recent, now) else {
            panic!("pending is not a failure");
        };
        assert!(
            read.contains("pending: errors = 0.2 is above max 0.05, for less than 30s so far"),
            "{read}"
        );
    }
}
