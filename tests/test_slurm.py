"""benchmark/run.py --slurm and benchmark/slurm_multinode.sh on a real Slurm: a single-node cluster on this machine
(benchmark/local_slurm.sh), started once for the module and stopped after it. Skipped, with the reason, where Slurm
is not installed or does not start (apt-get install slurmctld slurmd slurm-client munge); failed under CI=true."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from test_benchmark import main_table, run_tool, states

from helpers import REPO, assert_ok, missing, need, read_scalars, test_env

LOCAL_SLURM = REPO / "benchmark" / "local_slurm.sh"
TINY = "--num-envs 2 --num-steps 32"  # 64 steps an iteration


def free_port_pair():
    """A port N such that N and N + 1 are free on 127.0.0.1 (the controller's and the node's)."""
    for _ in range(100):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                    return port
                except OSError:
                    pass
    raise AssertionError("no two free ports in a row")


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """The environment of a client of the local cluster: {"SLURM_CONF": its slurm.conf}."""
    path = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"  # where Debian puts the daemons
    absent = [name for name in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(name, path=path) is None]
    if absent:
        missing(
            f"Slurm is not installed ({', '.join(absent)} not found): apt-get install slurmctld slurmd "
            f"slurm-client munge"
        )
    folder = tmp_path_factory.mktemp("slurm") / "cluster"
    proc = subprocess.run(
        ["bash", str(LOCAL_SLURM), "start", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        env=test_env(LOCAL_SLURM_PORT=str(free_port_pair())),
    )
    if proc.returncode != 0:
        missing(f"a local Slurm cluster does not start here: {proc.stderr.strip()[-800:]}")
    yield {"SLURM_CONF": str(folder / "slurm.conf")}
    subprocess.run(["bash", str(LOCAL_SLURM), "stop", str(folder)], timeout=120, check=True)


def slurm_command(env, *args):
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, timeout=60, env=test_env(**env))
    assert_ok(proc)
    return proc.stdout


def wait_for(env, job):
    """Until Slurm has no task of the job left queued or running."""
    deadline = time.time() + 600  # a safety net against a hang, not a timing assertion
    while slurm_command(env, "squeue", "--noheader", "--array", "--jobs", job).strip():
        assert time.time() < deadline, f"job {job} still queued or running"
        time.sleep(0.5)


def submit(env, cwd, *args):
    """benchmark/run.py --slurm ...; returns the id of the job it submitted."""
    proc = run_tool("run.py", "--slurm", *args, cwd=cwd, **env)
    assert_ok(proc)
    return re.search(r"submitted Slurm job (\d+)", proc.stdout).group(1)


def returns_of(run_dir, last=20):
    """A run's mean of its last `last` episodic returns, from its event files."""
    returns = [value for _, value in read_scalars(run_dir)["charts/episodic_return"]]
    return float(np.mean(returns[-last:]))


def test_a_two_arm_sweep_runs_as_job_arrays_and_the_report_compares_it(slurm, tmp_path):
    """Two learning rates x seeds 1 and 2 of ppo.py: one job array per arm, two tasks at a time; every run done in a
    run folder of its own; report.py --sweep shows both arms with the numbers of the runs' event files."""
    jobs = []
    for lr in ("2.5e-4", "1e-3"):
        jobs.append(
            submit(
                slurm,
                tmp_path,
                "--command",
                f"{sys.executable} {REPO / 'ppo.py'} {TINY} --total-timesteps 256 --learning-rate {lr}",
                "--env-ids",
                "CartPole-v1",
                "--seeds",
                1,
                2,
                "--workers",
                2,
                "--out",
                "out",
            )
        )
    for job in jobs:
        wait_for(slurm, job)
    st = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json")]
    assert sorted((d["status"], d["seed"], d["slurm_job"].split("_")[0]) for d in st) == sorted(
        ("done", seed, job) for job in jobs for seed in (1, 2)
    ), st
    folders = [name for d in st for name in d["run_names"]]
    assert sorted(folders) == sorted(p.name for p in (tmp_path / "runs").iterdir()) and len(set(folders)) == 4
    returns = {}
    for d in st:
        lr = d["words"][d["words"].index("--learning-rate") + 1]
        returns.setdefault(float(lr), []).append(returns_of(tmp_path / "runs" / d["run_names"][0]))

    proc = run_tool("report.py", "--runs", "runs", "--sweep", "out", "--reps", 200, "--rliable-reps", 200, cwd=tmp_path)
    assert_ok(proc)
    rows = main_table(proc.stdout)
    assert [row[1] for row in rows] == ["ppo.py learning_rate=0.00025", "ppo.py learning_rate=0.001"]
    for row in rows:
        values = returns[float(row[1].split("=")[1])]
        assert row[3] == "2 (1,2)"
        assert row[4].startswith(f"{np.mean(values):.2f} ± {np.std(values):.2f}"), (row, values)
    assert "## Failed and missing runs" not in proc.stdout
    # submitted again: every run is done, nothing is submitted
    proc = run_tool(
        "run.py",
        "--slurm",
        "--command",
        st[0]["command"],
        "--env-ids",
        "CartPole-v1",
        "--seeds",
        1,
        2,
        "--out",
        "out",
        cwd=tmp_path,
        **slurm,
    )
    assert_ok(proc)
    assert "2 already done" in proc.stdout and "nothing to submit" in proc.stdout


