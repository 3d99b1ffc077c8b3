//! Compiler tests: the seed fixtures, every kind of config error, template
//! rendering and versions; runners and their overrides in `runners`.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::*;
use vergence_model::ConfigBundle;
use vergence_model::*;

mod cloud_run;
mod ecs;
mod kubernetes;
mod metrics;
mod notifications;
mod runners;
mod serverless;
mod terraform;
mod trust;

pub(crate) const SEED: &str = r#"runtime:
  name: my-custom-runtime
  apply:
    taskConfig:
      program:
        image: my-image
        cmd: [./do-apply, --service={{.Params.service}}]
  parameters:
  - name: service
    required: true
    string: {}
---
service:
  name: my-service-on-custom-runtime
  custom:
    parameterValues:
    - name: service
      string: my-service
"#;

pub(crate) const SEED_APP: &str = r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: my-custom-runtime}]
      constants: [{name: region, string: {value: eu-west-1}}]
    - name: prod
      runtimes: [{runtime: my-custom-runtime}]
      preconditions:
        - releaseChannelStable: {releaseChannel: staging, duration: 10m}
        - manualApproval: {name: prod-gate}
"#;

fn bundle(files: &[(&str, &str)]) -> ConfigBundle {
    ConfigBundle::from_files(
        files
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    )
}

fn errors_of(files: &[(&str, &str)]) -> Vec<String> {
    match check(&bundle(files)) {
        Ok(_) => panic!("expected errors"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn name<T: std::str::FromStr>(s: &str) -> T
where
    T::Err: std::fmt::Debug,
{
    s.parse().unwrap()
}

fn compiled(
    model: &ConfigModel,
    app: &str,
    svc: &str,
    release: Option<&Release>,
) -> BTreeMap<String, CompiledInstance> {
    model
        .compile_service(&name(app), &name(svc), release)
        .unwrap()
        .into_iter()
        .map(|(k, d)| match d {
            Desired::Ready(c) => (k.release_channel.to_string(), *c),
            Desired::Unresolved { reason } => panic!("{k} unresolved: {reason}"),
        })
        .collect()
}

/// The part of docs/config.md under `heading` (`### Runner examples`), up
/// to the next heading of its level or above outside a code block: the
/// examples the docs tests compile, as users copy them.
fn config_reference_section(heading: &str) -> &'static str {
    const REFERENCE: &str = include_str!("../../../docs/config.md");
    let level = heading.chars().take_while(|c| *c == '#').count();
    let start = REFERENCE
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("docs/config.md has no {heading:?}"));
    let section = &REFERENCE[start + 1..];
    let (mut end, mut in_code) = (0, false);
    for (i, line) in section.split_inclusive('\n').enumerate() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        let heading = (1..=level).contains(&hashes) && line[hashes..].starts_with(' ');
        if i > 0 && heading && !in_code {
            return &section[..end];
        }
        in_code ^= line.starts_with("```");
        end += line.len();
    }
    section
}

/// The files of an example of the docs: each YAML or JSON block, named by
/// the paragraph before it, which starts with the file's name in
/// backticks (`` `run/web.yaml`: ``); unnamed blocks are left out.
fn documented_files(section: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut name: Option<String> = None;
    let mut lines = section.lines();
    while let Some(line) = lines.next() {
        if line == "```yaml" || line == "```json" {
            let body: Vec<&str> = lines
                .by_ref()
                .take_while(|l| !l.starts_with("```"))
                .collect();
            if let Some(file) = name.take() {
                files.push((file, body.join("\n") + "\n"));
            }
        } else if let Some(quoted) = line.strip_prefix('`') {
            let file = quoted.split('`').next().unwrap_or_default();
            if [".yaml", ".yml", ".json"]
                .iter()
                .any(|ext| file.ends_with(ext))
            {
                name = Some(file.to_owned());
            }
        }
    }
    files
}

