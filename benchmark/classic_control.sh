#!/usr/bin/env bash
# Classic control with ppo.py: the first three rows of the reference table (shared/reference-results.md).
# 3 envs x seeds 1-3, 500k steps each; about 40-60 s a run on a quiet 2-core machine.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run.
# One worker, so that each run's SPS is measured without a second run on the other core.
set -euo pipefail
cd "$(dirname "$0")/.."

python benchmark/run.py \
    --command "python ppo.py --total-timesteps 500000" \
    --env-ids CartPole-v1 Acrobot-v1 MountainCar-v0 \
    --seeds 1 2 3 \
    --workers 1 \
    --out benchmark/out/classic_control

python benchmark/report.py --runs runs --sweep benchmark/out/classic_control --title "Classic control (ppo.py, 500k steps)" \
    --note "Command: bash benchmark/classic_control.sh" \
    --out benchmark/results/classic_control
