#!/usr/bin/env bash
# Atari with ppo_atari.py and ppo_atari_lstm.py: the rows of the reference table (shared/reference-results.md),
# Breakout, Pong and BeamRider (NoFrameskip-v4) x seeds 1-3 x 10M agent steps, the scripts' defaults (baselines'
# Atari hyperparameters). Needs the atari extra (pip install ale-py opencv-python-headless) and matplotlib for plots.
#
#   bash benchmark/atari.sh                      # the full sweep: 18 runs of 10M steps
#   STEPS=100000 SEEDS=1 ENVS=BreakoutNoFrameskip-v4 SCRIPTS=ppo_atari.py OUT=benchmark/out/atari_scaled \
#       bash benchmark/atari.sh                  # the scaled run of benchmark/results/atari.md (about 18 min on a
#                                                # shared 2-core CPU)
#
# Time: ppo_atari.py trains at 300-380 steps/s on both cores of this project's 2-core machines (docs/speed.md), so a
# 10M run takes 8-9 hours and the full sweep about a week: run it on a bigger machine or a GPU one, with WORKERS set
# to the runs that fit at once. Each run steps its 8 emulators on one core and trains with torch on all the cores it
# may use (--num-threads, default all): with WORKERS > 1, give each run its share with COMMAND_EXTRA="--num-threads N".
# Breakout at 10M on the 2-core machine, run by run over several sessions: benchmark/breakout.sh.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run (benchmark/run.py).
# Runs, logs and state go to $OUT (default benchmark/out/atari, gitignored); the report to $REPORT.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-BreakoutNoFrameskip-v4 PongNoFrameskip-v4 BeamRiderNoFrameskip-v4}
SCRIPTS=${SCRIPTS:-ppo_atari.py ppo_atari_lstm.py}
WORKERS=${WORKERS:-1}
OUT=${OUT:-benchmark/out/atari}
REPORT=${REPORT:-$OUT/report}
mkdir -p "$OUT"

for script in $SCRIPTS; do
    python benchmark/run.py \
        --command "python $script --total-timesteps $STEPS ${COMMAND_EXTRA:-}" \
        --env-ids $ENVS \
        --seeds $SEEDS \
        --workers "$WORKERS" \
        --cwd "$OUT" \
        --out "$OUT/state"
done

python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/state" --out "$REPORT" \
    --title "Atari ($SCRIPTS, $STEPS steps)" \
    --note "Command: STEPS=$STEPS SEEDS='$SEEDS' ENVS='$ENVS' SCRIPTS='$SCRIPTS' bash benchmark/atari.sh"

# What "above random" means: whole-game scores of uniform random actions through ppo_atari.py's own wrappers
# (RANDOM_GAMES games per env, seed 1; a few seconds a game), appended to the report.
python benchmark/random_play.py --env-id $ENVS --num-envs 1 --episodes-per-env "${RANDOM_GAMES:-50}" --markdown \
    >> "$REPORT.md"
