"""Run a grid of training runs (env ids x seeds), each in its own process, a few at a time, here or as a Slurm job
array; restartable, and unfinished runs continue from their checkpoints.

    python benchmark/run.py --command "python ppo.py --total-timesteps 500000" \\
        --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 --seeds 1 2 3 --workers 2
    python benchmark/run.py --slurm --partition cpu --time 02:00:00 --workers 9 --command ... # the same, on Slurm

Each run is `{command} --env-id ENV --seed SEED`. What the runner keeps, under --out (default benchmark/out/<script>):
    <script>__<env>__<seed>__<key>.log   everything the run printed (stdout and stderr)
    <script>__<env>__<seed>__<key>.json  its state: "pending" (asked for, not started), "running", "done" (exit 0),
                                         "failed" (exit code and the error line) or "interrupted" (stopped by a
                                         signal: Ctrl-C, scancel, a time limit, a preemption); times, the command,
                                         the sha1 of the files the command names, the run folder it writes in runs/
                                         (recorded as soon as it exists) and that folder's args.json (the script
                                         and every resolved setting); the machine: its CPU model, cores, and
                                         1-minute load average (mean and max of samples taken every
                                         --status-every s while the run runs; a resumed run's over all its parts)
A run is identified by its command (its words: extra spaces do not matter), env id and seed. Arms of a sweep are
several commands (e.g. two learning rates) run into one --out: report.py --sweep then compares them. Started again
with the same arguments, the runner skips the runs recorded as done and runs the rest. A run that did not finish
(pending, running or interrupted) and left a checkpoint in its run folder (runs/<run>/<exp_name>.pt: the command has
--checkpoint-every N or --save-model) continues from it with --resume, in its own folder; a failed run, or one
without a checkpoint, starts over. With --rerun-on-edit, a run done before counts only if the files the command
names (e.g. ppo.py) are unchanged since. A run folder belongs to one run: a run that finds its folder recorded for
another run (two runs that wrote into one folder) is recorded as failed. Ctrl-C stops the runs (each gets SIGINT,
then SIGKILL after --grace seconds, or at once on a second Ctrl-C) and leaves them interrupted. Exit code: 0 when
every run succeeded, 1 when some failed or were stopped, 130 when interrupted, 2 for bad arguments.

--slurm: the runs not done, and not still queued or running in Slurm from an earlier submission of this --out, become
one `sbatch` job array, one task per run, at most --workers at once. The batch script and the list of its runs are
kept in <out>/slurm/ (each task's own Slurm output too); every task runs `run.py --slurm-task <list>`, which runs its
one run as a local worker does and writes the same log and state files. Slurm sends SIGTERM to every process of a
task that is cancelled, reaches its time limit or is preempted, then SIGKILL: the run saves its checkpoint and the
task records it as interrupted; a requeued task, or the sweep submitted again, continues it. Started again (also
with --dry-run), the runner asks sacct how the tasks of earlier submissions that squeue no longer lists ended, says
it, and writes it into their runs' state files (slurm_state: FAILED, CANCELLED, TIMEOUT, ...): a run that its task
left pending or running (the task was killed, or failed, before it could record its end) becomes failed (FAILED,
OUT_OF_MEMORY) or interrupted (CANCELLED, TIMEOUT, PREEMPTED, NODE_FAIL, ...). Without accounting, sacct --completion
reads the job completion log (JobCompType=jobcomp/filetxt), which knows only the tasks that started their run. Where
sacct does not answer, the state files stay as the tasks left them.

Stdlib only (and benchmark/common.py). The training scripts log to runs/ under the working directory (--cwd,
default: the current one).
"""

import functools
import hashlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from common import Parser, safe


@dataclass
class Run:
    env_id: str
    seed: int
    argv: list  # the full command line of this run
    key: str  # what identifies the run across restarts
    stem: str  # <out>/<stem>.json and <out>/<stem>.log
    process: Optional[subprocess.Popen] = None
    log_file: Optional[object] = None
    started: float = 0.0
    returncode: Optional[int] = None
    state: dict = field(default_factory=dict)
    # the run folder (under runs/) it continues, when started with --resume
    resumed: Optional[str] = None
    looked: float = 0.0  # when its run folder was last looked for
    sampled: float = 0.0  # when the machine's load was last sampled for it


def file_digest(path):
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def resolve_command(command, cwd):
    """Split the command; with another --cwd, tokens naming existing files become absolute paths so that the command
    still finds them. Returns (argv, {file as written: sha1 of its contents}); the contents go into the run key."""
    elsewhere = os.path.realpath(cwd) != os.path.realpath(".")
    argv, files = [], {}
    for token in shlex.split(command):
        if os.path.isfile(token):
            files[token] = file_digest(token)
            token = os.path.abspath(token) if elsewhere else token
        argv.append(token)
    return argv, files


def script_name(argv):
    """A short name for file names: the stem of the first .py in the command (else the program's name)."""
    for token in argv:
        if token.endswith(".py"):
            return Path(token).stem
    return Path(argv[0]).name


