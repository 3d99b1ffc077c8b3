//! Brownfield adoption: a first-class runtime finds a live service (an ECS
//! service, a Cloud Run service, Kubernetes objects) that Vergence did not
//! make. When it already runs what the desired state describes, the runtime
//! marks it as Vergence's own and reports it adopted; when it differs, the
//! first apply takes it over, after an approval unless the runtime says
//! `adopt: apply`.
//!
//! Whether the live service matches is [`differences`]: the same
//! field-by-field comparison the runtimes' drift checks make, so adoption
//! and drift never disagree about what "the same" is.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a first-class runtime does with a live service it did not make
/// that differs from the desired state (one that matches is always
/// adopted, without applying).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Adopt {
    /// Its first apply waits for an approval that shows the differences.
    #[default]
    Approve,
    /// It is applied like any other drift.
    Apply,
}

impl Adopt {
    /// For `skip_serializing_if`: specs without the key keep their bytes
    /// (and so their digests and versions).
    pub fn is_default(&self) -> bool {
        *self == Adopt::default()
    }
}

/// A live object the fetch found that is not Vergence's and differs from
/// the desired state: applying would take it over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Takeover {
    /// What it is, for people: `ECS service web` (the object's name when
    /// a runtime's fetch leaves it out).
    #[serde(default)]
    pub object: String,
    /// Field by field, as [`differences`] says them.
    pub differences: Vec<String>,
}

/// Differences listed before the rest are counted.
pub const MAX_DIFFERENCES: usize = 20;
/// Characters of a value shown in a difference.
const MAX_VALUE_CHARS: usize = 80;

/// How the live object differs from the wanted one, field by field: every
/// field the wanted JSON names must be in the live one with the same value
/// (fields the platform adds, its defaults, do not count). Lists of objects
/// with a `name` are matched by name, others item by item; a number and a
/// string of the same digits are the same (APIs echo `"256"` for `256`).
/// One line per field (`containerDefinitions[web].image: nginx:1.1 live,
/// nginx:1.2 wanted`), at most [`MAX_DIFFERENCES`] and a count of the rest.
pub fn differences(wanted: &Value, live: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk("", wanted, live, &mut found);
    if found.len() > MAX_DIFFERENCES {
        let more = found.len() - MAX_DIFFERENCES;
        found.truncate(MAX_DIFFERENCES);
        found.push(format!("… and {more} more"));
    }
    found
}

fn walk(path: &str, wanted: &Value, live: &Value, found: &mut Vec<String>) {
    match (wanted, live) {
        (Value::Object(wanted), Value::Object(live)) => {
            for (key, want) in wanted {
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match live.get(key) {
                    Some(have) => walk(&at, want, have, found),
                    None if empty(want) => {}
                    None => found.push(format!("{at}: not set live, {} wanted", shown(want))),
                }
            }
        }
        (Value::Array(wanted), Value::Array(live)) => list(path, wanted, live, found),
        (Value::Null, _) => {}
        _ if same_scalar(wanted, live) => {}
        _ if empty(wanted) && empty(live) => {}
        _ => found.push(format!(
            "{}: {} live, {} wanted",
            if path.is_empty() { "(whole)" } else { path },
            shown(live),
            shown(wanted)
        )),
    }
}

fn list(path: &str, wanted: &[Value], live: &[Value], found: &mut Vec<String>) {
    let named = |items: &[Value]| -> Option<Vec<(String, Value)>> {
        items
            .iter()
            .map(|i| Some((i.get("name")?.as_str()?.to_owned(), i.clone())))
            .collect()
    };
    if let (Some(wanted), Some(live)) = (named(wanted), named(live)) {
        for (name, want) in &wanted {
            let at = format!("{path}[{name}]");
            match live.iter().find(|(n, _)| n == name) {
                Some((_, have)) => walk(&at, want, have, found),
                None => found.push(format!("{at}: not there live")),
            }
        }
        for (name, _) in live
            .iter()
            .filter(|(n, _)| !wanted.iter().any(|(w, _)| w == n))
        {
            found.push(format!("{path}[{name}]: there live, not wanted"));
        }
        return;
    }
    if wanted.len() != live.len() {
        found.push(format!(
            "{path}: {} live, {} wanted",
            shown(&Value::Array(live.to_vec())),
            shown(&Value::Array(wanted.to_vec()))
        ));
        return;
    }
    for (i, (want, have)) in wanted.iter().zip(live).enumerate() {
        walk(&format!("{path}[{i}]"), want, have, found);
    }
}

fn same_scalar(a: &Value, b: &Value) -> bool {
    a == b || scalar_text(a).is_some_and(|a| scalar_text(b) == Some(a))
}

fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

fn shown(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    crate::text::clip(text, MAX_VALUE_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_the_platform_adds_do_not_count_and_numbers_match_their_digits() {
        let wanted =
            json!({"cpu": 256, "containerDefinitions": [{"name": "web", "image": "nginx:1"}]});
        let live = json!({"cpu": "256", "revision": 3, "containerDefinitions": [{"name": "web", "image": "nginx:1", "essential": true}]});
        assert!(differences(&wanted, &live).is_empty());
    }

    #[test]
    fn each_differing_field_is_named_with_both_values() {
        let wanted = json!({"containerDefinitions": [{"name": "web", "image": "nginx:2"}, {"name": "log", "image": "fluent"}], "memory": "512"});
        let live = json!({"containerDefinitions": [{"name": "web", "image": "nginx:1"}, {"name": "side", "image": "x"}]});
        assert_eq!(
            differences(&wanted, &live),
            vec![
                "containerDefinitions[web].image: nginx:1 live, nginx:2 wanted",
                "containerDefinitions[log]: not there live",
                "containerDefinitions[side]: there live, not wanted",
                "memory: not set live, 512 wanted",
            ]
        );
    }

    #[test]
    fn differences_are_bounded() {
        let wanted = Value::Object((0..50).map(|i| (format!("k{i:02}"), json!(i))).collect());
        let found = differences(&wanted, &json!({}));
        assert_eq!(found.len(), MAX_DIFFERENCES + 1);
        assert_eq!(found.last().map(String::as_str), Some("… and 30 more"));
    }
}
