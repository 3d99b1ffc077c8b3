//! A service's Cloud Run file for one instance: the Cloud Run service
//! (Admin API v2 `Service` resource) rendered as a template, read as JSON
//! or YAML, and checked: the fields Cloud Run takes, a `name` that is the
//! service's id, and no field only Cloud Run writes.

use serde_json::{Map, Value};

use super::ecs::parse;
use crate::model::CloudRunRuntime;
use crate::template::{Reference, Template};
use vergence_model::cloud_run::annotations;
use vergence_model::diagnostics::suggest;
use vergence_model::{CloudRunService, InstanceIds, Rollout};

/// The fields of a Cloud Run `Service` a file may set.
const SERVICE_KEYS: &[&str] = &[
    "name",
    "description",
    "labels",
    "annotations",
    "client",
    "clientVersion",
    "ingress",
    "launchStage",
    "binaryAuthorization",
    "template",
    "traffic",
    "scaling",
    "invokerIamDisabled",
    "defaultUriDisabled",
    "iapEnabled",
    "multiRegionSettings",
    "customAudiences",
    "buildConfig",
];

/// Renders the Cloud Run file of one instance, to which `rollout` (with
/// whose it is) applies, if any; the error names the file.
pub(crate) fn render(
    (file, template): &(String, Template),
    runtime: &CloudRunRuntime,
    ids: &InstanceIds,
    rollout: Option<(&Rollout, &str)>,
    resolve: impl Fn(&Reference) -> Option<String>,
) -> Result<CloudRunService, String> {
    let located = |line: Option<usize>, message: String| match line {
        Some(line) => format!("{file}:{line}: {message}"),
        None => format!("{file}: {message}"),
    };
    let mut spec = parse(file, &template.render(&resolve)?).map_err(|(l, m)| located(l, m))?;
    let service_name = check_service(&spec).map_err(|m| located(None, m))?;
    check_traffic(&spec, rollout).map_err(|m| located(None, m))?;
    spec.remove("name");
    Ok(CloudRunService {
        project: runtime.project.clone(),
        region: runtime.region.clone(),
        service_name,
        spec: Value::Object(spec).to_string(),
        service_id: ids.service_id.clone(),
        version: String::new(),
        file: file.clone(),
        adopt: runtime.adopt,
        traffic_percent: None,
    })
}

/// A Cloud Run service: its `name` (the service id) and only fields Cloud
/// Run takes; returns the name.
pub(crate) fn check_service(map: &Map<String, Value>) -> Result<String, String> {
    for key in map.keys() {
        if !SERVICE_KEYS.contains(&key.as_str()) {
            let hint = suggest(key, SERVICE_KEYS.iter().copied())
                .map(|s| format!("; did you mean '{s}'?"))
                .unwrap_or_default();
            return Err(format!(
                "unknown key '{key}': a Cloud Run service (Admin API v2) has no such field, or only Cloud Run writes it{hint}"
            ));
        }
    }
    let name = map
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| is_service_id(n))
        .ok_or(
            "'name' is required: the Cloud Run service's id (lowercase letters, digits and '-', starting with a letter, at most 49 characters)",
        )?;
    if let Some(revision) = map.get("template").and_then(|t| t.get("revision")) {
        return Err(format!(
            "'template.revision' ({revision}) is set by Vergence: it names each revision after the version and spec"
        ));
    }
    for (at, resource) in [
        ("", Some(map)),
        ("template.", map.get("template").and_then(Value::as_object)),
    ] {
        let Some(resource) = resource else { continue };
        if let Some(found) = resource
            .get("annotations")
            .and_then(Value::as_object)
            .and_then(|a| a.keys().find(|k| k.starts_with("vergence.dev/")))
        {
            return Err(format!(
                "'{at}annotations.{found}' is Vergence's own (it sets {} and {}); use another prefix",
                annotations::SERVICE_ID,
                annotations::VERSION
            ));
        }
    }
    Ok(name.to_owned())
}

/// A service's own `traffic` where a rollout applies is refused: the
/// rollout sets the traffic at each step, and a split written in the file
/// would be undone by the next step (or undo it).
pub(crate) fn check_traffic(
    map: &Map<String, Value>,
    rollout: Option<(&Rollout, &str)>,
) -> Result<(), String> {
    match rollout {
        Some((rollout, whose)) if map.contains_key("traffic") => Err(format!(
            "'traffic' is set by the rollout of {whose} ({}): at each step it splits the traffic between the new revision (tag canary) and the one before (tag stable); remove 'traffic' from the file",
            rollout.describe()
        )),
        _ => Ok(()),
    }
}

/// Cloud Run service ids: what revision names (`{id}-v{10 hex}`) leave room for.
fn is_service_id(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && name.len() <= 49
        && !name.ends_with('-')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

#[cfg(test)]
mod tests {
    use jiff::SignedDuration;
    use serde_json::json;
    use vergence_model::InstanceKey;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn a_cloud_run_file_names_its_service_and_leaves_revisions_and_annotations_to_vergence() {
        let good = json!({"name": "web", "template": {"containers": [{"image": "x"}]}});
        assert_eq!(check_service(&object(good)).unwrap(), "web");
        let output_only = json!({"name": "web", "latestReadyRevision": "web-1"});
        assert!(
            check_service(&object(output_only))
                .unwrap_err()
                .contains("unknown key 'latestReadyRevision'")
        );
        let revision = json!({"name": "web", "template": {"revision": "web-x"}});
        assert!(
            check_service(&object(revision))
                .unwrap_err()
                .contains("'template.revision'")
        );
        let annotated =
            json!({"name": "web", "template": {"annotations": {"vergence.dev/version": "v1"}}});
        assert!(
            check_service(&object(annotated))
                .unwrap_err()
                .contains("'template.annotations.vergence.dev/version' is Vergence's own")
        );
        assert!(
            check_service(&object(json!({"name": "Web"})))
                .unwrap_err()
                .contains("'name' is required")
        );
    }

    #[test]
    fn a_rendered_file_with_its_own_traffic_is_refused_where_a_rollout_applies() {
        let text = "name: web\ntraffic: [{type: TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST, percent: {{.Params.share}}}]\n";
        let file = ("run/web.yaml".to_owned(), Template::parse(text).unwrap());
        let runtime = CloudRunRuntime {
            project: "shop".into(),
            region: "europe-west1".into(),
            adopt: Default::default(),
            rollout: None,
        };
        let key = InstanceKey::new(
            "shop".parse().unwrap(),
            "web".parse().unwrap(),
            "prod".parse().unwrap(),
        );
        let ids = InstanceIds::of(&key);
        let rollout = Rollout {
            steps: vec![10, 100],
            bake: SignedDuration::ZERO,
        };
        let share = |_: &Reference| Some("100".to_owned());
        let whose = Some((&rollout, "release channel 'prod'"));
        assert_eq!(
            render(&file, &runtime, &ids, whose, share).unwrap_err(),
            "run/web.yaml: 'traffic' is set by the rollout of release channel 'prod' (10% → 100%, each held 0s): at each step it splits the traffic between the new revision (tag canary) and the one before (tag stable); remove 'traffic' from the file"
        );
        assert!(
            render(&file, &runtime, &ids, None, share).is_ok(),
            "without a rollout the file's traffic is its own"
        );
    }
}
