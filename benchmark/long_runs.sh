#!/usr/bin/env bash
# The long runs that show ppo_procgen.py and ppo_atari_lstm.py at scale, each script with its defaults, seed 1, one
# run at a time on both cores, over as many sessions as they take. In this order:
#   starpilot, bigfish, bossfight   ppo_procgen.py (easy, 64 envs x 256 steps, learning rate 5e-4 constant, 25M
#                                   total), each to UNTIL steps (default 5M) before the next game starts. The
#                                   learning rate is constant, so the first 5M steps of a 25M run are the whole run
#                                   stopped there; UNTIL=25000000 later takes each on to the end.
#   lstm                            ppo_atari_lstm.py on BreakoutNoFrameskip-v4, the whole 10M
# The published figures: train-procgen's own runs at the same steps (benchmark/train_procgen.csv, extracted by
# benchmark/train_procgen.py) and CleanRL's ppo_atari_lstm.py on Breakout, 128.92 ± 31.10 at 10M
# (shared/reference-results.md). The procgen report, benchmark/results/procgen.md, is made from the kept files by
# REPORT=1 (report, below), with each evaluation made so far; the LSTM run is in the Breakout report,
# benchmark/results/breakout.md (REPORT=1 bash benchmark/breakout.sh).
# Each game parked at UNTIL, and the LSTM run once done, is then evaluated (evaluate_run, benchmark/keep.sh): its
# agent plays 100 episodes (procgen: $EVALS/procgen/eval_<game>_seed1.txt) or 10 games (the LSTM, as the other
# Breakout runs: $EVALS/breakout/eval_BreakoutNoFrameskip-v4_lstm_seed1.txt), the first one kept as a GIF.
#
#   bash benchmark/long_runs.sh                  # every run not yet at its step, in that order
#   RUNS=lstm bash benchmark/long_runs.sh        # only the LSTM run
#   KEEP=1 bash benchmark/long_runs.sh           # copy what $OUT holds into $KEPT, to commit (benchmark/keep.sh)
#   REPORT=1 bash benchmark/long_runs.sh         # the procgen report from $KEPT: $EVALS/procgen.md
#
# Time: ppo_procgen.py trains at ~80-180 steps/s on 2 cores alone (8-16 h to 5M: benchmark/results/procgen.md and
# procgen_scaled.md), ppo_atari_lstm.py at ~300 (9 h to 10M: its Pong run, benchmark/results/pong.md).
# Restartable: a run stopped (Ctrl-C, SIGTERM) continues from its last checkpoint (every 5 iterations for procgen,
# 81,920 steps; every 100 for the LSTM, 102,400 steps) when this is started again; a stop comes at the end of the
# iteration under way (up to 3 min for procgen on a CPU: --grace gives it that). At the end of every session in which
# a run is unfinished: stop it, KEEP=1 and REPORT=1 bash benchmark/long_runs.sh, and commit $KEPT and the report (one
# path per run, overwritten). Started in the background (setsid ... &), it is stopped through its runner:
# `kill -INT $(pgrep -f benchmark/run.py)`; during an evaluation there is none: `pkill -f -- --eval-checkpoint` ends
# it, and it is made again the next time (its record and GIF are written only once it has ended).
# A procgen run parked at UNTIL keeps its optimizer's state, so that it goes on towards 25M as if never stopped; a
# done run keeps only its weights. Started on a new machine, this copies the kept files back into $OUT first.
set -euo pipefail
cd "$(dirname "$0")/.."
# its settings are variables: a word after the command is a mistake (REPORT=1 typed after it), not a request
if [ $# -gt 0 ]; then
    echo "long_runs.sh: takes no arguments, got '$*' (set KEEP=1, REPORT=1, RUNS=..., UNTIL=... before the command)" >&2
    exit 2
fi
UNTIL=${UNTIL:-5000000}
POLL=${POLL:-60}  # seconds between two looks at a procgen run's checkpoint
RUNS=${RUNS:-starpilot bigfish bossfight lstm}
OUT=${OUT:-benchmark/out/long_runs}
KEPT=${KEPT:-benchmark/results/long_runs}
EVALS=${EVALS:-benchmark/results}  # the evaluations go to $EVALS/procgen and $EVALS/breakout, beside their reports
# The evaluations' GIFs (benchmark/keep.sh): 16 colours. A procgen mp4 holds the game's 64x64 frames at 15 frames/s,
# kept as they are; an Atari one every emulator frame at 30 frames/s, one of every eight kept, at 15 frames/s (twice
# real speed, as the other Breakout GIFs).
COLOURS="split[a][b];[a]palettegen=max_colors=16[p];[b][p]paletteuse=dither=none"
PROCGEN_GIF=$COLOURS
ATARI_GIF="setpts=PTS/4,fps=15,$COLOURS"

source benchmark/keep.sh

report() {  # the procgen report from the kept runs, against train-procgen's, with the evaluations made so far
    local notes=() record game step summary
    for record in "$EVALS"/procgen/eval_*_seed1.txt; do
        [ -e "$record" ] || continue
        game=$(basename "$record" _seed1.txt)
        game=${game#eval_}
        step=$(sed -n 's/.*its checkpoint at step \([0-9,]*\),.*/\1/p' "$record")
        summary=$(eval_summary "$record")
        notes+=(--note "Evaluated: $game at step $step, $summary of its stochastic policy, by --eval-checkpoint \
([returns and command](procgen/eval_${game}_seed1.txt); [the first episode](procgen/${game}_seed1_eval.gif)).")
    done
    python benchmark/report.py --runs "$KEPT/runs" --sweep "$KEPT/state_procgen" --last 100 \
        --published-curves benchmark/train_procgen.csv --out "$EVALS/procgen" \
        --title "Procgen (easy): ppo_procgen.py against train-procgen's runs" \
        "${notes[@]}" \
        --note "Report: \`REPORT=1 bash benchmark/long_runs.sh\` (benchmark/report.py on the kept files)." \
        --note "Training: \`bash benchmark/long_runs.sh\`: ppo_procgen.py with its defaults (easy, all levels, 64 envs \
x 256 steps, 8 mini-batches, 3 epochs, learning rate 5e-4 constant, gamma 0.999, 25M total), seed 1, on starpilot, \
then bigfish, then bossfight, each to at least 5M steps, over several sessions on 2-core CPU machines without a GPU; \
what each session did is kept in \`benchmark/results/long_runs/\` (event files, checkpoint, benchmark/run.py's state \
and log)." \
        --note "Published: train-procgen's own runs (openai/train-procgen, the Procgen paper's code: baselines ppo2 with \
the hyperparameters of its train_procgen/train.py, which ppo_procgen.py's defaults take; the procgen library's games, \
ours envpool's; 3 runs a game, easy, all levels, to 50M steps), their eprewmean as \`python benchmark/train_procgen.py\` \
extracted it. Their own plots (train_procgen/graph.py) leave out each run's first 10 updates and smooth with an EMA of \
0.9; the figures here are not smoothed." \
        --note "Earlier: one 1M-step starpilot run before the fidelity changes ([procgen_scaled.md](procgen_scaled.md)); \
the CPU time of the IMPALA CNN in NCHW and channels_last memory ([docs/speed.md](../../docs/speed.md#cnn-memory-layout))."
}

if [ -n "${KEEP:-}" ]; then
    keep_runs "$OUT" "$KEPT"
    exit 0
fi
if [ -n "${REPORT:-}" ]; then
    report
    exit 0
fi
[ -d "$OUT/runs" ] || copy_runs "$KEPT" "$OUT"  # a new machine: the committed runs go on from their checkpoints

checkpoint() {  # checkpoint GAME: the path of the game's checkpoint under $OUT/runs, relative to $OUT; none: nothing
    (cd "$OUT" && ls runs/"$1"__*__1__*/*.pt 2>/dev/null | head -n 1)
}

checkpoint_step() {  # checkpoint_step GAME: the step of the game's last checkpoint in $OUT, 0 if none
    local path
    path=$(checkpoint "$1")
    [ -n "$path" ] || { echo 0; return; }
    global_step "$OUT/$path"
}

train_procgen() {  # train_procgen GAME: the game's run, started or continued, until its checkpoint reaches UNTIL
    python benchmark/run.py --command "python ppo_procgen.py --save-model --checkpoint-every 5" \
        --env-ids "$1" --seeds 1 --workers 1 --grace 600 --cwd "$OUT" --out "$OUT/state_procgen" &
    local runner=$!
    # The runner stops the run (SIGTERM) once its checkpoint has reached UNTIL (it then stays resumable).
    while kill -0 $runner 2>/dev/null; do
        sleep "$POLL"
        if [ "$(checkpoint_step "$1")" -ge "$UNTIL" ]; then
            kill -TERM $runner
            break
        fi
    done
    wait $runner || [ "$(checkpoint_step "$1")" -ge "$UNTIL" ]
}

for name in $RUNS; do
    case $name in
        starpilot | bigfish | bossfight)
            if [ "$(checkpoint_step "$name")" -lt "$UNTIL" ]; then
                train_procgen "$name"
            fi
            # parked at UNTIL: its agent plays 100 episodes (once at each step it is parked at), the first as a GIF
            if [ "$(checkpoint_step "$name")" -ge "$UNTIL" ]; then
                evaluate_run "$OUT" "$EVALS/procgen" "${name}_seed1" 100 "$PROCGEN_GIF" "$(checkpoint "$name")" \
                    ppo_procgen.py
            fi
            ;;
        lstm)
            python benchmark/run.py \
                --command "python ppo_atari_lstm.py --total-timesteps 10000000 --save-model --checkpoint-every 100" \
                --env-ids BreakoutNoFrameskip-v4 --seeds 1 --workers 1 --grace 600 --cwd "$OUT" --out "$OUT/state_lstm"
            # done: its agent plays 10 games, the first as a GIF, beside the other Breakout runs' evaluations
            if [ -n "$(checkpoint BreakoutNoFrameskip-v4)" ]; then
                evaluate_run "$OUT" "$EVALS/breakout" BreakoutNoFrameskip-v4_lstm_seed1 10 "$ATARI_GIF" \
                    "$(checkpoint BreakoutNoFrameskip-v4)" ppo_atari_lstm.py
            fi
            ;;
        *)
            echo "long_runs.sh: unknown run '$name' (starpilot, bigfish, bossfight, lstm)" >&2
            exit 2
            ;;
    esac
done
