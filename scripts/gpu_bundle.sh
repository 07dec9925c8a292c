#!/usr/bin/env bash
# Bundles the built overlay binary, the GPU test and every shared library they need (found with
# ldd) into .device-bundle/, for a GPU machine that has the CUDA (or ROCm) toolchain, cmake and
# ninja but none of our Debian libraries. On that machine, from a checkout of this repository:
#     bash .device-bundle/run.sh
# Usage: scripts/gpu_bundle.sh [BUILD_DIR]   (default: build; configured and built if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[[ -f $BUILD/build.ninja ]] || cmake -S . -B "$BUILD" -G Ninja -DOVERLAY_BUILD_TESTS=ON >/dev/null
cmake --build "$BUILD" --target overlay overlay_gpu_tests overlay_nvcc_tests >/dev/null
OUT=.device-bundle
rm -rf "$OUT" && mkdir -p "$OUT/lib"
cp "$BUILD/overlay" "$BUILD/tests/overlay_gpu_tests" "$BUILD/tests/overlay_nvcc_tests" "$OUT/"
# Every library travels, glibc and its loader included (the GPU machine's may be older). Our
# binaries are started through the bundled loader with --library-path, so nothing else there
# (cmake, nvcc, the example's own driver) sees these libraries.
ARCHIVE=$(ldconfig -p | awk '/libarchive\.so\.13 .*x86-64/ {print $NF; exit}')  # loaded on first use
cp -L "$ARCHIVE" "$OUT/lib/"
ldd "$OUT/overlay" "$OUT/overlay_gpu_tests" "$ARCHIVE" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\/.*ld-linux/ {print $1}' |
  sort -u | while read -r lib; do cp -L "$lib" "$OUT/lib/"; done
cat > "$OUT/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled GPU test from the repository root of a checkout of overlay.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
LOADER=$(ls "$HERE"/lib/ld-linux*)
bundled() { "$LOADER" --library-path "$HERE/lib" "$@"; }
printf '#!/bin/sh\nexec "%s" --library-path "%s" "%s" "$@"\n' "$LOADER" "$HERE/lib" "$HERE/overlay" > "$HERE/overlay.sh"
chmod +x "$HERE/overlay.sh"
export OVERLAY_BIN=$HERE/overlay.sh OVERLAY_SOURCE_DIR=$(cd "$HERE/.." && pwd)
"$OVERLAY_BIN" --version
bundled "$HERE/overlay_nvcc_tests"
bundled "$HERE/overlay_gpu_tests" "$@"
RUN
chmod +x "$OUT/run.sh"
du -sh "$OUT"
