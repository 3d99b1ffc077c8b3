//! What `vergence` reads from a config directory that is not ordinary
//! files: devices, FIFOs, sockets, links that leave the directory and
//! directory loops. A pull request to a config repository can put any of
//! them there, and the CI runner that validates it must neither hang nor
//! run out of memory. Each test runs the real binary with a bounded wait
//! (a hang is the failure looked for) and asserts the refusal names the
//! file and why, and that nothing was stored.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::{Project, Run, finish, vergence_bin};

/// Long enough for a slow machine, far shorter than a hang.
const BOUND: Duration = Duration::from_secs(60);

/// The address space the binary may use in these tests (`ulimit -v`, KiB):
/// reading `/dev/zero` to the end would need all of memory, this is
/// enough for everything else it does.
const ADDRESS_SPACE_KIB: u64 = 2 * 1024 * 1024;

/// `vergence ARGS --config <project>`, in bounded memory, killed (and the
/// test failed) if it does not end within [`BOUND`].
fn vergence(project: &Project, args: &[&str]) -> Run {
    let child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(vergence_bin())
        .args(args)
        .arg("--config")
        .arg(project.path())
        .current_dir(project.path())
        .env_remove("RUST_LOG")
        .env_remove("VERGENCE_ENDPOINT")
        .env_remove("VERGENCE_TOKEN")
        .env_remove("VERGENCE_WEBHOOK_SECRET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start vergence");
    finish(child, BOUND, &format!("vergence {}", args.join(" ")))
}

