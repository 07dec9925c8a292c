#!/usr/bin/env bash
# The agent flow on the bundled example install, as one `overlay exec`: reference run on the
# clean install -> apply + the install's own build + verify-native -> candidate run -> revert
# (always: success, failure, Ctrl-C, or a kill -9 of exec, which gc-stale or the next exec undo)
# -> status --check-clean. The result is one JSON document.
# Usage: examples/walkthrough.sh [OVERLAY_BINARY]   (default: overlay on PATH)
set -euo pipefail
OVERLAY=${1:-overlay}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-walkthrough.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
INSTALL=$WORK/install

# A fresh "install" of the example: a CMake + Ninja build of a small kernel library.
mkdir -p "$INSTALL"
cp -r "$HERE/cpu_smoke/src" "$HERE/cpu_smoke/CMakeLists.txt" "$INSTALL/"
cmake -S "$INSTALL" -B "$INSTALL/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$INSTALL/build" >/dev/null

# The whole A/B step: exit status = the candidate's, or exec's own code when apply (1), revert
# (121) or the clean check (122) failed.
rc=0
result=$("$OVERLAY" --json exec --ref --overlay "$WORK/overlay" \
  --target "$INSTALL/src/kernel.cpp" --patched-file "$HERE/cpu_smoke/patched/kernel.cpp" \
  --artifact "$INSTALL/build/libkernel.so" --artifact "$INSTALL/build/CMakeFiles/kernel.dir/src/kernel.cpp.o" \
  --build-cmd "cmake --build $INSTALL/build" -- "$INSTALL/build/smoke") || rc=$?

python3 - "$rc" <<PY
import json, sys
d = json.loads('''$result''')
ref, cand = (open(d[k]["stdout_log"]).read().strip() for k in ("ref", "cand"))
print("reference:", ref, "| apply:", d["apply"]["verify"], "| candidate:", cand,
      "| reverted:", d["revert"]["ok"], "| clean:", d["clean"]["clean"])
ok = int(sys.argv[1]) == 0 and ref != cand and d["clean"]["clean"]
print("walkthrough:", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
