//! The first-class Cloud Run runtime: a service's Cloud Run file rendered
//! per release channel and release, checked against the Cloud Run service
//! it becomes; and every key that would have no effect refused.

use super::*;
use vergence_model::{BuiltinJob, CloudRunRunnerSpec, ParamValue};

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
}

#[test]
fn keys_without_effect_and_bad_files_on_a_cloud_run_runtime_are_errors() {
    let runtime = "runtime:\n  name: run\n  cloudRun: {project: shop-prod}\n  apply: {taskConfig: {program: {cmd: [./x]}}}\n";
    let all = errors_of(&files(&[("runtime.yaml", runtime)])).join("\n");
    assert!(
        all.contains("runtime.apply: a cloudRun runtime creates and updates"),
        "{all}"
    );
    assert!(all.contains("runtime.cloudRun.region: required"), "{all}");

    let custom = "runtime: {name: run, apply: {taskConfig: {program: {cmd: [./x]}}}}\n";
    let all = errors_of(&files(&[("runtime.yaml", custom)])).join("\n");
    assert!(all.contains("service.cloudRun: has no effect"), "{all}");

    let all = errors_of(&files(&[("web.yaml", "service: {name: web}\n")])).join("\n");
    assert!(
        all.contains("give the service's file with `cloudRun: {service: FILE}`"),
        "{all}"
    );

    let output_only = "name: web\nuri: https://web.run.app\n";
    let all = errors_of(&files(&[("run/web.yaml", output_only)])).join("\n");
    assert!(all.contains("run/web.yaml: unknown key 'uri'"), "{all}");

    let missing = "service: {name: web, cloudRun: {service: run/nope.yaml}}\n";
    let all = errors_of(&files(&[("web.yaml", missing)])).join("\n");
    assert!(
        all.contains("file \"run/nope.yaml\" is not in the config directory"),
        "{all}"
    );
}
