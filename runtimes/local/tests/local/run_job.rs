//! `run_job` against real processes: working directory, environment, exit
//! codes, output capture, secrets, timeouts, start failures and artifacts.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{artifacts, content, is_running, job, read, running_in_group, script, stored};
use jiff::SignedDuration;
use vergence_model::{JobOutcome, JobResult, SecretRef};
use vergence_runner_local::run_job;

fn not_started_message(result: &JobResult) -> &str {
    match &result.outcome {
        JobOutcome::NotStarted { message, .. } => message,
        other => panic!("expected NotStarted, got {other:?}: {result:?}"),
    }
}

#[tokio::test]
async fn runs_in_the_working_directory_with_the_job_environment() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("services/api");
    std::fs::create_dir_all(&dir).unwrap();
    script(
        &dir,
        "deploy.sh",
        r#"pwd > seen
echo "VERGENCE_SERVICE=$VERGENCE_SERVICE" >> seen
echo "PVN_SERVICE_ID=$PVN_SERVICE_ID" >> seen
echo "VERGENCE_SERVICE_VERSION=$VERGENCE_SERVICE_VERSION" >> seen
echo "VERGENCE_JOB_ID=$VERGENCE_JOB_ID" >> seen
echo "PVN_RELEASE_CHANNEL=$PVN_RELEASE_CHANNEL" >> seen
echo "REGION=$REGION" >> seen
echo "INPUT=${VERGENCE_INPUT_DIR-unset}" >> seen
test -d "$VERGENCE_OUTPUT_DIR"
echo "$VERGENCE_OUTPUT_DIR" > output_dir"#,
    );
    let mut job = job(root.path(), &["./deploy.sh"]);
    std::sync::Arc::make_mut(&mut job.spec).working_dir = "services/api".into();
    std::sync::Arc::make_mut(&mut job.spec)
        .env
        .insert("REGION".into(), "eu-west-1".into());
    // The context variables win over a job's own env.
    std::sync::Arc::make_mut(&mut job.spec)
        .env
        .insert("VERGENCE_SERVICE".into(), "fake".into());

    let result = run_job(&job, artifacts().as_ref()).await;

    assert!(result.exited_with(0), "{result:?}");
    let seen = read(dir.join("seen"));
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(
        Path::new(lines[0]).canonicalize().unwrap(),
        dir.canonicalize().unwrap()
    );
    assert_eq!(
        lines[1..],
        [
            "VERGENCE_SERVICE=api",
            "PVN_SERVICE_ID=svc-id-1",
            "VERGENCE_SERVICE_VERSION=v42",
            "VERGENCE_JOB_ID=job-1",
            "PVN_RELEASE_CHANNEL=staging",
            "REGION=eu-west-1",
            "INPUT=unset",
        ]
    );
    let output_dir = read(dir.join("output_dir"));
    assert!(
        !Path::new(output_dir.trim()).exists(),
        "the output directory is removed after the job"
    );
}

#[tokio::test]
async fn reports_exit_codes_and_stdout() {
    let root = tempfile::tempdir().unwrap();
    for code in [0, 2, 7] {
        let name = format!("exit{code}.sh");
        script(root.path(), &name, &format!("echo out-{code}\nexit {code}"));
        let result = run_job(
            &job(root.path(), &[&format!("./{name}")]),
            artifacts().as_ref(),
        )
        .await;
        assert_eq!(result.outcome, JobOutcome::Exited, "{result:?}");
        assert_eq!(result.exit_code, Some(code));
        assert_eq!(result.stdout, format!("out-{code}\n"));
        assert!(result.finished_at <= jiff::Timestamp::now());
    }
}

#[tokio::test]
async fn keeps_the_end_of_a_long_stderr() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "noisy.sh",
        "head -c 100000 /dev/zero | tr '\\0' x >&2\necho >&2\necho 'LAST LINE' >&2\necho done",
    );
    let result = run_job(&job(root.path(), &["./noisy.sh"]), artifacts().as_ref()).await;
    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, "done\n");
    assert!(result.stderr_tail.len() <= JobResult::STDERR_TAIL);
    assert!(result.stderr_tail.len() > 4000);
    assert!(result.stderr_tail.starts_with("xxx"));
    assert!(result.stderr_tail.ends_with("x\nLAST LINE\n"));
}

