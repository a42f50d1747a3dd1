#!/usr/bin/env bash
# MuJoCo with ppo_continuous_action.py: the Hopper, Walker2d and HalfCheetah rows of the reference table
# (shared/reference-results.md; the reference ran the -v2 envs of mujoco-py, these are the -v4 envs of mujoco).
# 3 envs x seeds 1-3, 1M steps each (the baselines defaults: 1 env, 2048 steps, 32 mini-batches, 10 epochs).
# HalfCheetah-v4 ran at ~3,400 steps/s here (~5 min per 1M steps); Hopper-v4 took 20 min on the machine shared
# with other jobs. Count 1-3 hours for the 9 runs with one worker.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run.
# One worker, so that each run's SPS is measured without a second run on the other core
# (WORKERS=2 halves the wall time; the returns do not change, the SPS do).
set -euo pipefail
cd "$(dirname "$0")/.."

python benchmark/run.py \
    --command "python ppo_continuous_action.py --total-timesteps 1000000" \
    --env-ids Hopper-v4 Walker2d-v4 HalfCheetah-v4 \
    --seeds 1 2 3 \
    --workers "${WORKERS:-1}" \
    --out benchmark/out/mujoco

python benchmark/report.py --runs runs --sweep benchmark/out/mujoco --title "MuJoCo (ppo_continuous_action.py, 1M steps)" \
    --note "Command: bash benchmark/mujoco.sh" \
    --out benchmark/results/mujoco
