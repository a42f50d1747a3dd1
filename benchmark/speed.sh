#!/usr/bin/env bash
# Speed check: each script's steps per second (its last progress line's SPS: env steps over the time since training
# started, start-up excluded) at the budgets at which CleanRL was measured on this machine kind
# (benchmark/reference.csv, "CleanRL here"). Run it on a quiet machine, one script at a time; each run happens in a
# scratch folder, so nothing is left in runs/.
#
#   bash benchmark/speed.sh                     # every script below
#   bash benchmark/speed.sh ppo.py              # only the lines whose script is named
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# speed SCRIPT ARGS...: run the script with its defaults but ARGS, print its last progress line
speed() {
    local script=$1
    shift
    if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $script "* ]]; then
        return
    fi
    (cd "$scratch" && python "$repo/$script" "$@" > "$scratch/out.log" 2>&1) || { echo "$script: failed"; tail -3 "$scratch/out.log"; return; }
    echo "$script $* | $(grep '^step' "$scratch/out.log" | tail -1)"
}

ONLY="$*"
echo "# $(date -u +%Y-%m-%d) $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
speed ppo.py --env-id CartPole-v1 --total-timesteps 500000                                # CleanRL here: 9107
speed ppo_continuous_action.py --env-id HalfCheetah-v4 --total-timesteps 50000            # CleanRL here: 1930
speed ppo_atari_envpool.py --env-id Breakout-v5 --total-timesteps 50000                   # CleanRL here: 446
speed ppo_multidiscrete_mask.py --total-timesteps 50000                                   # no CleanRL figure
speed ppo_atari.py --env-id BreakoutNoFrameskip-v4 --total-timesteps 16384                # no CleanRL figure