fn symlink(target: impl AsRef<Path>, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

/// Asserts `run` refused the config naming `file` and giving `reason`, and
/// that no state was made.
fn assert_refused(project: &Project, run: &Run, file: &str, reason: &str) {
    assert_eq!(run.code, 1, "{run}");
    let line = run
        .stderr
        .lines()
        .find(|line| line.contains(file))
        .unwrap_or_else(|| panic!("no error names {file}:\n{run}"));
    assert!(line.contains(reason), "expected {reason:?} in {line:?}");
    assert!(
        !project.file(".vergence/state.db").exists(),
        "a refused config made a state:\n{run}"
    );
}

#[test]
fn a_link_to_dev_zero_is_refused_at_once_in_bounded_memory() {
    let project = Project::quickstart();
    symlink("/dev/zero", &project.file("z.yaml"));
    for command in [
        &["validate"][..],
        &["validate", "--allow-external-links"],
        &["up"],
        &["plan"],
    ] {
        let run = vergence(&project, command);
        assert_refused(
            &project,
            &run,
            "z.yaml",
            "a character device, not a regular file",
        );
    }
}

#[test]
fn a_fifo_is_refused_without_waiting_for_a_writer() {
    let project = Project::quickstart();
    let made = Command::new("mkfifo")
        .arg(project.file("f.yaml"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let run = vergence(&project, &["validate"]);
    assert_refused(&project, &run, "f.yaml", "is a FIFO, not a regular file");
    // Nor as a *.json file a service may name.
    std::fs::remove_file(project.file("f.yaml")).unwrap();
    let made = Command::new("mkfifo")
        .arg(project.file("scripts/task.json"))
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo");
    let run = vergence(&project, &["up"]);
    assert_refused(&project, &run, "task.json", "is a FIFO, not a regular file");
}

#[test]
fn sockets_and_devices_are_refused() {
    let project = Project::quickstart();
    let _listener = std::os::unix::net::UnixListener::bind(project.file("s.yaml")).unwrap();
    let run = vergence(&project, &["validate"]);
    assert_refused(&project, &run, "s.yaml", "is a socket, not a regular file");

    let project = Project::quickstart();
    symlink("/dev/null", &project.file("null.yml"));
    let run = vergence(&project, &["validate"]);
    assert_refused(
        &project,
        &run,
        "null.yml",
        "a character device, not a regular file",
    );
}

/// A service document kept outside the config directory.
fn outside_service() -> tempfile::TempDir {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        outside.path().join("extra.yaml"),
        "service:\n  name: extra\n  runtime: files-apply-only\n  custom:\n    parameterValues:\n      - {name: service, string: extra}\n",
    )
    .unwrap();
    outside
}

#[test]
fn links_leaving_the_config_directory_need_allow_external_links() {
    // A file link and a directory link, each leaving the directory.
    let outside = outside_service();
    let file_link = Project::quickstart();
    symlink(
        outside.path().join("extra.yaml"),
        &file_link.file("extra.yaml"),
    );
    let dir_link = Project::quickstart();
    symlink(outside.path(), &dir_link.file("shared"));
    for (project, name) in [(&file_link, "extra.yaml"), (&dir_link, "shared")] {
        for command in [
            &["validate"][..],
            &["plan"],
            &["up"],
            &["configs", "push", "--validate-only"],
        ] {
            let run = vergence(project, command);
            assert_refused(project, &run, name, "outside the config directory");
            assert!(run.stderr.contains("--allow-external-links"), "{run}");
        }
        let run = vergence(project, &["validate", "--allow-external-links"]);
        assert_eq!(run.code, 0, "{run}");
        assert!(
            run.stdout
                .contains("config is valid: 1 application(s), 3 runtime(s), 8 service instance(s)"),
            "the outside service is read with the flag:\n{run}"
        );
        let run = vergence(
            project,
            &[
                "configs",
                "push",
                "--validate-only",
                "--allow-external-links",
            ],
        );
        assert_eq!(run.code, 0, "{run}");
    }
}

#[test]
fn links_inside_the_config_directory_are_read() {
    let project = Project::quickstart();
    // The runtimes kept in a hidden directory, reached through links: a
    // relative file link and a directory link.
    std::fs::create_dir(project.file(".shared")).unwrap();
    std::fs::rename(
        project.file("runtimes.yaml"),
        project.file(".shared/runtimes.yaml"),
    )
    .unwrap();
    symlink(".shared/runtimes.yaml", &project.file("runtimes.yaml"));
    std::fs::create_dir(project.file(".more")).unwrap();
    std::fs::write(
        project.file(".more/extra.yaml"),
        "service:\n  name: extra\n  runtime: files-apply-only\n  custom:\n    parameterValues:\n      - {name: service, string: extra}\n",
    )
    .unwrap();
    symlink(project.file(".more"), &project.file("more"));
    let run = vergence(&project, &["validate"]);
    assert_eq!(run.code, 0, "{run}");
    assert!(
        run.stdout.contains("3 runtime(s), 8 service instance(s)"),
        "{run}"
    );
}

#[test]
fn directory_link_loops_are_refused_not_followed() {
    let project = Project::quickstart();
    // Two links back to the top: followed blindly, 2^40 paths.
    symlink(".", &project.file("loop-a"));
    symlink("..", &project.file("scripts/loop-b"));
    let run = vergence(&project, &["validate"]);
    assert_refused(&project, &run, "loop-a", "a loop");
}

#[test]
fn a_config_with_thousands_of_errors_lists_the_first_hundred_and_counts_the_rest() {
    let project = Project::quickstart();
    let mut text = String::new();
    for n in 0..3000 {
        text.push_str(&format!(
            "---\nservice:\n  name: svc{n}\n  runtime: no-such-runtime\n"
        ));
    }
    project.write("broken.yaml", &text);
    let run = vergence(&project, &["validate"]);
    assert_eq!(run.code, 1, "{run}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    let listed = lines
        .iter()
        .filter(|line| line.starts_with("broken.yaml:"))
        .count();
    assert_eq!(listed, 100, "{run}");
    let total: usize = lines
        .last()
        .and_then(|line| line.strip_suffix(" error(s); nothing was stored"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count:\n{run}"));
    assert!(total >= 3000, "{run}");
    assert_eq!(
        lines[lines.len() - 2],
        format!("… and {} more error(s), not listed", total - 100),
        "{run}"
    );
}

#[test]
fn file_names_an_api_would_refuse_are_refused_before_sending() {
    use std::os::unix::ffi::OsStrExt;
    for (name, reason) in [
        (&b"a\nb.yaml"[..], "U+000A"),
        ("a\u{202E}lmay.yaml".as_bytes(), "U+202E"),
        ("a\u{200B}.yaml".as_bytes(), "U+200B"),
        (b"a\\b.yaml", "use '/'"),
        // Not UTF-8: kept as U+FFFD, which no API accepts either.
        (b"a\xffb.yaml", "U+FFFD"),
    ] {
        let project = Project::quickstart();
        std::fs::write(
            project.path().join(std::ffi::OsStr::from_bytes(name)),
            "# nothing\n",
        )
        .unwrap();
        let run = vergence(&project, &["validate"]);
        assert_eq!(run.code, 1, "{run}");
        assert!(
            run.stderr.contains(reason) && run.stderr.contains("a"),
            "{name:?}: expected {reason:?}:\n{run}"
        );
        // The name is shown escaped, never as it is.
        assert!(
            !run.stderr.contains('\u{202E}') && run.stderr.lines().count() == 1,
            "{run}"
        );
    }
}
