//! `vergence validate --target`: a config for a serverless deployment is
//! refused, at the file and line of each job, when jobs of its local runner
//! need what the worker function does not have; for a local deployment the
//! same config is valid.

use crate::common::Project;

/// A script beside the config, an image on the local runner, a protection
/// that runs a script with `sh`, and a check that calls an API and runs
/// anywhere.
const CONFIG: &str = r#"runtime:
  name: deploy
  apply:
    taskConfig:
      program:
        cmd: [./deploy.sh, "--service={{.Builtins.Service.Name}}"]
  getInfo:
    taskConfig:
      program:
        image: alpine:3.20
        cmd: [cat, /etc/alpine-release]
---
protection:
  name: smoke
  taskConfig:
    program:
      cmd: [sh, checks/smoke.sh]
---
protection:
  name: alive
  taskConfig:
    program:
      cmd: [sh, -c, 'curl -fsS "https://status.example.com/$VERGENCE_SERVICE"']
---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: deploy}]
      protections:
        - ref: {name: smoke}
          lifecycle: [{postDeployment: {checkDuration: 1m}}]
        - ref: {name: alive}
          lifecycle: [{deployment: {}}]
---
service:
  name: web
"#;

fn project() -> Project {
    let project = Project::empty();
    project.write("vergence.yaml", CONFIG);
    project.write("deploy.sh", "#!/bin/sh\necho deployed\n");
    project.write("checks/smoke.sh", "#!/bin/sh\nexit 0\n");
    project
}

#[test]
fn validate_for_serverless_names_each_local_job_the_worker_cannot_start() {
    let project = project();
    let run = project.vergence(&["validate", "--target", "serverless"]);
    assert_eq!(run.code, 1, "{run}");
    assert_eq!(run.stdout, "", "{run}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(
        lines,
        [
            "vergence.yaml:6: runtime.apply.taskConfig.program.cmd[0]: the apply of runtime deploy runs on the local runner and needs ./deploy.sh, a file of the config directory; in a serverless deployment local jobs run inside the worker function, which has no config directory (a push sends only the config's YAML and JSON files): put it in an image and run the job on ecs, cloudRun or kubernetes (through vergence-agent), or in a Lambda function's package and run the job on lambda",
            "vergence.yaml:10: runtime.getInfo.taskConfig.program.image: the getInfo of runtime deploy runs on the local runner, in a container of image alpine:3.20; in a serverless deployment local jobs run inside the worker function, which has no container engine: run it on a runner that runs images: ecs, cloudRun or kubernetes (through vergence-agent)",
            "vergence.yaml:17: protection.taskConfig.program.cmd[1]: the check of protection smoke runs on the local runner and needs checks/smoke.sh, a file of the config directory; in a serverless deployment local jobs run inside the worker function, which has no config directory (a push sends only the config's YAML and JSON files): put it in an image and run the job on ecs, cloudRun or kubernetes (through vergence-agent), or in a Lambda function's package and run the job on lambda",
            "3 error(s); nothing was stored",
        ],
        "{run}"
    );
}

#[test]
fn validate_for_a_local_deployment_accepts_the_same_config() {
    let project = project();
    for args in [&["validate"][..], &["validate", "--target", "local"]] {
        let run = project.vergence(args);
        assert_eq!(run.code, 0, "{args:?}: {run}");
        assert!(run.stdout.starts_with("config is valid"), "{run}");
        assert_eq!(run.stderr, "", "{run}");
    }
}

#[test]
fn an_unknown_target_is_a_usage_error_that_lists_the_targets() {
    let run = project().vergence(&["validate", "--target", "lambda"]);
    assert_eq!(run.code, 64, "{run}");
    assert!(run.stderr.contains("local, serverless"), "{run}");
}

#[test]
fn a_bare_name_the_config_directory_has_is_not_found_by_the_serverless_worker() {
    let project = Project::empty();
    project.write(
        "vergence.yaml",
        "runtime:\n  name: deploy\n  apply:\n    taskConfig:\n      program:\n        cmd: [deploy-web]\n---\napplication:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: deploy}]}\n---\nservice:\n  name: web\n",
    );
    project.write("deploy-web", "#!/bin/sh\n");
    let run = project.vergence(&["validate", "--target", "serverless"]);
    assert_eq!(run.code, 0, "{run}");
    assert_eq!(
        run.stderr.trim(),
        "warning: vergence.yaml:6: runtime.apply.taskConfig.program.cmd[0]: deploy-web is looked up on the PATH of the serverless worker, which the config directory's deploy-web does not reach: put it in an image and run the job on ecs, cloudRun or kubernetes (through vergence-agent)",
        "{run}"
    );
}