def test_a_cancelled_task_is_unfinished_and_continues_from_its_checkpoint(slurm, tmp_path):
    """A task cancelled (scancel) once its run has a checkpoint: the run stops, saves, and is recorded as
    interrupted. Submitted again, it continues from that checkpoint in the same run folder and ends done: every
    iteration logged once, to the last; the report reads the resumed run as one run."""
    command = f"{sys.executable} {REPO / 'ppo.py'} {TINY} --total-timesteps 4096 --checkpoint-every 1"
    # grace: time for the run to save and exit on a loaded machine, kept under Slurm's default KillWait of 30 s
    grid = ["--command", command, "--env-ids", "CartPole-v1", "--seeds", 1, "--out", "out", "--grace", 25]
    job = submit(slurm, tmp_path, *grid)
    deadline = time.time() + 300  # a safety net against a hang, not a timing assertion
    while not list(tmp_path.glob("runs/*/ppo.pt")):
        assert time.time() < deadline, (tmp_path / "out").glob("*.log")
        time.sleep(0.1)
    cancelled = time.time()
    slurm_command(slurm, "scancel", job)
    wait_for(slurm, job)
    (folder,) = [p.name for p in (tmp_path / "runs").iterdir()]
    state = states(tmp_path / "out")[("CartPole-v1", 1)]
    log = (tmp_path / "out" / f"ppo__CartPole-v1__1__{state['key']}.log").read_text()
    # on a failure, what to look at: the run's log, the task's output and how long the stop took
    # shown on a failure
    print(log, *[p.read_text() for p in (tmp_path / "out" / "slurm").glob("*.out")], sep="\n")
    why = f"exit {state['returncode']}, {state['ended'] - cancelled:.1f} s after scancel"
    assert (state["status"], state["returncode"], state["run_names"]) == ("interrupted", 143, [folder]), why
    # stopped mid-run
    assert "interrupted at step" in log and not re.search(r"step +4096/4096", log)
    proc = run_tool("run.py", *grid, "--slurm", "--dry-run", cwd=tmp_path, **slurm)
    assert f"#   task 0: CartPole-v1 seed 1 (continues runs/{folder}/ppo.pt)" in proc.stdout, proc.stdout

    job = submit(slurm, tmp_path, *grid)
    wait_for(slurm, job)
    state = states(tmp_path / "out")[("CartPole-v1", 1)]
    assert (state["status"], state["run_names"]) == ("done", [folder]), state
    assert state["resumed_from"] == f"runs/{folder}/ppo.pt"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [folder]
    # one per part of the run
    assert len(list((tmp_path / "runs" / folder).glob("events.out.tfevents.*"))) == 2
    steps = [step for step, _ in read_scalars(tmp_path / "runs" / folder)["losses/value_loss"]]
    # each iteration once: the stopped part's extra steps purged
    assert steps == list(range(64, 4097, 64))
    log = (tmp_path / "out" / f"ppo__CartPole-v1__1__{state['key']}.log").read_text()
    assert f"--resume runs/{folder}/ppo.pt" in log and re.search(r"step +4096/4096", log)

    proc = run_tool("report.py", "--runs", "runs", "--sweep", "out", cwd=tmp_path)
    assert_ok(proc)
    (row,) = main_table(proc.stdout)
    assert row[2:4] == ["4096", "1 (1)"] and row[4].startswith(f"{returns_of(tmp_path / 'runs' / folder):.2f}")