#[tokio::test]
async fn truncates_a_huge_stdout_without_blocking_the_process() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "chatty.sh",
        "head -c 3000000 /dev/zero | tr '\\0' a\necho finished >&2",
    );
    let result = run_job(&job(root.path(), &["./chatty.sh"]), artifacts().as_ref()).await;
    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout.len(), JobResult::MAX_STDOUT);
    assert!(result.stdout.bytes().all(|b| b == b'a'));
    assert_eq!(result.stderr_tail, "finished\n");
}

#[tokio::test]
async fn truncation_never_splits_a_character() {
    let root = tempfile::tempdir().unwrap();
    // Three-byte characters: neither limit is a multiple of 3, so both cuts
    // fall inside a character.
    std::fs::write(root.path().join("euros"), "€".repeat(400_000)).unwrap();
    script(root.path(), "euros.sh", "cat euros\ncat euros >&2");
    let result = run_job(&job(root.path(), &["./euros.sh"]), artifacts().as_ref()).await;
    assert!(result.exited_with(0), "{result:?}");
    assert!(result.stdout.len() > JobResult::MAX_STDOUT - 3);
    assert!(result.stdout.chars().all(|c| c == '€'));
    assert!(result.stderr_tail.len() > JobResult::STDERR_TAIL - 3);
    assert!(result.stderr_tail.chars().all(|c| c == '€'));
}

#[tokio::test]
async fn resolves_a_relative_program_against_the_working_directory() {
    let root = tempfile::tempdir().unwrap();
    let tools = root.path().join("infra/tools");
    std::fs::create_dir_all(&tools).unwrap();
    script(&tools, "apply.sh", "echo applied");
    let cwd = std::env::current_dir().unwrap();
    assert!(!cwd.join("tools/apply.sh").exists());
    assert_ne!(
        cwd.canonicalize().unwrap(),
        root.path().canonicalize().unwrap()
    );

    let mut job = job(root.path(), &["./tools/apply.sh"]);
    std::sync::Arc::make_mut(&mut job.spec).working_dir = "infra".into();
    let result = run_job(&job, artifacts().as_ref()).await;

    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, "applied\n");
}

#[tokio::test]
async fn without_a_workspace_root_runs_in_the_current_directory() {
    let mut job = job(
        Path::new("/"),
        &["sh", "-c", "pwd > \"$VERGENCE_OUTPUT_DIR/pwd\""],
    );
    job.workspace_root = None;
    std::sync::Arc::make_mut(&mut job.spec).outputs = vec!["pwd".into()];
    let result = run_job(&job, artifacts().as_ref()).await;
    assert!(result.exited_with(0), "{result:?}");
    let pwd = String::from_utf8(content(&result.outputs[0]).await).unwrap();
    assert_eq!(
        Path::new(pwd.trim()).canonicalize().unwrap(),
        std::env::current_dir().unwrap().canonicalize().unwrap()
    );
}

#[tokio::test]
async fn passes_secrets_from_the_runner_environment() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "secret.sh",
        "printf '%s' \"$DEPLOY_TOKEN\" > token",
    );
    // Tests cannot set variables (the crate forbids unsafe code), so the
    // secret comes from one every test process has.
    let expected = std::env::var("PATH").unwrap();
    assert!(std::env::var_os("DEPLOY_TOKEN").is_none());
    let mut job = job(root.path(), &["./secret.sh"]);
    std::sync::Arc::make_mut(&mut job.spec)
        .secret_env
        .insert("DEPLOY_TOKEN".into(), SecretRef::FromEnv("PATH".into()));

    let result = run_job(&job, artifacts().as_ref()).await;

    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(read(root.path().join("token")), expected);
}

#[tokio::test]
async fn a_secret_the_job_prints_is_masked_in_its_result() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "leak.sh",
        "echo \"token is $DEPLOY_TOKEN\"\necho \"Error: auth with $DEPLOY_TOKEN refused\" >&2\nexit 1",
    );
    // The secret comes from a variable every test process has (see above).
    let secret = std::env::var("PATH").unwrap();
    let mut job = job(root.path(), &["./leak.sh"]);
    std::sync::Arc::make_mut(&mut job.spec)
        .secret_env
        .insert("DEPLOY_TOKEN".into(), SecretRef::FromEnv("PATH".into()));

    let result = run_job(&job, artifacts().as_ref()).await;

    assert!(result.exited_with(1), "{result:?}");
    assert_eq!(result.stdout, "token is ***\n");
    assert!(
        result.stderr_tail.contains("auth with *** refused"),
        "{result:?}"
    );
    assert!(!format!("{result:?}").contains(&secret));
    assert!(!result.describe().contains(&secret));
}

