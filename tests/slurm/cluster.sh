#!/usr/bin/env bash
# A real one-node SLURM cluster for the tests, entirely under STATE_DIR.
#
#   cluster.sh up STATE_DIR     install Debian's slurm + munge if missing, write
#                               STATE_DIR/slurm.conf, start munged, slurmctld,
#                               slurmd; wait until the node is idle
#   cluster.sh down STATE_DIR   stop the daemons by the PIDs they wrote there
#
# The config is written to STATE_DIR/slurm.conf and linked from the default
# path /etc/slurm/slurm.conf (the link is removed by `down`): the executor
# plugin's job step drops SLURM_* variables, SLURM_CONF included, before its
# inner srun, so jobs find the cluster only at the default path, as on a real
# cluster. An /etc/slurm/slurm.conf that is not this script's link is left
# alone and `up` stops. Needs root (the daemons run as root) and apt-get on
# Debian bookworm (slurm 22.05). Accounting is off (no slurmdbd): use
# `slurm-status-command: squeue`.
set -euo pipefail

action=${1:?usage: cluster.sh up|down STATE_DIR}
state=$(realpath -m "${2:?usage: cluster.sh up|down STATE_DIR}")
ctld_port=${SLURMCTLD_PORT:-6817}
slurmd_port=${SLURMD_PORT:-6818}
daemons=(slurmd slurmctld munged)
system_conf=/etc/slurm/slurm.conf

install() {
  local missing=()
  for cmd in munged slurmctld slurmd sbatch; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
  [ ${#missing[@]} -eq 0 ] && return
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -q
  apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
    slurmctld slurmd slurm-client munge
}

write_conf() {
  local node cpus mem
  node=$(hostname -s)
  cpus=$(slurmd -C | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
  mem=$(slurmd -C | sed -n 's/.* RealMemory=\([0-9]*\).*/\1/p')
  cat > "$state/slurm.conf" <<CONF
ClusterName=infbench-ci
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$state/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/slurmd
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=600
KillWait=5
NodeName=$node CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=ci Nodes=$node Default=YES MaxTime=INFINITE State=UP
CONF
}

up() {
  install
  mkdir -p "$state"/{munge,ctld,slurmd,log}
  chmod 700 "$state/munge"
  head -c 1024 /dev/urandom > "$state/munge/munge.key"
  chmod 400 "$state/munge/munge.key"
  write_conf
  # A link left by a test cluster that is not running (its state gone, or its slurmctld dead: a run killed
  # before `down`) is stale and replaced; anything else is left alone.
  if [ -L "$system_conf" ] || [ -e "$system_conf" ]; then
    local other
    other=$(dirname "$(readlink "$system_conf" || echo /nonexistent/x)")
    if [ ! -L "$system_conf" ] || { [ -e "$other/slurm.conf" ] && ! grep -qx 'ClusterName=infbench-ci' "$other/slurm.conf"; }; then
      echo "$system_conf exists and is not a test cluster's; not touching it" >&2
      exit 1
    fi
    if [ "$other" != "$state" ] && [ -s "$other/slurmctld.pid" ] && kill -0 "$(cat "$other/slurmctld.pid")" 2>/dev/null; then
      echo "$system_conf is the running test cluster's in $other; not touching it" >&2
      exit 1
    fi
  fi
  mkdir -p "$(dirname "$system_conf")"
  ln -sfn "$state/slurm.conf" "$system_conf"
  export SLURM_CONF=$state/slurm.conf
  munged --force --key-file="$state/munge/munge.key" --socket="$state/munge/munge.socket" \
    --pid-file="$state/munged.pid" --log-file="$state/log/munged.log" --seed-file="$state/munge/seed"
  slurmctld -c -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 120); do
    if sinfo -h -N -o '%T' 2>/dev/null | grep -qx idle; then
      echo "slurm up: SLURM_CONF=$SLURM_CONF"
      return
    fi
    sleep 1
  done
  echo "slurm did not come up; logs in $state/log:" >&2
  tail -n 20 "$state"/log/*.log >&2 || true
  exit 1
}

down() {
  for name in "${daemons[@]}"; do
    local pidfile=$state/$name.pid
    [ -s "$pidfile" ] || continue
    local pid
    pid=$(cat "$pidfile")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$pidfile"
  done
  if [ "$(readlink "$system_conf" 2>/dev/null)" = "$state/slurm.conf" ]; then
    rm -f "$system_conf"
  fi
  echo "slurm down: $state"
}

case $action in
  up) up ;;
  down) down ;;
  *) echo "usage: cluster.sh up|down STATE_DIR" >&2; exit 2 ;;
esac
