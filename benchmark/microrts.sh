#!/usr/bin/env bash
# The blog's Gym-μRTS experiment: ppo_multidiscrete_mask.py [X4] against ppo_multidiscrete.py on its three envs, with
# its settings (8 envs, clip 0.1, 2M steps; the rest are the scripts' defaults, which are its), seeds 1-3: 18 runs.
# Needs `bash benchmark/install_microrts.sh` first (docs/multidiscrete.md#gym-μrts).
#
#   bash benchmark/microrts.sh                                             # the whole grid
#   SEEDS=1 bash benchmark/microrts.sh                                     # seed 1 of each env (6 runs), then
#   ENVS=MicrortsMining-v1 SEEDS="2 3" bash benchmark/microrts.sh          # seeds 2-3 of Mining: the report has all 10
#   ENVS=MicrortsMining-v1 STEPS=500000 SEEDS=1 bash benchmark/microrts.sh  # a smaller one
#   KEEP=1 bash benchmark/microrts.sh                                      # copy $OUT into $KEPT, to commit (below)
#
# Time: 21-27 min a 2M run on both cores of an Intel Xeon (AVX-512), 1,260-1,620 steps/s with nothing beside it
# (2026-11-29), so ~7 h for the grid, one run at a time. Restartable: run it again after a Ctrl-C or a failure
# and only the unfinished runs run, from their last checkpoint (every 100 iterations, 102,400 steps, ~1 min).
# A new machine keeps nothing gitignored: at the end of a session, KEEP=1 bash benchmark/microrts.sh and commit $KEPT
# (benchmark/keep.sh: each run's files and checkpoint, a done run's shrunk to its weights, ~0.3 MB). Started on a
# machine without $OUT/runs, this copies them back first, and the grid goes on. Then report.py's table and curves,
# both arms side by side, into $OUT/report.md; the committed one (benchmark/results/microrts.md) is made from $KEPT:
#   python benchmark/report.py --runs benchmark/results/microrts/runs --sweep benchmark/results/microrts/state_* \
#       --thresholds 10 15 35 --out benchmark/results/microrts --title ... --note ...
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-2000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-MicrortsMining-v1 MicrortsAttackShapedReward-v1 MicrortsRandomEnemyShapedReward3-v1}
OUT=${OUT:-benchmark/out/microrts}
KEPT=${KEPT:-benchmark/results/microrts}

source benchmark/keep.sh
if [ -n "${KEEP:-}" ]; then
    keep_runs "$OUT" "$KEPT"
    exit 0
fi
[ -d "$OUT/runs" ] || copy_runs "$KEPT" "$OUT"  # a new machine: the committed runs count, the unfinished go on

for script in ppo_multidiscrete_mask ppo_multidiscrete; do
    python benchmark/run.py \
        --command "python $script.py --num-envs 8 --clip-coef 0.1 --total-timesteps $STEPS --checkpoint-every 100" \
        --env-ids $ENVS --seeds $SEEDS --workers 1 --cwd "$OUT" --out "$OUT/state_$script"
done
python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT"/state_* --thresholds 10 15 35 --out "$OUT/report" \
    --title "Gym-μRTS: ppo_multidiscrete_mask.py vs ppo_multidiscrete.py, the blog's settings" \
    --note "Command: bash benchmark/microrts.sh"
