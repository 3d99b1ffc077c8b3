//! How values look on the wire: proto3 JSON as Google's REST transcoding
//! writes it. Enums are stored by name and written as numbers when the
//! caller asks for `$alt=json;enum-encoding=int` (the Rust client always
//! does, and sends its own enums as numbers); int64 fields are strings,
//! durations are `"1.5s"`, timestamps RFC 3339.

use std::time::Duration;

use serde_json::{Map, Value};

/// How enums are written in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EnumEncoding {
    Names,
    Numbers,
}

impl EnumEncoding {
    /// The encoding the `$alt` query parameter asks for.
    pub(crate) fn from_alt(alt: Option<&str>) -> Self {
        match alt {
            Some(alt) if alt.contains("enum-encoding=int") => Self::Numbers,
            _ => Self::Names,
        }
    }
}

/// One enum: its values by name and number.
type EnumTable = &'static [(&'static str, i64)];

const CONDITION_STATE: EnumTable = &[
    ("STATE_UNSPECIFIED", 0),
    ("CONDITION_PENDING", 1),
    ("CONDITION_RECONCILING", 2),
    ("CONDITION_FAILED", 3),
    ("CONDITION_SUCCEEDED", 4),
];
const CONDITION_SEVERITY: EnumTable = &[
    ("SEVERITY_UNSPECIFIED", 0),
    ("ERROR", 1),
    ("WARNING", 2),
    ("INFO", 3),
];
const COMMON_REASON: EnumTable = &[
    ("COMMON_REASON_UNDEFINED", 0),
    ("UNKNOWN", 1),
    ("REVISION_FAILED", 3),
    ("PROGRESS_DEADLINE_EXCEEDED", 4),
    ("CONTAINER_MISSING", 6),
    ("CONTAINER_PERMISSION_DENIED", 7),
    ("CONTAINER_IMAGE_UNAUTHORIZED", 8),
    ("CONTAINER_IMAGE_AUTHORIZATION_CHECK_FAILED", 9),
    ("WAITING_FOR_OPERATION", 13),
    ("INTERNAL", 16),
];
const REVISION_REASON: EnumTable = &[
    ("REVISION_REASON_UNDEFINED", 0),
    ("PENDING", 1),
    ("RESERVE", 2),
    ("RETIRED", 3),
    ("RETIRING", 4),
];
const EXECUTION_REASON: EnumTable = &[
    ("EXECUTION_REASON_UNDEFINED", 0),
    ("JOB_STATUS_SERVICE_POLLING_ERROR", 1),
    ("NON_ZERO_EXIT_CODE", 2),
    ("CANCELLED", 3),
    ("CANCELLING", 4),
    ("DELETED", 5),
];
const TRAFFIC_TYPE: EnumTable = &[
    ("TRAFFIC_TARGET_ALLOCATION_TYPE_UNSPECIFIED", 0),
    ("TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST", 1),
    ("TRAFFIC_TARGET_ALLOCATION_TYPE_REVISION", 2),
];
const INGRESS: EnumTable = &[
    ("INGRESS_TRAFFIC_UNSPECIFIED", 0),
    ("INGRESS_TRAFFIC_ALL", 1),
    ("INGRESS_TRAFFIC_INTERNAL_ONLY", 2),
    ("INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER", 3),
    ("INGRESS_TRAFFIC_NONE", 4),
];
const EXECUTION_ENVIRONMENT: EnumTable = &[
    ("EXECUTION_ENVIRONMENT_UNSPECIFIED", 0),
    ("EXECUTION_ENVIRONMENT_GEN1", 1),
    ("EXECUTION_ENVIRONMENT_GEN2", 2),
];
const LAUNCH_STAGE: EnumTable = &[
    ("LAUNCH_STAGE_UNSPECIFIED", 0),
    ("EARLY_ACCESS", 1),
    ("ALPHA", 2),
    ("BETA", 3),
    ("GA", 4),
    ("DEPRECATED", 5),
    ("UNIMPLEMENTED", 6),
    ("PRELAUNCH", 7),
];
const COMPLETION_STATUS: EnumTable = &[
    ("COMPLETION_STATUS_UNSPECIFIED", 0),
    ("EXECUTION_SUCCEEDED", 1),
    ("EXECUTION_FAILED", 2),
    ("EXECUTION_RUNNING", 3),
    ("EXECUTION_PENDING", 4),
    ("EXECUTION_CANCELLED", 5),
];

