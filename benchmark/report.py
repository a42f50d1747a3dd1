"""Summarize TensorBoard runs: a Markdown table per script and env next to the reference figures, and learning curves.

    python benchmark/report.py --runs runs                                   # print the table
    python benchmark/report.py --runs runs --out benchmark/results/NAME      # write NAME.md and NAME/<env>.png
    python benchmark/report.py --runs runs --sweep benchmark/out/classic_control --out ...  # only a sweep's runs

Runs are grouped by (script, env id, total timesteps) across seeds; the script is the run's exp_name, the seed and
total timesteps come from its logged hyperparameters (else from its name {env_id}__{exp_name}__{seed}__{unix time}
and its last step). Per run: the mean of its last --last charts/episodic_return values, its final charts/SPS, and its
wall time (first to last logged scalar). Per group: mean and std of these over seeds. A run that stopped before 95%
of its total timesteps is listed but left out of the table; when a seed was run twice, the newer run counts.
The reference figures are read from benchmark/reference.csv (shared/reference-results.md, machine-readable).
"""

import csv
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
from common import Parser, safe

HERE = Path(__file__).resolve().parent
CURVE_POINTS = 200  # points of the common step grid the seeds' learning curves are interpolated onto


def find_runs(root):
    """The run folders under root: every folder holding a TensorBoard event file, as (path, name relative to root).
    Nested names happen when the env id has a slash: runs/ALE/Pong-v5__ppo__1__1700000000."""
    folders = sorted({p.parent for p in Path(root).rglob("events.out.tfevents.*")})
    return [(p, p.relative_to(root).as_posix()) for p in folders]


