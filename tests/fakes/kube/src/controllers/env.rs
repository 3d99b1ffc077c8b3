//! Resolves a container's environment as the kubelet does: literal values,
//! `valueFrom` (Secret and ConfigMap keys, pod fields), `envFrom`, and
//! `$(VAR)` references in values, command and args. A missing Secret or
//! key is a `CreateContainerConfigError` with the kubelet's message.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::meta;
use crate::resources::by_kind;
use crate::store::Store;

/// Why a container cannot be configured (the waiting message).
pub(crate) type ConfigError = String;

/// The resolved environment, in declaration order (`envFrom` first).
pub(crate) fn resolve(
    store: &Store,
    pod: &Value,
    container: &Value,
) -> Result<Vec<(String, String)>, ConfigError> {
    let namespace = meta::namespace(pod);
    let mut env: Vec<(String, String)> = Vec::new();
    for source in container["envFrom"].as_array().into_iter().flatten() {
        let prefix = source["prefix"].as_str().unwrap_or_default();
        let (kind, reference) = if source.get("secretRef").is_some() {
            ("Secret", &source["secretRef"])
        } else {
            ("ConfigMap", &source["configMapRef"])
        };
        let name = reference["name"].as_str().unwrap_or_default();
        match read_all(store, kind, namespace, name) {
            Some(pairs) => env.extend(pairs.into_iter().map(|(k, v)| (format!("{prefix}{k}"), v))),
            None if reference["optional"] == true => {}
            None => return Err(format!("{} \"{name}\" not found", kind.to_lowercase())),
        }
    }
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap_or_default().to_owned();
        let value = match (var.get("value"), var.get("valueFrom")) {
            (_, Some(from)) => match value_from(store, pod, from)? {
                Some(value) => value,
                None => continue,
            },
            (Some(value), None) => expand(value.as_str().unwrap_or_default(), &env),
            (None, None) => String::new(),
        };
        env.retain(|(k, _)| *k != name);
        env.push((name, value));
    }
    Ok(env)
}

/// One `valueFrom`; `None` for an optional reference that is missing.
fn value_from(store: &Store, pod: &Value, from: &Value) -> Result<Option<String>, ConfigError> {
    let namespace = meta::namespace(pod);
    for (field, kind) in [("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")] {
        let Some(reference) = from.get(field) else {
            continue;
        };
        let name = reference["name"].as_str().unwrap_or_default();
        let key = reference["key"].as_str().unwrap_or_default();
        let optional = reference["optional"] == true;
        let Some(pairs) = read_all(store, kind, namespace, name) else {
            return if optional {
                Ok(None)
            } else {
                Err(format!("{} \"{name}\" not found", kind.to_lowercase()))
            };
        };
        return match pairs.into_iter().find(|(k, _)| k == key) {
            Some((_, value)) => Ok(Some(value)),
            None if optional => Ok(None),
            None => Err(format!(
                "couldn't find key {key} in {kind} {namespace}/{name}"
            )),
        };
    }
    if let Some(path) = from.pointer("/fieldRef/fieldPath").and_then(Value::as_str) {
        return Ok(Some(field_value(pod, path)));
    }
    Ok(Some(String::new()))
}

/// Every key of a Secret (decoded) or ConfigMap; `None` when it is missing.
fn read_all(
    store: &Store,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Option<Vec<(String, String)>> {
    let obj = store.get(by_kind(kind)?, namespace, name)?;
    let data = obj["data"].as_object().cloned().unwrap_or_default();
    let decode = |v: &Value| -> String {
        let text = v.as_str().unwrap_or_default();
        match kind {
            "Secret" => STANDARD
                .decode(text)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default(),
            _ => text.to_owned(),
        }
    };
    Some(data.iter().map(|(k, v)| (k.clone(), decode(v))).collect())
}

/// A `fieldRef` path the downward API supports.
fn field_value(pod: &Value, path: &str) -> String {
    let bracketed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_owned)
    };
    if let Some(label) = bracketed("metadata.labels") {
        return meta::str_at(pod, &["metadata", "labels", &label])
            .unwrap_or_default()
            .to_owned();
    }
    if let Some(annotation) = bracketed("metadata.annotations") {
        return meta::str_at(pod, &["metadata", "annotations", &annotation])
            .unwrap_or_default()
            .to_owned();
    }
    let segments: Vec<&str> = path.split('.').collect();
    meta::str_at(pod, &segments).unwrap_or_default().to_owned()
}

/// Expands `$(VAR)` from the variables defined so far; `$$` escapes and
/// unknown references stay as written, as the kubelet does.
pub(crate) fn expand(text: &str, env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after.strip_prefix('(').and_then(|a| a.split_once(')')) {
            match env.iter().rev().find(|(k, _)| k == name) {
                Some((_, value)) => out.push_str(value),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_expand_like_the_kubelet() {
        let env = vec![("A".to_owned(), "1".to_owned())];
        assert_eq!(expand("x$(A)y", &env), "x1y");
        assert_eq!(expand("$(B) $$(A) $", &env), "$(B) $(A) $");
    }
}