/// The enum a field holds, if the fake knows it. `parent` is the key of the
/// object (or array of objects) the field sits in: `type` is an enum in a
/// traffic target but a plain string in a condition.
fn enum_of(parent: &str, field: &str) -> Option<EnumTable> {
    let in_condition = matches!(parent, "conditions" | "terminalCondition");
    match field {
        "state" if in_condition => Some(CONDITION_STATE),
        "severity" if in_condition => Some(CONDITION_SEVERITY),
        "reason" if in_condition => Some(COMMON_REASON),
        "revisionReason" if in_condition => Some(REVISION_REASON),
        "executionReason" if in_condition => Some(EXECUTION_REASON),
        "type" if matches!(parent, "traffic" | "trafficStatuses") => Some(TRAFFIC_TYPE),
        "ingress" => Some(INGRESS),
        "executionEnvironment" => Some(EXECUTION_ENVIRONMENT),
        "launchStage" => Some(LAUNCH_STAGE),
        "completionStatus" => Some(COMPLETION_STATUS),
        _ => None,
    }
}

/// Rewrites every known enum field in `value` to `encoding`. Values the
/// table does not know (a newer enum number, say) are left as they are.
pub(crate) fn encode_enums(value: &mut Value, encoding: EnumEncoding) {
    walk(value, "", encoding);
}

fn walk(value: &mut Value, parent: &str, encoding: EnumEncoding) {
    match value {
        Value::Array(items) => items.iter_mut().for_each(|v| walk(v, parent, encoding)),
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                match enum_of(parent, key) {
                    Some(table) => recode(field, table, encoding),
                    None => walk(field, key, encoding),
                }
            }
        }
        _ => {}
    }
}

fn recode(field: &mut Value, table: EnumTable, encoding: EnumEncoding) {
    let recoded = match (&*field, encoding) {
        (Value::Number(n), EnumEncoding::Names) => n
            .as_i64()
            .and_then(|n| table.iter().find(|(_, v)| *v == n))
            .map(|(name, _)| Value::from(*name)),
        (Value::String(s), EnumEncoding::Numbers) => table
            .iter()
            .find(|(name, _)| name == s)
            .map(|(_, n)| Value::from(*n)),
        _ => None,
    };
    if let Some(recoded) = recoded {
        *field = recoded;
    }
}

/// Now, as the API writes timestamps.
pub(crate) fn now() -> String {
    jiff::Timestamp::now().to_string()
}

/// A duration as proto3 JSON writes it: seconds with an `s` suffix.
pub(crate) fn format_duration(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match duration.subsec_nanos() {
        0 => format!("{seconds}s"),
        nanos => {
            let fraction = format!("{nanos:09}");
            format!("{seconds}.{}s", fraction.trim_end_matches('0'))
        }
    }
}

/// Parses a proto3 JSON duration (`"600s"`, `"0.5s"`).
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let seconds: f64 = text.strip_suffix('s')?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// A random UUID4 string, as the API gives in `uid`.
pub(crate) fn uuid4() -> String {
    let hex: String = (0..32)
        .map(|i| match i {
            12 => '4',
            16 => ['8', '9', 'a', 'b'][fastrand::usize(..4)],
            _ => char::from_digit(fastrand::u32(..16), 16).unwrap_or('0'),
        })
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// `len` random lowercase letters and digits, as in revision and execution
/// name suffixes.
pub(crate) fn random_suffix(len: usize) -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    (0..len)
        .map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]))
        .collect()
}

/// A fresh etag; the API's are opaque strings that change with every write.
pub(crate) fn etag() -> String {
    format!("\"{}\"", random_suffix(16))
}

/// The string field `key` of an object, or "".
pub(crate) fn str_field<'a>(object: &'a Value, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The string-to-string map at `key` (labels, annotations), empty if absent.
pub(crate) fn string_map(object: &Value, key: &str) -> Map<String, Value> {
    object
        .get(key)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// A condition object with the fields the API fills.
pub(crate) fn condition(kind: &str, state: &str, message: &str) -> Value {
    let mut condition = serde_json::json!({
        "type": kind,
        "state": state,
        "lastTransitionTime": now(),
    });
    if !message.is_empty() {
        condition["message"] = Value::from(message);
    }
    condition
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn enums_are_numbers_only_when_asked_for_and_only_where_they_are_enums() {
        let mut service = json!({
            "terminalCondition": {"type": "Ready", "state": "CONDITION_SUCCEEDED"},
            "trafficStatuses": [{"type": "TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST", "percent": 100}],
            "labels": {"state": "CONDITION_FAILED"},
        });
        encode_enums(&mut service, EnumEncoding::Numbers);
        assert_eq!(service["terminalCondition"]["state"], 4);
        assert_eq!(service["terminalCondition"]["type"], "Ready");
        assert_eq!(service["trafficStatuses"][0]["type"], 1);
        assert_eq!(service["labels"]["state"], "CONDITION_FAILED");
        encode_enums(&mut service, EnumEncoding::Names);
        assert_eq!(service["terminalCondition"]["state"], "CONDITION_SUCCEEDED");
    }

    #[test]
    fn durations_round_trip_through_proto_json() {
        assert_eq!(format_duration(Duration::from_secs(600)), "600s");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(parse_duration("0.25s"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("ten"), None);
    }

    #[test]
    fn uids_look_like_uuid4() {
        let uid = uuid4();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
    }
}
