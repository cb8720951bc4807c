#!/usr/bin/env bash
# A real Slurm on this one host, for the tests that run gpubench through srun and sbatch
# (cmd/gpubench/slurm_test.go, docs/multinode.md "Slurm in CI"): writes a minimal slurm.conf and a
# munge key, starts munged, slurmctld and slurmd, and waits until sinfo shows the node idle.
#
#   sudo scripts/slurm-up.sh        # needs Debian's slurmctld, slurmd and munge (.ci/run installs them)
#
# Idempotent: a second run finds the daemons up and the node idle and changes nothing. It never
# hangs: every wait has a limit, and a failure prints the daemons' logs. It writes
# /etc/slurm/slurm.conf only when there is none or when this script wrote it (its first line says
# so); it will not replace a slurm.conf of a real cluster. Where systemd runs (a workstation) it
# starts the Debian services; elsewhere (CI containers) it starts the daemons itself.
# SLURM_UP_WAIT (seconds, default 60) bounds the wait for the node.
set -euo pipefail

conf=/etc/slurm/slurm.conf
marker="# Written by gpubench scripts/slurm-up.sh: a one-host cluster for its tests. Delete it to use your own."
wait_s=${SLURM_UP_WAIT:-60}
logs=(/var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log /var/log/munge/munged.log)

say() { echo "slurm-up: $*" >&2; }
die() {
  say "$*"
  for f in "${logs[@]}"; do
    [[ -r $f ]] && { echo "--- last lines of $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}

if ((EUID != 0)); then
  echo "slurm-up: run as root (sudo $0): it writes /etc/slurm and starts daemons" >&2
  exit 1
fi
missing=()
for tool in munged:munge slurmctld:slurmctld slurmd:slurmd srun:slurm-client sinfo:slurm-client; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  echo "slurm-up: missing ${missing[*]}: apt-get install --no-install-recommends slurmctld slurmd munge" >&2
  exit 1
fi

host=$(hostname -s)
# The node and the controller are this host; gpubench meets at the first host of the step's node
# list, so the name must resolve (a container's /etc/hosts usually has it).
if ! getent hosts "$host" >/dev/null; then
  say "$host does not resolve; adding it to /etc/hosts as 127.0.0.1"
  echo "127.0.0.1 $host" >>/etc/hosts
fi
cpus=$(nproc)
# Two tasks must fit (the tests run srun -n 2); slurmd takes the configured count as it is.
((cpus >= 2)) || cpus=2

# --- munge: the key (Debian's package makes one; make it if missing) and the daemon.
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
  say "making a munge key"
  if command -v mungekey >/dev/null; then
    mungekey --create --keyfile=/etc/munge/munge.key --force
  else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key

# --- slurm.conf for this host.
want=$(
  cat <<EOF
$marker
ClusterName=gpubench
SlurmctldHost=$host(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# No cgroups: they fail in containers. Processes are tracked through /proc; tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# The node as configured here, whatever slurmd finds (a container's CPU count can mislead it).
SlurmdParameters=config_overrides
ReturnToService=2
# A finished job's record goes after 4 s, so sbatch --wait asks every 2 s (not after 2, 8, 32 s).
MinJobAge=4
KillWait=5
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=10 State=UP
EOF
)
changed=0
if [[ -e $conf ]] && [[ $(head -n 1 "$conf") != "$marker" ]]; then
  if timeout 15 sinfo -h >/dev/null 2>&1; then
    say "$conf is not this script's and a cluster answers: using it as it is"
    sinfo
    exit 0
  fi
  die "$conf exists and was not written by this script: move it away to let it write its own"
fi
if [[ ! -e $conf ]] || [[ $(cat "$conf") != "$want" ]]; then
  install -d -m 0755 /etc/slurm
  printf '%s\n' "$want" >"$conf.tmp"
  mv "$conf.tmp" "$conf"
  chmod 0644 "$conf"
  changed=1
  say "wrote $conf ($host, $cpus CPUs)"
fi
install -d -o slurm -g slurm -m 0755 /var/lib/slurm/slurmctld /var/log/slurm
install -d -m 0755 /var/lib/slurm/slurmd

# --- the daemons.
# alive FILE NAME: the process in a pid file runs and is NAME (read from /proc: a daemon that was
# killed can leave its pid file, and a zombie where nothing reaps it, as in some containers).
alive() {
  local pid stat
  [[ -s $1 ]] || return 1
  pid=$(<"$1")
  [[ $pid =~ ^[0-9]+$ ]] && stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ $stat == "$pid ($2) "[!ZX]* ]]
}
# stop FILE NAME: ends the daemon in a pid file and waits (10 s) for it to go.
stop() {
  alive "$1" "$2" || return 0
  local pid
  pid=$(<"$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do alive "$1" "$2" || return 0; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
}

if [[ -d /run/systemd/system ]]; then
  timeout 60 systemctl enable --now munge >/dev/null 2>&1 || die "systemctl start munge failed"
  if ((changed)); then
    timeout 60 systemctl restart slurmctld slurmd || die "systemctl restart slurmctld slurmd failed"
  else
    timeout 60 systemctl start slurmctld slurmd || die "systemctl start slurmctld slurmd failed"
  fi
else
  if ! alive /run/munge/munged.pid munged; then
    say "starting munged"
    # --force: a stale socket of a munged that was killed is no reason to stay down.
    timeout 20 runuser -u munge -- /usr/sbin/munged --force || die "munged did not start"
  fi
  if ((changed)); then
    stop /run/slurmd.pid slurmd
    stop /run/slurmctld.pid slurmctld
  fi
  if ! alive /run/slurmctld.pid slurmctld; then
    say "starting slurmctld"
    timeout 20 slurmctld || die "slurmctld did not start"
  fi
  if ! alive /run/slurmd.pid slurmd; then
    say "starting slurmd"
    timeout 20 slurmd || die "slurmd did not start"
  fi
fi
timeout 10 munge -n </dev/null | timeout 10 unmunge >/dev/null || die "munge does not work (munge -n | unmunge)"

# --- wait until the node takes jobs.
deadline=$((SECONDS + wait_s))
state=
while ((SECONDS < deadline)); do
  state=$(timeout 15 sinfo -h -n "$host" -o %T 2>/dev/null | head -n 1 || true)
  case $state in
  idle | mixed | allocated | completing)
    say "node $host is $state ($(sinfo -V))"
    timeout 15 sinfo
    exit 0
    ;;
  down* | drain* | drained* | fail*)
    # A node left down by an earlier run (or a restart) is put back.
    timeout 15 scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
    ;;
  esac
  sleep 1
done
die "node $host is not idle after ${wait_s}s (last state: ${state:-no answer from slurmctld})"