#[test]
fn seed_fixtures_parse_and_compile_unchanged() {
    let model = check(&bundle(&[("seed.yaml", SEED), ("app.yaml", SEED_APP)])).unwrap();
    let instances = compiled(&model, "shop", "my-service-on-custom-runtime", None);
    assert_eq!(instances.len(), 2);
    let prod = &instances["prod"];
    assert_eq!(
        prod.apply.job.cmd,
        vec!["./do-apply", "--service=my-service"]
    );
    assert_eq!(prod.apply.job.image.as_deref(), Some("my-image"));
    assert_eq!(prod.apply.job.runner, RunnerSpec::Local);
    assert!(prod.fetch.is_none());
    assert_eq!(
        prod.preconditions,
        vec![
            Precondition::ReleaseChannelStable {
                release_channel: name("staging"),
                duration: Some(jiff::SignedDuration::from_mins(10))
            },
            Precondition::ManualApproval {
                name: "prod-gate".into()
            }
        ]
    );
    assert_eq!(
        instances["staging"].downstream,
        vec![name::<ReleaseChannelName>("prod")]
    );
    assert!(
        prod.version.as_str().starts_with("cfg-"),
        "{}",
        prod.version
    );
    assert_eq!(prod.version, instances["staging"].version);
}

#[test]
fn unknown_template_parameter_names_file_line_and_parameter() {
    let broken = SEED.replace("{{.Params.service}}", "{{.Params.servce}}");
    let errors = errors_of(&[("seed.yaml", &broken), ("app.yaml", SEED_APP)]);
    assert_eq!(
        errors,
        vec![
            "seed.yaml:7: runtime.apply.taskConfig.program.cmd[1]: unknown parameter 'servce' in \
             {{.Params.servce}}; did you mean 'service'? runtime my-custom-runtime declares service"
        ]
    );
}

#[test]
fn every_reference_error_is_reported_at_once() {
    let runtimes = r#"runtime:
  name: rt
  apply: {taskConfig: {program: {cmd: ["./a", "{{.Constants.zone}}"]}}}
  parameters:
    - {name: service, required: true, string: {}}
---
runtime:
  name: rt
  apply: {taskConfig: {program: {cmd: [./b]}}}
"#;
    let app = r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: rt}, {runtime: nope}]
      preconditions: [{releaseChannelStable: {releaseChannel: prod}}]
    - name: prod
      runtimes: [{runtime: rt}]
      preconditions: [{releaseChannelStable: {releaseChannel: staging}}]
    - name: qa
      runtimes: [{runtime: rt}]
      preconditions: [{releaseChannelStable: {releaseChannel: stagin}}]
"#;
    let services = r#"service:
  name: web
  runtime: rt
  custom:
    parameterValues:
      - {name: servce, string: x}
---
service:
  name: web
  runtime: rt
  custom: {parameterValues: [{name: service, string: y}]}
"#;
    let errors = errors_of(&[
        ("runtimes.yaml", runtimes),
        ("app.yaml", app),
        ("services.yaml", services),
    ]);
    let expected = [
        "app.yaml:5: application.releaseChannels[0].runtimes[1].runtime: unknown runtime 'nope' (defined: rt)",
        "app.yaml:6: application.releaseChannels[0].preconditions: release channel preconditions form a cycle: staging → prod → staging",
        "app.yaml:12: application.releaseChannels[2].preconditions[0].releaseChannelStable.releaseChannel: unknown release channel 'stagin'; did you mean 'staging'?",
        "runtimes.yaml:3: runtime.apply.taskConfig.program.cmd[1]: constant 'zone' is not defined in release channel 'prod'",
        "runtimes.yaml:3: runtime.apply.taskConfig.program.cmd[1]: constant 'zone' is not defined in release channel 'qa'",
        "runtimes.yaml:3: runtime.apply.taskConfig.program.cmd[1]: constant 'zone' is not defined in release channel 'staging'",
        "runtimes.yaml:8: runtime.name: runtime 'rt' is defined twice (first in runtimes.yaml:1)",
        "services.yaml:5: service.custom.parameterValues: missing required parameter 'service' of runtime rt (release channel prod)",
        "services.yaml:6: service.custom.parameterValues[0].name: unknown parameter 'servce' for runtime rt; did you mean 'service'?",
        "services.yaml:9: service.name: service 'web' is defined twice in application 'shop'",
    ];
    for want in expected {
        assert!(
            errors.iter().any(|e| e.starts_with(want)),
            "missing {want:?} in\n{}",
            errors.join("\n")
        );
    }
}

