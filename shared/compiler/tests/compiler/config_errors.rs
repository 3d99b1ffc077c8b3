//! Every error the checker reports, pinned byte for byte: file, line, field
//! path and message. The fixtures are broken on purpose, each in as many
//! ways as one config can be, so a change to how the checker is organised
//! shows here as a diff of what users read.

use std::collections::BTreeMap;

use vergence_compiler::{ConfigBundle, check};

fn errors_of(files: &[(&str, &str)]) -> Vec<String> {
    let bundle = ConfigBundle::from_files(
        files
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    );
    match check(&bundle) {
        Ok(_) => panic!("expected errors"),
        Err(errors) => errors.iter().map(ToString::to_string).collect(),
    }
}

fn assert_errors(files: &[(&str, &str)], expected: &[&str]) {
    let actual = errors_of(files);
    assert_eq!(
        actual,
        expected,
        "actual errors:\n{}",
        actual
            .iter()
            .map(|e| format!("{e:?},"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

const RUNTIMES: &str = r#"runtime:
  name: broken
  runner: {kubernetes: {agent: prod}}
  apply:
    taskConfig:
      program:
        cmd: []
        env:
          1BAD: x
          VERGENCE_X: y
          TOKEN: "--t={{.Params.token}}"
          OK: "{{.Params.nope}}"
    retryPolicy: {baseInterval: 10m, maxInterval: 1m, maxAttempts: 0}
  fetch:
    taskConfig: {program: {image: img, cmd: ["./f", "{{.Params.token}}", "{{.Bad}}"]}}
    outputs: ["", "a/b", ".hidden", ok]
  getInfo:
    taskConfig:
      program:
        image: "{{.Params.x"
        cmd: [./i]
  parameters:
    - {name: token, secret: {}}
    - {name: token, string: {}}
    - {name: Bad-Name, string: {}}
    - {name: typeless}
    - {name: twotypes, string: {}, int: {}}
    - {name: both, required: true, string: {defaultValue: x}}
    - {name: img, dockerImage: {defaultValue: "has space"}}
    - {name: count, int: {}}
---
runtime:
  name: on-ecs
  ecs: {region: ""}
---
runtime:
  name: nothing
"#;

#[test]
fn every_runtime_error_names_its_field() {
    assert_errors(
        &[("rt.yaml", RUNTIMES)],
        &[
            "rt.yaml:6: runtime.apply.taskConfig.program.image: the kubernetes runner runs a container: set image",
            "rt.yaml:7: runtime.apply.taskConfig.program.cmd: cmd must name the program to run, e.g. cmd: [./deploy.sh]",
            "rt.yaml:9: runtime.apply.taskConfig.program.env.1BAD: \"1BAD\" is not a valid environment variable name",
            "rt.yaml:10: runtime.apply.taskConfig.program.env.VERGENCE_X: environment variables starting with VERGENCE_ are set by Vergence",
            "rt.yaml:11: runtime.apply.taskConfig.program.env.TOKEN: secret parameter 'token' can only be the whole value of an env variable (secrets are never put on command lines)",
            "rt.yaml:12: runtime.apply.taskConfig.program.env.OK: unknown parameter 'nope' in {{.Params.nope}}; runtime broken declares token, twotypes, both, img, count",
            "rt.yaml:13: runtime.apply.retryPolicy.baseInterval: baseInterval (10m) is longer than maxInterval (1m)",
            "rt.yaml:13: runtime.apply.retryPolicy.maxAttempts: maxAttempts must be at least 1",
            "rt.yaml:15: runtime.fetch.taskConfig.program.cmd[1]: secret parameter 'token' can only be the whole value of an env variable (secrets are never put on command lines)",
            "rt.yaml:15: runtime.fetch.taskConfig.program.cmd[2]: unsupported template expression {{.Bad}}: only {{.Params.name}}, {{.Constants.name}} and {{.Builtins.Service.Name}}-style references are supported",
            "rt.yaml:16: runtime.fetch.outputs[0]: output \"\" must be a plain file name",
            "rt.yaml:16: runtime.fetch.outputs[1]: output \"a/b\" must be a plain file name",
            "rt.yaml:16: runtime.fetch.outputs[2]: output \".hidden\" must be a plain file name",
            "rt.yaml:20: runtime.getInfo.taskConfig.program.image: unclosed '{{' in \"{{.Params.x\"",
            "rt.yaml:24: runtime.parameters[1].name: parameter 'token' is declared twice",
            "rt.yaml:25: runtime.parameters[2].name: \"Bad-Name\" is not a valid name: use letters, digits and '_', starting with a letter",
            "rt.yaml:26: runtime.parameters[3]: parameter 'typeless' needs a type: string, int, dockerImage or secret (e.g. `string: {}`)",
            "rt.yaml:27: runtime.parameters[4]: parameter 'twotypes' has more than one type; keep one",
            "rt.yaml:28: runtime.parameters[5]: parameter 'both' is required and has a default; keep one",
            "rt.yaml:29: runtime.parameters[6].dockerImage.defaultValue: \"has space\" is not a container image reference",
            "rt.yaml:30: runtime.parameters[7]: int parameter 'count' needs a defaultValue or `required: true`",
            "rt.yaml:34: runtime.ecs.cluster: required: the name or ARN of the ECS cluster the services run in",
            "rt.yaml:34: runtime.ecs.region: must not be empty (leave it out to use the deployment's own region)",
            "rt.yaml:36: runtime: a custom runtime needs 'apply': the command that makes the runtime match the desired version",
        ],
    );
}

const PROTECTIONS: &str = r#"protection:
  name: uses-constant
  taskConfig: {program: {cmd: ["./check", "{{.Constants.region}}", "{{.Params.missing}}"]}}
  parameters:
    - {name: key, secret: {}}
---
protection:
  name: bad-alert
  alert: "Not Valid"
---
protection:
  name: both
  alert: firing
  taskConfig: {program: {cmd: [./x]}}
---
protection:
  name: neither
---
protection:
  name: smoke
  taskConfig: {program: {cmd: [./smoke, "{{.Params.target}}"]}}
  parameters:
    - {name: target, required: true, string: {}}
    - {name: level, string: {defaultValue: low}}
---
protection:
  name: alerts
  alert: pager
---
protection:
  name: smoke
  alert: dup
"#;

const PROTECTED_APP: &str = r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: rt}]
      protections:
        - ref: {name: smok}
          lifecycle: [{preApproval: {}}]
        - ref:
            name: smoke
            parameters:
              - {name: targt, string: x}
              - {name: level}
              - {name: level, string: "{{.Params.x}}"}
              - {name: level, string: "{{.Nope}}"}
          lifecycle: []
        - ref: {name: smoke, parameters: [{name: target, string: "{{.Builtins.Service.Name}}"}]}
          lifecycle:
            - postDeployment: {}
            - deployment: {failureBehavior: FAIL}
            - deployment: {}
        - ref: {name: alerts}
          lifecycle: [{postDeployment: {checkDuration: 5m}}, {preApproval: {}}]
---
runtime: {name: rt, apply: {taskConfig: {program: {cmd: [./x]}}}}
---
service:
  name: web
  protections:
    - ref: {name: nope}
      lifecycle: [{preApproval: {}}]
    - ref: {name: alerts}
      lifecycle: [{deployment: {}}]
"#;

#[test]
fn every_protection_error_names_its_field() {
    assert_errors(
        &[
            ("protections.yaml", PROTECTIONS),
            ("app.yaml", PROTECTED_APP),
        ],
        &[
            "app.yaml:7: application.releaseChannels[0].protections[0].ref.name: unknown protection 'smok'; did you mean 'smoke'? (defined: alerts, smoke)",
            "app.yaml:11: application.releaseChannels[0].protections[1].ref.parameters: protection smoke needs a value for its required parameter 'target'",
            "app.yaml:12: application.releaseChannels[0].protections[1].ref.parameters[0].name: unknown parameter 'targt' in {{.Params.targt}}; did you mean 'target'? protection smoke declares target, level",
            "app.yaml:13: application.releaseChannels[0].protections[1].ref.parameters[1]: give parameter 'level' a value: string: VALUE",
            "app.yaml:14: application.releaseChannels[0].protections[1].ref.parameters[2]: protection parameter values can use {{.Constants.x}} and {{.Builtins...}}, not {{.Params.x}}",
            "app.yaml:15: application.releaseChannels[0].protections[1].ref.parameters[3]: unsupported template expression {{.Nope}}: only {{.Params.name}}, {{.Constants.name}} and {{.Builtins.Service.Name}}-style references are supported",
            "app.yaml:16: application.releaseChannels[0].protections[1].lifecycle: say when the protection runs: preApproval, deployment or postDeployment",
            "app.yaml:19: application.releaseChannels[0].protections[2].lifecycle[0].postDeployment.checkDuration: a post-deployment check needs checkDuration: how long it must pass",
            "app.yaml:21: application.releaseChannels[0].protections[2].lifecycle[2]: lifecycle deployment is given twice",
            "app.yaml:23: application.releaseChannels[0].protections[3].lifecycle[0]: an alert protection guards preApproval or deployment; post-deployment checks need a taskConfig, prometheus or cloudwatchAlarm",
            "app.yaml:30: service.protections[0].ref.name: unknown protection 'nope' (defined: alerts, smoke)",
            "protections.yaml:3: protection.taskConfig.program.cmd[1]: protections cannot use {{.Constants.region}} directly; declare a parameter and pass the constant where the protection is attached",
            "protections.yaml:3: protection.taskConfig.program.cmd[2]: unknown parameter 'missing' in {{.Params.missing}}; protection uses-constant declares key",
            "protections.yaml:5: protection.parameters[0].secret: secret parameters cannot be set by releases; declare the secret on the runtime",
            "protections.yaml:9: protection.alert: name \"Not Valid\" must start with a lowercase letter (a-z)",
            "protections.yaml:11: protection: a protection has one check, not taskConfig and alert: keep one of them",
            "protections.yaml:16: protection: a protection needs one check: taskConfig (a check job, exit 0 = pass), alert (a state set with `vergence alert set`), prometheus (a PromQL query held to a threshold) or cloudwatchAlarm (alarms that must not be in ALARM)",
            "protections.yaml:31: protection.name: protection 'smoke' is defined twice (first in protections.yaml:19)",
        ],
    );
}

const APPLICATIONS: &str = r#"application:
  name: empty
  releaseChannels: []
---
application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: []
      constants:
        - {name: 1bad, string: {value: x}}
        - {name: count, int: {value: many}}
        - {name: neither}
        - {name: both, string: {value: a}, int: {value: "1"}}
        - {name: region, string: {value: a}}
        - {name: region, string: {value: b}}
      allowedTimes:
        - {days: someday, hours: 9-17, timezone: Europe/Berlin}
      deniedTimes:
        - {name: a, start: "not a time", end: "2026-01-01T00:00:00Z"}
        - {name: b, start: "2026-01-01T00:00:00Z", end: "nope"}
        - {name: c, start: "2026-02-01T00:00:00Z", end: "2026-01-01T00:00:00Z"}
        - {name: d, days: mon-fri, hours: 25-26, timezone: Europe/Berlin}
        - {name: e, start: "2026-01-01T00:00:00Z", days: mon}
        - {name: f, end: "2026-01-01T00:00:00Z"}
    - name: staging
      runtimes: [{runtime: rt}]
    - name: prod
      runtimes: [{runtime: rt}, {runtime: rt}, {runtime: rtt}]
      preconditions:
        - releaseChannelStable: {releaseChannel: prod}
        - releaseChannelStable: {releaseChannel: nowhere}
        - manualApproval: {name: "Bad Name"}
---
application:
  name: loop
  releaseChannels:
    - {name: a, runtimes: [{runtime: rt}], preconditions: [{releaseChannelStable: {releaseChannel: c}}]}
    - {name: b, runtimes: [{runtime: rt}], preconditions: [{releaseChannelStable: {releaseChannel: a}}]}
    - {name: c, runtimes: [{runtime: rt}], preconditions: [{releaseChannelStable: {releaseChannel: b}}]}
---
application:
  name: shop
  releaseChannels: [{name: x, runtimes: [{runtime: rt}]}]
---
runtime: {name: rt, apply: {taskConfig: {program: {cmd: [./x]}}}}
"#;

#[test]
fn every_application_error_names_its_field() {
    assert_errors(
        &[("apps.yaml", APPLICATIONS)],
        &[
            "apps.yaml:3: application.releaseChannels: an application needs at least one release channel",
            "apps.yaml:9: application.releaseChannels[0].runtimes: release channel 'staging' lists no runtimes; add e.g. `runtimes: [{runtime: NAME}]`",
            "apps.yaml:11: application.releaseChannels[0].constants[0].name: \"1bad\" is not a valid name: use letters, digits and '_', starting with a letter",
            "apps.yaml:12: application.releaseChannels[0].constants[1].int.value: \"many\" is not an integer",
            "apps.yaml:13: application.releaseChannels[0].constants[2]: constant 'neither' needs exactly one of string: {value: …} or int: {value: …}",
            "apps.yaml:14: application.releaseChannels[0].constants[3]: constant 'both' needs exactly one of string: {value: …} or int: {value: …}",
            "apps.yaml:16: application.releaseChannels[0].constants[5].name: constant 'region' is defined twice",
            "apps.yaml:18: application.releaseChannels[0].allowedTimes[0]: days \"someday\": unknown day \"someday\"; use mon, tue, wed, thu, fri, sat, sun, ranges like mon-fri, or lists like sat,sun",
            "apps.yaml:20: application.releaseChannels[0].deniedTimes[0].start: start \"not a time\" is not an RFC 3339 instant like 2026-12-20T00:00:00Z: failed to parse four digit integer as year: invalid digit, expected 0-9 but got n",
            "apps.yaml:21: application.releaseChannels[0].deniedTimes[1].end: end \"nope\" is not an RFC 3339 instant like 2026-12-20T00:00:00Z: failed to parse four digit integer as year: invalid digit, expected 0-9 but got n",
            "apps.yaml:22: application.releaseChannels[0].deniedTimes[2].end: end must be after start",
            "apps.yaml:23: application.releaseChannels[0].deniedTimes[3]: hours \"25-26\": \"25\" is not a time of day; use hours like 9-17, 22-6 (past midnight) or 0-24, or times like 09:30-17:00",
            "apps.yaml:24: application.releaseChannels[0].deniedTimes[4]: a freeze is either {start, end} (two instants) or {days, hours, timezone} (recurring), not both or a part of one",
            "apps.yaml:25: application.releaseChannels[0].deniedTimes[5]: a freeze is either {start, end} (two instants) or {days, hours, timezone} (recurring), not both or a part of one",
            "apps.yaml:26: application.releaseChannels[1].name: release channel 'staging' is defined twice",
            "apps.yaml:29: application.releaseChannels[2].runtimes[2].runtime: unknown runtime 'rtt'; did you mean 'rt'? (defined: rt)",
            "apps.yaml:31: application.releaseChannels[2].preconditions[0].releaseChannelStable.releaseChannel: release channel 'prod' cannot wait for itself",
            "apps.yaml:32: application.releaseChannels[2].preconditions[1].releaseChannelStable.releaseChannel: unknown release channel 'nowhere' (defined: staging, staging, prod)",
            "apps.yaml:33: application.releaseChannels[2].preconditions[2].manualApproval.name: name \"Bad Name\" must start with a lowercase letter (a-z)",
            "apps.yaml:38: application.releaseChannels[0].preconditions: release channel preconditions form a cycle: a → c → b → a; no channel in it could ever deploy",
            "apps.yaml:43: application.name: application 'shop' is defined twice (first in apps.yaml:5)",
        ],
    );
}

const SERVICE_SETUP: &str = r#"runtime:
  name: rt
  apply: {taskConfig: {program: {cmd: [./x, "{{.Params.service}}", "{{.Constants.zone}}"], env: {T: "{{.Params.token}}"}}}}
  parameters:
    - {name: service, required: true, string: {}}
    - {name: replicas, int: {defaultValue: 1}}
    - {name: image, dockerImage: {defaultValue: "r/i:1"}}
    - {name: token, secret: {}}
---
runtime:
  name: rt2
  apply: {taskConfig: {program: {cmd: [./y]}}}
---
application:
  name: shop
  releaseChannels:
    - {name: staging, runtimes: [{runtime: rt}], constants: [{name: zone, string: {value: a}}]}
    - {name: dev, runtimes: [{runtime: rt}]}
    - {name: prod, runtimes: [{runtime: rt}, {runtime: rt2}], constants: [{name: zone, string: {value: b}}]}
    - {name: qa, runtimes: [{runtime: rt2}]}
"#;

const SERVICES: &str = r#"service:
  name: web
  application: shop
  runtime: rt
  parameters:
    - {name: tag, string: {}}
    - {name: key, secret: {}}
  env: {"bad name": x, LEVEL: "{{.Params.nope}}", REGION: "{{.Constants.missing}}", OK: "{{.Bad"}
  custom:
    parameterValues:
      - {name: servce, string: x}
      - {name: service}
      - {name: replicas, string: "3"}
      - {name: replicas, int: "3", string: "3"}
      - {name: image, dockerImage: "bad image"}
      - {name: token, secret: {fromEnv: 1X}}
  perReleaseChannel:
    - releaseChannel: prod
    - releaseChannel: prod
      runtime: rt3
    - releaseChannel: dev
      env: {PVN_X: y, "{{.Params.tag}}": x}
    - releaseChannel: nowhere
---
service:
  name: api
  application: shop
  custom:
    parameterValues:
      - {name: service, string: api}
      - {name: replicas, int: "{{.Params.count}}"}
      - {name: replicas, int: three}
  perReleaseChannel:
    - releaseChannel: staging
      runtime: rt
      custom: {parameterValues: [{name: service, string: a}, {name: service, string: b}, {name: replicas, int: "2"}]}
---
service:
  name: bare
  application: shop
  runtime: rt
---
service:
  name: lost
  application: shp
"#;

#[test]
fn every_service_error_names_its_field() {
    assert_errors(
        &[("setup.yaml", SERVICE_SETUP), ("services.yaml", SERVICES)],
        &[
            "services.yaml:4: service.runtime: runtime 'rt' is not offered by release channel 'qa' (it offers: rt2)",
            "services.yaml:7: service.parameters[1].secret: secret parameters cannot be set by releases; declare the secret on the runtime",
            "services.yaml:8: service.env.LEVEL: unknown parameter 'nope' in {{.Params.nope}}; this service declares tag, key",
            "services.yaml:8: service.env.OK: unclosed '{{' in \"{{.Bad\"",
            "services.yaml:8: service.env.REGION: constant 'missing' is not defined in release channel 'dev'",
            "services.yaml:8: service.env.REGION: constant 'missing' is not defined in release channel 'staging'",
            "services.yaml:8: service.env.bad name: \"bad name\" is not a valid environment variable name",
            "services.yaml:10: service.custom.parameterValues: missing required parameter 'service' of runtime rt (release channel dev); add `- {name: service, string: …}` to custom.parameterValues",
            "services.yaml:10: service.custom.parameterValues: missing required parameter 'service' of runtime rt (release channel staging); add `- {name: service, string: …}` to custom.parameterValues",
            "services.yaml:11: service.custom.parameterValues[0].name: unknown parameter 'servce' for runtime rt; did you mean 'service'? it declares: service, replicas, image, token",
            "services.yaml:12: service.custom.parameterValues[1]: give parameter 'service' a value: `string: …`",
            "services.yaml:13: service.custom.parameterValues[2].string: parameter 'replicas' of runtime rt is declared int; write `int: …`",
            "services.yaml:14: service.custom.parameterValues[3]: parameter 'replicas' has more than one value; keep one",
            "services.yaml:14: service.custom.parameterValues[3].name: parameter 'replicas' is given twice",
            "services.yaml:15: service.custom.parameterValues[4].dockerImage: \"bad image\" is not a container image reference",
            "services.yaml:16: service.custom.parameterValues[5].secret.fromEnv: \"1X\" is not a valid environment variable name",
            "services.yaml:19: service.perReleaseChannel[1].releaseChannel: release channel 'prod' appears twice",
            "services.yaml:20: service.perReleaseChannel[1].runtime: runtime 'rt3' is not offered by release channel 'prod' (it offers: rt, rt2)",
            "services.yaml:22: service.perReleaseChannel[2].env.PVN_X: environment variables starting with PVN_ are set by Vergence",
            "services.yaml:22: service.perReleaseChannel[2].env.{{.Params.tag}}: \"{{.Params.tag}}\" is not a valid environment variable name",
            "services.yaml:23: service.perReleaseChannel[3].releaseChannel: unknown release channel of application shop 'nowhere' (defined: staging, dev, prod, qa)",
            "services.yaml:25: service: release channel 'prod' offers several runtimes (rt, rt2); set 'runtime' on the service or per release channel",
            "services.yaml:30: service.custom.parameterValues[0].name: unknown parameter 'service' for runtime rt2; it declares: no parameters",
            "services.yaml:31: service.custom.parameterValues[1].int: unknown parameter 'count' in {{.Params.count}}; this service declares no parameters",
            "services.yaml:31: service.custom.parameterValues[1].name: unknown parameter 'replicas' for runtime rt2; it declares: no parameters",
            "services.yaml:32: service.custom.parameterValues[2].int: \"three\" is not an integer",
            "services.yaml:32: service.custom.parameterValues[2].name: parameter 'replicas' is given twice",
            "services.yaml:32: service.custom.parameterValues[2].name: unknown parameter 'replicas' for runtime rt2; it declares: no parameters",
            "services.yaml:36: service.perReleaseChannel[0].custom.parameterValues[1].name: parameter 'service' is given twice",
            "services.yaml:38: service: missing required parameter 'service' of runtime rt (release channel dev); add `- {name: service, string: …}` to custom.parameterValues",
            "services.yaml:38: service: missing required parameter 'service' of runtime rt (release channel prod); add `- {name: service, string: …}` to custom.parameterValues",
            "services.yaml:38: service: missing required parameter 'service' of runtime rt (release channel staging); add `- {name: service, string: …}` to custom.parameterValues",
            "services.yaml:41: service.runtime: runtime 'rt' is not offered by release channel 'qa' (it offers: rt2)",
            "services.yaml:45: service.application: unknown application 'shp'; did you mean 'shop'? (defined: shop)",
            "setup.yaml:3: runtime.apply.taskConfig.program.cmd[2]: constant 'zone' is not defined in release channel 'dev' (which uses runtime rt)",
        ],
    );
}

#[test]
fn a_service_needs_an_application_to_exist() {
    assert_errors(
        &[("svc.yaml", "service: {name: web}\n")],
        &["svc.yaml:1: service: service 'web' needs an application, and the config defines none"],
    );
}

const RUNNERS: &str = r#"runtime:
  name: jobs-ecs
  runner:
    ecs:
      clustr: jobs
      region: eu-west
      subnets: [subnet-0a1b, subnet-xyz]
      securityGroups: [sg-1, vpc-2]
      assignPublicIp: true
      taskRoleArn: "arn:aws:iam::123456789012:user/jobs"
      executionRoleArn: jobs-role
      cpu: 1 vCPU
      memory: 2GB
      logGroup: "bad group"
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: jobs-fargate-size
  runner: {ecs: {cluster: jobs, subnets: [], cpu: 256, memory: 4096}}
  apply: {taskConfig: {program: {image: img, cmd: [./apply]}}}
---
runtime:
  name: jobs-run
  runner:
    cloudRun: {project: My Project, region: europe-west1-b, serviceAccount: jobs, cpu: "3", memory: 16Gi}
  apply: {taskConfig: {program: {image: img, cmd: [./apply]}}}
---
runtime:
  name: jobs-run-small
  runner: {cloudRun: {memory: 8Gi}}
  apply: {taskConfig: {program: {image: img, cmd: [./apply]}}}
---
runtime:
  name: jobs-k8s
  runner: {kubernetes: {namespace: Jobs, serviceAccount: "-sa"}}
  apply: {taskConfig: {program: {image: img, cmd: [./apply]}}}
---
runtime:
  name: local-settings
  runner: {local: {image: x}}
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
protection:
  name: alert-with-runner
  alert: pager
  runner: local
"#;

#[test]
fn every_runner_error_names_its_field() {
    assert_errors(
        &[("runners.yaml", RUNNERS)],
        &[
            "runners.yaml:4: runtime.runner.ecs.cluster: the ecs runner needs cluster: the name or ARN of the ECS cluster that runs the jobs",
            "runners.yaml:5: runtime.runner.ecs.clustr: unknown key 'clustr'; did you mean 'cluster'?",
            "runners.yaml:6: runtime.runner.ecs.region: region \"eu-west\" is not an AWS region: write one like eu-west-1 or us-east-1",
            "runners.yaml:7: runtime.runner.ecs.subnets[1]: \"subnet-xyz\" is not a subnet id: write one like subnet-0123456789abcdef0",
            "runners.yaml:8: runtime.runner.ecs.securityGroups[1]: \"vpc-2\" is not a security group id: write one like sg-0123456789abcdef0",
            "runners.yaml:10: runtime.runner.ecs.taskRoleArn: taskRoleArn \"arn:aws:iam::123456789012:user/jobs\" is not an IAM role ARN: write arn:aws:iam::ACCOUNT:role/NAME",
            "runners.yaml:11: runtime.runner.ecs.executionRoleArn: executionRoleArn \"jobs-role\" is not an IAM role ARN: write arn:aws:iam::ACCOUNT:role/NAME",
            "runners.yaml:12: runtime.runner.ecs.cpu: cpu \"1 vCPU\" is not a Fargate CPU size: write CPU units, one of 256 (¼ vCPU), 512, 1024 (1 vCPU), 2048, 4096, 8192 or 16384",
            "runners.yaml:13: runtime.runner.ecs.memory: memory \"2GB\" is not a size in MiB: write a number such as 512, 2048 or 8192",
            "runners.yaml:14: runtime.runner.ecs.logGroup: logGroup \"bad group\" is not a CloudWatch Logs group name: use letters, digits and _ - / . #, at most 512 characters",
            "runners.yaml:15: runtime.apply.taskConfig.program.image: the ecs runner runs a container: set image",
            "runners.yaml:19: runtime.runner.ecs.memory: Fargate has no task size with cpu 256 and memory 4096: cpu 256 (¼ vCPU) takes memory 512, 1024 or 2048 (MiB)",
            "runners.yaml:19: runtime.runner.ecs.subnets: subnets is empty: an ECS task on Fargate gets its network interface (awsvpc) in one of these subnets; list at least one",
            "runners.yaml:25: runtime.runner.cloudRun.cpu: cpu \"3\" is not a Cloud Run CPU limit: write 1, 2, 4, 6 or 8, or a fraction from 0.08 to 1 such as 0.5",
            "runners.yaml:25: runtime.runner.cloudRun.project: project \"My Project\" is not a Google Cloud project id: 6 to 30 lowercase letters, digits and '-', starting with a letter (the id, not the display name)",
            "runners.yaml:25: runtime.runner.cloudRun.region: region \"europe-west1-b\" is not a Cloud Run region: write one like europe-west1 or us-central1 (a region, not a zone)",
            "runners.yaml:25: runtime.runner.cloudRun.serviceAccount: serviceAccount \"jobs\" is not a service account email: write one like jobs@my-project.iam.gserviceaccount.com",
            "runners.yaml:30: runtime.runner.cloudRun.memory: Cloud Run gives memory 8Gi only with at least 2 CPU; cpu is 1 (the default)",
            "runners.yaml:30: runtime.runner.cloudRun.project: the cloudRun runner needs project: the id of the Google Cloud project the jobs run in",
            "runners.yaml:30: runtime.runner.cloudRun.region: the cloudRun runner needs region: the region the jobs run in, like europe-west1",
            "runners.yaml:35: runtime.runner.kubernetes.agent: the kubernetes runner needs agent: the name of the vergence-agent that runs the jobs in the cluster",
            "runners.yaml:35: runtime.runner.kubernetes.namespace: namespace \"Jobs\" is not a Kubernetes name: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
            "runners.yaml:35: runtime.runner.kubernetes.serviceAccount: serviceAccount \"-sa\" is not a Kubernetes name: at most 253 lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
            "runners.yaml:40: runtime.runner.local.image: unknown key 'image'; this mapping takes no keys",
            "runners.yaml:46: protection.runner: an alert protection runs no job of its own, so it has no runner; remove runner",
        ],
    );
}

/// Errors that stop the reading of their document: one per document.
const RUNNER_FORMS: &str = r#"runtime:
  name: docker
  runner: docker
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: ecs-scalar
  runner: ecs
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: ecss
  runner: {ecss: {cluster: x}}
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: two
  runner: {local: {}, ecs: {cluster: x}}
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: empty
  runner: {}
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: number
  runner: 3
  apply: {taskConfig: {program: {cmd: [./apply]}}}
"#;

#[test]
fn a_runner_is_local_or_a_mapping_of_one_kind() {
    assert_errors(
        &[("forms.yaml", RUNNER_FORMS)],
        &[
            "forms.yaml:3: runtime.runner: unknown runner 'docker'; write `runner: local`, or a mapping with one of local: {}, ecs: {…}, cloudRun: {…}, kubernetes: {…}, lambda: {…}",
            "forms.yaml:8: runtime.runner: the ecs runner needs its settings: write `runner: {ecs: {cluster: NAME, subnets: [subnet-…]}}`",
            "forms.yaml:13: runtime.runner.ecss: unknown runner 'ecss' (did you mean 'ecs'?); write `runner: local`, or a mapping with one of local: {}, ecs: {…}, cloudRun: {…}, kubernetes: {…}, lambda: {…}",
            "forms.yaml:18: runtime.runner: a runner is exactly one of local, ecs, cloudRun, kubernetes or lambda; found local and ecs",
            "forms.yaml:23: runtime.runner: the runner mapping is empty; write `runner: local`, or a mapping with one of local: {}, ecs: {…}, cloudRun: {…}, kubernetes: {…}, lambda: {…}",
            "forms.yaml:28: runtime.runner: expected a runner: `local`, or a mapping with one of local: {}, ecs: {…}, cloudRun: {…}, kubernetes: {…}, lambda: {…}, found integer `3`",
        ],
    );
}

const OVERRIDE_RUNTIMES: &str = r#"runtime:
  name: jobs
  runner:
    ecs: {cluster: jobs, subnets: [subnet-0a], cpu: 1024, memory: 8192}
  apply: {taskConfig: {program: {image: img, cmd: [./apply]}}}
---
runtime:
  name: plain
  apply: {taskConfig: {program: {cmd: [./apply]}}}
---
runtime:
  name: on-k8s
  runner: {kubernetes: {agent: prod}}
  apply: {taskConfig: {program: {image: img, cmd: [./apply]}}}
"#;

const OVERRIDE_APP: &str = r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes:
        - runtime: jobs
          runner: {ecs: {subnets: [], cpu: 256}}
        - runtime: plain
          runner: {ecs: {cluster: jobs, subnets: [subnet-0a]}}
    - name: prod
      runtimes:
        - runtime: jobs
          runner: {cloudRun: {project: my-project}}
        - runtime: on-k8s
          runner: {kubernetes: {namespace: Prod}}
        - runtime: on-k8s
        - runtime: plain
          runner: {local: {}}
"#;

#[test]
fn every_runner_override_error_names_its_field() {
    assert_errors(
        &[("rt.yaml", OVERRIDE_RUNTIMES), ("app.yaml", OVERRIDE_APP)],
        &[
            "app.yaml:7: application.releaseChannels[0].runtimes[0].runner.ecs.cpu: Fargate has no task size with cpu 256 and memory 8192: cpu 256 (¼ vCPU) takes memory 512, 1024 or 2048 (MiB)",
            "app.yaml:7: application.releaseChannels[0].runtimes[0].runner.ecs.subnets: subnets is empty: an ECS task on Fargate gets its network interface (awsvpc) in one of these subnets; list at least one",
            "app.yaml:9: application.releaseChannels[0].runtimes[1].runner.ecs: runtime plain runs on the local runner (the default); a release channel can change that runner's settings, not switch it to ecs: set the runner on the runtime, or define another runtime for this channel",
            "app.yaml:13: application.releaseChannels[1].runtimes[0].runner.cloudRun: runtime jobs runs on the ecs runner (rt.yaml:3: runtime.runner); a release channel can change that runner's settings, not switch it to cloudRun: set the runner on the runtime, or define another runtime for this channel",
            "app.yaml:15: application.releaseChannels[1].runtimes[1].runner.kubernetes.namespace: namespace \"Prod\" is not a Kubernetes name: at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit",
            "app.yaml:16: application.releaseChannels[1].runtimes[2].runtime: runtime 'on-k8s' is listed twice in release channel 'prod' with a runner override; list it once",
        ],
    );
}

const SECRET_RUNTIMES: &str = r#"runtime:
  name: on-ecs
  runner: {ecs: {cluster: jobs, subnets: [subnet-0a]}}
  apply: {taskConfig: {program: {image: img, cmd: [./apply], env: {A: "{{.Params.a}}", B: "{{.Params.b}}", C: "{{.Params.c}}", D: "{{.Params.d}}"}}}}
  parameters:
    - {name: a, secret: {}}
    - {name: b, secret: {}}
    - {name: c, secret: {}}
    - {name: d, secret: {}}
---
runtime:
  name: local-rt
  apply: {taskConfig: {program: {cmd: [./apply], env: {A: "{{.Params.a}}", B: "{{.Params.b}}", C: "{{.Params.c}}", D: "{{.Params.d}}", E: "{{.Params.e}}"}}}}
  parameters:
    - {name: a, secret: {}}
    - {name: b, secret: {}}
    - {name: c, secret: {}}
    - {name: d, secret: {}}
    - {name: e, secret: {}}
---
application:
  name: shop
  releaseChannels:
    - {name: staging, runtimes: [{runtime: on-ecs}, {runtime: local-rt}]}
"#;

const SECRET_SERVICES: &str = r#"service:
  name: on-ecs
  runtime: on-ecs
  custom:
    parameterValues:
      - {name: a, secret: {fromEnv: TOKEN}}
      - {name: b, secret: {gcpSecretManager: projects/p/secrets/s/versions/1}}
      - {name: c, secret: {awsSecretsManager: db-password}}
      - {name: d, secret: {awsSsmParameter: /prod/db, fromEnv: X}}
---
service:
  name: on-local
  runtime: local-rt
  custom:
    parameterValues:
      - {name: a, secret: {awsSsmParameter: /prod/db}}
      - {name: b, secret: {}}
      - {name: c, secret: {kubernetesSecret: {name: db}}}
      - {name: d, secret: {gcpSecretManager: projects/p/secrets/s}}
      - {name: e, secret: {fromEnv: 1X, fromENV: Y}}
"#;

#[test]
fn every_secret_source_error_names_its_field() {
    assert_errors(
        &[
            ("rt.yaml", SECRET_RUNTIMES),
            ("services.yaml", SECRET_SERVICES),
        ],
        &[
            "services.yaml:6: service.custom.parameterValues[0].secret.fromEnv: runtime on-ecs runs its jobs on the ecs runner, which does not read fromEnv secrets (fromEnv is the environment of the local runner, and passing it on would put the secret in the job's plain environment); give a source the ecs runner reads: awsSecretsManager or awsSsmParameter",
            "services.yaml:7: service.custom.parameterValues[1].secret.gcpSecretManager: runtime on-ecs runs its jobs on the ecs runner, which does not read gcpSecretManager secrets (the cloudRun runner does); give a source the ecs runner reads: awsSecretsManager or awsSsmParameter",
            "services.yaml:8: service.custom.parameterValues[2].secret.awsSecretsManager: \"db-password\" is not a Secrets Manager secret ARN: write arn:aws:secretsmanager:REGION:ACCOUNT:secret:NAME",
            "services.yaml:9: service.custom.parameterValues[3].secret: a secret has exactly one source; found fromEnv and awsSsmParameter: keep one",
            "services.yaml:16: service.custom.parameterValues[0].secret.awsSsmParameter: runtime local-rt runs its jobs on the local runner, which does not read awsSsmParameter secrets (the ecs runner does); give a source the local runner reads: fromEnv",
            "services.yaml:17: service.custom.parameterValues[1].secret: give the secret a source: one of fromEnv: VARIABLE, awsSecretsManager: ARN, awsSsmParameter: NAME, gcpSecretManager: projects/P/secrets/S/versions/V, kubernetesSecret: {name, key}",
            "services.yaml:18: service.custom.parameterValues[2].secret.kubernetesSecret.key: kubernetesSecret needs key: the key of the Secret's data that holds the value",
            "services.yaml:19: service.custom.parameterValues[3].secret.gcpSecretManager: \"projects/p/secrets/s\" is not a Secret Manager version: write projects/PROJECT/secrets/NAME/versions/VERSION (a number, or latest)",
            "services.yaml:20: service.custom.parameterValues[4].secret.fromENV: unknown key 'fromENV'; did you mean 'fromEnv'?",
            "services.yaml:20: service.custom.parameterValues[4].secret.fromEnv: \"1X\" is not a valid environment variable name",
        ],
    );
}

/// A rollout's steps and bake, wrong in every way, on Cloud Run runtimes
/// and release channels; and a rollout on every kind of runtime that has no
/// traffic to split, on the runtime and through a channel that lists it.
const ROLLOUT_RUNTIMES: &str = r#"runtime:
  name: run
  cloudRun: {project: shop, region: europe-west1}
  rollout:
    steps: [10, ten, 0, 150, 10.5]
    bake: soon
---
runtime:
  name: run-ok
  cloudRun: {project: shop, region: europe-west1}
  rollout: {steps: [50, 50, 30, 100], bake: 0s}
---
runtime:
  name: fargate
  ecs: {cluster: shop}
  rollout: {steps: [10, 100]}
---
runtime:
  name: cluster
  kubernetes: {agent: prod}
  rollout: {steps: [10, 100]}
---
runtime:
  name: network
  terraform: {module: /modules/network}
  rollout: {steps: [10, 100]}
---
runtime:
  name: script
  apply: {taskConfig: {program: {cmd: [./x]}}}
  rollout: {steps: [100]}
"#;

const ROLLOUT_APP: &str = r#"application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: run}, {runtime: fargate}, {runtime: script}]
      rollout: {steps: [10, 60], bake: -5m}
    - name: qa
      runtimes: [{runtime: run}]
      rollout: {bake: 1m}
    - name: prod
      runtimes: [{runtime: cluster}, {runtime: network}]
      rollout:
        steps: []
"#;

#[test]
fn every_rollout_error_names_its_field() {
    assert_errors(
        &[("rt.yaml", ROLLOUT_RUNTIMES), ("app.yaml", ROLLOUT_APP)],
        &[
            "app.yaml:6: application.releaseChannels[0].rollout: runtime 'fargate' of release channel 'staging' is an ecs runtime, which cannot take a rollout (only cloudRun splits traffic between revisions); remove `rollout` here, or give it to the cloudRun runtimes themselves. ECS shifts traffic itself: set `deploymentConfiguration.strategy` (CANARY, LINEAR or BLUE_GREEN, with its bake time) in the service's ECS service file, and Vergence reads the deployment back as ECS runs it",
            "app.yaml:6: application.releaseChannels[0].rollout: runtime 'script' of release channel 'staging' is a custom runtime, which cannot take a rollout (only cloudRun splits traffic between revisions); remove `rollout` here, or give it to the cloudRun runtimes themselves. Your own commands deploy it, with no traffic Vergence can split: guard the release channel with deployment and postDeployment protections instead",
            "app.yaml:6: application.releaseChannels[0].rollout.bake: bake \"-5m\" is negative: write how long each step is held, like 5m, or 0s",
            "app.yaml:6: application.releaseChannels[0].rollout.steps[1]: the last step is 60, not 100: a rollout ends with the new version taking all the traffic; add it: `steps: [10, 60, 100]`",
            "app.yaml:9: application.releaseChannels[1].rollout.steps: a rollout needs steps: the new version's share of the traffic at each, in percent, ending at 100, e.g. `steps: [10, 50, 100]`",
            "app.yaml:12: application.releaseChannels[2].rollout: runtime 'cluster' of release channel 'prod' is a kubernetes runtime, which cannot take a rollout (only cloudRun splits traffic between revisions); remove `rollout` here, or give it to the cloudRun runtimes themselves. Kubernetes rolls a Deployment out itself: set `spec.strategy.rollingUpdate` (maxSurge, maxUnavailable) in the Deployment's manifest, and Vergence reads the rollout back as it goes",
            "app.yaml:12: application.releaseChannels[2].rollout: runtime 'network' of release channel 'prod' is a terraform runtime, which cannot take a rollout (only cloudRun splits traffic between revisions); remove `rollout` here, or give it to the cloudRun runtimes themselves. Terraform applies a plan, with no traffic to split: guard the release channel with deployment and postDeployment protections instead",
            "app.yaml:13: application.releaseChannels[2].rollout.steps: a rollout needs steps: the new version's share of the traffic at each, in percent, ending at 100, e.g. `steps: [10, 50, 100]`",
            "rt.yaml:5: runtime.rollout.steps[1]: step \"ten\" is not a whole percentage from 1 to 100: write the new version's share of the traffic, like 10 or 50",
            "rt.yaml:5: runtime.rollout.steps[2]: step \"0\" is not a whole percentage from 1 to 100: write the new version's share of the traffic, like 10 or 50",
            "rt.yaml:5: runtime.rollout.steps[3]: step \"150\" is not a whole percentage from 1 to 100: write the new version's share of the traffic, like 10 or 50",
            "rt.yaml:5: runtime.rollout.steps[4]: step \"10.5\" is not a whole percentage from 1 to 100: write the new version's share of the traffic, like 10 or 50",
            "rt.yaml:6: runtime.rollout.bake: bake \"soon\" is not a duration: write a number and a unit, like 5m or 30s (0s moves on as soon as the checks pass)",
            "rt.yaml:11: runtime.rollout.steps[1]: step 50 is not above the step before it (50): each step gives the new version more of the traffic, e.g. `steps: [10, 50, 100]`",
            "rt.yaml:11: runtime.rollout.steps[2]: step 30 is not above the step before it (50): each step gives the new version more of the traffic, e.g. `steps: [10, 50, 100]`",
            "rt.yaml:16: runtime.rollout: an ecs runtime cannot take a rollout (only cloudRun splits traffic between revisions); remove it. ECS shifts traffic itself: set `deploymentConfiguration.strategy` (CANARY, LINEAR or BLUE_GREEN, with its bake time) in the service's ECS service file, and Vergence reads the deployment back as ECS runs it",
            "rt.yaml:21: runtime.rollout: a kubernetes runtime cannot take a rollout (only cloudRun splits traffic between revisions); remove it. Kubernetes rolls a Deployment out itself: set `spec.strategy.rollingUpdate` (maxSurge, maxUnavailable) in the Deployment's manifest, and Vergence reads the rollout back as it goes",
            "rt.yaml:26: runtime.rollout: a terraform runtime cannot take a rollout (only cloudRun splits traffic between revisions); remove it. Terraform applies a plan, with no traffic to split: guard the release channel with deployment and postDeployment protections instead",
            "rt.yaml:31: runtime.rollout: a custom runtime cannot take a rollout (only cloudRun splits traffic between revisions); remove it. Your own commands deploy it, with no traffic Vergence can split: guard the release channel with deployment and postDeployment protections instead",
        ],
    );
}
