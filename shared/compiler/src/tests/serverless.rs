//! Jobs of the local runner a serverless deployment cannot start: those
//! with an image, those whose command names a file of the config
//! directory and those defined below its top; reported, with their file
//! and line, for a serverless deployment and never for a local one.

use super::*;
use crate::port::YamlCompiler;
use vergence_model::ports::Compiler;

const APP: &str = "application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: deploy}]
---
service:
  name: web
";

/// The serverless errors of a config of `APP` and the given files, as
/// the CLI and the API print them.
fn serverless_errors(files: &[(&str, &str)]) -> Vec<String> {
    let mut all = vec![("app.yaml", APP)];
    all.extend_from_slice(files);
    let model = YamlCompiler
        .compile(&bundle(&all))
        .unwrap_or_else(|e| panic!("the config compiles: {e}"));
    assert!(
        model.target_errors(DeploymentTarget::Local).is_empty(),
        "a local deployment runs every local job"
    );
    let errors = model.target_errors(DeploymentTarget::Serverless);
    errors.iter().map(ToString::to_string).collect()
}

/// A runtime `deploy` whose apply runs `cmd` (a flow list as written).
fn apply_runs(cmd: &str) -> String {
    format!(
        "runtime:\n  name: deploy\n  apply:\n    taskConfig:\n      program:\n        cmd: {cmd}\n"
    )
}

#[test]
fn an_image_on_the_local_runner_needs_a_container_engine() {
    let runtime = "runtime:
  name: deploy
  apply:
    taskConfig:
      program:
        image: hashicorp/terraform:1.9
        cmd: [terraform, apply]
";
    assert_eq!(
        serverless_errors(&[("runtime.yaml", runtime)]),
        [
            "runtime.yaml:6: runtime.apply.taskConfig.program.image: the apply of runtime deploy runs on the local runner, in a container of image hashicorp/terraform:1.9; in a serverless deployment local jobs run inside the worker function, which has no container engine: run it on a runner that runs images: ecs, cloudRun or kubernetes (through vergence-agent)"
        ]
    );
}

#[test]
fn a_script_beside_the_config_is_a_file_the_worker_does_not_have() {
    let errors = serverless_errors(&[("runtime.yaml", &apply_runs("[./deploy.sh, --fast]"))]);
    assert_eq!(
        errors,
        [
            "runtime.yaml:6: runtime.apply.taskConfig.program.cmd[0]: the apply of runtime deploy runs on the local runner and needs ./deploy.sh, a file of the config directory; in a serverless deployment local jobs run inside the worker function, which has no config directory (a push sends only the config's YAML and JSON files): put it in an image and run the job on ecs, cloudRun or kubernetes (through vergence-agent), or in a Lambda function's package and run the job on lambda"
        ]
    );
}

#[test]
fn a_script_an_interpreter_runs_is_named_at_its_argument() {
    let errors = serverless_errors(&[("runtime.yaml", &apply_runs("[sh, -e, scripts/check.sh]"))]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(
            "runtime.yaml:6: runtime.apply.taskConfig.program.cmd[2]: the apply of runtime deploy runs on the local runner and needs scripts/check.sh, a file of the config directory;"
        ),
        "{errors:?}"
    );
}

#[test]
fn commands_that_name_no_file_of_the_config_run_in_the_worker() {
    for cmd in [
        r#"[sh, -c, 'curl -fsS -X POST "https://deploy.example.com/v1/$VERGENCE_SERVICE"']"#,
        "[curl, -fsS, https://deploy.example.com/hook]",
        "[/usr/bin/env, aws, ecs, update-service, --service, web]",
        "[sh, /opt/tools/deploy.sh]",
        "[kubectl, rollout, restart, deployment/web]",
        r#"["{{.Params.tool}}", run]"#,
    ] {
        let runtime = format!(
            "{}  parameters: [{{name: tool, string: {{defaultValue: x}}}}]\n",
            apply_runs(cmd)
        );
        let errors = serverless_errors(&[("runtime.yaml", &runtime)]);
        assert_eq!(errors, Vec::<String>::new(), "{cmd}");
    }
}

#[test]
fn a_job_below_the_top_of_the_config_runs_in_a_directory_the_worker_does_not_have() {
    let errors = serverless_errors(&[(
        "runtimes/deploy.yaml",
        &apply_runs("[curl, https://x.example]"),
    )]);
    assert_eq!(
        errors,
        [
            "runtimes/deploy.yaml:5: runtime.apply.taskConfig.program: the apply of runtime deploy runs on the local runner in runtimes/, the directory of the file that defines it; in a serverless deployment local jobs run inside the worker function, which has no config directory (a push sends only the config's YAML and JSON files): define it in a file at the top of the config directory, or run it in an image on ecs, cloudRun or kubernetes (through vergence-agent), or in a Lambda function on lambda"
        ]
    );
    // A script there is named with where it is in the config.
    let errors = serverless_errors(&[("runtimes/deploy.yaml", &apply_runs("[./deploy.sh]"))]);
    assert!(
        errors[0]
            .contains("needs ./deploy.sh (runtimes/deploy.sh), a file of the config directory"),
        "{errors:?}"
    );
}