#[test]
fn a_service_without_application_needs_exactly_one() {
    let two_apps = "application: {name: a, releaseChannels: [{name: x, runtimes: [{runtime: rt}]}]}\n---\napplication: {name: b, releaseChannels: [{name: x, runtimes: [{runtime: rt}]}]}\n";
    let rt = "runtime: {name: rt, apply: {taskConfig: {program: {cmd: [./x]}}}}\n";
    let errors = errors_of(&[
        ("apps.yaml", two_apps),
        ("rt.yaml", rt),
        ("svc.yaml", "service: {name: web}\n"),
    ]);
    assert_eq!(
        errors,
        vec![
            "svc.yaml:1: service: service 'web' must name its application: the config defines a, b"
        ]
    );
}

#[test]
fn templates_render_params_constants_builtins_and_per_channel_overrides() {
    let rt = r#"runtime:
  name: rt
  apply:
    taskConfig:
      program:
        cmd: [./deploy, "{{.Params.target}}", "{{.Constants.region}}", "{{.Builtins.ReleaseChannel.Name}}/{{.Builtins.Service.Name}}"]
        env: {TOKEN: "{{.Params.token}}", APP: "{{.Builtins.Application.Name}}"}
  parameters:
    - {name: target, required: true, string: {}}
    - {name: replicas, int: {defaultValue: 2}}
    - {name: token, secret: {}}
"#;
    let app = r#"application:
  name: shop
  releaseChannels:
    - {name: staging, runtimes: [{runtime: rt}], constants: [{name: region, string: {value: eu-west-1}}]}
    - {name: prod, runtimes: [{runtime: rt}], constants: [{name: region, string: {value: us-east-1}}]}
"#;
    let svc = r#"service:
  name: web
  parameters: [{name: image, dockerImage: {defaultValue: "reg/web:1"}}]
  custom:
    parameterValues:
      - {name: target, string: "{{.Params.image}}@{{.Constants.region}}"}
      - {name: token, secret: {fromEnv: WEB_TOKEN}}
  env: {LOG_LEVEL: info}
  perReleaseChannel:
    - releaseChannel: prod
      custom: {parameterValues: [{name: target, string: prod-target}]}
      env: {LOG_LEVEL: warn}
"#;
    let model = check(&bundle(&[
        ("rt.yaml", rt),
        ("app.yaml", app),
        ("svc.yaml", svc),
    ]))
    .unwrap();
    let instances = compiled(&model, "shop", "web", None);
    let staging = &instances["staging"].apply.job;
    assert_eq!(
        staging.cmd,
        vec![
            "./deploy",
            "reg/web:1@eu-west-1",
            "eu-west-1",
            "staging/web"
        ]
    );
    assert_eq!(staging.env["APP"], "shop");
    assert_eq!(staging.env["LOG_LEVEL"], "info");
    assert_eq!(
        staging.secret_env["TOKEN"],
        SecretRef::FromEnv("WEB_TOKEN".into())
    );
    assert!(!staging.env.contains_key("TOKEN"));
    let prod = &instances["prod"].apply.job;
    assert_eq!(prod.cmd[1], "prod-target");
    assert_eq!(prod.env["LOG_LEVEL"], "warn");
}

#[test]
fn secrets_never_go_on_command_lines() {
    let rt = "runtime:\n  name: rt\n  apply: {taskConfig: {program: {cmd: [./x, \"--token={{.Params.token}}\"]}}}\n  parameters: [{name: token, secret: {}}]\n";
    let app = "application: {name: a, releaseChannels: [{name: x, runtimes: [{runtime: rt}]}]}\n";
    let errors = errors_of(&[("rt.yaml", rt), ("app.yaml", app)]);
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0]
            .contains("secret parameter 'token' can only be the whole value of an env variable"),
        "{}",
        errors[0]
    );
}

