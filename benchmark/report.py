"""Summarize TensorBoard runs: a Markdown table per env with its arms side by side, comparisons, learning curves.

    python benchmark/report.py --runs runs                                   # print the tables
    python benchmark/report.py --runs runs --out benchmark/results/NAME      # write NAME.md and NAME/<env>.png
    python benchmark/report.py --runs runs --sweep benchmark/out/classic_control --out ...  # only a sweep's runs
    python benchmark/report.py --runs runs other/runs ...                    # the runs of both folders together

A run is what was run: its script and every resolved setting (from the run folder's args.json, else from the
hyperparameters text the scripts log), env id and seed. Runs with the same script and settings but the seed form an
arm; runs that differ in any setting are different arms (not counted as settings: --resume, and a flag that some runs
of the script do not record, added after they were made). An arm is labelled by its script and the settings in which
it differs from the other arms of that script (`ppo.py learning_rate=0.001`). Per run: the mean of its last --last
charts/episodic_return values (fewer when fewer exist: the table says so), its final charts/SPS (of a run stopped
and resumed, each part counting its own steps per second: the median of them all), and its training time. Per arm:
mean and std of these over seeds. A run that stopped before 95% of its total timesteps (and did not reach its
--target-return) is listed but left out of the table; when a seed of an arm was run twice, the newer run counts.
Once, under the table of every run at the end, the library versions the runs were made with (args.json's "versions":
python, torch, gymnasium, ...): one set, or "mixed" and each set with its runs; "not recorded" for runs older than
that key. They are no setting of an arm.

Comparisons, for each env with two or more arms: the difference of mean returns of each arm to a baseline arm (the
one with the reference settings, else the first), with a 95% confidence interval from a bootstrap over seeds; over
all envs, where two or more arms ran in every env (else the section is left out), the interquartile mean (IQM) of
min-max normalized returns and the probability of improvement, with stratified bootstrap confidence intervals as the
`rliable` package computes them (pip install rliable; without it, the rest of the report is written and says what is
missing).
With --sweep, the report also lists every run the sweep asked for that failed (with its error line) or never
finished, marks an arm with fewer seeds than the sweep asked for ("2 of 3"), and gives per run its command and the
machine it ran on as run.py recorded it: CPU model, cores, threads, the 1-minute load average while it ran.
With --thresholds R1 R2 ..., per run the agent step and the training time at which the mean of its last --last
episodic returns first reached each, its median charts/SPS, and a plot of every run's return against agent steps and
against training time; a run stopped before its budget and its target is shown there too, marked unfinished, so that
a long run's part done can be reported. With --window-steps N, per run the mean return of the episodes that ended in
each window of N agent steps.
With --published-curves CSV (benchmark/train_procgen.csv: train-procgen's runs), a first section: per game of the
CSV and step of --at, each of our runs' mean of its last --last episodic returns logged at or before the step (--last
100: baselines ppo2's eprewmean, the mean over its deque of the last 100 episodes) beside each published run's value
there, a run not that far yet or a game not run yet saying so; per run of ours its steps so far, speed and machine;
per game we ran, a plot of ours and theirs to the last --at step.

Training time: the wall-clock while the run's processes ran, with the pauses between them left out. Each process of
a run writes its own events file (a run stopped and continued with --resume has one per part, in one folder); a
process's time is the span from the first to the last scalar it logged, and the training time at a moment is the time
of those spans (their union) before it. What a process did before its first scalar (start-up, its first iteration:
seconds) is not counted.
The reference figures are read from benchmark/reference.csv (shared/reference-results.md, machine-readable); they
are shown for the arm whose settings are the script's defaults (the step count may differ: `@` marks it).
"""

import ast
import csv
import json
import math
import re
import shlex
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
from common import Parser, safe

HERE = Path(__file__).resolve().parent
# points of the common step grid the seeds' learning curves are interpolated onto
CURVE_POINTS = 200
# scripts whose charts/episodic_return holds only some of a run's games (only rank 0 logs): their plot lines and
# threshold rows say so
SOME_GAMES = {"ppo_atari_multigpu.py": "rank 0's games only"}


def find_runs(root):
    """The run folders under root: every folder holding a TensorBoard event file, as (path, name relative to root).
    Nested names happen when the env id has a slash: runs/ALE/Pong-v5__ppo__1__1700000000."""
    folders = sorted({p.parent for p in Path(root).rglob("events.out.tfevents.*")})
    return [(p, p.relative_to(root).as_posix()) for p in folders]


def read_run(path, name):
    """One run folder -> dict with its identity (script, settings, env id, seed) and scalars {tag: (steps, values,
    wall_times)} as numpy arrays. The settings come from args.json (written by the scripts at start), else from the
    hyperparameters text they log; all values as text, as they were logged."""
    scalars, texts, spans = read_events(path)
    params = {}
    try:
        params = json.loads((Path(path) / "args.json").read_text())
        versions = params.pop("versions", None)
        params = {key: str(value) for key, value in params.items()}
    except (OSError, ValueError, AttributeError):
        # the scripts log their arguments as a Markdown table "|key|value|"
        for tag, text in texts.items():
            if tag.startswith("hyperparameters"):
                rows = re.findall(r"^\|([^|]+)\|([^|]*)\|$", text, flags=re.M)
                params = {key: value for key, value in rows if (key, value) not in (("param", "value"), ("-", "-"))}
        # there as text: "{'python': '3.11.7', 'torch': ...}"
        versions = params.pop("versions", None)
    parts = name.split("__")
    stamp = parts[-1].split("-")[0]  # a second run in the same second: 1700000000-2
    name_ok = len(parts) >= 4 and stamp.isdigit()
    steps = [s for s, _, _ in scalars.values()]
    last_step = max((s.max() for s in steps if len(s)), default=0)
    walls = np.concatenate([w for _, _, w in scalars.values()]) if scalars else np.array([])

    def param(key, from_name, cast):
        try:
            return cast(params[key])
        except (KeyError, ValueError):
            return from_name

    run = {
        "path": path,
        "name": name,
        "env_id": param("env_id", parts[0] if name_ok else "?", str),
        "exp_name": param("exp_name", "__".join(parts[1:-2]) if name_ok else name, str),
        "seed": param("seed", int(parts[-2]) if name_ok and parts[-2].isdigit() else -1, int),
        "started": int(stamp) if name_ok else (walls.min() if len(walls) else 0),
        "total_timesteps": param("total_timesteps", int(last_step), int),
        "last_step": int(last_step),
        "scalars": scalars,
        "wall_start": float(walls.min()) if len(walls) else math.nan,
        "wall_end": float(walls.max()) if len(walls) else math.nan,
        "spans": spans,  # per process (events file): the first and last wall time of its scalars
        # --target-return
        "target_reached": any(tag.startswith("target_reached") for tag in texts),
        "versions": library_versions(versions),
    }
    # runs without args.json: exp_name is the script's
    run["script"] = params.pop("script", f"{run['exp_name']}.py")
    # the settings that make the arm: all but the seed (the env id, which the table shows by itself, and the checkpoint
    # that the run's last part continued from)
    run["settings"] = {k: v for k, v in params.items() if k not in ("seed", "env_id", "resume")}
    run["settings"].setdefault("exp_name", run["exp_name"])
    run["settings"].setdefault("total_timesteps", str(run["total_timesteps"]))
    return run


