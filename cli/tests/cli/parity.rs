//! Every command that reads or changes state, run against the local state
//! and through `vergence serve`'s API on that same state: the same stdout
//! (tables and `--output json`) and the same exit codes. Confirmations of
//! a change differ only in who carries it out (`vergence up` here, the
//! server there).

use std::time::Duration;

use crate::common::server::{Server, create_token, instances, remote};
use crate::common::{Project, Run, wait_for};

/// Both ways at once.
struct Both<'a> {
    project: &'a Project,
    server: &'a Server,
    token: &'a str,
}

impl Both<'_> {
    fn local(&self, args: &[&str]) -> Run {
        self.project.vergence(args)
    }

    fn remote(&self, args: &[&str]) -> Run {
        remote(self.project, self.server, self.token, args)
    }

    /// A read prints the same both ways. The server's engine keeps
    /// stepping between two reads (a fetch moves the next check on), so a
    /// remote read matching the local read just before or just after it
    /// counts, and a read that changed in between is taken again.
    fn same_read(&self, args: &[&str]) {
        let mut last = String::new();
        for _ in 0..10 {
            let before = self.local(args);
            let remote = self.remote(args);
            let after = self.local(args);
            assert_eq!(remote.code, 0, "remote {args:?}:\n{remote}");
            assert_eq!(before.code, 0, "local {args:?}:\n{before}");
            if remote.stdout == before.stdout || remote.stdout == after.stdout {
                assert!(!remote.stdout.trim().is_empty(), "{args:?} printed nothing");
                return;
            }
            last = format!("--- local\n{}--- remote\n{}", before.stdout, remote.stdout);
            std::thread::sleep(Duration::from_millis(300));
        }
        panic!("{args:?} reads differently local and remote:\n{last}");
    }

    /// A change confirms the same fact both ways; what follows `; ` says
    /// who carries it out.
    fn same_change(&self, local: Run, remote: Run, args: &[&str]) {
        assert_eq!(local.code, 0, "local {args:?}:\n{local}");
        assert_eq!(remote.code, 0, "remote {args:?}:\n{remote}");
        let fact = |run: &Run| {
            run.stdout
                .lines()
                .map(|l| l.split_once("; ").map_or(l, |(fact, _)| fact).to_owned())
                .collect::<Vec<_>>()
        };
        if !local.stdout.contains("`vergence up`") {
            assert_eq!(local.stdout, remote.stdout, "{args:?}");
            return;
        }
        assert_eq!(fact(&local), fact(&remote), "{args:?}:\n{local}\n{remote}");
        assert!(!remote.stdout.contains("`vergence up`"), "{remote}");
    }

    /// `do_args` then `undo_args`, here then there: each prints the same.
    fn same_round_trip(&self, do_args: &[&str], undo_args: &[&str]) {
        let local_do = self.local(do_args);
        let local_undo = self.local(undo_args);
        let remote_do = self.remote(do_args);
        let remote_undo = self.remote(undo_args);
        self.same_change(local_do, remote_do, do_args);
        self.same_change(local_undo, remote_undo, undo_args);
    }

    /// A refused change: exit 1 both ways, the API's line ending with
    /// what the local one says (after its status and code).
    fn same_refusal(&self, args: &[&str]) {
        let local = self.local(args);
        let remote = self.remote(args);
        assert_eq!(local.code, 1, "local {args:?}:\n{local}");
        assert_eq!(remote.code, 1, "remote {args:?}:\n{remote}");
        let said = local.stderr.trim().trim_start_matches("error: ");
        assert!(
            remote.stderr.trim().ends_with(said),
            "{args:?}: local says {said:?}, remote:\n{remote}"
        );
        assert!(local.stdout.is_empty() && remote.stdout.is_empty());
    }

    /// Waits until the server's engine has every instance converged on
    /// what it wants.
    fn converged(&self) {
        wait_for(
            "every instance to converge",
            Duration::from_secs(60),
            || {
                let status = self.local(&["status", "--output", "json"]);
                let all = instances(&status);
                all.len() == 6
                    && all.iter().all(|i| {
                        i["status"] == "CONVERGED" && i["desiredVersion"] == i["currentVersion"]
                    })
            },
        );
    }

    fn status_of(&self, service: &str, channel: &str) -> serde_json::Value {
        instances(&self.local(&["status", "--output", "json"]))
            .into_iter()
            .find(|i| i["service"] == service && i["releaseChannel"] == channel)
            .unwrap()
    }
}

