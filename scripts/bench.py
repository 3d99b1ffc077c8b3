#!/usr/bin/env python3
"""Vergence's performance benchmarks: every row of docs/performance.md,
measured now and printed next to its target.

    scripts/bench.py             the full run (release builds, ~30-40 min)
    scripts/bench.py --smoke     CI's run: small inputs, debug builds, 1 run
    scripts/bench.py --only local_up idle_rerun   chosen rows

Ratios are measured side by side in one run (A B A B ...) and the median
of the pairwise ratios is quoted, so a machine that speeds up or slows down
during the run does not skew them. Request counts and job rows come from
tests that also assert them (tests/tests/e2e/serverless.rs), which print a
`BENCH name key=value ...` line read here.

Only the standard library: it runs on a fresh machine with python3.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "target" / "bench" / "report.md"
# `vergence up`'s default --max-jobs: the baseline gets the same parallelism.
PARALLEL = 32


@dataclass
class Row:
    what: str
    measured: str
    target: str
    met: bool | None  # None: not comparable (smoke mode, skipped)
    notes: list[str] = field(default_factory=list)


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    say("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, cwd=kwargs.pop("cwd", ROOT), **kwargs)


NO_BUILD = False

# Smoke mode uses the debug build `cargo test --workspace` just made. The
# same selection resolves the same features; `-p <one package>` would
# resolve fewer and rebuild the SDKs with them.
SMOKE_BUILD = ["--workspace", "--all-targets"]


def cargo_build(args: list[str]) -> None:
    if NO_BUILD:
        say("not building (--no-build): cargo build " + " ".join(args))
        return
    run(["cargo", "build", "--locked", "-q", *args])


# --- timing ------------------------------------------------------------------


@dataclass
class Timed:
    wall: float
    cpu: float  # user + sys of the process and its reaped children
    max_rss_kb: int


def timed(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> Timed:
    """Runs `cmd` once and returns its wall time and the CPU time and peak
    RSS the kernel accounted to it (wait4's rusage)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    stderr = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise SystemExit(
            f"bench: {' '.join(cmd)} exited {code}:\n{stderr.decode(errors='replace')[-2000:]}"
        )
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss)


def paired(
    a, b, runs: int, before_a=None
) -> tuple[float, list[Timed], list[Timed]]:
    """Times `a` and `b` in turn, A B A B ..., after one warm-up of each;
    returns the median of the pairwise ratios A/B."""
    if before_a:
        before_a()
    a()
    b()
    ta, tb, ratios = [], [], []
    for _ in range(runs):
        if before_a:
            before_a()
        x = a()
        y = b()
        ta.append(x)
        tb.append(y)
        ratios.append(x.wall / y.wall)
    return statistics.median(ratios), ta, tb


def median_wall(ts: list[Timed]) -> float:
    return statistics.median(t.wall for t in ts)


# --- generated configs ---------------------------------------------------------


def generate(dir: Path, services: int, fetch: bool) -> None:
    """An application with staging -> prod and `services` services on one
    runtime whose apply (and, with `fetch`, exit-code fetch) is `true`."""
    dir.mkdir(parents=True, exist_ok=True)
    runtime = [
        "runtime:",
        "  name: noop",
        "  apply:",
        "    taskConfig:",
        "      program:",
        "        cmd: [true]",
    ]
    if fetch:
        runtime += [
            "  fetch:",
            "    mode: exitCode",
            "    taskConfig:",
            "      program:",
            "        cmd: [true]",
        ]
    (dir / "runtimes.yaml").write_text("\n".join(runtime) + "\n")
    (dir / "application.yaml").write_text(
        "application:\n"
        "  name: bench\n"
        "  releaseChannels:\n"
        "    - name: staging\n"
        "      runtimes: [{runtime: noop}]\n"
        "    - name: prod\n"
        "      runtimes: [{runtime: noop}]\n"
        "      preconditions:\n"
        "        - releaseChannelStable: {releaseChannel: staging}\n"
    )
    docs = [f"service:\n  name: svc-{i:05}\n  runtime: noop\n" for i in range(services)]
    (dir / "services.yaml").write_text("---\n".join(docs))


def project(name: str, services: int, fetch: bool) -> tuple[Path, Path, Path]:
    """A fresh directory with a generated config: (the directory, the
    config, where `up --state` keeps the state)."""
    work = Path(tempfile.mkdtemp(prefix=f"vergence-bench-{name}-"))
    generate(work / "config", services, fetch)
    return work, work / "config", work / "state" / "state.db"


def baseline(commands: int) -> list[str]:
    """The same number of `true` commands through xargs, as many at once as
    `vergence up` runs."""
    return [
        "sh",
        "-c",
        f"seq {commands} | xargs -P {PARALLEL} -n 1 true",
    ]


def fmt_ratio(r: float) -> str:
    return f"{r:.2f}x"


# --- rows ------------------------------------------------------------------------


