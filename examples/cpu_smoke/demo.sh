#!/usr/bin/env bash
# The agent flow on the bundled example install, step by step:
# build -> run (4) -> add-native with the install's own incremental build -> verify-native ->
# run (7) -> revert -> SHA-256 of source and library equal the originals -> run (4).
# Usage: demo.sh OVERLAY_BINARY
set -euo pipefail
OVERLAY=${1:?usage: demo.sh OVERLAY_BINARY}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-demo.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
INSTALL=$WORK/install
OV=$WORK/overlay

step() { printf '\n== %s\n' "$*"; }
show() { printf '$'; printf ' %q' "$@"; printf '\n'; "$@"; }

step "1. A fresh 'install': copy the example and build it (CMake + Ninja)"
mkdir -p "$INSTALL"
cp -r "$HERE/src" "$HERE/CMakeLists.txt" "$INSTALL/"
cmake -S "$INSTALL" -B "$INSTALL/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$INSTALL/build" >/dev/null
LIB=$INSTALL/build/libkernel.so
SRC=$INSTALL/src/kernel.cpp
src_before=$(sha256sum "$SRC" | cut -d' ' -f1)
lib_before=$(sha256sum "$LIB" | cut -d' ' -f1)
echo "source  sha256 $src_before"
echo "library sha256 $lib_before"

step "2. Reference run on the clean install"
show "$INSTALL/build/smoke"

step "3. Apply the candidate kernel in place and run the install's own incremental build"
show "$OVERLAY" add-native --overlay "$OV" --target "$SRC" --patched-file "$HERE/patched/kernel.cpp" \
  --artifact "$LIB" --build-cmd "cmake --build $INSTALL/build"

step "4. Prove the build really produced a new library"
show "$OVERLAY" verify-native --overlay "$OV"

step "5. Candidate run"
show "$INSTALL/build/smoke"

step "6. Revert"
show "$OVERLAY" revert --overlay "$OV"

step "7. Byte-exact?"
src_after=$(sha256sum "$SRC" | cut -d' ' -f1)
lib_after=$(sha256sum "$LIB" | cut -d' ' -f1)
echo "source  sha256 $src_after $([[ $src_after == "$src_before" ]] && echo '== original' || echo '!= ORIGINAL')"
echo "library sha256 $lib_after $([[ $lib_after == "$lib_before" ]] && echo '== original' || echo '!= ORIGINAL')"
[[ $src_after == "$src_before" && $lib_after == "$lib_before" ]]

step "8. Run again on the restored install"
show "$INSTALL/build/smoke"
printf '\ndemo: OK\n'
