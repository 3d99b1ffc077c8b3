//! The first-class Kubernetes runtime: manifests read from the service's
//! directory, rendered per release, marked for the instance; and every
//! key that would have no effect refused.

use super::*;
use vergence_model::{BuiltinJob, FetchMode, KubernetesRunnerSpec, ParamValue};

const APP: &str = "application:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: cluster}]}\n    - {name: prod, runtimes: [{runtime: cluster}]}\n";
const RUNTIME: &str = "runtime:\n  name: cluster\n  kubernetes: {agent: prod-eu, namespace: shop, pollInterval: 2s}\n";
const SERVICE: &str = "service:\n  name: web\n  kubernetes: {manifests: k8s/web}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n";
const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - name: web
          image: {{.Params.image}}
          env: [{name: CHANNEL, value: "{{.Builtins.ReleaseChannel.Name}}"}]
"#;
const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-settings}\ndata: {greeting: hello, port: \"8080\"}\n---\n";

fn files<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut files = vec![
        ("app.yaml", APP),
        ("runtime.yaml", RUNTIME),
        ("web.yaml", SERVICE),
        ("k8s/web/deployment.yaml", DEPLOYMENT),
        ("k8s/web/settings.yaml", CONFIG_MAP),
    ];
    files.extend_from_slice(extra);
    files
}

fn release(version: &str, image: &str) -> Release {
    Release {
        application: name("shop"),
        service: name("web"),
        version: name(version),
        params: BTreeMap::from([("image".to_owned(), ParamValue::DockerImage(image.into()))]),
        config_fingerprint: String::new(),
        created_at: Timestamp::UNIX_EPOCH,
        actor: "test".into(),
    }
}

#[test]
fn manifests_are_rendered_per_release_and_marked_for_their_instance() {
    let model = check(&bundle(&files(&[]))).unwrap();
    let instances = compiled(
        &model,
        "shop",
        "web",
        Some(&release("v2", "registry/web:2")),
    );
    let staging = &instances["staging"];
    assert_eq!(
        staging.apply.job.runner,
        RunnerSpec::Kubernetes(KubernetesRunnerSpec {
            agent: "prod-eu".into(),
            namespace: Some("shop".into()),
            service_account: None,
        })
    );
    let Some(BuiltinJob::KubernetesApply(objects)) = &staging.apply.job.builtin else {
        panic!("a kubernetes apply: {:?}", staging.apply.job.builtin);
    };
    let fetch = staging.fetch.as_ref().expect("a fetch");
    assert_eq!(fetch.mode, FetchMode::Structured);
    assert_eq!(fetch.poll_interval, jiff::SignedDuration::from_secs(2));
    assert_eq!(
        fetch.job.builtin,
        Some(BuiltinJob::KubernetesFetch(objects.clone()))
    );
    assert_eq!(objects.version, staging.version.to_string());
    assert_eq!(objects.source, "k8s/web");
    assert_eq!(objects.namespace.as_deref(), Some("shop"));
    assert_eq!(objects.selector["vergence.dev/release-channel"], "staging");
    assert_eq!(objects.selector["app.kubernetes.io/managed-by"], "vergence");
    let parsed: Vec<serde_json::Value> = objects
        .objects
        .iter()
        .map(|o| serde_json::from_str(o).unwrap())
        .collect();
    assert_eq!(parsed.len(), 2, "the empty document after --- is dropped");
    let deployment = &parsed[0];
    // Typed as YAML types them; the user's labels stay beside Vergence's.
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["metadata"]["labels"]["app"], "web");
    assert_eq!(
        deployment["metadata"]["labels"]["vergence.dev/service"],
        "web"
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry/web:2");
    assert_eq!(container["env"][0]["value"], "staging");
    assert_eq!(parsed[1]["data"]["port"], "8080");
    let prod = &instances["prod"];
    let Some(BuiltinJob::KubernetesApply(prod_objects)) = &prod.apply.job.builtin else {
        panic!("a kubernetes apply");
    };
    assert!(prod_objects.objects[0].contains("\"value\":\"prod\""));
    // A new image is a new apply; the same release compiles the same.
    let again = compiled(
        &model,
        "shop",
        "web",
        Some(&release("v3", "registry/web:3")),
    );
    assert_ne!(again["staging"].apply.job, staging.apply.job);
    assert!(objects.kubectl_apply().starts_with(
        "kubectl apply --server-side --field-manager=vergence --force-conflicts -n shop -f k8s/web"
    ));
}

#[test]
fn manifest_files_are_not_config_documents_and_a_bad_one_is_reported_with_its_line() {
    let broken = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n";
    let errors = errors_of(&files(&[("k8s/web/broken.yaml", broken)]));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("k8s/web/broken.yaml:"),
        "{}",
        errors[0]
    );
    assert!(errors[0].contains("invalid YAML"), "{}", errors[0]);
    let nameless = "apiVersion: v1\nkind: ConfigMap\nmetadata: {labels: {a: b}}\n";
    let errors = errors_of(&files(&[("k8s/web/nameless.yaml", nameless)]));
    assert!(
        errors[0].contains("'metadata.name' is required"),
        "{errors:?}"
    );
    let unknown =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: \"{{.Params.tag}}\"}\n";
    let errors = errors_of(&files(&[("k8s/web/unknown.yaml", unknown)]));
    assert!(
        errors[0].contains("in k8s/web/unknown.yaml: unknown parameter 'tag'"),
        "{errors:?}"
    );
}

#[test]
fn keys_without_effect_on_a_kubernetes_runtime_are_errors() {
    let runtime = "runtime:\n  name: cluster\n  kubernetes: {namespace: Shop}\n  apply: {taskConfig: {program: {cmd: [./x]}}}\n";
    let errors = errors_of(&[
        ("app.yaml", APP),
        ("runtime.yaml", runtime),
        ("web.yaml", SERVICE),
        ("k8s/web/deployment.yaml", DEPLOYMENT),
    ]);
    let all = errors.join("\n");
    assert!(
        all.contains("runtime.apply: a kubernetes runtime applies"),
        "{all}"
    );
    assert!(all.contains("runtime.kubernetes.agent: required"), "{all}");
    assert!(all.contains("runtime.kubernetes.namespace"), "{all}");
    // Manifests on a custom runtime would be ignored: refused.
    let custom = "runtime: {name: cluster, apply: {taskConfig: {program: {cmd: [./x]}}}}\n";
    let errors = errors_of(&[
        ("app.yaml", APP),
        ("runtime.yaml", custom),
        ("web.yaml", SERVICE),
        ("k8s/web/deployment.yaml", DEPLOYMENT),
    ]);
    assert!(
        errors[0].contains("service.kubernetes: has no effect"),
        "{errors:?}"
    );
    // A kubernetes runtime needs the service's manifests, inside the config.
    let bare = "service: {name: web}\n";
    let errors = errors_of(&[
        ("app.yaml", APP),
        ("runtime.yaml", RUNTIME),
        ("web.yaml", bare),
    ]);
    assert!(
        errors[0].contains("give the service's manifests"),
        "{errors:?}"
    );
    let outside = "service: {name: web, kubernetes: {manifests: ../elsewhere}}\n";
    let errors = errors_of(&[
        ("app.yaml", APP),
        ("runtime.yaml", RUNTIME),
        ("web.yaml", outside),
    ]);
    assert!(
        errors[0].contains("inside the config directory"),
        "{errors:?}"
    );
}
