//! The YAML reader against a small schema of its own: keys in either case,
//! unknown keys collected with suggestions, scalars typed by their field,
//! enum variants as single-key mappings, and paths and lines on errors.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::*;

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Program {
    cmd: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    max_attempts: Option<u32>,
    enabled: Option<bool>,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
enum Mode {
    ExitCode,
    Structured,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
enum Runner {
    Local {},
    Kubernetes { agent: String },
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Doc {
    program: Program,
    mode: Option<Mode>,
    runner: Option<Runner>,
    version: Option<String>,
}

fn read(text: &str) -> (Result<Doc, DeError>, Vec<ConfigError>, Positions) {
    let docs = parse_documents(text).expect("valid yaml");
    let collector = Collector::default();
    let result = from_document::<Doc>(&docs[0], &collector);
    let (errors, positions) = collector.into_parts("f.yaml");
    (result, errors, positions)
}

#[test]
fn reads_camel_and_snake_case_keys_and_types_scalars_by_field() {
    let (doc, errors, _) = read(
        "program:\n  cmd: [./x, 5, true]\n  env: {PORT: 8080}\n  max_attempts: 3\n  enabled: true\nmode: exit_code\nversion: 1.10\n",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let doc = doc.unwrap();
    assert_eq!(doc.program.cmd, vec!["./x", "5", "true"]);
    assert_eq!(doc.program.env["PORT"], "8080");
    assert_eq!(doc.program.max_attempts, Some(3));
    assert_eq!(doc.mode, Some(Mode::ExitCode));
    assert_eq!(doc.version.as_deref(), Some("1.10"));
}

#[test]
fn collects_every_unknown_key_with_a_suggestion_and_line() {
    let (doc, errors, _) = read("program:\n  cmdd: [a]\n  cmd: [b]\n  evn: {}\nmood: exitCode\n");
    assert!(doc.is_ok());
    let messages: Vec<String> = errors
        .iter()
        .map(|e| format!("{}:{}: {}", e.line.unwrap(), e.path, e.message))
        .collect();
    assert_eq!(
        messages,
        vec![
            "2:program.cmdd: unknown key 'cmdd'; did you mean 'cmd'?",
            "4:program.evn: unknown key 'evn'; did you mean 'env'?",
            "5:mood: unknown key 'mood'; did you mean 'mode'?",
        ]
    );
}

#[test]
fn type_errors_name_the_path_and_line() {
    let (doc, _, _) = read("program:\n  cmd: [a]\n  max_attempts: lots\n");
    let err = doc.unwrap_err();
    assert_eq!(err.path.as_deref(), Some("program.maxAttempts"));
    assert_eq!(err.line, Some(3));
    assert!(
        err.message.contains("expected an integer"),
        "{}",
        err.message
    );
}

#[test]
fn missing_keys_are_reported_on_their_parent() {
    let (doc, _, _) = read("program:\n  env: {}\n");
    let err = doc.unwrap_err();
    assert_eq!(err.path.as_deref(), Some("program"));
    assert_eq!(err.message, "missing required key 'cmd'");
}

#[test]
fn single_key_mappings_select_enum_variants() {
    let (doc, errors, _) = read("program: {cmd: []}\nrunner:\n  kubernetes: {agent: prod}\n");
    assert!(errors.is_empty());
    assert_eq!(
        doc.unwrap().runner,
        Some(Runner::Kubernetes {
            agent: "prod".into()
        })
    );
    let (doc, _, _) = read("program: {cmd: []}\nrunner: {local: {}, ecs: {}}\n");
    let err = doc.unwrap_err();
    assert!(
        err.message.contains("exactly one of: local, kubernetes"),
        "{}",
        err.message
    );
    let (doc, _, _) = read("program: {cmd: []}\nmode: strucutred\n");
    assert!(
        doc.unwrap_err()
            .message
            .contains("did you mean 'structured'")
    );
}

#[test]
fn positions_are_recorded_for_list_items() {
    let (_, _, positions) = read("program:\n  cmd:\n    - a\n    - b\n");
    assert_eq!(positions.line_of("program.cmd[1]"), Some(4));
}

#[test]
fn syntax_errors_carry_a_line() {
    let err = parse_documents("a: [1, 2\nb: c\n").unwrap_err();
    assert!(err.0 >= 1);
}

#[test]
fn unquoted_templates_survive_flow_sequences_and_nested_flow_mappings_stay_intact() {
    let (doc, errors, _) = read(
        "program: {cmd: [./do-apply, --service={{.Params.service}}, \"{{ .Constants.x }}\"], env: {A: {{.Params.a}}}}\n",
    );
    assert!(errors.is_empty(), "{errors:?}");
    let doc = doc.unwrap();
    assert_eq!(
        doc.program.cmd,
        vec![
            "./do-apply",
            "--service={{.Params.service}}",
            "{{ .Constants.x }}"
        ]
    );
    assert_eq!(doc.program.env["A"], "{{.Params.a}}");
}

#[test]
fn several_documents_and_empty_ones() {
    let docs = parse_documents("a: 1\n---\n---\nb: 2\n").unwrap();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[1].line, 4);
}

#[test]
fn nesting_thousands_deep_is_refused_with_a_line_not_a_crash() {
    // 20,000 levels of `- - - … x`: 40 KB that used to abort the process.
    let bomb = format!("{}x\n", "- ".repeat(20_000));
    let (line, message) = parse_documents(&bomb).unwrap_err();
    assert_eq!(line, 1);
    assert!(message.contains("more than 64 levels"), "{message}");
    let flow = format!("a: {}{}\n", "[".repeat(5_000), "]".repeat(5_000));
    // The parser itself refuses deep flow collections: an error, not a crash.
    let (_, message) = parse_documents(&flow).unwrap_err();
    assert!(!message.is_empty());
    let fine = "a:\n  b:\n    - c: [1, {d: e}]\n";
    assert!(parse_documents(fine).is_ok());
}