#[test]
fn every_job_kind_is_checked_where_it_is_written() {
    let runtime = "runtime:
  name: deploy
  apply:
    taskConfig: {program: {cmd: [./apply.sh]}}
  fetch:
    taskConfig: {program: {cmd: [bash, fetch.sh]}}
  getInfo:
    taskConfig: {program: {image: busybox, cmd: [cat, info.txt]}}
---
protection:
  name: smoke
  taskConfig:
    program:
      cmd: [python3, checks/smoke.py]
";
    let errors = serverless_errors(&[("all.yaml", runtime)]);
    let places: Vec<&str> = errors
        .iter()
        .map(|e| e.split(": the ").next().unwrap())
        .collect();
    assert_eq!(
        places,
        [
            "all.yaml:4: runtime.apply.taskConfig.program.cmd[0]",
            "all.yaml:6: runtime.fetch.taskConfig.program.cmd[1]",
            "all.yaml:8: runtime.getInfo.taskConfig.program.image",
            "all.yaml:14: protection.taskConfig.program.cmd[1]",
        ]
    );
    assert!(
        errors[1].contains("the fetch of runtime deploy"),
        "{errors:?}"
    );
    assert!(
        errors[2].contains("the getInfo of runtime deploy"),
        "{errors:?}"
    );
    assert!(
        errors[3].contains("the check of protection smoke"),
        "{errors:?}"
    );
}

#[test]
fn jobs_on_other_runners_are_not_the_workers() {
    let runtime = "runtime:
  name: deploy
  runner:
    ecs: {cluster: jobs, subnets: [subnet-0aa]}
  apply:
    taskConfig: {program: {image: deployer:1, cmd: [./apply.sh]}}
---
protection:
  name: smoke
  runner: {kubernetes: {agent: prod}}
  taskConfig: {program: {image: checks:1, cmd: [sh, smoke.sh]}}
";
    assert_eq!(
        serverless_errors(&[("infra/all.yaml", runtime)]),
        Vec::<String>::new()
    );
}

#[test]
fn a_terraform_module_of_the_config_is_a_directory_the_worker_does_not_have() {
    let terraform =
        |module: &str| format!("runtime:\n  name: deploy\n  terraform:\n    module: {module}\n");
    let errors = serverless_errors(&[("infra/network.yaml", &terraform("./modules/network"))]);
    assert_eq!(
        errors,
        [
            "infra/network.yaml:4: runtime.terraform.module: runtime deploy plans its module ./modules/network, a directory of the config (infra/modules/network), on the local runner; in a serverless deployment local jobs run inside the worker function, which has no config directory (a push sends only the config's YAML and JSON files): put the module in an image with terraform and vergence-wrapper, give its path there as module (/module), and run the runtime on ecs, cloudRun or kubernetes (through vergence-agent)"
        ]
    );
    // A module the worker can reach needs only terraform on its PATH.
    for module in [
        "/opt/modules/network",
        "git::https://example.com/network.git",
    ] {
        let errors = serverless_errors(&[("network.yaml", &terraform(module))]);
        assert_eq!(errors, Vec::<String>::new(), "{module}");
    }
    let errors = serverless_errors(&[("infra/network.yaml", &terraform("/opt/modules/network"))]);
    assert!(
        errors[0].starts_with("infra/network.yaml:3: runtime.terraform: runtime deploy runs terraform, which runs on the local runner in infra/"),
        "{errors:?}"
    );
}

#[test]
fn local_programs_are_listed_where_they_are_written() {
    let runtime = "runtime:
  name: deploy
  apply:
    taskConfig:
      program:
        cmd: [apply.sh]
  getInfo:
    taskConfig: {program: {image: busybox, cmd: [cat, info.txt]}}
";
    let mut all = vec![("app.yaml", APP)];
    all.push(("runtimes/deploy.yaml", runtime));
    let model = YamlCompiler.compile(&bundle(&all)).unwrap();
    let programs: Vec<(String, bool, String, String)> = model
        .local_programs()
        .into_iter()
        .map(|p| (p.program, p.in_container, p.working_dir, p.at.to_string()))
        .collect();
    assert_eq!(
        programs,
        [
            (
                "apply.sh".to_owned(),
                false,
                "runtimes".to_owned(),
                "runtimes/deploy.yaml:6: runtime.apply.taskConfig.program.cmd[0]".to_owned()
            ),
            (
                "cat".to_owned(),
                true,
                "runtimes".to_owned(),
                "runtimes/deploy.yaml:8: runtime.getInfo.taskConfig.program.cmd[0]".to_owned()
            ),
        ]
    );
}
