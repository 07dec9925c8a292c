#!/usr/bin/env bash
# `overlay fleet` on a real Slurm (issue 42): a 3-node slurm-wlm 22.05 cluster started here
# (slurm_cluster.sh), each node with its own copy of the CPU example install (examples/cpu_smoke,
# CMake + Ninja) at one path, driven through the real binary.
#   ab           fleet exec --ref: 4 on every node, 7 on every node, reverted, byte-exact, clean
#   build_fails  node2's build fails: every node reverted, outcome partial naming node2
#   node_killed  node2 dies mid-build (kill -9 of all it runs) and comes back: fleet revert
#                finishes it, byte-exact everywhere
#   bad_input    refused input: one line, non-zero exit, no change on any node
#   coordinator_killed  the coordinator is kill -9'd while the candidate runs: gc-stale spares
#                the entries while its job lives and reverts node3's once the job is gone; fleet
#                status shows the rest with their fleet id; fleet revert finishes them
#   coordinator_sigkill  --slurm-args: the coordinator salloc runs is kill -9'd mid-candidate
#                (salloc then exits 0): the process the caller started exits 121 with a document
#                naming the step and how to finish it, and that fleet revert does
#   signals      SIGTERM to the caller's process (--slurm-args) while the candidate runs, and
#                SIGINT to a coordinator inside an allocation (--slurm) while the nodes build:
#                the step stops, every node is rolled back, FLEET_FAILED, exit 128+signal
#   pid1         the coordinator as pid 1 of its own PID namespace (a container's entrypoint inside
#                the allocation): its srun phases run, 4 then 7 on every node, byte-exact after
#   refused      node2 refuses the apply (its target is not there): exit 1 (the apply failed),
#                node2 failed (never not_clean), nodes 1 and 3 rolled back, no candidate run
# Usage: fleet_test.sh CASE OVERLAY_BINARY SOURCE_DIR
# Exit 77 (skipped) without root or slurm-wlm/munge, unless OVERLAY_REQUIRE_SHARED=1 (CI).
set -euo pipefail
trap 'echo "FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
CASE=$1 BIN=$(realpath "$2") SRC=$(realpath "$3")
HERE=$(cd "$(dirname "$0")" && pwd)
skip() {
  echo "fleet_test: $1" >&2
  [[ -n ${OVERLAY_REQUIRE_SHARED:-} ]] && { echo "FAILED: required (OVERLAY_REQUIRE_SHARED)" >&2; exit 1; }
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || skip "needs root (slurmd, mount namespaces)"
for t in slurmctld slurmd srun salloc munged unshare cmake ninja; do
  command -v "$t" >/dev/null || skip "no $t (apt-get install slurm-wlm munge cmake ninja-build)"
done

W=$(mktemp -d /tmp/overlay-fleet.XXXXXX)
C=$W/cluster I=$W/install OV=$W/install/ov
cleanup() {
  pkill -9 -f "$W/" 2>/dev/null || true  # a coordinator or candidate a failed case left running
  bash "$HERE/slurm_cluster.sh" down "$C" || true
  [[ -n ${KEEP:-} ]] || rm -rf "$W"
}
trap cleanup EXIT
export SLURM_CONF=$C/slurm.conf OVERLAY_STATE_DIR=$W/state

# The install, built once at the path every node sees, then one copy per node.
mkdir -p "$I" "$C"
cp -r "$SRC/examples/cpu_smoke/src" "$SRC/examples/cpu_smoke/CMakeLists.txt" "$I/"
cmake -S "$I" -B "$I/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$I/build" >/dev/null
cp -a "$I" "$W/pristine"
for k in 1 2 3; do
  mkdir -p "$C/node$k"
  cp -a "$I" "$C/node$k/root"
done
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
t0=$(date +%s.%N)
bash "$HERE/slurm_cluster.sh" up "$C" "$I" "$W/state" 3
echo "cluster up in $(since "$t0") s"

TRACKED=(src/kernel.cpp build/libkernel.so build/CMakeFiles/kernel.dir/src/kernel.cpp.o)
APPLY=(--overlay "$OV" --patched-file "$SRC/examples/cpu_smoke/patched/kernel.cpp" --target "$I/src/kernel.cpp"
       --artifact "$I/build/CMakeFiles/kernel.dir/src/kernel.cpp.o" --artifact "$I/build/libkernel.so"
       --build-cmd "cmake --build $I/build" --build-cwd "$I/build")

# Every node's tracked files are the pristine install's bytes.
byte_exact() {
  for k in 1 2 3; do
    for f in "${TRACKED[@]}"; do
      cmp -s "$W/pristine/$f" "$C/node$k/root/$f" || fail "node$k: $f is not at its original bytes"
    done
  done
}
# Each node's smoke output, "node1=4.0 node2=4.0 node3=4.0" (run as a Slurm job on each node).
smoke() { srun -N3 --ntasks-per-node=1 -l "$I/build/smoke" | sort -n | awk -F': ' '{printf "node%d=%s ", $1 + 1, $2}'; }
# A JSON field of the document in $1.
field() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {"d": d}))' "$1" "$2"; }
# The node's own view of its install: one command on node K as a step of job JOB (or its own job).
on_node() {
  local k=$1
  shift
  srun -N1 -w "node$k" "$@"
}
# The coordinator the caller's process $1 started under salloc (--slurm-args): salloc's child.
coordinator_of() { pgrep -P "$(pgrep -P "$1" -x salloc | head -1)" -f "^$BIN " | head -1; }
# Waits until file $1 exists, for as long as process $2 (the one that makes it come) runs: its end
# without the file is a failure, however fast or slow the machine.
wait_for() {
  until [[ -e $1 ]]; do
    if ! kill -0 "$2" 2>/dev/null; then
      [[ -e $1 ]] && return 0
      fail "process $2 ended before $1 appeared"
    fi
    sleep 0.1
  done
}
# Polls until the command "$@" succeeds. A cluster that does not settle within 300 s fails the
# test, never lets it go on as if it had.
wait_until() {
  for _ in $(seq 3000); do "$@" && return 0; sleep 0.1; done
  fail "waited 300 s for: $*"
}
node2_idle() { sinfo -h -n node2 -o %t | grep -q idle; }
job_ended() { [[ -z $(squeue -h -j "$1" -t all -o %T 2>/dev/null | grep -vE 'COMPLETED|CANCELLED|FAILED') ]]; }
no_jobs() { [[ -z $(squeue -h -t running,pending,completing -o %i 2>/dev/null) ]]; }

