//! Per-application configs through `vergence serve`, with the real binary:
//! a platform token pushes the whole config, an application's admin pushes
//! its own part (and only that), lists its versions and rolls back, and the
//! other application's audit trail does not move.

use crate::common::server::{Server, create_app_token, remote};
use crate::common::{Project, Run};

/// A second application beside the quickstart's shop, in its own folder.
const BLOG: &str = "\
application:
  name: blog
  releaseChannels:
    - name: live
      runtimes:
        - runtime: blog-files
        - runtime: notify
---
runtime:
  name: blog-files
  apply:
    taskConfig:
      program:
        cmd: [./scripts/migrate.sh, site]
---
service:
  application: blog
  name: site
  runtime: blog-files
";

/// A runtime shop and blog both use: the platform's part.
const NOTIFY: &str = "\
runtime:
  name: notify
  apply:
    taskConfig:
      program:
        cmd: [./scripts/migrate.sh, notify]
";

const CART: &str = "\
---
service:
  application: shop
  name: cart
  runtime: files-apply-only
  custom:
    parameterValues:
      - name: service
        string: cart
";

/// The quickstart (shop), blog/ and shared/ in one repository.
fn monorepo() -> Project {
    let project = Project::quickstart();
    let services = project.read("services.yaml");
    project.write(
        "services.yaml",
        &services.replace(
            "service:\n  name: ",
            "service:\n  application: shop\n  name: ",
        ),
    );
    let application = project.read("application.yaml");
    project.write(
        "application.yaml",
        &application.replace(
            "        - runtime: files-structured\n",
            "        - runtime: files-structured\n        - runtime: notify\n",
        ),
    );
    project.write("blog/blog.yaml", BLOG);
    project.write("shared/notify.yaml", NOTIFY);
    project
}

fn platform_token(project: &Project) -> String {
    let run = project.vergence(&["token", "create", "--platform"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(run.stderr.contains("for the platform"), "{run}");
    run.stdout.trim().to_owned()
}

fn config_events(project: &Project, server: &Server, token: &str, app: &str) -> usize {
    let run = remote(
        project,
        server,
        token,
        &[
            "events", "--app", app, "--output", "json", "--limit", "10000",
        ],
    );
    assert_eq!(run.code, 0, "{run}");
    run.stdout.matches("\"configApplied\"").count()
}

fn push(project: &Project, server: &Server, token: &str, app: Option<&str>) -> Run {
    let dir = project.path().to_str().unwrap().to_owned();
    let mut args = vec!["configs", "push", dir.as_str()];
    if let Some(app) = app {
        args.extend(["--app", app]);
    }
    remote(project, server, token, &args)
}

#[test]
fn an_applications_admin_pushes_lists_and_rolls_back_its_own_part() {
    let project = monorepo();
    let platform = platform_token(&project);
    let shop = create_app_token(&project, "shop", &["admin"]);
    let blog = create_app_token(&project, "blog", &["admin"]);
    let server = Server::start(&project, &[]);

    // Only the platform may push a config of two applications and a
    // shared runtime at once.
    let refused = push(&project, &server, &shop, None);
    assert_ne!(refused.code, 0, "{refused}");
    assert!(
        refused
            .stderr
            .contains("the platform part (shared/notify.yaml, used by blog and shop)"),
        "{refused}"
    );
    let pushed = push(&project, &server, &platform, None);
    assert_eq!(pushed.code, 0, "{pushed}");
    assert!(pushed.stdout.contains("7 instance(s) added"), "{pushed}");
    let blog_configs = config_events(&project, &server, &blog, "blog");

    // shop's admin adds a service to shop's part; blog is left alone.
    let services = project.read("services.yaml");
    project.write("services.yaml", &format!("{services}{CART}"));
    let pushed = push(&project, &server, &shop, Some("shop"));
    assert_eq!(pushed.code, 0, "{pushed}");
    assert!(
        pushed.stdout.contains("changed application shop's part")
            && pushed
                .stdout
                .contains("2 instance(s) added, 0 updated, 0 removed"),
        "{pushed}"
    );
    assert_eq!(
        config_events(&project, &server, &blog, "blog"),
        blog_configs
    );

    // The shared runtime and blog's files are not shop's to change.
    project.replace("shared/notify.yaml", "notify]", "notify, --loud]");
    let refused = push(&project, &server, &shop, Some("shop"));
    assert_ne!(refused.code, 0, "{refused}");
    assert!(
        refused
            .stderr
            .contains("the platform part (shared/notify.yaml, used by blog and shop)"),
        "{refused}"
    );
    project.write("shared/notify.yaml", NOTIFY);
    project.replace("blog/blog.yaml", "name: site", "name: site2");
    let refused = push(&project, &server, &shop, Some("shop"));
    assert_ne!(refused.code, 0, "{refused}");
    assert!(
        refused
            .stderr
            .contains("application blog's part (blog/blog.yaml)"),
        "{refused}"
    );
    project.write("blog/blog.yaml", BLOG);

    // Two versions of shop's part; blog's admin cannot see or roll them.
    let listed = remote(
        &project,
        &server,
        &shop,
        &["configs", "list", "--app", "shop"],
    );
    assert_eq!(listed.code, 0, "{listed}");
    let rows: Vec<&str> = listed.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 2, "{listed}");
    assert!(
        rows[0].contains("(in force)") && rows[0].contains("api:token-"),
        "{listed}"
    );
    let refused = remote(
        &project,
        &server,
        &blog,
        &["configs", "rollback", "--app", "shop"],
    );
    assert_ne!(refused.code, 0, "{refused}");
    assert!(refused.stderr.contains("not shop"), "{refused}");

    // Rolling shop back removes cart again, and leaves blog as it was.
    let rolled = remote(
        &project,
        &server,
        &shop,
        &["configs", "rollback", "--app", "shop"],
    );
    assert_eq!(rolled.code, 0, "{rolled}");
    assert!(
        rolled
            .stdout
            .contains("rolled application shop's config back")
            && rolled
                .stdout
                .contains("0 instance(s) added, 0 updated, 2 removed"),
        "{rolled}"
    );
    assert_eq!(
        config_events(&project, &server, &blog, "blog"),
        blog_configs
    );
    let listed = remote(
        &project,
        &server,
        &platform,
        &["configs", "list", "--app", "shop"],
    );
    assert_eq!(listed.stdout.lines().count(), 4, "{listed}");

    // The platform token changes the shared runtime, and nothing else.
    project.replace("shared/notify.yaml", "notify]", "notify, --loud]");
    let pushed = push(&project, &server, &platform, None);
    assert_eq!(pushed.code, 0, "{pushed}");
    let status = remote(&project, &server, &platform, &["status", "--app", "shop"]);
    assert_ne!(status.code, 0, "{status}");
    assert!(
        status.stderr.contains("belongs to the platform"),
        "{status}"
    );
}
