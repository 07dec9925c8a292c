#!/usr/bin/env bash
# A Slurm 22.05 cluster of N nodes on this one host, for the fleet tests (issue 42): one private
# munged, one slurmctld and N slurmd (Debian's slurmd has multiple-slurmd support: node1..nodeN,
# one port each), all on loopback, config and state under DIR (SLURM_CONF=DIR/slurm.conf). Each
# slurmd runs in a mount and UTS namespace of its own, named nodeK, with DIR/nodeK/root
# bind-mounted on MOUNT (its private copy of the install) and DIR/nodeK/state on STATE (its own
# $OVERLAY_STATE_DIR): the jobs it runs inherit both, as on a node with local disks.
# Needs root (mount namespaces, slurmd). Run as root, everything it starts stays under DIR. Its
# ports are free ones picked at `up` (two clusters on one host, e.g. two CI jobs, do not collide).
#
#   slurm_cluster.sh up DIR MOUNT STATE [N]   start (N=3); waits until every node is idle
#   slurm_cluster.sh down DIR                 stop everything, by PID and by namespace
#   slurm_cluster.sh node-kill DIR K          kill -9 every process of node K: the node dies
#   slurm_cluster.sh node-start DIR K         start node K again (same root and state)
#   slurm_cluster.sh node-stop DIR K | node-cont DIR K   SIGSTOP / SIGCONT node K's slurmd
set -euo pipefail
cmd=$1 DIR=$2
export SLURM_CONF=$DIR/slurm.conf

# Port K of the ones `up` picked (0: slurmctld's, K: nodeK's slurmd's).
port() { sed -n "$(($1 + 1))p" "$DIR/ports"; }

# N free TCP ports on loopback, one per line: each bound at once (so none repeats), then let go.
pick_ports() {
  /usr/bin/python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print("\n".join(str(s.getsockname()[1]) for s in socks))' "$1"
}

conf() {
  local n=$1
  cat <<CONF
ClusterName=ovtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$(port 0)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/sock
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdTimeout=10
SlurmctldTimeout=10
InactiveLimit=0
KillWait=1
MinJobAge=2
MessageTimeout=5
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
CONF
  for k in $(seq 1 "$n"); do
    echo "NodeName=node$k NodeHostname=localhost NodeAddr=127.0.0.1 Port=$(port "$k") CPUs=1 State=UNKNOWN"
  done
  echo "PartitionName=nodes Nodes=node[1-$n] Default=YES MaxTime=INFINITE State=UP"
}

# Waits up to 10 s for FILE to name a live process; prints its PID. When none comes, says why:
# the end of the daemon's log LOG (a port taken, a bad config, a missing plugin).
pid_of() {
  for _ in $(seq 100); do
    if [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; then cat "$1"; return 0; fi
    sleep 0.1
  done
  echo "slurm_cluster: $1 names no live process: the daemon did not start; the end of $2:" >&2
  tail -n 15 "$2" >&2 2>/dev/null || echo "  (no log written)" >&2
  return 1
}

start_node() {
  local k=$1 mnt state
  mnt=$(cat "$DIR/mount") state=$(cat "$DIR/statedir")
  rm -f "$DIR/run/slurmd-node$k.pid"
  unshare --mount --uts --propagation private sh -c '
    hostname "node$1" && mount --bind "$2/node$1/root" "$3" && mount --bind "$2/node$1/state" "$4" &&
    exec slurmd -N "node$1" -f "$2/slurm.conf"' node "$k" "$DIR" "$mnt" "$state"
  # The node's mount namespace names it for node-kill and down, whatever runs in it later.
  readlink "/proc/$(pid_of "$DIR/run/slurmd-node$k.pid" "$DIR/log/slurmd-node$k.log")/ns/mnt" >"$DIR/run/node$k.ns"
}

# Every process in node K's mount namespace.
node_pids() {
  local ns
  ns=$(cat "$DIR/run/node$1.ns" 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    [[ $(readlink "$p/ns/mnt" 2>/dev/null) == "$ns" ]] && echo "${p#/proc/}"
  done
  return 0
}

wait_idle() {
  local n=$1
  for _ in $(seq 200); do
    [[ $(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l) -ge $n ]] && return 0
    sleep 0.1
  done
  echo "slurm_cluster: nodes not idle after 20 s:" >&2
  sinfo -N >&2 || true
  return 1
}

case $cmd in
  up)
    MNT=$3 STATE=$4 N=${5:-3}
    mkdir -p "$DIR"/{munge,state,spool,run,log} "$MNT" "$STATE"
    echo "$MNT" >"$DIR/mount"
    echo "$STATE" >"$DIR/statedir"
    echo "$N" >"$DIR/nodes"
    chmod 0700 "$DIR/munge"
    dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$DIR/munge/munge.key"
    munged --force --socket="$DIR/munge/sock" --key-file="$DIR/munge/munge.key" --pid-file="$DIR/run/munged.pid" \
      --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/seed"
    pick_ports $((N + 1)) >"$DIR/ports"
    conf "$N" >"$DIR/slurm.conf"
    slurmctld -f "$DIR/slurm.conf"
    pid_of "$DIR/run/slurmctld.pid" "$DIR/log/slurmctld.log" >/dev/null
    for k in $(seq 1 "$N"); do mkdir -p "$DIR/node$k/root" "$DIR/node$k/state"; start_node "$k"; done
    wait_idle "$N"
    ;;
  down)
    N=$(cat "$DIR/nodes" 2>/dev/null || echo 0)
    pids=()
    for k in $(seq 1 "$N"); do pids+=($(node_pids "$k")); done
    for f in "$DIR"/run/*.pid; do [[ -s $f ]] && pids+=("$(cat "$f")"); done
    [[ ${#pids[@]} -gt 0 ]] && kill -9 "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 50); do
      alive=0
      for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
      [[ $alive == 0 ]] && break
      sleep 0.1
    done
    ;;
  node-kill)
    pids=($(node_pids "$3"))
    [[ ${#pids[@]} -gt 0 ]] && kill -9 "${pids[@]}" 2>/dev/null || true
    ;;
  node-start) start_node "$3" ;;
  node-stop) kill -STOP "$(cat "$DIR/run/slurmd-node$3.pid")" ;;
  node-cont) kill -CONT "$(cat "$DIR/run/slurmd-node$3.pid")" ;;
  *) echo "slurm_cluster: unknown command $cmd" >&2; exit 2 ;;
esac
