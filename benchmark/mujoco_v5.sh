#!/usr/bin/env bash
# MuJoCo as gymnasium 1.x ships it: ppo_continuous_action.py on the -v5 envs, 1M steps, the script's defaults.
#   reference  HalfCheetah-v5, Hopper-v5, Walker2d-v5 x seeds 1-3, as ppo2 treats time limits and with
#              --bootstrap-truncated [X5]: benchmark/bootstrap_truncated.sh on the v5 ids (18 runs), to set beside
#              the v4 rows (benchmark/results/mujoco.md, benchmark/results/bootstrap_truncated/mujoco.md)
#   v4         Hopper-v4 and Walker2d-v4 x seeds 1-3, the default arm, on the machine of the reference part: the
#              -v4 baseline to set the -v5 runs beside (seeded runs are bit-identical on one machine only; HalfCheetah-v4
#              needs no run: it is HalfCheetah-v5 step for step, test_halfcheetah_v5_is_v4_step_for_step)
#   wide       Ant, Humanoid, HumanoidStandup, InvertedPendulum, InvertedDoublePendulum, Pusher, Reacher and Swimmer
#              (-v5), seed 1 each: no published PPO figure for these is among the project's references, so the
#              report ends with random play's return in each env, the floor
#
#   bash benchmark/mujoco_v5.sh                       # all three parts
#   PARTS=wide WORKERS=2 bash benchmark/mujoco_v5.sh  # the wide part, two runs at once
#   PARTS=v4 bash benchmark/mujoco_v5.sh              # the v4 baseline, two runs at once (WORKERS=2 its default)
#
# Time: a 1M-step run took 10-20 minutes on this project's 2-core machines (docs/speed.md). The script trains on one
# thread, so two runs share the two cores: the reference part runs its two arms side by side (WORKERS per arm), the
# v4 and wide parts WORKERS runs at once. Not while a long Atari run trains. Restartable, as every sweep here.
# Runs, logs and state under $OUT (gitignored); the reports in $OUT/reference/report.md and $OUT/wide/report.md. The
# committed ones (benchmark/results/mujoco_v5.md with the v4 rows, mujoco_v5_wide.md) are report.py on the runs and
# state files copied there, e.g. python benchmark/report.py --runs benchmark/results/mujoco_v5/runs \
#     --sweep benchmark/results/mujoco_v5/state_* --out benchmark/results/mujoco_v5 --title ... --note ...
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-1000000}
PARTS=${PARTS:-reference v4 wide}
OUT=${OUT:-benchmark/out/mujoco_v5}
WIDE=${WIDE:-Ant-v5 Humanoid-v5 HumanoidStandup-v5 InvertedPendulum-v5 InvertedDoublePendulum-v5 Pusher-v5 Reacher-v5
Swimmer-v5}
RANDOM_ENVS=${RANDOM_ENVS:-10}  # whole episodes of random play per env (one per env, env i seeded with 1 + i)

for part in $PARTS; do
    case $part in
        reference)
            STEPS=$STEPS ENVS="HalfCheetah-v5 Hopper-v5 Walker2d-v5" OUT="$OUT/reference" \
                bash benchmark/bootstrap_truncated.sh ;;
        v4)
            python benchmark/run.py --command "python ppo_continuous_action.py --total-timesteps $STEPS" \
                --env-ids Hopper-v4 Walker2d-v4 --seeds ${SEEDS:-1 2 3} --workers "${WORKERS:-2}" --cwd "$OUT/reference" \
                --out "$OUT/reference/v4" ;;
        wide)
            python benchmark/run.py --command "python ppo_continuous_action.py --total-timesteps $STEPS" \
                --env-ids $WIDE --seeds 1 --workers "${WORKERS:-1}" --cwd "$OUT/wide" --out "$OUT/wide/state"
            python benchmark/report.py --runs "$OUT/wide/runs" --sweep "$OUT/wide/state" --out "$OUT/wide/report" \
                --title "MuJoCo -v5, the other envs (ppo_continuous_action.py, $STEPS steps, seed 1)" \
                --note "Command: STEPS=$STEPS PARTS=wide bash benchmark/mujoco_v5.sh"
            python benchmark/random_play.py --env-id $WIDE --num-envs "$RANDOM_ENVS" --episodes-per-env 1 \
                --markdown >> "$OUT/wide/report.md" ;;
        *) echo "mujoco_v5.sh: unknown part '$part' (reference, v4, wide)" >&2; exit 2 ;;
    esac
done
