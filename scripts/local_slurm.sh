#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the launcher tests and for trying sweeps:
#   bash scripts/local_slurm.sh start    # install slurm-wlm + munge if missing, configure, start
#   bash scripts/local_slurm.sh status   # which daemons run, and sinfo
#   bash scripts/local_slurm.sh stop     # stop slurmctld, slurmd and munged
# Debian/Ubuntu packages (apt-get); needs root (or sudo). One node (this host, with the CPUs and
# memory slurmd sees), one default partition `local`, process tracking without cgroups
# (proctrack/linuxproc, task/none), so it also runs inside a container. Configuration in
# /etc/slurm/slurm.conf (written only if absent or written by this script), state and logs in
# $LOCAL_SLURM_DIR (default /var/spool/slurm-local). Every command is idempotent.
set -euo pipefail

STATE=${LOCAL_SLURM_DIR:-/var/spool/slurm-local}
CONF=/etc/slurm/slurm.conf
MARK="# written by pe-nmt scripts/local_slurm.sh"
TIMEOUT=${LOCAL_SLURM_TIMEOUT:-60}
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "error: run as root (or install sudo)" >&2; exit 1; }
    SUDO=sudo
fi

running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_packages() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        return
    fi
    command -v apt-get >/dev/null || {
        echo "error: slurm-wlm and munge are missing and there is no apt-get: install them" >&2
        exit 1
    }
    echo "installing slurm-wlm and munge (apt-get)"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm slurm-client munge >/dev/null
}

write_config() {
    if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
        echo "error: $CONF exists and was not written by this script: move it away or use that" \
            "cluster" >&2
        exit 1
    fi
    local host node cpus memory
    host=$(hostname -s)
    # slurmd -C: this host's CPUs, sockets, cores, threads and memory as slurmd will see them
    node=$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]*/NodeName=$host/")
    cpus=$(sed -n 's/.* CPUs=\([0-9]*\).*/\1/p' <<<"$node")
    memory=$(sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p' <<<"$node")
    $SUDO mkdir -p /etc/slurm "$STATE/ctld" "$STATE/d" "$STATE/log" "$STATE/run"
    $SUDO tee "$CONF.new" >/dev/null <<EOF
$MARK (one node, partition local)
ClusterName=local
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((memory / cpus))
SchedulerType=sched/backfill
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
KillWait=30
MinJobAge=300
$node State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    $SUDO mv "$CONF.new" "$CONF"
}

start_munge() {
    local pid=/run/munge/munged.pid
    $SUDO mkdir -p /run/munge /var/lib/munge /var/log/munge
    $SUDO chown munge:munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        $SUDO mkdir -p /etc/munge
        $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
        $SUDO chown munge:munge /etc/munge/munge.key
        $SUDO chmod 400 /etc/munge/munge.key
    fi
    running "$pid" && return
    $SUDO runuser -u munge -- /usr/sbin/munged --pid-file="$pid"
}

wait_idle() {
    local host state
    host=$(hostname -s)
    for _ in $(seq "$TIMEOUT"); do
        state=$(sinfo -h -n "$host" -o %t 2>/dev/null | head -1 || true)
        case "$state" in
            idle | mix | alloc) echo "SLURM is up: node $host $state, partition local"; return ;;
            down* | drain* | fail*) $SUDO scontrol update nodename="$host" state=resume \
                2>/dev/null || true ;;
        esac
        sleep 1
    done
    echo "error: node $host not idle after ${TIMEOUT}s (state '${state:-none}'); see" \
        "$STATE/log/slurmctld.log and $STATE/log/slurmd.log" >&2
    exit 1
}

start() {
    install_packages
    write_config
    start_munge
    running "$STATE/run/slurmctld.pid" || $SUDO slurmctld
    running "$STATE/run/slurmd.pid" || $SUDO slurmd
    wait_idle
}

stop() {
    local name
    for name in slurmd slurmctld; do
        if running "$STATE/run/$name.pid"; then
            $SUDO kill "$(cat "$STATE/run/$name.pid")"
        fi
    done
    if running /run/munge/munged.pid; then
        $SUDO kill "$(cat /run/munge/munged.pid)"
    fi
    for _ in $(seq 30); do
        running "$STATE/run/slurmd.pid" || running "$STATE/run/slurmctld.pid" \
            || running /run/munge/munged.pid || { echo "SLURM stopped"; return; }
        sleep 1
    done
    echo "error: SLURM daemons still running after 30 s" >&2
    exit 1
}

status() {
    local name pid code=0
    for name in munged slurmctld slurmd; do
        pid=$STATE/run/$name.pid
        [ "$name" = munged ] && pid=/run/munge/munged.pid
        if running "$pid"; then echo "$name: running (pid $(cat "$pid"))"; else
            echo "$name: stopped"
            code=3
        fi
    done
    [ "$code" -eq 0 ] && sinfo
    return "$code"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: bash scripts/local_slurm.sh start|stop|status" >&2; exit 2 ;;
esac
