//! The layering of docs/architecture.md, checked against what cargo
//! resolves: the crate table there is read here, and every row is held to
//! it — the crates of ours each may depend on (`cargo metadata`), and the
//! libraries it must never build with, all features on (`cargo tree`).
//! Every workspace member must have a row. Beside the table: the CLI's
//! tests link no cloud SDK, runner crates' test support depends on no
//! adapter, and the local CLI, built without its cloud features, compiles
//! no cloud SDK.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use serde_json::Value;

use vergence_testkit::workspace;

/// `cargo ARGS` in the workspace; its stdout. Resolves, compiles nothing.
fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .current_dir(workspace())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cargo does not run: {e}"));
    assert!(
        output.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("cargo prints UTF-8")
}

/// The crate names `cargo tree -p PACKAGE -e EDGES ARGS` lists; each
/// asked once per test run (several tests ask for the same trees).
fn tree_of(package: &str, edges: &str, args: &[&str]) -> BTreeSet<String> {
    type Trees = Mutex<BTreeMap<Vec<String>, BTreeSet<String>>>;
    static TREES: OnceLock<Trees> = OnceLock::new();
    let mut all = vec!["tree", "-p", package, "-e", edges];
    all.extend_from_slice(&["--prefix", "none", "--format", "{p}"]);
    all.extend_from_slice(args);
    let key: Vec<String> = all.iter().map(|a| (*a).to_owned()).collect();
    if let Some(known) = TREES.get_or_init(Trees::default).lock().unwrap().get(&key) {
        return known.clone();
    }
    let crates: BTreeSet<String> = cargo(&all)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    TREES
        .get_or_init(Trees::default)
        .lock()
        .unwrap()
        .insert(key, crates.clone());
    crates
}

/// What `package` builds with: `cargo tree -e normal ARGS`.
fn tree(package: &str, args: &[&str]) -> BTreeSet<String> {
    tree_of(package, "normal", args)
}

/// One row of the table: the crates it names, their paths, the crates of
/// ours they may depend on, and what they must never build with.
#[derive(Debug)]
struct Row {
    crates: Vec<String>,
    paths: Vec<String>,
    allowed: BTreeSet<String>,
    never: Vec<String>,
}

/// The words of the "never" column, as crate-name prefixes.
fn never_prefixes(word: &str) -> Vec<&'static str> {
    match word {
        "YAML" => vec!["saphyr", "serde_yaml", "yaml-rust"],
        "HTTP" => vec!["axum", "hyper", "reqwest", "ureq"],
        "SQLite" => vec!["rusqlite", "libsqlite3-sys"],
        "AWS" => vec![
            "aws-config",
            "aws-sdk-",
            "aws-smithy-",
            "aws-types",
            "aws-runtime",
        ],
        "Kubernetes" => vec!["kube", "k8s-openapi"],
        "Google" => vec!["google-"],
        "Lambda" => vec!["lambda_runtime", "lambda_http", "aws_lambda_events"],
        "adapters" => vec![
            "vergence-embedded",
            "vergence-aws",
            "vergence-api",
            "vergence-notify",
        ],
        "runners" => vec!["vergence-runner-"],
        "model" => vec!["vergence-model"],
        "engine" => vec!["vergence-engine"],
        "compiler" => vec!["vergence-compiler"],
        "container" => vec!["vergence-container"],
        "embedded" => vec!["vergence-embedded"],
        "lambda" => vec!["vergence-lambda"],
        "cli" => vec!["vergence-cli"],
        other => panic!("docs/architecture.md: unknown word {other:?} in a \"never\" column"),
    }
}

/// The words of a comma-separated column, without what parentheses say.
fn words(cell: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut depth = 0;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split(',')
        .map(|w| w.trim().to_owned())
        .filter(|w| !w.is_empty() && w != "nothing of ours" && w != "—")
        .collect()
}

/// The text between backticks in `cell`.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The crate table of docs/architecture.md.
fn table() -> &'static Vec<Row> {
    static TABLE: OnceLock<Vec<Row>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let rows = vergence_testkit::doc_table(
            "docs/architecture.md",
            "| crate | path | may depend on (ours) | never |",
        );
        rows.iter()
            .map(|cells| {
                assert_eq!(cells.len(), 4, "a row of four cells: {cells:?}");
                Row {
                    crates: quoted(&cells[0])
                        .into_iter()
                        .filter(|c| c.starts_with("vergence-"))
                        .collect(),
                    paths: quoted(&cells[1]),
                    allowed: words(&cells[2])
                        .iter()
                        .map(|w| format!("vergence-{w}"))
                        .collect(),
                    never: words(&cells[3]),
                }
            })
            .collect()
    })
}

