//! The first-class Cloud Run runtime: a service's Cloud Run file rendered
//! per release channel and release, checked against the Cloud Run service
//! it becomes; its rollout, the channel's before the runtime's; and every
//! key that would have no effect refused.

use super::*;
use vergence_model::{BuiltinJob, CloudRunRunnerSpec, ParamValue, Rollout};

const APP: &str = "application:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: run}]}\n    - {name: prod, runtimes: [{runtime: run}]}\n";
const RUNTIME: &str =
    "runtime:\n  name: run\n  cloudRun: {project: shop-prod, region: europe-west1}\n";
const SERVICE: &str = "service:\n  name: web\n  cloudRun: {service: run/web.yaml}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n";
const SPEC: &str = "name: web-{{.Builtins.ReleaseChannel.Name}}\nlabels: {team: shop}\ntemplate:\n  containers:\n    - image: \"{{.Params.image}}\"\n";

fn files<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut files = vec![
        ("app.yaml", APP),
        ("runtime.yaml", RUNTIME),
        ("web.yaml", SERVICE),
        ("run/web.yaml", SPEC),
    ];
    for (file, text) in extra {
        match files.iter_mut().find(|(f, _)| f == file) {
            Some(slot) => slot.1 = text,
            None => files.push((file, text)),
        }
    }
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
fn the_cloud_run_service_is_rendered_per_release_channel_and_release() {
    let model = check(&bundle(&files(&[]))).unwrap();
    let instances = compiled(
        &model,
        "shop",
        "web",
        Some(&release("v2", "europe-docker.pkg.dev/shop/web:2")),
    );
    let prod = &instances["prod"];
    let RunnerSpec::CloudRun(CloudRunRunnerSpec {
        project, region, ..
    }) = &prod.apply.job.runner
    else {
        panic!("a cloudRun runner: {:?}", prod.apply.job.runner);
    };
    assert_eq!(
        (project.as_str(), region.as_str()),
        ("shop-prod", "europe-west1")
    );
    let Some(BuiltinJob::CloudRunApply(service)) = &prod.apply.job.builtin else {
        panic!("a cloud run apply: {:?}", prod.apply.job.builtin);
    };
    assert_eq!(service.service_name, "web-prod");
    assert_eq!(service.version, prod.version.to_string());
    let spec: serde_json::Value = serde_json::from_str(&service.spec).unwrap();
    assert_eq!(
        spec,
        serde_json::json!({"labels": {"team": "shop"}, "template": {"containers": [{"image": "europe-docker.pkg.dev/shop/web:2"}]}})
    );
    assert_eq!(
        prod.fetch.as_ref().unwrap().job.builtin,
        Some(BuiltinJob::CloudRunFetch(service.clone()))
    );
    assert_eq!(prod.rollout, None, "no rollout unless one is written");
}

#[test]
fn a_rollout_compiles_onto_the_instance_the_channel_s_before_the_runtime_s() {
    let runtime = "runtime:\n  name: run\n  cloudRun: {project: shop-prod, region: europe-west1}\n  rollout: {steps: [25, 100]}\n";
    let app = "application:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: run}]}\n    - name: prod\n      runtimes: [{runtime: run}]\n      rollout: {steps: [10, 50, 100], bake: 0s}\n";
    let model = check(&bundle(&files(&[
        ("runtime.yaml", runtime),
        ("app.yaml", app),
    ])))
    .unwrap();
    let instances = compiled(&model, "shop", "web", Some(&release("v2", "web:2")));
    assert_eq!(
        instances["staging"].rollout,
        Some(Rollout {
            steps: vec![25, 100],
            bake: jiff::SignedDuration::from_mins(5),
        }),
        "the runtime's, with the default bake"
    );
    assert_eq!(
        instances["prod"].rollout,
        Some(Rollout {
            steps: vec![10, 50, 100],
            bake: jiff::SignedDuration::ZERO,
        }),
        "the channel's own replaces the runtime's"
    );
}

