#!/usr/bin/env bash
# Several functions are only called from traps, which shellcheck cannot see:
# shellcheck disable=SC2317
#
# slurm_single_node.sh - run a command inside a throw-away single-node Slurm.
#
# Usage: tests/cluster/slurm_single_node.sh WORKDIR -- COMMAND [ARGS...]
#
# Starts a private munged, slurmctld and slurmd (Debian bookworm: slurm-wlm
# 22.05 + munge 0.5.15) whose keys, sockets, config, state, spool, pid and log
# files all live under WORKDIR. Nothing under /etc/slurm or /etc/munge is read
# or written, and the TCP ports are picked at run time, so several instances
# (with different WORKDIRs) can run one after another or side by side.
#
# The harness owns these entries of WORKDIR and recreates them on every run:
# munge/ munge.socket slurm.conf plugstack.conf state/ spool/ log/ run/ tmp/.
# Daemon logs: WORKDIR/log/{munged,slurmctld,slurmd}.out (+ slurm*.log).
# Keep WORKDIR short (about 75 characters at most; checked): unix socket
# paths below it are limited to 107 bytes.
#
# COMMAND runs with SLURM_CONF exported, so sbatch/srun/squeue/... talk to the
# private cluster. The daemons are always stopped on exit; the script exits
# with COMMAND's status.
#
# Exit 77 (ctest SKIP_RETURN_CODE) with a "SKIP: ..." line on stderr when the
# programs are missing, when not running as root, or when the daemons do not
# come up. Packages (Debian): slurmctld slurmd slurm-client munge.
#
# Environment knobs (all optional):
#   SLURM_SINGLE_NODE_CPUS     CPUs advertised for the node (default 2)
#   SLURM_SINGLE_NODE_TIMEOUT  seconds to wait for the node to be idle, and
#                              again for the start-up probe job (30)
set -euo pipefail