#[test]
fn every_command_prints_the_same_against_the_local_state_and_through_the_api() {
    let project = Project::quickstart();
    project.up(0);
    let server = Server::start(&project, &[]);
    let admin = create_token(&project, &["admin"]);
    let both = Both {
        project: &project,
        server: &server,
        token: &admin,
    };
    assert_eq!(both.local(&["release", "web", "v2"]).code, 0);
    both.converged();
    let alert = both.local(&["alert", "set", "error-rate", "firing", "--summary", "5xx"]);
    assert_eq!(alert.code, 0, "{alert}");

    for args in [
        &["status"][..],
        &["status", "--output", "json"],
        &["status", "--service", "web"],
        &[
            "status",
            "--app",
            "shop",
            "--release-channel",
            "prod",
            "--output",
            "json",
        ],
        &["events", "--limit", "30"],
        &["events", "--limit", "30", "--output", "json"],
        &[
            "events",
            "--service",
            "web",
            "--release-channel",
            "prod",
            "--limit",
            "5",
        ],
        &["explain", "web", "--release-channel", "prod"],
        &[
            "explain",
            "api",
            "--release-channel",
            "staging",
            "--app",
            "shop",
        ],
        &["alert", "list"],
        &["plan"],
        &["configs", "list", "--app", "shop"],
        &["token", "list", "--app", "shop"],
    ] {
        both.same_read(args);
    }

    both.same_round_trip(
        &["pause", "--app", "shop", "--release-channel", "prod"],
        &["resume", "--app", "shop", "--release-channel", "prod"],
    );
    both.same_round_trip(
        &["pause", "--app", "shop", "--service", "api"],
        &["resume", "--app", "shop", "--service", "api"],
    );
    both.same_round_trip(
        &["pin", "web", "v2", "--release-channel", "prod"],
        &["unpin", "web", "--release-channel", "prod"],
    );
    both.same_round_trip(
        &[
            "alert",
            "set",
            "error-rate",
            "firing",
            "--summary",
            "5xx above 2%",
        ],
        &["alert", "set", "error-rate", "resolved"],
    );
    let push = ["configs", "push", "--app", "shop"];
    both.same_change(both.local(&push), both.remote(&push), &push);
    let push = ["configs", "push", "--validate-only"];
    both.same_change(both.local(&push), both.remote(&push), &push);

    let release = ["release", "web", "v3"];
    both.same_change(both.local(&release), both.remote(&release), &release);
    let approve = [
        "approve",
        "--app",
        "shop",
        "--release-channel",
        "prod",
        "--service",
        "web",
        "--version",
        "v3",
    ];
    both.same_change(both.local(&approve), both.remote(&approve), &approve);
    both.converged();

    // A rollback each way, each once the other was carried out and a new
    // release moved on.
    let rollback = [
        "rollback",
        "web",
        "--release-channel",
        "prod",
        "--version",
        "v2",
    ];
    let local = both.local(&rollback);
    wait_for("the rollback", Duration::from_secs(60), || {
        both.status_of("web", "prod")["status"] == "ROLLED_BACK"
    });
    assert_eq!(both.local(&["release", "web", "v4"]).code, 0);
    both.converged();
    let remote_rollback = both.remote(&rollback);
    both.same_change(local, remote_rollback, &rollback);

    // Refusals exit 1 both ways, saying the same.
    for args in [
        &["pause", "--app", "shop", "--service", "nope"][..],
        &["pin", "web", "v9", "--release-channel", "prod"],
        &["unpin", "web", "--release-channel", "qa"],
        &["explain", "web", "--release-channel", "qa"],
        &["configs", "rollback", "--app", "shop", "--to", "0000000"],
        &["token", "revoke", "0123456789abcdef0123456789abcdef"],
    ] {
        if args[0] == "token" {
            // The API says which application it looked in.
            let local = both.local(args);
            let remote = both.remote(args);
            assert_eq!((local.code, remote.code), (1, 1), "{local}\n{remote}");
            continue;
        }
        both.same_refusal(args);
    }

    // Tokens: made, listed and revoked the same way.
    let create = ["token", "create", "--app", "shop", "--scope", "release"];
    let local = both.local(&create);
    let remote = both.remote(&create);
    let id_of = |run: &Run| {
        assert_eq!(run.code, 0, "{run}");
        run.stdout.trim().split('_').nth(1).unwrap().to_owned()
    };
    let (local_id, remote_id) = (id_of(&local), id_of(&remote));
    assert_eq!(
        local.stderr.replace(&local_id, "ID"),
        remote.stderr.replace(&remote_id, "ID"),
    );
    both.same_read(&["token", "list", "--app", "shop"]);
    let revoked_here = both.local(&["token", "revoke", &remote_id]);
    let revoked_there = both.remote(&["token", "revoke", &local_id]);
    assert_eq!(
        revoked_here.stdout.replace(&remote_id, "ID"),
        revoked_there.stdout.replace(&local_id, "ID"),
    );

    // Config versions: pushed and rolled back the same way.
    project.replace("application.yaml", "# Try a gate", "# Try a gate (edited)");
    let push = ["configs", "push", "--app", "shop"];
    let rollback = ["configs", "rollback", "--app", "shop"];
    let local_push = both.local(&push);
    let local_rollback = both.local(&rollback);
    let remote_push = both.remote(&push);
    let remote_rollback = both.remote(&rollback);
    // Each push and rollback makes a new version of the composed config,
    // whose hash differs: the rest reads the same.
    let hashless = |run: Run| Run {
        stdout: without_hashes(&run.stdout),
        ..run
    };
    both.same_change(hashless(local_push), hashless(remote_push), &push);
    both.same_change(
        hashless(local_rollback),
        hashless(remote_rollback),
        &rollback,
    );
    both.same_read(&["configs", "list", "--app", "shop"]);

    // A plan of an edited config, against the state as it is.
    project.replace(
        "application.yaml",
        "# - manualApproval: {name: prod-gate}",
        "- manualApproval: {name: prod-gate}",
    );
    both.same_read(&["plan"]);
    let plan = both.remote(&["plan"]);
    assert!(
        plan.stdout.contains("shop/api@prod            reconfigure"),
        "the gate reconfigures prod: {plan}"
    );

    let (status, output) = server.stop();
    assert!(status.success(), "serve exited with {status}:\n{output}");
}

