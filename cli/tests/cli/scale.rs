//! Scale: 1,000 apply-only instances (500 services × staging → prod) driven
//! through the local runner by the real binary. It takes a few seconds even
//! in a debug build, so it runs by default; see the time with
//!
//! ```sh
//! cargo test -p vergence-cli --test cli scale:: -- --nocapture
//! ```

use std::fmt::Write as _;
use std::time::Instant;

use crate::common::Project;

const SERVICES: usize = 500;

#[test]
fn one_thousand_apply_only_instances_converge_through_the_local_runner() {
    let project = Project::empty();
    let mut config = String::from(
        r#"runtime:
  name: touch
  apply:
    taskConfig:
      program:
        cmd: [sh, -c, 'echo "$VERGENCE_SERVICE_VERSION" > "out/$VERGENCE_RELEASE_CHANNEL-$VERGENCE_SERVICE"']
---
application:
  name: fleet
  releaseChannels:
    - name: staging
      runtimes: [{runtime: touch}]
    - name: prod
      runtimes: [{runtime: touch}]
      preconditions: [{releaseChannelStable: {releaseChannel: staging}}]
"#,
    );
    for i in 0..SERVICES {
        write!(
            config,
            "---\nservice:\n  name: svc-{i:04}\n  runtime: touch\n"
        )
        .unwrap();
    }
    project.write("vergence.yaml", &config);
    std::fs::create_dir_all(project.file("out")).unwrap();

    let started = Instant::now();
    let run = project.vergence(&["up", "--max-jobs", "64"]);
    let first = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let written = std::fs::read_dir(project.file("out")).unwrap().count();
    assert_eq!(written, SERVICES * 2, "every instance applied once");
    let converged = project
        .status()
        .iter()
        .filter(|i| i["status"] == "CONVERGED")
        .count();
    assert_eq!(converged, SERVICES * 2);

    let started = Instant::now();
    let run = project.vergence(&["up"]);
    let rerun = started.elapsed();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(project.applies(), SERVICES * 2, "a rerun applies nothing");

    println!(
        "{} apply-only instances: converged from scratch in {:.2}s ({:.1} instances/s); idle rerun {:.2}s",
        SERVICES * 2,
        first.as_secs_f64(),
        (SERVICES * 2) as f64 / first.as_secs_f64(),
        rerun.as_secs_f64()
    );
}
