#!/usr/bin/env bash
# A two-arm sweep, the worked example of a comparison: ppo.py with learning rate 2.5e-4 (its default) against 1e-3,
# on classic control, the same seeds for both arms. Each arm is one benchmark/run.py call with its own command, into
# the same state folder; report.py --sweep then puts the arms of an env next to each other, labelled by the setting
# that differs, with the difference of their means and its bootstrap CI (and, with rliable, IQM and probability of
# improvement over the envs). About 20 s a run on a quiet 2-core machine at the default 100k steps.
#
#   bash benchmark/lr_sweep.sh                    # CartPole-v1, seeds 1-3, 100k steps; report in $OUT/report.md
#   REPORT=benchmark/results/lr_sweep bash benchmark/lr_sweep.sh           # the committed worked example
#   ENVS="CartPole-v1 Acrobot-v1" SEEDS="1 2 3 4 5" STEPS=500000 bash benchmark/lr_sweep.sh
#   NOTE="..." bash benchmark/lr_sweep.sh         # a line for the report (the machine, the load, ...)
#
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run (benchmark/run.py).
# Runs, logs and state go to $OUT (default benchmark/out/lr_sweep, gitignored); the report to $REPORT.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-100000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-CartPole-v1}
LRS=${LRS:-2.5e-4 1e-3}
WORKERS=${WORKERS:-1}
OUT=${OUT:-benchmark/out/lr_sweep}
REPORT=${REPORT:-$OUT/report}
status=0

for lr in $LRS; do  # one arm per learning rate
    python benchmark/run.py \
        --command "python ppo.py --total-timesteps $STEPS --learning-rate $lr" \
        --env-ids $ENVS \
        --seeds $SEEDS \
        --workers "$WORKERS" \
        --cwd "$OUT" \
        --out "$OUT/state" || status=1  # the report lists the failed runs
done

notes=(--note "Command: STEPS=$STEPS SEEDS='$SEEDS' ENVS='$ENVS' LRS='$LRS' bash benchmark/lr_sweep.sh")
if [ -n "${NOTE:-}" ]; then notes+=(--note "$NOTE"); fi  # e.g. NOTE="other jobs shared the CPU"
python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/state" --out "$REPORT" \
    --title "Learning rate sweep (ppo.py, $STEPS steps)" "${notes[@]}" || status=1
exit $status