/// The workspace members: name → (manifest folder relative to the
/// workspace, the crates of ours among its `[dependencies]`).
fn members() -> &'static BTreeMap<String, (String, BTreeSet<String>)> {
    static MEMBERS: OnceLock<BTreeMap<String, (String, BTreeSet<String>)>> = OnceLock::new();
    MEMBERS.get_or_init(|| {
        let metadata: Value =
            serde_json::from_str(&cargo(&["metadata", "--no-deps", "--format-version", "1"]))
                .unwrap();
        let root = metadata["workspace_root"].as_str().unwrap().to_owned();
        metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|package| {
                let manifest = package["manifest_path"].as_str().unwrap();
                let folder = Path::new(manifest)
                    .parent()
                    .unwrap()
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let ours = package["dependencies"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|d| d["kind"].is_null())
                    .filter_map(|d| d["name"].as_str())
                    .filter(|name| name.starts_with("vergence-"))
                    .map(str::to_owned)
                    .collect();
                (package["name"].as_str().unwrap().to_owned(), (folder, ours))
            })
            .collect()
    })
}

fn row_of(name: &str) -> &'static Row {
    table()
        .iter()
        .find(|row| row.crates.iter().any(|c| c == name))
        .unwrap_or_else(|| panic!("docs/architecture.md's crate table has no row for {name}"))
}

/// Holds `name` to its row; the broken rules, one line each.
fn breaches(name: &str) -> Vec<String> {
    let row = row_of(name);
    let (folder, ours) = members()
        .get(name)
        .unwrap_or_else(|| panic!("{name} is in the table but not in the workspace"));
    let mut broken = Vec::new();
    if !row.paths.contains(folder) {
        broken.push(format!(
            "{name} lives in {folder}, the table says {:?}",
            row.paths
        ));
    }
    for dependency in ours.iter().filter(|d| *d != name) {
        if !row.allowed.contains(dependency) {
            broken.push(format!(
                "{name} depends on {dependency}, which its row does not allow"
            ));
        }
    }
    let built = tree(name, &["--all-features"]);
    for word in &row.never {
        for prefix in never_prefixes(word) {
            for found in built.iter().filter(|c| c.starts_with(prefix) && *c != name) {
                broken.push(format!(
                    "{name} builds with {found} ({word}), which its row forbids"
                ));
            }
        }
    }
    broken
}

fn assert_keeps_to_its_row(name: &str) {
    let broken = breaches(name);
    assert!(
        broken.is_empty(),
        "docs/architecture.md:\n{}",
        broken.join("\n")
    );
}

