"""benchmark/run.py (the runner) and benchmark/report.py (the report), on fake runs: no real training here."""

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO, assert_ok, assert_usage_error, load_script, need, need_procgen, test_env

RUNNER = REPO / "benchmark" / "run.py"

# A stand-in for a training script: takes --env-id and --seed, appends a line to calls.txt, makes its own run folder
# under runs/ with args.json (as the scripts do: {name}-2 when {name} exists), fails (exit 1) when its seed is listed
# in fail_seeds.txt, sleeps when asked (to be interrupted; --stubborn: SIGINT does not stop it). --same-folder: every
# run of a seed writes into the folder of the second the first one started (as scripts without unique folders did).
# --checkpoint-every: makes its folder and a checkpoint, fake.pt, before it sleeps; --resume runs/NAME/fake.pt goes on
# in that folder, without sleeping (calls.txt says so).
FAKE = r"""
import json, os, signal, sys, time
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
env_id, seed = args["--env-id"], args["--seed"]
stubborn = args.get("--stubborn") == "1"
signal.signal(signal.SIGINT, lambda *_: (print("fake got SIGINT", flush=True), None if stubborn else sys.exit(130)))
resume = args.get("--resume")
with open("calls.txt", "a") as f:
    f.write(f"{env_id} {seed} {os.environ.get('OMP_NUM_THREADS')}{f' resume={resume}' if resume else ''}\n")
print(f"fake run {env_id} seed {seed} started", flush=True)

def make_folder():
    name = f"runs/{env_id.replace('/', '_')}__fake__{seed}__{int(time.time())}"
    if args.get("--same-folder") == "1":
        try:
            fd = os.open(f"stamp_{seed}.txt", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, name.encode())
            os.close(fd)
        except FileExistsError:
            time.sleep(0.5)
        name = open(f"stamp_{seed}.txt").read()
        os.makedirs(name, exist_ok=True)
        return name
    os.makedirs("runs", exist_ok=True)
    for suffix in ["", *(f"-{i}" for i in range(2, 100))]:
        try:
            os.mkdir(name + suffix)
            return name + suffix
        except FileExistsError:
            pass

name = os.path.dirname(resume) if resume else make_folder() if "--checkpoint-every" in args else None
if "--checkpoint-every" in args and not resume:
    open(f"{name}/fake.pt", "w").write("a checkpoint")
deadline = time.time() + (0 if resume else float(args.get("--sleep", 0)))
while time.time() < deadline:
    time.sleep(0.05)
name = name or make_folder()
settings = {k[2:].replace("-", "_"): v for k, v in args.items() if k not in ("--env-id", "--seed")}
with open(f"{name}/args.json", "w") as f:
    json.dump({"script": "fake.py", "env_id": env_id, "seed": int(seed), **settings}, f)
fail = open("fail_seeds.txt").read().split() if os.path.exists("fail_seeds.txt") else []
if seed in fail:
    print(f"fake run {env_id} seed {seed}: failing on purpose", file=sys.stderr)
    sys.exit(1)
"""