#[test]
fn versions_follow_config_and_releases() {
    let files = [("seed.yaml", SEED), ("app.yaml", SEED_APP)];
    let model = check(&bundle(&files)).unwrap();
    let (app, svc): (ApplicationName, ServiceName) =
        (name("shop"), name("my-service-on-custom-runtime"));
    let v1 = compiled(&model, "shop", "my-service-on-custom-runtime", None)["staging"]
        .version
        .clone();

    // The same config gives the same version; a changed command a new one.
    let again = check(&bundle(&files)).unwrap();
    assert_eq!(
        compiled(&again, "shop", "my-service-on-custom-runtime", None)["staging"].version,
        v1
    );
    let edited = SEED.replace("my-service\n", "my-service-2\n");
    let changed = check(&bundle(&[("seed.yaml", &edited), ("app.yaml", SEED_APP)])).unwrap();
    let v2 = compiled(&changed, "shop", "my-service-on-custom-runtime", None)["staging"]
        .version
        .clone();
    assert_ne!(v1, v2);

    // A precondition change alone is not a new version: it changes no job.
    let gated = SEED_APP.replace("duration: 10m", "duration: 20m");
    let regated = check(&bundle(&[("seed.yaml", SEED), ("app.yaml", &gated)])).unwrap();
    assert_eq!(
        compiled(&regated, "shop", "my-service-on-custom-runtime", None)["staging"].version,
        v1
    );

    // A release pushed against this config is shown as is; after a config change, with the config hash.
    let release = Release {
        application: app.clone(),
        service: svc.clone(),
        version: "v42".parse().unwrap(),
        params: BTreeMap::new(),
        config_fingerprint: model.fingerprint(&app, &svc, &BTreeMap::new()).unwrap(),
        created_at: Timestamp::UNIX_EPOCH,
        actor: "test".into(),
    };
    assert_eq!(
        compiled(
            &model,
            "shop",
            "my-service-on-custom-runtime",
            Some(&release)
        )["prod"]
            .version,
        "v42"
    );
    let after_change = &compiled(
        &changed,
        "shop",
        "my-service-on-custom-runtime",
        Some(&release),
    )["prod"]
        .version;
    assert_eq!(after_change, &format!("v42+{v2}"));
}

#[test]
fn release_parameters_are_typed_and_required_ones_wait_for_a_release() {
    let rt = "runtime:\n  name: rt\n  apply: {taskConfig: {program: {cmd: [./x, \"{{.Params.image}}\"]}}}\n  parameters: [{name: image, required: true, dockerImage: {}}]\n";
    let app = "application: {name: a, releaseChannels: [{name: x, runtimes: [{runtime: rt}]}]}\n";
    let svc = "service:\n  name: web\n  parameters: [{name: image, required: true, dockerImage: {}}, {name: replicas, int: {defaultValue: 1}}]\n  custom: {parameterValues: [{name: image, dockerImage: \"{{.Params.image}}\"}]}\n";
    let model = check(&bundle(&[
        ("rt.yaml", rt),
        ("app.yaml", app),
        ("svc.yaml", svc),
    ]))
    .unwrap();
    let (a, w): (ApplicationName, ServiceName) = (name("a"), name("web"));
    let unresolved = model.compile_service(&a, &w, None).unwrap();
    match &unresolved[0].1 {
        Desired::Unresolved { reason } => assert!(
            reason.contains("service parameter 'image' has no default"),
            "{reason}"
        ),
        other => panic!("expected unresolved, got {other:?}"),
    }
    let raw = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let err = model
        .release_params(&a, &w, &raw(&[("image", "r/w:2"), ("replica", "3")]))
        .unwrap_err();
    assert!(
        err.to_string().contains("declares no parameter 'replica'"),
        "{err}"
    );
    let err = model
        .release_params(&a, &w, &raw(&[("image", "r/w:2"), ("replicas", "three")]))
        .unwrap_err();
    assert!(err.to_string().contains("not an integer"), "{err}");
    let err = model.release_params(&a, &w, &raw(&[])).unwrap_err();
    assert!(
        err.to_string().contains("requires parameter 'image'"),
        "{err}"
    );
    let params = model
        .release_params(&a, &w, &raw(&[("image", "r/w:2")]))
        .unwrap();
    let release = Release {
        application: a.clone(),
        service: w.clone(),
        version: "v2".parse().unwrap(),
        config_fingerprint: model.fingerprint(&a, &w, &params).unwrap(),
        params,
        created_at: Timestamp::UNIX_EPOCH,
        actor: "ci".into(),
    };
    let instances = compiled(&model, "a", "web", Some(&release));
    assert_eq!(instances["x"].apply.job.cmd, vec!["./x", "r/w:2"]);
    assert_eq!(instances["x"].version, "v2");
}