#[test]
fn every_crate_of_the_workspace_has_a_row_and_keeps_to_it() {
    let mut broken = Vec::new();
    for name in members().keys() {
        broken.extend(breaches(name));
    }
    for row in table() {
        for name in &row.crates {
            if !members().contains_key(name) {
                broken.push(format!(
                    "the table names {name}, which is no workspace member"
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "docs/architecture.md:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_model_depends_on_nothing_of_ours_and_no_outside_world() {
    assert_keeps_to_its_row("vergence-model");
    assert!(row_of("vergence-model").allowed.is_empty());
}

#[test]
fn the_engine_sees_neither_the_compiler_nor_any_adapter() {
    assert_keeps_to_its_row("vergence-engine");
    let never = &row_of("vergence-engine").never;
    for word in ["compiler", "adapters", "runners", "YAML"] {
        assert!(
            never.iter().any(|w| w == word),
            "the engine's row forbids {word}"
        );
    }
}

#[test]
fn the_compiler_sees_only_the_model_and_its_yaml_reader() {
    assert_keeps_to_its_row("vergence-compiler");
    assert_eq!(
        row_of("vergence-compiler").allowed,
        BTreeSet::from(["vergence-model".to_owned()])
    );
}

#[test]
fn runners_and_the_api_do_not_depend_on_the_compiler() {
    for name in [
        "vergence-runner-local",
        "vergence-container",
        "vergence-runner-kubernetes",
        "vergence-agent",
        "vergence-api",
    ] {
        assert_keeps_to_its_row(name);
        assert!(
            row_of(name).never.iter().any(|w| w == "compiler"),
            "{name}'s row forbids the compiler"
        );
    }
}

#[test]
fn the_notifier_sees_only_the_model() {
    // The compiler is injected (the Compiler port), as for the API.
    assert_keeps_to_its_row("vergence-notify");
    assert_eq!(
        row_of("vergence-notify").allowed,
        BTreeSet::from(["vergence-model".to_owned()])
    );
}

#[test]
fn only_the_agent_talks_to_kubernetes() {
    // The Vergence side of the kubernetes runner holds no cluster client:
    // every call to a cluster is the agent's, made from inside it.
    assert_keeps_to_its_row("vergence-runner-kubernetes");
    assert_keeps_to_its_row("vergence-agent");
    for (name, (_, _)) in members() {
        let kubernetes = ["kube", "k8s-openapi"];
        let talks = tree(name, &[])
            .iter()
            .any(|c| kubernetes.iter().any(|k| c.starts_with(k)));
        let allowed = ["vergence-agent", "vergence-fake-kube"];
        assert!(
            !talks || allowed.contains(&name.as_str()),
            "{name} builds with a Kubernetes client"
        );
    }
}

#[test]
fn runner_crates_test_support_depends_on_no_adapter() {
    // A runner's `testing` feature is what other crates' tests build on;
    // the adapters they combine it with are theirs to bring.
    let adapters = never_prefixes("adapters");
    for name in members()
        .keys()
        .filter(|n| n.starts_with("vergence-runner-"))
    {
        let built = tree(name, &["--all-features"]);
        let found: Vec<&String> = built
            .iter()
            .filter(|c| adapters.iter().any(|a| c.starts_with(a)))
            .collect();
        assert!(found.is_empty(), "{name}'s test support builds {found:?}");
    }
}

/// The cloud SDKs and the crates built on them, by name prefix.
const CLOUD_SDKS: &[&str] = &[
    "aws-",
    "google-",
    "kube",
    "k8s-openapi",
    "vergence-aws",
    "vergence-lambda",
    "vergence-e2e",
    "vergence-runner-ecs",
    "vergence-runner-lambda",
    "vergence-runner-cloud-run",
];

/// Cloud crates among `crates`. aws-lc is no SDK: it is rustls's crypto,
/// which reqwest (the `--endpoint` client) brings to every build.
fn cloud_crates(crates: &BTreeSet<String>) -> Vec<&String> {
    crates
        .iter()
        .filter(|c| CLOUD_SDKS.iter().any(|sdk| c.starts_with(sdk)))
        .filter(|c| !c.starts_with("aws-lc-"))
        .collect()
}

/// The crates of `vergence-cli`'s build (not its tests) with `features`.
fn cli_crates(features: &[&str]) -> BTreeSet<String> {
    tree("vergence-cli", features)
}

#[test]
fn the_cli_tests_link_no_cloud_sdk() {
    // What the test binary links beyond the CLI's own build: its
    // dev-dependencies and what they bring.
    let crates = tree_of("vergence-cli", "normal,dev", &["--no-default-features"]);
    assert_eq!(
        cloud_crates(&crates),
        Vec::<&String>::new(),
        "the CLI's dev-dependencies bring a cloud SDK"
    );
    // And the tests call none of the CLI's own cloud dependencies: they
    // check through the binary.
    let mut named = Vec::new();
    let mut folders = vec![workspace().join("cli/tests")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for sdk in [
                    "vergence_aws",
                    "aws_sdk_",
                    "aws_config",
                    "vergence_runner_ecs",
                    "vergence_runner_lambda",
                ]
                .iter()
                .chain(&[
                    "vergence_runner_cloud_run",
                    "google_cloud_",
                    "vergence_e2e",
                ]) {
                    if text.contains(sdk) {
                        named.push(format!("{} names {sdk}", path.display()));
                    }
                }
            }
        }
    }
    assert!(named.is_empty(), "{named:?}");
}

#[test]
fn the_local_cli_builds_without_any_cloud_sdk() {
    let local = cli_crates(&["--no-default-features"]);
    assert!(local.contains("vergence-runner-local"), "{local:?}");
    assert_eq!(
        cloud_crates(&local),
        Vec::<&String>::new(),
        "`cargo build -p vergence-cli --no-default-features` compiles a cloud SDK"
    );
    // aws-lc-sys alone is a minute of a newcomer's first build: the local
    // CLI's TLS is rustls over ring.
    let aws_lc: Vec<&String> = local.iter().filter(|c| c.starts_with("aws-lc")).collect();
    assert!(aws_lc.is_empty(), "the local CLI builds {aws_lc:?}");
}

#[test]
fn each_cloud_feature_brings_only_its_own_sdk() {
    let aws = cli_crates(&["--no-default-features", "--features", "aws"]);
    assert!(aws.contains("aws-sdk-ecs") && aws.contains("vergence-runner-ecs"));
    assert!(!aws.iter().any(|c| c.starts_with("google-")), "{aws:?}");
    let cloud_run = cli_crates(&["--no-default-features", "--features", "cloud-run"]);
    assert!(cloud_run.contains("vergence-runner-cloud-run"));
    assert!(
        !cloud_run
            .iter()
            .any(|c| c.starts_with("aws-sdk-") || c.starts_with("aws-config")),
        "{cloud_run:?}"
    );
}

#[test]
fn the_default_cli_is_the_whole_product() {
    let full = cli_crates(&[]);
    for sdk in [
        "aws-config",
        "aws-sdk-dynamodb",
        "aws-sdk-ecs",
        "aws-sdk-s3",
        "vergence-aws",
        "vergence-runner-ecs",
        "vergence-runner-cloud-run",
    ] {
        assert!(full.contains(sdk), "the default build lacks {sdk}");
    }
}
