#!/bin/sh
# A one-node Slurm cluster on this machine, from Debian's packages (slurm-wlm): a private
# slurmctld and slurmd with a slurm.conf of their own in a temporary folder (state, spool, logs and
# pid files there too, ports that nothing else listens on, auth/none so that no munged is needed),
# then one command run against it, then everything stopped and removed. The node claims 4 CPUs
# whatever the machine has (SlurmdParameters=config_overrides), so `srun -n 4` fits on 2 cores.
#
# Usage: slurm_one_node.sh COMMAND [ARG ...]
#   runs COMMAND with SLURM_CONF pointing at the cluster (so `srun`, `sinfo`, ... talk to it),
#   e.g. slurm_one_node.sh srun -n 4 --mpi=pmix build/tessera train ...
# Environment: SLURM_ONE_NODE_LIMIT_S (default 240): the command's time limit in seconds.
# Exit status: that of COMMAND (124 when it ran past the limit); 77 when this machine cannot do it
# (no slurm binaries, not root and no passwordless sudo, the daemons do not come up), with the
# reason on stderr, so that the caller reports a skip. Every wait is bounded.
set -u

if [ $# -lt 1 ]; then
  echo "usage: $0 COMMAND [ARG ...]" >&2
  exit 2
fi
LIMIT_S=${SLURM_ONE_NODE_LIMIT_S:-240}

skip() {
  echo "slurm_one_node: cannot run here: $*" >&2
  exit 77
}
for tool in slurmctld slurmd srun sinfo squeue scancel; do
  command -v "$tool" > /dev/null || PATH=$PATH:/usr/sbin:/sbin
  command -v "$tool" > /dev/null || skip "no $tool (Debian: slurm-wlm)"
done
command -v ss > /dev/null || skip "no ss (Debian: iproute2)"

# slurmd starts job steps as their user, so it runs as root: directly, or through sudo -n.
SUDO=
if [ "$(id -u)" != 0 ]; then
  command -v sudo > /dev/null && sudo -n true 2> /dev/null || skip "slurmd needs root (or passwordless sudo)"
  SUDO="sudo -n"
fi

DIR=$(mktemp -d "${TMPDIR:-/tmp}/tessera-slurm-XXXXXX") || skip "mktemp failed"
chmod 755 "$DIR"
CTLD_PID=
SLURMD_PID=
export SLURM_CONF="$DIR/slurm.conf"

cleanup() {
  # Jobs first (their steps belong to slurmstepd, not to slurmd), then the daemons.
  jobs=$(timeout 5 squeue -h -o %i 2> /dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086  # one word per job id
    timeout 5 scancel $jobs 2> /dev/null
    i=0
    while [ $i -lt 20 ] && [ -n "$(timeout 2 squeue -h -o %i 2> /dev/null)" ]; do
      sleep 0.5
      i=$((i + 1))
    done
  fi
  for pid in $SLURMD_PID $CTLD_PID; do
    $SUDO kill "$pid" 2> /dev/null
  done
  for pid in $SLURMD_PID $CTLD_PID; do
    i=0
    while [ $i -lt 20 ] && $SUDO kill -0 "$pid" 2> /dev/null; do
      sleep 0.25
      i=$((i + 1))
    done
    $SUDO kill -9 "$pid" 2> /dev/null
  done
  $SUDO rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 143' INT TERM

# Two free TCP ports (controller, node daemon), picked from this process's id.
free_port() {
  p=$1
  while [ "$p" -lt 65000 ]; do
    [ -z "$(ss -Hltn "sport = :$p" 2> /dev/null)" ] && [ "$p" != "${2:-}" ] && {
      echo "$p"
      return
    }
    p=$((p + 1))
  done
}
BASE=$((20000 + $$ % 20000 * 2))
CTLD_PORT=$(free_port "$BASE")
SLURMD_PORT=$(free_port $((CTLD_PORT + 1)) "$CTLD_PORT")
[ -n "$CTLD_PORT" ] && [ -n "$SLURMD_PORT" ] || skip "no free TCP port"

NODE=tessera-node
mkdir -p "$DIR/state" "$DIR/spool" "$DIR/tmp"
chmod 1777 "$DIR/tmp"
cat > "$SLURM_CONF" << EOF
ClusterName=tessera
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
TmpFS=$DIR/tmp
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=local Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF

$SUDO slurmctld -D -i -f "$SLURM_CONF" > "$DIR/slurmctld.out" 2>&1 &
CTLD_PID=$!
$SUDO slurmd -D -N "$NODE" -f "$SLURM_CONF" > "$DIR/slurmd.out" 2>&1 &
SLURMD_PID=$!

# The node idle within 30 s, or a skip with the daemons' last words.
i=0
until [ "$(timeout 5 sinfo -h -n "$NODE" -o %t 2> /dev/null)" = idle ]; do
  i=$((i + 1))
  if [ $i -ge 60 ] || ! kill -0 "$CTLD_PID" 2> /dev/null || ! kill -0 "$SLURMD_PID" 2> /dev/null; then
    state=$(timeout 5 sinfo -h -n "$NODE" -o '%t %E' 2> /dev/null)
    skip "the node did not become idle in 30 s (state: ${state:-none});" \
      "slurmctld: $(tail -n 3 "$DIR/slurmctld.log" "$DIR/slurmctld.out" 2> /dev/null | tr '\n' ' ')" \
      "slurmd: $(tail -n 3 "$DIR/slurmd.log" "$DIR/slurmd.out" 2> /dev/null | tr '\n' ' ')"
  fi
  sleep 0.5
done

# Arguments are passed through "$@" untouched (they may hold spaces).
timeout -k 10 "$LIMIT_S" "$@"
status=$?
[ $status -eq 0 ] || echo "slurm_one_node: the command exited with $status; slurmd log: $(tail -n 5 "$DIR/slurmd.log" 2> /dev/null)" >&2
exit $status