def read_events(path):
    """A run folder's events files, read once, as TensorBoard shows them: the scalars {tag: (steps, values,
    wall_times)} as numpy arrays, the first text logged under each text tag {tag: text}, and the spans [(first, last)]:
    the wall times of the first and the last scalar of each events file. Each process of a run writes its own events
    file (a run stopped and continued with --resume has one per part), read in name order as TensorBoard does; a
    process that continued from a checkpoint wrote a restart mark at its first step, and the scalars that the earlier
    parts logged from that step on are dropped, as TensorBoard drops them: the steps after their last checkpoint, run
    again. A record cut short (a process killed while writing) or unreadable (a damaged file) ends its file, as in
    TensorBoard."""
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog

    points = {}
    texts = {}
    spans = []
    for file in sorted(Path(path).glob("events.out.tfevents.*")):
        data = file.read_bytes()
        times = []
        start = 0
        # a TFRecord: the record's length (8 bytes), a checksum of it (4), the record, a checksum of it (4). The
        # checksums are not checked: TensorBoard without TensorFlow checks them in pure Python, which is slow.
        while start + 12 <= len(data):
            length = int.from_bytes(data[start : start + 8], "little")
            record = data[start + 12 : start + 12 + length]
            if len(record) < length:
                break
            start += 16 + length
            try:
                event = Event.FromString(record)
            except DecodeError:
                break
            if event.session_log.status == SessionLog.START:
                for tag, logged in points.items():
                    points[tag] = [point for point in logged if point[0] < event.step]
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    points.setdefault(value.tag, []).append((event.step, value.simple_value, event.wall_time))
                    times.append(event.wall_time)
                elif value.metadata.plugin_data.plugin_name == "text":
                    texts.setdefault(value.tag, value.tensor.string_val[0].decode())
        if times:
            spans.append((min(times), max(times)))
    scalars = {tag: tuple(np.array(x, dtype=float) for x in zip(*logged)) for tag, logged in points.items() if logged}
    return scalars, texts, spans


def training_clock(spans, times):
    """The training time at each of these wall times: the seconds of the spans of the run's processes before it
    (the union of the spans: the pauses between them are left out, an overlap counts once). NaN without spans."""
    merged = []
    for first, last in sorted(spans):
        if merged and first <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    times = np.asarray(times, dtype=float)
    if not merged:
        return np.full(times.shape, math.nan)
    firsts, lasts = np.array(merged).T
    return np.clip(times[..., None] - firsts, 0, lasts - firsts).sum(axis=-1)


def library_versions(value):
    """{library: version} of a run, from the "versions" the scripts record ({"python": "3.11.7", "torch": ...}; as its
    text in the hyperparameters table); None where it is not recorded (runs older than it) or not readable."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return None
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) and value else None


def libraries(runs):
    """The lines under the table of runs that name the library versions the runs were made with: one set; or, where
    they differ, "mixed" and each set with its runs; "not recorded" for runs without them (older runs). [] for no
    runs."""
    sets = {}
    for run in sorted(runs, key=lambda r: r["name"]):
        versions = run["versions"]
        sets.setdefault(versions and tuple(sorted(versions.items())), (versions, []))[1].append(run["name"])
    named = [
        (", ".join(f"{k} {v}" for k, v in versions.items()) if versions else "not recorded", names)
        for versions, names in sorted(sets.values(), key=lambda x: (x[0] is None, -len(x[1])))
    ]
    if len(named) < 2:
        return ["", f"Libraries: {named[0][0]}."] if named else []
    return [
        "",
        f"Libraries: mixed, {len(named)} sets: "
        + "; ".join(
            f"{text} ({len(names)} run{'s' * (len(names) > 1)}: {', '.join(f'`{name}`' for name in names)})"
            for text, names in named
        )
        + ".",
    ]


def summarize_run(run, last):
    """The per-run numbers of the table: episodes, mean return of the last `last` episodes (`averaged`: how many
    there were), final SPS (of a run in parts: the median) and median SPS, training time (`wall`), whether it is
    complete (95% of its budget, or its --target-return reached)."""
    returns = run["scalars"].get("charts/episodic_return", (np.array([]),) * 3)[1]
    sps = run["scalars"].get("charts/SPS", (np.array([]),) * 3)[1]
    return {
        "episodes": len(returns),
        "averaged": min(last, len(returns)),
        "return": float(np.mean(returns[-last:])) if len(returns) else math.nan,
        # each process logs the SPS of its own steps: the last value is the whole run's only if it ran in one part
        "sps": float(sps[-1] if len(run["spans"]) < 2 else np.median(sps)) if len(sps) else math.nan,
        "sps_median": float(np.median(sps)) if len(sps) else math.nan,
        "wall": float(training_clock(run["spans"], math.inf)),
        "complete": run["last_step"] >= 0.95 * run["total_timesteps"] or run["target_reached"],
    }


def read_sweep(folders):
    """The state files that benchmark/run.py wrote in these --out folders: one per run asked for (its command words,
    env id and seed), the done one first when there are several; its "attempts" are all of them (a run started again
    from 0 on a machine without its checkpoint is one more, with a run folder of its own). A file that is not a state
    file is skipped with a one-line warning."""
    best, attempts = {}, {}
    rank = {"done": 0, "failed": 1, "interrupted": 2, "running": 3, "pending": 4}
    for folder in folders:
        for path in sorted(Path(folder).glob("*.json")):
            try:
                state = json.loads(path.read_text())
                words = state.get("words") or shlex.split(state["command"])
                ident = (tuple(words), state["env_id"], int(state["seed"]))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
                print(
                    f"report.py: warning: skip {path}: not a state file of benchmark/run.py "
                    f"({type(e).__name__}: {str(e)[:80]})",
                    file=sys.stderr,
                )
                continue
            state["file"] = path
            attempts.setdefault(ident, []).append(state)
            old = best.get(ident)
            if old is None or (
                (rank.get(state.get("status"), 9), -state.get("ended", 0))
                < (rank.get(old.get("status"), 9), -old.get("ended", 0))
            ):
                best[ident] = state
    for ident, state in best.items():
        state["attempts"] = attempts[ident]
    return best


def recorded_runs(sweep):
    """{run folder: the state of the attempt that recorded it} over every attempt of the sweep's runs."""
    return {
        name: attempt
        for state in sweep.values()
        for attempt in state["attempts"]
        for name in attempt.get("run_names", [])
    }


def arm_key(run):
    return run["script"], tuple(sorted(run["settings"].items()))


def drop_unrecorded_settings(runs):
    """Per script, leaves out of every run's settings those that some of its runs do not record: a flag added to the
    script after those runs were made, which cannot tell their arms apart."""
    for script in {run["script"] for run in runs}:
        some = [run["settings"] for run in runs if run["script"] == script]
        for key in set().union(*some) - set.intersection(*map(set, some)):
            for settings in some:
                settings.pop(key, None)


