"""Where a script's training time goes: py-spy samples its main thread, each sample is charged to the line of main()
it was in, and the lines are grouped into the parts of a PPO iteration (env steps, the policy in the rollout, the
update's forward, loss, backward, clip, Adam, ...). Prints one table: seconds and share of the training loop.

    pip install py-spy
    python benchmark/breakdown.py ppo.py --env-id CartPole-v1 --total-timesteps 100000
    python benchmark/breakdown.py --raw out.raw ppo_atari_envpool.py --env-id Pong-v5 --total-timesteps 20480
    python benchmark/breakdown.py --tally out.raw ppo_atari_envpool.py   # count the samples of an earlier run again

The script runs in a scratch folder (nothing is left in runs/), with the arguments given after its name. Sampling
includes time the main thread waits (for envpool's threads, say), so the parts add up to the wall time; it costs a
few percent of speed. A part is found from main()'s source: the lines inside `for step in range(...)` are the
rollout, those inside `for epoch in range(args.update_epochs)` the update, and a line's text says which part of
them it is (`envs.step(` env steps, `agent.` a forward pass, `ppo_loss(`, `backward()`, ...). Under torchrun, profile
one process by hand (`py-spy record --pid`); this tool runs one process.
"""

import ast
import gzip
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from common import REPO, Parser

PARTS = [  # (name, shown in the table), in the order of an iteration
    ("start-up", "start-up: imports, envs, agent (not in the loop)"),
    ("env", "rollout: env steps"),
    ("policy", "rollout: policy forward"),
    ("storage", "rollout: storage, conversions, episode stats"),
    ("gae", "after the rollout: values, GAE"),
    ("forward", "update: forward"),
    ("loss", "update: loss"),
    ("backward", "update: backward"),
    ("all_reduce", "update: gradient all-reduce"),
    ("clip", "update: gradient clip"),
    ("adam", "update: Adam step"),
    ("update_other", "update: shuffle, indexing, zero_grad"),
    ("logging", "between iterations: logs, progress line, checkpoints"),
    ("end", "end: last save, logs closed (not in the loop)"),
]
LOOP = [name for name, _ in PARTS if name not in ("start-up", "end")]


def line_parts(source):
    """{line number of main(): part name} for every line of the script's main()."""
    tree = ast.parse(source)
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    loops = {}  # "iteration", "step", "epoch": the For node
    for node in ast.walk(main):
        if isinstance(node, ast.For) and isinstance(node.target, ast.Name):
            if node.target.id in ("iteration", "step", "epoch"):
                loops.setdefault(node.target.id, node)
    missing = {"iteration", "step", "epoch"} - loops.keys()
    if missing:
        raise ValueError(f"main() has no {', '.join(sorted(missing))} loop")
    statements = [n for n in ast.walk(main) if isinstance(n, ast.stmt) and n is not main]
    # the function main() defines for the update (--compile compiles it): the forward pass, then ppo_loss
    batch = next((n for n in main.body if isinstance(n, ast.FunctionDef) and n.name == "minibatch_loss"), None)

    def inside(node, line):
        return node.lineno <= line <= node.end_lineno

    lines = source.splitlines()
    parts = {}
    for line in range(main.lineno, main.end_lineno + 1):
        # the innermost statement holding the line; a compound one (for, if, with) by its header line alone
        holders = [n for n in statements if inside(n, line)]
        text = ""
        if holders:
            node = min(holders, key=lambda n: n.end_lineno - n.lineno)
            text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            if isinstance(node, (ast.For, ast.If, ast.With, ast.While, ast.Try)):
                text = lines[node.lineno - 1]
        # its body runs in the update
        if batch is not None and batch.lineno < line <= batch.end_lineno:
            parts[line] = "loss" if "ppo_loss(" in text else "forward" if "agent." in text else "update_other"
        elif line == loops["iteration"].lineno:  # the loop's own line: the next iteration
            parts[line] = "logging"
        elif not inside(loops["iteration"], line):
            parts[line] = "start-up" if line < loops["iteration"].lineno else "end"
        elif inside(loops["step"], line):
            parts[line] = "env" if "envs.step(" in text else "policy" if "agent." in text else "storage"
        elif inside(loops["epoch"], line):
            for needle, part in [
                ("backward(", "backward"),
                ("all_reduce", "all_reduce"),
                ("clip_grad_norm_", "clip"),
                ("optimizer.step(", "adam"),
                ("ppo_loss(", "loss"),
                ("agent.", "forward"),
            ]:
                if needle in text:
                    parts[line] = part
                    break
            else:
                parts[line] = "update_other"
        else:
            parts[line] = "gae" if line < loops["epoch"].lineno else "logging"
    return parts


