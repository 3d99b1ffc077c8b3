//! `trust:` on applications: compiled into rules for the API, and every
//! mistake reported with its file, line and field.

use super::*;
use vergence_model::ports::CompiledConfig;

fn app_with(trust: &str) -> String {
    format!("{SEED_APP}  trust:\n{trust}")
}

#[test]
fn a_trust_entry_compiles_into_a_rule_for_its_application() {
    let app = app_with(
        r#"    - issuer: https://token.actions.githubusercontent.com
      audience: vergence
      claims: {repository: org/shop, ref: refs/heads/main}
      scopes: [release, approve, release]
"#,
    );
    let model = check(&bundle(&[("seed.yaml", SEED), ("app.yaml", &app)])).unwrap();
    let rules = CompiledConfig::trust(&model);
    assert_eq!(rules.len(), 1);
    let rule = &rules[0];
    assert_eq!(rule.application.as_str(), "shop");
    assert_eq!(rule.issuer, "https://token.actions.githubusercontent.com");
    assert_eq!(rule.audience, "vergence");
    assert_eq!(rule.claims["repository"], "org/shop");
    assert_eq!(rule.claims["ref"], "refs/heads/main");
    assert_eq!(rule.scopes, vec![Scope::Release, Scope::Approve]);
}

#[test]
fn trust_mistakes_are_reported_with_file_line_and_field() {
    let app = app_with(
        r#"    - issuer: http://token.actions.githubusercontent.com
      audience: vergence
      claims: {repository: org/shop}
      scopes: [release, deploy, platform]
    - audience: " "
      scopes: []
    - issuer: https://gitlab.example.com
      audience: vergence
      claims: {project_path: ""}
      scopes: [admin]
"#,
    );
    let errors = errors_of(&[("seed.yaml", SEED), ("app.yaml", &app)]);
    let expected = [
        "app.yaml:13: application.trust[0].issuer: issuer \"http://token.actions.githubusercontent.com\" must be an https:// URL",
        "app.yaml:16: application.trust[0].scopes[1]: unknown scope \"deploy\"; use release, approve or admin",
        "app.yaml:16: application.trust[0].scopes[2]: scope platform cannot be trusted to a CI job's token",
        "app.yaml:17: application.trust[1].issuer: a trust entry needs an issuer",
        "app.yaml:17: application.trust[1].audience: a trust entry needs an audience",
        "app.yaml:17: application.trust[1].claims: a trust entry needs at least one claim to match",
        "app.yaml:18: application.trust[1].scopes: a trust entry needs scopes",
        "app.yaml:21: application.trust[2].claims.project_path: claim project_path needs a value to match",
    ];
    for want in expected {
        assert!(
            errors.iter().any(|e| e.starts_with(want)),
            "no error starting {want:?} in {errors:#?}"
        );
    }
    assert_eq!(errors.len(), expected.len(), "{errors:#?}");
}