def local_up(ctx: "Context", services: int) -> Row:
    """`vergence up` from a clean state vs the same commands through xargs."""
    work, config, state = project("up", services, fetch=False)
    vergence = [str(ctx.vergence), "up", "--config", str(config), "--state", str(state)]

    def clean():
        shutil.rmtree(state.parent, ignore_errors=True)

    ratio, ta, tb = paired(
        lambda: timed(vergence),
        lambda: timed(baseline(2 * services)),
        ctx.runs,
        before_a=clean,
    )
    shutil.rmtree(work, ignore_errors=True)
    cores = statistics.median(t.cpu / t.wall for t in ta)
    return Row(
        f"`vergence up`, {services:,} services x staging->prod apply-only, clean state, vs xargs -P {PARALLEL}",
        f"{fmt_ratio(ratio)} ({median_wall(ta):.2f} s vs {median_wall(tb):.2f} s; {cores:.1f} cores busy)",
        "<= 1.2x",
        None if ctx.smoke else ratio <= 1.2,
    )


def idle_rerun(ctx: "Context", services: int) -> Row:
    """A rerun on a converged state: every instance's exit-code fetch, and
    nothing else, vs the same fetch commands through xargs."""
    work, config, state = project("idle", services, fetch=True)
    vergence = [str(ctx.vergence), "up", "--config", str(config), "--state", str(state)]
    timed(vergence)  # converges; every later run only fetches
    ratio, ta, tb = paired(
        lambda: timed(vergence), lambda: timed(baseline(2 * services)), ctx.runs
    )
    shutil.rmtree(work, ignore_errors=True)
    return Row(
        f"idle rerun, {2 * services:,} instances with an exit-code fetch, vs the fetches through xargs",
        f"{fmt_ratio(ratio)} ({median_wall(ta):.2f} s vs {median_wall(tb):.2f} s)",
        "<= 1.2x",
        None if ctx.smoke else ratio <= 1.2,
    )


def local_rows(ctx: "Context", polls_seconds: int) -> Row:
    """Job rows in the SQLite state after `up --watch` polled one instance's
    fetch every second for a while: bounded by instances, not by time."""
    work, config, state = project("rows", 1, fetch=True)
    runtimes = (config / "runtimes.yaml").read_text()
    (config / "runtimes.yaml").write_text(
        runtimes + "    pollInterval: 1s\n    steadyStatePollInterval: 1s\n"
    )
    cmd = [str(ctx.vergence), "up", "--watch", "--config", str(config), "--state", str(state)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
    )
    time.sleep(polls_seconds)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    db = sqlite3.connect(f"file:{state}?mode=ro", uri=True)
    jobs = db.execute("select count(*) from jobs").fetchone()[0]
    # Every job an instance ever started has a number (state.jobSeq).
    ran = db.execute(
        "select coalesce(sum(json_extract(body, '$.state.jobSeq')), 0) from instances"
    ).fetchone()[0]
    db.close()
    shutil.rmtree(work, ignore_errors=True)
    instances = 2
    return Row(
        f"job rows kept (SQLite), {instances} instances polled every second for {polls_seconds} s",
        f"{jobs} rows after {ran} jobs ({jobs / instances:.1f} per instance)",
        "bounded by instances (<= 10 finished + 1 running each)",
        jobs <= 11 * instances and ran > jobs,
    )


