"""train-procgen's own PPO runs (the paper's baselines ppo2 runs) as one small CSV: benchmark/train_procgen.csv.

    git clone https://github.com/openai/train-procgen /tmp/train-procgen
    git -C /tmp/train-procgen checkout 1a2ae2194a61f76a733a39339530401c024c3ad8
    python benchmark/train_procgen.py /tmp/train-procgen > benchmark/train_procgen.csv

Reads train_procgen/results/easy-all-run{0,1,2}/progress-GAME.csv (easy distribution, all levels, 3 runs a game; one
process of 64 envs x 256 steps, so 16,384 steps per update and a row per update, to 50M steps) and writes, per game
and step (their misc/total_timesteps), the eprewmean of each run: baselines ppo2's mean return of the last 100
episodes that ended, at the end of that update. Kept, to 25M: every 4th update (65,536 steps) to 5M and every 16th
(262,144) after it, and the last update at or before each whole million, so that the value at 1M, 2M, ... is exact.
"""

import csv
import sys
from pathlib import Path

from common import Parser

COMMIT = "1a2ae2194a61f76a733a39339530401c024c3ad8"
GAMES = ["starpilot", "bigfish", "bossfight"]
RUNS = 3
UNTIL = 25_000_000


def kept(steps):
    """The indices of the rows kept out of a run's steps (sorted; one per update)."""
    millions = {max(i for i, s in enumerate(steps) if s <= m) for m in range(10**6, UNTIL + 1, 10**6)}
    every = {i for i, s in enumerate(steps) if s <= UNTIL and (i + 1) % (4 if s <= 5_000_000 else 16) == 0}
    return sorted(millions | every)


def main(argv=None):
    parser = Parser(description=__doc__.split("\n")[0])
    parser.add_argument("checkout", type=Path, help=f"a checkout of openai/train-procgen at {COMMIT[:7]}")
    args = parser.parse_args(argv)
    out = csv.writer(sys.stdout, lineterminator="\n")
    print(f"# openai/train-procgen {COMMIT}, train_procgen/results/easy-all-run{{0,1,2}}/progress-GAME.csv:")
    print("# eprewmean (baselines ppo2: the mean return of the last 100 episodes) against misc/total_timesteps;")
    print("# made by python benchmark/train_procgen.py CHECKOUT (thinned: see its docstring)")
    out.writerow(["game", "step", *(f"run{r}" for r in range(RUNS))])
    for game in GAMES:
        columns = []
        for r in range(RUNS):
            path = args.checkout / f"train_procgen/results/easy-all-run{r}/progress-{game}.csv"
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            columns.append(
                ([int(float(row["misc/total_timesteps"])) for row in rows], [row["eprewmean"] for row in rows])
            )
        steps = columns[0][0]
        if any(s != steps for s, _ in columns):
            parser.error(f"{game}: the runs' steps differ")
        for i in kept(steps):
            out.writerow([game, steps[i], *(f"{float(values[i]):.6g}" for _, values in columns)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
