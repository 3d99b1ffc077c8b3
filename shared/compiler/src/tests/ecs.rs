//! The first-class ECS runtime: a service's task definition and service
//! files rendered per release channel and release, checked against the
//! ECS requests they become; and every key that would have no effect
//! refused.

use super::*;
use vergence_model::{BuiltinJob, EcsRunnerSpec, FetchMode, ParamValue};

const APP: &str = "application:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: fargate}]}\n    - {name: prod, runtimes: [{runtime: fargate}]}\n";
const RUNTIME: &str =
    "runtime:\n  name: fargate\n  ecs: {cluster: shop, region: eu-west-1, pollInterval: 5s}\n";
const SERVICE: &str = "service:\n  name: web\n  ecs: {taskDefinition: ecs/web-task.json, service: ecs/web-service.yaml}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n";
const TASK: &str = r#"{
  "family": "web-{{.Builtins.ReleaseChannel.Name}}",
  "networkMode": "awsvpc",
  "requiresCompatibilities": ["FARGATE"],
  "cpu": "256",
  "memory": "512",
  "containerDefinitions": [
    {"name": "web", "image": "{{.Params.image}}", "essential": true}
  ]
}
"#;
const SETTINGS: &str =
    "serviceName: web-{{.Builtins.ReleaseChannel.Name}}\ndesiredCount: 2\nlaunchType: FARGATE\n";

fn files<'a>(extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    let mut files = vec![
        ("app.yaml", APP),
        ("runtime.yaml", RUNTIME),
        ("web.yaml", SERVICE),
        ("ecs/web-task.json", TASK),
        ("ecs/web-service.yaml", SETTINGS),
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
fn task_definition_and_service_are_rendered_per_release_channel_and_release() {
    let model = check(&bundle(&files(&[]))).unwrap();
    let instances = compiled(
        &model,
        "shop",
        "web",
        Some(&release("v2", "registry/web:2")),
    );
    let prod = &instances["prod"];
    let RunnerSpec::Ecs(EcsRunnerSpec {
        cluster, region, ..
    }) = &prod.apply.job.runner
    else {
        panic!("an ecs runner: {:?}", prod.apply.job.runner);
    };
    assert_eq!(
        (cluster.as_str(), region.as_deref()),
        ("shop", Some("eu-west-1"))
    );
    let Some(BuiltinJob::EcsApply(service)) = &prod.apply.job.builtin else {
        panic!("an ecs apply: {:?}", prod.apply.job.builtin);
    };
    assert_eq!(service.service_name, "web-prod");
    assert_eq!(service.version, prod.version.to_string());
    assert_eq!(service.service_id, prod.ids.service_id);
    assert_eq!(
        (
            service.task_definition_file.as_str(),
            service.service_file.as_str()
        ),
        ("ecs/web-task.json", "ecs/web-service.yaml")
    );
    let task: serde_json::Value = serde_json::from_str(&service.task_definition).unwrap();
    assert_eq!(task["family"], "web-prod");
    assert_eq!(task["containerDefinitions"][0]["image"], "registry/web:2");
    let settings: serde_json::Value = serde_json::from_str(&service.settings).unwrap();
    assert_eq!(
        settings,
        serde_json::json!({"serviceName": "web-prod", "desiredCount": 2, "launchType": "FARGATE"})
    );
    let fetch = prod.fetch.as_ref().expect("a fetch");
    assert_eq!(fetch.mode, FetchMode::Structured);
    assert_eq!(fetch.poll_interval, jiff::SignedDuration::from_secs(5));
    assert_eq!(
        fetch.job.builtin,
        Some(BuiltinJob::EcsFetch(service.clone()))
    );
    let Some(BuiltinJob::EcsApply(staging)) = &instances["staging"].apply.job.builtin else {
        panic!("an ecs apply in staging");
    };
    assert_eq!(staging.service_name, "web-staging");

    // A new image is a new task definition, and a new version.
    let next = compiled(
        &model,
        "shop",
        "web",
        Some(&release("v3", "registry/web:3")),
    );
    let Some(BuiltinJob::EcsApply(next_service)) = &next["prod"].apply.job.builtin else {
        panic!("an ecs apply");
    };
    assert!(next_service.task_definition.contains("registry/web:3"));
    assert_ne!(next["prod"].version, prod.version);
}

#[test]
fn keys_without_effect_on_an_ecs_runtime_are_errors() {
    let runtime = "runtime:\n  name: fargate\n  ecs: {region: eu-west-1}\n  runner: {local: {}}\n  apply: {taskConfig: {program: {cmd: [./x]}}}\n  fetch: {taskConfig: {program: {cmd: [./f]}}}\n  getInfo: {taskConfig: {program: {cmd: [./i]}}}\n  parameters: [{name: p, string: {}}]\n";
    let errors = errors_of(&files(&[("runtime.yaml", runtime)]));
    let all = errors.join("\n");
    for key in ["apply", "fetch", "getInfo", "runner", "parameters"] {
        assert!(
            all.contains(&format!(
                "runtime.{key}: an ecs runtime registers and updates its services' task definitions and ECS services itself; '{key}' has no effect here"
            )),
            "{key}: {all}"
        );
    }
    assert!(all.contains("runtime.ecs.cluster: required"), "{all}");

    // ECS files on a custom runtime would be ignored: refused.
    let custom = "runtime: {name: fargate, apply: {taskConfig: {program: {cmd: [./x]}}}}\n";
    let all = errors_of(&files(&[("runtime.yaml", custom)])).join("\n");
    assert!(
        all.contains("service.ecs: has no effect: runtime 'fargate' (release channel 'staging') is not an ecs runtime"),
        "{all}"
    );

    // An ECS runtime needs the service's files.
    let bare = "service: {name: web}\n";
    let all = errors_of(&files(&[("web.yaml", bare)])).join("\n");
    assert!(
        all.contains("is an ecs runtime: give the service's files with `ecs: {taskDefinition: FILE, service: FILE}`"),
        "{all}"
    );
}