def tally(raw_lines, script, parts):
    """Samples per part, from py-spy's raw output (one stack per line: "frame;frame;... count", each frame
    "function (file:line)"). Only the main thread's stacks count: those whose first frame is the script's module.
    A sample counts for the line of the innermost frame of main() or of the minibatch_loss it defines."""
    counts = Counter()
    frame = re.compile(r"^(.*) \((.*):(\d+)\)$")
    for raw in raw_lines:
        stack, _, count = raw.rstrip("\n").rpartition(" ")
        frames = [frame.match(f) for f in stack.split(";")]
        if not frames or not frames[0] or Path(frames[0][2]).name != script or frames[0][1] != "<module>":
            continue
        # a function's name as py-spy gives it: "minibatch_loss", or "main.<locals>.minibatch_loss" on Python 3.12
        in_main = [
            f
            for f in frames[1:]
            if f and f[1].rpartition(".")[2] in ("main", "minibatch_loss") and Path(f[2]).name == script
        ]
        counts[parts.get(int(in_main[-1][3]), "start-up") if in_main else "start-up"] += int(count)
    return counts


def run(opts):
    """Runs the script under py-spy: (its raw samples, the SPS figures it printed)."""
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "samples.raw"
        # --nonblocking: sampling without pausing the run (pausing it 200 times a second cost the CNN scripts 40%)
        command = [
            "py-spy",
            "record",
            "--nonblocking",
            "--idle",
            "--full-filenames",
            "--format",
            "raw",
            "--rate",
            str(opts.rate),
            "--output",
            str(raw),
            "--",
            sys.executable,
            str(REPO / opts.script),
            *opts.args,
        ]
        result = subprocess.run(command, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0 or not raw.exists():
            sys.exit(f"breakdown.py: error: the run failed: {result.stdout.strip().splitlines()[-1:]}")
        sps = re.findall(r"SPS +(\d+)", result.stdout)
        samples = raw.read_text().splitlines()
    if opts.raw:
        opts.raw.write_text("\n".join(samples) + "\n")
    return samples, sps


def main():
    parser = Parser(
        description=__doc__.split("\n\n")[0], usage="%(prog)s [--rate HZ] [--raw FILE | --tally FILE] SCRIPT [ARGS ...]"
    )
    parser.add_argument(
        "--rate", type=int, default=200, help="samples per second (with --tally: the rate they were taken at)"
    )
    parser.add_argument("--raw", type=Path, help="also keep py-spy's raw samples in this file")
    parser.add_argument(
        "--tally",
        type=Path,
        help="count the samples of an earlier --raw file (or its .gz) instead "
        "of running the script (its arguments are then not needed)",
    )
    parser.add_argument("script", help="a ppo*.py of the repo, or the path of a copy")
    parser.add_argument("args", nargs="...", help="its arguments")
    opts = parser.parse_args()
    if not (REPO / opts.script).is_file():
        parser.error(f"{opts.script}: no such script in {REPO}")
    parts = line_parts((REPO / opts.script).read_text())
    if opts.tally:
        if not opts.tally.is_file():
            parser.error(f"{opts.tally}: no such file")
        raw = opts.tally.read_bytes()
        samples, sps = (gzip.decompress(raw) if opts.tally.suffix == ".gz" else raw).decode().splitlines(), []
    elif shutil.which("py-spy") is None:
        parser.error("py-spy is not installed: pip install py-spy")
    else:
        samples, sps = run(opts)
    # py-spy's frames name the file as run: a path works
    counts = tally(samples, Path(opts.script).name, parts)
    loop = sum(counts[name] for name in LOOP)
    source = f"{opts.tally}, samples of {opts.script}" if opts.tally else f"python {opts.script} {' '.join(opts.args)}"
    print(
        f"# {source}: {sum(counts.values()) / opts.rate:.1f} s sampled, "
        f"last SPS {sps[-1] if sps else '?'} (py-spy at {opts.rate} Hz)"
    )
    print("| part | s | share of the loop |")
    print("| --- | --- | --- |")
    for name, label in PARTS:
        share = f"{100 * counts[name] / loop:.1f}%" if name in LOOP and loop else ""
        print(f"| {label} | {counts[name] / opts.rate:.2f} | {share} |")


if __name__ == "__main__":
    main()
