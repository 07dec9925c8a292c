#!/usr/bin/env bash
# The agent flow, as an agent should script it, on the bundled example install:
#   reference run on the clean install -> add-native (--json, --revert-on-failure) ->
#   candidate run -> revert in a trap (runs on success, failure or Ctrl-C) ->
#   status --check-clean proves the install is back at its original bytes.
# Usage: examples/walkthrough.sh [OVERLAY_BINARY]   (default: overlay on PATH)
set -euo pipefail
OVERLAY=${1:-overlay}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-walkthrough.XXXXXX")
INSTALL=$WORK/install
OV=$WORK/overlay

# A fresh "install" of the example: a CMake + Ninja build of a small kernel library.
mkdir -p "$INSTALL"
cp -r "$HERE/cpu_smoke/src" "$HERE/cpu_smoke/CMakeLists.txt" "$INSTALL/"
cmake -S "$INSTALL" -B "$INSTALL/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$INSTALL/build" >/dev/null

# 1. The reference run comes first, on the clean install.
reference=$("$INSTALL/build/smoke")
echo "reference: $reference"

# 2. From here on, whatever happens, the install goes back: revert runs on success, on failure
#    and on Ctrl-C, and the script fails loudly if anything is left not original.
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  "$OVERLAY" revert --overlay "$OV" >&2 || rc=1
  if ! "$OVERLAY" status --overlay "$OV" --check-clean >&2; then
    echo "walkthrough: the install is NOT clean" >&2
    rc=1
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 3. Apply the candidate; the result is one JSON document on stdout.
result=$("$OVERLAY" add-native --json --revert-on-failure --owner-pid $$ --overlay "$OV" \
  --target "$INSTALL/src/kernel.cpp" --patched-file "$HERE/cpu_smoke/patched/kernel.cpp" \
  --artifact "$INSTALL/build/libkernel.so" --artifact "$INSTALL/build/CMakeFiles/kernel.dir/src/kernel.cpp.o" --build-cmd "cmake --build $INSTALL/build")
python3 -c 'import json,sys; d=json.load(sys.stdin); print("applied entry", d["entry"], "- build ok:", d["build"]["ok"], "- log:", d["build"]["log"])' <<<"$result"

# 4. Prove the build produced a new artifact before trusting the candidate's numbers.
"$OVERLAY" verify-native --overlay "$OV"
"$OVERLAY" status --overlay "$OV"

# 5. The candidate run.
candidate=$("$INSTALL/build/smoke")
echo "candidate: $candidate"
[[ $candidate != "$reference" ]] || { echo "walkthrough: the candidate did not change the result" >&2; exit 1; }
echo "walkthrough: OK (revert and status --check-clean follow in the trap)"
