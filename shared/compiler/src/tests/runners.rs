//! Runners in config: each kind compiled with its settings and defaults,
//! release channels' overrides merged over the runtime's runner, secret
//! sources handed to jobs, and where each runner is named.

use super::*;
use crate::port::YamlCompiler;
use vergence_model::ports::Compiler;

const ECS_RUNTIME: &str = r#"runtime:
  name: jobs
  runner:
    ecs:
      cluster: staging-jobs
      region: eu-west-1
      subnets: [subnet-0aa, subnet-0bb]
      securityGroups: [sg-0cc]
      taskRoleArn: arn:aws:iam::123456789012:role/deployer
      cpu: 1024
  apply:
    taskConfig:
      program:
        image: registry.example.com/deployer:1
        cmd: [./apply]
        env: {TOKEN: "{{.Params.token}}"}
  fetch:
    taskConfig: {program: {image: registry.example.com/deployer:1, cmd: [./fetch]}}
  getInfo:
    taskConfig: {program: {image: registry.example.com/deployer:1, cmd: [./info]}}
  parameters:
    - {name: token, required: true, secret: {}}
---
protection:
  name: smoke
  taskConfig: {program: {cmd: [./smoke]}}
"#;

const ECS_APP: &str = r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: jobs}]
    - name: prod
      runtimes:
        - runtime: jobs
          runner:
            ecs:
              cluster: prod-jobs
              subnets: [subnet-0dd]
              memory: 4096
      protections:
        - ref: {name: smoke}
          lifecycle: [{deployment: {}}]
---
service:
  name: web
  custom:
    parameterValues:
      - name: token
        secret: {awsSecretsManager: "arn:aws:secretsmanager:eu-west-1:123456789012:secret:web-token"}
"#;

fn ecs(cluster: &str, subnets: &[&str], memory: u32) -> RunnerSpec {
    RunnerSpec::Ecs(EcsRunnerSpec {
        cluster: cluster.into(),
        region: Some("eu-west-1".into()),
        subnets: subnets.iter().map(|s| (*s).to_owned()).collect(),
        security_groups: vec!["sg-0cc".into()],
        assign_public_ip: false,
        task_role_arn: Some("arn:aws:iam::123456789012:role/deployer".into()),
        execution_role_arn: None,
        cpu: 1024,
        memory,
        log_group: "/vergence/jobs".into(),
    })
}

#[test]
fn a_release_channel_override_is_merged_over_the_runtime_runner_for_every_job() {
    let model = check(&bundle(&[("rt.yaml", ECS_RUNTIME), ("app.yaml", ECS_APP)])).unwrap();
    let instances = compiled(&model, "shop", "web", None);

    // Staging runs on the runtime's runner, with the smallest memory its
    // CPU allows.
    let staging = &instances["staging"];
    let staging_runner = ecs("staging-jobs", &["subnet-0aa", "subnet-0bb"], 2048);
    assert_eq!(staging.apply.job.runner, staging_runner);

    // Prod replaces cluster, the subnet list and memory; keeps the rest.
    let prod = &instances["prod"];
    let prod_runner = ecs("prod-jobs", &["subnet-0dd"], 4096);
    assert_eq!(prod.apply.job.runner, prod_runner);
    assert_eq!(prod.fetch.as_ref().unwrap().job.runner, prod_runner);
    assert_eq!(prod.get_info.as_ref().unwrap().job.runner, prod_runner);

    // A protection's check keeps its own runner.
    let ProtectionCheck::Job { job } = &prod.protections[0].check else {
        panic!("a job protection");
    };
    assert_eq!(job.runner, RunnerSpec::Local);

    // The secret reaches the job by reference, for ECS to resolve.
    assert_eq!(
        prod.apply.job.secret_env["TOKEN"],
        SecretRef::AwsSecretsManager(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:web-token".into()
        )
    );
}

#[test]
fn runner_local_may_be_written_as_a_scalar_and_keeps_the_program_image() {
    let rt = "runtime:\n  name: rt\n  runner: local\n  apply: {taskConfig: {program: {image: alpine:3, cmd: [./x]}}}\n";
    let app = "application:\n  name: a\n  releaseChannels:\n    - {name: x, runtimes: [{runtime: rt, runner: {local: {}}}]}\n---\nservice: {name: web}\n";
    let model = check(&bundle(&[("rt.yaml", rt), ("app.yaml", app)])).unwrap();
    let job = &compiled(&model, "a", "web", None)["x"].apply.job;
    assert_eq!(job.runner, RunnerSpec::Local);
    assert_eq!(job.image.as_deref(), Some("alpine:3"));
}

