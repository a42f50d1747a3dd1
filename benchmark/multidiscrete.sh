#!/usr/bin/env bash
# Invalid action masking [X4] against no masking: ppo_multidiscrete_mask.py vs ppo_multidiscrete.py, same steps
# (100k) and seeds (1-3), default hyperparameters, on Jumanji/JobShop-v0 (the default env of both scripts) and on
# Jumanji/RobotWarehouse-v0. 12 runs of about 1-2 min each on a 2-core machine.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run.
# One worker, so that two runs do not share a core. Needs envpool and, for the plots, matplotlib.
# Results: benchmark/results/multidiscrete.md (written by hand from the output), multidiscrete.png and
# multidiscrete_report.md (+ multidiscrete_report/, from report.py).
set -euo pipefail
cd "$(dirname "$0")/.."

for env_id in Jumanji/JobShop-v0 Jumanji/RobotWarehouse-v0; do
    for script in ppo_multidiscrete ppo_multidiscrete_mask; do
        python benchmark/run.py \
            --command "python $script.py --total-timesteps 100000" \
            --env-ids $env_id \
            --seeds 1 2 3 \
            --workers 1 \
            --out benchmark/out/multidiscrete
    done
done

# The usual report (return table and learning curves, as for the other sweeps) ...
python benchmark/report.py --runs runs --sweep benchmark/out/multidiscrete --out benchmark/results/multidiscrete_report \
    --title "MultiDiscrete: ppo_multidiscrete.py vs ppo_multidiscrete_mask.py, 100k steps" \
    --note "Command: bash benchmark/multidiscrete.sh"

# ... and what masking changes beyond the return: episode length and charts/invalid_action_rate, per run (a Markdown
# table on stdout) and as curves (benchmark/results/multidiscrete.png). Runs read with report.py's own functions.
python - <<'PY'
import sys

import numpy as np

sys.path.insert(0, "benchmark")
from report import find_runs, read_run, sweep_names

TAGS = ["charts/episodic_return", "charts/episodic_length", "charts/invalid_action_rate"]
names = sweep_names(["benchmark/out/multidiscrete"])
runs = sorted((read_run(path, name) for path, name in find_runs("runs") if name in names),
              key=lambda r: (r["env_id"], r["exp_name"], r["seed"]))
print("| env | script | seed | return (last 20 episodes) | length (last 20) | invalid action rate (first / last rollout) |")
print("|-|-|-|-|-|-|")
for r in runs:
    (_, ret, _), (_, length, _), (_, rate, _) = (r["scalars"][tag] for tag in TAGS)
    print(f"| {r['env_id']} | {r['exp_name']}.py | {r['seed']} | {ret[-20:].mean():.2f} | {length[-20:].mean():.1f} "
          f"| {rate[0]:.3f} / {rate[-1]:.3f} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    raise SystemExit("matplotlib is not installed: no plot")
env_ids = sorted({r["env_id"] for r in runs})
fig, axes = plt.subplots(len(env_ids), 3, figsize=(15, 3.6 * len(env_ids)), squeeze=False)
for row, env_id in zip(axes, env_ids):
    for ax, tag in zip(row, TAGS):
        for exp_name, color in (("ppo_multidiscrete", "tab:red"), ("ppo_multidiscrete_mask", "tab:blue")):
            seeds = [r for r in runs if r["env_id"] == env_id and r["exp_name"] == exp_name]
            for i, r in enumerate(seeds):
                steps, values, _ = r["scalars"][tag]
                ax.plot(steps, values, color=color, alpha=0.6, label=f"{exp_name}.py" if i == 0 else None)
        ax.set_title(f"{env_id}: {tag}", fontsize=9)
        ax.set_xlabel("env steps")
    row[0].legend(fontsize=8)
fig.suptitle("Invalid action masking [X4] (blue) vs none (red), seeds 1-3 each")
fig.tight_layout()
fig.savefig("benchmark/results/multidiscrete.png", dpi=70)
print("\nplot: benchmark/results/multidiscrete.png")
PY
