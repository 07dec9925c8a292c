#!/usr/bin/env bash
# containers_test.sh OVERLAY CASE: the tool where containers run it (issue 50), in real PID
# namespaces made by `unshare --pid --fork --mount-proc`.
#   pid1        the tool as a container's entrypoint (pid 1): a build, exec's two legs, and a Python
#               lookup run their children (each used to exit 127 at once: the child took pid 1
#               for the parent that had died before it could ask to die with it);
#   namespaces  two add-natives into one overlay from two containers, each the tool as pid 2:
#               the end of one leaves the other's in-flight mark, so gc-stale spares the one still
#               building, and both say FRESH_BUILD_OK over their own builds;
#   neighbours  another account (nobody) flocks root's overlay directories: revert and gc-stale
#               go on, naming it; an overlay directory others can write (1777, a tmpfs root) is
#               refused when a change would be recorded there, in revert's words, nothing changed;
#   trash       the overlay on a tmpfs, the install on disk (the cache put aside, or kept as a tar):
#               when revert returns, the rebuilt cache is out of the install (deleted there: no
#               rename reaches the overlay's filesystem), and a tree a killed revert left there
#               makes status NOT clean until the next revert deletes it;
#   copies      an archived copy of an overlay (cp -a) whose files another overlay holds now, or
#               whose original was moved: gc-stale leaves it alone, saying it is a copy, and revert
#               refuses it; the live patch stays. Once its original is gone, revert --adopt;
#   owners      an entry whose owner (--owner-pid) is a process of a container: gc-stale on the
#               host finds it in that container's PID namespace and spares it (it used to look up
#               the same number among the host's processes, find none, and revert under the live
#               agent); from a sibling container, which cannot see it, it is left alone and said
#               so; once the container has ended, the host's gc-stale reverts it;
#   inflight    revert (plain, and --with-layers from the accepted overlay) while another process's
#               add-native or exec --over is building on the overlay: refused, nothing changed;
#               that run then verifies and runs its own build (found by a probe: it printed
#               FRESH_BUILD_OK (checked 0) and ran the candidate on the stock build).
# Exits 77 (skipped) where a PID namespace cannot be made (not root, no unshare).
set -uo pipefail
overlay=$(realpath "$1")
case=$2
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
command -v unshare >/dev/null || skip "unshare is not installed (util-linux)"
command -v cc >/dev/null || skip "no C compiler (cc)"
[[ $(unshare --pid --fork --mount-proc sh -c 'echo $$' 2>/dev/null) == 1 ]] ||
  skip "cannot make a PID namespace here (unshare --pid needs root or user namespaces)"

# trash: the whole case in a mount namespace of its own (the overlay on a tmpfs there).
if [[ $case == trash && -z ${IN_MOUNT_NS:-} && $(id -u) == 0 ]]; then
  IN_MOUNT_NS=1 exec unshare --mount --propagation private bash "$0" "$overlay" trash
fi
w=$(mktemp -d)
trap 'umount "$w/ovfs" 2>/dev/null; rm -rf "$w"' EXIT
export OVERLAY_STATE_DIR=$w/state
inst=$w/inst
mkdir -p "$inst/src" "$inst/build"
kernel() { printf 'const char* stamp(void) { return "%s"; }\n' "$1"; }
build_cmd() { echo "cc -shared -fPIC -o build/lib$1.so src/$1.c"; }
for t in ka kb; do
  kernel "STAMP-orig-$t" >"$inst/src/$t.c"
  (cd "$inst" && $(build_cmd $t)) || fail "the stock build of $t failed"
  cp "$inst/src/$t.c" "$w/pristine-$t.c"
  cp "$inst/build/lib$t.so" "$w/pristine-lib$t.so"
