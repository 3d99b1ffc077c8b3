//! Metric protections (`prometheus`, `cloudwatchAlarm`): rendered per
//! instance into a job the engine's process carries out, and every
//! mistake named where it is written.

use super::*;
use vergence_model::{BuiltinJob, RunnerSpec};

const APP: &str = "application:
  name: shop
  releaseChannels:
    - name: staging
      runtimes: [{runtime: my-custom-runtime}]
      protections:
        - ref:
            name: error-rate
            parameters: [{name: job, string: 'shop-{{.Builtins.ReleaseChannel.Name}}'}]
          lifecycle: [{deployment: {failureBehavior: FAIL}}, {postDeployment: {checkDuration: 5m}}]
        - ref: {name: alarms}
          lifecycle: [{deployment: {}}]
";

const PROTECTIONS: &str = r#"protection:
  name: error-rate
  prometheus:
    url: http://prometheus.monitoring:9090/
    query: 'sum(rate(http_errors{job="{{.Params.job}}",service="{{.Builtins.Service.Name}}"}[1m]))'
    threshold: {max: 0.05}
    for: 2m
  parameters: [{name: job, required: true, string: {}}]
---
protection:
  name: alarms
  cloudwatchAlarm:
    names: [shop-5xx, 'shop-{{.Builtins.Service.Name}}-latency']
    region: eu-west-1
  pollInterval: 30s
"#;

fn errors_with(protection: &str) -> Vec<String> {
    errors_of(&[
        ("seed.yaml", SEED),
        ("app.yaml", SEED_APP),
        ("p.yaml", protection),
    ])
}

#[test]
fn metric_protections_render_per_instance_into_jobs_of_the_engines_process() {
    let model = check(&bundle(&[
        ("seed.yaml", SEED),
        ("app.yaml", APP),
        ("p.yaml", PROTECTIONS),
    ]))
    .unwrap();
    let staging = &compiled(&model, "shop", "my-service-on-custom-runtime", None)["staging"];
    let checks: Vec<(&str, &JobSpec)> = staging
        .protections
        .iter()
        .map(|p| match &p.check {
            ProtectionCheck::Job { job } => (p.lifecycle.as_str(), job.as_ref()),
            ProtectionCheck::Alert { .. } => panic!("not an alert"),
        })
        .collect();
    assert_eq!(
        checks.iter().map(|(at, _)| *at).collect::<Vec<_>>(),
        ["deployment", "postDeployment", "deployment"]
    );
    let (_, errors) = checks[0];
    assert_eq!(errors.runner, RunnerSpec::Local);
    assert!(errors.cmd.is_empty());
    assert_eq!(errors.timeout, jiff::SignedDuration::from_secs(30));
    let Some(BuiltinJob::Prometheus(query)) = &errors.builtin else {
        panic!("{errors:?}");
    };
    assert_eq!(query.url, "http://prometheus.monitoring:9090/");
    assert_eq!(
        query.query,
        r#"sum(rate(http_errors{job="shop-staging",service="my-service-on-custom-runtime"}[1m]))"#
    );
    assert_eq!(query.threshold.to_string(), "at most 0.05");
    assert_eq!(query.for_, jiff::SignedDuration::from_mins(2));
    let Some(BuiltinJob::CloudwatchAlarm(alarms)) = &checks[2].1.builtin else {
        panic!("{:?}", checks[2]);
    };
    assert_eq!(
        alarms.names,
        ["shop-5xx", "shop-my-service-on-custom-runtime-latency"]
    );
    assert_eq!(alarms.region.as_deref(), Some("eu-west-1"));
    assert_eq!(
        staging.protections[2].poll_interval,
        jiff::SignedDuration::from_secs(30)
    );
}

#[test]
fn a_protection_gives_exactly_one_check_and_a_metric_one_no_runner() {
    let both = "protection:\n  name: p\n  alert: a\n  cloudwatchAlarm: {names: [x]}\n";
    assert_eq!(
        errors_with(both),
        [
            "p.yaml:1: protection: a protection has one check, not alert and cloudwatchAlarm: keep one of them"
        ]
    );
    let runner = "protection:\n  name: p\n  runner: local\n  prometheus: {url: 'http://p:9090', query: up, threshold: {min: 1}}\n";
    assert_eq!(
        errors_with(runner),
        [
            "p.yaml:3: protection.runner: a prometheus protection runs no job of its own, so it has no runner; remove runner"
        ]
    );
}

#[test]
fn bad_metric_settings_are_named_where_they_are_written() {
    let prometheus = |body: &str| format!("protection:\n  name: p\n  prometheus:\n{body}");
    let cases = [
        (
            prometheus("    url: prometheus:9090\n    query: up\n    threshold: {min: 1}\n"),
            "p.yaml:4: protection.prometheus.url: give the Prometheus server's URL with its scheme and host, like http://prometheus:9090",
        ),
        (
            prometheus("    url: http://p:9090\n    query: ' '\n    threshold: {min: 1}\n"),
            "p.yaml:5: protection.prometheus.query: give the PromQL query to evaluate",
        ),
        (
            prometheus("    url: http://p:9090\n    query: up\n    threshold: {}\n"),
            "p.yaml:6: protection.prometheus.threshold: give min, max or both: the bounds every series of the query must stay within",
        ),
        (
            prometheus("    url: http://p:9090\n    query: up\n    threshold: {min: 2, max: 1}\n"),
            "p.yaml:6: protection.prometheus.threshold: min 2 is above max 1",
        ),
        (
            prometheus(
                "    url: 'http://{{.Constants.host}}:9090'\n    query: up\n    threshold: {min: 1}\n",
            ),
            "p.yaml:4: protection.prometheus.url: protections cannot use {{.Constants.host}} directly; declare a parameter and pass the constant where the protection is attached",
        ),
        (
            "protection:\n  name: p\n  cloudwatchAlarm: {names: []}\n".to_owned(),
            "p.yaml:3: protection.cloudwatchAlarm.names: name between 1 and 100 alarms (one DescribeAlarms request)",
        ),
        (
            "protection:\n  name: p\n  cloudwatchAlarm: {names: [a, a]}\n".to_owned(),
            "p.yaml:3: protection.cloudwatchAlarm.names[1]: alarm \"a\" is named twice",
        ),
        (
            "protection:\n  name: p\n  cloudwatchAlarm: {names: [a], region: Ireland}\n".to_owned(),
            "p.yaml:3: protection.cloudwatchAlarm.region: region \"Ireland\" is not an AWS region: write one like eu-west-1 or us-east-1",
        ),
    ];
    for (yaml, error) in cases {
        assert_eq!(errors_with(&yaml), [error], "{yaml}");
    }
}
