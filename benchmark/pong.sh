#!/usr/bin/env bash
# Pong solved on a CPU: the blog's tuned envpool settings (--clip-coef 0.2 --num-envs 16 --num-minibatches 8
# --num-steps 128 --update-epochs 3), the learning rate annealed over the default 10M steps, each run ended by
# --target-return 20 once the mean of its last 20 games reaches 20 (Pong's maximum is 21). The runs:
#   envpool   ppo_atari_envpool.py on Pong-v5, seeds 1 2 3 (the headline)
#   atari     ppo_atari.py on PongNoFrameskip-v4, seed 1 (envpool changes the speed, not the learning: the same
#             settings on gymnasium's ALE envs)
#   multigpu  ppo_atari_multigpu.py on PongNoFrameskip-v4 under torchrun, 2 processes (gloo, one per core), seed 1: the
#             same global batch as atari's, 16 envs split over the two (the curve is rank 0's 8 envs' games)
#   lstm      ppo_atari_lstm.py on PongNoFrameskip-v4, seed 1 (one frame, an LSTM: slower in its first 1M steps)
#
#   bash benchmark/pong.sh                        # envpool and atari, one run after the other, on all cores
#   RUNS=envpool SEEDS=1 bash benchmark/pong.sh   # only ppo_atari_envpool.py, seed 1
#   RUNS="multigpu lstm" bash benchmark/pong.sh   # the variants
#
# Time: about 300 steps/s on 2 cores, so some 2-4 hours a run. Run nothing else meanwhile (the report gives each run's
# speed and the machine's load). Restartable: stopped (Ctrl-C, SIGTERM, a closed terminal), it continues each
# unfinished run from its last checkpoint (--checkpoint-every) when started again; a run that reached its target is
# done. Runs, logs and state go to $OUT (default benchmark/out/pong, gitignored): commit each run's event files and
# args.json as it stops (a new machine keeps nothing else), and the checkpoint of one to be continued on another
# machine (copied back into $OUT with its state file, it goes on); then make the report (leave out a state folder
# not made):
#   python benchmark/report.py --runs benchmark/out/pong/runs \
#       --sweep benchmark/out/pong/state_* --thresholds 18 20 --window-steps 1000000 \
#       --out benchmark/results/pong --title "Pong: steps and training time to 18 and 20" --note "Command: bash benchmark/pong.sh"
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10000000}
SEEDS=${SEEDS:-1 2 3}
RUNS=${RUNS:-envpool atari}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-25}  # iterations of 2,048 steps: a few minutes each here
OUT=${OUT:-benchmark/out/pong}
TUNED="--clip-coef 0.2 --num-envs 16 --num-minibatches 8 --num-steps 128 --update-epochs 3"
COMMON="--total-timesteps $STEPS --target-return 20 --save-model --checkpoint-every $CHECKPOINT_EVERY $TUNED"

for name in $RUNS; do
    case $name in
        envpool) command="python ppo_atari_envpool.py $COMMON"; env_id=Pong-v5; seeds=$SEEDS ;;
        atari) command="python ppo_atari.py $COMMON"; env_id=PongNoFrameskip-v4; seeds=1 ;;
        multigpu) command="torchrun --standalone --nproc_per_node=2 ppo_atari_multigpu.py $COMMON"
                  env_id=PongNoFrameskip-v4; seeds=1 ;;
        lstm) command="python ppo_atari_lstm.py $COMMON"; env_id=PongNoFrameskip-v4; seeds=1 ;;
        *) echo "pong.sh: unknown run '$name' (envpool, atari, multigpu, lstm)" >&2; exit 2 ;;
    esac
    python benchmark/run.py --command "$command" --env-ids $env_id --seeds $seeds --workers 1 --cwd "$OUT" \
        --out "$OUT/state_$name"
done
