#!/usr/bin/env bash
# Speed check: time a script or a command, or up to four against each other. Each run happens in a scratch folder
# (with links to the files of the folder you call it from and to the repo's ppo*.py), so nothing is left in runs/.
#
#   bash benchmark/speed.sh                            # each script of the list below once, at its budget
#   bash benchmark/speed.sh ppo.py                     # one script, REPEATS times
#   bash benchmark/speed.sh ppo.py ppo_mod.py          # A against B: A, B, A, B, ... REPEATS each; ratio B/A
#   bash benchmark/speed.sh A B C                      # up to four (A to D) in turn; ratios B/A, C/A
#   bash benchmark/speed.sh "python ppo.py --total-timesteps \$STEPS" "python ppo.py --num-envs 8 --total-timesteps \$STEPS"
#   STEPS=100000 REPEATS=5 bash benchmark/speed.sh ppo.py ppo_mod.py
#
# A to D: a script (*.py: run as `python SCRIPT` with its arguments from the list below, or --total-timesteps $STEPS
# for a script not in the list) or a command in quotes (run by bash; it may use $STEPS). Scripts timed together run
# with the same arguments: those of the first one in the list, else --total-timesteps $STEPS (so ppo.py against your
# copy ppo_mod.py times both on CartPole-v1 at 500k steps). STEPS: the budget (default: the list's; 50000 for other
# scripts and commands). REPEATS: runs of each (default 3; 1 without arguments). Taking turns spreads a change in the
# machine's load over all of them. Per run: the wall time and the last "SPS" the run printed (env steps per second,
# start-up excluded); per A, B, ...: the median and the range (min-max); with two or more, the ratios of the medians
# to A's. The CPU model (with AVX-512 or AVX2 where it has them), the core count and the load average are printed
# before and after: on a shared machine the numbers move with the load, and machines of one kind differ (name the CPU
# beside the figures).
# Stopped (Ctrl-C, kill), it stops the run under way first. Exit code: 0, 1 when a run failed, 2 for bad arguments,
# 130 or 143 when stopped.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
here=$(pwd)
user_steps=${STEPS:-}
export STEPS=${STEPS:-50000}

die() {
    echo "speed.sh: error: $*" >&2
    exit 2
}

# budget SCRIPT: the arguments it runs with; the list of scripts timed without arguments
budget() {
    case $1 in
        ppo.py) echo "--env-id CartPole-v1 --total-timesteps ${user_steps:-500000}" ;;                 # CleanRL here: 9107
        ppo_continuous_action.py) echo "--env-id HalfCheetah-v4 --total-timesteps ${user_steps:-50000}" ;;  # CleanRL here: 1930
        ppo_atari_envpool.py) echo "--env-id Breakout-v5 --total-timesteps ${user_steps:-50000}" ;;    # CleanRL here: 446
        ppo_multidiscrete_mask.py) echo "--total-timesteps ${user_steps:-50000}" ;;                    # no CleanRL figure
        ppo_atari.py) echo "--env-id BreakoutNoFrameskip-v4 --total-timesteps ${user_steps:-16384}" ;; # no CleanRL figure
        *) echo "--total-timesteps $STEPS" ;;
    esac
}
LIST="ppo.py ppo_continuous_action.py ppo_atari_envpool.py ppo_multidiscrete_mask.py ppo_atari.py"

[ $# -le 4 ] || die "at most four scripts or commands (A to D), got $#"
for arg in "$@"; do
    case $arg in
        -h | --help) sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $arg (see bash benchmark/speed.sh --help)" ;;
        *" "*) ;;
        *.py) [ -f "$here/$arg" ] || [ -f "$repo/$arg" ] || die "$arg: no such script here or in $repo" ;;
        *) die "$arg: neither a script (*.py) nor a command in quotes" ;;
    esac
done
case ${REPEATS:-} in
    "") REPEATS=$([ $# -eq 0 ] && echo 1 || echo 3) ;;
    *[!0-9]* | 0) die "REPEATS must be a positive integer, got '$REPEATS'" ;;
esac

# in_list SCRIPT: whether the list above gives SCRIPT its own arguments
in_list() {
    [ "$(budget "$1")" != "--total-timesteps $STEPS" ]
}

# command_of ARG [ARGUMENTS]: the command line of a script (with ARGUMENTS, else its own from the list) or a command
command_of() {
    case $1 in
        *" "*) echo "$1" ;;
        *) echo "python $1 ${2:-$(budget "$1")}" ;;
    esac
}

