#!/usr/bin/env bash
# --bootstrap-truncated [X5] on MuJoCo with ppo_continuous_action.py: each env x seed trained twice, as ppo2 does (a
# time limit ends the episode, exp name ppo_continuous_action) and with the flag (gamma * V(final obs) added to the
# reward of truncated steps, exp name ppo_continuous_action_x5); 1M steps each, the script's defaults otherwise.
# HalfCheetah first: it never terminates, every episode ends by the 1000-step time limit.
#
#   bash benchmark/bootstrap_truncated.sh                                  # 3 envs x seeds 1-3 x both arms: 18 runs
#   ENVS=HalfCheetah-v4 SEEDS="1 2" bash benchmark/bootstrap_truncated.sh  # what fit the session of the results
#
# Time: a 1M run took ~5 min alone on a 2-core machine (benchmark/results/mujoco.md), 11-14 min with the two arms
# side by side (the Walker2d-v4 runs of benchmark/results/bootstrap_truncated/mujoco.md: the 18 runs take ~2 h), and
# up to 65 min when that machine was shared with other jobs. The two arms run side by side, one worker each (WORKERS
# per arm), so that both see the same machine load.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run (benchmark/run.py).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-1000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-HalfCheetah-v4 Hopper-v4 Walker2d-v4}
WORKERS=${WORKERS:-1}
OUT=${OUT:-benchmark/out/bootstrap_truncated}
REPORT=${REPORT:-$OUT/report}

arm() {  # arm NAME EXTRA_FLAGS: one benchmark/run.py sweep
    python benchmark/run.py \
        --command "python ppo_continuous_action.py --total-timesteps $STEPS --exp-name $1 $2" \
        --env-ids $ENVS --seeds $SEEDS --workers "$WORKERS" --cwd "$OUT" --out "$OUT/$1"
}
arm ppo_continuous_action "" &
off=$!
arm ppo_continuous_action_x5 --bootstrap-truncated &
on=$!
failed=0
wait "$off" || failed=1
wait "$on" || failed=1

python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/ppo_continuous_action" "$OUT/ppo_continuous_action_x5" \
    --out "$REPORT" --title "Time-limit bootstrapping [X5] on MuJoCo (ppo_continuous_action.py, $STEPS steps)" \
    --note "Command: STEPS=$STEPS SEEDS='$SEEDS' ENVS='$ENVS' bash benchmark/bootstrap_truncated.sh"
exit "$failed"