# A training script that fails: exit 3; with seed 2 it first kills its runner, the task's run.py (SIGKILL, as the
# kernel's OOM killer would), which then cannot record how the run ended.
CRASH = """
import os, signal, sys
if sys.argv[sys.argv.index("--seed") + 1] == "2":
    os.kill(os.getppid(), signal.SIGKILL)
sys.exit(3)
"""


def test_a_failed_task_is_reported_failed_from_sacct(slurm, tmp_path):
    """Two tasks that fail: one records its run failed (exit 3), one is killed before it can (from squeue alone its
    run stays `running`). Started again (--dry-run), the runner asks sacct (here its job completion log: the local
    cluster keeps no accounting), says that both tasks FAILED and records both runs failed, with Slurm's state."""
    (tmp_path / "crash.py").write_text(CRASH)
    grid = [
        "--command",
        f"{sys.executable} crash.py",
        "--env-ids",
        "CartPole-v1",
        "--seeds",
        1,
        2,
        "--workers",
        2,
        "--out",
        "out",
    ]
    job = submit(slurm, tmp_path, *grid)
    wait_for(slurm, job)
    ended = {seed: state["status"] for (_, seed), state in states(tmp_path / "out").items()}
    assert ended == {1: "failed", 2: "running"}, ended
    proc = run_tool("run.py", *grid, "--slurm", "--dry-run", cwd=tmp_path, **slurm)
    assert_ok(proc)
    failed = (
        f"  failed in Slurm (FAILED, task {job}_0, exit 1:0): CartPole-v1 seed 1\n"
        f"  failed in Slurm (FAILED, task {job}_1, exit 0:9; the task ended before its run recorded its end): "
        f"CartPole-v1 seed 2\n"
    )
    assert failed in proc.stdout, proc.stdout
    st = {seed: state for (_, seed), state in states(tmp_path / "out").items()}
    assert [(st[seed]["status"], st[seed]["returncode"], st[seed]["slurm_state"]) for seed in (1, 2)] == [
        ("failed", 3, "FAILED"),
        ("failed", -9, "FAILED"),
    ], st
    assert st[2]["error"] == f"the Slurm task {job}_1 ended FAILED (exit code 0:9) before it recorded how its run ended"


def test_the_multinode_script_joins_two_tasks_into_one_run(slurm, tmp_path):
    """benchmark/slurm_multinode.sh with two Slurm tasks standing in for two machines, one torchrun and one process
    each: the job completes with exit code 0 (srun's: every task's), both tasks ran, and they trained one run (two
    separate worlds would have made two run folders)."""
    need("ale_py")
    need("cv2")
    job = slurm_command(
        dict(slurm, NPROC="1", SCRIPT=str(REPO / "ppo_atari_multigpu.py")),
        "sbatch",
        "--parsable",
        "--chdir",
        tmp_path,
        "--nodes=1",
        "--ntasks=2",
        "--ntasks-per-node=2",
        "--cpus-per-task=1",
        f"--output={tmp_path}/job.out",
        REPO / "benchmark" / "slurm_multinode.sh",
        "--env-id",
        "BreakoutNoFrameskip-v4",
        "--num-envs",
        2,
        "--num-steps",
        16,
        "--num-minibatches",
        1,
        "--update-epochs",
        1,
        "--total-timesteps",
        64,
    ).strip()
    wait_for(slurm, job)
    output = (tmp_path / "job.out").read_text()
    info = slurm_command(slurm, "scontrol", "show", "job", job)
    assert "JobState=COMPLETED" in info and " ExitCode=0:0" in info, output
    # both tasks' lines
    assert re.search(r"^0: ", output, re.M) and re.search(r"^1: ", output, re.M), output
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "args.json").read_text())["num_envs"] == 2
    assert read_scalars(run)["charts/SPS"][-1][0] == 64
