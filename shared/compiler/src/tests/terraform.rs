//! The Terraform runtime: a module planned by the fetch and applied from
//! that plan by the apply, on the runtime's runner, with variables and the
//! backend templated per release; and every key that would not act refused.

use super::*;
use vergence_model::terraform::{PLAN_FILE, PLAN_JSON};
use vergence_model::{FetchMode, ParamValue};

const APP: &str = "application:\n  name: shop\n  releaseChannels:\n    - {name: staging, runtimes: [{runtime: network}], constants: [{name: region, string: {value: eu-west-1}}]}\n    - {name: prod, runtimes: [{runtime: network}], constants: [{name: region, string: {value: us-east-1}}]}\n";
const RUNTIME: &str = r#"runtime:
  name: network
  requireApprovalBeforeApply: true
  parameters: [{name: cidr, string: {}, required: true}, {name: token, secret: {}}]
  terraform:
    module: ./modules/network
    backend: {path: "/state/{{.Builtins.ReleaseChannel.Name}}.tfstate"}
    variables:
      cidr: "{{.Params.cidr}}"
      region: "{{.Constants.region}}"
      api_token: "{{.Params.token}}"
    pollInterval: 5s
"#;
const SERVICE: &str = r#"service:
  name: vpc
  parameters: [{name: cidr, string: {}, required: true}]
  custom:
    parameterValues:
      - {name: cidr, string: "{{.Params.cidr}}"}
      - {name: token, secret: {fromEnv: NET_TOKEN}}
"#;

fn files(runtime: &str) -> Vec<(&str, &str)> {
    vec![
        ("app.yaml", APP),
        ("infra/runtime.yaml", runtime),
        ("vpc.yaml", SERVICE),
    ]
}

fn release(version: &str) -> Release {
    Release {
        application: name("shop"),
        service: name("vpc"),
        version: name(version),
        params: BTreeMap::from([("cidr".to_owned(), ParamValue::String("10.0.0.0/16".into()))]),
        config_fingerprint: String::new(),
        created_at: Timestamp::UNIX_EPOCH,
        actor: "test".into(),
    }
}

#[test]
fn the_fetch_plans_and_keeps_the_plan_and_the_apply_applies_it() {
    let model = check(&bundle(&files(RUNTIME))).unwrap();
    let instances = compiled(&model, "shop", "vpc", Some(&release("v1")));
    let prod = &instances["prod"];
    assert!(prod.require_approval_before_apply);
    let fetch = prod.fetch.as_ref().expect("a fetch");
    assert_eq!(fetch.mode, FetchMode::TerraformPlan);
    assert_eq!(fetch.poll_interval, jiff::SignedDuration::from_secs(5));
    assert_eq!(fetch.job.outputs, [PLAN_FILE, PLAN_JSON]);
    // Both run in the module's directory of the config.
    assert_eq!(fetch.job.working_dir, "infra/modules/network");
    assert_eq!(prod.apply.job.working_dir, "infra/modules/network");
    assert_eq!(fetch.job.cmd[..2], ["sh", "-c"]);
    assert_eq!(
        fetch.job.cmd[3..],
        [
            "vergence-terraform",
            "plan",
            "-backend-config=path=/state/prod.tfstate"
        ]
    );
    assert_eq!(prod.apply.job.cmd[4], "apply");
    let env = &fetch.job.env;
    assert_eq!(env["TF_VAR_cidr"], "10.0.0.0/16");
    assert_eq!(env["TF_VAR_region"], "us-east-1");
    assert_eq!(env["VERGENCE_TF_WORKSPACE"], "shop-vpc-prod");
    assert_eq!(env["VERGENCE_TF_MODULE_KIND"], "dir");
    // A secret variable is passed as a secret, never as a value.
    assert!(!env.contains_key("TF_VAR_api_token"));
    assert!(fetch.job.secret_env.contains_key("TF_VAR_api_token"));
    assert_eq!(
        instances["staging"].fetch.as_ref().unwrap().job.env["TF_VAR_region"],
        "eu-west-1"
    );
}

#[test]
fn a_module_source_and_a_path_in_the_image_run_on_container_runners() {
    let runtime = "runtime:\n  name: network\n  terraform:\n    module: git::https://example.com/net.git//vpc?ref=v1\n    image: registry/terraform-wrapper:1.11\n    runner: {kubernetes: {agent: prod-eu}}\n    workspace: \"{{.Builtins.Service.Name}}\"\n";
    let model = check(&bundle(&[
        ("app.yaml", APP),
        ("rt.yaml", runtime),
        ("vpc.yaml", "service:\n  name: vpc\n"),
    ]))
    .unwrap();
    let instances = compiled(&model, "shop", "vpc", None);
    let job = &instances["staging"].fetch.as_ref().unwrap().job;
    assert_eq!(
        job.image.as_deref(),
        Some("registry/terraform-wrapper:1.11")
    );
    assert_eq!(job.env["VERGENCE_TF_MODULE_KIND"], "source");
    assert_eq!(
        job.env["VERGENCE_TF_MODULE"],
        "git::https://example.com/net.git//vpc?ref=v1"
    );
    assert_eq!(job.env["VERGENCE_TF_WORKSPACE"], "vpc");
    assert_eq!(job.runner.kind(), RunnerKind::Kubernetes);
}