# the arguments the scripts timed together get: the first's in the list (else each gets --total-timesteps $STEPS)
shared=
if [ $# -ge 2 ]; then
    for arg in "$@"; do
        case $arg in *" "*) shared=; break ;; esac  # a command in quotes brings its own arguments
        if [ -z "$shared" ] && in_list "$arg"; then shared=$(budget "$arg"); fi
    done
fi

scratch=$(mktemp -d)
child=  # the run under way: its own process group (set -m below), stopped with it when speed.sh is stopped
stop() {
    if [ -n "$child" ]; then
        kill -TERM -- "-$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    rm -rf "$scratch"
    exit "$1"
}
trap 'rm -rf "$scratch"' EXIT
trap 'stop 130' INT
trap 'stop 143' TERM
trap 'stop 129' HUP
for f in "$repo"/ppo*.py "$here"/*; do
    if [ -f "$f" ]; then ln -sf "$f" "$scratch/"; fi
done

names=()
commands=()
if [ $# -eq 0 ]; then
    for script in $LIST; do names+=("$script"); commands+=("$(command_of "$script")"); done
else
    labels=(A B C D)
    for arg in "$@"; do
        names+=("${labels[${#names[@]}]}")
        commands+=("$(command_of "$arg" "$shared")")
    done
fi

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n 1)  # else lscpu's, else unknown
cpu=${cpu:-$(LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p')}
# the widest vector instructions: CPUs named alike ("AMD EPYC") differ in them, and the float kernels with them
simd=$(grep -q -w avx512f /proc/cpuinfo 2>/dev/null && echo AVX-512 || { grep -q -w avx2 /proc/cpuinfo 2>/dev/null && echo AVX2; })
load() {
    echo "${cpu:-unknown CPU}${simd:+ ($simd)}, $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC') $(load); $REPEATS run(s) each, in a scratch folder"
for i in "${!names[@]}"; do echo "# ${names[$i]}: ${commands[$i]}"; done

status=0
for ((r = 1; r <= REPEATS; r++)); do
    for i in "${!names[@]}"; do
        name=${names[$i]}
        log="$scratch/log.$i.$r"
        t0=$(date +%s.%N)
        set -m  # the run in a process group of its own, which stop() ends as a whole
        (cd "$scratch" && exec bash -c "${commands[$i]}") > "$log" 2>&1 < /dev/null &
        child=$!
        set +m
        wait "$child"
        rc=$?
        child=
        t1=$(date +%s.%N)
        wall=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
        sps=$(grep -o 'SPS:\? *[0-9.]*' "$log" | tail -1 | grep -o '[0-9.]*$')
        if [ $rc -ne 0 ]; then
            last=$(grep -v '^\s*$' "$log" | tail -1)
            echo "$name run $r: failed (exit $rc): ${last:-(no output)}"
            status=1
            continue
        fi
        echo "$wall ${sps:-nan}" >> "$scratch/times.$i"
        echo "$name run $r: ${wall} s${sps:+, SPS $sps}"
    done
done

python3 - "$scratch" "${names[@]}" <<'EOF'
import math, statistics, sys
from pathlib import Path

scratch, names = Path(sys.argv[1]), sys.argv[2:]
medians = []
for i, name in enumerate(names):
    path = scratch / f"times.{i}"
    rows = [tuple(map(float, line.split())) for line in path.read_text().splitlines()] if path.exists() else []
    if not rows:
        print(f"{name}: no successful run")
        medians.append(None)
        continue
    walls = [w for w, _ in rows]
    sps = [s for _, s in rows if not math.isnan(s)]
    line = f"{name}: wall median {statistics.median(walls):.2f} s (range {min(walls):.2f}-{max(walls):.2f}, {len(walls)} runs)"
    if sps:
        line += f", SPS median {statistics.median(sps):.0f} (range {min(sps):.0f}-{max(sps):.0f})"
    print(line)
    medians.append((statistics.median(walls), statistics.median(sps) if sps else None))
for name, median in zip(names[1:], medians[1:]):  # each against A
    if medians[0] is None or median is None:
        continue
    (wa, sa), (wb, sb) = medians[0], median
    line = f"ratio {name}/A: wall {wb / wa:.3f}" if wa > 0 else f"ratio {name}/A: wall —"
    if sa and sb:
        line += f", SPS {sb / sa:.3f}"
    print(line)
EOF
echo "# after: $(load)"
exit $status
