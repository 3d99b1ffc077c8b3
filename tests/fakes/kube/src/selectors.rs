//! Label and field selectors of list and watch calls, parsed with the real
//! server's grammar and answered with its 400 messages.

use serde_json::Value;

use crate::meta;
use crate::resources::ResourceType;
use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

/// A parsed `labelSelector`; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    pub(crate) fn parse(text: &str) -> Result<Self, ApiError> {
        split_top_level(text)
            .into_iter()
            .filter(|part| !part.trim().is_empty())
            .map(|part| parse_requirement(part.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = meta::labels(obj);
        let label = |key: &str| labels.get(key).and_then(Value::as_str);
        self.0.iter().all(|req| match req {
            Requirement::Equals(k, v) => label(k) == Some(v.as_str()),
            Requirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            Requirement::In(k, vs) => label(k).is_some_and(|l| vs.iter().any(|v| v == l)),
            Requirement::NotIn(k, vs) => label(k).is_none_or(|l| vs.iter().all(|v| v != l)),
            Requirement::Exists(k) => label(k).is_some(),
            Requirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// Splits on commas outside parentheses (`a in (x,y),b` is two parts).
fn split_top_level(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn unable_to_parse(part: &str) -> ApiError {
    ApiError::bad_request(format!(
        "unable to parse requirement: found '{part}', expected: valid label selector"
    ))
}

fn parse_requirement(part: &str) -> Result<Requirement, ApiError> {
    if let Some(key) = part.strip_prefix('!') {
        return Ok(Requirement::DoesNotExist(valid_key(key.trim(), part)?));
    }
    if let Some((key, value)) = part.split_once("!=") {
        return Ok(Requirement::NotEquals(
            valid_key(key.trim(), part)?,
            value.trim().to_owned(),
        ));
    }
    if let Some((key, value)) = part.split_once("==").or_else(|| part.split_once('=')) {
        return Ok(Requirement::Equals(
            valid_key(key.trim(), part)?,
            value.trim().to_owned(),
        ));
    }
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    match words.as_slice() {
        [key] => Ok(Requirement::Exists(valid_key(key, part)?)),
        [key, rest] => {
            let rest = rest.trim();
            let (negated, set) = if let Some(set) = rest.strip_prefix("notin") {
                (true, set)
            } else if let Some(set) = rest.strip_prefix("in") {
                (false, set)
            } else {
                return Err(unable_to_parse(part));
            };
            let values = parse_set(set.trim()).ok_or_else(|| unable_to_parse(part))?;
            let key = valid_key(key, part)?;
            Ok(if negated {
                Requirement::NotIn(key, values)
            } else {
                Requirement::In(key, values)
            })
        }
        _ => Err(unable_to_parse(part)),
    }
}

fn parse_set(set: &str) -> Option<Vec<String>> {
    let inner = set.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

fn valid_key(key: &str, part: &str) -> Result<String, ApiError> {
    let ok = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
    if ok {
        Ok(key.to_owned())
    } else {
        Err(unable_to_parse(part))
    }
}

/// A parsed `fieldSelector` over the fields the real server indexes.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

/// Fields every kind can be selected on.
const COMMON_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// Extra selectable fields per kind, as the real server registers them.
fn extra_fields(rt: &ResourceType) -> &'static [&'static str] {
    match rt.kind {
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        ],
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "reason",
            "type",
        ],
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        "Job" => &["status.successful"],
        _ => &[],
    }
}

impl FieldSelector {
    pub(crate) fn parse(text: &str, rt: &ResourceType) -> Result<Self, ApiError> {
        let mut terms = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (f, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !COMMON_FIELDS.contains(&field) && !extra_fields(rt).contains(&field) {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(Self(terms))
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let path: Vec<&str> = field.split('.').collect();
            let actual = match meta::at(obj, &path) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_kind;
    use serde_json::json;

    fn labelled(labels: Value) -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "labels": labels}, "status": {"phase": "Running"}})
    }

    #[test]
    fn every_label_operator_is_understood() {
        let obj = labelled(json!({"app": "web", "tier": "front"}));
        let yes = [
            "app=web",
            "app==web",
            "app!=api",
            "app in (api, web)",
            "app notin (api)",
            "tier",
            "!missing",
            "app=web,tier in (front)",
        ];
        for text in yes {
            assert!(LabelSelector::parse(text).unwrap().matches(&obj), "{text}");
        }
        let no = [
            "app=api",
            "app!=web",
            "app in (api)",
            "app notin (web,x)",
            "missing",
            "!tier",
        ];
        for text in no {
            assert!(!LabelSelector::parse(text).unwrap().matches(&obj), "{text}");
        }
        assert_eq!(LabelSelector::parse("app in web").unwrap_err().code, 400);
    }

    #[test]
    fn field_selectors_know_the_pod_phase_but_not_arbitrary_fields() {
        let pods = by_kind("Pod").unwrap();
        let obj = labelled(json!({}));
        assert!(
            FieldSelector::parse("status.phase=Running,metadata.name=p", pods)
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("status.phase!=Running", pods)
                .unwrap()
                .matches(&obj)
        );
        let jobs = by_kind("Job").unwrap();
        assert_eq!(
            FieldSelector::parse("status.phase=Running", jobs)
                .unwrap_err()
                .code,
            400
        );
    }
}
