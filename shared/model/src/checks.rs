//! Protections that read a metric system instead of running a program:
//! a PromQL query held to a threshold, and CloudWatch alarms. Whoever runs
//! the engine carries them out with the system's API (like a first-class
//! runtime's jobs) and reports a job result: exit 0 when the check passes,
//! exit 1 when it fails, and [`JobOutcome::Inconclusive`] when the source
//! could not be read, which holds applies and never fails a version.
//!
//! [`JobOutcome::Inconclusive`]: crate::JobOutcome::Inconclusive

use std::fmt;
use std::hash::{Hash, Hasher};

use jiff::SignedDuration;
use serde::{Deserialize, Serialize};

/// A PromQL query whose every series must stay within `threshold`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusCheck {
    /// The server's base URL (`http://prometheus:9090`), without `/api/v1`.
    pub url: String,
    pub query: String,
    pub threshold: Threshold,
    /// How long a series must have been outside the threshold before the
    /// check fails (Prometheus alerting rules' `for`); zero: at once.
    #[serde(rename = "for")]
    pub for_: SignedDuration,
}

/// Bounds a value must stay within; at least one is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Threshold {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<Bound>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<Bound>,
}

impl Threshold {
    /// Why `value` is outside the threshold; `None` when it is within.
    /// NaN is outside every threshold: a query that divides by zero has
    /// no answer to pass on.
    pub fn breach(&self, value: f64) -> Option<String> {
        if value.is_nan() {
            return Some("is NaN".to_owned());
        }
        if let Some(min) = self.min
            && value < min.0
        {
            return Some(format!("is below min {min}"));
        }
        if let Some(max) = self.max
            && value > max.0
        {
            return Some(format!("is above max {max}"));
        }
        None
    }
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min, self.max) {
            (Some(min), Some(max)) => write!(f, "between {min} and {max}"),
            (Some(min), None) => write!(f, "at least {min}"),
            (None, Some(max)) => write!(f, "at most {max}"),
            (None, None) => f.write_str("any value"),
        }
    }
}

/// A finite threshold value. Compared and hashed by its bits, so that job
/// specs holding one keep their equality and hashing (a config never
/// holds NaN: the compiler refuses it).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Bound(pub f64);

impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Bound {}

impl Hash for Bound {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// CloudWatch alarms that must not be in ALARM.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudwatchAlarmCheck {
    pub names: Vec<String>,
    /// The alarms' region; the engine's own when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_names_the_bound_a_value_crosses() {
        let both = Threshold {
            min: Some(Bound(0.9)),
            max: Some(Bound(1.0)),
        };
        assert_eq!(both.breach(0.95), None);
        assert_eq!(both.breach(0.9), None, "bounds are inclusive");
        assert_eq!(both.breach(0.5).as_deref(), Some("is below min 0.9"));
        assert_eq!(both.breach(1.5).as_deref(), Some("is above max 1"));
        assert_eq!(both.breach(f64::NAN).as_deref(), Some("is NaN"));
        assert_eq!(both.to_string(), "between 0.9 and 1");
    }
}
