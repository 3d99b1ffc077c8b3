//! The validation the real server answers 422 Invalid for, limited to the
//! rules a deployment tool trips over: names, containers, a Job's restart
//! policy and immutable template, workload selectors, pod updates.

use serde_json::Value;

use crate::meta;
use crate::resources::ResourceType;
use crate::status::{ApiError, Cause};

/// Checks a (defaulted) object about to be stored over `previous`.
pub(crate) fn validate(
    rt: &ResourceType,
    obj: &Value,
    previous: Option<&Value>,
) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    name_causes(rt, obj, &mut causes);
    match (rt.group, rt.kind) {
        ("", "Pod") => {
            pod_spec_causes(meta::at(obj, &["spec"]), "spec", &mut causes);
            if let Some(previous) = previous {
                pod_update_causes(previous, obj, &mut causes);
            }
        }
        ("batch", "Job") => job_causes(obj, previous, &mut causes),
        ("apps", _) => workload_causes(obj, previous, &mut causes),
        _ => {}
    }
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(rt, meta::name(obj), &causes))
    }
}

fn name_causes(rt: &ResourceType, obj: &Value, causes: &mut Vec<Cause>) {
    let name = meta::name(obj);
    if name.is_empty() {
        causes.push(Cause::required(
            "metadata.name",
            "name or generateName is required",
        ));
        return;
    }
    // Namespaces and Services become DNS labels; everything else a subdomain.
    let label_only = matches!(rt.kind, "Namespace" | "Service");
    let max = if label_only { 63 } else { 253 };
    let allowed = |c: char| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (c == '.' && !label_only)
    };
    let ends_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let valid = name.len() <= max
        && name.chars().all(allowed)
        && ends_ok(name.chars().next())
        && ends_ok(name.chars().last());
    if !valid {
        let rule = if label_only {
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
        } else {
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        };
        causes.push(Cause::invalid("metadata.name", &Value::from(name), rule));
    }
}

fn pod_spec_causes(spec: Option<&Value>, at: &str, causes: &mut Vec<Cause>) {
    let containers = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let Some(containers) = containers.filter(|c| !c.is_empty()) else {
        causes.push(Cause::required(&format!("{at}.containers"), ""));
        return;
    };
    for (i, container) in containers.iter().enumerate() {
        for field in ["name", "image"] {
            if container
                .get(field)
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
            {
                causes.push(Cause::required(
                    &format!("{at}.containers[{i}].{field}"),
                    "",
                ));
            }
        }
    }
}

/// Pods only allow a few spec changes; images are the one that matters here.
fn pod_update_causes(previous: &Value, next: &Value, causes: &mut Vec<Cause>) {
    let without_images = |obj: &Value| {
        let mut spec = obj.get("spec").cloned().unwrap_or_default();
        for c in spec
            .get_mut("containers")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(c) = c.as_object_mut() {
                c.remove("image");
            }
        }
        // The kubelet stand-in binds pods, as the scheduler would.
        if let Some(s) = spec.as_object_mut() {
            s.remove("nodeName");
        }
        spec
    };
    if without_images(previous) != without_images(next) {
        causes.push(Cause::forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)",
        ));
    }
}

fn job_causes(obj: &Value, previous: Option<&Value>, causes: &mut Vec<Cause>) {
    pod_spec_causes(
        meta::at(obj, &["spec", "template", "spec"]),
        "spec.template.spec",
        causes,
    );
    let policy = meta::at(obj, &["spec", "template", "spec", "restartPolicy"]);
    match policy.and_then(Value::as_str) {
        Some("OnFailure" | "Never") => {}
        None => causes.push(Cause::required(
            "spec.template.spec.restartPolicy",
            "valid values: \"OnFailure\", \"Never\"",
        )),
        Some(other) => causes.push(Cause {
            reason: "FieldValueNotSupported",
            field: "spec.template.spec.restartPolicy".into(),
            message: format!(
                "Unsupported value: \"{other}\": supported values: \"OnFailure\", \"Never\""
            ),
        }),
    }
    if let Some(previous) = previous {
        immutable(previous, obj, &["spec", "template"], causes);
        immutable(previous, obj, &["spec", "selector"], causes);
        immutable(previous, obj, &["spec", "completions"], causes);
    }
}

fn workload_causes(obj: &Value, previous: Option<&Value>, causes: &mut Vec<Cause>) {
    pod_spec_causes(
        meta::at(obj, &["spec", "template", "spec"]),
        "spec.template.spec",
        causes,
    );
    let Some(selector) = meta::at(obj, &["spec", "selector"]).filter(|s| s.is_object()) else {
        causes.push(Cause::required("spec.selector", ""));
        return;
    };
    let template_labels = meta::at(obj, &["spec", "template", "metadata", "labels"]);
    let selected = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(k, v)| template_labels.and_then(|l| l.get(k)) == Some(v));
    if !selected {
        causes.push(Cause::invalid(
            "spec.template.metadata.labels",
            template_labels.unwrap_or(&Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    if let Some(previous) = previous {
        immutable(previous, obj, &["spec", "selector"], causes);
    }
}

fn immutable(previous: &Value, next: &Value, path: &[&str], causes: &mut Vec<Cause>) {
    let before = meta::at(previous, path);
    let after = meta::at(next, path);
    if before != after {
        causes.push(Cause::invalid(
            &path.join("."),
            after.unwrap_or(&Value::Null),
            "field is immutable",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_kind;
    use serde_json::json;

    fn job(restart_policy: Option<&str>, image: &str) -> Value {
        let mut spec = json!({"containers": [{"name": "run", "image": image}]});
        if let Some(policy) = restart_policy {
            spec["restartPolicy"] = json!(policy);
        }
        json!({"metadata": {"name": "migrate"}, "spec": {"template": {"spec": spec}}})
    }

    #[test]
    fn a_job_needs_never_or_on_failure() {
        let jobs = by_kind("Job").unwrap();
        assert!(validate(jobs, &job(Some("Never"), "a"), None).is_ok());
        let err = validate(jobs, &job(None, "a"), None).unwrap_err();
        assert_eq!(
            err.details.unwrap()["causes"][0]["field"],
            "spec.template.spec.restartPolicy"
        );
        assert_eq!(
            validate(jobs, &job(Some("Always"), "a"), None)
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn a_jobs_template_is_immutable() {
        let jobs = by_kind("Job").unwrap();
        let err = validate(
            jobs,
            &job(Some("Never"), "b"),
            Some(&job(Some("Never"), "a")),
        )
        .unwrap_err();
        assert!(
            err.message.contains("spec.template: Invalid value"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("field is immutable"),
            "{}",
            err.message
        );
    }

    #[test]
    fn names_must_be_dns_subdomains() {
        let cms = by_kind("ConfigMap").unwrap();
        for bad in ["Upper", "-x", "a_b", ""] {
            let obj = json!({"metadata": {"name": bad}});
            assert_eq!(validate(cms, &obj, None).unwrap_err().code, 422, "{bad}");
        }
        assert!(validate(cms, &json!({"metadata": {"name": "a.b-c"}}), None).is_ok());
    }

    #[test]
    fn a_deployment_selector_must_match_its_template() {
        let deployments = by_kind("Deployment").unwrap();
        let d = json!({"metadata": {"name": "web"}, "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "api"}}, "spec": {"containers": [{"name": "a", "image": "i"}]}}
        }});
        let err = validate(deployments, &d, None).unwrap_err();
        assert!(
            err.message
                .contains("`selector` does not match template `labels`"),
            "{}",
            err.message
        );
    }
}