#[tokio::test]
async fn a_missing_secret_stops_the_job_before_it_starts() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "secret.sh", "touch ran");
    let mut job = job(root.path(), &["./secret.sh"]);
    std::sync::Arc::make_mut(&mut job.spec).secret_env.insert(
        "DEPLOY_TOKEN".into(),
        SecretRef::FromEnv("VERGENCE_TEST_NEVER_SET_4711".into()),
    );

    let result = run_job(&job, artifacts().as_ref()).await;

    let message = not_started_message(&result);
    assert!(
        message.contains("VERGENCE_TEST_NEVER_SET_4711"),
        "{message}"
    );
    assert!(message.contains("DEPLOY_TOKEN"), "{message}");
    assert!(!root.path().join("ran").exists());
}

/// A script whose process group has a background child; both record pids.
const WAITS_FOREVER: &str = "echo $$ > leader\nsleep 1000 &\necho $! > background\nsleep 1000";

fn pid(path: impl AsRef<Path>) -> i32 {
    read(path).trim().parse().unwrap()
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "hang.sh", WAITS_FOREVER);
    let mut job = job(root.path(), &["./hang.sh"]);
    std::sync::Arc::make_mut(&mut job.spec).timeout = SignedDuration::from_secs(1);

    let started = Instant::now();
    let result = run_job(&job, artifacts().as_ref()).await;
    let elapsed = started.elapsed();

    assert_eq!(result.outcome, JobOutcome::TimedOut, "{result:?}");
    assert_eq!(result.exit_code, None);
    assert!(elapsed >= Duration::from_secs(1), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(4), "{elapsed:?}");
    let (leader, background) = (
        pid(root.path().join("leader")),
        pid(root.path().join("background")),
    );
    assert!(!is_running(leader));
    assert!(!is_running(background));
    assert_eq!(running_in_group(leader), Vec::<i32>::new());
}

#[tokio::test]
async fn a_group_ignoring_sigterm_is_killed_after_the_grace_period() {
    let root = tempfile::tempdir().unwrap();
    // Ignored signals stay ignored in the children the script starts.
    script(
        root.path(),
        "stubborn.sh",
        &format!("trap '' TERM\n{WAITS_FOREVER}"),
    );
    let mut job = job(root.path(), &["./stubborn.sh"]);
    std::sync::Arc::make_mut(&mut job.spec).timeout = SignedDuration::from_secs(1);

    let started = Instant::now();
    let result = run_job(&job, artifacts().as_ref()).await;
    let elapsed = started.elapsed();

    assert_eq!(result.outcome, JobOutcome::TimedOut, "{result:?}");
    assert!(elapsed >= Duration::from_secs(6), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    assert!(result.stderr_tail.contains("SIGKILL"), "{result:?}");
    let leader = pid(root.path().join("leader"));
    assert!(!is_running(pid(root.path().join("background"))));
    assert_eq!(running_in_group(leader), Vec::<i32>::new());
}

#[tokio::test]
async fn a_background_child_holding_the_output_does_not_hold_up_the_result() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "daemon.sh",
        "sleep 1000 &\necho $! > background\necho started",
    );

    let started = Instant::now();
    let result = run_job(&job(root.path(), &["./daemon.sh"]), artifacts().as_ref()).await;
    let elapsed = started.elapsed();

    // What it left in the background ends with it, and the pipe with that.
    let background = pid(root.path().join("background"));
    assert!(
        !is_running(background),
        "the background child outlived its job"
    );
    assert!(result.exited_with(0), "{result:?}");
    assert_eq!(result.stdout, "started\n");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test]
