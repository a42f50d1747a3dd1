#!/usr/bin/env bash
# Breakout to 10M agent steps, as the reference ran it: each script's defaults (baselines' Atari hyperparameters: 8
# envs, 128 steps, 4 mini-batches, 4 epochs, clip 0.1, learning rate 2.5e-4 annealed over the 10M), no --target-return.
# The published figures: CleanRL's ppo_atari_envpool.py 389.57 ± 29.62 (3 seeds), its ppo_atari.py 416.31 ± 43.92,
# baselines ppo2 406.57 ± 31.55 (shared/reference-results.md). The runs, in this order:
#   envpool   ppo_atari_envpool.py on Breakout-v5, seed 1, then (after atari) seeds 2 and 3
#   atari     ppo_atari.py on BreakoutNoFrameskip-v4, seed 1
#
#   bash benchmark/breakout.sh                            # every run not done, in that order
#   RUNS=envpool SEEDS=1 bash benchmark/breakout.sh       # only ppo_atari_envpool.py, seed 1
#   KEEP=1 bash benchmark/breakout.sh                     # copy what $OUT holds into $KEPT, to commit (see below)
#   REPORT=1 bash benchmark/breakout.sh                   # the report from the kept files: $KEPT.md
#
# Time: envpool ran at ~500 steps/s on both cores of an Intel Xeon (AVX-512) with nothing beside it (331 with tests
# beside it; 2026-11-29), 200-400 on others (docs/speed.md): 6-14 hours a run, over several sessions. One run at a
# time, nothing else on the machine meanwhile.
# Restartable: stopped (Ctrl-C, SIGTERM, a closed terminal), a run continues from its last checkpoint
# (--checkpoint-every 100: every 102,400 steps, some 4-8 minutes) when this is started again.
# A new machine keeps nothing gitignored, so at the end of every session in which a run is unfinished: stop it,
# KEEP=1 bash benchmark/breakout.sh, and commit $KEPT (benchmark/keep.sh: one path per run, overwritten; a done run's
# checkpoint shrinks to its weights, ~7 MB of ~20). Started on a new machine, this copies those files back into $OUT
# first, so the run goes on with the same command.
# A run done, kept: its final weights play 10 whole games, the first recorded (eval_<env id>_seed<N>.txt and a GIF
# beside the report, as Pong's):
#   cd $OUT && python ../../../ppo_atari_envpool.py --env-id Breakout-v5 \
#       --eval-checkpoint runs/<run>/ppo_atari_envpool.pt --eval-episodes 10 --capture-video
# The report (report, below) holds these runs, benchmark/long_runs.sh's ppo_atari_lstm.py run on the same game (kept
# in $LONG) and each evaluation record in $KEPT.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10000000}
ORDER="envpool:1 atari:1 envpool:2 envpool:3"  # run:seed, in the order they run
RUNS=${RUNS:-envpool atari}
SEEDS=${SEEDS:-1 2 3}
OUT=${OUT:-benchmark/out/breakout}
KEPT=${KEPT:-benchmark/results/breakout}
LONG=${LONG:-benchmark/results/long_runs}  # the files benchmark/long_runs.sh keeps
REPORT_OUT=${REPORT_OUT:-$KEPT}  # the report: $REPORT_OUT.md, its plots in $REPORT_OUT/
COMMON="--total-timesteps $STEPS --save-model --checkpoint-every 100"

source benchmark/keep.sh

report() {  # the report from the kept runs, long_runs.sh's LSTM run among them, with each evaluation record
    local runs=("$KEPT/runs") sweeps=("$KEPT"/state_*) notes=() record label script
    if [ -d "$LONG/state_lstm" ]; then
        runs+=("$LONG/runs")
        sweeps+=("$LONG/state_lstm")
    fi
    for record in "$KEPT"/eval_*.txt; do
        [ -e "$record" ] || continue
        label=$(basename "$record" .txt)
        label=${label#eval_}
        # the record's first line: "# <script>, <run>: ..."
        script=$(head -n 1 "$record" | cut -d, -f1)
        notes+=(--note "${script#\# } seed ${label##*_seed}, its final checkpoint in whole games (--eval-checkpoint): \
$(eval_summary "$record") ([returns and command](${KEPT##*/}/eval_$label.txt); \
[the first game](${KEPT##*/}/${label}_eval.gif)).")
    done
    python benchmark/report.py --runs "${runs[@]}" --sweep "${sweeps[@]}" --thresholds 100 200 300 400 \
        --window-steps 1000000 --out "$REPORT_OUT" --title "Breakout: 10M steps" \
        --note "Command: \`bash benchmark/breakout.sh\` (one run at a time, each script's defaults, no target; a run \
stopped at the end of a session continues from its checkpoint with --resume, the pauses left out of Wall and training \
time); ppo_atari_lstm.py's run: \`bash benchmark/long_runs.sh\`, the same way. Intel Xeon (AVX-512) or AMD EPYC \
(AVX-512 or AVX2), 2 cores (each run's machine: Commands and machines). Done: ppo_atari_envpool.py seeds 1 \
(2026-11-29), 2 (2026-12-02) and 3 (2026-12-04), ppo_atari.py seed 1 (2026-12-02)." \
        --note "Report: \`REPORT=1 bash benchmark/breakout.sh\` (benchmark/report.py on the kept files)." \
        "${notes[@]}"
}

if [ -n "${KEEP:-}" ]; then
    keep_runs "$OUT" "$KEPT"
    exit 0
fi
if [ -n "${REPORT:-}" ]; then
    report
    exit 0
fi
for name in $RUNS; do
    case $name in envpool | atari) ;; *) echo "breakout.sh: unknown run '$name' (envpool, atari)" >&2; exit 2 ;; esac
done
[ -d "$OUT/runs" ] || copy_runs "$KEPT" "$OUT"  # a new machine: the committed runs go on from their checkpoints

for item in $ORDER; do
    name=${item%%:*} seed=${item#*:}
    [[ " $RUNS " == *" $name "* && " $SEEDS " == *" $seed "* ]] || continue
    case $name in
        envpool) command="python ppo_atari_envpool.py $COMMON"; env_id=Breakout-v5 ;;
        atari) command="python ppo_atari.py $COMMON"; env_id=BreakoutNoFrameskip-v4 ;;
    esac
    python benchmark/run.py --command "$command" --env-ids $env_id --seeds "$seed" --workers 1 --cwd "$OUT" \
        --out "$OUT/state_$name"
done