done
stamp_of() { grep -aoE 'STAMP-[A-Za-z0-9-]+' "$1" | head -n 1; }
candidate() { # candidate NAME TARGET: a candidate source stamped NAME
  kernel "STAMP-$1" >"$w/$1.c"
  echo "$w/$1.c"
}
add_args() { # add_args OVERLAY TARGET PATCHED [BUILD]
  echo --overlay "$1" --target "$inst/src/$2.c" --patched-file "$3" --artifact "$inst/build/lib$2.so" --build-cwd "$inst"
}
pristine() {
  for t in ka kb; do
    cmp -s "$inst/src/$t.c" "$w/pristine-$t.c" && cmp -s "$inst/build/lib$t.so" "$w/pristine-lib$t.so" ||
      fail "$t is not pristine ($(stamp_of "$inst/build/lib$t.so"))"
  done
}
# The tool as pid 1 of a new PID namespace (unshare execs it in the forked child).
as_pid1() { unshare --pid --fork --mount-proc "$@"; }
# The tool as pid 2: a shell is pid 1 there and forks it (the exit keeps sh from exec'ing it).
as_pid2() { unshare --pid --fork --mount-proc sh -c '"$@"; exit $?' sh "$@"; }

case $case in
pid1)
  [[ $(as_pid1 sh -c 'echo $$') == 1 ]] || fail "the namespace's first process is not pid 1"
  # A build.
  out=$(as_pid1 "$overlay" add-native $(add_args "$w/ov1" ka "$(candidate c1)") --build-cmd "$(build_cmd ka)" 2>"$w/err") ||
    fail "add-native as pid 1: $(cat "$w/err")"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-c1 ]] || fail "add-native as pid 1 did not build the candidate: $out"
  v=$(as_pid1 "$overlay" verify-native --overlay "$w/ov1") || fail "verify-native as pid 1: $v"
  [[ $v == *"FRESH_BUILD_OK (checked 1)"* ]] || fail "verify-native as pid 1: $v"
  as_pid1 "$overlay" revert --overlay "$w/ov1" >/dev/null 2>"$w/err" || fail "revert as pid 1: $(cat "$w/err")"
  pristine
  # exec: the reference and the candidate each run, each on its own build.
  rec=$w/exec-runs
  out=$(as_pid1 "$overlay" exec $(add_args "$w/ov2" kb "$(candidate c2)") --build-cmd "$(build_cmd kb)" --ref -- \
    sh -c "grep -aoE 'STAMP-[A-Za-z0-9-]+' $inst/build/libkb.so | head -n 1 >> $rec" 2>"$w/err") ||
    fail "exec as pid 1 (exit $?): $out $(cat "$w/err")"
  [[ $(tr '\n' ' ' <"$rec") == "STAMP-orig-kb STAMP-c2 " ]] || fail "exec as pid 1 ran: $(tr '\n' ' ' <"$rec")"
  pristine
  # A Python lookup: add-module asks the interpreter where the module is.
  mkdir -p "$w/py"
  echo 'V = 4' >"$w/py/mymod.py"
  printf -- '--- a/mymod.py\n+++ b/mymod.py\n@@ -1 +1 @@\n-V = 4\n+V = 7\n' >"$w/mymod.diff"
  out=$(PYTHONPATH=$w/py as_pid1 "$overlay" add-module --overlay "$w/ov3" --module mymod --patch "$w/mymod.diff" 2>"$w/err") ||
    fail "add-module as pid 1: $out $(cat "$w/err")"
  v=$(PYTHONPATH=$w/ov3:$w/py python3 -c 'import mymod; print(mymod.V)') || fail "python3 with the overlay failed"
  [[ $v == 7 ]] || fail "the module add-module wrote as pid 1 is not the patched one: V=$v"
  ;;
