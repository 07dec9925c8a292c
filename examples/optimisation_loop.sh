#!/usr/bin/env bash
# The optimisation loop as the pipeline's integrator runs it, on the bundled example install
# (a CMake + Ninja library whose kernel returns 4):
#
#   every step:  REF leg on the install as it stands (accepted changes in)
#                add-native --overlay CAND --over ACCEPTED …   (a layer: no --force)
#                verify-native, CAND leg
#                accept: fold --from CAND --into ACCEPTED      (no build)
#                reject: revert --overlay CAND                 (the accepted bytes come back)
#   finalize:    export --overlay ACCEPTED --out final/native; revert --overlay ACCEPTED;
#                git status --porcelain of the install is empty
#   replay:      replay --bundle final/native (what final_launch.sh does on a fresh install)
#
# Steps: candidate 5 accepted, 6 rejected, 7 accepted. Each leg's value is checked, so is
# status --check-clean after each step. The script owns its overlays (OVERLAY_OWNER_PID), as an
# agent does, so CI's gc-stale leaves them alone.
#
# Usage: examples/optimisation_loop.sh [OVERLAY_BINARY] [--delete-candidates] [--gc-between]
#   --delete-candidates  the harness deletes each candidate's folder once its step is done
#   --gc-between         CI's gc-stale runs over the eval dir between steps (it must revert nothing)
set -euo pipefail
OVERLAY=overlay DELETE=0 GC=0
for a in "$@"; do
  case $a in
    --delete-candidates) DELETE=1 ;;
    --gc-between) GC=1 ;;
    *) OVERLAY=$a ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-loop.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
INSTALL=$WORK/install EVAL_DIR=$WORK/eval
ACCEPTED=$EVAL_DIR/overlay/native_accepted
export OVERLAY_STATE_DIR=$WORK/state OVERLAY_OWNER_PID=$$
fail() { echo "optimisation loop: FAILED: $*" >&2; exit 1; }

# A fresh install of the example, in git (its build dir ignored), as the pipeline's installs are.
mkdir -p "$INSTALL" "$EVAL_DIR/cands"
cp -r "$HERE/cpu_smoke/src" "$HERE/cpu_smoke/CMakeLists.txt" "$INSTALL/"
printf 'build/\n' >"$INSTALL/.gitignore"
git -C "$INSTALL" init -q
git -C "$INSTALL" add -A
git -C "$INSTALL" -c user.name=loop -c user.email=loop@example.invalid commit -qm install
cmake -S "$INSTALL" -B "$INSTALL/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$INSTALL/build" >/dev/null
BUILD=(--artifact "$INSTALL/build/libkernel.so" --artifact "$INSTALL/build/CMakeFiles/kernel.dir/src/kernel.cpp.o"
  --build-cmd "cmake --build $INSTALL/build")

leg() { "$INSTALL/build/smoke"; }
expect_leg() { # NAME WANT
  local got
  got=$(leg)
  [[ $got == "$2" ]] || fail "$1 ran $got, not $2"
  echo "  $1: $got"
}
gc_between() {
  ((GC)) || return 0
  local out
  out=$("$OVERLAY" gc-stale --root "$EVAL_DIR" 2>/dev/null)
  [[ $out == *"reverted 0 stale"* ]] || fail "gc-stale reverted a live run's overlay: $out"
}

accepted=4.0 n=0
step() { # VALUE accept|reject
  n=$((n + 1))
  local cand=$EVAL_DIR/overlay/cand-$n patched=$EVAL_DIR/cands/kernel-$1.cpp
  sed "s/return 4/return $1/" "$HERE/cpu_smoke/src/kernel.cpp" >"$patched"
  echo "step $n: candidate $1 ($2)"
  expect_leg ref "$accepted"
  gc_between
  "$OVERLAY" add-native --overlay "$cand" --over "$ACCEPTED" --target "$INSTALL/src/kernel.cpp" \
    --patched-file "$patched" "${BUILD[@]}" >/dev/null 2>"$WORK/add.err" || fail "add-native: $(cat "$WORK/add.err")"
  ! grep -q "original bytes are lost" "$WORK/add.err" || fail "a stacked candidate took another overlay's bytes as its original"
  [[ $("$OVERLAY" verify-native --overlay "$cand") == "FRESH_BUILD_OK (checked 2)" ]] || fail "verify-native"
  expect_leg cand "$1.0"
  gc_between
  if [[ $2 == accept ]]; then
    "$OVERLAY" fold --from "$cand" --into "$ACCEPTED" >/dev/null || fail "fold"
    accepted=$1.0
  else
    "$OVERLAY" revert --overlay "$cand" >/dev/null || fail "revert of the rejected candidate"
  fi
  expect_leg after "$accepted"
  "$OVERLAY" status --overlay "$cand" --check-clean >/dev/null || fail "the candidate overlay is not clean after its step"
  if "$OVERLAY" status --all --check-clean >/dev/null 2>&1; then fail "status --all calls the install clean with accepted changes in"; fi
  ((DELETE)) && rm -rf "$cand"
  gc_between
}

"$OVERLAY" gc-stale --root "$EVAL_DIR" >/dev/null  # every run starts so
step 5 accept
step 6 reject
step 7 accept

echo "finalize"
"$OVERLAY" export --overlay "$ACCEPTED" --out "$EVAL_DIR/final/native" >/dev/null || fail "export"
"$OVERLAY" revert --overlay "$ACCEPTED" >/dev/null || fail "revert of the accepted overlay"
expect_leg pristine 4.0
porcelain=$(git -C "$INSTALL" status --porcelain)
[[ -z $porcelain ]] || fail "git status --porcelain after finalize: $porcelain"
"$OVERLAY" status --all --check-clean >/dev/null || fail "status --all --check-clean after finalize"
! grep -q "$WORK/state\|_native_backup" "$EVAL_DIR/final/native/bundle.json" || fail "the bundle names backups or state"

echo "replay (final_launch.sh)"
out=$("$OVERLAY" replay --bundle "$EVAL_DIR/final/native" --overlay "$EVAL_DIR/overlay/replayed" 2>/dev/null) || fail "replay"
[[ $out == *"FRESH_BUILD_OK (checked 2)"* ]] || fail "replay did not verify: $out"
expect_leg replayed 7.0
"$OVERLAY" revert --overlay "$EVAL_DIR/overlay/replayed" >/dev/null || fail "revert of the replay"
expect_leg pristine 4.0
[[ -z $(git -C "$INSTALL" status --porcelain) ]] || fail "git status after the replay's revert"
echo "optimisation loop: OK"
