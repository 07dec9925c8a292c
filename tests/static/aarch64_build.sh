#!/usr/bin/env bash
# Cross-builds the aarch64 static binary as a user would, with `cmake --preset static-aarch64`
# (Debian's cross toolchain and arm64 multiarch archives), into OUT; the tests of label static run
# it under qemu-user-static (static_root_test.sh, wheel_test.sh).
# Usage: aarch64_build.sh SOURCE_DIR OUT_DIR
# Exit 77 (skipped) where the cross toolchain or an arm64 archive is missing, naming what to
# install, unless OVERLAY_REQUIRE_STATIC_ROOTS=1 (CI), which makes that a failure.
set -euo pipefail
SRC=$1 OUT=$2
skip() {
  echo "aarch64_build: $1 (bash scripts/deps.sh --aarch64)" >&2
  [[ -n ${OVERLAY_REQUIRE_STATIC_ROOTS:-} ]] && { echo "FAILED: required (OVERLAY_REQUIRE_STATIC_ROOTS)" >&2; exit 1; }
  exit 77
}
command -v aarch64-linux-gnu-g++ >/dev/null || skip "no aarch64 cross compiler (g++-aarch64-linux-gnu)"
command -v qemu-aarch64-static >/dev/null || skip "no qemu-aarch64-static (qemu-user-static)"
LOG=$OUT.configure.log
mkdir -p "$(dirname "$OUT")"
if ! (cd "$SRC" && cmake --preset static-aarch64 -B "$OUT") >"$LOG" 2>&1; then
  # The static preset names the arm64 archives that are missing and their packages.
  why=$(grep -A3 "fully static binary cannot be linked" "$LOG" | tr -s ' \n' ' ' || true)
  [[ -n $why ]] && skip "${why#*: }"
  cat "$LOG" >&2
  echo "FAILED: cmake --preset static-aarch64" >&2
  exit 1
fi
cmake --build "$OUT" --target overlay
file -L "$OUT/overlay"
