"""Run a grid of training runs (env ids x seeds), each in its own process, a few at a time; restartable.

    python benchmark/run.py --command "python ppo.py --total-timesteps 500000" \\
        --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 --seeds 1 2 3 --workers 2

Each run is `{command} --env-id ENV --seed SEED`. What the runner keeps, under --out (default benchmark/out/<script>):
    <script>__<env>__<seed>__<key>.log   everything the run printed (stdout and stderr)
    <script>__<env>__<seed>__<key>.json  its state: "pending" (asked for, not finished), "done" (exit 0) or "failed"
                                         (exit code and the error line), times, the command, the sha1 of the files
                                         the command names, the run folder it wrote in runs/ and that folder's
                                         args.json (the script and every resolved setting)
A run is identified by its command (its words: extra spaces do not matter), env id and seed. Arms of a sweep are
several commands (e.g. two learning rates) run into one --out: report.py --sweep then compares them. Started again
with the same arguments, the runner skips the runs recorded as done and runs the rest (the failed and the unfinished
ones). With --rerun-on-edit, a run done before counts only if the files the command names (e.g. ppo.py) are
unchanged since. A run folder belongs to one run: a run that finds its folder recorded for another run (two runs
that wrote into one folder) is recorded as failed. Ctrl-C stops the runs (each gets SIGINT, then SIGKILL after
--grace seconds, or at once on a second Ctrl-C) and leaves them unfinished. Exit code: 0 when every run succeeded,
1 when some failed, 130 when interrupted, 2 for bad arguments.

Stdlib only (and benchmark/common.py). The training scripts log to runs/ under the working directory (--cwd,
default: the current one).
"""

import hashlib
import json
import os
import shlex
import signal
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
            runs.append(Run(env_id, seed, run_argv, key, f"{name}__{safe(env_id)}__{seed}__{key}",
                            state={"command": args.command, "words": words, "env_id": env_id, "seed": seed,
                                   "files": files, "argv": run_argv, "cwd": os.path.abspath(args.cwd), "key": key}))
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
    done = [state for state in states.values() if state.get("status") == "done" and
            words_of(state) == run.state["words"] and all(state.get(k) == run.state[k] for k in ("env_id", "seed"))]
    done.sort(key=lambda state: state.get("files") != run.state["files"])
    return done[0] if done else None


def write_state(out, run, **fields):
    """Write the run's state file atomically (a reader never sees half a file)."""
    run.state.update(fields)
    path = out / f"{run.stem}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(run.state, indent=1) + "\n")
    os.replace(tmp, path)


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
    patterns = {glob_escape(run.env_id), glob_escape(run.env_id.replace("/", "_"))}  # older scripts nest ALE/Pong-v5__
    paths = sorted({p for pattern in patterns for p in runs.glob(f"{pattern}__*__{run.seed}__*")})
    for path in paths:
        stamp = path.name.rsplit("__", 1)[-1].split("-")[0]  # a second run in the same second: 1700000000-2
        if path.is_dir() and stamp.isdigit() and int(run.started) - 1 <= int(stamp) <= time.time() + 1 \
                and args_match(path / "args.json", run):
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
        for line in lines[boxes[-1] + 1:]:
            text = line.strip("│ ").strip()
            if text and set(text) - set("─╰╯"):
                return text
    return lines[-1] if lines else ""


def glob_escape(text):
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def hms(seconds):
    return time.strftime("%H:%M:%S", time.gmtime(seconds))