#[test]
fn the_full_runtime_example_of_the_config_reference_compiles() {
    let rt = r#"runtime:
  name: my-custom-runtime
  runner:
    local: {}
  apply:
    taskConfig:
      program:
        image: my-image
        cmd: [./do-apply, --service={{.Params.service}}]
        env: {KEY: value}
    retryableExitCodes: [75]
    retryPolicy: {baseInterval: 30s, maxInterval: 10m, maxAttempts: 5}
  fetch:
    taskConfig: {program: {cmd: [./check.sh]}}
    mode: exitCode
    pollInterval: 30s
    steadyStatePollInterval: 5m
    outputs: [plan]
  getInfo:
    taskConfig: {program: {cmd: [./info.sh]}}
  convergenceGracePeriod: 10m
  requireApprovalBeforeApply: false
  parameters:
    - name: service
      required: true
      string: {}
"#;
    let svc = "service:\n  name: web\n  application: shop\n  custom: {parameterValues: [{name: service, string: web}]}\n  driftPolicy: detectOnly\n";
    let model = check(&bundle(&[
        ("rt.yaml", rt),
        ("app.yaml", SEED_APP),
        ("svc.yaml", svc),
    ]))
    .unwrap();
    let staging = &compiled(&model, "shop", "web", None)["staging"];
    assert_eq!(staging.apply.retryable_exit_codes, vec![75]);
    assert_eq!(staging.apply.retry_policy.max_attempts, 5);
    let fetch = staging.fetch.as_ref().unwrap();
    assert_eq!(fetch.mode, FetchMode::ExitCode);
    assert_eq!(fetch.job.outputs, vec!["plan"]);
    assert_eq!(
        fetch.steady_state_poll_interval,
        jiff::SignedDuration::from_mins(5)
    );
    assert!(staging.get_info.is_some());
    assert_eq!(staging.drift_policy, DriftPolicy::DetectOnly);
}

#[test]
fn promotion_order_follows_preconditions() {
    let app = r#"application:
  name: shop
  releaseChannels:
    - {name: prod-eu, runtimes: [{runtime: rt}], preconditions: [{releaseChannelStable: {releaseChannel: prod-us}}]}
    - {name: prod-us, runtimes: [{runtime: rt}], preconditions: [{releaseChannelStable: {releaseChannel: staging}}]}
    - {name: staging, runtimes: [{runtime: rt}]}
"#;
    let rt = "runtime: {name: rt, apply: {taskConfig: {program: {cmd: [./x]}}}}\n";
    let model = check(&bundle(&[("app.yaml", app), ("rt.yaml", rt)])).unwrap();
    let order: Vec<String> = promotion_order(&model.applications[&name::<ApplicationName>("shop")])
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(order, vec!["staging", "prod-us", "prod-eu"]);
}

#[test]
fn a_pushed_file_over_the_size_limit_is_an_error_naming_it() {
    // A comment line makes the file big without making it invalid YAML.
    let big = format!("# {}\n{SEED}", "x".repeat(1024 * 1024));
    let errors = errors_of(&[("seed.yaml", &big), ("app.yaml", SEED_APP)]);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("seed.yaml") && e.contains("limited to 1048576 bytes")),
        "{errors:?}"
    );
}
