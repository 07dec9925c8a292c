#!/usr/bin/env bash
# Bundles the static overlay binary and the GPU tests (linked static too) into .device-bundle/,
# for a GPU machine that has the CUDA (or ROCm) toolchain, cmake and ninja but none of our Debian
# libraries, and perhaps an older libc: nothing in the bundle needs one. On that machine, from a
# checkout of this repository:
#     bash .device-bundle/run.sh
# Usage: scripts/gpu_bundle.sh [BUILD_DIR]   (default: build; configured with the tests if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
if ! grep -q '^OVERLAY_BUILD_TESTS:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
  cmake -S . -B "$BUILD" -G Ninja -DOVERLAY_BUILD_TESTS=ON >/dev/null
fi
cmake --build "$BUILD" --target overlay_static overlay_gpu_tests overlay_nvcc_tests >/dev/null
OUT=.device-bundle
rm -rf "$OUT" && mkdir -p "$OUT"
for f in "$BUILD/static/overlay" "$BUILD/tests/overlay_gpu_tests" "$BUILD/tests/overlay_nvcc_tests"; do
  [[ $(file -L "$f") == *"statically linked"* ]] || { echo "gpu_bundle: $f is not statically linked" >&2; exit 1; }
  strip -o "$OUT/$(basename "$f")" "$f"
done
cat > "$OUT/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the bundled GPU test from the repository root of a checkout of overlay.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export OVERLAY_BIN=$HERE/overlay OVERLAY_SOURCE_DIR=$(cd "$HERE/.." && pwd)
"$OVERLAY_BIN" --version
"$HERE/overlay_nvcc_tests"
"$HERE/overlay_gpu_tests" "$@"
RUN
chmod +x "$OUT/run.sh"
du -sh "$OUT"
