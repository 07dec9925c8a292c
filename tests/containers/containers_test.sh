#!/usr/bin/env bash
# containers_test.sh OVERLAY CASE: the tool where containers run it (issue 50), in real PID
# namespaces made by `unshare --pid --fork --mount-proc`.
#   pid1        the tool as a container's entrypoint (pid 1): a build, exec's two legs, and a Python
#               lookup run their children (each used to exit 127 at once: the child took pid 1
#               for the parent that had died before it could ask to die with it);
#   namespaces  two add-natives into one overlay from two containers, each the tool as pid 2:
#               the end of one leaves the other's in-flight mark, so gc-stale spares the one still
#               building, and both say FRESH_BUILD_OK over their own builds.
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

w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
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
*) fail "unknown case $case" ;;
esac
echo "PASS: $case"