def decide_per_second(ctx: "Context") -> list[Row]:
    """criterion's throughput of `decide()` (shared/engine/benches/decide.rs)."""
    # --workspace, not -p: with -p cargo resolves features for that one
    # package and builds every dependency again (6 minutes of a cold CI
    # run); the workspace's selection is the one the test build made.
    args = ["cargo", "bench", "--locked", "--workspace", "--bench", "decide"]
    env = dict(os.environ)
    if ctx.smoke:
        # The debug build CI already has; the numbers only say it runs.
        args += ["--profile", "dev"]
        env["VERGENCE_BENCH_SMOKE"] = "1"
    elif shutil.which("taskset"):
        # One core, as the target is stated; the other keeps the rest of
        # the machine's noise away from it.
        args = ["taskset", "-c", str((os.cpu_count() or 1) - 1), *args]
    say("$ " + " ".join(args))
    out = subprocess.run(
        args, cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout
    rows = []
    # criterion prints "<group>/<name>  time: [...]  thrpt: [low mid high]",
    # the name on a line of its own when it is long.
    for name, value, unit in re.findall(
        r"^(decide/.+?)\s+time:.*?thrpt:\s*\[\S+ \S+ ([\d.]+) (\w*elem/s)",
        out,
        re.M | re.S,
    ):
        per_second = float(value) * {"elem/s": 1, "Kelem/s": 1e3, "Melem/s": 1e6, "Gelem/s": 1e9}[unit]
        creates = "creates" in name
        rows.append(
            Row(
                f"`{name.strip()}` per second, one core",
                f"{per_second / 1e3:,.0f}k",
                ">= 1,000k" if creates else "(no target)",
                None if ctx.smoke or not creates else per_second >= 1e6,
            )
        )
    if not rows:
        raise SystemExit("bench: no throughput found in criterion's output:\n" + out[-3000:])
    return rows


_BENCH_LINES: dict[str, dict[str, str]] | None = None


def bench_lines() -> dict[str, dict[str, str]]:
    """The `BENCH name key=value ...` lines of the tests that count requests
    at the wire (run once for the `requests` and `cost` rows)."""
    global _BENCH_LINES
    if _BENCH_LINES is not None:
        return _BENCH_LINES
    args = [
        "cargo",
        "test",
        "--locked",
        "-q",
        # The test build's feature selection (see decide_per_second).
        "--workspace",
        "--test",
        "e2e",
        "--",
        "--nocapture",
        "--test-threads",
        "1",
        "serverless::requests_per",
        "serverless::job_items",
        "serverless::a_broken_chain",
        "serverless::quiet_checks_of_one_batch",
        "agent_poll_cost::",
    ]
    say("$ " + " ".join(args))
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit("bench: the request-count tests failed:\n" + (proc.stdout + proc.stderr)[-4000:])
    bench = {}
    # Anywhere in a line: the test runner's progress dots share lines.
    for match in re.finditer(r"BENCH (\S+)((?: \S+=\S+)*)", proc.stdout):
        bench[match[1]] = dict(p.split("=", 1) for p in match[2].split())
    if "VERGENCE SKIPPED" in proc.stdout or not bench:
        raise SystemExit(
            "bench: the request-count tests printed no BENCH lines; are DynamoDB Local and moto running "
            "(scripts/services.sh start; . .tools/services.env)?\n" + proc.stdout[-2000:]
        )
    _BENCH_LINES = bench
    return bench


def serverless_counts(ctx: "Context") -> list[Row]:
    """Requests counted at the wire by the tests that assert them."""
    bench = bench_lines()

    def value(name: str, key: str) -> float | None:
        raw = bench.get(name, {}).get(key)
        return None if raw is None else float(raw)

    def detail(name: str, service: str = "DynamoDB") -> str:
        ops = {k: v for k, v in bench.get(name, {}).items() if k.startswith(service + ".")}
        return ", ".join(f"{k.split('.', 1)[1]} {v}" for k, v in ops.items())

    rows = []
    checks = [
        (
            "DynamoDB requests per apply-only instance, release pushed -> CONVERGED, staging -> prod, push included",
            "serverless_staging_to_prod_per_instance", "dynamodb", "<= 5", 5.0,
            f"for both instances, the push: {detail('serverless_release_push_two_channels')}; "
            f"the worker's steps: {detail('serverless_staging_to_prod')}",
        ),
        (
            "SQS sends per instance, the same",
            "serverless_staging_to_prod_per_instance", "sqs_sends", "<= 1.1", 1.1, "",
        ),
        (
            "one steady-state poll of a converged instance with an exit-code fetch (worker): DynamoDB",
            "serverless_poll", "dynamodb", "<= 3", 3.0, detail("serverless_poll"),
        ),
        (
            "the same poll: SQS sends",
            "serverless_poll", "sqs_sends", "<= 1", 1.0, "",
        ),
    ]
    for what, name, key, target, limit, extra in checks:
        measured = value(name, key)
        if measured is None:
            rows.append(Row(what, f"not measured (no BENCH {name} line)", target, False))
            continue
        text = f"{measured:g}" + (f" ({extra})" if extra else "")
        rows.append(Row(what, text, target, measured <= limit))
    polls = value("serverless_job_rows", "polls")
    new_items = value("serverless_job_rows", "new_job_items")
    without_ttl = value("serverless_job_rows", "without_ttl")
    if polls is None or without_ttl is None:
        rows.append(Row("job items in DynamoDB after steady-state polls", "not measured", "every one expires", False))
    else:
        rows.append(
            Row(
                f"job items in DynamoDB after {polls:g} steady-state polls",
                f"{new_items:g} new, {without_ttl:g} without a TTL (ended jobs expire after the event retention, 30 days)",
                "every one expires",
                without_ttl == 0,
            )
        )
    return rows


# --- cost ------------------------------------------------------------------------

# Published on-demand prices, us-east-1, as of PRICES_DATE (docs/cost.md).
# Taken from AWS's pricing pages as published on that date; change them
# here and in docs/cost.md together.
PRICES_DATE = "2026-11-28"
PRICES_REGION = "us-east-1"
PRICES = {
    # DynamoDB on-demand (after the November 2024 price cut).
    "dynamodb_per_million_write_units": 0.625,
    "dynamodb_per_million_read_units": 0.125,
    # SQS standard queue, per request (a batch of up to 10 is one request).
    "sqs_per_million_requests": 0.40,
    # Lambda, arm64.
    "lambda_per_gb_second": 0.0000133334,
    "lambda_per_million_requests": 0.20,
    # EventBridge Scheduler invocations.
    "scheduler_per_million_invocations": 1.00,
    # CloudWatch Logs ingestion (standard).
    "logs_per_gb_ingested": 0.50,
    # API Gateway HTTP API, first 300 million requests a month.
    "http_api_per_million_requests": 1.00,
    # X-Ray traces recorded (`Tracing=Active`).
    "xray_per_million_traces": 5.00,
}
# What the model assumes besides the measured counts (docs/cost.md says why).
HOURS_PER_MONTH = 730  # AWS's pricing calculator's month
SQS_MAX_DELAY_SECONDS = 900  # later checks are found by the scheduler
# Lambda's own lines per invocation (START, END, REPORT, and the X-Ray
# trace line with `Tracing: Active`), in bytes; none for a function whose
# LoggingConfig has `SystemLogLevel: WARN`.
LAMBDA_PLATFORM_LOG_BYTES = 350
# Lambda's X-Ray sampling with `Tracing: Active`: the first invocation
# each second and 5% of the others.
XRAY_RESERVOIR_PER_SECOND = 1
XRAY_RATE = 0.05
# The SQS event source mapping's pollers long-poll an idle queue: 5 of
# them, one 20 s ReceiveMessage each at a time.
ESM_IDLE_POLLERS = 5
ESM_RECEIVE_WAIT_SECONDS = 20
# An agent's poll before this round wrote the agent's record each time.
OLD_AGENT_POLL_WRITE_UNITS = 1.0
# ... and read it (an api container now remembers it).
OLD_AGENT_POLL_RECORD_READ_UNITS = 1.0
OLD_AGENT_POLL_WAIT_SECONDS = 20
AGENT_POLL_INTERVAL_SECONDS = 2  # vergence-agent's --poll-interval-seconds
AGENT_RECORD_WRITTEN_EVERY_SECONDS = 30  # runtimes/kubernetes/src/desk.rs


def template_settings() -> dict:
    """The template's memory sizes, log levels and schedule, read from
    template.yaml so the table follows it."""
    text = (ROOT / "template.yaml").read_text()
    default_mb = int(re.search(r"^Globals:.*?MemorySize: (\d+)", text, re.S | re.M)[1])

    def function_block(name: str) -> str:
        block = re.search(rf"^  {name}:\n(.*?)(?=^  \S)", text, re.S | re.M)
        return block[1] if block else ""

    def function_mb(name: str) -> int:
        found = re.search(r"^      MemorySize: (\d+)", function_block(name), re.M)
        return int(found[1]) if found else default_mb

    def platform_log_bytes(name: str) -> int:
        quiet = re.search(r"^        SystemLogLevel: (WARN|ERROR|FATAL)", function_block(name), re.M)
        return 0 if quiet else LAMBDA_PLATFORM_LOG_BYTES

    rate = re.search(r"ScheduleExpression: rate\((\d+) minutes?\)", text)
    tracing = re.search(r"^  Tracing:\n(?:    .*\n)*?    Default: (\w+)", text, re.M)
    return {
        "tracing": tracing[1],
        "api_platform_log_bytes": platform_log_bytes("ApiFunction"),
        "worker_platform_log_bytes": platform_log_bytes("WorkerFunction"),
        "scheduler_platform_log_bytes": platform_log_bytes("SchedulerFunction"),
        "worker_mb": function_mb("WorkerFunction"),
        "scheduler_mb": function_mb("SchedulerFunction"),
        "api_mb": function_mb("ApiFunction"),
        "schedule_minutes": int(rate[1]),
    }


def lambda_cost(ms: float, mb: int) -> float:
    """Duration and request of one invocation of `ms` milliseconds."""
    billed = math.ceil(ms) / 1000 * mb / 1024
    return billed * PRICES["lambda_per_gb_second"] + PRICES["lambda_per_million_requests"] / 1e6


def xray_traces(invocations_per_second: float) -> float:
    """Traces Lambda's active tracing records a second at this rate."""
    first = min(invocations_per_second, XRAY_RESERVOIR_PER_SECOND)
    return first + XRAY_RATE * max(0.0, invocations_per_second - XRAY_RESERVOIR_PER_SECOND)


def cost_model(bench: dict) -> dict:
    """Dollars per check and fixed dollars per month, from the BENCH lines."""
    t = template_settings()

    def num(name: str, key: str) -> float:
        try:
            return float(bench[name][key])
        except KeyError:
            raise SystemExit(f"bench: no {key} in a BENCH {name} line: is the test printing it?")

    m = 1e6

    def ms_per_check(name: str) -> float:
        """The worker's time for one check: a full batch's, shared by its
        checks; a full write of the instance (`cost_rearm`) adds what it
        took longer than a quiet check, measured alone."""
        batch = num("cost_check_batch", "ms") / num("cost_check_batch", "checks")
        alone = num(name, "ms") / num(name, "invocations")
        quiet = num("cost_check", "ms") / num("cost_check", "invocations")
        return batch + max(0.0, alone - quiet)

    def invocations_per_check() -> float:
        """Worker invocations per check: one per message the next checks
        went out in, at most (`MaximumBatchingWindowInSeconds: 1` gathers
        one second's messages; at these rates about one)."""
        return num("cost_check_batch", "messages") / num("cost_check_batch", "checks")

    def sqs_per_check() -> float:
        """SQS requests of one check, from a full batch of quiet checks
        (serverless::quiet_checks_of_one_batch_send_their_next_checks_together):
        the worker's sends, once per batch (its outbox), and the event
        source mapping's receive and delete of the messages the next checks
        went out in. Those two are counted one each per message, not per
        batch of messages: at these rates a long poll returns about as soon
        as one message is there, and an invocation's batch is what one
        second gathered. A check that writes the whole instance sends as a
        quiet one does."""
        checks = num("cost_check_batch", "checks")
        return (num("cost_check_batch", "sends") + 2 * num("cost_check_batch", "messages")) / checks

    def one_check(name: str) -> dict:
        return {
            "dynamodb": num(name, "rru") * PRICES["dynamodb_per_million_read_units"] / m
            + num(name, "wru") * PRICES["dynamodb_per_million_write_units"] / m,
            "sqs": sqs_per_check() * PRICES["sqs_per_million_requests"] / m,
            # An invocation per message at most (what one second gathers),
            # whose instances the worker steps at once: a check's share of
            # the billed duration is the measured batch's time over its
            # checks.
            "lambda": ms_per_check(name) / 1000 * t["worker_mb"] / 1024
            * PRICES["lambda_per_gb_second"]
            + PRICES["lambda_per_million_requests"] / m * invocations_per_check(),
            "logs": (num("cost_check_logs", "log_bytes") + t["worker_platform_log_bytes"] * invocations_per_check())
            / 1e9 * PRICES["logs_per_gb_ingested"],
        }

    # A check that finds nothing, chained through the queue (`cost_check`),
    # and one that writes the whole instance (`cost_rearm`): once an hour
    # per instance to move the due index's watchdog, and every check whose
    # interval is longer than SQS can delay a message.
    check = one_check("cost_check")
    rearm = one_check("cost_rearm")
    # A check beyond SQS's delay is found by the scheduler and sent in a
    # batch of 10 (the worker's own send is still counted: an upper bound).
    late_check_sqs = PRICES["sqs_per_million_requests"] / m / 10
    month_seconds = HOURS_PER_MONTH * 3600
    ticks = month_seconds / 60 / t["schedule_minutes"]
    scheduler_ms = num("cost_scheduler_idle", "ms") / num("cost_scheduler_idle", "invocations")
    fixed = {
        "scheduler": ticks
        * (
            PRICES["scheduler_per_million_invocations"] / m
            + lambda_cost(scheduler_ms, t["scheduler_mb"])
            + num("cost_scheduler_idle", "rru") * PRICES["dynamodb_per_million_read_units"] / m
            + t["scheduler_platform_log_bytes"] / 1e9 * PRICES["logs_per_gb_ingested"]
        ),
        "queue polling": ESM_IDLE_POLLERS * month_seconds / ESM_RECEIVE_WAIT_SECONDS
        * PRICES["sqs_per_million_requests"] / m,
    }
    return {
        "check": check,
        "rearm": rearm,
        "late_check_sqs": late_check_sqs,
        "fixed": fixed,
        "month_seconds": month_seconds,
        "invocations_per_check": invocations_per_check(),
        "tracing": t["tracing"],
        "ticks": ticks,
    }


def xray_monthly(model: dict, instances: int, interval_minutes: int) -> float:
    """What `Tracing=Active` would add: the worker's invocations (a batch
    of checks each) and the scheduler's ticks, sampled."""
    seconds = model["month_seconds"]
    worker_rate = instances / (interval_minutes * 60) * model["invocations_per_check"]
    traces = xray_traces(worker_rate) * seconds + model["ticks"]
    return traces * PRICES["xray_per_million_traces"] / 1e6


def monthly(model: dict, instances: int, interval_minutes: int) -> float:
    checks = instances * model["month_seconds"] / (interval_minutes * 60)
    quiet, rearm = sum(model["check"].values()), sum(model["rearm"].values())
    if interval_minutes * 60 > SQS_MAX_DELAY_SECONDS:
        per_check = rearm + model["late_check_sqs"]
    else:
        # One check an hour is a rearm instead of a quiet one.
        per_check = quiet + (rearm - quiet) * min(1.0, interval_minutes / 60)
    xray = xray_monthly(model, instances, interval_minutes) if model["tracing"] == "Active" else 0.0
    return checks * per_check + sum(model["fixed"].values()) + xray


def agent_costs(bench: dict) -> dict:
    """One idle vergence-agent a month: before (20 s holds through the HTTP
    API), and now (a poll every 2 s answered at once) through the HTTP API
    and through the api function's URL (the `AgentUrl` output, which
    vergence-agent is pointed at)."""
    t = template_settings()
    m = 1e6
    poll = bench["cost_agent_poll"]
    held = bench["cost_agent_held_poll"]
    rru, ms, log = float(poll["rru"]), float(poll["ms"]), float(poll["log_bytes"])
    looks = float(held["looks"])
    per_look = (float(held["rru"]) - rru) / (looks - 1)
    month = HOURS_PER_MONTH * 3600

    def per_month(polls: float, ms: float, rru: float, wru: float, gateway: bool, platform: int) -> float:
        each = (
            lambda_cost(ms, t["api_mb"])
            + rru * PRICES["dynamodb_per_million_read_units"] / m
            + wru * PRICES["dynamodb_per_million_write_units"] / m
            + (log + platform) / 1e9 * PRICES["logs_per_gb_ingested"]
            + (PRICES["http_api_per_million_requests"] / m if gateway else 0)
        )
        rate = polls / month
        traced = xray_traces(rate) / rate if t["tracing"] == "Active" else 0.0
        return polls * (each + traced * PRICES["xray_per_million_traces"] / m)

    old_wait = OLD_AGENT_POLL_WAIT_SECONDS
    old = per_month(
        month / old_wait,
        old_wait * 1000 + ms,
        rru + OLD_AGENT_POLL_RECORD_READ_UNITS + (old_wait - 1) * per_look,
        OLD_AGENT_POLL_WRITE_UNITS,
        True,
        LAMBDA_PLATFORM_LOG_BYTES,
    )
    interval = AGENT_POLL_INTERVAL_SECONDS
    writes = interval / AGENT_RECORD_WRITTEN_EVERY_SECONDS
    platform = t["api_platform_log_bytes"]
    gateway = per_month(month / interval, ms, rru, writes, True, platform)
    direct = per_month(month / interval, ms, rru, writes, False, platform)
    return {"old": old, "gateway": gateway, "direct": direct, "polls": month / interval}


SERVICES = [100, 1000, 10000]
CHANNELS = 3
INTERVALS = [1, 5, 30]


def cost_rows(ctx: "Context") -> list[Row]:
    """docs/cost.md's table: dollars a month from the counts measured at the
    wire times the published prices."""
    bench = bench_lines()
    model = cost_model(bench)
    rows = []
    for services in SERVICES:
        cells = [f"{i} min ${monthly(model, services * CHANNELS, i):,.2f}" for i in INTERVALS]
        target = services == 1000
        value = monthly(model, services * CHANNELS, 5)
        rows.append(
            Row(
                f"$/month, {services:,} services x {CHANNELS} channels, drift checks every 1 / 5 / 30 min "
                f"({PRICES_REGION} on-demand prices of {PRICES_DATE})",
                ", ".join(cells),
                "<= $25 at 5 min" if target else "(no target)",
                (None if ctx.smoke else value <= 25) if target else None,
            )
        )
    per_check = model["check"]
    rows.append(
        Row(
            "$ per million no-drift checks, by service",
            ", ".join(f"{k} ${v * 1e6:.2f}" for k, v in per_check.items())
            + f"; fixed a month: "
            + ", ".join(f"{k} ${v:.2f}" for k, v in model["fixed"].items()),
            "(no target)",
            None,
        )
    )
    if model["tracing"] != "Active":
        rows.append(
            Row(
                "X-Ray with Tracing=Active (the template's default is PassThrough), 1,000 services x "
                f"{CHANNELS} channels, $/month",
                ", ".join(f"{i} min +${xray_monthly(model, 1000 * CHANNELS, i):,.2f}" for i in INTERVALS),
                "(no target)",
                None,
            )
        )
    agent = agent_costs(bench)
    rows.append(
        Row(
            "one idle vergence-agent, $/month",
            f"before (20 s held polls) ${agent['old']:.2f}; now (a poll every {AGENT_POLL_INTERVAL_SECONDS} s, "
            f"answered at once) ${agent['direct']:.2f} through the api function's URL (AgentUrl), "
            f"${agent['gateway']:.2f} through the HTTP API",
            "<= $1",
            None if ctx.smoke else agent["direct"] <= 1,
        )
    )
    return rows


# --- scale ------------------------------------------------------------------------


def scale_queue() -> dict[str, str]:
    """LocalStack's SQS for the scale runs' work queue (moto's is linear in
    the queue's length), started by scripts/services.sh: the environment
    that names it."""
    subprocess.run([str(ROOT / "scripts/services.sh"), "start-scale"], cwd=ROOT, check=True)
    text = (ROOT / ".tools/scale.env").read_text()
    return dict(re.findall(r"export (\w+)=(\S+)", text))


def scale_run(n: int, queue: dict[str, str]) -> dict[str, dict[str, str]]:
    """One run of tests/tests/e2e/scale.rs at `n` instances (an ignored
    test: minutes at n = 1,000, about half an hour at 10,000); its `BENCH
    scale_*` lines."""
    args = [
        "cargo", "test", "--locked", "-q", "--workspace", "--test", "e2e", "--",
        "--ignored", "--nocapture", "--test-threads", "1", "scale::",
    ]
    say(f"$ VERGENCE_SCALE_N={n} " + " ".join(args))
    proc = subprocess.run(
        args, cwd=ROOT, capture_output=True, text=True, env={**os.environ, **queue, "VERGENCE_SCALE_N": str(n)}
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench: the scale test at n={n} failed:\n" + (proc.stdout + proc.stderr)[-4000:])
    bench = {}
    for match in re.finditer(r"BENCH (scale_\S+)((?: \S+=\S+)*)", proc.stdout):
        bench[match[1]] = dict(p.split("=", 1) for p in match[2].split())
    if "scale_check" not in bench:
        raise SystemExit("bench: the scale test printed no BENCH scale_check line:\n" + proc.stdout[-2000:])
    return bench


def scale_rows(ctx: "Context", sizes: list[int]) -> list[Row]:
    """Per instance and per steady-state check, at each size: requests must
    be identical, time per instance flat (docs/performance.md, "Scale")."""
    # The smoke run's 20 instances are nothing to moto: no LocalStack to
    # install there (CI).
    queue = {} if ctx.smoke else scale_queue()
    runs = {n: scale_run(n, queue) for n in sizes}

    def cell(n: int, name: str, keys: list[str]) -> str:
        line = runs[n][name]
        return f"n={n:,}: " + " ".join(f"{k} {float(line[k]):g}" for k in keys)

    rows = []
    # What must be identical at every size: the push's per-instance
    # requests (its 7 requests made once shrink per instance as n grows),
    # every DynamoDB request of the others.
    push_same = ["DynamoDB.Query", "DynamoDB.TransactWriteItems"]
    for name, what, keys, same_keys in [
        ("scale_push", "config pushed, per instance", ["dynamodb", "wru", "sqs_sends", "handler_ms"], push_same),
        ("scale_converge", "worker to CONVERGED, per instance", ["dynamodb", "rru", "wru", "sqs_sends", "handler_ms"], ["dynamodb"]),
        ("scale_check", "steady-state check, per check", ["dynamodb", "rru", "wru", "sqs_sends", "handler_ms"], ["dynamodb"]),
        ("scale_scheduler", "scheduler run, nothing due, per run", ["dynamodb", "rru", "handler_ms"], ["dynamodb"]),
    ]:
        same = len({tuple(runs[n][name].get(k) for k in same_keys) for n in sizes}) == 1
        ms = [float(runs[n][name]["handler_ms"]) for n in sizes]
        ratio = ms[-1] / ms[0] if len(sizes) > 1 and ms[0] > 0 else None
        measured = "; ".join(cell(n, name, keys) for n in sizes)
        if ratio is not None:
            measured += f"; time {sizes[-1]:,} / {sizes[0]:,}: {fmt_ratio(ratio)}"
        rows.append(
            Row(
                f"scale: {what}",
                measured,
                "DynamoDB requests identical across n",
                None if ctx.smoke or len(sizes) < 2 else same,
            )
        )
    return rows


class RuntimeApi(BaseHTTPRequestHandler):
    """Just enough of the Lambda runtime API to time a function's init:
    the first `next` marks the end of init; one empty SQS batch is handed
    out, and the second `next` (after it was handled) ends the run."""

    server: "RuntimeApiServer"

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        if not self.path.endswith("/runtime/invocation/next"):
            self.send_error(404)
            return
        srv = self.server
        srv.nexts.append((time.perf_counter(), vm_status(srv.pid)))
        if len(srv.nexts) == 1:
            body = json.dumps({"Records": []}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Lambda-Runtime-Aws-Request-Id", "bench-1")
            self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 60_000))
            self.send_header(
                "Lambda-Runtime-Invoked-Function-Arn",
                "arn:aws:lambda:us-east-1:000000000000:function:worker",
            )
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            srv.done.set()
            # Held open like the real API between invocations, until the
            # function is killed.
            srv.done_wait.wait(5)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        self.server.responses.append(self.rfile.read(length))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()


class RuntimeApiServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), RuntimeApi)
        self.pid = 0
        self.nexts: list[tuple[float, dict]] = []
        self.responses: list[bytes] = []
        self.done = threading.Event()
        self.done_wait = threading.Event()