async fn a_daemon_left_by_a_successful_job_is_ended_with_its_group() {
    let root = tempfile::tempdir().unwrap();
    // Its output closed, as a daemon's is: nothing holds the job's pipes.
    script(
        root.path(),
        "daemon.sh",
        "echo $$ > leader\nsleep 1000 </dev/null >/dev/null 2>&1 &\necho $! > background\necho deployed\nexit 0",
    );

    let result = run_job(&job(root.path(), &["./daemon.sh"]), artifacts().as_ref()).await;

    assert!(result.exited_with(0), "{result:?}");
    let (leader, background) = (
        pid(root.path().join("leader")),
        pid(root.path().join("background")),
    );
    let left = is_running(background);
    if left {
        // Not left behind by the test either.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(background),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(!left, "the daemon {background} outlived its job");
    assert_eq!(running_in_group(leader), Vec::<i32>::new());
    assert!(
        result
            .stderr_tail
            .contains("left processes running in the background"),
        "the result says what was ended: {result:?}"
    );
}

#[tokio::test]
async fn a_process_killed_by_a_signal_says_so() {
    let root = tempfile::tempdir().unwrap();
    script(root.path(), "suicide.sh", "echo bye >&2\nkill -9 $$");
    let result = run_job(&job(root.path(), &["./suicide.sh"]), artifacts().as_ref()).await;
    assert_eq!(result.outcome, JobOutcome::Exited, "{result:?}");
    assert_eq!(result.exit_code, None);
    assert_eq!(result.stderr_tail, "bye\nkilled by signal 9 (SIGKILL)\n");
}

#[tokio::test]
async fn programs_that_cannot_start_are_reported_as_not_started() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().display().to_string();

    let missing = run_job(&job(root.path(), &["./deploy.sh"]), artifacts().as_ref()).await;
    let message = not_started_message(&missing);
    assert!(
        message.starts_with("cannot run ./deploy.sh in "),
        "{message}"
    );
    assert!(message.contains(&dir), "{message}");
    assert!(message.contains("No such file or directory"), "{message}");

    let not_on_path = run_job(
        &job(root.path(), &["vergence-no-such-program"]),
        artifacts().as_ref(),
    )
    .await;
    assert!(not_started_message(&not_on_path).contains("vergence-no-such-program"));

    std::fs::write(root.path().join("plain.sh"), "echo hi\n").unwrap();
    let not_executable = run_job(&job(root.path(), &["./plain.sh"]), artifacts().as_ref()).await;
    let message = not_started_message(&not_executable);
    assert!(message.contains("./plain.sh"), "{message}");
    assert!(message.contains("Permission denied"), "{message}");

    let empty = run_job(&job(root.path(), &[]), artifacts().as_ref()).await;
    assert!(not_started_message(&empty).contains("no command"));

    let mut no_dir = job(root.path(), &["./deploy.sh"]);
    std::sync::Arc::make_mut(&mut no_dir.spec).working_dir = "missing".into();
    let message = run_job(&no_dir, artifacts().as_ref()).await;
    assert!(not_started_message(&message).contains("missing"));

    let mut no_time = job(root.path(), &["true"]);
    std::sync::Arc::make_mut(&mut no_time.spec).timeout = SignedDuration::ZERO;
    assert!(
        not_started_message(&run_job(&no_time, artifacts().as_ref()).await).contains("timeout")
    );
}

#[tokio::test]
async fn hands_inputs_in_and_declared_outputs_back() {
    let root = tempfile::tempdir().unwrap();
    script(
        root.path(),
        "plan.sh",
        r#"echo "$VERGENCE_INPUT_DIR" > input_dir
cp "$VERGENCE_INPUT_DIR/plan.bin" "$VERGENCE_OUTPUT_DIR/plan-copy.bin"
cat "$VERGENCE_INPUT_DIR/notes.txt" > "$VERGENCE_OUTPUT_DIR/notes"
head -c 5000000 /dev/zero > "$VERGENCE_OUTPUT_DIR/huge"
echo undeclared > "$VERGENCE_OUTPUT_DIR/other""#,
    );
    let plan = stored("plan.bin", &[0, 1, 2, 255]).await;
    let mut job = job(root.path(), &["./plan.sh"]);
    job.inputs = vec![plan.clone(), stored("notes.txt", b"hello").await];
    std::sync::Arc::make_mut(&mut job.spec).outputs =
        ["plan-copy.bin", "notes", "huge", "never-written"]
            .map(String::from)
            .to_vec();

    let result = run_job(&job, artifacts().as_ref()).await;

    assert!(result.exited_with(0), "{result:?}");
    let names: Vec<&str> = result.outputs.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["plan-copy.bin", "notes"]);
    assert_eq!(result.outputs[0].sha256, plan.sha256);
    assert_eq!(content(&result.outputs[0]).await, [0, 1, 2, 255]);
    assert_eq!(content(&result.outputs[1]).await, b"hello");
    assert_eq!(
        result.stderr_tail,
        "output huge larger than 4 MiB was dropped\n"
    );
    let input_dir = read(root.path().join("input_dir"));
    assert!(!Path::new(input_dir.trim()).exists());
}

#[tokio::test]
async fn an_input_with_a_path_for_a_name_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let mut job = job(root.path(), &["true"]);
    // Stored under a plain key; it is the name that would escape the input
    // directory.
    let mut escaping = stored("escape", b"x").await;
    escaping.name = "../escape".into();
    job.inputs = vec![escaping];
    let result = run_job(&job, artifacts().as_ref()).await;
    assert!(not_started_message(&result).contains("../escape"));
}