namespaces)
  [[ $(as_pid2 sh -c 'echo $$') == 2 ]] || fail "the tool would not be pid 2 in its namespace"
  ov=$w/runs/agent/ov
  mkdir -p "$w/runs/agent"
  start() { # start TARGET NAME: an add-native as pid 2 of its own namespace, its build held at a gate
    local gated="sh -c 'touch $w/building-$2; while [ ! -e $w/gate-$2 ]; do sleep 0.01; done; $(build_cmd $1)'"
    as_pid2 "$overlay" add-native $(add_args "$ov" "$1" "$(candidate "$2")") --build-cmd "$gated" >"$w/out-$2" 2>"$w/err-$2" &
  }
  wait_for() { for _ in $(seq 1 3000); do [[ -e $1 ]] && return 0; sleep 0.01; done; fail "timed out waiting for $1"; }
  start ka a
  pid_a=$!
  wait_for "$w/building-a"
  start kb b
  pid_b=$!
  wait_for "$w/building-b"
  marks=$(find "$ov" -maxdepth 1 -name '.overlay-live-*' | wc -l)
  [[ $marks == 2 ]] || fail "two add-natives in flight left $marks in-flight mark(s): $(ls -a "$ov")"
  touch "$w/gate-b"
  wait $pid_b || fail "the second add-native failed: $(cat "$w/err-b")"
  # CI's gc-stale while the first still builds: its entry is in flight, never reverted.
  gc=$("$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale: $gc"
  [[ $gc == *"add-native in progress"* ]] || fail "gc-stale did not see the first add-native in flight: $gc"
  [[ $(stamp_of "$inst/build/libkb.so") == STAMP-b ]] || fail "gc-stale reverted an overlay whose add-native was building: $gc"
  touch "$w/gate-a"
  wait $pid_a || fail "the first add-native failed: $(cat "$w/err-a")"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-a ]] || fail "the first add-native's build is not in place"
  v=$("$overlay" verify-native --overlay "$ov") || fail "verify-native: $v"
  [[ $v == *"FRESH_BUILD_OK (checked 2)"* ]] || fail "verify-native after both: $v"
  "$overlay" revert --overlay "$ov" >/dev/null 2>&1 || fail "revert failed"
  pristine
  ;;