def start(run, out, cwd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    run.log_file = open(out / f"{run.stem}.log", "w")
    run.log_file.write(f"$ cd {shlex.quote(os.path.abspath(cwd))} && OMP_NUM_THREADS={threads} "
                       f"{shlex.join(run.argv)}\n")
    run.log_file.flush()
    run.started = time.time()
    # Its own process group: a Ctrl-C in the terminal reaches only the runner, which then stops each run itself.
    try:
        run.process = subprocess.Popen(run.argv, cwd=cwd, env=env, stdout=run.log_file, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as e:  # e.g. the program does not exist: this run fails, the others go on
        run.log_file.write(f"cannot start: {e}\n")
        run.process = None


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
        run.log_file.close()


def signal_group(run, signum):
    try:
        os.killpg(run.process.pid, signum)
    except ProcessLookupError:
        pass


def parse_args(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--command", required=True,
                        help='the training command without --env-id and --seed, e.g. '
                             '"python ppo.py --total-timesteps 500000"')
    parser.add_argument("--env-ids", nargs="+", required=True, help="env ids to run the command on")
    seeds = parser.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3], help="the seeds of each env")
    seeds.add_argument("--num-seeds", type=int, help="shorthand for --seeds 1 2 ... N")
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time (at most the number of cores)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS of each run (default: cores // workers, at least 1)")
    parser.add_argument("--out", default=None, help="folder for logs and state files (default benchmark/out/<script>)")
    parser.add_argument("--cwd", default=".",
                        help="working directory of the runs (their runs/ folder lands there); made if missing")
    parser.add_argument("--grace", type=float, default=30.0, help="seconds a run gets to stop after Ctrl-C")
    parser.add_argument("--status-every", type=float, default=60.0,
                        help="seconds between status lines that show each running run's last output line")
    parser.add_argument("--rerun-on-edit", action="store_true",
                        help="a run done before counts only if the files the command names (the script) are unchanged")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and whether they would be skipped")
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
    return args


def main(argv=None):
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
    total = len(runs)
    print(f"{total} runs ({len(args.env_ids)} envs x {len(args.seeds)} seeds), {len(skipped)} already done, "
          f"{args.workers} workers, OMP_NUM_THREADS={threads}; logs and state in {out}/", flush=True)
    for run in skipped:
        changed = ", ".join(sorted(run.state["files"])) or "a file it names"
        why = f"; {changed} changed since: --rerun-on-edit runs it again" if run in edited else ""
        print(f"  skip (done before{why}): {run.env_id} seed {run.seed}", flush=True)
    if args.dry_run:
        for run in pending:
            print(f"  would run: {shlex.join(run.argv)}")
        return 0
    for run in pending:  # asked for: report.py --sweep lists a run that never finishes as missing
        write_state(out, run, status="pending")

    t0 = time.time()
    running, finished, failed = [], [], []
    last_status = time.time()

    def progress(event):
        done = len(skipped) + len(finished)
        counts = f"{done}/{total} done | {len(running)} running | {len(failed)} failed"
        print(f"[{counts} | {hms(time.time() - t0)}] {event}", flush=True)

    def handle_signal(signum, frame):  # SIGTERM is treated like Ctrl-C
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handle_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        while pending or running:
            while pending and len(running) < args.workers:
                run = pending.pop(0)
                start(run, out, args.cwd, threads)
                running.append(run)
                progress(f"start {run.env_id} seed {run.seed} (log {out / run.stem}.log)")
            time.sleep(0.2)
            for run in list(running):
                if run.process is not None and run.process.poll() is None:
                    continue
                running.remove(run)
                run.log_file.close()
                run.returncode = run.process.returncode if run.process is not None else 127  # 127: not started
                wall = time.time() - run.started
                names = find_run_names(args.cwd, run)
                claimed = {name: (path.name, state.get("ended", 0)) for path, state in read_states(out).items()
                           if path.stem != run.stem and state.get("status") == "done"
                           for name in state.get("run_names", [])}
                # a folder recorded for another run is this run's too when that run was still going when this one
                # started, or when this run wrote into it (an older script that reuses a folder of the same second)
                taken = [name for name in names if name in claimed and (
                    claimed[name][1] >= run.started or last_write(Path(args.cwd) / "runs" / name) >= run.started)]
                names = [name for name in names if name not in claimed]
                ok = run.returncode == 0 and not taken
                error = "" if run.returncode == 0 else error_line(out / f"{run.stem}.log")
                if taken:  # never two runs for one folder: its scalars would mix both
                    error = (f"its run folder runs/{taken[0]} is recorded for another run ({claimed[taken[0]][0]}): "
                             f"two runs wrote into one folder; run it again")
                write_state(out, run, status="done" if ok else "failed", returncode=run.returncode, error=error,
                            started=run.started, ended=time.time(), wall_s=round(wall, 1), run_names=names,
                            args={name: read_args_json(args.cwd, name) for name in names})
                (finished if ok else failed).append(run)
                why = f"exit {run.returncode}" if run.returncode else "run folder taken"
                progress(f"{'done' if ok else f'FAILED ({why})'} {run.env_id} seed {run.seed} in {wall:.0f} s")
            if running and time.time() - last_status >= args.status_every:
                last_status = time.time()
                for run in running:
                    progress(f"running {run.env_id} seed {run.seed} ({time.time() - run.started:.0f} s): "
                             f"{last_line(out / f'{run.stem}.log')[:120]}")
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # until stop_all takes a second one as "kill now"
        print(f"\ninterrupted: stopping {len(running)} running run(s) (Ctrl-C again: kill them now); start the "
              f"same command again to continue", file=sys.stderr, flush=True)
        stop_all(running, args.grace)
        for run in running:
            write_state(out, run, status="interrupted", started=run.started)
        return 130

    print(f"finished in {hms(time.time() - t0)}: {len(finished)} succeeded, {len(skipped)} skipped (done before), "
          f"{len(failed)} failed", flush=True)
    for run in failed:
        print(f"  FAILED {run.env_id} seed {run.seed}: exit {run.returncode}, log {out / run.stem}.log: "
              f"{run.state['error'][:200]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
