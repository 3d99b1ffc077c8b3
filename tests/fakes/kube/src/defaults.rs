//! The defaults the real server fills in on every write, for the fields a
//! client is most likely to compare against what it sent (replicas,
//! strategies, pod template fields, Job limits, Service IPs, Secret
//! `stringData`). Defaults only fill what is missing.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value, json};

use crate::meta::{self, default_key, object_at};
use crate::resources::ResourceType;

/// Fills the defaults of one object of `rt`.
pub(crate) fn apply(rt: &ResourceType, obj: &mut Value) {
    match (rt.group, rt.kind) {
        ("", "Pod") => {
            pod_spec(object_at(obj, &["spec"]), "Always");
            let spec = object_at(obj, &["spec"]);
            default_key(spec, "serviceAccountName", json!("default"));
            default_key(spec, "priority", json!(0));
            default_key(spec, "enableServiceLinks", json!(true));
        }
        ("apps", "Deployment") => deployment(obj),
        ("apps", "StatefulSet") => stateful_set(obj),
        ("apps", "DaemonSet") => daemon_set(obj),
        ("apps", "ReplicaSet") => {
            default_key(object_at(obj, &["spec"]), "replicas", json!(1));
            template(obj, "Always");
        }
        ("batch", "Job") => job(obj),
        ("", "Service") => service(obj),
        ("", "Secret") => secret(obj),
        ("", "Namespace") => namespace(obj),
        _ => {}
    }
}

fn template(obj: &mut Value, restart_policy: &str) {
    pod_spec(
        object_at(obj, &["spec", "template", "spec"]),
        restart_policy,
    );
}

fn pod_spec(spec: &mut Map<String, Value>, restart_policy: &str) {
    if !restart_policy.is_empty() {
        default_key(spec, "restartPolicy", json!(restart_policy));
    }
    default_key(spec, "terminationGracePeriodSeconds", json!(30));
    default_key(spec, "dnsPolicy", json!("ClusterFirst"));
    default_key(spec, "securityContext", json!({}));
    default_key(spec, "schedulerName", json!("default-scheduler"));
    for list in ["containers", "initContainers"] {
        for container in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if let Some(container) = container.as_object_mut() {
                self::container(container);
            }
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    // The real rule: `:latest` or no tag at all means "always pull".
    let last = image.rsplit('/').next().unwrap_or_default();
    let policy = if !last.contains(':') || last.ends_with(":latest") {
        "Always"
    } else {
        "IfNotPresent"
    };
    default_key(c, "imagePullPolicy", json!(policy));
    default_key(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_key(c, "terminationMessagePolicy", json!("File"));
    default_key(c, "resources", json!({}));
    for port in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(port) = port.as_object_mut() {
            default_key(port, "protocol", json!("TCP"));
        }
    }
    for env in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field_ref) = env
            .pointer_mut("/valueFrom/fieldRef")
            .and_then(Value::as_object_mut)
        {
            default_key(field_ref, "apiVersion", json!("v1"));
        }
    }
}

fn deployment(obj: &mut Value) {
    let spec = object_at(obj, &["spec"]);
    default_key(spec, "replicas", json!(1));
    default_key(spec, "revisionHistoryLimit", json!(10));
    default_key(spec, "progressDeadlineSeconds", json!(600));
    default_key(
        spec,
        "strategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}),
    );
    template(obj, "Always");
}

fn stateful_set(obj: &mut Value) {
    let spec = object_at(obj, &["spec"]);
    default_key(spec, "replicas", json!(1));
    default_key(spec, "podManagementPolicy", json!("OrderedReady"));
    default_key(spec, "revisionHistoryLimit", json!(10));
    default_key(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
    );
    default_key(
        spec,
        "persistentVolumeClaimRetentionPolicy",
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"}),
    );
    template(obj, "Always");
}

fn daemon_set(obj: &mut Value) {
    let spec = object_at(obj, &["spec"]);
    default_key(spec, "revisionHistoryLimit", json!(10));
    default_key(
        spec,
        "updateStrategy",
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}),
    );
    template(obj, "Always");
}

