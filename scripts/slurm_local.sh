#!/usr/bin/env bash
# A one-node Slurm cluster in a folder, for tests and for trying `srun atoll island` without a
# cluster (docs/slurm.md): munged, slurmctld and slurmd of Debian's packages (installed by
# scripts/setup.sh), no systemd, every file under DIR. Runs as root (slurmd starts jobs as
# their users; munged is forced to run as root).
#
#   scripts/slurm_local.sh start DIR PORT   # slurmctld on PORT, slurmd on PORT+1; prints SLURM_CONF
#   SLURM_CONF=DIR/slurm.conf srun -n 2 hostname
#   scripts/slurm_local.sh stop DIR         # stops the daemons DIR's pid files name
#
# The node advertises 8 CPUs whatever the machine has (SlurmdParameters=config_overrides), so
# that a few islands of one rank each fit in one allocation on a 2-core machine.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2; }

stop() {
  # The cluster's jobs first (their steps outlive slurmd otherwise), then the daemons.
  if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ]; then
    SLURM_CONF="$dir/slurm.conf" scancel --quiet --partition=debug 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(SLURM_CONF="$dir/slurm.conf" squeue -h -o %A 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
}

case "$cmd" in
  stop)
    stop
    ;;
  start)
    port=${3:?"start needs a port"}
    for b in munged slurmctld slurmd srun; do
      command -v "$b" >/dev/null || { echo "slurm_local: $b is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
    done
    [ "$(id -u)" -eq 0 ] || { echo "slurm_local: must run as root" >&2; exit 1; }
    dir=$(mkdir -p "$dir" && cd "$dir" && pwd)
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
    chmod 700 "$dir/munge"
    chmod 755 "$dir"
    head -c 1024 /dev/urandom > "$dir/munge/munge.key"
    chmod 400 "$dir/munge/munge.key"
    munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed"
    host=$(hostname -s)  # the name slurmd looks itself up by
    cat > "$dir/slurm.conf" <<EOF
ClusterName=atolltest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
KillWait=5
# The main scheduling loop every second (default 60 s): a released or requeued job starts at once.
SchedulerParameters=sched_interval=1
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
    slurmctld -f "$dir/slurm.conf" -i
    slurmd -f "$dir/slurm.conf"
    # Up when the node is idle.
    for _ in $(seq 100); do
      if SLURM_CONF="$dir/slurm.conf" sinfo -h -o %T 2>/dev/null | grep -q '^idle'; then
        echo "$dir/slurm.conf"
        exit 0
      fi
      sleep 0.2
    done
    echo "slurm_local: the node did not come up; logs in $dir/log" >&2
    tail -n 20 "$dir/log/"*.log >&2 || true
    stop
    exit 1
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2
    exit 2
    ;;
esac
