#!/usr/bin/env bash
# Quick suite: short runs of every script, to check a change against the recorded baseline (benchmark/results/quick.md).
# About 20-25 minutes on a quiet 2-core CPU machine with every script (ppo.py alone: about 3 minutes).
# The full tables have their own sweeps (classic_control.sh, atari.sh, mujoco.sh, ...).
#
#   bash benchmark/quick.sh                                   # report in benchmark/out/quick/report.md
#   REPORT=benchmark/results/quick bash benchmark/quick.sh    # record a new baseline
#   ONLY=ppo_atari.py bash benchmark/quick.sh                 # one script (the report still shows every quick run)
#   NOTE="..." bash benchmark/quick.sh                        # a line for the report (the machine, the load, ...)
#
# Runs, logs and state go to $OUT (default benchmark/out/quick, gitignored); the training scripts run with $OUT as
# working directory, so their runs/ folder is $OUT/runs and the quick runs never mix with a full sweep's.
# Restartable, and --rerun-on-edit: a run done before with the same command, env and seed is skipped unless its
# script changed since, so after an edit to a script only that script's runs run again. Same seed on the same
# machine gives the same returns unless the math changed; SPS moves with the load.
set -uo pipefail  # no -e: one script failing must not stop the others
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmark/out/quick}
REPORT=${REPORT:-$OUT/report}
WORKERS=${WORKERS:-1}  # 1 keeps SPS comparable with the baseline; 2 halves the time
ONLY=${ONLY:-}
mkdir -p "$OUT"
status=0

# sweep SCRIPT "SEEDS" "COMMAND" ENV_ID... : run COMMAND on each env and seed, if SCRIPT exists (and is $ONLY, if set)
sweep() {
    local script=$1 seeds=$2 command=$3
    shift 3
    if [ -n "$ONLY" ] && [ "$ONLY" != "$script" ]; then
        return
    fi
    if [ ! -f "$script" ]; then
        echo "quick: skip $script (not written yet)"
        return
    fi
    # shellcheck disable=SC2086  # $seeds is a list
    python benchmark/run.py --command "$command" --env-ids "$@" --seeds $seeds \
        --workers "$WORKERS" --cwd "$OUT" --out "$OUT/state" --rerun-on-edit || status=1
}

sweep ppo.py "1 2" "python ppo.py --total-timesteps 100000" CartPole-v1 Acrobot-v1 MountainCar-v0
sweep ppo_atari.py "1" "python ppo_atari.py --total-timesteps 50000" BreakoutNoFrameskip-v4 PongNoFrameskip-v4
sweep ppo_atari_lstm.py "1" "python ppo_atari_lstm.py --total-timesteps 50000" BreakoutNoFrameskip-v4
# --num-threads 1: envpool and torch would otherwise each take every core, and two runs at once (WORKERS=2) crawl
sweep ppo_atari_envpool.py "1" "python ppo_atari_envpool.py --total-timesteps 50000 --num-threads 1" Breakout-v5 Pong-v5
sweep ppo_atari_multigpu.py "1" \
    "torchrun --standalone --nproc_per_node=2 ppo_atari_multigpu.py --backend gloo --total-timesteps 50000" \
    BreakoutNoFrameskip-v4
sweep ppo_continuous_action.py "1" "python ppo_continuous_action.py --total-timesteps 100000" HalfCheetah-v4 Hopper-v4
sweep ppo_multidiscrete.py "1" "python ppo_multidiscrete.py --total-timesteps 50000" Jumanji/JobShop-v0
sweep ppo_multidiscrete_mask.py "1" "python ppo_multidiscrete_mask.py --total-timesteps 50000" Jumanji/JobShop-v0
sweep ppo_procgen.py "1" "python ppo_procgen.py --total-timesteps 50000 --num-threads 1" starpilot

notes=(--note "Command: ${ONLY:+ONLY=$ONLY }bash benchmark/quick.sh (workers: $WORKERS)")
if [ -n "${NOTE:-}" ]; then notes+=(--note "$NOTE"); fi  # e.g. NOTE="other jobs shared the CPU"
python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/state" --out "$REPORT" --title "Quick suite" \
    "${notes[@]}" || status=1
exit $status