#[test]
fn keys_that_would_not_act_and_unreachable_modules_are_errors() {
    let runtime = "runtime:\n  name: network\n  apply: {taskConfig: {program: {cmd: [./x]}}}\n  fetch: {taskConfig: {program: {cmd: [./y]}}}\n  runner: {local: {}}\n  terraform:\n    module: ./modules/network\n    path: ./modules/network\n    runner: {local: {}}\n    variables: {\"bad-name\": x, ok: \"{{.Params.nope}}\"}\n";
    let errors = errors_of(&files(runtime));
    let all = errors.join("\n");
    for expected in [
        "runtime.apply: a terraform runtime plans and applies its module itself; 'apply' has no effect",
        "runtime.fetch: a terraform runtime",
        "runtime.terraform.path: 'module' and 'path' are the same setting",
        "runtime.terraform.runner: the runner is given twice",
        "runtime.terraform.variables.bad-name: \"bad-name\" is not a variable name",
        "runtime.terraform.variables.ok: unknown parameter 'nope'",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
    let ecs = "runtime:\n  name: network\n  runner: {ecs: {cluster: c, subnets: [s]}}\n  terraform: {module: ./modules/network}\n";
    let all = errors_of(&files(ecs)).join("\n");
    assert!(all.contains("runtime.terraform.module: \"./modules/network\" is a directory of the config, which only the local runner reaches"), "{all}");
    assert!(
        all.contains("runtime.terraform.image: the ecs runner runs a container"),
        "{all}"
    );
    // Another first-class block beside it would be silently dropped.
    let both = "runtime:\n  name: network\n  terraform: {module: ./modules/network}\n  ecs: {cluster: c}\n";
    let all = errors_of(&files(both)).join("\n");
    assert!(
        all.contains("runtime.ecs: a terraform runtime plans and applies its module itself; 'ecs' has no effect here"),
        "{all}"
    );
    let missing = "runtime:\n  name: network\n  terraform: {variables: {a: b}}\n";
    let all = errors_of(&files(missing)).join("\n");
    assert!(all.contains("runtime.terraform.module: required"), "{all}");
}

#[test]
fn a_module_written_without_dot_slash_is_refused_and_a_registry_address_is_not() {
    let runtime_at =
        |module: &str| RUNTIME.replace("module: ./modules/network", &format!("module: {module}"));
    // A bare word is never a Terraform module source.
    let all = errors_of(&[
        ("app.yaml", APP),
        ("infra/runtime.yaml", &runtime_at("network")),
        ("vpc.yaml", SERVICE),
    ])
    .join("\n");
    assert!(
        all.contains("runtime.terraform.module: runtime network: \"network\" is not a module source Terraform reads: a directory of the config is written with ./ (\"./network\""),
        "{all}"
    );
    // The directory is in the config: say how to write it.
    let mut pushed = bundle(&[
        ("app.yaml", APP),
        ("infra/runtime.yaml", &runtime_at("modules/network")),
        (
            "infra/modules/network/values.yaml",
            "# read by the module\n",
        ),
        ("vpc.yaml", SERVICE),
    ]);
    let all = match check(&pushed) {
        Ok(_) => panic!("expected errors"),
        Err(errors) => errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
    }
    .join("\n");
    assert!(
        all.contains("runtime network: \"modules/network\" is not a module source Terraform reads; the directory infra/modules/network of the config is written \"./modules/network\""),
        "{all}"
    );
    // On disk beside the config (its .tf files are no config files).
    let dir = std::env::temp_dir().join(format!("vergence-tf-module-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("infra/modules/network")).unwrap();
    pushed.files.remove("infra/modules/network/values.yaml");
    pushed.root = Some(dir.display().to_string());
    let on_disk = check(&pushed).is_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(on_disk, "a directory on disk is found too");
    pushed.root = None;
    assert!(
        check(&pushed).is_ok(),
        "two words without such a directory may be a bucket's address"
    );
    // Registry addresses and other sources are Terraform's to read.
    for source in [
        "hashicorp/consul/aws",
        "app.terraform.io/example-corp/k8s-cluster/azurerm",
        "github.com/hashicorp/example",
        "git::https://example.com/net.git//vpc?ref=v1",
    ] {
        let written = runtime_at(source).replace(
            "  terraform:\n",
            "  runner: {kubernetes: {agent: a}}\n  terraform:\n    image: tf:1\n",
        );
        let result = check(&bundle(&[
            ("app.yaml", APP),
            ("infra/runtime.yaml", &written),
            ("vpc.yaml", SERVICE),
        ]));
        if let Err(errors) = result {
            let all = errors.iter().map(ToString::to_string).collect::<Vec<_>>();
            assert!(
                !all.join("\n").contains("runtime.terraform.module"),
                "{source}: {all:?}"
            );
        }
    }
}
