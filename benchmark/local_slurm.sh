#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for trying `benchmark/run.py --slurm` and for the tests: munged,
# slurmctld and slurmd, run as the current user (root in CI), with their config, keys, state and logs in one folder.
# Needs Debian's (or Ubuntu's) packages: apt-get install slurmctld slurmd slurm-client munge
#
#   bash benchmark/local_slurm.sh start [DIR]   # DIR (default: a new folder under /tmp) holds everything; prints
#                                               # the line to paste: export SLURM_CONF=DIR/slurm.conf
#   bash benchmark/local_slurm.sh stop DIR      # stops the three daemons (by the pids in DIR) and removes DIR
#
# The node is this machine, named localhost, with the cores and memory `slurmd -C` finds, in one partition, `local`.
# Cores are handed out one by one (several jobs run at once), memory is not counted. No accounting database: `sacct`
# is off; `squeue -t all`, `scontrol show job ID` and DIR/jobcomp.txt (one line per finished job) say what happened.
# The controller and the node use ports 6817 and 6818 (LOCAL_SLURM_PORT=N: N and N+1; the tests pick free ones), so
# a Slurm already running on the same machine must use others. Job ids start at 1 in a new DIR. Exit code: 0, 1 when
# a daemon did not come up (its log is printed), 2 for bad arguments.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin  # where Debian puts the daemons

die() {
    echo "local_slurm.sh: error: $1" >&2
    exit "${2:-2}"
}

stop() {
    local dir=$1 name pid
    [ -f "$dir/slurm.conf" ] || die "$dir: no local cluster here (no slurm.conf)"
    for name in slurmd slurmctld munged; do
        pid=$(cat "$dir/$name.pid" 2>/dev/null || true)
        if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -9 "$pid" 2>/dev/null || true
        fi
    done
    rm -rf "$dir"
}

start() {
    local dir=$1 port=${LOCAL_SLURM_PORT:-6817} user node
    for program in munged slurmctld slurmd sinfo sbatch; do
        command -v "$program" >/dev/null ||
            die "$program not found: apt-get install slurmctld slurmd slurm-client munge"
    done
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ ! -e "$dir/slurm.conf" ] || die "$dir holds a cluster already (stop it first: bash $0 stop $dir)"
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool"
    chmod 755 "$dir" "$dir/munge"  # munged refuses a socket folder others cannot enter
    user=$(id -un)

    if command -v mungekey >/dev/null; then  # munge 0.5.14 and later
        mungekey -c -k "$dir/munge.key" || die "mungekey could not make a key in $dir" 1
    else
        head -c 1024 /dev/urandom > "$dir/munge.key"
        chmod 600 "$dir/munge.key"
    fi
    munged --force --key-file "$dir/munge.key" --socket "$dir/munge/munge.socket" --pid-file "$dir/munged.pid" \
        --log-file "$dir/munged.log" --seed-file "$dir/munged.seed" || { cat "$dir/munged.log" >&2; exit 1; }

    # the node as slurmd sees it (CPUs, sockets, cores, threads, memory), renamed localhost
    node=$(slurmd -C | head -n 1 | sed 's/^NodeName=[^ ]*//')
    cat > "$dir/slurm.conf" <<EOF
ClusterName=local
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# no systemd, no cgroups: processes are tracked by their parent, cores bound by affinity
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/jobcomp.txt
NodeName=localhost NodeAddr=127.0.0.1$node State=UNKNOWN
PartitionName=local Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld || { cat "$dir/slurmctld.log" >&2; stop "$dir"; exit 1; }
    slurmd -N localhost || { cat "$dir/slurmd.log" >&2; stop "$dir"; exit 1; }
    for _ in $(seq 300); do  # a safety net: the node is idle about 1 s after the start
        if [ "$(sinfo -h -n localhost -o %t 2>/dev/null)" = idle ]; then
            echo "export SLURM_CONF=$dir/slurm.conf"
            return 0
        fi
        sleep 0.1
    done
    echo "local_slurm.sh: the node did not become idle; sinfo says: $(sinfo -h -o '%t %E' 2>&1)" >&2
    tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
    stop "$dir"
    exit 1
}

case ${1:-} in
    start)
        [ $# -le 2 ] || die "start takes one folder, got: ${*:2}"
        start "${2:-$(mktemp -d /tmp/local_slurm.XXXXXX)}" ;;
    stop) [ $# -eq 2 ] || die "stop needs the folder that start used"; stop "$2" ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
    *) die "usage: bash benchmark/local_slurm.sh start [DIR] | stop DIR (see --help)" ;;
esac