#[test]
fn a_cloud_run_file_with_its_own_traffic_is_refused_where_a_rollout_sets_it() {
    let traffic = "traffic:\n  - {type: TRAFFIC_TARGET_ALLOCATION_TYPE_LATEST, percent: 100}\n";
    let app = "application:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: run}]}\n    - name: prod\n      runtimes: [{runtime: run}]\n      rollout: {steps: [10, 50, 100]}\n";
    // Without templates the file is checked with the config, per channel:
    // staging has no rollout and keeps its traffic.
    let plain = format!("name: web\ntemplate:\n  containers: [{{image: web:1}}]\n{traffic}");
    assert_eq!(
        errors_of(&files(&[("app.yaml", app), ("run/web.yaml", &plain)])),
        vec![
            "run/web.yaml: 'traffic' is set by the rollout of release channel 'prod' (10% → 50% → 100%, each held 5m): at each step it splits the traffic between the new revision (tag canary) and the one before (tag stable); remove 'traffic' from the file"
        ]
    );
    // With templates too: no value takes a `traffic` away. The runtime's
    // rollout applies to both channels.
    let runtime = "runtime:\n  name: run\n  cloudRun: {project: shop-prod, region: europe-west1}\n  rollout: {steps: [50, 100], bake: 1m}\n";
    let templated = format!("{SPEC}{traffic}");
    let message = "run/web.yaml: 'traffic' is set by the rollout of runtime 'run' (50% → 100%, each held 1m): at each step it splits the traffic between the new revision (tag canary) and the one before (tag stable); remove 'traffic' from the file";
    assert_eq!(
        errors_of(&files(&[
            ("runtime.yaml", runtime),
            ("run/web.yaml", &templated)
        ])),
        vec![message],
        "reported once for the two channels"
    );
}

/// The examples of "Rollout examples" in docs/config.md, one per runtime
/// that shifts traffic, each compiled as the complete config it says it
/// is: the Cloud Run one with Vergence's steps in prod only, the others
/// with their platform's own and no rollout of Vergence's.
#[test]
fn the_rollout_examples_of_the_config_reference_compile() {
    type Applies = fn(&BuiltinJob) -> bool;
    let cases: [(&str, Option<Vec<u8>>, Applies); 3] = [
        ("Cloud Run", Some(vec![10, 50, 100]), |b| {
            matches!(b, BuiltinJob::CloudRunApply(_))
        }),
        ("ECS", None, |b| matches!(b, BuiltinJob::EcsApply(_))),
        ("Kubernetes", None, |b| {
            matches!(b, BuiltinJob::KubernetesApply(_))
        }),
    ];
    let section = config_reference_section("### Rollout examples");
    let examples: Vec<&str> = section.split("\n#### ").skip(1).collect();
    assert_eq!(examples.len(), cases.len(), "{section}");
    for (example, (title, steps, applies)) in examples.into_iter().zip(cases) {
        assert!(example.starts_with(title), "{title}: {example}");
        let files = documented_files(example);
        let files: Vec<(&str, &str)> = files
            .iter()
            .map(|(f, t)| (f.as_str(), t.as_str()))
            .collect();
        let model = check(&bundle(&files)).unwrap_or_else(|e| panic!("{title}: {e}"));
        let instances = compiled(&model, "shop", "web", Some(&release("v2", "web:2")));
        let prod = &instances["prod"];
        assert!(
            prod.apply.job.builtin.as_ref().is_some_and(applies),
            "{title}: {:?}",
            prod.apply.job.builtin
        );
        assert_eq!(
            prod.rollout.as_ref().map(|r| r.steps.clone()),
            steps,
            "{title}"
        );
        if let Some(staging) = instances.get("staging") {
            assert_eq!(staging.rollout, None, "{title}: the runtime has none");
        }
    }
}