def plan(args):
    argv, files = resolve_command(args.command, args.cwd)
    name = script_name(argv)
    words = shlex.split(args.command)  # the identity: "python  ppo.py" is "python ppo.py"
    runs = []
    for env_id in args.env_ids:
        for seed in args.seeds:
            run_argv = argv + ["--env-id", env_id, "--seed", str(seed)]
            identity = {"command": words, "env_id": env_id, "seed": seed}
            if args.rerun_on_edit:
                identity["files"] = files
            identity = json.dumps(identity, sort_keys=True)
            key = hashlib.sha1(identity.encode()).hexdigest()[:10]
            runs.append(
                Run(
                    env_id,
                    seed,
                    run_argv,
                    key,
                    f"{name}__{safe(env_id)}__{seed}__{key}",
                    state={
                        "command": args.command,
                        "words": words,
                        "env_id": env_id,
                        "seed": seed,
                        "files": files,
                        "argv": run_argv,
                        "cwd": os.path.abspath(args.cwd),
                        "key": key,
                    },
                )
            )
    return runs


def read_states(out, warn=False):
    """{path: state} of the state files in out; a file that is not a JSON object is left out (warn: say so)."""
    states = {}
    for path in sorted(out.glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            state = e
        if isinstance(state, dict):
            states[path] = state
        elif warn:
            print(f"run.py: warning: skip {path}: not a state file ({str(state)[:80]})", file=sys.stderr, flush=True)
    return states


def words_of(state):
    """The command of a state as words (older state files have only the string)."""
    try:
        return state.get("words") or shlex.split(state.get("command", ""))
    except ValueError:
        return None


def done_before(states, run):
    """The state that records this run as done (same command words, env id and seed; matched by content, not file
    name), one with the same files (the script unchanged) first, or None."""
    done = [
        state
        for state in states.values()
        if state.get("status") == "done"
        and words_of(state) == run.state["words"]
        and all(state.get(k) == run.state[k] for k in ("env_id", "seed"))
    ]
    done.sort(key=lambda state: state.get("files") != run.state["files"])
    return done[0] if done else None


def write_state(out, run, **fields):
    """Write the run's state file atomically (a reader never sees half a file)."""
    run.state.update(fields)
    write_json(out / f"{run.stem}.json", run.state)


def tail_lines(path, size=8192):
    """The non-empty lines of the last `size` bytes of a log ([] when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            lines = [line.strip() for line in f.read().decode(errors="replace").replace("\r", "\n").split("\n")]
    except OSError:
        return []
    return [line for line in lines if line]


def last_line(path):
    """The last non-empty line a run printed (its progress line while it trains); '' when none."""
    lines = tail_lines(path, 4096)
    return lines[-1] if lines else ""


def find_run_names(cwd, run):
    """The TensorBoard run folders this run wrote, relative to runs/ under cwd: {env_id}__{exp_name}__{seed}__{unix
    time}[-N], made between its start and now, whose args.json (where there is one) says this script, env id, seed
    and the settings the command gives. Recorded so that a report can pick exactly a sweep's runs (--sweep)."""
    found, runs = [], Path(cwd) / "runs"
    # older scripts nest ALE/Pong-v5__
    patterns = {glob_escape(run.env_id), glob_escape(run.env_id.replace("/", "_"))}
    paths = sorted({p for pattern in patterns for p in runs.glob(f"{pattern}__*__{run.seed}__*")})
    for path in paths:
        # a second run in the same second: 1700000000-2
        stamp = path.name.rsplit("__", 1)[-1].split("-")[0]
        started_then = stamp.isdigit() and int(run.started) - 1 <= int(stamp) <= time.time() + 1
        if path.is_dir() and started_then and args_match(path / "args.json", run):
            found.append(path.relative_to(runs).as_posix())
    return found


def command_settings(words):
    """{field: value} of the --flag value pairs of a command (--learning-rate 1e-3 -> learning_rate: '1e-3'; a flag
    alone -> True, --no-flag -> False); flags with several values are left out."""
    settings, i = {}, 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            values = [value] if value else []
            while not value and i + 1 < len(words) and not words[i + 1].startswith("--"):
                values.append(words[i + 1])
                i += 1
            if not values:
                settings[name.replace("-", "_")] = True
                if name.startswith("no-"):
                    settings[name[3:].replace("-", "_")] = False
            elif len(values) == 1:
                settings[name.replace("-", "_")] = values[0]
        i += 1
    return settings


def same_value(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return str(a).lower() == str(b).lower()
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def args_match(path, run):
    """Whether a run folder's args.json (written by the scripts at start) fits this run; True when there is none."""
    try:
        written = json.loads(path.read_text())
    except (OSError, ValueError):
        return True
    script = script_name(run.argv) + ".py"
    wanted = dict(command_settings(run.argv), env_id=run.env_id, seed=run.seed)
    if any(word.endswith(".py") for word in run.argv) and written.get("script", script) != script:
        return False
    return all(same_value(written[k], v) for k, v in wanted.items() if k in written)


def last_write(folder):
    """The latest modification time of a folder's files (0 when none)."""
    return max((p.stat().st_mtime for p in Path(folder).rglob("*") if p.is_file()), default=0)


def read_args_json(cwd, run_name):
    try:
        return json.loads((Path(cwd) / "runs" / run_name / "args.json").read_text())
    except (OSError, ValueError):
        return None


def error_line(path):
    """The line that says why a run failed: for tyro's boxed error, its first line of text (not the border); for a
    traceback, the exception line; else the last line the run printed."""
    lines = tail_lines(path)
    boxes = [i for i, line in enumerate(lines) if line.startswith("╭")]
    if boxes:
        for line in lines[boxes[-1] + 1 :]:
            text = line.strip("│ ").strip()
            if text and set(text) - set("─╰╯"):
                return text
    return lines[-1] if lines else ""


def glob_escape(text):
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def hms(seconds):
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


UNFINISHED = ("pending", "running", "interrupted")
STATUS_EVERY = 60.0  # seconds between status lines, and between samples of the machine's load
MACHINE = ("cpu_model", "cores", "load_1min")  # what a run records of its machine


def unfinished_state(out, run):
    """The state file of an unfinished earlier attempt of this run, or {} (never started, done or failed)."""
    try:
        state = json.loads((out / f"{run.stem}.json").read_text())
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) and state.get("status") in UNFINISHED else {}


def earlier_folder(out, run):
    """The run folder (under runs/) that an unfinished earlier attempt of this run recorded in its state file, or
    None (never started, done, failed, or stopped before its folder existed)."""
    names = unfinished_state(out, run).get("run_names")
    return names[0] if names else None


@functools.lru_cache(maxsize=None)
def cpu_model():
    """The CPU's model name: /proc/cpuinfo's "model name" (x86), else lscpu's "Model name" (ARM); None if neither.
    Then "(AVX-512)" or "(AVX2)" where the CPU has them: CPUs of one name ("AMD EPYC") differ in them, and in speed."""

    def named(text, key):
        return next(
            (
                value.strip()
                for name, _, value in (line.partition(":") for line in text.splitlines())
                if name.strip() == key and value.strip()
            ),
            None,
        )

    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
        model = named(cpuinfo, "model name") or named(
            subprocess.run(
                ["lscpu"], capture_output=True, text=True, timeout=30, env=dict(os.environ, LC_ALL="C")
            ).stdout,
            "Model name",
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    flags = (named(cpuinfo, "flags") or "").split()
    simd = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else None
    return f"{model} ({simd})" if model and simd else model


def sample_load(out, run, every=0.0):
    """At most every `every` s, a sample of the machine's 1-minute load average (os.getloadavg) into the run's state:
    load_1min {mean, max, samples} over every sample of the run (of all its parts, when it was resumed)."""
    if time.time() - run.sampled < every:
        return
    run.sampled = time.time()
    try:
        load = os.getloadavg()[0]
    except OSError:  # not on this system
        return
    old = run.state.get("load_1min") or {"mean": 0.0, "max": load, "samples": 0}
    n = old["samples"] + 1
    write_state(
        out, run, load_1min={"mean": old["mean"] + (load - old["mean"]) / n, "max": max(old["max"], load), "samples": n}
    )


def checkpoint_in(cwd, folder, run):
    """The checkpoint a script keeps in its run folder, runs/<folder>/<exp_name>.pt (relative to cwd), when it exists;
    exp_name from the folder's args.json, else the command's --exp-name, else the script's name."""
    written = read_args_json(cwd, folder) or {}
    exp_name = written.get("exp_name") or command_settings(run.argv).get("exp_name") or script_name(run.argv)
    path = f"runs/{folder}/{exp_name}.pt"
    return path if (Path(cwd) / path).is_file() else None


def start(run, out, cwd, threads):
    """Start a run: with --resume its checkpoint when an unfinished attempt left one, else from the beginning."""
    earlier = unfinished_state(out, run)
    folder = earlier_folder(out, run)
    checkpoint = checkpoint_in(cwd, folder, run) if folder else None
    run.resumed = folder if checkpoint else None
    argv = run.argv + (["--resume", checkpoint] if checkpoint else [])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # a resumed run's log goes on
    run.log_file = open(out / f"{run.stem}.log", "a" if checkpoint else "w")
    run.log_file.write(f"$ cd {shlex.quote(os.path.abspath(cwd))} && OMP_NUM_THREADS={threads} {shlex.join(argv)}\n")
    run.log_file.flush()
    run.started = time.time()
    # Its own process group: a Ctrl-C in the terminal reaches only the runner, which then stops each run itself.
    try:
        run.process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=run.log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as e:  # e.g. the program does not exist: this run fails, the others go on
        run.log_file.write(f"cannot start: {e}\n")
        run.process = None
    job = os.environ.get("SLURM_ARRAY_JOB_ID")
    # of an earlier attempt
    for stale in ("returncode", "error", "ended", "wall_s", "args", "slurm_state", *MACHINE):
        run.state.pop(stale, None)
    models = [cpu_model() or "unknown"]
    # a run that goes on: the load over all its parts, the CPU models of each (Slurm: other nodes)
    if checkpoint:
        if earlier.get("load_1min"):
            run.state["load_1min"] = earlier["load_1min"]
        models = list(dict.fromkeys((earlier.get("cpu_model") or "unknown").split("; ") + models))
    run.sampled = run.started  # the first sample after `every` s: the load of a minute of this run
    write_state(
        out,
        run,
        status="running",
        started=run.started,
        host=socket.gethostname(),
        resumed_from=checkpoint,
        cpu_model="; ".join(models),
        cores=os.cpu_count(),
        threads=threads,
        pid=run.process.pid if run.process else None,
        run_names=[folder] if checkpoint else [],
        slurm_job=f"{job}_{os.environ.get('SLURM_ARRAY_TASK_ID')}" if job else None,
        # the task's own id: sacct --completion
        slurm_job_id=os.environ.get("SLURM_JOB_ID") if job else None,
    )


def still_running(state):
    """The pid of the process a state records as running on this machine, if that process is still alive (e.g. a
    run of a runner that was killed, or of another runner on the same --out), else None."""
    pid = state.get("pid")
    if state.get("status") != "running" or not pid or state.get("host") != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError, OverflowError):
        return None
    try:  # a pid used again by another program is not the run (a zombie has no command line either)
        if script_name(state["argv"]).encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    except (OSError, IndexError, KeyError, TypeError):
        pass
    return pid


def note_folder(out, cwd, run):
    """While a run goes on, record its run folder in its state as soon as there is exactly one: a run killed before
    it could say how it ended (SIGKILL, a lost node) is then still found, and continued, by the next attempt."""
    if run.state.get("run_names") or time.time() - run.looked < 2:
        return
    run.looked = time.time()
    names = find_run_names(cwd, run)
    if len(names) == 1:
        write_state(out, run, run_names=names)


def outcome(returncode, stopped):
    """ "done" (exit 0), "interrupted" (the runner was stopped, or the run ended by SIGINT, SIGTERM or SIGKILL: exit
    130, 143, 137 or killed) or "failed"."""
    if returncode == 0:
        return "done"
    if stopped or returncode < 0 or returncode in (130, 137, 143):
        return "interrupted"
    return "failed"


def finish(out, cwd, run, stopped=False):
    """Record how a run that has ended ended (its state file); returns its status."""
    run.log_file.close()
    run.returncode = run.process.returncode if run.process is not None else 127  # 127: not started
    wall = time.time() - run.started
    status = outcome(run.returncode, stopped)
    sample_load(out, run)
    names, taken, claimed = [run.resumed], [], {}  # a resumed run is in the folder it continued
    if not run.resumed:
        names = find_run_names(cwd, run)
        claimed = {
            name: (path.name, state.get("ended", 0))
            for path, state in read_states(out).items()
            if path.stem != run.stem and state.get("status") == "done"
            for name in state.get("run_names", [])
        }
        # a folder recorded for another run is this run's too when that run was still going when this one started,
        # or when this run wrote into it (an older script that reuses a folder of the same second)
        taken = [
            name
            for name in names
            if name in claimed
            and (claimed[name][1] >= run.started or last_write(Path(cwd) / "runs" / name) >= run.started)
        ]
        names = [name for name in names if name not in claimed]
    error = {"done": "", "interrupted": f"stopped by a signal (exit {run.returncode})"}.get(status)
    if not error:
        error = error_line(out / f"{run.stem}.log")
    if taken and status == "done":  # never two runs for one folder: its scalars would mix both
        status = "failed"
        error = (
            f"its run folder runs/{taken[0]} is recorded for another run ({claimed[taken[0]][0]}): two runs "
            f"wrote into one folder; run it again"
        )
    write_state(
        out,
        run,
        status=status,
        returncode=run.returncode,
        error=error,
        started=run.started,
        ended=time.time(),
        wall_s=round(wall, 1),
        run_names=names,
        args={name: read_args_json(cwd, name) for name in names},
    )
    return status


class Hurry(Exception):
    """A second Ctrl-C (or SIGTERM) while the runs are being stopped."""


def stop_all(running, grace):
    """Ctrl-C: SIGINT to every run (the scripts close their logs and exit), SIGKILL to those alive after grace s, or
    at once on a second Ctrl-C."""

    def hurry(signum, frame):
        raise Hurry

    running = [run for run in running if run.process is not None]
    signal.signal(signal.SIGINT, hurry)
    signal.signal(signal.SIGTERM, hurry)
    try:
        for run in running:
            signal_group(run, signal.SIGINT)
        deadline = time.time() + grace
        for run in running:
            try:
                run.process.wait(timeout=max(0.0, deadline - time.time()))
            except subprocess.TimeoutExpired:
                signal_group(run, signal.SIGKILL)
    except Hurry:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a third one changes nothing
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        alive = [run for run in running if run.process.poll() is None]
        print(f"second interrupt: killing {len(alive)} run(s) now", file=sys.stderr, flush=True)
        for run in alive:
            signal_group(run, signal.SIGKILL)
    for run in running:
        run.process.wait()


def signal_group(run, signum):
    try:
        os.killpg(run.process.pid, signum)
    except ProcessLookupError:
        pass


def mark_pending(out, run):
    """Record a run as asked for (report.py --sweep lists a run that never finishes as missing), keeping the run folder
    of an unfinished earlier attempt, which it will continue."""
    folder, earlier = earlier_folder(out, run), unfinished_state(out, run)
    write_state(
        out,
        run,
        status="pending",
        run_names=[folder] if folder else [],
        **{key: earlier[key] for key in MACHINE if key in earlier},
    )


def slurm_tasks(out):
    """The Slurm array tasks ("<job>_<task>") that earlier --slurm submissions into this --out asked for: ({state file
    stem: task} of the runs that squeue still lists as queued or running: a new submission must not run them a second
    time, {stem: task} of each run's latest submission)."""
    submitted = []
    # the latest last
    for path in sorted((out / "slurm").glob("*.json"), key=lambda path: path.stat().st_mtime):
        try:
            submission = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(submission, dict) and submission.get("job_id"):
            submitted.append(submission)
    if not submitted:
        return {}, {}
    try:
        proc = subprocess.run(
            ["squeue", "--user", str(os.getuid()), "--noheader", "--array", "--format", "%F %K"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        alive = {tuple(line.split()[:2]) for line in proc.stdout.splitlines()} if proc.returncode == 0 else None
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        alive, why = None, str(e)
    if alive is None:
        print(
            f"run.py: error: cannot ask squeue which runs of earlier submissions into {out} are still queued or "
            f"running ({why})",
            file=sys.stderr,
        )
        raise SystemExit(1)
    tasks = [
        (item["stem"], submission["job_id"], str(i))
        for submission in submitted
        for i, item in enumerate(submission["runs"])
    ]
    return (
        {stem: f"{job}_{i}" for stem, job, i in tasks if (job, i) in alive},
        {stem: f"{job}_{i}" for stem, job, i in tasks},
    )


# How sacct's end of a task makes the end of a run its task did not record: failed, or interrupted (stopped from
# outside; it continues from its checkpoint). COMPLETED (exit 0) and the states of tasks not ended are not here.
SLURM_ENDS = {
    "FAILED": "failed",
    "OUT_OF_MEMORY": "failed",
    "CANCELLED": "interrupted",
    "TIMEOUT": "interrupted",
    "PREEMPTED": "interrupted",
    "NODE_FAIL": "interrupted",
    "BOOT_FAIL": "interrupted",
    "DEADLINE": "interrupted",
}


def sacct(*args):
    """sacct's rows [JobID, State, ExitCode, End] of the jobs asked for, or None when it does not answer (not
    installed, or a cluster without accounting: "Slurm accounting storage is disabled")."""
    try:
        proc = subprocess.run(
            ["sacct", "--noheader", "--parsable2", "--allocations", "--format", "JobID,State,ExitCode,End", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if proc.returncode != 0:
        return None
    return [line.split("|") for line in proc.stdout.splitlines() if line.count("|") == 3]


def array_tasks(job_id):
    """The array tasks a JobID of sacct stands for: "7_2" -> ["7_2"]; tasks that never started are one row,
    "7_[3-5,8%2]" -> ["7_3", "7_4", "7_5", "7_8"]; [] for a job that is not a task of an array."""
    array, _, index = job_id.partition("_")
    if index.isdigit():
        return [job_id]
    tasks = []
    if index.startswith("[") and index.endswith("]"):
        for part in index[1:-1].split("%")[0].split(","):
            first, _, last = part.partition("-")
            if first.isdigit() and (last or first).isdigit():
                tasks += [f"{array}_{i}" for i in range(int(first), int(last or first) + 1)]
    return tasks


def slurm_ends(tasks):
    """How the array tasks asked for ended, as sacct says: {task: (state, exit code "code:signal", end time)}, for
    the states of SLURM_ENDS. tasks: {task: its own job id, or None where unknown}. First from the accounting
    database, by job array; for the tasks it does not know (a cluster without accounting), from the job completion
    log (sacct --completion, where slurm.conf has JobCompType=jobcomp/filetxt), which names a task only by its own
    job id (SLURM_JOB_ID: a task records it when its run starts)."""
    ends = {}
    for job, state, code, end in sacct("--jobs", ",".join(sorted({task.split("_")[0] for task in tasks}))) or []:
        ends.update({task: (state, code, end) for task in array_tasks(job) if task in tasks})
    own = {job: task for task, job in tasks.items() if job and task not in ends}
    if own:
        for job, state, code, end in sacct("--completion", "--jobs", ",".join(own)) or []:
            if job in own:
                ends[own[job]] = (state, code, end)
    ends = {task: (state.split()[0], code, end) for task, (state, code, end) in ends.items() if state.split()}
    # "CANCELLED by 1000": CANCELLED
    return {task: end for task, end in ends.items() if end[0] in SLURM_ENDS}


def record_slurm_ends(out, states, runs, tasks):
    """What sacct says of the ended Slurm task of each run that is not done (tasks: {state file stem: its latest
    task}), written into its state file: slurm_state (FAILED, CANCELLED, TIMEOUT, ...). A run that its task left
    pending or running (the task ended before it could record how: killed, out of memory, its node lost, a failure
    before the run started) also gets the status of SLURM_ENDS, the exit code and an error line. Returns a line to
    print per run; none where sacct does not answer (then the state files stay as they are)."""
    asked = {}
    for run in runs:
        path, task = out / f"{run.stem}.json", tasks.get(run.stem)
        state = states.get(path)
        # not a later attempt's
        ours = state and (state.get("status") == "pending" or state.get("slurm_job") == task)
        if task and ours and state.get("status") != "done":
            asked[task] = (run, path, state)
    lines = []
    ends = slurm_ends({task: state.get("slurm_job_id") for task, (_, _, state) in asked.items()}) if asked else {}
    for task, (run, path, state) in asked.items():
        if task not in ends:
            continue
        slurm_state, code, end = ends[task]
        fields = {"slurm_state": slurm_state}
        unrecorded = state["status"] in ("pending", "running")
        if unrecorded:
            # "0:9": SIGKILL
            exit_code, signum = (int(x) if x.isdigit() else 0 for x in code.partition(":")[::2])
            try:
                ended = time.mktime(time.strptime(end, "%Y-%m-%dT%H:%M:%S"))
            except ValueError:
                ended = time.time()
            fields.update(
                status=SLURM_ENDS[slurm_state],
                returncode=-signum if signum else exit_code or None,
                ended=ended,
                error=f"the Slurm task {task} ended {slurm_state} (exit code {code}) before it "
                f"recorded how its run ended",
            )
        if any(state.get(key) != value for key, value in fields.items()):
            state.update(fields)
            write_json(path, state)
        why = "; the task ended before its run recorded its end" if unrecorded else ""
        lines.append(
            f"  {state['status']} in Slurm ({slurm_state}, task {task}, exit {code}{why}): {run.env_id} seed {run.seed}"
        )
    return lines


def batch_script(args, out, listing, runs, name):
    """The sbatch script of a submission: the shebang and #SBATCH lines of --slurm-template (or #!/bin/bash), a
    comment naming each task's run, the runner's #SBATCH lines (after the template's: where both set an option, the
    runner's wins), the template's commands, and the one command every task runs."""
    lines = Path(args.slurm_template).read_text().splitlines() if args.slurm_template else []
    if not lines or not lines[0].startswith("#!"):
        lines.insert(0, "#!/bin/bash")
    end = next((i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), len(lines))
    about = [f"# benchmark/run.py --slurm: {len(runs)} runs of `{args.command}`, one array task each:"]
    # the checkpoint each would continue from now (the task decides when it starts)
    for i, run in enumerate(runs):
        folder = earlier_folder(out, run)
        checkpoint = checkpoint_in(args.cwd, folder, run) if folder else None
        about.append(f"#   task {i}: {run.env_id} seed {run.seed}{f' (continues {checkpoint})' if checkpoint else ''}")
    options = [
        f"job-name={name}",
        f"array=0-{len(runs) - 1}%{args.workers}",
        f"output={listing.parent}/%A_%a.out",
        # requeue: a task that is preempted or loses its node runs again
        "open-mode=append",
        "requeue",
    ]
    options += [
        f"{flag}={value}"
        for flag, value in (
            ("partition", args.partition),
            ("account", args.account),
            ("time", args.time),
            ("cpus-per-task", args.cpus_per_task),
            ("gpus-per-task", args.gpus_per_task),
        )
        if value is not None
    ]
    options += [option.removeprefix("--") for option in args.sbatch]
    task = shlex.join([sys.executable, str(Path(__file__).resolve()), "--slurm-task", str(listing)])
    return (
        "\n".join(lines[:end] + about + [f"#SBATCH --{option}" for option in options] + lines[end:] + [f"exec {task}"])
        + "\n"
    )


def write_json(path, data):
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def submit(args, out, runs):
    """--slurm: write the batch script and the list of its runs into <out>/slurm/ and submit them as one job array
    (--dry-run: print the script, write and submit nothing). Returns the exit code."""
    name = script_name(runs[0].argv)
    listing = out.resolve() / "slurm" / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.json"
    script = batch_script(args, out, listing, runs, name)
    if args.dry_run:
        print(f"the batch script (written to {listing.with_suffix('.sh')} and submitted without --dry-run):")
        print(script, end="")
        return 0
    submission = {
        "out": str(out.resolve()),
        "cwd": os.path.abspath(args.cwd),
        "grace": args.grace,
        "threads": args.threads or args.cpus_per_task,
        "job_id": None,
        "runs": [
            {
                "env_id": run.env_id,
                "seed": run.seed,
                "argv": run.argv,
                "key": run.key,
                "stem": run.stem,
                "state": run.state,
            }
            for run in runs
        ],
    }
    listing.parent.mkdir(exist_ok=True)
    write_json(listing, submission)
    listing.with_suffix(".sh").write_text(script)
    for run in runs:  # before sbatch: a task that starts at once must find its state
        mark_pending(out, run)
    proc = subprocess.run(["sbatch", "--parsable", str(listing.with_suffix(".sh"))], capture_output=True, text=True)
    if proc.returncode != 0:
        why = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"
        print(f"run.py: error: sbatch refused {listing.with_suffix('.sh')}: {why}", file=sys.stderr)
        return 1
    submission["job_id"] = proc.stdout.strip().split(";")[0]  # "123" or "123;cluster"
    write_json(listing, submission)
    print(
        f"submitted Slurm job {submission['job_id']}: {len(runs)} array tasks, at most {args.workers} at once; "
        f"batch script {listing.with_suffix('.sh')}",
        flush=True,
    )
    print(
        f"  follow it with squeue --me; the state files in {out}/ say how each run ended; the same command again "
        f"submits what did not finish",
        flush=True,
    )
    return 0


def run_task(listing):
    """Inside a Slurm array task: the run at $SLURM_ARRAY_TASK_ID of a submission's list, run as a local worker
    runs it. Slurm sends SIGTERM to every process of a task that is cancelled, reaches its time limit or is
    preempted: the run stops by itself (and saves its checkpoint), the task waits for it (SIGKILL after the grace
    seconds) and records it as interrupted. Exit code: 0 done, 1 failed, 143 interrupted."""
    if "SLURM_ARRAY_TASK_ID" not in os.environ:
        print(
            "run.py: error: --slurm-task runs inside a Slurm array task (the batch script of --slurm calls it)",
            file=sys.stderr,
        )
        return 2
    submission = json.loads(Path(listing).read_text())
    item = submission["runs"][int(os.environ["SLURM_ARRAY_TASK_ID"])]
    out, cwd = Path(submission["out"]), submission["cwd"]
    run = Run(item["env_id"], item["seed"], item["argv"], item["key"], item["stem"], state=dict(item["state"]))
    try:
        if json.loads((out / f"{run.stem}.json").read_text()).get("status") == "done":
            print(f"{run.env_id} seed {run.seed}: done before (a requeued task); nothing to do", flush=True)
            return 0
    except (OSError, ValueError, AttributeError):
        pass
    stopped = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stopped.append(signum))
    start(run, out, cwd, submission["threads"] or int(os.environ.get("SLURM_CPUS_PER_TASK") or 1))
    resumes = f", continues {run.state['resumed_from']}" if run.resumed else ""
    print(f"{socket.gethostname()}: {run.env_id} seed {run.seed}{resumes}; log {out / run.stem}.log", flush=True)
    deadline = None
    while run.process is not None and run.process.poll() is None:
        time.sleep(0.5)
        note_folder(out, cwd, run)
        sample_load(out, run, STATUS_EVERY)
        if stopped and deadline is None:
            deadline = time.time() + submission["grace"]
        if deadline is not None and time.time() > deadline:
            signal_group(run, signal.SIGKILL)
    status = finish(out, cwd, run, stopped=bool(stopped))
    print(f"{run.env_id} seed {run.seed}: {status} (exit {run.returncode})", flush=True)
    return {"done": 0, "failed": 1}.get(status, 143)


def parse_args(argv=None):
    parser = Parser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--command",
        required=True,
        help='the training command without --env-id and --seed, e.g. "python ppo.py --total-timesteps 500000"',
    )
    parser.add_argument("--env-ids", nargs="+", required=True, help="env ids to run the command on")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="the seeds of each env")
    seeds.add_argument("--num-seeds", type=int, help="shorthand for --seeds 1 2 ... N")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="runs at the same time: here at most the number of cores; with --slurm the array tasks "
        "running at once (e.g. 20)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="OMP_NUM_THREADS of each run (default: cores // workers, at least 1; with --slurm, "
        "--cpus-per-task, else 1)",
    )
    parser.add_argument("--out", default=None, help="folder for logs and state files (default benchmark/out/<script>)")
    parser.add_argument(
        "--cwd", default=".", help="working directory of the runs (their runs/ folder lands there); made if missing"
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=30.0,
        help="seconds a run gets to stop after Ctrl-C (in a Slurm task: after SIGTERM) before it is killed",
    )
    parser.add_argument(
        "--status-every",
        type=float,
        default=STATUS_EVERY,
        help="seconds between status lines that show each running run's last output line, and "
        "between samples of the machine's load that its state records",
    )
    parser.add_argument(
        "--rerun-on-edit",
        action="store_true",
        help="a run done before counts only if the files the command names (the script) are unchanged",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs and whether they would be skipped (with --slurm, the batch script); "
        "run and submit nothing, and write nothing but how ended Slurm tasks ended (sacct)",
    )
    slurm = parser.add_argument_group(
        "Slurm", "With --slurm the runs become one job array; these options set its #SBATCH lines."
    )
    slurm.add_argument(
        "--slurm",
        action="store_true",
        help="submit the runs not done as one sbatch job array, one task per run, at most --workers at "
        "once, instead of running them here",
    )
    slurm.add_argument("--partition", help="the partition (queue) of the tasks")
    slurm.add_argument("--account", help="the account the tasks are charged to")
    slurm.add_argument(
        "--time",
        help="the time limit of each task, e.g. 04:00:00 (a run it stops continues from its "
        "checkpoint when the sweep is submitted again)",
    )
    slurm.add_argument("--cpus-per-task", type=int, help="cores of each task, e.g. 2 (also its OMP_NUM_THREADS)")
    slurm.add_argument("--gpus-per-task", help="GPUs of each task, e.g. 1 or a100:1")
    slurm.add_argument(
        "--sbatch",
        action="append",
        default=[],
        metavar="OPTION",
        help='an extra #SBATCH line, repeatable: --sbatch mem=16G, --sbatch "qos=preemptible" (the '
        "leading -- may be left out)",
    )
    slurm.add_argument(
        "--slurm-template",
        metavar="FILE",
        help="the site's header of the batch script instead of #!/bin/bash: its shebang, #SBATCH lines "
        "and setup commands (module load ..., source venv/bin/activate)",
    )
    args = parser.parse_args(argv)
    if args.num_seeds is not None:
        if args.num_seeds < 1:
            parser.error(f"--num-seeds must be positive, got {args.num_seeds}")
        args.seeds = list(range(1, args.num_seeds + 1))
    if args.workers < 1:
        parser.error(f"--workers must be positive, got {args.workers}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be positive, got {args.threads}")
    if not shlex.split(args.command):
        parser.error("--command is empty")
    if len(set(args.seeds)) != len(args.seeds) or len(set(args.env_ids)) != len(args.env_ids):
        parser.error("--env-ids and --seeds must not repeat a value")
    if os.path.exists(args.cwd) and not os.path.isdir(args.cwd):
        parser.error(f"--cwd {args.cwd}: not a folder")
    cluster = {
        "--partition": args.partition,
        "--account": args.account,
        "--time": args.time,
        "--cpus-per-task": args.cpus_per_task,
        "--gpus-per-task": args.gpus_per_task,
        "--sbatch": args.sbatch or None,
        "--slurm-template": args.slurm_template,
    }
    given = [flag for flag, value in cluster.items() if value is not None]
    if given and not args.slurm:
        parser.error(f"{given[0]} is an option of --slurm: add --slurm to submit to Slurm")
    for flag in ("--partition", "--account", "--time", "--gpus-per-task"):
        value = cluster[flag]
        if value is not None and (not value or any(c.isspace() for c in value)):
            parser.error(f"{flag} {value!r}: one word, without spaces")
    if args.cpus_per_task is not None and args.cpus_per_task < 1:
        parser.error(f"--cpus-per-task must be positive, got {args.cpus_per_task}")
    for option in args.sbatch:
        if not option.strip() or "\n" in option:
            parser.error(f"--sbatch {option!r}: one #SBATCH option on one line, e.g. --sbatch mem=16G")
    if args.slurm_template is not None and not os.path.isfile(args.slurm_template):
        parser.error(f"--slurm-template {args.slurm_template}: no such file")
    if args.slurm and not args.dry_run and shutil.which("sbatch") is None:
        parser.error(
            "--slurm: sbatch not found (run it where Slurm's commands are, e.g. a login node; a cluster on "
            "this machine: bash benchmark/local_slurm.sh start)"
        )
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # inside an array task: what the batch script runs
    if argv[:1] == ["--slurm-task"] and len(argv) == 2:
        return run_task(argv[1])
    args = parse_args(argv)
    runs = plan(args)
    out = Path(args.out or Path("benchmark/out") / script_name(runs[0].argv))
    out.mkdir(parents=True, exist_ok=True)
    os.makedirs(args.cwd, exist_ok=True)  # e.g. a sweep's OUT=benchmark/out/NAME on its first run
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = args.threads or max(1, cores // args.workers)

    states = read_states(out, warn=True)
    skipped, pending, edited = [], [], []
    for run in runs:
        before = done_before(states, run)
        if before is None or (args.rerun_on_edit and before.get("files") != run.state["files"]):
            pending.append(run)
        else:
            skipped.append(run)
            if before.get("files") != run.state["files"]:
                edited.append(run)
    stems = {run.stem for run in runs}
    queued, latest = slurm_tasks(out) if args.slurm else ({}, {})
    queued = {stem: task for stem, task in queued.items() if stem in stems}
    total = len(runs)
    where = f"{args.workers} workers, OMP_NUM_THREADS={threads}"
    if args.slurm:
        where = f"{len(queued)} queued or running in Slurm"
    print(
        f"{total} runs ({len(args.env_ids)} envs x {len(args.seeds)} seeds), {len(skipped)} already done, {where}; "
        f"logs and state in {out}/",
        flush=True,
    )
    for run in skipped:
        changed = ", ".join(sorted(run.state["files"])) or "a file it names"
        why = f"; {changed} changed since: --rerun-on-edit runs it again" if run in edited else ""
        print(f"  skip (done before{why}): {run.env_id} seed {run.seed}", flush=True)
    busy = []  # not to be started twice
    for run in pending:
        if run.stem in queued:
            busy.append(run)
            print(f"  skip (queued or running in Slurm, task {queued[run.stem]}): {run.env_id} seed {run.seed}")
        elif (pid := still_running(states.get(out / f"{run.stem}.json", {}))) is not None:
            busy.append(run)
            print(f"  skip (still running here as pid {pid}, started by another runner): {run.env_id} seed {run.seed}")
    pending = [run for run in pending if run not in busy]
    if args.slurm:
        for line in record_slurm_ends(out, states, pending, latest):
            print(line, flush=True)
        if not pending:
            print("nothing to submit")
            return 0
        return submit(args, out, pending)
    if args.dry_run:
        for run in pending:
            folder = earlier_folder(out, run)
            checkpoint = checkpoint_in(args.cwd, folder, run) if folder else None
            print(f"  would run: {shlex.join(run.argv)}{f' --resume {checkpoint}' if checkpoint else ''}")
        return 0
    for run in pending:
        mark_pending(out, run)

    t0 = time.time()
    running, finished, failed = [], [], []
    last_status = time.time()

    def progress(event):
        done = len(skipped) + len(finished)
        counts = f"{done}/{total} done | {len(running)} running | {len(failed)} failed"
        print(f"[{counts} | {hms(time.time() - t0)}] {event}", flush=True)

    terminal = [fd for fd in (1, 2) if os.isatty(fd)]

    def handle_signal(signum, frame):  # SIGTERM and SIGHUP are treated like Ctrl-C
        # the terminal is gone: what is printed from now on would fail there
        if signum == signal.SIGHUP:
            for fd in terminal:
                os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handle_signal)
    # the terminal closed: the runs are stopped, not left running
    signal.signal(signal.SIGHUP, handle_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while pending or running:
            while pending and len(running) < args.workers:
                run = pending.pop(0)
                start(run, out, args.cwd, threads)
                running.append(run)
                resumes = f"continues {run.state['resumed_from']}; " if run.resumed else ""
                progress(f"start {run.env_id} seed {run.seed} ({resumes}log {out / run.stem}.log)")
            time.sleep(0.2)
            for run in list(running):
                if run.process is not None and run.process.poll() is None:
                    note_folder(out, args.cwd, run)
                    sample_load(out, run, args.status_every)
                    continue
                running.remove(run)
                status = finish(out, args.cwd, run)
                (finished if status == "done" else failed).append(run)
                why = {
                    "done": "done",
                    "interrupted": f"STOPPED (exit {run.returncode}: a signal)",
                    "failed": f"FAILED (exit {run.returncode})" if run.returncode else "FAILED (run folder taken)",
                }
                progress(f"{why[status]} {run.env_id} seed {run.seed} in {run.state['wall_s']:.0f} s")
            if running and time.time() - last_status >= args.status_every:
                last_status = time.time()
                for run in running:
                    progress(
                        f"running {run.env_id} seed {run.seed} ({time.time() - run.started:.0f} s): "
                        f"{last_line(out / f'{run.stem}.log')[:120]}"
                    )
    except KeyboardInterrupt:
        # until stop_all takes a second one as "kill now"
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        print(
            f"\ninterrupted: stopping {len(running)} running run(s) (Ctrl-C again: kill them now); start the "
            f"same command again to continue",
            file=sys.stderr,
            flush=True,
        )
        stop_all(running, args.grace)
        for run in running:
            finish(out, args.cwd, run, stopped=True)
        return 130

    print(
        f"finished in {hms(time.time() - t0)}: {len(finished)} succeeded, {len(skipped)} skipped (done before), "
        f"{len(failed)} failed",
        flush=True,
    )
    for run in failed:
        what = "FAILED" if run.state["status"] == "failed" else "STOPPED"
        print(
            f"  {what} {run.env_id} seed {run.seed}: exit {run.returncode}, log {out / run.stem}.log: "
            f"{run.state['error'][:200]}",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