/// Job defaults, including the selector and template labels the real
/// server derives from the Job's uid.
fn job(obj: &mut Value) {
    let uid = meta::uid(obj).to_owned();
    let name = meta::name(obj).to_owned();
    let spec = object_at(obj, &["spec"]);
    default_key(spec, "parallelism", json!(1));
    default_key(spec, "completions", json!(1));
    default_key(spec, "backoffLimit", json!(6));
    default_key(spec, "completionMode", json!("NonIndexed"));
    default_key(spec, "suspend", json!(false));
    default_key(spec, "podReplacementPolicy", json!("TerminatingOrFailed"));
    if !uid.is_empty() {
        default_key(
            spec,
            "selector",
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        );
        let labels = object_at(obj, &["spec", "template", "metadata", "labels"]);
        for (key, value) in [
            ("batch.kubernetes.io/controller-uid", &uid),
            ("batch.kubernetes.io/job-name", &name),
            ("controller-uid", &uid),
            ("job-name", &name),
        ] {
            default_key(labels, key, json!(value));
        }
    }
    // Jobs have no restartPolicy default: validation insists on one.
    template(obj, "");
}

fn service(obj: &mut Value) {
    let spec = object_at(obj, &["spec"]);
    default_key(spec, "type", json!("ClusterIP"));
    default_key(spec, "sessionAffinity", json!("None"));
    default_key(spec, "internalTrafficPolicy", json!("Cluster"));
    default_key(spec, "ipFamilies", json!(["IPv4"]));
    default_key(spec, "ipFamilyPolicy", json!("SingleStack"));
    if spec.get("clusterIP").is_none() {
        let ip = format!("10.96.{}.{}", fastrand::u8(0..=255), fastrand::u8(1..=254));
        spec.insert("clusterIP".into(), json!(ip));
        spec.insert("clusterIPs".into(), json!([ip]));
    }
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(port) = port.as_object_mut() {
            default_key(port, "protocol", json!("TCP"));
            if let Some(number) = port.get("port").cloned() {
                default_key(port, "targetPort", number);
            }
        }
    }
}

/// `stringData` is write-only: the real server folds it into `data`.
fn secret(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    default_key(map, "type", json!("Opaque"));
    let Some(Value::Object(string_data)) = map.remove("stringData") else {
        return;
    };
    let data = object_at(obj, &["data"]);
    for (key, value) in string_data {
        let text = value.as_str().unwrap_or_default().to_owned();
        data.insert(key, json!(STANDARD.encode(text)));
    }
}

fn namespace(obj: &mut Value) {
    let name = meta::name(obj).to_owned();
    default_key(
        object_at(obj, &["spec"]),
        "finalizers",
        json!(["kubernetes"]),
    );
    default_key(object_at(obj, &["status"]), "phase", json!("Active"));
    default_key(
        object_at(obj, &["metadata", "labels"]),
        "kubernetes.io/metadata.name",
        json!(name),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::by_kind;

    #[test]
    fn a_deployment_gets_the_real_defaults_without_losing_what_was_set() {
        let mut d = json!({"spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "a", "image": "web"}]}}}});
        apply(by_kind("Deployment").unwrap(), &mut d);
        assert_eq!(d["spec"]["replicas"], 3);
        assert_eq!(d["spec"]["progressDeadlineSeconds"], 600);
        assert_eq!(d["spec"]["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
            "Always"
        );
    }

    #[test]
    fn secret_string_data_becomes_base64_data() {
        let mut s = json!({"stringData": {"token": "abc"}});
        apply(by_kind("Secret").unwrap(), &mut s);
        assert_eq!(s, json!({"type": "Opaque", "data": {"token": "YWJj"}}));
    }

    #[test]
    fn a_job_is_selected_by_its_uid() {
        let mut j = json!({"metadata": {"name": "j", "uid": "u1"}, "spec": {"template": {"spec": {"containers": []}}}});
        apply(by_kind("Job").unwrap(), &mut j);
        assert_eq!(
            j["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
            "u1"
        );
        assert_eq!(j["spec"]["template"]["metadata"]["labels"]["job-name"], "j");
        assert_eq!(j["spec"]["backoffLimit"], 6);
        assert!(j["spec"]["template"]["spec"].get("restartPolicy").is_none());
    }
}