def vm_status(pid: int) -> dict:
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0])
    except OSError:
        pass
    return fields


def lambda_init(binary: Path) -> tuple[float, int]:
    """Cold init of a Lambda binary (spawn -> its first request for work)
    and its peak RSS after handling one empty batch, in KiB."""
    server = RuntimeApiServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{server.server_address[1]}",
        "AWS_LAMBDA_FUNCTION_NAME": "worker",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "512",
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_STREAM_NAME": "bench",
        "AWS_LAMBDA_LOG_GROUP_NAME": "bench",
        "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        # Nothing is called during init or for an empty batch; a closed
        # port makes a stray call fail fast instead of leaving the machine.
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_EC2_METADATA_DISABLED": "true",
        "VERGENCE_TABLE": "bench",
        "VERGENCE_QUEUE_URL": "http://127.0.0.1:9/000000000000/bench",
        "VERGENCE_ARTIFACT_BUCKET": "bench",
        "RUST_LOG": "warn",
    }
    start = time.perf_counter()
    proc = subprocess.Popen(
        [str(binary)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    server.pid = proc.pid
    finished = server.done.wait(60)
    proc.kill()
    _, stderr = proc.communicate()
    server.done_wait.set()
    server.shutdown()
    if not finished or len(server.nexts) < 2:
        raise SystemExit(
            f"bench: {binary.name} never asked for a second event:\n{stderr.decode(errors='replace')[-2000:]}"
        )
    init = server.nexts[0][0] - start
    hwm = server.nexts[1][1].get("VmHWM", 0)
    return init, hwm


def worker_binary(ctx: "Context") -> list[Row]:
    if ctx.smoke:
        cargo_build(SMOKE_BUILD)
        binary = ROOT / "target" / "debug" / "worker"
    else:
        # What SAM deploys: `cargo lambda build --release` (template.yaml)
        # with [profile.lambda]'s settings, which cargo-lambda passes as
        # `--config` overrides of `release` (Cargo.toml).
        cargo_build(["--profile", "lambda", "-p", "vergence-worker"])
        binary = ROOT / "target" / "lambda" / "worker"
    size = binary.stat().st_size
    inits, rss = [], []
    for _ in range(max(ctx.runs, 3)):
        init, hwm = lambda_init(binary)
        inits.append(init)
        rss.append(hwm)
    init = statistics.median(inits)
    peak = statistics.median(rss)
    smoke = ctx.smoke
    return [
        Row("worker binary size" + (" (debug build)" if smoke else ""), f"{size / 1e6:.1f} MB", "<= 10 MB", None if smoke else size <= 10e6),
        Row("worker cold init, spawn -> first request for work", f"{init * 1e3:.1f} ms", "<= 10 ms", None if smoke else init <= 0.010),
        Row("worker peak RSS after one (empty) batch", f"{peak / 1024:.1f} MB", "<= 16 MB", None if smoke else peak <= 16 * 1024),
    ]


# --- driver ------------------------------------------------------------------------


@dataclass
class Context:
    smoke: bool
    runs: int
    vergence: Path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="small inputs, debug builds, one run (CI)")
    parser.add_argument("--runs", type=int, help="timed runs of each side (default 5; smoke 1)")
    parser.add_argument(
        "--only",
        nargs="+",
        choices=["local_up", "idle_rerun", "rows", "decide", "requests", "cost", "worker", "scale"],
        help="only these rows",
    )
    parser.add_argument(
        "--scale-sizes",
        type=int,
        nargs="+",
        help="instances of the scale row's runs (default 1000 10000; smoke 20)",
    )
    parser.add_argument("--no-build", action="store_true", help="use the binaries already built")
    args = parser.parse_args()
    global NO_BUILD
    NO_BUILD = args.no_build
    smoke = args.smoke
    runs = args.runs or (1 if smoke else 5)
    # The scale row takes ~16 min at its full sizes (docs/performance.md,
    # "Scale"): in the smoke run, at 20 instances, but only on request in
    # the full one.
    rows_by_default = ["local_up", "idle_rerun", "rows", "decide", "requests", "cost", "worker"]
    only = set(args.only or (rows_by_default + ["scale"] if smoke else rows_by_default))

    if smoke:
        cargo_build(SMOKE_BUILD)
        vergence = ROOT / "target" / "debug" / "vergence"
    else:
        cargo_build(["--profile", "perf", "-p", "vergence-cli"])
        vergence = ROOT / "target" / "perf" / "vergence"
    ctx = Context(smoke=smoke, runs=runs, vergence=vergence)

    rows: list[Row] = []
    sizes = [50] if smoke else [1000, 5000]
    if "local_up" in only:
        for n in sizes:
            rows.append(local_up(ctx, n))
    if "idle_rerun" in only:
        rows.append(idle_rerun(ctx, 50 if smoke else 1000))
    if "rows" in only:
        rows.append(local_rows(ctx, 15 if smoke else 60))
    if "decide" in only:
        rows += decide_per_second(ctx)
    if "requests" in only:
        rows += serverless_counts(ctx)
    if "cost" in only:
        rows += cost_rows(ctx)
    if "worker" in only:
        rows += worker_binary(ctx)
    if "scale" in only:
        rows += scale_rows(ctx, args.scale_sizes or ([20] if smoke else [1000, 10000]))

    mode = "smoke (small inputs, debug builds: not comparable to the targets)" if smoke else f"full ({runs} runs each)"
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, {mode}, with `scripts/bench.py{' --smoke' if smoke else ''}`.",
        "",
        "| what | measured | target | met |",
        "|---|---|---|---|",
    ]
    for row in rows:
        met = {True: "yes", False: "**no**", None: "-"}[row.met]
        lines.append(f"| {row.what} | {row.measured} | {row.target} | {met} |")
    text = "\n".join(lines)
    print(text)
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(text + "\n")
    say(f"written to {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