#[test]
fn cloud_run_and_kubernetes_runners_carry_their_settings_and_secret_sources() {
    let runtimes = r#"runtime:
  name: on-run
  runner:
    cloudRun: {project: my-project, region: europe-west1, serviceAccount: jobs@my-project.iam.gserviceaccount.com, cpu: "2", memory: 4Gi}
  apply: {taskConfig: {program: {image: img, cmd: [./x], env: {TOKEN: "{{.Params.token}}"}}}}
  parameters: [{name: token, secret: {}}]
---
runtime:
  name: on-k8s
  runner: {kubernetes: {agent: prod-eu, namespace: jobs, serviceAccount: deployer}}
  apply: {taskConfig: {program: {image: img, cmd: [./x], env: {TOKEN: "{{.Params.token}}"}}}}
  parameters: [{name: token, secret: {}}]
"#;
    let app = r#"application:
  name: a
  releaseChannels: [{name: x, runtimes: [{runtime: on-run}, {runtime: on-k8s}]}]
---
service:
  name: run
  runtime: on-run
  custom: {parameterValues: [{name: token, secret: {gcpSecretManager: projects/my-project/secrets/token/versions/latest}}]}
---
service:
  name: k8s
  runtime: on-k8s
  custom: {parameterValues: [{name: token, secret: {kubernetesSecret: {name: deploy, key: token}}}]}
"#;
    let model = check(&bundle(&[("rt.yaml", runtimes), ("app.yaml", app)])).unwrap();
    let run = &compiled(&model, "a", "run", None)["x"].apply.job;
    assert_eq!(
        run.runner,
        RunnerSpec::CloudRun(CloudRunRunnerSpec {
            project: "my-project".into(),
            region: "europe-west1".into(),
            service_account: Some("jobs@my-project.iam.gserviceaccount.com".into()),
            cpu: Some("2".into()),
            memory: Some("4Gi".into()),
        })
    );
    assert_eq!(
        run.secret_env["TOKEN"],
        SecretRef::GcpSecretManager("projects/my-project/secrets/token/versions/latest".into())
    );
    let k8s = &compiled(&model, "a", "k8s", None)["x"].apply.job;
    assert_eq!(
        k8s.runner,
        RunnerSpec::Kubernetes(KubernetesRunnerSpec {
            agent: "prod-eu".into(),
            namespace: Some("jobs".into()),
            service_account: Some("deployer".into()),
        })
    );
    assert_eq!(
        k8s.secret_env["TOKEN"],
        SecretRef::KubernetesSecret {
            name: "deploy".into(),
            key: "token".into()
        }
    );
}

#[test]
fn runner_uses_say_which_runners_the_config_names_and_where() {
    let compiled = YamlCompiler
        .compile(&bundle(&[("rt.yaml", ECS_RUNTIME), ("app.yaml", ECS_APP)]))
        .unwrap();
    let uses: Vec<String> = compiled
        .runner_uses()
        .iter()
        .map(|u| format!("{}: {} runs on {}", u.at, u.by, u.kind))
        .collect();
    assert_eq!(
        uses,
        vec![
            "app.yaml:9: application.releaseChannels[1].runtimes[0].runner: runtime jobs runs on ecs",
            "rt.yaml:3: runtime.runner: runtime jobs runs on ecs",
            "rt.yaml:24: protection: protection smoke runs on local",
        ]
    );
}

/// The YAML blocks of the "Runner examples" section of docs/config.md.
fn documented_runner_examples() -> Vec<&'static str> {
    config_reference_section("### Runner examples")
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("```").next())
        .collect()
}

#[test]
fn the_runner_examples_of_the_config_reference_compile() {
    let examples = documented_runner_examples();
    let kinds = [
        RunnerKind::Local,
        RunnerKind::Ecs,
        RunnerKind::CloudRun,
        RunnerKind::Kubernetes,
    ];
    assert_eq!(examples.len(), kinds.len(), "{examples:#?}");
    for (example, kind) in examples.into_iter().zip(kinds) {
        let runtime = example
            .lines()
            .find_map(|line| line.strip_prefix("  name: "))
            .expect("the example names its runtime");
        let app = format!(
            "application: {{name: shop, releaseChannels: [{{name: staging, runtimes: [{{runtime: {runtime}}}]}}]}}\n"
        );
        let model = check(&bundle(&[("runtime.yaml", example), ("app.yaml", &app)]))
            .unwrap_or_else(|e| panic!("{runtime}: {e}"));
        let job = &compiled(&model, "shop", "web", None)["staging"].apply.job;
        assert_eq!(job.runner.kind(), kind, "{runtime}");
        assert_eq!(job.secret_env["DEPLOY_TOKEN"].read_by(), kind, "{runtime}");
    }
}
