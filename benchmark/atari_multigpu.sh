#!/usr/bin/env bash
# Atari with ppo_atari_multigpu.py: the rows of the reference table (shared/reference-results.md), Breakout, Pong and
# BeamRider (NoFrameskip-v4) x seeds 1-3 x 10M agent steps, each run data-parallel over $NPROC torchrun processes
# (8 envs in all, 8 / NPROC per process). Compare with ppo_atari.py's rows of benchmark/atari.sh: the same returns
# are expected (the gradient of each mini-batch is the mean over all processes), in less time.
# Needs the atari extra (pip install ale-py opencv-python-headless) and matplotlib for plots.
#
#   bash benchmark/atari_multigpu.sh                                     # full sweep: 9 runs of 2 processes, gloo
#   BACKEND=nccl DEVICE_IDS="0 1" bash benchmark/atari_multigpu.sh      # 2 GPUs, one process each
#   DEVICE_IDS="0 0" bash benchmark/atari_multigpu.sh                   # 2 processes sharing GPU 0 (gloo only:
#                                                                        # NCCL refuses two processes on one GPU)
#   STEPS=100000 SEEDS=1 ENVS=BreakoutNoFrameskip-v4 OUT=benchmark/out/atari_multigpu_scaled \
#       bash benchmark/atari_multigpu.sh                                 # a scaled run
#
# Each run is `torchrun --standalone --nproc_per_node=$NPROC ppo_atari_multigpu.py ... --env-id ENV --seed SEED`;
# --standalone picks a free port per run, so WORKERS runs can go at once (each uses NPROC CPU cores for its envs).
# Several machines per run: see docs/multigpu.md (torchrun --nnodes, --rdzv-backend c10d, --rdzv-endpoint) and, on
# Slurm, benchmark/slurm_multinode.sh; this script runs single-machine launches only.
# Restartable: run it again after a Ctrl-C or a failure and only the unfinished runs run (benchmark/run.py).
# Runs, logs and state go to $OUT (default benchmark/out/atari_multigpu, gitignored); the report to $REPORT.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-10000000}
SEEDS=${SEEDS:-1 2 3}
ENVS=${ENVS:-BreakoutNoFrameskip-v4 PongNoFrameskip-v4 BeamRiderNoFrameskip-v4}
NPROC=${NPROC:-2}
BACKEND=${BACKEND:-gloo}
DEVICE_IDS=${DEVICE_IDS:-}  # empty: local rank modulo the number of GPUs
WORKERS=${WORKERS:-1}
OUT=${OUT:-benchmark/out/atari_multigpu}
REPORT=${REPORT:-$OUT/report}

mkdir -p "$OUT"
flags="--backend $BACKEND --total-timesteps $STEPS"
if [ -n "$DEVICE_IDS" ]; then
    flags="$flags --device-ids $DEVICE_IDS"
fi

# --threads 1: each process uses one torch thread anyway, and the emulators are single-threaded
python benchmark/run.py \
    --command "torchrun --standalone --nproc_per_node=$NPROC ppo_atari_multigpu.py $flags" \
    --env-ids $ENVS \
    --seeds $SEEDS \
    --workers "$WORKERS" \
    --threads 1 \
    --cwd "$OUT" \
    --out "$OUT/state"

python benchmark/report.py --runs "$OUT/runs" --sweep "$OUT/state" --out "$REPORT" \
    --title "Atari, data-parallel (ppo_atari_multigpu.py, $NPROC processes, $BACKEND, $STEPS steps)" \
    --note "Command: STEPS=$STEPS SEEDS='$SEEDS' ENVS='$ENVS' NPROC=$NPROC BACKEND=$BACKEND DEVICE_IDS='$DEVICE_IDS' bash benchmark/atari_multigpu.sh"
