#!/usr/bin/env bash
# Procgen with ppo_procgen.py: the rows of the reference table (shared/reference-results.md), starpilot, bossfight
# and bigfish in the easy distribution x seeds 1-3 x 25M steps, the script's defaults (openai/train-procgen's
# hyperparameters). Needs envpool (pip install envpool; on Linux the Qt 5 runtime: apt install libqt5gui5) and
# matplotlib for the plots.
#
#   bash benchmark/procgen.sh                    # the full sweep: 9 runs of 25M steps
#   STEPS=1000000 SEEDS=1 ENVS=starpilot OUT=benchmark/out/procgen_scaled \
#       REPORT=benchmark/results/procgen_scaled bash benchmark/procgen.sh
#                                                # the scaled run of benchmark/results/procgen_scaled.md (90 min on
#                                                # the 2-core CPU machine)
#
# Time: the IMPALA CNN on 64 envs x 256 steps is heavy on a CPU (about 165 SPS on a shared 2-core machine,
# benchmark/results/procgen.md, so 25M steps would take about 42 hours): run the sweep on a GPU machine. Each run
# steps its envs in envpool's threads and trains with torch on the same cores (--num-threads, default: all cores):
# with WORKERS > 1, give each run its share, e.g. WORKERS=4 COMMAND_EXTRA="--num-threads 4" on 16 cores.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run (benchmark/run.py).
# Runs, logs and state go to $OUT (default benchmark/out/procgen, gitignored); the report to $REPORT. The report
# ends with the score of random play in each game (benchmark/random_play.py), the floor a scaled run has to beat.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-25000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-starpilot bossfight bigfish}
MODE=${MODE:-easy}
WORKERS=${WORKERS:-1}
COMMAND_EXTRA=${COMMAND_EXTRA:-}
OUT=${OUT:-benchmark/out/procgen}
REPORT=${REPORT:-$OUT/report}
RANDOM_EPISODES=${RANDOM_EPISODES:-10}  # whole episodes of random play per env, for the report
RANDOM_ENVS=${RANDOM_ENVS:-100}  # envs of random play (each plays RANDOM_EPISODES)

python benchmark/run.py \
    --command "python ppo_procgen.py --distribution-mode $MODE --total-timesteps $STEPS $COMMAND_EXTRA" \
    --env-ids $ENVS \
    --seeds $SEEDS \
    --workers "$WORKERS" \
    --threads 1 \
    --cwd "$OUT" \
    --out "$OUT/state"

python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/state" --out "$REPORT" \
    --title "Procgen $MODE (ppo_procgen.py, $STEPS steps)" \
    --note "Command: STEPS=$STEPS SEEDS='$SEEDS' ENVS='$ENVS' MODE=$MODE bash benchmark/procgen.sh"
ENVPOOL_IDS=""  # starpilot + easy -> StarpilotEasy-v0, as ppo_procgen.py maps them
for game in $ENVS; do ENVPOOL_IDS="$ENVPOOL_IDS ${game^}${MODE^}-v0"; done
python benchmark/random_play.py --env-id $ENVPOOL_IDS --num-envs "$RANDOM_ENVS" --episodes-per-env "$RANDOM_EPISODES" \
    --markdown >> "$REPORT.md"
