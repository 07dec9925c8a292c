#!/usr/bin/env bash
# The agent flow on the bundled example install, step by step:
# build -> run (4) -> discover (how the install builds the kernel) -> add-native with the flags it
# printed (the install's own incremental build) -> verify-native -> run (7) -> revert -> SHA-256
# of source and library equal the originals -> run (4).
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

step "3. Ask the tool how this install builds the kernel source"
show "$OVERLAY" discover --target "$SRC"
# The first candidate's add-native line, shell-quoted: its flags are what step 4 passes.
flags=$("$OVERLAY" discover --target "$SRC" | sed -n 's/^ *add-native --overlay O --patched-file F //p' | head -1)
[[ -n $flags ]] || { echo "demo: discover printed no add-native line" >&2; exit 1; }
eval "discovered=($flags)"

step "4. Apply the candidate kernel in place with those flags (the install's own incremental build)"
show "$OVERLAY" add-native --overlay "$OV" --patched-file "$HERE/patched/kernel.cpp" "${discovered[@]}"

step "5. Prove the build really produced new objects"
show "$OVERLAY" verify-native --overlay "$OV"

step "6. Candidate run"
show "$INSTALL/build/smoke"

step "7. Revert"
show "$OVERLAY" revert --overlay "$OV"

step "8. Byte-exact?"
src_after=$(sha256sum "$SRC" | cut -d' ' -f1)
lib_after=$(sha256sum "$LIB" | cut -d' ' -f1)
echo "source  sha256 $src_after $([[ $src_after == "$src_before" ]] && echo '== original' || echo '!= ORIGINAL')"
echo "library sha256 $lib_after $([[ $lib_after == "$lib_before" ]] && echo '== original' || echo '!= ORIGINAL')"
[[ $src_after == "$src_before" && $lib_after == "$lib_before" ]]

step "9. Run again on the restored install"
show "$INSTALL/build/smoke"
printf '\ndemo: OK\n'
