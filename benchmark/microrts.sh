#!/usr/bin/env bash
# The blog's Gym-μRTS experiment: ppo_multidiscrete_mask.py [X4] against ppo_multidiscrete.py on its three envs, with
# its settings (8 envs, clip 0.1, 2M steps; the rest are the scripts' defaults, which are its), seeds 1-3: 18 runs.
# Needs `bash benchmark/install_microrts.sh` first (docs/multidiscrete.md#gym-μrts).
#
#   bash benchmark/microrts.sh                                             # the whole grid
#   SEEDS=1 bash benchmark/microrts.sh                                     # seed 1 of each env (6 runs), then
#   ENVS=MicrortsMining-v1 SEEDS="2 3" bash benchmark/microrts.sh          # seeds 2-3 of Mining: the report has all 10
#   ENVS=MicrortsMining-v1 STEPS=500000 SEEDS=1 bash benchmark/microrts.sh  # a smaller one
#
# Time: ~45 min a 2M run on a 2-core machine (~720-800 SPS measured briefly on 2026-11-29), ~14 h for the grid, one
# run at a time. Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run, from their
# last checkpoint (every 100 iterations, ~100k steps). Then report.py's table and curves, both arms side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-2000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-MicrortsMining-v1 MicrortsAttackShapedReward-v1 MicrortsRandomEnemyShapedReward3-v1}
OUT=${OUT:-benchmark/out/microrts}

for script in ppo_multidiscrete_mask ppo_multidiscrete; do
    python benchmark/run.py \
        --command "python $script.py --num-envs 8 --clip-coef 0.1 --total-timesteps $STEPS --checkpoint-every 100" \
        --env-ids $ENVS --seeds $SEEDS --workers 1 --out "$OUT"
done
python benchmark/report.py --runs runs --sweep "$OUT" --out benchmark/results/microrts_report \
    --title "Gym-μRTS: ppo_multidiscrete_mask.py vs ppo_multidiscrete.py, the blog's settings" \
    --note "Command: bash benchmark/microrts.sh"