def read_run(path, name):
    """One run folder -> dict with its identity and scalars {tag: (steps, values, wall_times)} as numpy arrays."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})  # 0: keep every point
    acc.Reload()
    tags = acc.Tags()
    scalars = {}
    for tag in tags.get("scalars", []):
        events = acc.Scalars(tag)
        scalars[tag] = tuple(np.array(x, dtype=float) for x in zip(*[(e.step, e.value, e.wall_time) for e in events]))
    params = {}
    for tag in tags.get("tensors", []):  # the scripts log their arguments as a Markdown table "|key|value|"
        if tag.startswith("hyperparameters"):
            text = acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()
            params = dict(re.findall(r"^\|([^|]+)\|([^|]*)\|$", text, flags=re.M))
    parts = name.split("__")
    name_ok = len(parts) >= 4 and parts[-1].isdigit()
    steps = [s for s, _, _ in scalars.values()]
    last_step = max((s.max() for s in steps if len(s)), default=0)
    walls = np.concatenate([w for _, _, w in scalars.values()]) if scalars else np.array([])

    def param(key, from_name, cast):
        try:
            return cast(params[key])
        except (KeyError, ValueError):
            return from_name

    return {
        "path": path,
        "name": name,
        "env_id": param("env_id", parts[0] if name_ok else "?", str),
        "exp_name": param("exp_name", "__".join(parts[1:-2]) if name_ok else name, str),
        "seed": param("seed", int(parts[-2]) if name_ok and parts[-2].isdigit() else -1, int),
        "started": int(parts[-1]) if name_ok else (walls.min() if len(walls) else 0),
        "total_timesteps": param("total_timesteps", int(last_step), int),
        "last_step": int(last_step),
        "scalars": scalars,
        "wall_start": float(walls.min()) if len(walls) else math.nan,
        "wall_end": float(walls.max()) if len(walls) else math.nan,
    }


def summarize_run(run, last):
    """The per-run numbers of the table: episodes, mean return of the last `last` episodes, final SPS, wall time."""
    returns = run["scalars"].get("charts/episodic_return", (np.array([]),) * 3)[1]
    sps = run["scalars"].get("charts/SPS", (np.array([]),) * 3)[1]
    return {
        "episodes": len(returns),
        "return": float(np.mean(returns[-last:])) if len(returns) else math.nan,
        "sps": float(sps[-1]) if len(sps) else math.nan,
        "wall": run["wall_end"] - run["wall_start"],
        "complete": run["last_step"] >= 0.95 * run["total_timesteps"],
    }


def sweep_names(folders):
    """The run folder names that the runner (benchmark/run.py) recorded as finished in these --out folders."""
    names = set()
    for folder in folders:
        for state in Path(folder).glob("*.json"):
            data = json.loads(state.read_text())
            if data.get("status") == "done":
                names.update(data.get("run_names", []))
    return names


def group_runs(runs):
    """{(exp_name, env_id, total_timesteps): [runs, one per seed, the newest]} in first-seen order of the sorted runs;
    also returns the runs left out (superseded by a newer run of the same seed, or incomplete)."""
    groups, left_out = {}, []
    for run in sorted(runs, key=lambda r: (r["exp_name"], r["env_id"], r["total_timesteps"], r["seed"], r["started"])):
        if not run["summary"]["complete"]:
            left_out.append((run, "incomplete"))
            continue
        by_seed = groups.setdefault((run["exp_name"], run["env_id"], run["total_timesteps"]), {})
        if run["seed"] in by_seed:
            left_out.append((by_seed[run["seed"]], "superseded by a newer run of the same seed"))
        by_seed[run["seed"]] = run
    return {key: list(by_seed.values()) for key, by_seed in groups.items()}, left_out


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
    rows = [r for r in rows
            if r["script"] == f"{script}.py" and r["source"] == source and env_matches(r["env"], env_id)]
    rows.sort(key=lambda r: int(r["steps"]) != steps)  # the same budget first
    if not rows:
        return ""
    r = rows[0]
    if source == "here":
        cell = ", ".join(x for x in (r["return_mean"], r["sps"] and f"{r['sps']} SPS",
                                     r["wall_s"] and fmt_wall(float(r["wall_s"]))) if x)
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


def plot_env(env_id, groups, path, last, ddof):
    """One PNG per env: for each (script, steps), the mean over seeds of the smoothed return and a band of ± 1 std,
    the seeds interpolated onto a common step grid (where all seeds have episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(6, 4))
    drawn = 0
    for (script, _, steps), runs in groups:
        curves = [learning_curve(run, last) for run in runs]
        curves = [(s, r) for s, r in curves if len(s)]
        if not curves:
            continue
        lo, hi = max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves)
        grid = np.linspace(lo, hi, CURVE_POINTS) if hi > lo else np.array([lo])
        ys = np.array([np.interp(grid, s, r) for s, r in curves])  # (seeds, points)
        mean = ys.mean(axis=0)
        line, = ax.plot(grid, mean, label=f"{script} ({fmt_steps(steps)}, {len(curves)} seed{'s' * (len(curves) > 1)})")
        if len(curves) > 1:
            std = ys.std(axis=0, ddof=ddof)
            ax.fill_between(grid, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
        drawn += 1
    ax.set_title(env_id)
    ax.set_xlabel("env steps")
    ax.xaxis.set_major_formatter(matplotlib.ticker.EngFormatter(sep=""))  # 500k, 1M
    ax.set_ylabel(f"episodic return (mean of last {last} episodes)")
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def render(groups, left_out, ref_rows, args, image_links):
    std_name = "population std, ddof=0" if args.std == "population" else "sample std, ddof=1"
    all_runs = [run for runs in groups.values() for run in runs]
    lines = [f"# {args.title}", ""]
    lines += [f"{note}  " for note in args.note]
    if all_runs:
        first = min(r["wall_start"] for r in all_runs)
        final = max(r["wall_end"] for r in all_runs)
        when = lambda t: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))  # noqa: E731
        lines.append(f"Runs: {len(all_runs)} from `{args.runs}`, logged {when(first)} to {when(final)}.  ")
    lines += [
        f"Return: per run, the mean of its last {args.last} episodic returns; mean ± std over seeds ({std_name}). "
        "SPS: charts/SPS at the end of a run (env steps per second over the whole run), mean over seeds. "
        "Wall: first to last logged scalar, mean over seeds. Reference figures from `benchmark/reference.csv` "
        "(`@` marks another step count); \"CleanRL here\" is CleanRL measured on this machine kind.",
        "",
        f"| script | env | steps | seeds | return, last {args.last} ep. (mean ± {std_name}) | SPS | wall "
        "| published (CleanRL docs) | baselines ppo2 (blog) | CleanRL here |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    ddof = 0 if args.std == "population" else 1
    for (script, env_id, steps), runs in groups.items():
        ret = mean_std([r["summary"]["return"] for r in runs], ddof)
        sps = mean_std([r["summary"]["sps"] for r in runs], ddof)[0]
        wall = mean_std([r["summary"]["wall"] for r in runs], ddof)[0]
        seeds = ",".join(str(r["seed"]) for r in runs)
        refs = [reference_cell(ref_rows, script, env_id, steps, source) or "—"
                for source in ("published", "baselines", "here")]
        lines.append(f"| {script} | {env_id} | {fmt_steps(steps)} | {len(runs)} ({seeds}) | {fmt_mean_std(*ret)} "
                     f"| {fmt_num(sps, 0)} | {fmt_wall(wall)} | " + " | ".join(refs) + " |")
    if image_links:
        lines += ["", "## Learning curves", "",
                  f"Mean over seeds of the return averaged over the last {args.last} episodes, the seeds interpolated "
                  f"onto a common grid of env steps; the band is ± 1 std over seeds ({std_name}).", ""]
        lines += [f"![{env_id}]({link})" for env_id, link in image_links]
    lines += ["", "## Runs", "", f"| run | seed | episodes | return, last {args.last} ep. | SPS | wall | note |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for run, note in [(r, "") for r in all_runs] + left_out:
        s = run["summary"]
        lines.append(f"| {run['name']} | {run['seed']} | {s['episodes']} | {fmt_num(s['return'])} "
                     f"| {fmt_num(s['sps'], 0)} "
                     f"| {fmt_wall(s['wall'])} | {note} |")
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", default="runs", help="folder of TensorBoard run folders")
    parser.add_argument("--out", default=None,
                        help="write OUT.md and the plots OUT/<env>.png (default: print the table only)")
    parser.add_argument("--last", type=int, default=20, help="episodes at the end of a run that its return averages")
    parser.add_argument("--std", choices=["population", "sample"], default="population",
                        help="the std over seeds: population (ddof=0, numpy's default) or sample (ddof=1)")
    parser.add_argument("--include", default=None, help="only runs whose folder name matches this regex")
    parser.add_argument("--sweep", nargs="+", default=None,
                        help="only the runs that benchmark/run.py recorded as done in these --out folders")
    parser.add_argument("--reference", default=str(HERE / "reference.csv"), help="CSV of reference figures")
    parser.add_argument("--title", default=None, help="heading of the report (default: the name of --out)")
    parser.add_argument("--note", action="append", default=[],
                        help="a line under the heading, e.g. the command that made the runs (repeatable)")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be positive, got {args.last}")
    if not Path(args.runs).is_dir():
        parser.error(f"--runs {args.runs}: no such folder")
    if args.include is not None:
        try:
            re.compile(args.include)
        except re.error as e:
            parser.error(f"--include {args.include!r}: not a regex ({e})")
    if args.title is None:
        args.title = f"Benchmark: {Path(args.out).name}" if args.out else "Benchmark"
    return args


def main(argv=None):
    args = parse_args(argv)
    folders = find_runs(args.runs)
    if args.include is not None:
        folders = [(p, name) for p, name in folders if re.search(args.include, name)]
    if args.sweep is not None:
        names = sweep_names(args.sweep)
        folders = [(p, name) for p, name in folders if name in names]
    runs = []
    for path, name in folders:
        run = read_run(path, name)
        if not run["scalars"]:
            print(f"skip {path}: no scalars", file=sys.stderr)
            continue
        run["summary"] = summarize_run(run, args.last)
        runs.append(run)
    if not runs:
        print(f"report.py: error: no runs with scalars in {args.runs}", file=sys.stderr)
        return 1
    groups, left_out = group_runs(runs)
    ref_rows = read_reference(args.reference) if Path(args.reference).is_file() else []

    image_links = []
    if args.out:
        out = Path(args.out)
        ddof = 0 if args.std == "population" else 1
        for env_id in sorted({key[1] for key in groups}):
            png = out / f"{safe(env_id)}.png"
            plot_env(env_id, [(k, v) for k, v in groups.items() if k[1] == env_id], png, args.last, ddof)
            image_links.append((env_id, f"{out.name}/{png.name}"))
    text = render(groups, left_out, ref_rows, args, image_links)
    if args.out:
        md = out.parent / f"{out.name}.md"
        md.parent.mkdir(parents=True, exist_ok=True)
        md.write_text(text)
        print(f"wrote {md} and {len(image_links)} plot(s) in {out}/")
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