def group_runs(runs):
    """{(env_id, arm key): [runs, one per seed, the newest]}, the envs sorted; also returns the runs left out
    (superseded by a newer run of the same seed and settings, or incomplete)."""
    groups, left_out = {}, []
    for run in sorted(runs, key=lambda r: (r["env_id"], arm_key(r), r["seed"], r["started"])):
        if not run["summary"]["complete"]:
            left_out.append((run, "incomplete"))
            continue
        by_seed = groups.setdefault((run["env_id"], arm_key(run)), {})
        if run["seed"] in by_seed:
            left_out.append((by_seed[run["seed"]], "superseded by a newer run of the same seed and settings"))
        by_seed[run["seed"]] = run
    return {key: sorted(by_seed.values(), key=lambda r: r["seed"]) for key, by_seed in groups.items()}, left_out


def arm_labels(keys):
    """{arm key: label}: the script, then the settings in which the arm differs from the other arms of that script
    (over all envs; total_timesteps only where it differs within an env, the steps column shows it otherwise)."""
    by_script = {}
    for env_id, (script, settings) in keys:
        by_script.setdefault(script, []).append((env_id, dict(settings)))
    labels = {}
    for script, arms in by_script.items():
        names = sorted({k for _, settings in arms for k in settings})
        differ = [k for k in names if len({settings.get(k) for _, settings in arms}) > 1]
        steps_in_env = {}
        for env_id, settings in arms:
            steps_in_env.setdefault(env_id, set()).add(settings.get("total_timesteps"))
        if all(len(v) == 1 for v in steps_in_env.values()) and "total_timesteps" in differ:
            differ.remove("total_timesteps")
        for env_id, settings in arms:
            key = (script, tuple(sorted(settings.items())))
            labels[key] = " ".join([script] + [f"{k}={settings.get(k, '—')}" for k in differ])
    return labels


def script_defaults(script):
    """{field: default} of a repo script's Args, read from its source (literal defaults only); {} when unknown."""
    try:
        tree = ast.parse((HERE.parent / Path(script).name).read_text())
    except (OSError, SyntaxError, ValueError):
        return {}
    defaults = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Args":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name) and item.value is not None:
                    try:
                        defaults[item.target.id] = ast.literal_eval(item.value)
                    except ValueError:
                        pass
    return defaults


def same_value(a, b):
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def reference_arms(keys, labels):
    """The arm keys that get the reference figures: an arm alone of its script in its env, else those whose label
    settings (all but total_timesteps) are the script's defaults."""
    chosen = set()
    for env_id, arm in keys:
        script, settings = arm
        rivals = [k for k in keys if k[0] == env_id and k[1][0] == script]
        if len(rivals) == 1:
            chosen.add((env_id, arm))
            continue
        defaults, settings = script_defaults(script), dict(settings)
        shown = [part.split("=", 1)[0] for part in labels[arm].split(" ")[1:]]
        if defaults and all(
            k == "total_timesteps" or (k in defaults and same_value(settings.get(k), defaults[k])) for k in shown
        ):
            chosen.add((env_id, arm))
    return chosen


def mean_std(values, ddof):
    """Mean and std over seeds, ignoring NaN; std is NaN (shown as no std) for a single seed."""
    values = np.array([v for v in values if not math.isnan(v)], dtype=float)
    if len(values) == 0:
        return math.nan, math.nan
    std = float(np.std(values, ddof=ddof)) if len(values) > 1 else math.nan
    return float(np.mean(values)), std