neighbours)
  [[ $(id -u) == 0 ]] || skip "not root: needs a second account (nobody)"
  command -v setpriv >/dev/null && command -v flock >/dev/null || skip "needs setpriv and flock (util-linux)"
  chmod 755 "$w"
  mkdir -p "$w/runs/a" "$w/runs/b" "$w/flags"
  chmod 1777 "$w/flags"
  as_nobody_flock() { # as_nobody_flock DIR NAME: nobody holds a flock on DIR until killed
    setpriv --reuid=65534 --regid=65534 --clear-groups flock "$1" sh -c "touch $w/flags/$2; exec sleep 120" >/dev/null 2>&1 &
    for _ in $(seq 1 500); do [[ -e $w/flags/$2 ]] && return 0; sleep 0.01; done
    fail "nobody could not flock $1"
  }
  unblock() { # the flock(1) and the sleep it runs, which holds the lock too (no procps needed)
    kill -KILL $(cat /proc/"$1"/task/*/children 2>/dev/null) "$1" 2>/dev/null
    wait "$1" 2>/dev/null
  }
  "$overlay" add-native $(add_args "$w/runs/a/ov" ka "$(candidate na)") --build-cmd "$(build_cmd ka)" >/dev/null 2>&1 ||
    fail "add-native a"
  as_nobody_flock "$w/runs/a/ov" a
  blocker=$!
  start=$SECONDS
  OVERLAY_LOCK_TIMEOUT=20 "$overlay" revert --overlay "$w/runs/a/ov" >/dev/null 2>"$w/err" ||
    fail "revert under nobody's flock (exit $?): $(cat "$w/err")"
  ((SECONDS - start < 20)) || fail "revert waited out the lock timeout for nobody's flock"
  grep -q "an account that does not own it" "$w/err" || fail "revert did not name the other account's flock: $(cat "$w/err")"
  unblock $blocker
  pristine
  # CI's gc-stale over a dead run's overlay that nobody flocks.
  "$overlay" add-native $(add_args "$w/runs/b/ov" kb "$(candidate nb)") --build-cmd "$(build_cmd kb)" >/dev/null 2>&1 ||
    fail "add-native b"
  as_nobody_flock "$w/runs/b/ov" b
  blocker=$!
  gc=$(OVERLAY_LOCK_TIMEOUT=20 "$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale under nobody's flock: $gc"
  [[ $gc == *"reverted 1 stale"* ]] || fail "gc-stale did not revert the overlay nobody flocks: $gc"
  unblock $blocker
  pristine
  # An overlay directory others can write: refused before anything changes, in revert's words.
  mkdir -m 1777 "$w/shared-ov"
  out=$("$overlay" add-native $(add_args "$w/shared-ov" ka "$(candidate ww)") --build-cmd "$(build_cmd ka)" 2>&1) &&
    fail "add-native accepted a world-writable overlay directory: $out"
  [[ $out == *"group- or world-writable"* && $(wc -l <<<"$out") == 1 ]] || fail "the refusal is not one line naming why: $out"
  [[ ! -e $w/shared-ov/_overlay_manifest.json ]] || fail "the refused add-native wrote a manifest"
  pristine
  out=$("$overlay" add-module --overlay "$w/shared-ov" --module json --src-file "$w/ww.c" 2>&1) &&
    fail "add-module accepted a world-writable overlay directory: $out"
  [[ $out == *"group- or world-writable"* ]] || fail "add-module's refusal does not say why: $out"
  # A tmpfs mounted as the overlay directory (its root is 1777): the same.
  mkdir "$w/tmpfs-ov"
  out=$(unshare --mount sh -c 'mount -t tmpfs none "$1" && shift && exec "$@"' sh "$w/tmpfs-ov" \
    "$overlay" add-native $(add_args "$w/tmpfs-ov" ka "$(candidate tm)") --build-cmd "$(build_cmd ka)" 2>&1) &&
    fail "add-native accepted a tmpfs root as its overlay: $out"
  [[ $out == *"group- or world-writable"* ]] || fail "the tmpfs refusal does not say why: $out"
  pristine
  # Told to trust it: recorded, and reverted when revert is told too.
  "$overlay" add-native $(add_args "$w/shared-ov" ka "$(candidate tr)") --build-cmd "$(build_cmd ka)" --trust-owner >/dev/null 2>&1 ||
    fail "add-native --trust-owner"
  "$overlay" revert --overlay "$w/shared-ov" --trust-owner >/dev/null 2>&1 || fail "revert --trust-owner"
  pristine
  ;;
trash)
  [[ $(id -u) == 0 ]] || skip "not root: needs a tmpfs mount"
  mkdir "$w/ovfs"
  mount -t tmpfs -o mode=0755 none "$w/ovfs" || skip "cannot mount a tmpfs here"
  cache=$inst/build/jit-cache
  mkdir -p "$cache"
  echo stock >"$cache/entry"
  (cd "$inst/build" && tar -cf "$w/cache-before.tar" jit-cache)
  rebuild="sh -c '$(build_cmd ka) && mkdir -p build/jit-cache && i=0 && while [ \$i -lt 2000 ]; do echo \$i > build/jit-cache/f\$i; i=\$((i+1)); done'"
  for mode in auto tar; do
    ov=$w/ovfs/ov-$mode
    "$overlay" add-native $(add_args "$ov" ka "$(candidate t$mode)") --invalidate-cache "$cache" --cache-snapshot $mode \
      --build-cmd "$rebuild" >/dev/null 2>"$w/err" || fail "add-native ($mode): $(cat "$w/err")"
    [[ -e $cache/f1999 ]] || fail "the build did not rebuild the cache ($mode)"
    "$overlay" revert --overlay "$ov" >/dev/null 2>"$w/err" || fail "revert ($mode): $(cat "$w/err")"
    left=$(find "$inst/build" -maxdepth 1 -name '.*overlay-*' | tr '\n' ' ')
    [[ -z $left ]] || fail "revert ($mode) returned with the rebuilt cache still in the install: $left"
    (cd "$inst/build" && tar -cf "$w/cache-after.tar" jit-cache)
    [[ $(tar -tvf "$w/cache-before.tar" | awk '{print $6}') == $(tar -tvf "$w/cache-after.tar" | awk '{print $6}') ]] ||
      fail "the cache is not the original after revert ($mode)"
    pristine
  done
  # A revert killed after its record named a trash tree, before that tree got out: not clean.
  ov=$w/ovfs/ov-tar
  trash=$inst/build/.jit-cache.overlay-trash-0123abcd
  mkdir "$trash" && echo rebuilt >"$trash/f"
  python3 - "$ov/_overlay_manifest.json" "$trash" <<'PY' || fail "cannot name the litter in the manifest"
import json, sys
m = json.load(open(sys.argv[1]))
m["litter"] = [sys.argv[2]]
json.dump(m, open(sys.argv[1], "w"))
PY
  out=$("$overlay" status --overlay "$ov" --check-clean 2>&1) && fail "status --check-clean clean over litter in the install: $out"
  [[ $out == *"litter"*"$trash"* ]] || fail "status does not name the litter: $out"
  "$overlay" revert --overlay "$ov" >/dev/null 2>&1 || fail "the revert after the killed one failed"
  [[ ! -e $trash ]] || fail "the next revert left the litter in the install"
  "$overlay" status --overlay "$ov" --check-clean >/dev/null 2>&1 || fail "status not clean once the litter is gone"
  ;;
copies)
  mkdir -p "$w/runs/a1" "$w/runs/a2" "$w/runs/archive"
  sleep 600 &
  agent1=$!
  "$overlay" add-native $(add_args "$w/runs/a1/ov" ka "$(candidate c1)") --build-cmd "$(build_cmd ka)" --owner-pid $agent1 \
    >/dev/null 2>&1 || fail "add-native a1"
  cp -a "$w/runs/a1/ov" "$w/runs/archive/a1-ov"
  gc=$("$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale with a copy of a live overlay: $gc"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-c1 && $(stamp_of "$inst/src/ka.c") == STAMP-c1 ]] ||
    fail "gc-stale reverted a copy over the live overlay's patch: $gc"
  # The agent reverts and ends; the next agent patches the same file; CI's gc-stale and a hand
  # revert of the copy (its owner is dead now).
  "$overlay" revert --overlay "$w/runs/a1/ov" >/dev/null 2>&1 || fail "revert a1"
  kill $agent1
  "$overlay" add-native $(add_args "$w/runs/a2/ov" ka "$(candidate c2)") --build-cmd "$(build_cmd ka)" --owner-pid $$ \
    >/dev/null 2>&1 || fail "add-native a2"
  gc=$("$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale: $gc"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-c2 ]] || fail "gc-stale reverted a copy over another agent's live patch: $gc"
  [[ $gc == *"archive/a1-ov"*"is a copy"* ]] || fail "gc-stale did not say the copy is one: $gc"
  out=$("$overlay" revert --overlay "$w/runs/archive/a1-ov" 2>&1) && fail "revert of the copy over a live patch exit 0: $out"
  [[ $out == *"held by overlay $w/runs/a2/ov"* ]] || fail "revert of the copy does not name the holder: $out"
  [[ $(stamp_of "$inst/src/ka.c") == STAMP-c2 ]] || fail "revert of the copy wrote over the live patch"
  "$overlay" revert --overlay "$w/runs/a2/ov" >/dev/null 2>&1 || fail "revert a2"
  pristine
  # The overlay moved (mv: its directory, renamed) and archived (cp -a of the moved one): the copy
  # is not the directory that made the change, and the moved one lives on under its new name, so
  # gc-stale and revert leave the copy alone (found by the claims checker: the copy's revert undid
  # the moved overlay's live change). The moved one reverts; it is the same directory.
  "$overlay" add-native $(add_args "$w/runs/a1/ov" kb "$(candidate c3)") --build-cmd "$(build_cmd kb)" >/dev/null 2>&1 ||
    fail "add-native a1 again"
  rm -rf "$w/runs/archive/a1-ov"
  mv "$w/runs/a1/ov" "$w/runs/a1/ov-moved"
  cp -a "$w/runs/a1/ov-moved" "$w/runs/archive/a1-ov"
  gc=$("$overlay" gc-stale --root "$w/runs/archive" 2>&1) || fail "gc-stale over the copy of a moved overlay: $gc"
  [[ $(stamp_of "$inst/build/libkb.so") == STAMP-c3 ]] || fail "gc-stale reverted a copy of a moved overlay: $gc"
  [[ $gc == *"is not that one (a copy"* ]] || fail "gc-stale did not say the copy is one: $gc"
  out=$("$overlay" revert --overlay "$w/runs/archive/a1-ov" 2>&1) && fail "revert of a copy of a moved overlay exit 0: $out"
  [[ $(stamp_of "$inst/src/kb.c") == STAMP-c3 ]] || fail "revert of the copy undid the moved overlay's change"
  "$overlay" revert --overlay "$w/runs/a1/ov-moved" >/dev/null 2>"$w/err" || fail "revert of the moved overlay: $(cat "$w/err")"
  pristine
  # A copy whose original is gone for good (archived, then the run removed): left alone until the
  # caller says it is that overlay (--adopt).
  "$overlay" add-native $(add_args "$w/runs/a1/ov" kb "$(candidate c4)") --build-cmd "$(build_cmd kb)" >/dev/null 2>&1 ||
    fail "add-native a1 a third time"
  rm -rf "$w/runs/archive/a1-ov"
  cp -a "$w/runs/a1/ov" "$w/runs/archive/a1-ov"
  rm -rf "$w/runs/a1/ov"
  out=$("$overlay" revert --overlay "$w/runs/archive/a1-ov" 2>&1) && fail "revert of a copy without --adopt exit 0: $out"
  [[ $out == *"--adopt"* ]] || fail "the refusal does not say how to take the copy over: $out"
  "$overlay" revert --overlay "$w/runs/archive/a1-ov" --adopt >/dev/null 2>"$w/err" || fail "revert --adopt of the only copy: $(cat "$w/err")"
  pristine
  ;;
inflight)
  gated() { echo "sh -c 'touch $w/building-$1; while [ ! -e $w/gate-$1 ]; do sleep 0.01; done; $(build_cmd ka)'"; }
  wait_for() { for _ in $(seq 1 3000); do [[ -e $1 ]] && return 0; sleep 0.01; done; fail "timed out waiting for $1"; }
  "$overlay" add-native $(add_args "$w/acc" ka "$(candidate acc)") --build-cmd "$(build_cmd ka)" >/dev/null 2>&1 ||
    fail "add-native acc"
  # exec --over the accepted overlay, building; the integrator's finalize meanwhile.
  "$overlay" exec $(add_args "$w/cand" ka "$(candidate c1)") --over "$w/acc" --build-cmd "$(gated x)" -- \
    sh -c "grep -aoE 'STAMP-[A-Za-z0-9-]+' $inst/build/libka.so | head -n 1 > $w/ran" >"$w/exec-out" 2>&1 &
  pid=$!
  wait_for "$w/building-x"
  out=$("$overlay" revert --overlay "$w/acc" --with-layers 2>&1) && fail "revert --with-layers under an exec building: $out"
  [[ $out == *"in progress"* ]] || fail "the refusal does not say what is in flight: $out"
  [[ $(stamp_of "$inst/src/ka.c") == STAMP-c1 ]] || fail "the refused revert changed the install"
  touch "$w/gate-x"
  wait $pid || fail "exec failed: $(cat "$w/exec-out")"
  grep -q "FRESH_BUILD_OK (checked 1)" "$w/exec-out" || fail "exec did not verify its own build: $(cat "$w/exec-out")"
  [[ $(cat "$w/ran") == STAMP-c1 ]] || fail "the candidate ran on $(cat "$w/ran")"
  "$overlay" revert --overlay "$w/acc" --with-layers >/dev/null 2>&1 || fail "finalize once exec ended"
  pristine
  # A plain add-native building; its own overlay reverted meanwhile.
  "$overlay" add-native $(add_args "$w/cand2" ka "$(candidate c2)") --build-cmd "$(gated y)" >"$w/add-out" 2>&1 &
  pid=$!
  wait_for "$w/building-y"
  out=$("$overlay" revert --overlay "$w/cand2" 2>&1) && fail "revert under its own add-native building: $out"
  touch "$w/gate-y"
  wait $pid || fail "add-native failed: $(cat "$w/add-out")"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-c2 ]] || fail "add-native's build is not in place"
  v=$("$overlay" verify-native --overlay "$w/cand2")
  [[ $v == *"FRESH_BUILD_OK (checked 1)"* ]] || fail "verify-native: $v"
  "$overlay" revert --overlay "$w/cand2" >/dev/null 2>&1 || fail "revert once it ended"
  pristine
  ;;
owners)
  mkdir -p "$w/runs/a"
  ov=$w/runs/a/ov
  # The agent: pid 1 of its container, records itself as the owner, then works until released.
  unshare --pid --fork --mount-proc sh -c '"$@" --owner-pid $$ >/dev/null && touch "$0.ready" && while [ ! -e "$0.stop" ]; do sleep 0.05; done' \
    "$w/agent" "$overlay" add-native $(add_args "$ov" ka "$(candidate agent)") --build-cmd "$(build_cmd ka)" &
  agent=$!
  for _ in $(seq 1 3000); do [[ -e $w/agent.ready ]] && break; sleep 0.01; done
  [[ -e $w/agent.ready ]] || fail "the agent's add-native did not finish: $(wait $agent; echo exit $?)"
  st=$("$overlay" --json status --overlay "$ov") || fail "status: $st"
  owner=$(/usr/bin/python3 -c 'import json,sys; o=json.loads(sys.argv[1])["natives"][0]["owner"]; print(o["pid"], o["liveness"], o["pid_ns"])' "$st")
  # unshare (here $agent) forked the agent into the namespace it made for its children.
  [[ $owner == "1 alive $(stat -Lc %i "/proc/$agent/ns/pid_for_children")" ]] || fail "status from the host: owner is not the live pid 1 of the agent's namespace: $owner"
  gc=$("$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale: $gc"
  [[ $gc == *"owner pid 1 of PID namespace pid:["*"] is still running"* ]] || fail "host gc-stale did not find the live owner: $gc"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-agent ]] || fail "host gc-stale reverted a live container's entry: $gc"
  gc=$(as_pid1 "$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale in a sibling container: $gc"
  [[ $gc == *"cannot be seen from here"* ]] || fail "a sibling container's gc-stale did not say it cannot see the owner: $gc"
  [[ $(stamp_of "$inst/build/libka.so") == STAMP-agent ]] || fail "a sibling container's gc-stale reverted a live entry: $gc"
  touch "$w/agent.stop"
  wait $agent
  gc=$("$overlay" gc-stale --root "$w/runs" 2>&1) || fail "gc-stale after the agent ended: $gc"
  [[ $gc == *"reverted $ov"* ]] || fail "host gc-stale did not revert the ended container's entry: $gc"
  pristine
  ;;
*) fail "unknown case $case" ;;
esac
echo "PASS: $case"