#[test]
fn missing_outside_and_malformed_files_are_reported_with_the_file() {
    let missing = "service:\n  name: web\n  ecs: {taskDefinition: ecs/nope.json, service: ../outside.yaml}\n  parameters: [{name: image, dockerImage: {}, required: true}]\n";
    let errors = errors_of(&files(&[("web.yaml", missing)]));
    let all = errors.join("\n");
    assert!(
        all.contains("web.yaml:3: service.ecs.taskDefinition: file \"ecs/nope.json\" is not in the config directory"),
        "{all}"
    );
    assert!(
        all.contains("service.ecs.service: \"../outside.yaml\" must be a *.json, *.yaml or *.yml file inside the config directory"),
        "{all}"
    );

    // A file without templates is checked as it will be sent.
    let bad_json = "{\n  \"family\": \"web\",\n  \"containerDefinitions\": [\n}\n";
    let errors = errors_of(&files(&[("ecs/web-task.json", bad_json)]));
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("ecs/web-task.json:4: invalid JSON"),
        "{errors:?}"
    );
    let typo = "serviceName: web\ndesiredCont: 2\n";
    let errors = errors_of(&files(&[("ecs/web-service.yaml", typo)]));
    assert!(
        errors[0].contains(
            "unknown key 'desiredCont': ECS's CreateService request has no such member; did you mean 'desiredCount'?"
        ),
        "{errors:?}"
    );
    let cluster = "serviceName: web\ncluster: other\n";
    let errors = errors_of(&files(&[("ecs/web-service.yaml", cluster)]));
    assert!(
        errors[0].contains("'cluster' is set by Vergence"),
        "{errors:?}"
    );

    // Template errors name the file.
    let unknown = TASK.replace("{{.Params.image}}", "{{.Params.tag}}");
    let errors = errors_of(&files(&[("ecs/web-task.json", &unknown)]));
    assert!(
        errors[0].contains("in ecs/web-task.json: unknown parameter 'tag'"),
        "{errors:?}"
    );
}

#[test]
fn a_file_that_renders_to_a_bad_request_leaves_the_instance_unresolved_with_the_reason() {
    // Valid only once rendered: the checker cannot parse it before.
    let templated = "serviceName: web\ndesiredCount: {{.Params.image}}\n";
    let model = check(&bundle(&files(&[("ecs/web-service.yaml", templated)]))).unwrap();
    let instances = model
        .compile_service(
            &name("shop"),
            &name("web"),
            Some(&release("v2", "registry/web:2")),
        )
        .unwrap();
    let (_, desired) = &instances[0];
    let Desired::Unresolved { reason } = desired else {
        panic!("unresolved: {desired:?}");
    };
    assert!(
        reason.contains("ecs/web-service.yaml: 'desiredCount' must be a whole number of tasks"),
        "{reason}"
    );
}

#[test]
fn the_files_a_service_names_are_not_config_documents() {
    // A YAML service file is no `service:` document, and JSON files are
    // never documents: a config with them has no other errors.
    assert!(check(&bundle(&files(&[("notes/other.json", "[1, 2]")]))).is_ok());
}

#[test]
fn adopt_is_approve_unless_the_runtime_says_apply_and_other_values_are_errors() {
    use vergence_model::adoption::Adopt;
    let adopt_of = |runtime: &str| {
        let model = check(&bundle(&files(&[("runtime.yaml", runtime)]))).unwrap();
        let instances = compiled(&model, "shop", "web", Some(&release("v2", "r/web:2")));
        let Some(BuiltinJob::EcsFetch(service)) =
            &instances["prod"].fetch.as_ref().unwrap().job.builtin
        else {
            panic!("an ecs fetch");
        };
        service.adopt
    };
    assert_eq!(adopt_of(RUNTIME), Adopt::Approve);
    let apply = "runtime:\n  name: fargate\n  ecs: {cluster: shop, adopt: apply}\n";
    assert_eq!(adopt_of(apply), Adopt::Apply);
    let explicit = "runtime:\n  name: fargate\n  ecs: {cluster: shop, adopt: approve}\n";
    assert_eq!(adopt_of(explicit), Adopt::Approve);

    let wrong = "runtime:\n  name: fargate\n  ecs: {cluster: shop, adopt: always}\n";
    let all = errors_of(&files(&[("runtime.yaml", wrong)])).join("\n");
    assert!(
        all.contains("runtime.ecs.adopt")
            && all.contains("always")
            && all.contains("approve")
            && all.contains("apply"),
        "{all}"
    );
}
