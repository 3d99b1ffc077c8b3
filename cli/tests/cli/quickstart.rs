//! The quickstart as a newcomer runs it: converge from nothing, rerun and see
//! nothing applied, break a deployed file and see it healed.

use crate::common::Project;

#[test]
fn quickstart_converges_both_channels_reruns_idle_and_heals_drift() {
    let project = Project::quickstart();

    let run = project.up(0);
    assert!(run.stdout.contains("CONVERGED"), "{run}");
    let instances = project.status();
    assert_eq!(instances.len(), 6, "3 services x 2 channels");
    for instance in &instances {
        assert_eq!(instance["status"], "CONVERGED", "{instance}");
        assert_eq!(instance["desiredVersion"], instance["currentVersion"]);
    }
    for channel in ["staging", "prod"] {
        let api = project.read(&format!("deployed/{channel}/api.txt"));
        assert!(api.contains("service=api"), "{api}");
        let web = project.read(&format!("deployed/{channel}/web.txt"));
        let version = project.instance("web", channel)["desiredVersion"].clone();
        assert!(web.contains(&format!("version={}", version.as_str().unwrap())));
        let log = project.read(&format!("deployed/{channel}/migrations.log"));
        assert_eq!(log.lines().count(), 1, "{log}");
    }
    // Constants differ per channel and reach the deployed state.
    assert!(
        project
            .read("deployed/staging/web.txt")
            .contains("region=eu-west-1")
    );
    assert!(
        project
            .read("deployed/prod/web.txt")
            .contains("region=us-east-1")
    );
    // perReleaseChannel override: prod runs 3 replicas of web.
    assert!(project.read("deployed/prod/web.txt").contains("replicas=3"));
    assert!(
        project
            .read("deployed/staging/web.txt")
            .contains("replicas=1")
    );
    let applies = project.applies();
    assert_eq!(applies, 6, "one apply per instance");

    // Rerun: everything is checked again, nothing is applied.
    project.up(0);
    assert_eq!(project.applies(), applies, "a rerun applies nothing");
    for channel in ["staging", "prod"] {
        let log = project.read(&format!("deployed/{channel}/migrations.log"));
        assert_eq!(log.lines().count(), 1, "apply-only runs once per version");
    }

    // Corrupt what the exit-code and structured runtimes deployed.
    let good_api = project.read("deployed/staging/api.txt");
    let good_web = project.read("deployed/prod/web.txt");
    project.write("deployed/staging/api.txt", "replicas=99\n");
    project.replace("deployed/prod/web.txt", "replicas=3", "replicas=1");
    let run = project.up(0);
    assert!(run.stdout.contains("drift"), "{run}");
    assert_eq!(project.read("deployed/staging/api.txt"), good_api);
    assert_eq!(project.read("deployed/prod/web.txt"), good_web);
    assert_eq!(
        project.applies(),
        applies + 2,
        "exactly the two drifted instances"
    );

    // The events say why each was applied again.
    for (service, channel) in [("api", "staging"), ("web", "prod")] {
        let events = project.events(&["--service", service, "--release-channel", channel]);
        let drift = events
            .iter()
            .find(|e| e["type"] == "driftDetected")
            .unwrap_or_else(|| panic!("no driftDetected for {service}@{channel}: {events:?}"));
        assert!(
            drift["message"]
                .as_str()
                .unwrap()
                .contains("drift detected")
        );
        let remediation = events.iter().rfind(|e| e["type"] == "jobStarted").unwrap();
        assert!(
            remediation["message"]
                .as_str()
                .unwrap()
                .contains("to remediate drift"),
            "{remediation}"
        );
    }
    // Untouched instances were not applied again.
    let untouched = project.events(&["--service", "api", "--release-channel", "prod"]);
    assert!(!untouched.iter().any(|e| e["type"] == "driftDetected"));
}

#[test]
fn a_config_change_is_a_new_version_that_flows_through_the_channels() {
    let project = Project::quickstart();
    project.up(0);
    let before = project.instance("api", "prod")["currentVersion"].clone();
    project.replace(
        "services.yaml",
        "  runtime: files-exit-code\n  custom:\n    parameterValues:\n",
        "  runtime: files-exit-code\n  custom:\n    parameterValues:\n      - name: replicas\n        int: 2\n",
    );
    project.up(0);
    let after = project.instance("api", "prod");
    assert_ne!(after["currentVersion"], before);
    assert!(
        after["currentVersion"]
            .as_str()
            .unwrap()
            .starts_with("cfg-")
    );
    assert!(project.read("deployed/prod/api.txt").contains("replicas=2"));
    assert!(
        project
            .read("deployed/staging/api.txt")
            .contains("replicas=2")
    );
}

#[test]
fn plan_shows_what_would_change_without_running_anything() {
    let project = Project::quickstart();
    let run = project.vergence(&["plan"]);
    assert_eq!(run.code, 0, "{run}");
    for service in ["api", "web", "migrations"] {
        assert!(run.stdout.contains(service), "{run}");
    }
    assert!(!project.file("deployed").exists(), "plan runs no job");

    project.up(0);
    let run = project.vergence(&["plan"]);
    assert_eq!(run.code, 0, "{run}");
    project.replace("services.yaml", "            int: 3", "            int: 5");
    let run = project.vergence(&["plan"]);
    assert_eq!(run.code, 0, "{run}");
    let web_prod = run
        .stdout
        .lines()
        .find(|l| l.contains("web") && l.contains("prod"))
        .unwrap_or_else(|| panic!("{run}"));
    assert!(web_prod.contains("cfg-"), "{web_prod}");
    assert!(project.read("deployed/prod/web.txt").contains("replicas=3"));
}