def read_reference(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def env_matches(ref_env, env_id):
    """A reference env with a version (Breakout-v5) must match exactly; one without (Hopper) matches any version."""
    return ref_env == env_id or ("-v" not in ref_env and re.sub(r"-v\d+$", "", env_id.split("/")[-1]) == ref_env)


def reference_cell(rows, script, env_id, steps, source):
    """The reference figure of one source for this group, e.g. '492.40 ± 13.05', with '@10M' when the reference was
    measured at another step count; '' when there is none."""
    rows = [r for r in rows if r["script"] == script and r["source"] == source and env_matches(r["env"], env_id)]
    rows.sort(key=lambda r: int(r["steps"]) != steps)  # the same budget first
    if not rows:
        return ""
    r = rows[0]
    if source == "here":
        cell = ", ".join(
            x
            for x in (r["return_mean"], r["sps"] and f"{r['sps']} SPS", r["wall_s"] and fmt_wall(float(r["wall_s"])))
            if x
        )
    else:
        cell = r["return_mean"] + (f" ± {r['return_std']}" if r["return_std"] else "")
    if int(r["steps"]) != steps:
        cell += f" @{fmt_steps(int(r['steps']))}"
    return cell


def fmt_steps(n):
    for unit, size in (("M", 10**6), ("k", 10**3)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def fmt_wall(seconds):
    if math.isnan(seconds):
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def fmt_num(x, digits=2):
    return "—" if math.isnan(x) else f"{x:.{digits}f}"


def fmt_mean_std(mean, std, digits=2):
    if math.isnan(mean):
        return "—"
    return fmt_num(mean, digits) + ("" if math.isnan(std) else f" ± {fmt_num(std, digits)}")


def learning_curve(run, last):
    """(steps, return averaged over the last `last` episodes up to each episode's end) for one run."""
    steps, returns, _ = run["scalars"].get("charts/episodic_return", (np.array([]),) * 3)
    cumsum = np.concatenate([[0.0], np.cumsum(returns)])
    idx = np.arange(1, len(returns) + 1)
    lo = np.maximum(idx - last, 0)
    return steps, (cumsum[idx] - cumsum[lo]) / (idx - lo)


def episode_times(run):
    """The training time at each episode's end (charts/episodic_return), for one run."""
    return training_clock(run["spans"], run["scalars"].get("charts/episodic_return", (np.array([]),) * 3)[2])


def first_reaching(run, last, thresholds):
    """Per threshold, (agent step, training time) of the first episode at whose end the mean of the last `last`
    episodic returns (a full window of them) reaches it; None where it never does."""
    steps, curve = learning_curve(run, last)
    times = episode_times(run)
    full = np.arange(1, len(curve) + 1) >= last
    hits = [np.flatnonzero(full & (curve >= threshold)) for threshold in thresholds]
    return [(int(steps[hit[0]]), float(times[hit[0]])) if len(hit) else None for hit in hits]


def bootstrap_diff_ci(a, b, reps, seed=0, level=0.95):
    """mean(b) - mean(a) and its percentile bootstrap CI: each arm's per-seed values resampled with replacement,
    independently, reps times (numpy's default_rng(seed): the same report every time)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    rng = np.random.default_rng(seed)
    mean_a = a[rng.integers(0, len(a), size=(reps, len(a)))].mean(axis=1)
    mean_b = b[rng.integers(0, len(b), size=(reps, len(b)))].mean(axis=1)
    tail = 50 * (1 - level)
    lo, hi = np.percentile(mean_b - mean_a, [tail, 100 - tail])
    return float(b.mean() - a.mean()), float(lo), float(hi)


def aggregate(table, baseline, reps):
    """Over envs (the tasks) with rliable: IQM of min-max normalized returns per label and the probability that
    each label improves on the baseline, with stratified bootstrap 95% CIs. table: {env: {label: [returns by
    seed]}}. Returns (rows, note): rows [(label, iqm, (lo, hi), poi or None, (lo, hi) or None)], note: what was
    left out or why nothing was computed; ([], None) when there is nothing to compare (no two arms ran in every env)."""
    labels = sorted(set.intersection(*(set(arms) for arms in table.values())), key=lambda x: (x != baseline, x))
    if len(labels) < 2 or baseline not in labels:
        return [], None
    try:
        from rliable import library as rly
        from rliable import metrics
    except ImportError as e:
        return [], f"not computed: rliable cannot be imported ({e}); pip install rliable (the plot extra)"
    envs = sorted(table)
    seeds = min(len(table[env][label]) for env in envs for label in labels)
    note = ""
    if any(len(table[env][label]) > seeds for env in envs for label in labels):
        note = f"each arm's first {seeds} seeds in each env (rliable needs as many runs per arm and env)"
    scores = {}
    for label in labels:
        columns = []
        for env in envs:
            everything = np.concatenate([table[env][x][:seeds] for x in labels])
            lo, hi = everything.min(), everything.max()
            x = np.asarray(table[env][label][:seeds], dtype=float)
            columns.append((x - lo) / (hi - lo) if hi > lo else np.full(seeds, 0.5))
        scores[label] = np.stack(columns, axis=1)  # (runs, tasks)
    random_state = np.random.RandomState(0)  # rliable's interface: the same report every time
    pairs = {label: (scores[label], scores[baseline]) for label in labels[1:]}
    # arch's notice that random_state will go; rliable 1.2 still passes it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        iqm, iqm_ci = rly.get_interval_estimates(
            scores, lambda x: np.array([metrics.aggregate_iqm(x)]), reps=reps, random_state=random_state
        )
        poi, poi_ci = rly.get_interval_estimates(
            pairs, metrics.probability_of_improvement, reps=reps, random_state=random_state
        )
    rows = []
    for label in labels:
        improve = (float(np.squeeze(poi[label])), tuple(np.ravel(poi_ci[label]))) if label in poi else (None, None)
        rows.append((label, float(np.squeeze(iqm[label])), tuple(np.ravel(iqm_ci[label])), *improve))
    return rows, note


def plot_env(env_id, arms, path, last, ddof):
    """One PNG per env: for each arm (label, steps, runs), the mean over seeds of the smoothed return and a band of ± 1
    std, the seeds interpolated onto a common step grid (where all seeds have episodes)."""
    fig, ax = pyplot().subplots(figsize=(6, 4))
    drawn = 0
    for label, steps, runs in arms:
        curves = [learning_curve(run, last) for run in runs]
        curves = [(s, r) for s, r in curves if len(s)]
        if not curves:
            continue
        lo, hi = max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves)
        grid = np.linspace(lo, hi, CURVE_POINTS) if hi > lo else np.array([lo])
        ys = np.array([np.interp(grid, s, r) for s, r in curves])  # (seeds, points)
        mean = ys.mean(axis=0)
        name = f"{label} ({fmt_steps(steps)}, {len(curves)} seed{'s' * (len(curves) > 1)})"
        (line,) = ax.plot(grid, mean, label=textwrap.fill(name, 70))
        if len(curves) > 1:
            std = ys.std(axis=0, ddof=ddof)
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        drawn += 1
    return_axes(ax, env_id, last, "env steps")
    save_figure(fig, path, legend=bool(drawn))


def pyplot():
    """matplotlib.pyplot, drawing without a display (the Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def return_axes(ax, title, last, steps_label):
    """The axes of a learning curve: steps (500k, 1M) against the mean of the last `last` episodic returns."""
    import matplotlib.ticker

    ax.set_title(title)
    ax.set_xlabel(steps_label)
    ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))
    ax.set_ylabel(f"episodic return (mean of last {last} episodes)")
    ax.grid(alpha=0.3)


def save_figure(fig, path, legend):
    """Writes the figure as a PNG, with the legend of its first axes under them (a label can be long, an arm's
    differing settings, and must not cover the curves): the figure grows to hold it."""
    if legend:
        fig.axes[0].legend(fontsize="small", loc="upper left", bbox_to_anchor=(0, -0.16), frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    pyplot().close(fig)


def plot_runs(runs, labels, path, last, thresholds):
    """One PNG of every run's return (the mean of its last `last` episodes) against agent steps and against training
    time, side by side, the thresholds as dashed lines."""
    fig, (by_steps, by_time) = pyplot().subplots(1, 2, figsize=(11, 4), sharey=True)
    hours = max((r["summary"]["wall"] for r in runs if not math.isnan(r["summary"]["wall"])), default=0) > 7200
    for run in runs:
        steps, curve = learning_curve(run, last)
        times = episode_times(run) / (3600 if hours else 60)
        arm = labels.get(id(run), run["script"])
        label = f"{run['env_id']} seed {run['seed']}: {arm}{some_games(run)}{unfinished(run)}"
        (line,) = by_steps.plot(steps, curve, linewidth=1, label=label)
        by_time.plot(times, curve, linewidth=1, color=line.get_color())
    for ax in (by_steps, by_time):
        for threshold in thresholds:
            ax.axhline(threshold, color="gray", linestyle="--", linewidth=0.8)
    return_axes(by_steps, None, last, "agent steps")
    by_time.grid(alpha=0.3)
    by_time.set_xlabel(f"training time ({'h' if hours else 'min'}; pauses between resumes left out)")
    save_figure(fig, path, legend=bool(runs))


def fmt_hms(seconds):
    if math.isnan(seconds):
        return "—"
    seconds = round(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def unfinished(run):
    """' (unfinished, logged to step N)', N its last logged step, for a run stopped before its budget and its target."""
    return "" if run["summary"]["complete"] else f" (unfinished, logged to step {run['last_step']:,})"


def some_games(run):
    """' (rank 0's games only)' for a run whose returns come from some of its envs (SOME_GAMES), else ''."""
    return f" ({SOME_GAMES[run['script']]})" if run["script"] in SOME_GAMES else ""


def threshold_lines(runs, labels, args, image_link):
    """The section of --thresholds: per run the step and training time to each threshold, its training time, parts
    and median SPS; the plot of every run against steps and training time."""
    names = [f"{threshold:g}" for threshold in args.thresholds]
    lines = [
        "",
        "## Time to thresholds",
        "",
        f"Per run: the agent step (as logged with charts/episodic_return) and the training time at the end of the "
        f"first episode where the mean of its last {args.last} episodic returns reached {', '.join(names)} (— "
        f"where it never did). Training time: the wall-clock while the run's processes ran, each from the first "
        f"to the last scalar it logged (each process writes its own events file: a run stopped and continued with "
        f"--resume has one per part), the pauses between them left out; a process's start-up and first "
        f"iteration, before its first scalar, are not counted. Parts: its processes, and the pauses between them. "
        f"SPS: the median of its charts/SPS (each process's env steps per second since it started).",
        "",
        "| run | arm | seed | "
        + " | ".join(f"step to {n} | time to {n}" for n in names)
        + " | training time | parts (pauses) | SPS (median) |",
        "| --- " * (6 + 2 * len(names)) + "|",
    ]
    for run in runs:
        reached = first_reaching(run, args.last, args.thresholds)
        cells = [f"{hit[0]:,} | {fmt_hms(hit[1])}" if hit else "— | —" for hit in reached]
        spans = run["spans"]
        paused = (max(b for _, b in spans) - min(a for a, _ in spans) - run["summary"]["wall"]) if spans else math.nan
        lines.append(
            f"| {run['name']}{unfinished(run)} | {labels.get(id(run), run['script'])}{some_games(run)} "
            f"| {run['seed']} | "
            + " | ".join(cells)
            + f" | {fmt_hms(run['summary']['wall'])} | {len(spans)} ({fmt_hms(paused)}) "
            f"| {fmt_num(run['summary']['sps_median'], 0)} |"
        )
    if image_link:
        lines += ["", f"![return against agent steps and training time]({image_link})"]
    return lines


def window_lines(runs, labels, window):
    """The section of --window-steps: per run the mean return of the episodes that ended in each window of agent
    steps, and how many there were, so that runs of one env compare at the same steps."""
    count = max(run["last_step"] for run in runs) // window + 1
    names = [f"{fmt_steps(i * window)}-{fmt_steps((i + 1) * window)}" for i in range(count)]
    lines = [
        "",
        f"## Return per {fmt_steps(window)} agent steps",
        "",
        f"Per run: the mean return of the episodes that ended in each window of {window:,} agent steps (as logged "
        f"with charts/episodic_return), and how many (— where none did).",
        "",
        "| run | arm | seed | " + " | ".join(names) + " |",
        "| --- " * (3 + count) + "|",
    ]
    for run in runs:
        steps, returns, _ = run["scalars"].get("charts/episodic_return", (np.array([]),) * 3)
        games = [returns[(steps >= i * window) & (steps < (i + 1) * window)] for i in range(count)]
        lines.append(
            f"| {run['name']}{unfinished(run)} | {labels.get(id(run), run['script'])}{some_games(run)} "
            f"| {run['seed']} | " + " | ".join(f"{g.mean():.2f} ({len(g)})" if len(g) else "—" for g in games) + " |"
        )
    return lines


def read_published(path):
    """A CSV of published learning curves (benchmark/train_procgen.csv, made by benchmark/train_procgen.py): its
    '#' lines say where it came from, then columns game, step and one per run. Returns ({game: (steps, {run:
    values})}, the text of the '#' lines)."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    source = " ".join(line.lstrip("#").strip() for line in lines if line.startswith("#"))
    curves = {}
    for row in csv.DictReader(line for line in lines if not line.startswith("#")):
        steps, runs = curves.setdefault(row.pop("game"), ([], {}))
        steps.append(int(row.pop("step")))
        for name, value in row.items():
            runs.setdefault(name, []).append(float(value))
    return {
        game: (np.array(steps), {name: np.array(values) for name, values in runs.items()})
        for game, (steps, runs) in curves.items()
    }, source


def value_at(steps, values, step):
    """The value at the last of the (sorted) steps at or before `step`; NaN where none is."""
    i = np.searchsorted(steps, step, side="right") - 1
    return float(values[i]) if i >= 0 else math.nan


def published_runs(report, games):
    """{game: our runs of it, by seed}: per env and seed the newest run, complete or not."""
    newest = {}
    for run in sorted(report.shown + report.unfinished, key=lambda r: r["started"]):
        if run["env_id"] in games:
            newest[run["env_id"], run["seed"]] = run
    return {game: sorted((r for (e, _), r in newest.items() if e == game), key=lambda r: r["seed"]) for game in games}


def published_lines(ours, curves, source, image_links, args, by_name):
    """The section of --published-curves: per game and --at step, our runs' return beside each published run's; the
    figures; per run of ours, its steps so far, its speed and its machine."""
    ddof = 0 if args.std == "population" else 1
    names = list(next(iter(curves.values()))[1])
    lines = [
        "",
        "## Against the published curves",
        "",
        f"Ours: per run, the mean of its last {args.last} episodic returns logged at or before the step (all of its "
        f"episodes where fewer had ended, — where none had), as baselines ppo2's eprewmean is the mean over its "
        f"deque of the last 100 episodes; at a step the run has not reached: how far it is, and that mean there. "
        f"Published: `{args.published_curves}` ({source}), each run's value at its last row at or before the "
        f"step, and their mean ± std ({'population std, ddof=0' if ddof == 0 else 'sample std, ddof=1'}).",
        "",
        f"| env | steps | our seeds | ours | published: {' / '.join(names)} | published: mean ± std |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for game, (steps, published) in curves.items():
        runs = ours[game]
        curves_of_ours = [learning_curve(run, args.last) for run in runs]
        for step in args.at:
            cells = [
                fmt_num(value_at(*curve, step))
                if run["last_step"] >= step
                else f"—, at {run['last_step']:,} so far ({fmt_num(value_at(*curve, step))} there)"
                for run, curve in zip(runs, curves_of_ours)
            ]
            theirs = [value_at(steps, values, step) for values in published.values()]
            lines.append(
                f"| {game} | {fmt_steps(step)} | {','.join(str(r['seed']) for r in runs) or '—'} "
                f"| {' / '.join(cells) or '—, not run yet'} | {' / '.join(map(fmt_num, theirs))} "
                f"| {fmt_mean_std(*mean_std(theirs, ddof))} |"
            )
    if image_links:
        lines += [""] + [f"![{env_id}]({link})" for env_id, link in image_links]
    lines += [
        "",
        "Our runs: steps/s over the whole run is its steps so far over its training time (the wall-clock while its "
        "processes ran, pauses left out); charts/SPS is each process's own steps/s since it started. Machine: as "
        "benchmark/run.py recorded it in the run's state file (of its last part).",
        "",
        "| run | steps so far | training time | steps/s, whole run | charts/SPS: median (range) | machine |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in (run for runs in ours.values() for run in runs):
        sps = run["scalars"].get("charts/SPS", (np.array([]),) * 3)[1]
        wall = run["summary"]["wall"]
        speed = run["last_step"] / wall if wall > 0 else math.nan
        state = by_name.get(run["name"], {})
        machine = ", ".join(
            f"{state[key]}{unit}"
            for key, unit in (("cpu_model", ""), ("cores", " cores"), ("threads", " threads"))
            if state.get(key)
        )
        lines.append(
            f"| {run['name']} | {run['last_step']:,} | {fmt_hms(wall)} | {fmt_num(speed, 0)} "
            f"| {f'{np.median(sps):.0f} ({sps.min():.0f}–{sps.max():.0f})' if len(sps) else '—'} "
            f"| {machine or 'not recorded'} |"
        )
    return lines


def plot_published(env_id, runs, steps, published, name, path, last, at):
    """One PNG per game: our runs' return (the mean of the last `last` episodes) and each published run's, to the
    last of the `at` steps, which are marked."""
    fig, ax = pyplot().subplots(figsize=(6, 4))
    until = max(at)
    for step in at:
        ax.axvline(step, color="gray", linestyle=":", linewidth=0.8)
    for (run_name, values), style in zip(published.items(), ["-", "--", ":", "-."] * len(published)):
        keep = steps <= until
        ax.plot(steps[keep], values[keep], color="C1", linestyle=style, linewidth=1, label=f"{name} {run_name}")
    for i, run in enumerate(runs):
        run_steps, curve = learning_curve(run, last)
        keep = run_steps <= until
        label = f"{run['script']} seed {run['seed']}{unfinished(run)}"
        ax.plot(run_steps[keep], curve[keep], color=f"C{[0, 2, 3, 4][i % 4]}", linewidth=1.5, label=label)
    ax.set_xlim(0, until)
    return_axes(ax, env_id, last, "env steps")
    save_figure(fig, path, legend=True)


def machine_lines(runs, by_name):
    """The section of --sweep: per run its command, start and machine as benchmark/run.py recorded them."""
    lines = [
        "",
        "## Commands and machines",
        "",
        "Per run, from its state file of benchmark/run.py: the command (a part after a stop added `--resume` "
        "with its checkpoint), when it logged its first scalar, the machine's CPU model and cores, the threads "
        "the run had (OMP_NUM_THREADS), and the machine's 1-minute load average while it ran: mean and max of "
        "samples taken every --status-every seconds (60 by default) and at its end, over all its parts (a load "
        'near the core count: the machine was busy). "not recorded": a run made before run.py recorded it.',
        "",
        "| run | started (UTC) | command | CPU | cores | threads | load, 1 min: mean / max (samples) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        state = by_name.get(run["name"], {})
        command = "not recorded"
        if state.get("command"):
            command = f"{state['command']} --env-id {shlex.quote(run['env_id'])} --seed {run['seed']}"
        load = state.get("load_1min")
        load = f"{load['mean']:.2f} / {load['max']:.2f} ({load['samples']})" if load else "not recorded"
        started = "—"
        if not math.isnan(run["wall_start"]):
            started = time.strftime("%Y-%m-%d %H:%M", time.gmtime(run["wall_start"]))
        lines.append(
            f"| {run['name']} | {started} | `{command.replace('|', '/')}` "
            f"| {state.get('cpu_model') or 'not recorded'} | {state.get('cores') or 'not recorded'} "
            f"| {state.get('threads') or 'not recorded'} | {load} |"
        )
    return lines


class Report:
    """The groups of a report in the order shown, with their labels, reference arms and the sweep's records."""

    def __init__(self, groups, left_out, sweep, runs):
        labels = arm_labels(list(groups))
        refs = reference_arms(list(groups), labels)

        def order_key(key):  # by env; the reference arm first, at the script's default steps first
            env_id, (script, settings) = key
            steps = dict(settings)["total_timesteps"]
            off_default = not same_value(steps, script_defaults(script).get("total_timesteps"))
            return env_id, key not in refs, off_default, labels[key[1]], key[1]

        order = sorted(groups, key=order_key)
        self.groups = [(key, labels[key[1]], key in refs, groups[key]) for key in order]
        # the runs of the table, in its order
        self.shown = [run for *_, runs in self.groups for run in runs]
        # each run's arm
        self.labels = {id(run): label for _, label, _, runs in self.groups for run in runs}
        self.left_out = left_out
        self.sweep = sweep or {}
        self.by_name = recorded_runs(self.sweep)
        # runs stopped before their budget and target: --thresholds shows the part done
        self.unfinished = [run for run, why in left_out if why == "incomplete"]
        self.read = {run["name"]: run for run in runs}

    def asked(self, runs):
        """The seeds the sweep asked for with the commands of these runs (None without --sweep)."""
        states = [self.by_name[r["name"]] for r in runs if r["name"] in self.by_name]
        if not states:
            return None
        wanted = {(tuple(s.get("words") or shlex.split(s["command"])), s["env_id"]) for s in states}
        return sorted({seed for (words, env_id, seed) in self.sweep if (words, env_id) in wanted})

    def problems(self, shown=()):
        """[(state, what happened)] for each run of the sweep that is in no table: not among the arms' runs, nor an
        unfinished run of the names in shown (the published comparison's, which says how far each has got)."""
        out = []
        for state in self.sweep.values():
            status = state.get("status")
            if status not in ("failed", "done") and set(state.get("run_names", [])) & set(shown):
                continue
            if status == "failed":
                why = f"failed (exit {state.get('returncode')}): {state.get('error', '')}"
            elif status != "done":
                why = f"not finished ({status or 'no status'})"
                # a run parked on its way (a long run continued over sessions): how far it got
                logged = [self.read[name] for name in state.get("run_names", []) if name in self.read]
                if logged:
                    why += f", logged to step {logged[0]['last_step']:,} of {logged[0]['total_timesteps']:,}"
            elif not state.get("run_names"):
                why = "done, but no run folder of it was found"
            elif not any(name in self.read for name in state["run_names"]):
                why = f"its run folder {state['run_names'][0]} is not under --runs (or has no scalars)"
            else:
                continue
            out.append((state, why))
        return sorted(out, key=lambda x: (x[0]["env_id"], x[0].get("command", ""), x[0]["seed"]))


def fmt_ci(x, lo, hi):
    return f"{x:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def render(report, ref_rows, args, image_links, runs_link=None, published=None):
    std_name = "population std, ddof=0" if args.std == "population" else "sample std, ddof=1"
    ddof = 0 if args.std == "population" else 1
    all_runs = report.shown
    lines = [f"# {args.title}"]
    # what the report is made of: the notes, then the runs read
    about = [f"{note}  " for note in args.note]
    read = all_runs + [run for run, _ in report.left_out]  # every run of the Runs table at the end
    # the runs of the published comparison (unfinished ones included: it says how far each has got)
    in_published = [run["name"] for runs in published[0].values() for run in runs] if published else []
    if read:
        first = min(r["wall_start"] for r in read)
        final = max(r["wall_end"] for r in read)
        when = lambda t: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))  # noqa: E731
        left_out = [run for run, _ in report.left_out if run["name"] not in in_published]
        left = f" ({len(left_out)} of them left out of the tables, see Runs)" if left_out else ""
        roots = ", ".join(f"`{root}`" for root in args.runs)
        about.append(f"Runs: {len(read)} from {roots}{left}, logged {when(first)} to {when(final)}.  ")
    if published:  # --published-curves: that section opens the report, then the notes, then the arms (once finished)
        lines += published_lines(*published, args, report.by_name)
        lines += ["", "## Notes", ""] + about
        lines += ["", "## Arms", ""] if report.groups else []
    else:
        lines += [""] + about
    # the table of arms, after a line on what its columns hold
    arms = [
        f"Return: per run, the mean of its last {args.last} episodic returns (fewer where fewer exist: the cell says "
        f"how many); mean ± std over seeds ({std_name}). "
        "SPS: charts/SPS at the end of a run (env steps per second over the whole run; of a run stopped and resumed, "
        "the median of its charts/SPS), mean over seeds. "
        "Wall: training time, first to last logged scalar (of each process of a run stopped and resumed, the pauses "
        "left out), mean over seeds. An arm is a script with its settings: its label names "
        "the settings in which it differs from the other arms of that script. Reference figures from "
        "`benchmark/reference.csv`, for the arm with the script's default settings (`@` marks another step count); "
        '"CleanRL here" is CleanRL measured on this machine kind. Seeds "2 of 3": the sweep asked for 3.',
        "",
        f"| env | arm | steps | seeds | return, last {args.last} ep. (mean ± {std_name}) | SPS | wall "
        "| published (CleanRL docs) | baselines ppo2 (blog) | CleanRL here |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (env_id, (script, settings)), label, is_ref, runs in report.groups:
        steps = int(dict(settings)["total_timesteps"])
        ret = mean_std([r["summary"]["return"] for r in runs], ddof)
        sps = mean_std([r["summary"]["sps"] for r in runs], ddof)[0]
        wall = mean_std([r["summary"]["wall"] for r in runs], ddof)[0]
        seeds = [r["seed"] for r in runs]
        asked = report.asked(runs)
        count = f"{len(runs)} of {len(asked)}" if asked and len(asked) > len(runs) else str(len(runs))
        averaged = sorted({r["summary"]["averaged"] for r in runs})
        fewer = ""
        if averaged[0] < args.last:
            fewer = f" (last {averaged[0]}{'' if len(averaged) == 1 else f'–{averaged[-1]}'} ep.)"
        refs = [
            (reference_cell(ref_rows, script, env_id, steps, source) if is_ref else "") or "—"
            for source in ("published", "baselines", "here")
        ]
        # --target-return
        stopped = [f"seed {r['seed']} at {r['last_step']:,}" for r in runs if r["target_reached"]]
        cell = fmt_steps(steps) + (f", stopped at the target: {'; '.join(stopped)}" if stopped else "")
        arms.append(
            f"| {env_id} | {label} | {cell} | {count} ({','.join(map(str, seeds))}) "
            f"| {fmt_mean_std(*ret)}{fewer} | {fmt_num(sps, 0)} | {fmt_wall(wall)} | " + " | ".join(refs) + " |"
        )
    if not report.groups:
        arms.append("| (no complete run) | | | | | | | | | |")
    if report.groups or not published:
        lines += arms

    envs = {}
    for (env_id, _), label, is_ref, runs in report.groups:
        envs.setdefault(env_id, []).append((label, is_ref, runs))
    compared = {env_id: arms for env_id, arms in envs.items() if len(arms) > 1}
    if compared:
        lines += [
            "",
            "## Comparisons",
            "",
            f"Per env, each arm against the first one listed (the arm with the reference settings where there "
            f"is one): the difference of mean returns (arm minus first) and its 95% confidence interval, a "
            f"percentile bootstrap over seeds (each arm's per-run returns resampled with replacement, "
            f"{args.reps} times, seed 0). A CI that includes 0: this sweep cannot tell the two arms apart. With "
            f"few seeds the bootstrap is too narrow (it sees only the seeds there are: with 3 seeds, at most 10 "
            f"distinct resamples per arm, and a spread about 0.8 of the seeds'), so a CI that excludes 0 with "
            f"fewer than 5 seeds per arm is a hint to run more seeds, not a result.",
        ]
        for env_id, arms in compared.items():
            base_label, _, base_runs = arms[0]
            base = [r["summary"]["return"] for r in base_runs]
            lines += [
                "",
                f"### {env_id}",
                "",
                f"| arm | seeds | return (mean ± {std_name}) | difference to `{base_label}` [95% CI] | says |",
                "| --- | --- | --- | --- | --- |",
                f"| {base_label} | {len(base)} | {fmt_mean_std(*mean_std(base, ddof))} | (first arm) | |",
            ]
            for label, _, runs in arms[1:]:
                values = [r["summary"]["return"] for r in runs]
                diff, lo, hi = bootstrap_diff_ci(base, values, args.reps)
                few = min(len(base), len(values)) < 5
                if min(len(base), len(values)) < 2:
                    says = "cannot tell: one seed"
                elif lo <= 0 <= hi:
                    says = "cannot tell: the CI includes 0"
                    if few:
                        says += f" ({min(len(base), len(values))} seeds are too few)"
                else:
                    says = f"{'higher' if diff > 0 else 'lower'}{': a hint only, too few seeds' if few else ''}"
                lines.append(
                    f"| {label} | {len(values)} | {fmt_mean_std(*mean_std(values, ddof))} "
                    f"| {fmt_ci(diff, lo, hi)} | {says} |"
                )
        table, firsts = {}, {}
        for env_id, arms in envs.items():
            table[env_id] = {label: [r["summary"]["return"] for r in runs] for label, _, runs in arms}
            firsts[arms[0][0]] = firsts.get(arms[0][0], 0) + 1
        baseline = max(firsts, key=firsts.get)
        rows, note = aggregate(table, baseline, args.rliable_reps)
        if rows:
            lines += ["", "## Over all envs (rliable)", ""]
            lines += [
                f"Interquartile mean (IQM) of the returns min-max normalized per env (over the runs compared: 0 "
                f"= the worst run, 1 = the best) and the probability that an arm's run beats a run of "
                f"`{baseline}` in the same env (averaged over {len(table)} env(s)), with 95% stratified bootstrap "
                f"CIs ({args.rliable_reps} resamples, rliable). A probability whose CI includes 0.5: cannot tell"
                f"{'; ' + note if note else ''}.",
                "",
                f"| arm | IQM [95% CI] | P(improves on `{baseline}`) [95% CI] |",
                "| --- | --- | --- |",
            ]
            for label, iqm, (lo, hi), poi, poi_ci in rows:
                p_cell = "—" if poi is None else f"{poi:.2f} [{poi_ci[0]:.2f}, {poi_ci[1]:.2f}]"
                lines.append(f"| {label} | {iqm:.2f} [{lo:.2f}, {hi:.2f}] | {p_cell} |")
        elif note:  # arms to compare, but rliable is missing: say so
            lines += ["", "## Over all envs (rliable)", ""]
            lines.append(f"IQM and probability of improvement: {note}.")

    problems = report.problems(shown=in_published)
    if problems:
        lines += [
            "",
            "## Failed and missing runs",
            "",
            f"Runs the sweep asked for that are not in the table ({len(problems)}); run the sweep again to run "
            f"them (benchmark/run.py runs only what is not done).",
            "",
            "| env | seed | command | what happened | log |",
            "| --- | --- | --- | --- | --- |",
        ]
        for state, why in problems:
            log = Path(state["file"]).with_suffix(".log")
            lines.append(
                f"| {state['env_id']} | {state['seed']} | `{state.get('command', '')}` "
                f"| {why.replace('|', '/')} | {log} |"
            )
    if image_links:
        lines += [
            "",
            "## Learning curves",
            "",
            f"Mean over seeds of the return averaged over the last {args.last} episodes, the seeds interpolated "
            f"onto a common grid of env steps; the band is ± 1 std over seeds ({std_name}).",
            "",
        ]
        lines += [f"![{env_id}]({link})" for env_id, link in image_links]
    labels = report.labels
    if args.thresholds:
        lines += threshold_lines(all_runs + report.unfinished, labels, args, runs_link)
    if args.window_steps and all_runs + report.unfinished:
        lines += window_lines(all_runs + report.unfinished, labels, args.window_steps)
    lines += [
        "",
        "## Runs",
        "",
        "| run | arm | seed | episodes | return, last N ep. | N | SPS | wall | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run, note in [
        (r, f"target reached at step {r['last_step']:,}" if r["target_reached"] else "") for r in all_runs
    ] + report.left_out:
        s = run["summary"]
        label = labels.get(id(run), run["script"])
        lines.append(
            f"| {run['name']} | {label} | {run['seed']} | {s['episodes']} | {fmt_num(s['return'])} "
            f"| {s['averaged']} | {fmt_num(s['sps'], 0)} | {fmt_wall(s['wall'])} | {note} |"
        )
    lines += libraries(all_runs + [run for run, _ in report.left_out])
    if report.sweep:
        lines += machine_lines(all_runs + [run for run, _ in report.left_out], report.by_name)
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["runs"],
        help="folders of TensorBoard run folders; several: their runs in one report (as a sweep's and a long run's)",
    )
    parser.add_argument(
        "--out", default=None, help="write OUT.md and the plots OUT/<env>.png (default: print the table only)"
    )
    parser.add_argument("--last", type=int, default=20, help="episodes at the end of a run that its return averages")
    parser.add_argument(
        "--std",
        choices=["population", "sample"],
        default="population",
        help="the std over seeds: population (ddof=0, numpy's default) or sample (ddof=1)",
    )
    parser.add_argument("--include", default=None, help="only runs whose folder name matches this regex")
    parser.add_argument(
        "--sweep",
        nargs="+",
        default=None,
        help="only the runs that benchmark/run.py recorded in these --out folders; lists the failed and missing ones",
    )
    parser.add_argument("--reference", default=None, help="CSV of reference figures (default: benchmark/reference.csv)")
    parser.add_argument(
        "--reps", type=int, default=10000, help="bootstrap resamples of the CI of a difference of means (numpy: fast)"
    )
    parser.add_argument(
        "--rliable-reps",
        type=int,
        default=2000,
        help="bootstrap resamples of the IQM and probability of improvement CIs (rliable: slower)",
    )
    parser.add_argument("--title", default=None, help="heading of the report (default: the name of --out)")
    parser.add_argument(
        "--note",
        action="append",
        default=[],
        help="a line under the heading, e.g. the command that made the runs (repeatable)",
    )
    parser.add_argument(
        "--thresholds",
        nargs="+",
        type=float,
        default=None,
        metavar="RETURN",
        help="per run, the agent step and training time at which the mean of its last --last "
        "episodic returns first reached each (e.g. --thresholds 18 20), its median SPS, and a "
        "plot of every run against steps and training time (OUT/runs.png)",
    )
    parser.add_argument(
        "--window-steps",
        type=int,
        default=None,
        metavar="STEPS",
        help="per run, the mean return of the episodes that ended in each window of this many agent "
        "steps (e.g. 1000000), to compare runs at the same steps",
    )
    parser.add_argument(
        "--published-curves",
        default=None,
        metavar="CSV",
        help="published learning curves (columns game, step, one per run; '#' lines: where they came from; e.g. "
        "benchmark/train_procgen.csv): a first section with each game's return at the --at steps, ours beside each "
        "published run's, our runs' speed and machine, and per game we ran a plot of both (OUT/<game>_published.png)",
    )
    parser.add_argument(
        "--at",
        nargs="+",
        type=int,
        default=[1_000_000, 2_000_000, 5_000_000],
        metavar="STEPS",
        help="the steps of --published-curves' table; its plots end at the last",
    )
    args = parser.parse_args(argv)
    if min(args.at) < 1:
        parser.error(f"--at must be positive step counts, got {' '.join(map(str, args.at))}")
    if args.published_curves is not None and not Path(args.published_curves).is_file():
        parser.error(f"--published-curves {args.published_curves}: no such file")
    if args.window_steps is not None and args.window_steps < 1:
        parser.error(f"--window-steps must be positive, got {args.window_steps}")
    if args.thresholds and not all(map(math.isfinite, args.thresholds)):
        parser.error(f"--thresholds must be finite numbers, got {' '.join(map(str, args.thresholds))}")
    if args.last < 1:
        parser.error(f"--last must be positive, got {args.last}")
    if min(args.reps, args.rliable_reps) < 100:
        parser.error(f"--reps and --rliable-reps must be at least 100, got {args.reps} and {args.rliable_reps}")
    for root in args.runs:
        if not Path(root).is_dir():
            parser.error(f"--runs {root}: no such folder")
    if args.reference is not None and not Path(args.reference).is_file():
        parser.error(f"--reference {args.reference}: no such file")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as e:
            parser.error(f"--include {args.include!r}: not a regex ({e})")
    for folder in args.sweep or []:
        if not Path(folder).is_dir():
            parser.error(f"--sweep {folder}: no such folder (the --out folder of benchmark/run.py)")
        if not any(Path(folder).glob("*.json")):
            parser.error(f"--sweep {folder}: no state files (*.json) of benchmark/run.py in it")
    if args.title is None:
        args.title = f"Benchmark: {Path(args.out).name}" if args.out else "Benchmark"
    return args


def fail(message):
    print(f"report.py: error: {message}", file=sys.stderr)
    return 1


def main(argv=None):
    args = parse_args(argv)
    roots = " ".join(args.runs)
    folders = [folder for root in args.runs for folder in find_runs(root)]
    found = [name for _, name in folders]
    twice = sorted({name for name in found if found.count(name) > 1})
    if twice:
        return fail(f"run folder {twice[0]} is under more than one of --runs {roots}")
    if not folders:
        return fail(f"no TensorBoard runs (events.out.tfevents.*) under --runs {roots}")
    if args.include is not None:
        matched = [(p, name) for p, name in folders if re.search(args.include, name)]
        if not matched:
            return fail(f"--include {args.include!r} matches none of the {len(folders)} run folders under {roots}")
        folders = matched
    sweep = None
    if args.sweep is not None:
        sweep = read_sweep(args.sweep)
        # the folders of unfinished runs too: they are left out of the table, but --thresholds reports the part done
        names = recorded_runs(sweep)
        recorded = len(names)
        folders = [(p, name) for p, name in folders if name in names]
        if recorded and not folders:
            return fail(
                f"none of the {recorded} run folders the sweep recorded is under --runs {roots} (the "
                f"runs are in runs/ under the sweep's --cwd)"
            )
    runs = []
    for path, name in folders:
        run = read_run(path, name)
        if not run["scalars"]:
            print(f"skip {path}: no scalars", file=sys.stderr)
            continue
        run["summary"] = summarize_run(run, args.last)
        runs.append(run)
    if not runs and not sweep:
        return fail(f"none of the {len(folders)} run folders under {roots} has scalars")
    drop_unrecorded_settings(runs)
    groups, left_out = group_runs(runs)
    report = Report(groups, left_out, sweep, runs)
    ref_rows = read_reference(args.reference or HERE / "reference.csv")

    image_links = []
    if args.out:
        out = Path(args.out)
        ddof = 0 if args.std == "population" else 1
        for env_id in sorted({key[0] for key, *_ in report.groups}):
            arms = [
                (label, int(dict(settings)["total_timesteps"]), runs)
                for (e, (_, settings)), label, _, runs in report.groups
                if e == env_id
            ]
            png = out / f"{safe(env_id)}.png"
            plot_env(env_id, arms, png, args.last, ddof)
            image_links.append((env_id, f"{out.name}/{png.name}"))
    published = None
    if args.published_curves:
        curves, source = read_published(args.published_curves)
        ours = published_runs(report, curves)
        links = []
        for game, runs in ours.items():
            if args.out and runs:
                png = out / f"{safe(game)}_published.png"
                plot_published(game, runs, *curves[game], Path(args.published_curves).name, png, args.last, args.at)
                links.append((game, f"{out.name}/{png.name}"))
        published = (ours, curves, source, links)
    runs_link = None
    if args.out and args.thresholds:
        plot_runs(report.shown + report.unfinished, report.labels, out / "runs.png", args.last, args.thresholds)
        runs_link = f"{out.name}/runs.png"
    text = render(report, ref_rows, args, image_links, runs_link, published)
    if args.out:
        md = out.parent / f"{out.name}.md"
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(text)
        plots = len(image_links) + bool(runs_link) + (len(published[3]) if published else 0)
        print(f"wrote {md} and {plots} plot(s) in {out}/")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