#[test]
fn commands_name_the_tokens_application_when_none_is_given() {
    let project = Project::quickstart();
    let server = Server::start(&project, &[]);
    let admin = create_token(&project, &["admin"]);
    let dir = project.path().to_str().unwrap().to_owned();
    assert_eq!(
        remote(&project, &server, &admin, &["configs", "push", &dir]).code,
        0
    );
    // No --app: the token's application.
    let status = remote(&project, &server, &admin, &["status", "--output", "json"]);
    assert_eq!(instances(&status).len(), 6, "{status}");
    let events = remote(&project, &server, &admin, &["events", "--limit", "3"]);
    assert_eq!(events.code, 0, "{events}");
    // An agent's token has no application to default to.
    let agent = project.vergence(&["token", "create", "--agent", "prod-eu"]);
    let agent = agent.stdout.trim().to_owned();
    let refused = remote(&project, &server, &agent, &["status"]);
    assert_eq!(refused.code, 1, "{refused}");
    assert!(
        refused.stderr.contains("--app is required") && refused.stderr.contains("agent prod-eu"),
        "{refused}"
    );
    // Tokens of agents and of the platform are never made through the API.
    for kind in [&["--agent", "prod-us"][..], &["--platform"]] {
        let mut args = vec!["token", "create"];
        args.extend_from_slice(kind);
        let refused = remote(&project, &server, &admin, &args);
        assert_eq!(refused.code, 1, "{refused}");
        assert!(
            refused
                .stderr
                .contains("not made or listed through the API"),
            "{refused}"
        );
    }
    // `serve` is what an endpoint is: it does not run against one.
    let serve = remote(&project, &server, &admin, &["serve"]);
    assert_eq!(serve.code, 1, "{serve}");
    assert!(
        serve.stderr.contains("does not run against --endpoint"),
        "{serve}"
    );
    let (status, output) = server.stop();
    assert!(status.success(), "{output}");
}

/// `config 595782af10: …` as `config HASH: …`.
fn without_hashes(text: &str) -> String {
    text.split("config ")
        .enumerate()
        .map(|(i, part)| match (i, part.split_once(':')) {
            (0, _) | (_, None) => part.to_owned(),
            (_, Some((hash, rest))) if hash.chars().all(|c| c.is_ascii_hexdigit()) => {
                format!("HASH:{rest}")
            }
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("config ")
}