def run_tool(name, *args, cwd=None, timeout=300, **env):
    """Run `python benchmark/<name> <args>` in cwd (env: extra variables); returns the CompletedProcess (text)."""
    return subprocess.run(
        [sys.executable, str(REPO / "benchmark" / name), *map(str, args)],
        cwd=cwd,
        env=test_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_runner(cwd, *args):
    return run_tool("run.py", *args, cwd=cwd, timeout=120)


def run_report(cwd, *args):
    return run_tool("report.py", *args, cwd=cwd)


def start_runner(cwd, *args, env=None):
    """benchmark/run.py started in the background, its output in text pipes, for a test to signal while it runs."""
    command = [sys.executable, str(RUNNER), *map(str, args)]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.Popen(command, cwd=cwd, env=env or test_env(), **pipes)


def wait_until(condition, deadline):
    """Poll condition() every 0.1 s until it holds or the clock passes deadline (time.time() + 60 in the tests: a
    safety net against a hang, not a timing assertion; the test's own asserts say what it waited for)."""
    while not condition() and time.time() < deadline:
        time.sleep(0.1)


def calls(cwd):
    path = cwd / "calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def states(out):
    return {(d["env_id"], d["seed"]): d for d in (json.loads(p.read_text()) for p in out.glob("*.json"))}


@pytest.fixture
def fake(tmp_path):
    (tmp_path / "fake.py").write_text(FAKE)
    return tmp_path


def test_failing_runs_are_reported_others_still_run_and_restart_skips_finished(fake):
    grid = ["--command", "python fake.py", "--env-ids", "EnvA-v0", "EnvB-v0", "--seeds", 1, 2, 3, "--out", "out"]
    (fake / "fail_seeds.txt").write_text("2")
    proc = run_runner(fake, *grid, "--workers", 2)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert sorted(c.split()[:2] for c in calls(fake)) == sorted([e, s] for e in ("EnvA-v0", "EnvB-v0") for s in "123")
    cores = len(os.sched_getaffinity(0))
    # OMP_NUM_THREADS = cores // workers
    assert {c.split()[2] for c in calls(fake)} == {str(max(1, cores // 2))}
    st = states(fake / "out")
    assert {k: d["status"] for k, d in st.items()} == {
        (e, s): "failed" if s == 2 else "done" for e in ("EnvA-v0", "EnvB-v0") for s in (1, 2, 3)
    }
    assert st[("EnvA-v0", 2)]["returncode"] == 1
    # the end of the output names each failure, its exit code and its log, which holds what the run printed
    summary = proc.stdout[proc.stdout.index("finished") :]
    assert "4 succeeded" in summary and "2 failed" in summary
    for env_id in ("EnvA-v0", "EnvB-v0"):
        assert f"FAILED {env_id} seed 2: exit 1" in summary
        log = next((fake / "out").glob(f"fake__{env_id}__2__*.log")).read_text()
        assert "failing on purpose" in log and f"fake run {env_id} seed 2 started" in log
    # the run folder each finished run wrote is recorded for report.py --sweep
    assert st[("EnvB-v0", 3)]["run_names"] == [p.name for p in (fake / "runs").glob("EnvB-v0__fake__3__*")]

    # restart: only the failed runs run again (and fail again)
    n = len(calls(fake))
    proc = run_runner(fake, *grid, "--workers", 2)
    assert proc.returncode == 1
    assert "4 already done" in proc.stdout
    assert sorted(calls(fake)[n:]) == sorted(c for c in calls(fake)[n:] if c.split()[1] == "2")
    assert len(calls(fake)[n:]) == 2

    # the cause fixed, a restart runs the two failed runs, then nothing is left to run
    (fake / "fail_seeds.txt").write_text("")
    n = len(calls(fake))
    proc = run_runner(fake, *grid)
    assert_ok(proc)
    assert sorted(c.split()[:2] for c in calls(fake)[n:]) == [["EnvA-v0", "2"], ["EnvB-v0", "2"]]
    assert {d["status"] for d in states(fake / "out").values()} == {"done"}
    n = len(calls(fake))
    assert_ok(run_runner(fake, *grid))
    assert calls(fake)[n:] == []

    # an edit to the script: the runs done stay done, unless --rerun-on-edit
    (fake / "fake.py").write_text(FAKE + "# edited\n")
    proc = run_runner(fake, *grid)
    assert_ok(proc)
    assert calls(fake)[n:] == []
    assert "skip (done before; fake.py changed since: --rerun-on-edit runs it again): EnvA-v0 seed 1" in proc.stdout
    assert_ok(run_runner(fake, *grid, "--workers", 2, "--rerun-on-edit"))
    assert len(calls(fake)[n:]) == 6
    n = len(calls(fake))
    assert_ok(run_runner(fake, *grid, "--rerun-on-edit"))
    assert calls(fake)[n:] == []


def test_cwd_runs_the_command_elsewhere(fake):
    # the --cwd folder does not exist yet: the runner makes it (a sweep's first run in a new OUT folder)
    assert_ok(
        run_runner(
            fake,
            "--command",
            "python fake.py",
            "--env-ids",
            "ALE/Fake-v5",
            "--num-seeds",
            2,
            "--cwd",
            "work",
            "--out",
            "out",
        )
    )
    cores = len(os.sched_getaffinity(0))
    assert sorted(calls(fake / "work")) == [f"ALE/Fake-v5 1 {cores}", f"ALE/Fake-v5 2 {cores}"]
    # an env id with a slash: the state names the run folder relative to runs/
    made = sorted(p.name for p in (fake / "work" / "runs").iterdir())
    assert len(made) == 2 and all(name.startswith("ALE_Fake-v5__fake__") for name in made)
    assert sorted(name for d in states(fake / "out").values() for name in d["run_names"]) == made


def test_ctrl_c_stops_the_runs_and_a_restart_runs_them_again(fake):
    grid = [
        "--command",
        "python fake.py --sleep 600",
        "--env-ids",
        "EnvA-v0",
        "--seeds",
        1,
        2,
        "--workers",
        2,
        "--out",
        "out",
    ]
    proc = start_runner(fake, *grid)
    wait_until(lambda: len(calls(fake)) == 2, time.time() + 60)
    # both started (and handle SIGINT: they install the handler before writing)
    assert len(calls(fake)) == 2
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr
    for log in (fake / "out").glob("*.log"):
        assert "fake got SIGINT" in log.read_text()  # each run was stopped with SIGINT, not killed
    # nothing recorded as done
    assert {d["status"] for d in states(fake / "out").values()} == {"interrupted"}
    out = run_runner(fake, *grid, "--dry-run").stdout
    assert "0 already done" in out and out.count("would run:") == 2
    assert "--resume" not in out  # no checkpoint: they start over


def test_ctrl_c_then_a_restart_continues_each_run_from_its_checkpoint(fake):
    """Runs that checkpoint, stopped with Ctrl-C: recorded as interrupted with their run folder; started again, each
    continues with --resume its own checkpoint, in its own folder (the log keeps both parts), and ends done."""
    grid = [
        "--command",
        "python fake.py --checkpoint-every 1 --sleep 600",
        "--env-ids",
        "EnvA-v0",
        "--seeds",
        1,
        2,
        "--workers",
        2,
        "--out",
        "out",
    ]
    proc = start_runner(fake, *grid)
    wait_until(lambda: len(list(fake.glob("runs/*/fake.pt"))) == 2, time.time() + 60)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    folders = {int(p.name.split("__")[2]): p.name for p in (fake / "runs").iterdir()}
    st = states(fake / "out")
    for seed in (1, 2):
        assert st[("EnvA-v0", seed)]["status"] == "interrupted"
        assert st[("EnvA-v0", seed)]["run_names"] == [folders[seed]]
    out = run_runner(fake, *grid, "--dry-run").stdout
    assert out.count(" --resume runs/") == 2 and f"--seed 1 --resume runs/{folders[1]}/fake.pt" in out

    assert_ok(run_runner(fake, *grid))
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert sorted(calls(fake)[2:]) == [
        f"EnvA-v0 {seed} {threads} resume=runs/{folders[seed]}/fake.pt" for seed in (1, 2)
    ]
    # no new folder
    assert sorted(p.name for p in (fake / "runs").iterdir()) == sorted(folders.values())
    st = states(fake / "out")
    for seed in (1, 2):
        state = st[("EnvA-v0", seed)]
        assert (state["status"], state["run_names"]) == ("done", [folders[seed]])
        assert state["resumed_from"] == f"runs/{folders[seed]}/fake.pt"
        log = (fake / "out" / f"fake__EnvA-v0__{seed}__{state['key']}.log").read_text()
        assert log.count("$ cd ") == 2 and "fake got SIGINT" in log  # both parts of the run
    assert "2 already done" in run_runner(fake, *grid).stdout  # and nothing is left to run


def expected_cpu_model():
    """The CPU's model name as the machine says it: /proc/cpuinfo's "model name", else lscpu's "Model name"; then
    " (AVX-512)" or " (AVX2)" where its flags name them."""
    import re

    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    found = re.search(r"^model name\s*:\s*(.+)$", text, flags=re.M) or re.search(
        r"^Model name:\s*(.+)$",
        subprocess.run(["lscpu"], capture_output=True, text=True, env=test_env(LC_ALL="C")).stdout,
        flags=re.M,
    )
    flags = (re.search(r"^flags\s*:(.*)$", text, flags=re.M) or re.match("()", "")).group(1).split()
    simd = " (AVX-512)" if "avx512f" in flags else " (AVX2)" if "avx2" in flags else ""
    return found.group(1).strip() + simd if found else "unknown"


def test_the_state_records_the_cpu_and_the_load_over_every_part_of_a_resumed_run(fake):
    """The runner records the CPU model, the cores, the threads of a run and the machine's 1-minute load average,
    sampled every --status-every s and at the end, over both parts of a run stopped with Ctrl-C and resumed. The load
    is a stand-in (sitecustomize): the k-th call of os.getloadavg() in a runner gives a 1-minute load of k (and 100,
    200 for 5 and 15 minutes), so a part of n samples adds 1..n."""
    (fake / "site").mkdir()
    (fake / "site" / "sitecustomize.py").write_text(
        "import itertools, os\ncalls = itertools.count(1)\nos.getloadavg = lambda: (float(next(calls)), 100.0, 200.0)\n"
    )
    env = test_env(PYTHONPATH=os.pathsep.join(filter(None, [str(fake / "site"), os.environ.get("PYTHONPATH")])))
    grid = [
        "--command",
        "python fake.py --checkpoint-every 1 --sleep 600",
        "--env-ids",
        "EnvA-v0",
        "--seeds",
        1,
        "--out",
        "out",
        "--status-every",
        0.3,
    ]
    proc = start_runner(fake, *grid, env=env)
    deadline = time.time() + 60  # a safety net against a hang, not a timing assertion

    def sampled_and_saved():
        samples = (states(fake / "out").get(("EnvA-v0", 1), {}).get("load_1min") or {}).get("samples", 0)
        return samples >= 2 and list(fake.glob("runs/*/fake.pt"))

    while not sampled_and_saved():
        assert time.time() < deadline and proc.poll() is None, proc.stdout.read() if proc.poll() is not None else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    first = states(fake / "out")[("EnvA-v0", 1)]
    n1 = first["load_1min"]["samples"]
    assert n1 >= 3  # two while it ran (waited for), one at its end
    assert first["status"] == "interrupted"
    assert first["load_1min"] == {"mean": pytest.approx((n1 + 1) / 2), "max": n1, "samples": n1}
    assert (first["cpu_model"], first["cores"]) == (expected_cpu_model(), os.cpu_count())
    assert first["threads"] == len(os.sched_getaffinity(0))  # one worker: all the cores

    proc = subprocess.run(
        [sys.executable, str(RUNNER), *map(str, grid + ["--threads", 1])],
        cwd=fake,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_ok(proc)
    done = states(fake / "out")[("EnvA-v0", 1)]
    assert done["status"] == "done" and done["resumed_from"]  # the second part of the same run
    n = done["load_1min"]["samples"]
    n2 = n - n1
    assert n2 >= 1  # at least the sample at its end
    assert done["load_1min"] == {
        "mean": pytest.approx((n1 * (n1 + 1) / 2 + n2 * (n2 + 1) / 2) / n),
        "max": max(n1, n2),
        "samples": n,
    }
    assert (done["cpu_model"], done["cores"], done["threads"]) == (expected_cpu_model(), os.cpu_count(), 1)


def test_a_closed_terminal_stops_the_runs_as_ctrl_c_does(fake):
    """The runner in a terminal that goes away (SIGHUP, its output can no longer be written): its run is stopped and
    recorded as interrupted, with its folder, rather than left running unrecorded."""
    import pty

    argv = [
        sys.executable,
        str(RUNNER),
        "--command",
        "python fake.py --checkpoint-every 1 --sleep 600",
        "--env-ids",
        "EnvA-v0",
        "--seeds",
        "1",
        "--out",
        "out",
    ]
    here = os.getcwd()
    pid, terminal = pty.fork()
    if pid == 0:  # the runner, in a new session whose terminal is the pty
        try:
            os.chdir(fake)
            os.execve(argv[0], argv, test_env())
        finally:
            os._exit(127)
    assert os.getcwd() == here
    deadline = time.time() + 60  # a safety net against a hang, not a timing assertion
    while (
        not (
            list(fake.glob("runs/*/fake.pt"))
            and "fake run" in "".join(p.read_text() for p in (fake / "out").glob("*.log"))
        )
        and time.time() < deadline
    ):
        time.sleep(0.1)
    os.close(terminal)  # hang up
    _, status = os.waitpid(pid, 0)
    state = states(fake / "out")[("EnvA-v0", 1)]
    try:
        assert os.waitstatus_to_exitcode(status) == 130
        (folder,) = (fake / "runs").iterdir()
        assert (state["status"], state["returncode"], state["run_names"]) == ("interrupted", 130, [folder.name])
    finally:  # a run left going would sleep on
        with contextlib.suppress(ProcessLookupError):
            os.kill(state["pid"], signal.SIGKILL)


def test_runs_of_a_killed_runner_are_not_started_twice(fake):
    """A runner killed outright (SIGKILL) leaves its runs going: another runner on the same --out skips them while
    they run, rather than start or continue a second copy."""
    grid = ["--command", "python fake.py --sleep 600", "--env-ids", "EnvA-v0", "--seeds", 1, "--out", "out"]
    proc = start_runner(fake, *grid)
    wait_until(lambda: states(fake / "out").get(("EnvA-v0", 1), {}).get("pid") and calls(fake), time.time() + 60)
    proc.kill()
    proc.communicate(timeout=60)
    pid = states(fake / "out")[("EnvA-v0", 1)]["pid"]
    try:
        out = run_runner(fake, *grid, "--dry-run").stdout
        assert f"skip (still running here as pid {pid}, started by another runner): EnvA-v0 seed 1" in out
        assert "would run" not in out
    finally:
        os.kill(pid, signal.SIGKILL)
    deadline = time.time() + 60
    # dead or a zombie
    while Path(f"/proc/{pid}/cmdline").exists() and Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.time() < deadline
        time.sleep(0.1)
    # gone: it runs again
    assert run_runner(fake, *grid, "--dry-run").stdout.count("would run") == 1


def test_two_runs_in_one_folder_are_refused_and_whitespace_is_no_new_run(fake):
    """Two arms started together that write into one run folder: the runner records the folder for the first run to
    end and refuses it to the other (a failed run, with the reason), so no report mixes two runs' scalars."""
    arm = ["--env-ids", "EnvA-v0", "--seeds", 1, "--out", "out"]
    both = ["--command", "python fake.py --same-folder 1 --sleep 1", *arm]
    proc = start_runner(fake, *both)
    other = run_runner(fake, "--command", "python fake.py --same-folder 1 --sleep 1 --tag b", *arm)
    first_out, _ = proc.communicate(timeout=60)
    assert sorted([proc.returncode, other.returncode]) == [0, 1], first_out + other.stdout
    st = [json.loads(p.read_text()) for p in (fake / "out").glob("*.json")]
    assert sorted(d["status"] for d in st) == ["done", "failed"]
    done, failed = sorted(st, key=lambda d: d["status"])
    folder = (fake / "stamp_1.txt").read_text()[len("runs/") :]
    assert done["run_names"] == [folder] and failed["run_names"] == []
    assert failed["error"].startswith(f"its run folder runs/{folder} is recorded for another run")
    assert "two runs wrote into one folder" in (first_out + other.stdout)
    # the same command with other spaces is the same run: done, not run again
    n = len(calls(fake))
    cmd = done["command"].replace(" ", "   ")
    # and a corrupt state file: one line, then on
    (fake / "out" / "zz.json").write_text("{half a state")
    proc = run_runner(fake, "--command", cmd, *arm)
    assert "1 already done" in proc.stdout and len(calls(fake)) == n
    assert proc.stderr.startswith("run.py: warning: skip out/zz.json: not a state file (")
    assert len(proc.stderr.splitlines()) == 1


def test_second_ctrl_c_kills_at_once_in_one_line(fake):
    grid = [
        "--command",
        "python fake.py --sleep 600 --stubborn 1",
        "--env-ids",
        "EnvA-v0",
        "--seeds",
        1,
        "--out",
        "out",
        "--grace",
        600,
    ]
    proc = start_runner(fake, *grid)
    log = lambda: "".join(p.read_text() for p in (fake / "out").glob("*.log"))  # noqa: E731
    deadline = time.time() + 60
    wait_until(lambda: "started" in log(), deadline)
    proc.send_signal(signal.SIGINT)
    # the run ignores it: the runner waits
    wait_until(lambda: "fake got SIGINT" in log(), deadline)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert (
        len(lines) == 2 and lines[0].startswith("interrupted") and lines[1] == "second interrupt: killing 1 run(s) now"
    )


def test_error_line_of_a_failed_run(tmp_path):
    sys.path.insert(0, str(REPO / "benchmark"))
    runner = load_script("benchmark/run.py")
    log = tmp_path / "a.log"
    proc = subprocess.run(
        [sys.executable, str(REPO / "ppo.py"), "--learning-rat", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=test_env(),
    )
    assert proc.returncode == 2
    log.write_text("$ python ppo.py\n" + proc.stdout + proc.stderr)
    # tyro's box: its message
    assert runner.error_line(log) == "Unrecognized options: --learning-rat, 1"
    box = "╭─ Unrecognized options ─────╮\n│ Unrecognized options: --x │\n│ ────────────────────────── │\n╰───╯\n"
    # another program's tyro box: its message, not its border
    log.write_text("$ python other.py\n" + box)
    assert runner.error_line(log) == "Unrecognized options: --x"
    log.write_text("step 1\nTraceback (most recent call last):\n  File x\nValueError: bad\n")
    assert runner.error_line(log) == "ValueError: bad"


def test_usage_errors(fake):
    assert_usage_error(run_runner(fake, "--command", "python fake.py", "--env-ids", "A", "--workers", 0), "--workers")
    assert_usage_error(run_runner(fake, "--command", "python fake.py", "--env-ids", "A", "--cwd", "fake.py"), "--cwd")
    assert_usage_error(run_report(fake, "--runs", "nope"), "--runs")
    assert_usage_error(run_report(fake, "--runs", ".", "--last", 0), "--last")
    grid = ["--command", "python fake.py", "--env-ids", "A"]
    assert_usage_error(run_runner(fake, *grid, "--partition", "cpu"), "--partition is an option of --slurm")
    assert_usage_error(run_runner(fake, *grid, "--slurm", "--dry-run", "--time", "1 h"), "--time")
    assert_usage_error(run_runner(fake, *grid, "--slurm", "--dry-run", "--slurm-template", "nope.sh"), "nope.sh")
    (fake / "bin").mkdir()  # a PATH without sbatch
    proc = run_tool("run.py", *grid, "--slurm", cwd=fake, PATH=str(fake / "bin"))
    assert_usage_error(proc, "--slurm: sbatch not found")


def test_slurm_dry_run_prints_the_batch_script_of_the_runs_not_done(fake):
    """--slurm --dry-run: the batch script of the runs not done, one array task each, throttled to --workers; the
    cluster flags and extra lines as #SBATCH lines after the template's, the template's commands after them; the
    script is valid bash; nothing is written or submitted."""
    grid = ["--command", "python fake.py", "--env-ids", "EnvA-v0", "EnvB-v0", "--seeds", 1, 2, "--out", "out"]
    # one run done
    assert_ok(run_runner(fake, *grid[:-2], "--seeds", 1, "--env-ids", "EnvA-v0", "--out", "out"))
    (fake / "site.sh").write_text("#!/bin/bash -l\n#SBATCH --qos=low\n#SBATCH --partition=site\n\nmodule load python\n")
    before = sorted(p.name for p in (fake / "out").iterdir())
    proc = run_runner(
        fake,
        *grid,
        "--slurm",
        "--dry-run",
        "--workers",
        2,
        "--partition",
        "cpu",
        "--time",
        "01:00:00",
        "--cpus-per-task",
        2,
        "--gpus-per-task",
        1,
        "--account",
        "rl",
        "--sbatch",
        "mem=4G",
        "--sbatch=--constraint=avx2",
        "--slurm-template",
        "site.sh",
    )
    assert_ok(proc)
    assert "4 runs (2 envs x 2 seeds), 1 already done, 0 queued or running in Slurm" in proc.stdout
    script = proc.stdout[proc.stdout.index("#!") :]
    lines = script.splitlines()
    assert lines[:3] == ["#!/bin/bash -l", "#SBATCH --qos=low", "#SBATCH --partition=site"]
    tasks = [line for line in lines if line.startswith("#   task ")]
    assert tasks == ["#   task 0: EnvA-v0 seed 2", "#   task 1: EnvB-v0 seed 1", "#   task 2: EnvB-v0 seed 2"]
    ours = [line for line in lines[3:] if line.startswith("#SBATCH ")]
    assert ours == [
        "#SBATCH --job-name=fake",
        "#SBATCH --array=0-2%2",
        f"#SBATCH --output={(fake / 'out' / 'slurm').resolve()}/%A_%a.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --requeue",
        "#SBATCH --partition=cpu",
        "#SBATCH --account=rl",
        "#SBATCH --time=01:00:00",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --gpus-per-task=1",
        "#SBATCH --mem=4G",
        "#SBATCH --constraint=avx2",
    ]
    commands = [line for line in lines if line.strip() and not line.startswith("#")]
    assert commands[0] == "module load python" and lines.index(commands[0]) > lines.index(ours[-1])
    assert commands[1].startswith(f"exec {sys.executable} {RUNNER} --slurm-task {(fake / 'out' / 'slurm').resolve()}/")
    assert len(commands) == 2
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert sorted(p.name for p in (fake / "out").iterdir()) == before  # nothing written


def test_slurm_runner_records_how_sacct_says_ended_tasks_ended(fake):
    """--slurm again after a job array ended, with stand-ins for sbatch, squeue (the tasks are gone) and sacct: where
    sacct does not answer (a cluster without accounting) the state files stay as the tasks left them; where it
    answers, by job array, the runner says how each task ended and records it: a run its task left running (killed
    at its time limit before it recorded its end) and one never started (cancelled while queued) are interrupted,
    with Slurm's state; a run whose task recorded its end keeps it and gets Slurm's state beside it."""
    bin_ = fake / "bin"
    bin_.mkdir()
    for name, body in (
        ("sbatch", "echo 7"),
        ("squeue", "true"),
        (
            "sacct",
            'echo "$*" >> sacct_calls.txt\ncase " $* " in *" --completion "*) exit 1;; esac\n'
            "[ -f sacct.txt ] && exec cat sacct.txt\n"
            'echo "Slurm accounting storage is disabled" >&2; exit 1',
        ),
    ):
        (bin_ / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_ / name).chmod(0o755)
    path = f"{bin_}:{os.environ['PATH']}"
    grid = ["--command", "python fake.py", "--env-ids", "EnvA-v0", "--seeds", 1, 2, 3, "--out", "out", "--slurm"]
    proc = run_tool("run.py", *grid, cwd=fake, PATH=path)
    assert_ok(proc)
    assert "submitted Slurm job 7: 3 array tasks" in proc.stdout
    # what the tasks left: task 0 killed while its run went on, task 1 recorded its run interrupted, task 2 never ran
    left = {
        1: dict(status="running", slurm_job="7_0", slurm_job_id="8"),
        2: dict(status="interrupted", slurm_job="7_1", slurm_job_id="7", returncode=143, error="stopped"),
    }
    for file in (fake / "out").glob("*.json"):
        state = json.loads(file.read_text())
        file.write_text(json.dumps(dict(state, **left.get(state["seed"], {}))))
    before = states(fake / "out")

    proc = run_tool("run.py", *grid, "--dry-run", cwd=fake, PATH=path)
    assert_ok(proc)
    assert " in Slurm (" not in proc.stdout and states(fake / "out") == before  # today's behaviour
    # tasks' own ids
    assert (fake / "sacct_calls.txt").read_text().splitlines()[-1].endswith("--completion --jobs 8,7")

    (fake / "sacct.txt").write_text(
        "7_0|TIMEOUT|0:0|2026-11-25T10:00:00\n"
        "7_1|CANCELLED by 1000|0:15|2026-11-25T10:00:01\n"
        # the tasks that never started
        "7_[2-4%2]|CANCELLED by 1000|0:0|Unknown\n"
    )
    proc = run_tool("run.py", *grid, "--dry-run", cwd=fake, PATH=path)
    assert_ok(proc)
    lines = [line for line in proc.stdout.splitlines() if " in Slurm (" in line]
    assert lines == [
        "  interrupted in Slurm (TIMEOUT, task 7_0, exit 0:0; the task ended before its run recorded its end): "
        "EnvA-v0 seed 1",
        "  interrupted in Slurm (CANCELLED, task 7_1, exit 0:15): EnvA-v0 seed 2",
        "  interrupted in Slurm (CANCELLED, task 7_2, exit 0:0; the task ended before its run recorded its end): "
        "EnvA-v0 seed 3",
    ], proc.stdout
    after = states(fake / "out")
    assert [
        (
            after[("EnvA-v0", seed)]["status"],
            after[("EnvA-v0", seed)]["slurm_state"],
            after[("EnvA-v0", seed)].get("returncode"),
        )
        for seed in (1, 2, 3)
    ] == [("interrupted", "TIMEOUT", None), ("interrupted", "CANCELLED", 143), ("interrupted", "CANCELLED", None)]
    assert after[("EnvA-v0", 1)]["error"] == (
        "the Slurm task 7_0 ended TIMEOUT (exit code 0:0) before it recorded how its run ended"
    )
    assert after[("EnvA-v0", 2)]["error"] == "stopped"
    # by job array
    assert (fake / "sacct_calls.txt").read_text().splitlines()[-1].endswith("--jobs 7")


@pytest.mark.parametrize(
    "tool, shown",
    [
        ("run.py", ["--seeds: (default: 1 2 3)", "--grace: (default: 30.0)", "--threads: (default: cores // workers"]),
        ("report.py", ["--std: (default: population)", "--reference: (default: benchmark/reference.csv)"]),
    ],
)
def test_help_names_each_default_once(tool, shown):
    """--help: every option's default appears once, either as the help's own words or as argparse's "(default: X)",
    and no option says "(default: None)"."""
    proc = run_tool(tool, "--help")
    assert_ok(proc)
    options, name = {}, None
    for line in proc.stdout[proc.stdout.index("options:") :].splitlines()[1:]:
        if line.startswith("  -"):
            name = line.split()[0].rstrip(",")
        options[name] = options.get(name, "") + " " + line.strip()
    assert len(options) > 5, proc.stdout
    for name, text in options.items():
        assert text.count("(default") <= 1, (name, text)
        assert "(default: None)" not in text and "(default: False)" not in text, (name, text)
    for item in shown:
        name, default = item.split(": ", 1)
        assert default in options[name], (name, options[name])


# ---------------------------------------------------------------------------------------------- report.py


def write_run(runs, env_id, exp_name, seed, stamp, total, returns, sps, wall, last_step=None, t0=1000.0, args=None):
    """A run folder as a ppo*.py script writes it: hyperparameters text, episodic returns spread evenly over
    [0, last_step], charts/SPS at the middle and the end; scalar wall times from t0 to t0 + wall. args: also write
    args.json, {"script": ..., **every setting} (as the scripts do at start)."""
    from torch.utils.tensorboard import SummaryWriter

    last_step = total if last_step is None else last_step
    folder = runs / f"{env_id.replace('/', '_') if args else env_id}__{exp_name}__{seed}__{stamp}"
    writer = SummaryWriter(str(folder))
    params = {"exp_name": exp_name, "seed": seed, "env_id": env_id, "total_timesteps": total}
    if args is not None:
        params = dict(args, **params)
        (folder / "args.json").write_text(json.dumps(params))
        params.pop("script")
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in params.items()))
    writer.add_scalar("charts/SPS", sps[0], last_step // 2, walltime=t0)
    for i, r in enumerate(returns):
        writer.add_scalar(
            "charts/episodic_return",
            r,
            last_step * (i + 1) // len(returns),
            walltime=t0 + wall * (i + 1) / (len(returns) + 1),
        )
    writer.add_scalar("charts/SPS", sps[1], last_step, walltime=t0 + wall)
    writer.close()


def table_row(text, *first_cells):
    """The cells of the Markdown table row that starts with these cells."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[: len(first_cells)] == list(first_cells):
            return cells
    raise AssertionError(f"no row {first_cells} in:\n{text}")


def main_table(text):
    """The rows (as cells) of the report's first table, the one of every arm."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| env | arm |")) + 2
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


@pytest.fixture(scope="module")
def fake_runs(tmp_path_factory):
    """3 seeds of ppo on CartPole-v1 at 500k with known numbers, plus a run superseded by a newer run of its seed,
    an incomplete run, and a 1k-step group. Returns (runs folder, expected per-seed numbers)."""
    runs = tmp_path_factory.mktemp("report") / "runs"
    rng = np.random.default_rng(0)
    expected = {}
    for seed in (1, 2, 3):
        # the first 10 must not count
        returns = np.concatenate([np.full(10, 1000.0), rng.uniform(0, 100 * seed, 20)])
        expected[seed] = dict(ret=returns[-20:].mean(), sps=100.0 * seed, wall=10.0 * seed)
        write_run(runs, "CartPole-v1", "ppo", seed, 2000 + seed, 500000, returns, (5.0, 100.0 * seed), 10.0 * seed)
    # older run of seed 1
    write_run(runs, "CartPole-v1", "ppo", 1, 1000, 500000, np.zeros(30), (1.0, 1.0), 5.0)
    # stopped
    write_run(runs, "CartPole-v1", "ppo", 4, 3000, 500000, np.zeros(30), (1.0, 1.0), 5.0, last_step=1000)
    # another budget
    write_run(runs, "CartPole-v1", "ppo", 1, 4000, 1000, np.array([7.0, 9.0]), (3.0, 4.0), 2.0)
    write_run(runs, "ALE/Pong-v5", "ppo_atari_envpool", 1, 5000, 2000, np.array([-21.0, -20.0]), (3.0, 4.0), 2.0)
    return runs, expected


def test_report_table_numbers(fake_runs, tmp_path):
    runs, expected = fake_runs
    proc = run_report(tmp_path, "--runs", runs, "--out", tmp_path / "results" / "cc", "--note", "Command: test")
    assert_ok(proc)
    text = (tmp_path / "results" / "cc.md").read_text()
    assert text == proc.stdout[proc.stdout.index("# ") :]
    assert "Command: test" in text
    assert "population std, ddof=0" in text
    rets = [expected[s]["ret"] for s in (1, 2, 3)]
    # two arms of ppo.py in CartPole-v1 (500k and 1k steps), next to each other, labelled by what differs
    row = table_row(text, "CartPole-v1", "ppo.py total_timesteps=500000", "500k")
    assert row[3] == "3 (1,2,3)"  # seed 4 stopped early; seed 1's older run is superseded
    assert row[4] == f"{np.mean(rets):.2f} ± {np.std(rets):.2f}"
    assert row[5] == "200"  # mean final SPS
    assert row[6] == "20 s"  # mean wall time
    assert row[7:] == ["492.40 ± 13.05", "497.54 ± 4.02", "496.8, 9107 SPS, 58 s"]
    row = table_row(text, "CartPole-v1", "ppo.py total_timesteps=1000", "1k")
    assert row[3:7] == ["1 (1)", "8.00 (last 2 ep.)", "4", "2 s"]  # 2 episodes, not "last 20"
    assert row[7] == "492.40 ± 13.05 @500k"  # the default settings but the steps
    # by env; the arm with the reference settings first
    assert [cells[:2] for cells in main_table(text)] == [
        ["ALE/Pong-v5", "ppo_atari_envpool.py"],
        ["CartPole-v1", "ppo.py total_timesteps=500000"],
        ["CartPole-v1", "ppo.py total_timesteps=1000"],
    ]
    assert table_row(text, "ALE/Pong-v5", "ppo_atari_envpool.py", "2k")[3:5] == ["1 (1)", "-20.50 (last 2 ep.)"]
    # the per-run table lists every run, the left-out ones with the reason; the header counts them all
    assert f"Runs: 7 from `{runs}` (2 of them left out of the tables, see Runs), logged " in text
    assert table_row(text, "CartPole-v1__ppo__1__1000")[-1] == "superseded by a newer run of the same seed and settings"
    assert table_row(text, "CartPole-v1__ppo__4__3000")[-1] == "incomplete"
    for seed in (1, 2, 3):
        assert table_row(text, f"CartPole-v1__ppo__{seed}__{2000 + seed}")[4] == f"{expected[seed]['ret']:.2f}"

    proc = run_report(tmp_path, "--runs", runs, "--std", "sample", "--include", "__[23]__")
    assert_ok(proc)
    # one arm left: labelled by its script
    row = table_row(proc.stdout, "CartPole-v1", "ppo.py", "500k")
    assert row[3] == "2 (2,3)"
    assert row[4] == f"{np.mean(rets[1:]):.2f} ± {np.std(rets[1:], ddof=1):.2f}"
    assert "sample std, ddof=1" in proc.stdout


def test_report_plots_are_png(fake_runs, tmp_path):
    import matplotlib.pyplot as plt

    runs, _ = fake_runs
    assert_ok(run_report(tmp_path, "--runs", runs, "--out", tmp_path / "cc"))
    pngs = list((tmp_path / "cc").iterdir())
    assert sorted(p.name for p in pngs) == ["ALE_Pong-v5.png", "CartPole-v1.png"]
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        # 6 x 4 in at 100 dpi, trimmed, plus the legend under the axes
        height, width = plt.imread(png).shape[:2]
        assert 450 <= width <= 650 and 400 <= height <= 600, (width, height)
    text = (tmp_path / "cc.md").read_text()
    assert "![CartPole-v1](cc/CartPole-v1.png)" in text and "![ALE/Pong-v5](cc/ALE_Pong-v5.png)" in text


def test_report_reads_several_runs_folders_as_one(tmp_path):
    returns = {seed: np.arange(20.0) + 10 * seed for seed in (1, 2, 3)}
    # seed 1 kept in one folder, seeds 2 and 3 in another (a long run kept apart from its sweep)
    for seed, folder in ((1, "long"), (2, "sweep"), (3, "sweep")):
        write_run(tmp_path / folder, "CartPole-v1", "ppo", seed, 100 + seed, 1000, returns[seed], (1.0, 2.0), 5.0)
    proc = run_report(tmp_path, "--runs", "sweep", "long")
    assert_ok(proc)
    means = [returns[seed].mean() for seed in (1, 2, 3)]
    assert table_row(proc.stdout, "CartPole-v1", "ppo.py", "1k")[3:5] == [
        "3 (1,2,3)",
        f"{np.mean(means):.2f} ± {np.std(means):.2f}",
    ]
    assert "Runs: 3 from `sweep`, `long`, logged " in proc.stdout
    # the same run folder name in two of them: which to read is not for the report to guess
    write_run(tmp_path / "long", "CartPole-v1", "ppo", 2, 102, 1000, returns[2], (1.0, 2.0), 5.0)
    proc = run_report(tmp_path, "--runs", "sweep", "long")
    assert proc.returncode == 1
    message = "run folder CartPole-v1__ppo__2__102 is under more than one of --runs sweep long"
    assert proc.stderr == f"report.py: error: {message}\n"
    assert_usage_error(run_report(tmp_path, "--runs", "sweep", "nope"), "--runs nope: no such folder")


def state(status, seed, run_names=(), command="python ppo.py", env_id="CartPole-v1", **fields):
    """A state file of benchmark/run.py, as its content."""
    return json.dumps(
        dict(status=status, command=command, env_id=env_id, seed=seed, run_names=list(run_names), **fields)
    )


def test_report_sweep_picks_the_runner_runs_and_lists_failed_and_missing_ones(fake_runs, tmp_path):
    runs, _ = fake_runs
    out = tmp_path / "state"
    out.mkdir()
    (out / "a.json").write_text(state("done", 2, ["CartPole-v1__ppo__2__2002"], ended=5))
    (out / "b.json").write_text(state("done", 3, ["CartPole-v1__ppo__3__2003"], ended=5))
    (out / "c.json").write_text(state("failed", 1, [], returncode=2, error="Unrecognized options: --learning-rat"))
    (out / "d.json").write_text(state("pending", 4))
    (out / "e.json").write_text("{half a st")
    proc = run_report(tmp_path, "--runs", runs, "--sweep", out)
    assert_ok(proc)
    # one line for the corrupt state file, no traceback
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"report.py: warning: skip {out / 'e.json'}: not a state file of benchmark/run.py (")
    # seeds 2 and 3 of the 4 the command asked for
    assert table_row(proc.stdout, "CartPole-v1", "ppo.py", "500k")[3] == "2 of 4 (2,3)"
    assert "1k" not in proc.stdout and "Pong" not in proc.stdout
    failed = proc.stdout[proc.stdout.index("## Failed and missing runs") :]
    assert table_row(failed, "CartPole-v1", "1")[2:4] == [
        "`python ppo.py`",
        "failed (exit 2): Unrecognized options: --learning-rat",
    ]
    assert table_row(failed, "CartPole-v1", "4")[3] == "not finished (pending)"
    assert "CartPole-v1 | 2 |" not in failed


def test_report_usage_mistakes_each_say_what_is_wrong(fake_runs, tmp_path):
    runs, _ = fake_runs
    (tmp_path / "empty").mkdir()
    assert_usage_error(run_report(tmp_path, "--runs", runs, "--sweep", "nope"), "--sweep nope: no such folder")
    assert_usage_error(run_report(tmp_path, "--runs", runs, "--sweep", "empty"), "--sweep empty: no state files")
    assert_usage_error(run_report(tmp_path, "--runs", runs, "--reference", "nope.csv"), "--reference nope.csv")
    proc = run_report(tmp_path, "--runs", runs, "--include", "Nothing")
    assert proc.returncode == 1 and proc.stderr.startswith("report.py: error: --include 'Nothing' matches none")
    proc = run_report(tmp_path, "--runs", "empty")
    assert proc.returncode == 1 and proc.stderr.startswith("report.py: error: no TensorBoard runs")
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "a.json").write_text(state("done", 1, ["CartPole-v1__ppo__1__999"]))
    proc = run_report(tmp_path, "--runs", runs, "--sweep", "s")
    assert proc.returncode == 1 and "none of the 1 run folders the sweep recorded is under --runs" in proc.stderr


def test_bootstrap_difference_ci_against_the_exact_bootstrap_distribution():
    """With 3 seeds per arm the bootstrap distribution of mean(b) - mean(a) is discrete: 27 x 27 equally likely
    resamples, enumerated here. The report's Monte Carlo percentiles (10000 resamples) must sit where the exact
    distribution has 2.5% and 97.5% of its mass, up to 4 standard errors of a proportion estimated from 10000 draws
    (4 * sqrt(0.025 * 0.975 / 10000) = 0.0062): a wrong resampling (pooled arms, no replacement, the wrong tail)
    moves them much further."""
    import itertools

    sys.path.insert(0, str(REPO / "benchmark"))
    report = load_script("benchmark/report.py")
    a, b = np.array([10.0, 31.0, 17.0]), np.array([40.0, 22.0, 61.0])
    diff, lo, hi = report.bootstrap_diff_ci(a, b, reps=10000)
    assert diff == pytest.approx(b.mean() - a.mean())
    means = lambda x: np.array([np.mean(c) for c in itertools.product(x, repeat=3)])  # noqa: E731
    exact = (means(b)[:, None] - means(a)[None, :]).ravel()
    tol = 4 * np.sqrt(0.025 * 0.975 / 10000)
    for value, p in ((lo, 0.025), (hi, 0.975)):
        assert np.mean(exact < value) <= p + tol and np.mean(exact <= value) >= p - tol, (value, p)
    assert lo < diff < hi


def test_runs_with_and_without_args_json_of_the_same_settings_are_one_arm(tmp_path):
    """A run folder without args.json (older runs, other programs) has its settings read from the logged
    hyperparameters table, whose header rows are not settings: with the same settings it joins the arm of a run
    that has args.json."""
    runs = tmp_path / "runs"
    write_run(runs, "CartPole-v1", "ppo", 1, 2001, 1000, [100.0] * 3, (1.0, 2.0), 1.0, args={"script": "ppo.py"})
    write_run(runs, "CartPole-v1", "ppo", 2, 2002, 1000, [300.0] * 3, (1.0, 2.0), 1.0)
    proc = run_report(tmp_path, "--runs", runs)
    assert_ok(proc)
    ((env_id, arm, _, seeds, ret, *_),) = main_table(proc.stdout)
    assert (env_id, arm, seeds, ret) == ("CartPole-v1", "ppo.py", "2 (1,2)", "200.00 ± 100.00 (last 3 ep.)")


def test_resume_and_a_flag_older_runs_do_not_record_make_no_arm(tmp_path):
    """Seed 1 ran before the script had --compile (its args.json lacks it), seed 2 was continued with --resume: with
    seed 3 they form one arm; a setting that differs (the learning rate) still makes another."""
    runs = tmp_path / "runs"
    args = {"script": "ppo.py", "learning_rate": "0.00025", "compile": False}
    for seed, extra in ((1, {"compile": None}), (2, {"resume": "runs/x/ppo.pt"}), (3, {})):
        settings = {k: v for k, v in {**args, **extra}.items() if v is not None}
        write_run(runs, "CartPole-v1", "ppo", seed, 2000, 1000, [100.0 * seed] * 3, (1.0, 2.0), 1.0, args=settings)
    write_run(
        runs,
        "CartPole-v1",
        "ppo",
        1,
        "2000-2",
        1000,
        [500.0] * 3,
        (1.0, 2.0),
        1.0,
        args={**args, "learning_rate": "0.001"},
    )
    proc = run_report(tmp_path, "--runs", runs)
    assert_ok(proc)
    assert [(cells[1], cells[3], cells[4]) for cells in main_table(proc.stdout)] == [
        ("ppo.py learning_rate=0.00025", "3 (1,2,3)", f"200.00 ± {np.std([100, 200, 300]):.2f} (last 3 ep.)"),
        ("ppo.py learning_rate=0.001", "1 (1)", "500.00 (last 3 ep.)"),
    ]


def test_report_compares_two_arms_with_the_same_seeds(tmp_path):
    """Two learning rates of ppo.py, seeds 1-3 each, in two envs, the runs written with args.json: one row per arm
    with its label and its mean; the reference figures on the default arm only; the difference with the report's
    bootstrap CI; IQM and probability of improvement (rliable) against independent computations of the point
    estimates."""
    need("rliable")
    sys.path.insert(0, str(REPO / "benchmark"))
    report = load_script("benchmark/report.py")
    runs = tmp_path / "runs"
    returns = {
        ("CartPole-v1", "0.00025"): [100.0, 150.0, 120.0],
        ("CartPole-v1", "0.001"): [300.0, 250.0, 400.0],
        ("Acrobot-v1", "0.00025"): [-200.0, -150.0, -100.0],
        ("Acrobot-v1", "0.001"): [-90.0, -180.0, -85.0],
    }
    for (env_id, lr), values in returns.items():
        for seed, value in zip((1, 2, 3), values):
            write_run(
                runs,
                env_id,
                "ppo",
                seed,
                f"2000{'-2' * (lr == '0.001')}",
                1000,
                [value] * 3,
                (1.0, 2.0),
                1.0,
                args={"script": "ppo.py", "learning_rate": lr, "num_envs": 4},
            )
    proc = run_report(tmp_path, "--runs", runs, "--reps", 2000, "--rliable-reps", 500)
    assert_ok(proc)
    text = proc.stdout
    assert [cells[:2] for cells in main_table(text)] == [
        ["Acrobot-v1", "ppo.py learning_rate=0.00025"],
        ["Acrobot-v1", "ppo.py learning_rate=0.001"],
        ["CartPole-v1", "ppo.py learning_rate=0.00025"],
        ["CartPole-v1", "ppo.py learning_rate=0.001"],
    ]
    for (env_id, lr), values in returns.items():
        row = table_row(text, env_id, f"ppo.py learning_rate={lr}")
        assert row[3:5] == ["3 (1,2,3)", f"{np.mean(values):.2f} ± {np.std(values):.2f} (last 3 ep.)"]
        # the reference figures: the default learning rate's arm only
        assert (row[7] == "—") == (lr == "0.001")
    for env_id in ("CartPole-v1", "Acrobot-v1"):
        part = text[text.index(f"### {env_id}") :]
        a, b = returns[(env_id, "0.00025")], returns[(env_id, "0.001")]
        diff, lo, hi = report.bootstrap_diff_ci(a, b, reps=2000)
        assert diff == pytest.approx(np.mean(b) - np.mean(a))
        row = table_row(part, "ppo.py learning_rate=0.001")
        assert row[3] == f"{diff:+.2f} [{lo:+.2f}, {hi:+.2f}]"
        assert row[4].startswith("cannot tell" if lo <= 0 <= hi else "higher: a hint only, too few seeds")
    # Acrobot: the arms overlap
    assert "cannot tell: the CI includes 0 (3 seeds are too few)" in text
    # rliable: P(0.001 improves on 0.00025) = per env the share of pairs of runs it wins, averaged over envs
    wins = [
        np.mean([x > y for x in returns[(e, "0.001")] for y in returns[(e, "0.00025")]])
        for e in ("CartPole-v1", "Acrobot-v1")
    ]
    agg = text[text.index("## Over all envs") :]
    assert table_row(agg, "ppo.py learning_rate=0.001")[2].startswith(f"{np.mean(wins):.2f} [")
    normalized = []
    for e in ("CartPole-v1", "Acrobot-v1"):
        both = returns[(e, "0.00025")] + returns[(e, "0.001")]
        normalized += [(x - min(both)) / (max(both) - min(both)) for x in returns[(e, "0.001")]]
    # 6 scores: a 25% trimmed mean drops int(1.5) = 1 at each end
    iqm = np.mean(sorted(normalized)[1:-1])
    assert table_row(agg, "ppo.py learning_rate=0.001")[1].startswith(f"{iqm:.2f} [")

    # without rliable: the same report, its aggregate section one line saying what is missing
    (tmp_path / "no_rliable" / "rliable").mkdir(parents=True)
    (tmp_path / "no_rliable" / "rliable" / "__init__.py").write_text("raise ImportError('not installed here')\n")
    proc = run_tool("report.py", "--runs", runs, "--reps", 2000, cwd=tmp_path, PYTHONPATH=str(tmp_path / "no_rliable"))
    assert_ok(proc)
    assert proc.stdout[: proc.stdout.index("## Over all envs")] == text[: text.index("## Over all envs")]
    assert (
        "IQM and probability of improvement: not computed: rliable cannot be imported (not installed here); "
        "pip install rliable (the plot extra)."
    ) in proc.stdout


def under_tables(text):
    """The first line after each Markdown table of a report (None for a table that ends the text)."""
    lines = text.splitlines() + [""]
    return [
        next((line for line in lines[i + 1 :] if line), None)
        for i in range(len(lines) - 1)
        if lines[i].startswith("|") and not lines[i + 1].startswith("|")
    ]


def test_report_names_the_library_versions_under_the_runs_table(tmp_path):
    """Under the table of runs, and nowhere else, a line names the library versions of the runs (args.json's
    "versions"; for a run without args.json, the same in its hyperparameters text): one set; "mixed" and each set with
    its runs where they differ; "not recorded" for older runs. The versions are no setting: runs that differ only in
    them are one arm."""
    runs = tmp_path / "runs"
    v1 = {"python": "3.11.7", "torch": "2.13.0+cpu", "gymnasium": "1.4.0"}
    v2 = dict(v1, torch="2.12.0")
    for lr, stamp in (("0.00025", 2000), ("0.001", 3000)):
        for seed in (1, 2):
            write_run(
                runs,
                "CartPole-v1",
                "ppo",
                seed,
                stamp + seed,
                1000,
                [100.0 * seed] * 3,
                (1.0, 2.0),
                1.0,
                args={"script": "ppo.py", "learning_rate": lr, "versions": v2 if stamp + seed == 3002 else v1},
            )
    (runs / "CartPole-v1__ppo__2__3002" / "args.json").unlink()
    # older: no versions
    write_run(
        runs,
        "CartPole-v1",
        "ppo",
        3,
        2003,
        1000,
        [300.0] * 3,
        (1.0, 2.0),
        1.0,
        args={"script": "ppo.py", "learning_rate": "0.00025"},
    )
    grid = ["--runs", runs, "--reps", 100, "--rliable-reps", 100]
    proc = run_report(tmp_path, *grid)
    assert_ok(proc)
    assert [row[1:4] for row in main_table(proc.stdout)] == [
        ["ppo.py learning_rate=0.00025", "1k", "3 (1,2,3)"],
        ["ppo.py learning_rate=0.001", "1k", "2 (1,2)"],
    ]
    mixed = (
        "Libraries: mixed, {} sets: python 3.11.7, torch 2.13.0+cpu, gymnasium 1.4.0 (3 runs: "
        "`CartPole-v1__ppo__1__2001`, `CartPole-v1__ppo__1__3001`, `CartPole-v1__ppo__2__2002`); "
        "python 3.11.7, torch 2.12.0, gymnasium 1.4.0 (1 run: `CartPole-v1__ppo__2__3002`){}."
    )
    every = mixed.format(3, "; not recorded (1 run: `CartPole-v1__ppo__3__2003`)")
    assert libraries_lines(proc.stdout) == [every]
    assert under_tables(proc.stdout.split("\n## Runs\n")[1]) == [every]

    proc = run_report(tmp_path, *grid, "--include", "__1__")
    assert_ok(proc)
    assert libraries_lines(proc.stdout) == ["Libraries: python 3.11.7, torch 2.13.0+cpu, gymnasium 1.4.0."]
    proc = run_report(tmp_path, *grid, "--include", "__3__")
    assert_ok(proc)
    assert libraries_lines(proc.stdout) == ["Libraries: not recorded."]
    assert under_tables(proc.stdout.split("\n## Runs\n")[1]) == ["Libraries: not recorded."]


def libraries_lines(text):
    """The lines of a report that name library versions."""
    return [line for line in text.splitlines() if line.startswith("Libraries:")]


def test_report_names_the_libraries_once_and_has_no_rliable_section_with_no_arms_in_every_env(tmp_path):
    """Two envs with two arms each, one arm in both (as benchmark/results/mujoco_v5.md): a comparison table per env,
    the library versions named once (under the table of runs), and no rliable section, since no two arms ran in every
    env."""
    runs = tmp_path / "runs"
    versions = {"python": "3.11.7", "torch": "2.13.0+cpu", "gymnasium": "1.4.0"}
    arms = {"CartPole-v1": ("0.00025", "0.001"), "Acrobot-v1": ("0.00025", "0.0005")}
    for env_id, rates in arms.items():
        for stamp, lr in enumerate(rates, 2000):
            for seed in (1, 2):
                write_run(
                    runs,
                    env_id,
                    "ppo",
                    seed,
                    f"{stamp}-{seed}",
                    1000,
                    [100.0 * seed] * 3,
                    (1.0, 2.0),
                    1.0,
                    args={"script": "ppo.py", "learning_rate": lr, "versions": versions},
                )
    proc = run_report(tmp_path, "--runs", runs, "--reps", 100, "--rliable-reps", 100)
    assert_ok(proc)
    text = proc.stdout
    assert [line for line in text.splitlines() if line.startswith("### ")] == ["### Acrobot-v1", "### CartPole-v1"]
    assert table_row(text[text.index("### Acrobot-v1") :], "ppo.py learning_rate=0.0005")[1] == "2"
    assert table_row(text[text.index("### CartPole-v1") :], "ppo.py learning_rate=0.001")[1] == "2"
    library_line = "Libraries: python 3.11.7, torch 2.13.0+cpu, gymnasium 1.4.0."
    assert libraries_lines(text) == [library_line]
    assert under_tables(text.split("\n## Runs\n")[1]) == [library_line]
    assert "## Over all envs" not in text and "rliable" not in text and "IQM" not in text


def run_folder(runs, script, env_id, seed, stamp, **settings):
    """A run's folder as a script makes it, runs/{env_id}__{exp_name}__{seed}__{stamp}, with its args.json:
    the script, exp_name, env_id and seed, and the settings given."""
    exp_name = script[: -len(".py")]
    folder = runs / f"{env_id}__{exp_name}__{seed}__{stamp}"
    folder.mkdir(parents=True)
    args = dict(script=script, exp_name=exp_name, env_id=env_id, seed=seed, **settings)
    (folder / "args.json").write_text(json.dumps(args))
    return folder


def log_part(folder, points, purge_step=None, target_reached=False):
    """One process of a run, as the scripts log it: its own events file in the run folder, with the scalars
    (tag, step, value, wall time) in their order; purge_step: a process that continues the run (--resume) from the
    checkpoint of that step, whose events after it TensorBoard then hides; target_reached: the text of
    --target-return."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder), purge_step=purge_step)
    for tag, step, value, wall in points:
        writer.add_scalar(f"charts/{tag}", value, step, walltime=wall)
    if target_reached:
        writer.add_text("target_reached", f"step {points[-1][1]}", points[-1][1])
    writer.close()


def test_report_thresholds_give_step_and_training_time_with_the_pauses_of_a_resumed_run_left_out(tmp_path):
    """--thresholds 18 20 --last 4 on two fabricated Pong runs. Seed 1 ran in two parts: its first process logged
    from t=1005 to 1042 s (37 s; its return at step 420, after its checkpoint at 400, is hidden by the second part),
    the second, after a pause, from 5003 to 5030 s (27 s). Its returns, as the report reads them: -21 10 17 19 20 |
    15 21 20 21 21; the means of 4 reach 18 at the 7th episode (19 20 15 21: 18.75, step 470, 5 s into the second
    part: 37 + 5 = 42 s) and 20 at the 10th (20.75, step 640: 37 + 21 = 58 s); training time 37 + 27 = 64 s, pauses
    (5030 - 1005) - 64 = 3961 s; SPS median of 10 11 12 13 25 26 27: 13, in both tables (27, the last value, is the
    second part's alone). It stopped at its target, before its budget, and still counts. Seed 2, one process from
    2010 to 2052 s: returns of 18 reach 18 only with 4 of them (step 400, 2040 s: 30 s), never 20. --sweep adds each
    run's command and machine, or "not recorded"."""
    runs = tmp_path / "runs"
    first = run_folder(runs, "ppo_atari_envpool.py", "Pong-v5", 1, 1000, total_timesteps=10000, target_return=20.0)
    second = run_folder(runs, "ppo_atari_envpool.py", "Pong-v5", 2, 2000, total_timesteps=500, target_return=20.0)
    log_part(
        first,
        [
            ("episodic_return", 50, -21, 1005),
            ("SPS", 100, 10, 1010),
            ("episodic_return", 150, 10, 1015),
            ("SPS", 200, 11, 1020),
            ("episodic_return", 250, 17, 1025),
            ("SPS", 300, 12, 1030),
            ("episodic_return", 350, 19, 1035),
            ("episodic_return", 380, 20, 1038),
            ("SPS", 400, 13, 1040),
            ("episodic_return", 420, 21, 1042),
        ],
    )
    log_part(
        first,
        [
            ("episodic_return", 430, 15, 5003),
            ("episodic_return", 470, 21, 5008),
            ("SPS", 500, 25, 5010),
            ("episodic_return", 540, 20, 5014),
            ("episodic_return", 580, 21, 5019),
            ("SPS", 600, 26, 5020),
            ("episodic_return", 640, 21, 5024),
            ("SPS", 700, 27, 5030),
        ],
        purge_step=401,
        target_reached=True,
    )
    log_part(
        second,
        [
            ("episodic_return", 100, 18, 2010),
            ("episodic_return", 200, 18, 2020),
            ("SPS", 250, 30, 2025),
            ("episodic_return", 300, 18, 2030),
            ("episodic_return", 400, 18, 2040),
            ("episodic_return", 500, 19, 2050),
            ("SPS", 500, 40, 2052),
        ],
    )
    sweep = tmp_path / "state"
    sweep.mkdir()
    command = "python ppo_atari_envpool.py --target-return 20"
    (sweep / "a.json").write_text(
        state(
            "done",
            1,
            [first.name],
            command,
            "Pong-v5",
            cpu_model="AMD EPYC 7B13",
            cores=2,
            threads=2,
            load_1min={"mean": 1.234, "max": 2.5, "samples": 7},
        )
    )
    (sweep / "b.json").write_text(state("done", 2, [second.name], f"{command} --total-timesteps 500", "Pong-v5"))

    proc = run_report(
        tmp_path, "--runs", runs, "--last", 4, "--sweep", sweep, "--thresholds", 18, 20, "--out", tmp_path / "pong"
    )
    assert_ok(proc)
    text = (tmp_path / "pong.md").read_text()
    # counted though it stopped at 700 steps
    row = ["10k, stopped at the target: seed 1 at 700", "1 (1)", "20.75", "13", "64 s"]
    assert table_row(text, "Pong-v5", "ppo_atari_envpool.py total_timesteps=10000")[2:7] == row
    assert table_row(text[text.index("## Runs") :], first.name)[-1] == "target reached at step 700"
    part = text[text.index("## Time to thresholds") :]
    assert table_row(part, "run")[3:] == [
        "step to 18",
        "time to 18",
        "step to 20",
        "time to 20",
        "training time",
        "parts (pauses)",
        "SPS (median)",
    ]
    assert table_row(part, first.name)[2:] == ["1", "470", "0:00:42", "640", "0:00:58", "0:01:04", "2 (1:06:01)", "13"]
    assert table_row(part, second.name)[2:] == ["2", "400", "0:00:30", "—", "—", "0:00:42", "1 (0:00:00)", "35"]
    assert "![return against agent steps and training time](pong/runs.png)" in part
    assert (tmp_path / "pong" / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    machines = text[text.index("## Commands and machines") :]
    assert table_row(machines, first.name)[1:] == [
        "1970-01-01 00:16",
        f"`{command} --env-id Pong-v5 --seed 1`",
        "AMD EPYC 7B13",
        "2",
        "2",
        "1.23 / 2.50 (7)",
    ]
    assert (
        table_row(machines, second.name)[1:]
        == ["1970-01-01 00:33", f"`{command} --total-timesteps 500 --env-id Pong-v5 --seed 2`"] + ["not recorded"] * 4
    )

    # by default neither section nor the plot of every run; without --sweep no machines
    proc = run_report(tmp_path, "--runs", runs, "--last", 4, "--out", tmp_path / "plain")
    assert_ok(proc)
    assert "## Time to thresholds" not in proc.stdout and "## Commands and machines" not in proc.stdout
    assert "## Return per" not in proc.stdout
    assert sorted(p.name for p in (tmp_path / "plain").iterdir()) == ["Pong-v5.png"]
    assert_usage_error(run_report(tmp_path, "--runs", runs, "--thresholds", "nan"), "--thresholds")


def test_report_thresholds_show_the_part_done_of_an_unfinished_run(tmp_path):
    """A long run stopped (interrupted) before its budget and its target: --sweep --thresholds still reads its folder
    and shows it, marked unfinished at its last logged step (640), with the step and time at which it reached 18
    (returns -21 18 19 18 18 20, --last 4: 18.25 at the 5th episode, step 500, 40 s in), its machine, and no row in
    the main table (incomplete). The same run started again from 0 (its checkpoint lost with its machine), recorded
    by a state file of its own in another folder, is shown beside it with its own machine: returns -21 -21 18 18 18
    18 reach 18 at the 6th episode (step 300, 50 s in), unfinished, logged to step 320. --window-steps 250: each
    run's mean return of the games that ended in steps 0-249, 250-499, 500-749."""
    runs = tmp_path / "runs"
    settings = dict(total_timesteps=10_000_000, target_return=20.0)
    folder = run_folder(runs, "ppo_atari_envpool.py", "Pong-v5", 1, 1000, **settings)
    again = run_folder(runs, "ppo_atari_envpool.py", "Pong-v5", 1, 9000, **settings)
    log_part(
        folder,
        [
            ("episodic_return", 100, -21, 1000),
            ("episodic_return", 200, 18, 1010),
            ("SPS", 250, 30, 1015),
            ("episodic_return", 300, 19, 1020),
            ("episodic_return", 400, 18, 1030),
            ("episodic_return", 500, 18, 1040),
            ("episodic_return", 600, 20, 1050),
            ("SPS", 640, 32, 1060),
        ],
    )
    log_part(
        again,
        [("episodic_return", 50 * i, r, 9000 + 10 * i) for i, r in enumerate([-21, -21, 18, 18, 18, 18], 1)]
        + [("SPS", 320, 20, 9070)],
    )
    for name, part_folder, load in (("state", folder, 1.5), ("state_again", again, 0.5)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.json").write_text(
            state(
                "interrupted",
                1,
                [part_folder.name],
                "python ppo_atari_envpool.py",
                "Pong-v5",
                cpu_model="AMD EPYC",
                cores=2,
                threads=2,
                load_1min={"mean": load, "max": 2.0, "samples": 3},
                ended=load,
            )
        )
    proc = run_report(
        tmp_path,
        "--runs",
        runs,
        "--last",
        4,
        "--sweep",
        tmp_path / "state",
        tmp_path / "state_again",
        "--thresholds",
        18,
        20,
        "--window-steps",
        250,
        "--out",
        tmp_path / "pong",
    )
    assert_ok(proc)
    text = (tmp_path / "pong.md").read_text()
    # one run asked for
    assert "| (no complete run) |" in text and text.count("not finished (interrupted)") == 1
    # and how far it got
    failed = text[text.index("## Failed") : text.index("## Runs")]
    assert table_row(failed, "Pong-v5", "1")[3] == "not finished (interrupted), logged to step 640 of 10,000,000"
    part = text[text.index("## Time to thresholds") :]
    assert table_row(part, f"{folder.name} (unfinished, logged to step 640)")[1:] == [
        "ppo_atari_envpool.py",
        "1",
        "500",
        "0:00:40",
        "—",
        "—",
        "0:01:00",
        "1 (0:00:00)",
        "31",
    ]
    assert table_row(part, f"{again.name} (unfinished, logged to step 320)")[1:] == [
        "ppo_atari_envpool.py",
        "1",
        "300",
        "0:00:50",
        "—",
        "—",
        "0:01:00",
        "1 (0:00:00)",
        "20",
    ]
    machines = text[text.index("## Commands and machines") :]
    assert table_row(machines, folder.name)[3:] == ["AMD EPYC", "2", "2", "1.50 / 2.00 (3)"]
    assert table_row(machines, again.name)[3:] == ["AMD EPYC", "2", "2", "0.50 / 2.00 (3)"]
    assert (tmp_path / "pong" / "runs.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    windows = text[text.index("## Return per 250 agent steps") :]
    assert table_row(windows, "run")[3:] == ["0-250", "250-500", "500-750"]
    assert table_row(windows, f"{folder.name} (unfinished, logged to step 640)")[1:] == [
        # -21 18 | 19 18 | 18 20
        "ppo_atari_envpool.py",
        "1",
        "-1.50 (2)",
        "18.50 (2)",
        "19.00 (2)",
    ]
    assert table_row(windows, f"{again.name} (unfinished, logged to step 320)")[1:] == [
        "ppo_atari_envpool.py",
        "1",
        "-1.50 (4)",
        "18.00 (2)",
        "—",
    ]  # -21 -21 18 18 | 18 18 | none
    assert_usage_error(run_report(tmp_path, "--runs", runs, "--window-steps", 0), "--window-steps")


def test_report_thresholds_say_that_a_torchrun_run_shows_rank_0s_games_only(tmp_path):
    """ppo_atari_multigpu.py logs the games of rank 0's envs only: its row of the thresholds table says so (returns
    -21 18 19 18 18, --last 4: 18.25 at step 500); a single-process run's row beside it does not."""
    runs = tmp_path / "runs"
    for script, seed in (("ppo_atari_multigpu.py", 1), ("ppo_atari.py", 2)):
        folder = run_folder(runs, script, "PongNoFrameskip-v4", seed, 1000, total_timesteps=500)
        returns = [-21, 18, 19, 18, 18]
        log_part(
            folder,
            [("episodic_return", 100 * i, r, 1000 + 10 * i) for i, r in enumerate(returns, 1)]
            + [("SPS", 500, 30, 1060)],
        )
    proc = run_report(tmp_path, "--runs", runs, "--last", 4, "--thresholds", 18, "--out", tmp_path / "pong")
    assert_ok(proc)
    part = (tmp_path / "pong.md").read_text().split("## Time to thresholds")[1]
    assert table_row(part, "PongNoFrameskip-v4__ppo_atari_multigpu__1__1000")[1:4] == [
        "ppo_atari_multigpu.py (rank 0's games only)",
        "1",
        "500",
    ]
    assert table_row(part, "PongNoFrameskip-v4__ppo_atari__2__1000")[1:4] == ["ppo_atari.py", "2", "500"]


@pytest.mark.parametrize(
    "game, options",
    [
        ("pong", ["--thresholds", 18, 20, "--window-steps", 1_000_000]),
        ("mujoco_v5", []),
        ("mujoco_v5_wide", []),
        ("microrts", ["--thresholds", 10, 15, 35]),
    ],
)
def test_the_committed_report_regenerates_from_the_committed_event_files(tmp_path, game, options):
    """benchmark/results/{pong,mujoco_v5,mujoco_v5_wide,microrts}.md are made from the event files, args.json and
    state files committed beside them (a fresh checkout has nothing else): made again from them, their tables from
    'Learning curves' on are the same, row for row (a 'Random play' section that the sweep appended left aside).
    breakout.md and procgen.md have tests of their own below, through the scripts that make them.
    Fails when the event files are missing, e.g. left out by a .gitignore rule."""
    results = REPO / "benchmark" / "results"
    runs = results / game / "runs"
    assert sorted(runs.glob("*/events.out.tfevents.*")) and sorted(runs.glob("*/args.json"))
    # what git would leave out of a commit is not there in a fresh checkout
    if (REPO / ".git").exists():
        ignored = subprocess.run(["git", "check-ignore", *map(str, runs.glob("*/*"))], cwd=REPO, capture_output=True)
        assert ignored.returncode == 1, f"ignored by .gitignore: {ignored.stdout.decode()}"
    proc = run_report(
        tmp_path,
        "--runs",
        runs,
        "--sweep",
        *sorted((results / game).glob("state_*")),
        *options,
        "--out",
        tmp_path / game,
    )
    assert_ok(proc)

    # from the curves on: the per-run tables, whose figures come from the event files
    def tables(text):
        text = text[text.index("## Learning curves") :].split("\n## Random play\n")[0]
        return [line for line in text.splitlines() if line.startswith("| ")]

    committed = tables((results / f"{game}.md").read_text())
    assert len(committed) >= 3 and tables((tmp_path / f"{game}.md").read_text()) == committed


def test_the_committed_procgen_report_regenerates_from_the_kept_files(tmp_path):
    """benchmark/results/procgen.md is made by `REPORT=1 bash benchmark/long_runs.sh` from the files committed in
    benchmark/results/long_runs: made again from them, its tables are the same, row for row."""
    # KEPT as relative to the repository as in the committed report's links
    assert_ok(run_sweep("long_runs.sh", Path("benchmark/results/long_runs"), EVALS=str(tmp_path), REPORT="1"))

    def tables(text):
        text = text[text.index("## Against the published curves") :]
        return [line for line in text.splitlines() if line.startswith("| ")]

    committed = tables((REPO / "benchmark" / "results" / "procgen.md").read_text())
    assert len(committed) >= 10 and tables((tmp_path / "procgen.md").read_text()) == committed


def test_the_committed_breakout_report_regenerates_from_the_kept_files(tmp_path):
    """benchmark/results/breakout.md is made by `REPORT=1 bash benchmark/breakout.sh` from the files committed in
    benchmark/results/breakout and long_runs.sh's in benchmark/results/long_runs: made again from them, its tables
    are the same, row for row, and it quotes each evaluation record once."""
    kept = Path("benchmark/results/breakout")
    assert_ok(run_sweep("breakout.sh", kept, REPORT="1", REPORT_OUT=str(tmp_path / "breakout")))

    def tables(text):
        return [line for line in text.splitlines() if line.startswith("| ")]

    committed = (REPO / "benchmark" / "results" / "breakout.md").read_text()
    made = (tmp_path / "breakout.md").read_text()
    assert len(tables(committed)) >= 10 and tables(made) == tables(committed)
    for record in (REPO / "benchmark" / "results" / "breakout").glob("eval_*.txt"):
        assert made.count(f"(breakout/{record.name})") == 1, record.name


@pytest.mark.parametrize("game, at_least", [("pong", 5), ("breakout", 1), ("procgen", 1)])
def test_the_committed_evaluations_add_up_and_the_report_quotes_them(game, at_least):
    """Each committed evaluation record (benchmark/results/{pong,breakout,procgen}/eval_*.txt: a header, then the
    script's output) ends each of its commands' outputs with the mean and population std of the episodes printed
    above it, and the family's report (benchmark/results/pong.md, breakout.md, procgen.md) quotes each as
    'mean ± std over N'."""
    records = sorted((REPO / "benchmark" / "results" / game).glob("eval_*.txt"))
    report = (REPO / "benchmark" / "results" / f"{game}.md").read_text()
    assert len(records) >= at_least
    for record in records:
        games, summaries = [], 0
        for line in record.read_text().splitlines():
            if line.startswith("eval episode "):
                games.append(float(line.split("return ")[1]))
            elif ": mean return " in line:  # "<env id>: mean return 19.20 +- 3.28 over 10 episodes"
                mean, std, n = (float(word) for word in line.split(": mean return ")[1].split()[::2][:3])
                assert (n, f"{mean:.2f}", f"{std:.2f}") == (len(games), f"{np.mean(games):.2f}", f"{np.std(games):.2f}")
                assert f"{mean:.2f} ± {std:.2f} over {len(games)}" in report, (record.name, mean, std)
                games, summaries = [], summaries + 1
        assert summaries >= 1 and not games, record.name


def test_read_events_reads_a_run_as_tensorboard_does(tmp_path):
    """report.py reads events files itself, in one pass: on a run in three parts (the second and third continued from
    checkpoints at steps 30 and 50, so TensorBoard hides the first part's steps 30-40 and the second's step 50, not its
    text there), the first part's last record cut short (its process killed while writing) and the second's last one
    unreadable (a damaged file), the scalars and the first text of a tag are TensorBoard's own EventAccumulator's, and
    the spans are each part's first and last scalar wall times (the hidden ones included: the process ran then)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sys.path.insert(0, str(REPO / "benchmark"))
    report = load_script("benchmark/report.py")
    folder = tmp_path / "Pong-v5__ppo_atari_envpool__1__1000"
    log_part(folder, [("episodic_return", step, step / 10, 100 + step) for step in (10, 20, 30, 40)])
    first = next(folder.glob("events.out.tfevents.*"))
    first.write_bytes(first.read_bytes()[:-5])
    log_part(folder, [("SPS", step, step, 200 + step) for step in (31, 50)], purge_step=30, target_reached=True)
    (second,) = set(folder.glob("events.out.tfevents.*")) - {first}
    garbage = b"garbage!"
    second.write_bytes(second.read_bytes() + len(garbage).to_bytes(8, "little") + bytes(4) + garbage + bytes(4))
    log_part(
        folder,
        [("episodic_return", step, -step, 300 + step) for step in (50, 60, 70)],
        purge_step=50,
        target_reached=True,
    )
    scalars, texts, spans = report.read_events(folder)

    tensorboard = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    tensorboard.Reload()
    assert sorted(scalars) == sorted(tensorboard.Tags()["scalars"]) == ["charts/SPS", "charts/episodic_return"]
    for tag, (steps, values, walls) in scalars.items():
        events = tensorboard.Scalars(tag)
        assert steps.tolist() == [e.step for e in events]
        assert values.tolist() == [e.value for e in events] and walls.tolist() == [e.wall_time for e in events]
    assert scalars["charts/episodic_return"][0].tolist() == [10, 20, 50, 60, 70]
    assert scalars["charts/SPS"][0].tolist() == [31]
    text = tensorboard.Tensors("target_reached/text_summary")[0].tensor_proto.string_val[0].decode()
    assert texts == {"target_reached/text_summary": text} and text == "step 50"
    assert spans == [(110, 130), (231, 250), (350, 370)]


def test_training_clock_counts_the_time_of_the_processes_only():
    """Spans 0-10 and 5-15 (overlapping: once) and 20-30: at 12 s, 12; at 17 (a pause), 15; at 25, 20; after, 25."""
    sys.path.insert(0, str(REPO / "benchmark"))
    report = load_script("benchmark/report.py")
    np.testing.assert_allclose(report.training_clock([(20, 30), (0, 10), (5, 15)], [12, 17, 25, 40]), [12, 15, 20, 25])
    assert np.isnan(report.training_clock([], [1.0])).all()


def test_learning_curve_and_reference_matching():
    sys.path.insert(0, str(REPO / "benchmark"))
    report = load_script("benchmark/report.py")
    returns = np.array([1.0, 2.0, 6.0, 3.0, 8.0])
    run = {"scalars": {"charts/episodic_return": (np.arange(5) * 10.0, returns, np.zeros(5))}}
    steps, curve = report.learning_curve(run, 3)
    # mean of the last 3 episodes up to each
    expected = [returns[max(0, i - 2) : i + 1].mean() for i in range(5)]
    np.testing.assert_allclose(curve, expected)
    np.testing.assert_array_equal(steps, np.arange(5) * 10.0)
    assert report.env_matches("Hopper", "Hopper-v4") and report.env_matches("Breakout-v5", "Breakout-v5")
    assert not report.env_matches("Breakout-v5", "Breakout-v4") and not report.env_matches("Hopper", "HopperX-v4")
    assert [report.fmt_steps(n) for n in (500000, 10**7, 1234)] == ["500k", "10M", "1234"]


def test_report_published_curves_give_our_last_100_mean_at_each_step_beside_each_published_run(tmp_path):
    """--published-curves: a starpilot run of 250 episodes (several ending at one step) logged to step 30,000 of
    100,000, and a CSV of two published runs of starpilot and bigfish. At each --at step, ours must be the mean of
    the last 100 returns logged at or before it as numpy takes it from the episode list (fewer before 100 have ended,
    none before the first), a step past 30,000 says how far the run is; theirs the value of the last row at or before
    it; bigfish, not run, says so and gets no plot. The report opens with that table and the figure; our runs' table,
    then the notes follow, and no table of arms: no run has finished. With the sweep's state files (--sweep), the
    unfinished starpilot run, in the tables, is neither "left out" nor a missing run; a failed bigfish run is."""
    rng = np.random.default_rng(1)
    steps = np.sort(rng.integers(1, 300, 250)) * 100
    returns = rng.integers(0, 30, 250).astype(float)
    assert len(np.unique(steps)) < 250  # ties at one step
    runs = tmp_path / "runs"
    folder = run_folder(runs, "ppo_procgen.py", "starpilot", 1, 1000, total_timesteps=10**5)
    points = [("episodic_return", int(s), r, 1000.0 + i) for i, (s, r) in enumerate(zip(steps, returns))]
    log_part(folder, points + [("SPS", 30_000, 50.0, 1300.0)])
    published = {"run0": rng.uniform(0, 40, 8), "run1": rng.uniform(0, 40, 8)}
    grid = np.arange(1, 9) * 5_000
    rows = [
        f"{game},{s},{published['run0'][i]},{published['run1'][i]}"
        for game in ("starpilot", "bigfish")
        for i, s in enumerate(grid)
    ]
    csv_path = tmp_path / "published.csv"
    csv_path.write_text("# made up\ngame,step,run0,run1\n" + "\n".join(rows) + "\n")
    sweep = tmp_path / "state"
    sweep.mkdir()
    (sweep / "a.json").write_text(state("interrupted", 1, [folder.name], "python ppo_procgen.py", "starpilot"))
    (sweep / "b.json").write_text(state("failed", 1, [], "python ppo_procgen.py", "bigfish", returncode=1, error="x"))
    at = [50, int(steps[39]), int(steps[180]), 30_000, 30_001]
    proc = run_report(
        tmp_path,
        *("--runs", runs, "--sweep", sweep, "--last", 100, "--published-curves", csv_path, "--at", *at),
        *("--out", tmp_path / "pg"),
    )
    assert_ok(proc)
    text = (tmp_path / "pg.md").read_text()
    assert "## Against the published curves" in text and "## Arms" not in text and "| env | arm |" not in text
    # it opens with the comparison and its figure; the notes and the runs read follow
    assert text.splitlines()[2] == "## Against the published curves"
    assert text.index("| starpilot | 50 |") < text.index("![starpilot]") < text.index("Our runs:")
    assert text.index("Our runs:") < text.index("## Notes") < text.index("Runs: 1 from")
    assert "left out of the tables" not in text and "Runs the sweep asked for that are not in the table (1)" in text
    assert table_row(text, "bigfish", "1")[3] == "failed (exit 1): x" and "| starpilot | 1 |" not in text

    def ours(step):
        done = returns[steps <= step][-100:]
        return f"{done.mean():.2f}" if len(done) else "—"

    def theirs(step):
        values = [v[grid <= step][-1] if (grid <= step).any() else np.nan for v in published.values()]
        cells = " / ".join("—" if np.isnan(v) else f"{v:.2f}" for v in values)
        return cells, "—" if np.isnan(values[0]) else f"{np.mean(values):.2f} ± {np.std(values):.2f}"

    assert 100 > (steps <= at[1]).sum() >= 40 and (steps <= at[2]).sum() > 100
    assert ours(at[0]) == "—" and theirs(at[0])[0] == "— / —"
    for step, name in zip(at, ["50", at[1], at[2], "30k", "30001"]):
        cell = ours(step) if step <= 30_000 else f"—, at 30,000 so far ({ours(step)} there)"
        assert table_row(text, "starpilot", str(name))[2:] == ["1", cell, *theirs(step)]
        assert table_row(text, "bigfish", str(name))[2:] == ["—", "—, not run yet", *theirs(step)]
    assert table_row(text, "starpilot__ppo_procgen__1__1000")[1:4] == ["30,000", "0:05:00", "100"]
    assert sorted(p.name for p in (tmp_path / "pg").iterdir()) == ["starpilot_published.png"]
    assert "![starpilot](pg/starpilot_published.png)" in text
    # the same run, finished at 30,000 steps: the table of arms follows
    settings = json.loads((folder / "args.json").read_text())
    (folder / "args.json").write_text(json.dumps(settings | dict(total_timesteps=30_000)))
    proc = run_report(tmp_path, "--runs", runs, "--last", 100, "--published-curves", csv_path, "--out", tmp_path / "pg")
    assert_ok(proc)
    text = (tmp_path / "pg.md").read_text()
    assert text.index("## Against the published curves") < text.index("## Arms") < text.index("| env | arm |")
    assert table_row(text, "starpilot", "ppo_procgen.py")[4] == ours(30_000)


def test_train_procgen_py_keeps_the_rows_its_docstring_names(tmp_path):
    """benchmark/train_procgen.py on a made-up checkout (3 runs of 3 games, 1,600 updates of 16,384 steps, to 26.2M):
    to 25M, every 4th update to 5M, every 16th after, and the last update at or before each whole million, each run's
    eprewmean of that update; nothing after 25M."""
    updates = np.arange(1, 1601)
    for r in range(3):
        for g, game in enumerate(["starpilot", "bigfish", "bossfight"]):
            path = tmp_path / f"train_procgen/results/easy-all-run{r}/progress-{game}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = [f"{u * 0.01 + r + 10 * g},{u}.0,{u * 16384}.0" for u in updates]
            path.write_text("eprewmean,misc/nupdates,misc/total_timesteps\n" + "\n".join(lines) + "\n")
    proc = run_tool("train_procgen.py", tmp_path)
    assert_ok(proc)
    steps = updates * 16384
    kept = set(updates[(updates % 4 == 0) & (steps <= 5_000_000)])
    kept |= set(updates[(updates % 16 == 0) & (steps > 5_000_000) & (steps <= 25_000_000)])
    kept |= {m // 16384 for m in range(1_000_000, 25_000_001, 1_000_000)}
    rows = [line.split(",") for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert rows[0] == ["game", "step", "run0", "run1", "run2"]
    for g, game in enumerate(["starpilot", "bigfish", "bossfight"]):
        expected = [[game, str(u * 16384), *(f"{u * 0.01 + r + 10 * g:.6g}" for r in range(3))] for u in sorted(kept)]
        assert [row for row in rows if row[0] == game] == expected


def test_the_committed_train_procgen_csv_has_each_game_and_run_at_every_whole_million():
    """benchmark/train_procgen.csv, as report.py reads it: starpilot, bigfish and bossfight, 3 runs each, steps on
    train-procgen's grid of 16,384 (one update), to 25M, and at each whole million the row of the last update at or
    before it, so that the value at 1M, 2M and 5M is that update's; small."""
    sys.path.insert(0, str(REPO / "benchmark"))
    report = load_script("benchmark/report.py")
    path = REPO / "benchmark" / "train_procgen.csv"
    assert path.stat().st_size < 40_000
    curves, source = report.read_published(path)
    assert "openai/train-procgen 1a2ae2194a61f76a733a39339530401c024c3ad8" in source and "easy-all-run" in source
    assert list(curves) == ["starpilot", "bigfish", "bossfight"]
    for game, (steps, runs) in curves.items():
        assert list(runs) == ["run0", "run1", "run2"]
        assert (np.diff(steps) > 0).all() and (steps % 16384 == 0).all() and 24_900_000 < steps[-1] <= 25_000_000
        for million in range(1_000_000, 25_000_001, 1_000_000):
            assert million // 16384 * 16384 in steps, (game, million)
        for values in runs.values():
            assert len(values) == len(steps) and np.isfinite(values).all() and 0 <= values.min()


def test_a_command_that_cannot_start_is_a_failed_run(tmp_path):
    proc = run_runner(tmp_path, "--command", "no-such-program-xyz", "--env-ids", "A", "--seeds", 1, "--out", "out")
    assert proc.returncode == 1
    assert "FAILED A seed 1: exit 127" in proc.stdout and "No such file" in proc.stdout
    assert states(tmp_path / "out")[("A", 1)]["status"] == "failed"


# ------------------------------------------------------------------------------------ the sweep scripts

# Stands in for a training script under a sweep: parses the command line with the script's own Args (so a flag the
# script lacks, or a value it refuses, fails the sweep), records what it got, and writes a run as the script would.
FAKE_TRAINER = r"""
import dataclasses, json, os, signal, sys, time
from pathlib import Path
import tyro
sys.path.insert(0, sys.argv[1])  # tests/
from helpers import load_script
from test_benchmark import write_run
script, argv = Path(sys.argv[2]), sys.argv[3:]
args = tyro.cli(load_script(script.name).Args, args=argv)
assert args.problem() is None, args.problem()
with open("calls.jsonl", "a") as f:
    f.write(json.dumps({"script": script.name, "env_id": args.env_id, "seed": args.seed,
                        "total_timesteps": args.total_timesteps, "eval_checkpoint": args.eval_checkpoint}) + "\n")
stamp = int(time.time())
if args.eval_checkpoint is not None:
    # an evaluation: each episode's line and the mean, as the scripts print them, and episode 0 filmed (30 frames)
    import imageio_ffmpeg
    folder = Path("videos") / f"{args.env_id}__{args.exp_name}__{args.seed}__{stamp}" / "eval"
    folder.mkdir(parents=True)
    film = imageio_ffmpeg.write_frames(str(folder / "rl-video-episode-0.mp4"), (64, 64), fps=15)
    film.send(None)
    for frame in range(30):
        film.send(bytes([8 * frame]) * (64 * 64 * 3))
    film.close()
    for episode in range(args.eval_episodes):
        print(f"eval episode {episode}: return {episode:.2f}")
    mean, std = (args.eval_episodes - 1) / 2, ((args.eval_episodes**2 - 1) / 12) ** 0.5  # of 0, 1, ..., n - 1
    print(f"{args.env_id}: mean return {mean:.2f} +- {std:.2f} over {args.eval_episodes} episodes")
    sys.exit(0)
write_run(Path("runs"), args.env_id, args.exp_name, args.seed, stamp, args.total_timesteps,
          [1.0, 2.0, 3.0], (10.0, 20.0), 5.0, args={"script": script.name, **dataclasses.asdict(args)})
if os.environ.get("FAKE_PROCGEN_STEP") and script.name == "ppo_procgen.py":
    # a long run: a checkpoint at that step, then training on until a SIGTERM ends it (exit 143, as the scripts)
    import torch
    folder = Path("runs") / f"{args.env_id}__{args.exp_name}__{args.seed}__{stamp}"
    torch.save({"global_step": int(os.environ["FAKE_PROCGEN_STEP"])}, folder / f"{args.exp_name}.pt")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    time.sleep(300)
"""

# sweep -> (its variables for one small run per script, the scripts it runs, the env id they get, the env id of the
# random-play table or None)
SWEEPS = {
    "atari.sh": (
        {"ENVS": "BreakoutNoFrameskip-v4", "RANDOM_GAMES": "1"},
        ["ppo_atari.py", "ppo_atari_lstm.py"],
        "BreakoutNoFrameskip-v4",
        "BreakoutNoFrameskip-v4",
    ),
    "atari_multigpu.sh": (
        {"ENVS": "BreakoutNoFrameskip-v4"},
        ["ppo_atari_multigpu.py"],
        "BreakoutNoFrameskip-v4",
        None,
    ),
    "envpool.sh": (
        {"ENVS": "Breakout-v5", "RANDOM_EPISODES": "1", "RANDOM_ENVS": "8"},
        ["ppo_atari_envpool.py"],
        "Breakout-v5",
        "Breakout-v5",
    ),
    "procgen.sh": (
        {"ENVS": "starpilot", "RANDOM_EPISODES": "1", "RANDOM_ENVS": "8"},
        ["ppo_procgen.py"],
        "starpilot",
        "StarpilotEasy-v0",
    ),
}


def run_sweep_with_fake_trainer(sweep, tmp_path, out, **variables):
    """Runs benchmark/<sweep> into OUT=out with `python ppo*.py` and `torchrun` answered by the fake trainer; returns
    the calls the fake recorded (script, env id, seed, budget), in order in each working folder under out."""
    (tmp_path / "fake_trainer.py").write_text(FAKE_TRAINER)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = f"exec {sys.executable} {tmp_path / 'fake_trainer.py'} {REPO / 'tests'}"
    (bin_dir / "python").write_text(
        f'#!/bin/bash\ncase "$1" in */ppo*.py) {fake} "$@";; esac\nexec {sys.executable} "$@"\n'
    )
    (bin_dir / "torchrun").write_text(f'#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\n{fake} "$@"\n')
    for shim in bin_dir.iterdir():
        shim.chmod(0o755)
    env = test_env(PATH=f"{bin_dir}:{os.environ['PATH']}", OUT=str(out), **variables)
    proc = subprocess.run(
        ["bash", str(REPO / "benchmark" / sweep)], env=env, capture_output=True, text=True, timeout=600
    )
    assert_ok(proc)
    return [json.loads(line) for path in sorted(out.rglob("calls.jsonl")) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("sweep", sorted(SWEEPS))
def test_sweep_script_end_to_end_with_a_fake_trainer(sweep, tmp_path):
    """The sweep file as a user runs it, into a new OUT folder, with `python ppo*.py` and `torchrun` answered by the
    fake trainer: every run gets flags its script accepts, the report is written, with the random-play table."""
    needs = {"atari.sh": "ale_py", "envpool.sh": "envpool"}.get(sweep)
    if needs:
        need(needs)
    if sweep == "procgen.sh":
        need_procgen()  # random_play.py plays the procgen game
    variables, scripts, env_id, random_env_id = SWEEPS[sweep]
    out = tmp_path / "out" / "new"  # does not exist yet
    got = run_sweep_with_fake_trainer(sweep, tmp_path, out, STEPS="16384", SEEDS="2", **variables)
    assert sorted(c["script"] for c in got) == sorted(scripts)
    assert all(c["env_id"] == env_id and c["seed"] == 2 and c["total_timesteps"] == 16384 for c in got), got
    report = (out / "report.md").read_text()
    for script in scripts:
        # mean of the fake's returns
        assert table_row(report, env_id, script, "16384")[4] == "2.00 (last 3 ep.)"
    if random_env_id is not None:
        assert "## Random play" in report
        # one game of one env; 8 envs (RANDOM_ENVS) x one episode each
        episodes = 1 if sweep == "atari.sh" else 8
        assert int(table_row(report[report.index("## Random play") :], random_env_id)[1]) == episodes


def test_pong_sh_runs_each_script_with_the_tuned_settings_and_the_target(tmp_path):
    """benchmark/pong.sh, every run of it, with the fake trainer: each script gets its Pong id, the tuned settings,
    the 10M schedule and --target-return 20, flags its Args accept; an unknown run is refused in one line."""
    out = tmp_path / "out"
    got = run_sweep_with_fake_trainer("pong.sh", tmp_path, out, RUNS="envpool atari multigpu lstm", SEEDS="1 2")
    assert [(c["script"], c["env_id"], c["seed"]) for c in got] == [
        ("ppo_atari_envpool.py", "Pong-v5", 1),
        ("ppo_atari_envpool.py", "Pong-v5", 2),
        ("ppo_atari.py", "PongNoFrameskip-v4", 1),
        ("ppo_atari_multigpu.py", "PongNoFrameskip-v4", 1),
        ("ppo_atari_lstm.py", "PongNoFrameskip-v4", 1),
    ]
    assert all(c["total_timesteps"] == 10_000_000 for c in got)
    logs = "".join(path.read_text() for path in sorted((out).glob("state_*/*.log")))
    for flags in (
        "--target-return 20",
        "--clip-coef 0.2 --num-envs 16 --num-minibatches 8 --num-steps 128 --update-epochs 3",
        "--nproc_per_node=2",
    ):
        assert flags in logs, flags
    proc = subprocess.run(
        ["bash", str(REPO / "benchmark" / "pong.sh")],
        env=test_env(RUNS="gpu", OUT=str(out)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "unknown run 'gpu'" in proc.stderr


def write_checkpoint(path):
    import torch

    torch.save({"model": {"w": torch.ones(2)}, "optimizer": {"state": {}, "param_groups": []}}, path)


def checkpoint_parts(path):
    import torch

    return sorted(torch.load(path, weights_only=True))


def kept_files(folder):
    """{path: bytes} of what benchmark/keep.sh keeps of a sweep's folder: the runs' files, the state files and logs."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.parent != folder and (p.suffix in (".json", ".pt", ".log") or "tfevents" in p.name)
    }


def run_sweep(name, kept, **variables):
    """benchmark/<name> run with these variables and KEPT=kept, as a user runs it (no fake trainer)."""
    env = test_env(KEPT=str(kept), **variables)
    return subprocess.run(["bash", str(REPO / "benchmark" / name)], env=env, capture_output=True, text=True)


def test_breakout_sh_runs_each_script_with_its_defaults_in_order_and_keeps_the_runs(tmp_path):
    """benchmark/breakout.sh with the fake trainer: envpool seed 1, then ppo_atari.py seed 1, then envpool's other
    seeds, each with the script's defaults over 10M steps and a checkpoint; KEEP=1 copies each run's files and state
    into KEPT, and a new machine (an empty OUT) gets them back; an unknown run is refused in one line."""
    out, kept = tmp_path / "out", tmp_path / "kept"
    got = run_sweep_with_fake_trainer("breakout.sh", tmp_path, out, SEEDS="1 2", KEPT=str(kept))
    assert [(c["script"], c["env_id"], c["seed"]) for c in got] == [
        ("ppo_atari_envpool.py", "Breakout-v5", 1),
        ("ppo_atari.py", "BreakoutNoFrameskip-v4", 1),
        ("ppo_atari_envpool.py", "Breakout-v5", 2),
    ]
    assert all(c["total_timesteps"] == 10_000_000 for c in got)
    logs = "".join(path.read_text() for path in sorted(out.glob("state_*/*.log")))
    assert logs.count("--total-timesteps 10000000 --save-model --checkpoint-every 100 --env-id") == 3
    assert "--target-return" not in logs and "--clip-coef" not in logs
    (run_dir, *_) = sorted((out / "runs").iterdir())
    write_checkpoint(run_dir / "ppo_atari_envpool.pt")

    assert_ok(run_sweep("breakout.sh", kept, OUT=str(out), KEEP="1"))
    assert kept_files(kept) == kept_files(out)
    # a done run's
    assert checkpoint_parts(kept / "runs" / run_dir.name / "ppo_atari_envpool.pt") == ["model"]
    # a new machine, no run to start: the copy
    assert_ok(run_sweep("breakout.sh", kept, OUT=str(tmp_path / "fresh"), RUNS="atari", SEEDS="9"))
    assert kept_files(tmp_path / "fresh") == kept_files(kept)
    proc = run_sweep("breakout.sh", kept, RUNS="lstm", OUT=str(out))
    assert proc.returncode == 2 and "unknown run 'lstm'" in proc.stderr


def test_microrts_sh_runs_masked_then_unmasked_with_the_blogs_settings_and_keeps_the_runs(tmp_path):
    """benchmark/microrts.sh with the fake trainer: ppo_multidiscrete_mask.py on each env and seed, then
    ppo_multidiscrete.py, with 8 envs, clip 0.1, 2M steps and a checkpoint; the report has both arms. KEEP=1 keeps a
    done run's checkpoint as its weights only and an unfinished run's whole, and a new machine gets them back."""
    out, kept = tmp_path / "out", tmp_path / "kept"
    envs = ["MicrortsMining-v1", "MicrortsAttackShapedReward-v1"]
    got = run_sweep_with_fake_trainer("microrts.sh", tmp_path, out, ENVS=" ".join(envs), SEEDS="1 2", KEPT=str(kept))
    assert [(c["script"], c["env_id"], c["seed"]) for c in got] == [
        (script, env_id, seed)
        for script in ("ppo_multidiscrete_mask.py", "ppo_multidiscrete.py")
        for env_id in envs
        for seed in (1, 2)
    ]
    logs = "".join(path.read_text() for path in sorted(out.glob("state_*/*.log")))
    assert logs.count("--num-envs 8 --clip-coef 0.1 --total-timesteps 2000000 --checkpoint-every 100 --env-id") == 8
    report = (out / "report.md").read_text()
    for script in ("ppo_multidiscrete_mask.py", "ppo_multidiscrete.py"):
        # 2 seeds
        assert table_row(report, "MicrortsMining-v1", script, "2M")[4] == "2.00 ± 0.00 (last 3 ep.)"
    unfinished = next(out.glob("state_ppo_multidiscrete/*MicrortsMining-v1__1__*.json"))
    interrupted = json.loads(unfinished.read_text())
    unfinished.write_text(json.dumps(dict(interrupted, status="interrupted")))
    done = json.loads(next(out.glob("state_ppo_multidiscrete_mask/*MicrortsMining-v1__1__*.json")).read_text())
    for state, script in ((interrupted, "ppo_multidiscrete"), (done, "ppo_multidiscrete_mask")):
        write_checkpoint(out / "runs" / state["run_names"][0] / f"{script}.pt")

    assert_ok(run_sweep("microrts.sh", kept, OUT=str(out), KEEP="1"))
    assert kept_files(kept) == kept_files(out) and len(kept_files(kept)) == 8 * 4 + 2
    kept_runs = kept / "runs"
    assert checkpoint_parts(kept_runs / interrupted["run_names"][0] / "ppo_multidiscrete.pt") == ["model", "optimizer"]
    assert checkpoint_parts(kept_runs / done["run_names"][0] / "ppo_multidiscrete_mask.pt") == ["model"]
    # done runs: nothing to run
    assert_ok(run_sweep("microrts.sh", kept, OUT=str(tmp_path / "fresh"), ENVS="MicrortsMining-v1", SEEDS="2"))
    assert kept_files(tmp_path / "fresh") == kept_files(kept)


def test_mujoco_v5_sh_runs_its_parts_and_ends_the_wide_report_with_random_play(tmp_path):
    """benchmark/mujoco_v5.sh with the fake trainer: the reference part trains the three v5 ids with and without
    --bootstrap-truncated, the v4 part Hopper-v4 and Walker2d-v4 without it, the wide part each of its ids with
    seed 1, and the wide report ends with random play's table (played for real, one episode per env here)."""
    out = tmp_path / "out"
    got = run_sweep_with_fake_trainer(
        "mujoco_v5.sh", tmp_path, out, SEEDS="1", STEPS="16384", WIDE="InvertedPendulum-v5 Reacher-v5", RANDOM_ENVS="1"
    )
    assert sorted((c["env_id"], c["seed"]) for c in got) == sorted(
        [(env_id, 1) for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")] * 2
        + [("Hopper-v4", 1), ("Walker2d-v4", 1), ("InvertedPendulum-v5", 1), ("Reacher-v5", 1)]
    )
    assert all(c["script"] == "ppo_continuous_action.py" and c["total_timesteps"] == 16384 for c in got)
    logs = "".join(path.read_text() for path in sorted((out / "reference").glob("*/*.log")))
    assert logs.count("--bootstrap-truncated") == 3
    report = (out / "wide" / "report.md").read_text()
    assert int(table_row(report[report.index("## Random play") :], "Reacher-v5")[1]) == 1
    assert (out / "reference" / "report.md").exists()
    proc = subprocess.run(
        ["bash", str(REPO / "benchmark" / "mujoco_v5.sh")],
        env=test_env(PARTS="all", OUT=str(out)),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "unknown part 'all'" in proc.stderr


def run_speed(*args, cwd=None, **env):
    return subprocess.run(
        ["bash", str(REPO / "benchmark" / "speed.sh"), *args],
        capture_output=True,
        text=True,
        env=test_env(**env),
        timeout=120,
        cwd=cwd,
    )


def test_speed_sh_times_two_commands_against_each_other(tmp_path):
    # the budget variable reaches it
    a = 'python3 -c \'import os; print("SPS", 100 * int(os.environ["STEPS"]))\''
    proc = run_speed(a, "true ok", REPEATS="2", STEPS="3")
    assert_ok(proc)
    lines = proc.stdout.splitlines()
    assert (
        lines[0].startswith("# ")
        and f"{expected_cpu_model()}, {len(os.sched_getaffinity(0))} cores, load average" in lines[0]
    )
    runs = [line.split(" run ")[0] for line in lines if " run " in line]
    assert runs == ["A", "B", "A", "B"]  # alternated
    assert "SPS median 300 (range 300-300)" in next(line for line in lines if line.startswith("A: wall median"))
    medians = {line[0]: float(line.split("wall median ")[1].split(" s")[0]) for line in lines if " wall median" in line}
    ratio = next(line for line in lines if line.startswith("ratio B/A"))
    got, a, b = float(ratio.split("wall ")[1].split(",")[0]), medians["A"], medians["B"]
    # the medians as printed
    assert (b - 0.005) / (a + 0.005) - 0.0005 <= got <= (b + 0.005) / (a - 0.005) + 0.0005
    assert lines[-1].startswith("# after:")


def test_speed_sh_refuses_what_it_does_not_know(tmp_path):
    for args, fragment in (
        (["--bogus"], "unknown option --bogus"),
        (["ppo_typo.py"], "ppo_typo.py: no such script"),
        (["ppo"], "neither a script"),
        (["a b", "c d", "e f", "g h", "i j"], "at most four"),
    ):
        proc = run_speed(*args)
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stdout)
        assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and fragment in proc.stderr, proc.stderr
    proc = run_speed("false x", REPEATS="1")
    assert proc.returncode == 1 and "A run 1: failed (exit 1)" in proc.stdout


def test_speed_sh_gives_both_scripts_of_an_a_b_run_the_same_arguments(tmp_path):
    """ppo.py (in speed.sh's list) against a copy that is not: both run with ppo.py's arguments, in either order;
    two scripts outside the list both get --total-timesteps $STEPS. `python` is a stand-in that records its
    arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(f'#!/bin/bash\necho "$*" >> {tmp_path / "calls.txt"}\necho "SPS 1"\n')
    (bin_dir / "python").chmod(0o755)
    for name in ("ppo_mod.py", "other.py"):
        (tmp_path / name).write_text("")
    path = f"{bin_dir}:{os.environ['PATH']}"
    for pair, expected in (
        (("ppo.py", "ppo_mod.py"), "--env-id CartPole-v1 --total-timesteps 500000"),
        (("ppo_mod.py", "ppo.py"), "--env-id CartPole-v1 --total-timesteps 500000"),
        (("other.py", "ppo_mod.py"), "--total-timesteps 1234"),
    ):
        (tmp_path / "calls.txt").unlink(missing_ok=True)
        assert_ok(run_speed(*pair, cwd=tmp_path, PATH=path, REPEATS="1", STEPS="1234" if "other.py" in pair else ""))
        assert (tmp_path / "calls.txt").read_text().splitlines() == [f"{script} {expected}" for script in pair]


def test_speed_sh_stopped_stops_its_run(tmp_path):
    """kill (SIGTERM) of speed.sh while a run is under way: the run is stopped too, speed.sh exits 143."""
    pid_file = tmp_path / "pid"
    command = f'python3 -c \'import os, time; open("{pid_file}", "w").write(str(os.getpid())); time.sleep(600)\''
    proc = subprocess.Popen(
        ["bash", str(REPO / "benchmark" / "speed.sh"), command],
        env=test_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60  # safety nets against a hang, not timing assertions
    while not (pid_file.exists() and pid_file.read_text()) and time.time() < deadline:
        time.sleep(0.1)
    run = int(pid_file.read_text())
    try:
        proc.terminate()
        proc.communicate(timeout=60)
        assert proc.returncode == 143
        # the run's process is gone
        while os.path.exists(f"/proc/{run}") and time.time() < deadline:
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{run}")
    finally:
        if os.path.exists(f"/proc/{run}"):
            os.kill(run, signal.SIGKILL)


def test_random_play_counts_whole_episodes_without_the_reset_step(tmp_path):
    """CartPole pays 1 per step, so a whole episode's return equals its length: counting envpool's reset step
    (reward 0) in an episode, or an episode cut short, would break the equality. Every env plays its own episodes."""
    need("envpool")
    sys.path.insert(0, str(REPO / "benchmark"))
    random_play = load_script("benchmark/random_play.py")
    returns, lengths = random_play.random_play("CartPole-v1", num_envs=5, episodes_per_env=4, seed=3)
    assert returns.shape == lengths.shape == (20,)
    np.testing.assert_array_equal(returns, lengths)
    assert lengths.min() >= 8 and lengths.max() <= 500  # CartPole can't fall in fewer than ~8 steps
    again, _ = random_play.random_play("CartPole-v1", num_envs=5, episodes_per_env=4, seed=3)
    np.testing.assert_array_equal(again, returns)  # seeded
    assert_usage_error(run_tool("random_play.py", "--env-id", "Nope-v0"), "Nope-v0")


def test_random_play_of_a_mujoco_id_plays_gymnasiums_env_in_whole_episodes(tmp_path):
    """InvertedPendulum-v5 pays 1 for every step but the one where the pole falls (gymnasium's v5), and random play
    drops the pole long before the time limit: every whole episode's return is its length minus 1. gymnasium's env
    (envpool has no v5), seeded: the same seed plays the same episodes, another seed others."""
    need("mujoco")
    sys.path.insert(0, str(REPO / "benchmark"))
    random_play = load_script("benchmark/random_play.py")
    returns, lengths = random_play.random_play("InvertedPendulum-v5", num_envs=3, episodes_per_env=4, seed=3)
    assert returns.shape == lengths.shape == (12,)
    np.testing.assert_array_equal(returns, lengths - 1)
    np.testing.assert_array_equal(random_play.random_play("InvertedPendulum-v5", 3, 4, seed=3)[0], returns)
    assert not np.array_equal(random_play.random_play("InvertedPendulum-v5", 3, 4, seed=4)[0], returns)
    proc = run_tool("random_play.py", "--env-id", "Hopper-v5", "--num-envs", 1, "--episodes-per-env", 2, cwd=tmp_path)
    assert_ok(proc)
    assert proc.stdout.startswith("Hopper-v5: random play ") and "over 2 episodes" in proc.stdout
    assert proc.stderr == "" and not (tmp_path / "MUJOCO_LOG.TXT").exists()


def test_random_play_says_in_one_line_when_procgen_cannot_load(tmp_path):
    """As on a Linux without the Qt 5 runtime: an envpool whose procgen spec raises ImportError when loaded."""
    (tmp_path / "envpool").mkdir()
    (tmp_path / "envpool" / "__init__.py").write_text(
        "def list_all_envs():\n    return ['StarpilotEasy-v0']\n"
        "def make_spec(env_id):\n    raise ImportError('libQt5Gui.so.5: cannot open shared object file')\n"
    )
    proc = run_tool("random_play.py", "--env-id", "StarpilotEasy-v0", PYTHONPATH=str(tmp_path))
    assert_usage_error(proc, "StarpilotEasy-v0", "libQt5Gui.so.5", "apt install libqt5gui5")


def test_cnn_layout_times_both_layouts():
    proc = run_tool("cnn_layout.py", "--scripts", "ppo_atari.py", "--repeats", 1)
    assert_ok(proc)
    for layout in ("NCHW", "channels_last"):
        cells = table_row(proc.stdout, "ppo_atari.py", layout)
        # the script's default mini-batch (8 envs x 128 steps / 4) and envs
        assert cells[2:5:2] == ["256", "8"]
        assert float(cells[3]) > 0 and float(cells[5]) > 0
    ratio = table_row(proc.stdout, "ppo_atari.py", "NCHW / channels_last")
    assert ratio[3].endswith("x") and float(ratio[3][:-1]) > 0
    assert_usage_error(run_tool("cnn_layout.py", "--repeats", 0), "--repeats")


def test_speed_sh_times_up_to_four_in_turn_and_reads_cleanrls_sps_line(tmp_path):
    commands = ["echo 'SPS 100'", "echo 'SPS 200'", "echo 'SPS: 300'"]  # CleanRL prints "SPS: N"
    proc = run_speed(*commands, REPEATS="2")
    assert_ok(proc)
    runs = [line.split(" run ")[0] for line in proc.stdout.splitlines() if " run " in line]
    assert runs == ["A", "B", "C"] * 2
    assert "SPS median 300 (range 300-300)" in proc.stdout
    ratios = {
        line.split(":")[0]: line.split("SPS ")[1] for line in proc.stdout.splitlines() if line.startswith("ratio")
    }
    assert ratios == {"ratio B/A": "2.000", "ratio C/A": "3.000"}


def bench_module(name):
    sys.path.insert(0, str(REPO / "benchmark"))
    return load_script(f"benchmark/{name}")


def part_of_line(text, lines, parts):
    """The number of the first line of main() that holds text."""
    return next(n for n in sorted(parts) if text in lines[n - 1])


@pytest.mark.parametrize(
    "script",
    [
        "ppo.py",
        "ppo_atari_envpool.py",
        "ppo_atari_lstm.py",
        "ppo_atari_multigpu.py",
        "ppo_continuous_action.py",
        "ppo_multidiscrete_mask.py",
        "ppo_procgen.py",
    ],
)
def test_breakdown_finds_every_part_of_an_iteration_in_main(script):
    """Each line of main() gets the part its statement does; every part of the update is found, by its own line."""
    breakdown = bench_module("breakdown.py")
    source = (REPO / script).read_text()
    parts = breakdown.line_parts(source)
    lines = source.splitlines()

    # the part of the first line of main() holding text, after line `after`
    def part_of(text, after=0):
        return next(parts[n] for n in sorted(parts) if n > after and text in lines[n - 1])

    loop = next(n for n in sorted(parts) if "for step in range(" in lines[n - 1])
    assert part_of("envs.step(", loop) == "env"
    assert part_of("global_step += args.num_envs", loop) == "storage"
    assert part_of("loss.backward()") == "backward" and part_of("optimizer.step()") == "adam"
    assert part_of("clip_grad_norm_(") == "clip" and part_of("optimizer.zero_grad()") == "update_other"
    # in main's minibatch_loss
    loss = next(n for n in sorted(parts) if "return ppo_loss(" in lines[n - 1])
    # the line before: the agent on the mini-batch
    assert parts[loss] == "loss" and parts[loss - 1] == "forward"
    # in the epoch loop
    call = next(n for n in sorted(parts) if "= minibatch_loss(" in lines[n - 1])
    assert parts[call] == parts[call + 1] == "update_other"  # the call and its arguments: indexing
    assert part_of("compute_gae(") == "gae" and part_of('"losses/explained_variance"') == "logging"
    loop = next(n for n in sorted(parts) if "for iteration in range(" in lines[n - 1])
    assert parts[loop] == part_of("run.progress(iteration)") == part_of("run.save(iteration)") == "logging"
    # after the loop
    assert part_of("run.save(iteration)", part_of_line("run.save(iteration)", lines, parts)) == "end"
    assert part_of("envs.reset(") == "start-up"
    assert set(parts.values()) == {name for name, _ in breakdown.PARTS} - (
        set() if script == "ppo_atari_multigpu.py" else {"all_reduce"}
    )


def test_breakdown_counts_the_main_threads_samples_by_part(tmp_path):
    breakdown = bench_module("breakdown.py")
    source = (REPO / "ppo.py").read_text()
    parts = breakdown.line_parts(source)
    lines = source.splitlines()
    step = next(n for n in sorted(parts) if "envs.step(action" in lines[n - 1])
    backward = next(n for n in sorted(parts) if "loss.backward()" in lines[n - 1])
    call = next(n for n in sorted(parts) if "= minibatch_loss(" in lines[n - 1])
    loss = next(n for n in sorted(parts) if "return ppo_loss(" in lines[n - 1])
    raw = [
        f"<module> (/a/ppo.py:700);main (/a/ppo.py:{step});SyncVectorEnv.step (gymnasium/sync.py:3) 7",
        f"<module> (/a/ppo.py:700);main (/a/ppo.py:{call});minibatch_loss (/a/ppo.py:{loss});ppo_loss (/a/ppo.py:9) 6",
        # indexing the mini-batch's arguments
        f"<module> (/a/ppo.py:700);main (/a/ppo.py:{call}) 1",
        f"<module> (/a/ppo.py:700);main (/a/ppo.py:{backward});backward (torch/_tensor.py:5) 5",
        f"<module> (/a/ppo.py:700);main (/a/ppo.py:{backward}) 2",
        # an import
        "<module> (/a/ppo.py:20);_find_and_load (<frozen importlib._bootstrap>:1176) 4",
        # another thread: not counted
        "run (threading.py:975);_worker (tensorboard/writer.py:9) 50",
        # another script's module: not counted
        f"<module> (/a/other.py:1);main (/a/ppo.py:{step}) 3",
        # Python 3.12's py-spy names a nested function by its qualified name
        f"<module> (/a/ppo.py:700);main (/a/ppo.py:{call});main.<locals>.minibatch_loss (/a/ppo.py:{loss}) 2",
    ]
    assert breakdown.tally(raw, "ppo.py", parts) == {
        "env": 7,
        "backward": 7,
        "loss": 8,
        "update_other": 1,
        "start-up": 4,
    }
    # --tally counts the samples of an earlier run (kept with --raw, gzipped here) without running the script
    raw_file = tmp_path / "samples.raw.gz"
    raw_file.write_bytes(gzip.compress("\n".join(raw).encode()))
    result = run_tool("breakdown.py", "--rate", "10", "--tally", str(raw_file), "ppo.py")
    assert_ok(result)
    # 7 of the loop's 23 samples, at 10 per second
    assert "| rollout: env steps | 0.70 | 30.4% |" in result.stdout
    assert "| update: loss | 0.80 | 34.8% |" in result.stdout
    assert "| start-up: imports, envs, agent (not in the loop) | 0.40 |  |" in result.stdout
    # the script given as a path counts the same samples (they name the file it ran)
    result = run_tool("breakdown.py", "--rate", "10", "--tally", str(raw_file), str(REPO / "ppo.py"))
    assert_ok(result)
    assert "| rollout: env steps | 0.70 | 30.4% |" in result.stdout


def test_peers_patches_each_cleanrl_script_or_refuses_one_they_do_not_fit(tmp_path):
    peers = bench_module("peers.py")
    (tmp_path / "cleanrl").mkdir()
    for script, patches in peers.PATCHES.items():
        (tmp_path / "cleanrl" / script).write_text("\n".join(f"x{i} {old} y" for i, (old, _) in enumerate(patches)))
        text = peers.patched(tmp_path, script, tmp_path).read_text()
        assert text == "\n".join(f"x{i} {new} y" for i, (_, new) in enumerate(patches))
        (tmp_path / "cleanrl" / script).write_text("\n".join(f"x{i} {old} y" for i, (old, _) in enumerate(patches[1:])))
        # another commit: refused, not half-patched
        with pytest.raises(SystemExit, match="does not take the patch"):
            peers.patched(tmp_path, script, tmp_path)


def test_long_runs_sh_runs_each_game_to_its_step_then_the_lstm_and_keeps_the_runs(tmp_path):
    """benchmark/long_runs.sh with the fake trainer: starpilot, bigfish and bossfight with ppo_procgen.py's defaults
    (25M, a checkpoint every 5 iterations), then ppo_atari_lstm.py on Breakout to 10M; a game whose checkpoint has
    reached UNTIL is not run again but evaluated, once: 100 episodes, their output below a header with the step and
    the command, and the first episode as a GIF; KEEP=1 keeps the runs; REPORT=1 makes the procgen report from the
    kept runs, quoting the evaluation; an unknown run, or an argument, is refused in one line."""
    import torch
    from PIL import Image

    out, kept, evals = tmp_path / "out", tmp_path / "kept", tmp_path / "results"
    parked = out / "runs" / "starpilot__ppo_procgen__1__1700000000"
    parked.mkdir(parents=True)
    torch.save({"model": {}, "optimizer": {}, "global_step": 5_013_504}, parked / "ppo_procgen.pt")
    got = run_sweep_with_fake_trainer("long_runs.sh", tmp_path, out, KEPT=str(kept), EVALS=str(evals), POLL="1")
    assert [(c["script"], c["env_id"], c["seed"], c["total_timesteps"], c["eval_checkpoint"]) for c in got] == [
        ("ppo_procgen.py", "starpilot", 1, 25_000_000, f"runs/{parked.name}/ppo_procgen.pt"),
        ("ppo_procgen.py", "bigfish", 1, 25_000_000, None),
        ("ppo_procgen.py", "bossfight", 1, 25_000_000, None),
        ("ppo_atari_lstm.py", "BreakoutNoFrameskip-v4", 1, 10_000_000, None),
    ]
    evaluation = (evals / "procgen" / "eval_starpilot_seed1.txt").read_text().splitlines()
    assert evaluation[0].endswith(f"{parked.name}: its checkpoint at step 5,013,504, played by --eval-checkpoint")
    assert evaluation[1].startswith("# (100 episodes of its stochastic policy, seeded by --seed 1), 20")
    script = os.path.relpath(REPO / "ppo_procgen.py", out)
    command = f"{script} --eval-checkpoint runs/{parked.name}/ppo_procgen.pt --eval-episodes 100 --capture-video"
    assert evaluation[3] == f"#   python {command}"
    episodes = [line for line in evaluation if line.startswith("eval episode ")]
    assert episodes[0] == "eval episode 0: return 0.00" and len(episodes) == 100
    assert "starpilot: mean return 49.50 +- 28.87 over 100 episodes" in evaluation
    assert Image.open(evals / "procgen" / "starpilot_seed1_eval.gif").n_frames == 30
    # evaluated at that step already
    assert_ok(run_sweep("long_runs.sh", kept, OUT=str(out), EVALS=str(evals), RUNS="starpilot"))
    assert len((out / "calls.jsonl").read_text().splitlines()) == 4
    logs = "".join(path.read_text() for path in sorted(out.glob("state_*/*.log")))
    assert logs.count("ppo_procgen.py --save-model --checkpoint-every 5 --env-id") == 2
    assert "ppo_atari_lstm.py --total-timesteps 10000000 --save-model --checkpoint-every 100 --env-id" in logs

    assert_ok(run_sweep("long_runs.sh", kept, OUT=str(out), KEEP="1"))
    assert kept_files(kept) == kept_files(out)
    assert_ok(run_sweep("long_runs.sh", kept, OUT=str(out), EVALS=str(evals), REPORT="1"))
    report = (evals / "procgen.md").read_text()
    assert report.startswith("# Procgen (easy): ppo_procgen.py against train-procgen's runs\n")
    evaluated = "Evaluated: starpilot at step 5,013,504, 49.50 ± 28.87 over 100 episodes of its stochastic policy"
    assert evaluated in report
    for link in ("procgen/eval_starpilot_seed1.txt", "procgen/starpilot_seed1_eval.gif"):
        assert f"]({link})" in report and (evals / link).is_file()
    # the fake's runs of bigfish and bossfight (starpilot's parked run is a checkpoint alone), beside train-procgen's
    assert table_row(report, "bigfish", "5M")[2:] == ["1", "—", "9.26 / 8.24 / 9.16", "8.89 ± 0.46"]
    assert table_row(report, "bossfight", "5M")[2:] == ["1", "—", "8.29 / 8.26 / 8.61", "8.39 ± 0.16"]
    proc = run_sweep("long_runs.sh", kept, OUT=str(out), RUNS="pong")
    assert proc.returncode == 2 and "unknown run 'pong'" in proc.stderr
    proc = subprocess.run(
        ["bash", str(REPO / "benchmark" / "long_runs.sh"), "REPORT=1"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "takes no arguments, got 'REPORT=1'" in proc.stderr


def test_long_runs_sh_stops_a_game_once_its_checkpoint_reaches_until(tmp_path):
    """A procgen run goes on towards its 25M until its checkpoint has reached UNTIL: the watcher then stops it
    (SIGTERM, through benchmark/run.py), its agent is evaluated, and the next game starts."""
    out = tmp_path / "out"
    variables = dict(KEPT=str(tmp_path / "kept"), EVALS=str(tmp_path), RUNS="starpilot bigfish", UNTIL="16384")
    got = run_sweep_with_fake_trainer("long_runs.sh", tmp_path, out, FAKE_PROCGEN_STEP="16384", POLL="1", **variables)
    # an evaluation takes the env id from the checkpoint (the fake records the default)
    played = [c["eval_checkpoint"] or c["env_id"] for c in got]
    assert [game.removeprefix("runs/").split("__")[0] for game in played] == ["starpilot"] * 2 + ["bigfish"] * 2
    assert played[1].endswith("/ppo_procgen.pt") and played[3].endswith("/ppo_procgen.pt")
    states = [json.loads(path.read_text()) for path in sorted(out.glob("state_procgen/*.json"))]
    assert [state["status"] for state in states] == ["interrupted", "interrupted"], states
