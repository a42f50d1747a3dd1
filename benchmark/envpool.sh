#!/usr/bin/env bash
# Atari on envpool with ppo_atari_envpool.py: the rows of the reference table (shared/reference-results.md),
# Breakout, Pong and BeamRider (*-v5, envpool's ids) x seeds 1-3 x 10M agent steps, the script's defaults (baselines'
# Atari hyperparameters, envpool's preprocessing set to baselines' choices). Needs envpool (pip install envpool) and
# matplotlib for the plots.
#
#   bash benchmark/envpool.sh                    # the full sweep: 9 runs of 10M steps
#   STEPS=50000 SEEDS=1 ENVS=Breakout-v5 OUT=benchmark/out/envpool_speed bash benchmark/envpool.sh
#                                                # a short run like the speed run of benchmark/results/envpool.md
#
# Time: on Breakout-v5 ppo_atari_envpool.py trains at 340-450 steps/s on both cores of an Intel Xeon of this
# project's 2-core machines (2026-11-29) and at 392 on an AMD EPYC (docs/speed.md), so a 10M run takes 7-8 hours and
# the full sweep some 3 days there (Breakout, run by run over several sessions: benchmark/breakout.sh); a GPU machine
# with a few CPU cores is faster. Each run steps its envs in
# envpool's threads and trains with torch on the same cores (--num-threads, default: all cores): with WORKERS > 1,
# give each run its share, e.g. WORKERS=4 COMMAND_EXTRA="--num-threads 4" on 16 cores.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run (benchmark/run.py).
# Runs, logs and state go to $OUT (default benchmark/out/envpool, gitignored); the report to $REPORT. The report
# ends with the score of random play in each game (benchmark/random_play.py), the floor a scaled run has to beat.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-Breakout-v5 Pong-v5 BeamRider-v5}
WORKERS=${WORKERS:-1}
COMMAND_EXTRA=${COMMAND_EXTRA:-}
OUT=${OUT:-benchmark/out/envpool}
REPORT=${REPORT:-$OUT/report}
RANDOM_EPISODES=${RANDOM_EPISODES:-10}  # whole episodes of random play per env, for the report
RANDOM_ENVS=${RANDOM_ENVS:-100}  # envs of random play (each plays RANDOM_EPISODES)

python benchmark/run.py \
    --command "python ppo_atari_envpool.py --total-timesteps $STEPS $COMMAND_EXTRA" \
    --env-ids $ENVS \
    --seeds $SEEDS \
    --workers "$WORKERS" \
    --cwd "$OUT" \
    --out "$OUT/state"

python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/state" --out "$REPORT" \
    --title "Atari on envpool (ppo_atari_envpool.py, $STEPS steps)" \
    --note "Command: STEPS=$STEPS SEEDS='$SEEDS' ENVS='$ENVS' bash benchmark/envpool.sh"
python benchmark/random_play.py --env-id $ENVS --num-envs "$RANDOM_ENVS" --episodes-per-env "$RANDOM_EPISODES" \
    --markdown >> "$REPORT.md"