case $CASE in
  ab)
    [[ $(smoke) == "node1=4.0 node2=4.0 node3=4.0 " ]] || fail "before: $(smoke)"
    t0=$(date +%s.%N)
    rc=0
    "$BIN" --json fleet exec --slurm-args "-N3" --ref "${APPLY[@]}" -- \
      srun -N3 --ntasks-per-node=1 -l "$I/build/smoke" >"$W/exec.json" 2>"$W/exec.err" || rc=$?
    echo "fleet exec (ref + apply + verify + cand + revert + clean on 3 nodes) in $(since "$t0") s"
    cat "$W/exec.err"
    [[ $rc == 0 ]] || fail "fleet exec exited $rc"
    [[ $(field "$W/exec.json" 'd["outcome"]') == ok ]] || fail "outcome $(field "$W/exec.json" 'd["outcome"]')"
    for k in 1 2 3; do
      [[ $(field "$W/exec.json" "d['nodes']['node$k']['state']") == clean ]] || fail "node$k not clean"
      [[ $(field "$W/exec.json" "d['nodes']['node$k']['verify']['document']['result']") == FRESH_BUILD_OK ]] || fail "node$k verify"
    done
    # The reference ran on the stock code on every node, the candidate on the patched code on every node.
    grep -q "fleet: ref exit 0" "$W/exec.err" || fail "no reference run"
    [[ $(grep -c ': 4.0$' "$W/exec.err") == 3 && $(grep -c ': 7.0$' "$W/exec.err") == 3 ]] ||
      fail "expected three 4.0 (ref) and three 7.0 (cand): $(grep -E ': [0-9.]+$' "$W/exec.err" | tr '\n' ' ')"
    [[ $(smoke) == "node1=4.0 node2=4.0 node3=4.0 " ]] || fail "after: $(smoke)"
    byte_exact
    # One-node step for comparison: the same exec on one node of its own allocation.
    t0=$(date +%s.%N)
    srun -N1 -w node1 "$BIN" exec --ref "${APPLY[@]}" -- "$I/build/smoke" >/dev/null 2>&1
    echo "one-node exec (through srun) in $(since "$t0") s"
    byte_exact
    ;;

  build_fails)
    # node2's build cannot compile: its compile rule runs /bin/false (rules.ninja is not regenerated).
    sed -i 's|^\( *command = \)/usr/bin/c++ \$DEFINES|\1/bin/false $DEFINES|' "$C/node2/root/build/CMakeFiles/rules.ninja"
    grep -q "command = /bin/false" "$C/node2/root/build/CMakeFiles/rules.ninja" || fail "could not break node2's build"
    rc=0
    "$BIN" --json fleet apply --slurm-args "-N3" "${APPLY[@]}" >"$W/apply.json" 2>"$W/apply.err" || rc=$?
    cat "$W/apply.err"
    [[ $rc == 1 ]] || fail "fleet apply exited $rc, not 1"
    [[ $(field "$W/apply.json" 'd["outcome"]') == partial ]] || fail "outcome not partial"
    [[ $(field "$W/apply.json" 'd["failed"]') == "['node2']" ]] || fail "failed: $(field "$W/apply.json" 'd["failed"]')"
    [[ $(field "$W/apply.json" 'd["rolled_back"]') == "['node1', 'node3']" ]] || fail "rolled back: $(field "$W/apply.json" 'd["rolled_back"]')"
    [[ $(field "$W/apply.json" 'd["revert_complete"]') == True ]] || fail "revert incomplete"
    field "$W/apply.json" 'd["nodes"]["node2"]["apply"]["error"]' | grep -q "build failed" || fail "node2's error does not say its build failed"
    grep -q "^FLEET_PARTIAL .*failed node2; rolled back node1,node3; unreachable -" "$W/apply.err" || fail "no FLEET_PARTIAL line"
    byte_exact
    "$BIN" fleet status --slurm-args "-N3" --overlay "$OV" --check-clean >"$W/status.out" 2>&1 || fail "not clean: $(cat "$W/status.out")"
    [[ $(grep -c "status clean; 0 native entries" "$W/status.out") == 3 ]] || fail "status: $(cat "$W/status.out")"
    ;;

  node_killed)
    # Each node's build starts by marking its own install (node-local), then takes 3 s; node2's
    # waits to be killed (a fixed 3 s let a loaded CI host notice the mark and kill the node only
    # after that build had ended, and the fleet applied whole).
    APPLY+=(--build-cmd "sh -c 'touch $I/building && if [ \"\$SLURMD_NODENAME\" = node2 ]; then sleep 120; else sleep 3; fi'")
    rc=0
    "$BIN" --json fleet apply --slurm-args "-N3" "${APPLY[@]}" >"$W/apply.json" 2>"$W/apply.err" &
    coord=$!
    wait_for "$C/node2/root/building" "$coord"
    bash "$HERE/slurm_cluster.sh" node-kill "$C" 2
    t0=$(date +%s.%N)
    wait "$coord" || rc=$?
    echo "coordinator returned $(since "$t0") s after node2 died"
    cat "$W/apply.err"
    [[ $rc == 121 ]] || fail "fleet apply exited $rc, not 121 (a node may hold the patch)"
    [[ $(field "$W/apply.json" 'd["unreachable"]') == "['node2']" ]] || fail "unreachable: $(field "$W/apply.json" 'd["unreachable"]')"
    [[ $(field "$W/apply.json" 'd["rolled_back"]') == "['node1', 'node3']" ]] || fail "rolled back: $(field "$W/apply.json" 'd["rolled_back"]')"
    id=$(field "$W/apply.json" 'd["fleet_id"]')
    for k in 1 3; do
      for f in "${TRACKED[@]}"; do cmp -s "$W/pristine/$f" "$C/node$k/root/$f" || fail "node$k: $f not restored"; done
    done
    # node2 died mid-add-native: its source is swapped, its build half done.
    cmp -s "$W/pristine/src/kernel.cpp" "$C/node2/root/src/kernel.cpp" && fail "node2 was never patched: the kill came too early"
    bash "$HERE/slurm_cluster.sh" node-start "$C" 2
    wait_until node2_idle
    sinfo -N
    "$BIN" fleet status --slurm-args "-N3" --overlay "$OV" 2>&1 | tee "$W/status.out"
    grep -q "node2 status NOT clean; 1 native entry \[.* patch $id owner" "$W/status.out" || fail "status does not show node2's entry of $id"
    "$BIN" fleet revert --slurm-args "-N3" --overlay "$OV" --fleet-id "$id" 2>&1 | tee "$W/revert.out"
    grep -q "^FLEET_OK revert" "$W/revert.out" || fail "fleet revert did not finish"
    rm -f "$C"/node*/root/building
    byte_exact
    ;;

  coordinator_killed)
    # The candidate marks that it runs, then waits: the coordinator dies between apply and revert.
    "$BIN" fleet exec --slurm-args "-N3" "${APPLY[@]}" -- sh -c "echo \$\$ >$W/cand.tmp && mv $W/cand.tmp $W/cand && exec sleep 300" \
      >"$W/exec.out" 2>&1 &
    outer=$!
    wait_for "$W/cand" "$outer"
    job=$(squeue -h -o %i | head -1)
    coord=$(coordinator_of "$outer")
    [[ -n $job && -n $coord ]] || fail "no job ($job) or coordinator ($coord)"
    # While the coordinator's job runs, gc-stale on a node leaves its entries alone.
    srun --jobid="$job" --overlap -N1 -w node1 "$BIN" gc-stale --root "$I" >"$W/gc1.out" 2>&1 || true
    cat "$W/gc1.out"
    grep -q "coordinator pid $coord on $(uname -n) (Slurm job $job) is still running" "$W/gc1.out" || fail "gc-stale did not spare the live step (coordinator $coord, job $job)"
    cmp -s "$W/pristine/src/kernel.cpp" "$C/node1/root/src/kernel.cpp" && fail "node1 reverted under a live coordinator"
    # The owner's lease is under the key every version wrote and read: a node's older binary keeps the job.
    /usr/bin/python3 -c 'import json,sys; o=json.load(open(sys.argv[1]))["natives"][0]["owner"]; sys.exit(o.get("slurm_job") != sys.argv[2])' \
      "$C/node1/root/ov/_overlay_manifest.json" "$job" || fail "node1's entry does not record Slurm job $job as slurm_job"
    # fleet status during the step, as a step of the coordinator's own job: every node's entry, owner alive.
    SLURM_JOB_ID=$job SLURM_JOB_NODELIST="node[1-3]" "$BIN" fleet status --slurm --overlay "$OV" 2>&1 | tee "$W/status-live.out"
    [[ $(grep -c "1 native entry .* patch f[0-9]*-[0-9a-f]* owner $coord@$(uname -n) alive" "$W/status-live.out") == 3 ]] ||
      fail "status during the step does not show three live entries"
    kill -9 "$coord"
    kill -9 "$(cat "$W/cand")" 2>/dev/null || true  # the candidate (the coordinator's death took it along already, or not)
    wait_until job_ended "$job"
    cat "$W/exec.out"
    # Its job is gone: the step's entries are stale, with the fleet id on every node.
    "$BIN" fleet status --slurm-args "-N3" --overlay "$OV" 2>&1 | tee "$W/status.out"
    [[ $(grep -c "1 native entry .* patch f[0-9]*-[0-9a-f]* owner $coord@$(uname -n) gone" "$W/status.out") == 3 ]] || fail "status does not show the three stale entries"
    id=$(grep -o "patch f[0-9]*-[0-9a-f]*" "$W/status.out" | head -1 | cut -d' ' -f2)
    # node3 is cleaned as any node would be by CI's gc-stale: the entry's owner is gone.
    on_node 3 "$BIN" gc-stale --root "$I" 2>&1 | tee "$W/gc3.out"
    for f in "${TRACKED[@]}"; do cmp -s "$W/pristine/$f" "$C/node3/root/$f" || fail "gc-stale left node3's $f"; done
    "$BIN" fleet revert --slurm-args "-N3" --overlay "$OV" --fleet-id "$id" 2>&1 | tee "$W/revert.out"
    grep -q "node3 revert reverted 0 of 0 entries" "$W/revert.out" || fail "node3 should have had nothing left"
    grep -q "^FLEET_OK revert" "$W/revert.out" || fail "fleet revert did not finish"
    byte_exact
    "$BIN" fleet status --slurm-args "-N3" --overlay "$OV" --check-clean >/dev/null 2>&1 || fail "not clean after fleet revert"
    ;;
  bad_input)
    # One line naming the problem, a non-zero exit, nothing changed on any node (or here).
    expect() {  # expect RC PATTERN -- ARGV...: exit RC, stderr matching PATTERN, one line
      local want=$1 pat=$2 rc=0
      shift 3
      "$@" >"$W/out" 2>"$W/err" || rc=$?
      [[ $rc == "$want" ]] || fail "$* exited $rc, not $want: $(cat "$W/err")"
      grep -v '^salloc: ' "$W/err" | grep -q -- "$pat" || fail "$*: stderr does not say '$pat': $(cat "$W/err")"
      [[ $(grep -vc '^salloc: ' "$W/err") == 1 ]] || fail "$*: not one line: $(cat "$W/err")"
    }
    expect 1 "no engine: pass --slurm" -- "$BIN" fleet apply "${APPLY[@]}"
    expect 1 "not inside a Slurm allocation" -- env -u SLURM_JOB_ID "$BIN" fleet apply --slurm "${APPLY[@]}"
    expect 2 "excludes" -- "$BIN" fleet apply --slurm --slurm-args "-N3" "${APPLY[@]}"
    expect 1 "no command: pass it after --" -- "$BIN" fleet exec --slurm-args "-N3" "${APPLY[@]}"
    expect 1 "python-root applies only with --patch-root" -- "$BIN" fleet apply --slurm-args "-N3" "${APPLY[@]}" --python-root /tmp
    expect 2 "fleet-id" -- "$BIN" fleet revert --slurm-args "-N3" --overlay "$OV" --fleet-id "../x"
    for k in 1 2 3; do [[ ! -e $C/node$k/root/ov ]] || fail "node$k has an overlay after refused input"; done
    [[ ! -e $OV ]] || fail "the coordinator's host has an overlay after refused input"
    # Input only the nodes can judge (a target that is not there) fails on every node, changing nothing.
    rc=0
    "$BIN" --json fleet apply --slurm-args "-N3" "${APPLY[@]/$I\/src\/kernel.cpp/$I/src/nothere.cpp}" >"$W/apply.json" 2>"$W/apply.err" || rc=$?
    [[ $rc == 1 ]] || fail "fleet apply of a missing target exited $rc: $(tail -c 3000 "$W/apply.err") $(tail -c 3000 "$W/apply.json")"
    [[ $(field "$W/apply.json" 'd["outcome"]') == failed ]] || fail "outcome not failed"
    [[ $(field "$W/apply.json" 'd["failed"]') == "['node1', 'node2', 'node3']" ]] || fail "not every node failed"
    field "$W/apply.json" 'd["nodes"]["node1"]["apply"]["error"]' | grep -q "nothere.cpp" || fail "node1's error does not name the file"
    byte_exact
    # Every node failing a pass-on verb: one word, failed, in the document and the printed line.
    rc=0
    "$BIN" --json fleet status --slurm-args "-N3" --overlay "$W/nothere" >"$W/status.json" 2>"$W/status.err" || rc=$?
    [[ $rc == 1 ]] || fail "fleet status of a missing overlay exited $rc"
    [[ $(field "$W/status.json" 'd["outcome"]') == failed ]] || fail "outcome $(field "$W/status.json" 'd["outcome"]'), not failed"
    grep -q "^FLEET_FAILED status" "$W/status.err" || fail "printed: $(grep FLEET_ "$W/status.err")"
    ;;

  coordinator_sigkill)
    "$BIN" --json fleet exec --slurm-args "-N3" "${APPLY[@]}" -- sh -c "echo \$\$ >$W/cand.tmp && mv $W/cand.tmp $W/cand && exec sleep 60" \
      >"$W/exec.json" 2>"$W/exec.err" &
    outer=$!
    wait_for "$W/cand" "$outer"
    coord=$(coordinator_of "$outer")
    [[ -n $coord ]] || fail "no coordinator under salloc"
    kill -9 "$coord"
    rc=0
    wait "$outer" || rc=$?
    cat "$W/exec.err"
    [[ $rc == 121 ]] || fail "the caller's process exited $rc after its coordinator was killed, not 121"
    id=$(field "$W/exec.json" 'd["fleet_id"]')
    [[ $id == f* ]] || fail "the document names no fleet step: $(cat "$W/exec.json")"
    field "$W/exec.json" 'd["error"]' | grep -q "ended without a result" || fail "the document does not say the coordinator died"
    [[ $(field "$W/exec.json" 'd["revert_complete"]') == False ]] || fail "revert_complete is not false"
    # What it says to run finishes the step.
    hint=$(field "$W/exec.json" 'd["error"]' | grep -o 'overlay fleet revert [^`]*')
    [[ $hint == *"--fleet-id $id"* ]] || fail "no revert command in the document: $hint"
    kill -9 "$(cat "$W/cand")" 2>/dev/null || true
    wait_until no_jobs
    eval "\"$BIN\" ${hint#overlay }" 2>&1 | tee "$W/revert.out"
    grep -q "^FLEET_OK revert" "$W/revert.out" || fail "the revert the document names did not finish"
    byte_exact
    ;;

  signals)
    rc=0
    "$BIN" fleet exec --slurm-args "-N3" "${APPLY[@]}" -- sh -c "touch $W/cand-ran; sleep 30; touch $W/cand-finished" >"$W/exec.out" 2>&1 &
    outer=$!
    wait_for "$W/cand-ran" "$outer"
    kill -TERM "$outer"
    wait "$outer" || rc=$?
    cat "$W/exec.out"
    [[ $rc == 143 ]] || fail "fleet exec exited $rc after SIGTERM, not 143"
    [[ ! -e $W/cand-finished ]] || fail "the candidate ran on after SIGTERM"
    grep -q "^FLEET_FAILED f" "$W/exec.out" || fail "no FLEET_FAILED after SIGTERM"
    grep -q "^FLEET_OK" "$W/exec.out" && fail "FLEET_OK after SIGTERM"
    byte_exact
    # Inside an allocation: SIGINT to the coordinator while every node builds (3 s each).
    rm -f "$W/cand-ran"
    salloc -N3 --no-kill "$BIN" fleet exec --slurm "${APPLY[@]}" --build-cmd "sh -c 'touch $I/building && sleep 3'" -- \
      touch "$W/cand-ran" >"$W/exec2.out" 2>&1 &
    alloc=$!
    wait_for "$C/node1/root/building" "$alloc"
    coord=$(pgrep -f "^$BIN fleet exec --slurm " | head -1)
    [[ -n $coord ]] || fail "no coordinator"
    kill -INT "$coord"
    rc=0
    wait "$alloc" || rc=$?
    cat "$W/exec2.out"
    [[ $rc == 130 ]] || fail "fleet exec exited $rc after SIGINT during the build, not 130"
    [[ ! -e $W/cand-ran ]] || fail "the candidate ran after SIGINT during the apply"
    grep -q "stopped by signal 2" "$W/exec2.out" || fail "does not say the step was stopped"
    grep -q "^FLEET_FAILED f" "$W/exec2.out" || fail "no FLEET_FAILED after SIGINT"
    rm -f "$C"/node*/root/building
    byte_exact
    ;;

  pid1)
    command -v unshare >/dev/null || skip "no unshare (util-linux)"
    rc=0
    salloc -N3 --no-kill unshare --pid --fork --mount-proc "$BIN" --json fleet exec --slurm --ref "${APPLY[@]}" -- \
      srun -N3 --ntasks-per-node=1 -l "$I/build/smoke" >"$W/exec.json" 2>"$W/exec.err" || rc=$?
    cat "$W/exec.err"
    [[ $rc == 0 ]] || fail "fleet exec as pid 1 exited $rc"
    [[ $(field "$W/exec.json" 'd["outcome"]') == ok ]] || fail "outcome $(field "$W/exec.json" 'd["outcome"]')"
    [[ $(grep -c ': 4.0$' "$W/exec.err") == 3 && $(grep -c ': 7.0$' "$W/exec.err") == 3 ]] ||
      fail "expected three 4.0 (ref) and three 7.0 (cand): $(grep -E ': [0-9.]+$' "$W/exec.err" | tr '\n' ' ')"
    byte_exact
    ;;

  refused)
    mv "$C/node2/root/src/kernel.cpp" "$W/node2-kernel.cpp"
    rc=0
    "$BIN" --json fleet exec --slurm-args "-N3" "${APPLY[@]}" -- touch "$W/cand-ran" >"$W/exec.json" 2>"$W/exec.err" || rc=$?
    cat "$W/exec.err"
    mv "$W/node2-kernel.cpp" "$C/node2/root/src/kernel.cpp"
    [[ $rc == 1 ]] || fail "fleet exec with a node that refused exited $rc, not 1"
    [[ ! -e $W/cand-ran ]] || fail "the candidate ran though node2 refused"
    [[ $(field "$W/exec.json" "d['nodes']['node2']['state']") == failed ]] || fail "node2: $(field "$W/exec.json" "d['nodes']['node2']['state']")"
    [[ $(field "$W/exec.json" 'd["rolled_back"]') == "['node1', 'node3']" ]] || fail "rolled back: $(field "$W/exec.json" 'd["rolled_back"]')"
    [[ $(field "$W/exec.json" 'd["outcome"]') == partial ]] || fail "outcome $(field "$W/exec.json" 'd["outcome"]')"
    grep -q "^FLEET_PARTIAL" "$W/exec.err" || fail "no FLEET_PARTIAL line"
    byte_exact
    ;;

  *) fail "unknown case $CASE" ;;
esac
echo "fleet_test $CASE: passed"