readonly PROG=${0##*/}

skip() {
    echo "SKIP: $*" >&2
    exit 77
}

usage() {
    echo "usage: $PROG WORKDIR -- COMMAND [ARGS...]" >&2
    exit 2
}

# --------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------
[[ $# -ge 3 && $2 == "--" ]] || usage
WORKDIR=$1
shift 2

NODE_CPUS=${SLURM_SINGLE_NODE_CPUS:-2}
UP_TIMEOUT=${SLURM_SINGLE_NODE_TIMEOUT:-30}

# --------------------------------------------------------------------------
# Prerequisites
# --------------------------------------------------------------------------
declare -A PKG_OF=(
    [munged]=munge
    [slurmctld]=slurmctld
    [slurmd]=slurmd
    [sbatch]=slurm-client
    [srun]=slurm-client
    [squeue]=slurm-client
    [sinfo]=slurm-client
    [scontrol]=slurm-client
    [scancel]=slurm-client
)
missing=() pkgs=()
# Daemons live in /usr/sbin, which is not always on a non-root PATH.
PATH=$PATH:/usr/sbin:/sbin
for prog in munged slurmctld slurmd sbatch srun squeue sinfo scontrol scancel; do
    if ! command -v "$prog" >/dev/null 2>&1; then
        missing+=("$prog")
        [[ " ${pkgs[*]-} " == *" ${PKG_OF[$prog]} "* ]] || pkgs+=("${PKG_OF[$prog]}")
    fi
done
if ((${#missing[@]})); then
    skip "missing ${missing[*]} (Debian packages: ${pkgs[*]}; e.g." \
         "apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge)"
fi

# slurmd must be root to launch job steps (setuid/setgroups in slurmstepd),
# and a root munged is what authenticates root clients.
[[ $(id -u) -eq 0 ]] || skip "a private slurmd needs root (running as $(id -un))"

# --------------------------------------------------------------------------
# Layout under WORKDIR
# --------------------------------------------------------------------------
mkdir -p -- "$WORKDIR"
WORKDIR=$(cd -- "$WORKDIR" && pwd -P)

readonly MUNGE_DIR=$WORKDIR/munge
readonly MUNGE_KEY=$MUNGE_DIR/munge.key
readonly MUNGE_SOCKET=$WORKDIR/munge.socket
readonly MUNGE_PID=$MUNGE_DIR/munged.pid
readonly CONF=$WORKDIR/slurm.conf
readonly STATE_DIR=$WORKDIR/state     # slurmctld StateSaveLocation
readonly SPOOL_DIR=$WORKDIR/spool     # slurmd SlurmdSpoolDir (+ pmix sockets)
readonly LOG_DIR=$WORKDIR/log
readonly RUN_DIR=$WORKDIR/run         # pid files

NODE=$(hostname -s)
[[ -n $NODE ]] || skip "hostname -s returned nothing"

# Unix socket paths are limited to 107 bytes. The longest ones below WORKDIR
# are slurmd's per-step sockets, SPOOL_DIR/NODE_JOBID.STEPID, where the batch
# step is 4294967291 (allow 7-digit job ids); munge.socket is shorter.
max_sock=$((${#SPOOL_DIR} + 1 + ${#NODE} + 1 + 7 + 1 + 10))
if ((max_sock > 107)); then
    echo "$PROG: error: WORKDIR '$WORKDIR' is too long (${#WORKDIR} characters):" \
         "socket paths below it would reach $max_sock bytes, over the 107-byte" \
         "limit; use a shorter one, e.g. \$(mktemp -d /tmp/slurm.XXXXXX)" >&2
    exit 2
fi

# Send SIGTERM, wait up to ~10 s, then SIGKILL.
stop_pid() {
    local pid=$1 i
    [[ -n $pid ]] || return 0
    kill "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# Processes of this cluster's jobs: slurmstepd and job tasks carry our
# SLURM_CONF in their environment (slurmstepd is not a child of slurmd).
job_pids() {
    local d pid env
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [[ $pid != "$$" ]] || continue
        env=$(tr '\0' '\n' <"$d/environ" 2>/dev/null) || continue
        [[ $'\n'$env$'\n' == *$'\n'"SLURM_CONF=$CONF"$'\n'* ]] || continue
        if [[ $(<"$d/comm") == slurmstepd || $env == *SLURM_JOB_ID=* ]]; then
            echo "$pid"
        fi
    done 2>/dev/null
}

# Stop daemons and job processes left over from an earlier, killed run in
# this same WORKDIR (only processes whose command line mentions this WORKDIR,
# or whose environment has this SLURM_CONF).
stop_stale() {
    local pidfile pid
    for pidfile in "$MUNGE_PID" "$RUN_DIR"/slurmctld.pid "$RUN_DIR"/slurmd.pid; do
        [[ -r $pidfile ]] || continue
        pid=$(<"$pidfile") || continue
        [[ $pid =~ ^[0-9]+$ ]] || continue
        if [[ -r /proc/$pid/cmdline ]] &&
            tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$WORKDIR"; then
            echo "$PROG: stopping stale daemon pid $pid from $pidfile" >&2
            stop_pid "$pid"
        fi
    done
    for pid in $(job_pids); do
        echo "$PROG: killing stale job process $pid" >&2
        kill -KILL "$pid" 2>/dev/null || true
    done
}
stop_stale

# Fresh state every run: old job state in StateSaveLocation would otherwise be
# recovered by slurmctld and old spool files confuse slurmd.
rm -rf -- "$MUNGE_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR" "$RUN_DIR" \
    "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
mkdir -p -- "$MUNGE_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR" "$RUN_DIR" "$WORKDIR/tmp"
chmod 0700 -- "$MUNGE_DIR"

# --------------------------------------------------------------------------
# Teardown (installed before anything is started)
# --------------------------------------------------------------------------
MUNGED_PID="" SLURMCTLD_PID="" SLURMD_PID=""

cleanup() {
    local rc=$? i pid
    trap - EXIT INT TERM HUP
    set +e
    if kill -0 "$SLURMCTLD_PID" 2>/dev/null &&
        [[ -n $(timeout 10 squeue -h 2>/dev/null) ]]; then
        # Cancel what is still queued/running and give slurmd up to ~10 s to
        # reap the steps before it is stopped.
        scancel --quiet --user=root >/dev/null 2>&1
        for ((i = 0; i < 50; i++)); do
            [[ -z $(timeout 5 squeue -h 2>/dev/null) ]] && break
            sleep 0.2
        done
    fi
    stop_pid "$SLURMD_PID"
    stop_pid "$SLURMCTLD_PID"
    # Last resort: whatever job processes survived.
    for pid in $(job_pids); do
        kill -KILL "$pid" 2>/dev/null
    done
    stop_pid "$MUNGED_PID"
    rm -f -- "$MUNGE_SOCKET" "$MUNGE_SOCKET.lock"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# Print the tail of the daemon logs (for SKIP messages). The daemons run in
# the foreground and log everything, fatal start-up errors included, to
# stderr (*.out); slurmctld/slurmd also write *.log.
log_tails() {
    local f
    for f in "$LOG_DIR"/munged.out "$LOG_DIR"/slurmctld.out "$LOG_DIR"/slurmd.out; do
        [[ -s $f ]] || continue
        echo "--- last lines of $f:"
        tail -n 8 -- "$f"
    done
}

# --------------------------------------------------------------------------
# munge
# --------------------------------------------------------------------------
# A fresh random 1 KiB key that only this cluster knows.
dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none
chmod 0400 -- "$MUNGE_KEY"

# -F: stay in the foreground so that $! is munged itself (in this mode
# munged logs to stderr, i.e. munged.out, rather than to --log-file).
# --force: turn munged's permission checks on the WORKDIR path into warnings
# (without it, e.g. a 0700 `mktemp -d` WORKDIR is refused: "Socket is
# inaccessible: execute permissions for all required").
munged -F --force \
    --key-file="$MUNGE_KEY" \
    --socket="$MUNGE_SOCKET" \
    --pid-file="$MUNGE_PID" \
    --log-file="$LOG_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/munged.seed" \
    >"$LOG_DIR/munged.out" 2>&1 &
MUNGED_PID=$!

for ((i = 0; i < 50; i++)); do
    [[ -S $MUNGE_SOCKET ]] && break
    kill -0 "$MUNGED_PID" 2>/dev/null || break
    sleep 0.1
done
[[ -S $MUNGE_SOCKET ]] || skip "munged did not start: $(log_tails)"

# --------------------------------------------------------------------------
# Free TCP ports
# --------------------------------------------------------------------------
# Ask the kernel for ephemeral ports (bind to port 0). There is a small race
# until the daemons bind them, which is acceptable for tests.
free_ports() {
    local n=$1
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$n" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
        return
    fi
    # Fallback: random ports in 20000-59999 that nobody answers on.
    local ports=() p
    while ((${#ports[@]} < n)); do
        p=$((20000 + RANDOM % 40000))
        [[ " ${ports[*]-} " == *" $p "* ]] && continue
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            ports+=("$p")
        fi
    done
    echo "${ports[*]}"
}
read -r CTLD_PORT SLURMD_PORT < <(free_ports 2)

# --------------------------------------------------------------------------
# slurm.conf
# --------------------------------------------------------------------------
FIRST_JOB_ID=$((100000 + (RANDOM * 32768 + RANDOM) % 800000))

# An empty plugstack.conf, so that /etc/slurm/plugstack.conf is not read.
: >"$WORKDIR/plugstack.conf"

cat >"$CONF" <<EOF
# Generated by $PROG for a throw-away single-node cluster.
ClusterName=testcluster

# Controller and node are this host. The explicit 127.0.0.1 addresses avoid
# depending on how (or whether) the short hostname resolves.
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT

# Everything runs as root (slurmd has to be root anyway).
SlurmUser=root
SlurmdUser=root

# munge for both the RPC authentication and job credentials, talking to our
# private munged instead of /run/munge/munge.socket.2.
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge

# State, spool, pid and log files, all private to this WORKDIR.
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=$RUN_DIR/slurmctld.pid
SlurmdPidFile=$RUN_DIR/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$WORKDIR/plugstack.conf
# TmpFS also holds the pmix plugin's per-step spmix_appdir_* directories.
TmpFS=$WORKDIR/tmp

# No cgroups in a container: track processes via /proc, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none

# Schedule individual CPUs, so two 1-CPU jobs/tasks can share the node.
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU

# MPI plugin chosen per step (srun --mpi=pmix); none by default.
MpiDefault=none

# No accounting database, no job completion log.
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none

# Job ids start at a random 6-digit number. Concurrent clusters on one host
# would otherwise both run job 2 step 0, and Open MPI derives its /dev/shm and
# session-dir names from the PMIx namespace "slurm.pmix.JOBID.STEPID": two
# such jobs clobber each other's shared-memory files.
FirstJobId=$FIRST_JOB_ID

# Come up fast, come back fast, forget finished jobs fast.
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
MailProg=/bin/true
KillWait=5
# Finished jobs stay visible to squeue/scontrol for 4 s. Keep this <= 4:
# sbatch --wait polls every 2 s only while 2 < MinJobAge/2, else every 8 s.
MinJobAge=4
# Run the main scheduling loop every second (default 60 s) for pending jobs.
SchedulerParameters=sched_interval=1

# Trust the node definition below rather than the hardware slurmd detects
# (the node is never drained for having fewer CPUs or less memory).
SlurmdParameters=config_overrides

NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$NODE_CPUS RealMemory=100 State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

# Client settings inherited from an outer Slurm job (SLURM_JOB_ID, ...) or
# the user's environment (SBATCH_PARTITION, ...) must not leak into the
# private cluster's clients and jobs.
while read -r var; do
    unset "$var"
done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|SQUEUE|SINFO|SCONTROL|SCANCEL)_' || true)
export SLURM_CONF=$CONF

# --------------------------------------------------------------------------
# Slurm daemons
# --------------------------------------------------------------------------
# -D: foreground (so $! is the daemon); -c: ignore any saved state;
# -f: our config. slurmd: -N pins the node name to the one in slurm.conf.
slurmctld -D -c -f "$CONF" >"$LOG_DIR/slurmctld.out" 2>&1 &
SLURMCTLD_PID=$!
slurmd -D -f "$CONF" -N "$NODE" >"$LOG_DIR/slurmd.out" 2>&1 &
SLURMD_PID=$!

# Wait until the node reports idle.
start=$SECONDS
state=""
while ((SECONDS - start < UP_TIMEOUT)); do
    kill -0 "$SLURMCTLD_PID" 2>/dev/null || skip "slurmctld exited: $(log_tails)"
    kill -0 "$SLURMD_PID" 2>/dev/null || skip "slurmd exited: $(log_tails)"
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.5
done
if [[ $state != idle ]]; then
    skip "node $NODE not idle after ${UP_TIMEOUT}s (state '${state:-unknown}'):" \
         "$(scontrol show node "$NODE" 2>&1 | grep -E 'State=|Reason=' || true)" \
         "$(log_tails)"
fi

# Smoke test: a batch job running one srun step proves that munge
# credentials, slurmstepd, batch and step launch work here. It also waits out
# slurmctld's first scheduling pass (~2-3 s after start-up; batch jobs
# submitted before it stay pending until then, later ones start at once).
probe_fail() {
    skip "a trivial batch job failed on the new cluster ($1):" \
         "$(tail -n 5 "$LOG_DIR/probe.out" 2>/dev/null)" "$(log_tails)"
}
probe_id=$(sbatch --parsable -N1 -n1 -J harness-probe -o "$LOG_DIR/probe.out" \
    --wrap "srun -n1 true" 2>"$LOG_DIR/probe.err") ||
    probe_fail "sbatch: $(cat "$LOG_DIR/probe.err")"
probe_state=""
start=$SECONDS
while ((SECONDS - start < UP_TIMEOUT)); do
    probe_state=$(scontrol -o show job "$probe_id" 2>/dev/null |
        sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    case $probe_state in
        PENDING | CONFIGURING | RUNNING | COMPLETING | "") sleep 0.2 ;;
        *) break ;;
    esac
done
[[ $probe_state == COMPLETED ]] || probe_fail "job $probe_id state '${probe_state:-unknown}'"

echo "$PROG: single-node Slurm up on $NODE after ${SECONDS}s" \
     "(slurmctld :$CTLD_PORT, slurmd :$SLURMD_PORT, SLURM_CONF=$CONF)" >&2

# --------------------------------------------------------------------------
# Run the command
# --------------------------------------------------------------------------
# Run it in the background and wait, so that a signal to this script is
# handled at once (bash defers traps while a foreground child runs). The
# handler sends SIGTERM to the command (an asynchronous command ignores
# SIGINT in a non-interactive shell) and exits, which runs the teardown.
# `<&0` keeps our stdin (an asynchronous command would get /dev/null).
CMD_PID=""
forward() {
    [[ -z $CMD_PID ]] || kill -TERM "$CMD_PID" 2>/dev/null || true
    exit "$1"
}
trap 'forward 130' INT
trap 'forward 143' TERM
trap 'forward 129' HUP

"$@" <&0 &
CMD_PID=$!
rc=0
wait "$CMD_PID" || rc=$?
CMD_PID=""
exit "$rc"
