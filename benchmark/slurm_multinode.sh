#!/bin/bash
# One run of ppo_atari_multigpu.py over several machines of a Slurm cluster: srun starts one torchrun on every node
# of the allocation, and the torchruns meet (c10d rendezvous) at the first node. Submit it from the folder that
# holds ppo_atari_multigpu.py (the run lands in its runs/); the arguments after the script's name go to
# ppo_atari_multigpu.py:
#
#   sbatch benchmark/slurm_multinode.sh --env-id BreakoutNoFrameskip-v4 --seed 1 --num-envs 16
#   NPROC=4 sbatch --gpus-per-node=4 benchmark/slurm_multinode.sh --backend nccl --num-envs 32 --checkpoint-every 50
#   sbatch benchmark/slurm_multinode.sh --resume runs/<run>/ppo_atari_multigpu.pt   # continue a stopped run
#
# What to change for your cluster: the #SBATCH lines below (machines, cores per machine, time, partition; GPUs: take
# away one '#' of the gpus-per-node line), and NPROC, the training processes per machine (one per GPU; on CPUs with
# gloo, any number up to the cores). --num-envs must be a multiple of machines x NPROC. An option given to sbatch
# overrides the line of the same name below. Only rank 0 writes runs/ and the checkpoint, so the folder must be
# shared by the machines (as home folders on a cluster are) for --resume to find it on any node.
#
# A stop (scancel, the time limit, a preemption) reaches every process: each rank stops at the same iteration,
# rank 0 saves the checkpoint when the run has --checkpoint-every or --save-model, and the run continues with
# --resume as above. Slurm's output file, %x-%j.out by default, holds every node's lines, each led by its task
# number (srun --label).
#
#SBATCH --job-name=ppo-multinode
#SBATCH --nodes=2                  # machines
#SBATCH --ntasks-per-node=1        # one torchrun per machine: keep it at 1
#SBATCH --cpus-per-task=8          # cores per machine, for its NPROC processes and their envs
##SBATCH --gpus-per-node=4        # GPUs per machine: remove one '#' (and set NPROC and --backend nccl)
#SBATCH --time=24:00:00
##SBATCH --partition=gpu          # remove one '#' to pick a partition
#SBATCH --output=%x-%j.out
set -euo pipefail

NPROC=${NPROC:-2}                                   # training processes per machine
SCRIPT=${SCRIPT:-ppo_atari_multigpu.py}             # relative to the folder sbatch was called from
PORT=${PORT:-$((29500 + ${SLURM_JOB_ID:-0} % 1000))}  # the rendezvous port on the first node; per job, so that two
                                                    # jobs whose first node is the same machine do not collide
if [ -z "${SLURM_JOB_ID:-}" ]; then
    echo "slurm_multinode.sh: error: submit it with sbatch (it runs inside a Slurm allocation)" >&2
    exit 2
fi
if [ ! -f "$SCRIPT" ]; then
    echo "slurm_multinode.sh: error: $SCRIPT not found in $(pwd): submit from the repo's folder" >&2
    exit 2
fi
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
echo "job $SLURM_JOB_ID: $SLURM_NTASKS torchrun(s) x $NPROC process(es), rendezvous at $head:$PORT"

# One torchrun per task, so --nnodes is the number of tasks (= machines, with one task per machine). srun does not
# pass --cpus-per-task on to its tasks by itself, hence the flag; --kill-on-bad-exit: a machine whose torchrun fails
# stops the others.
srun --label --kill-on-bad-exit=1 --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" \
    torchrun --nnodes="$SLURM_NTASKS" --nproc-per-node="$NPROC" \
    --rdzv-backend=c10d --rdzv-endpoint="$head:$PORT" --rdzv-id="$SLURM_JOB_ID" \
    "$SCRIPT" "$@"
