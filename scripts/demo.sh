#!/usr/bin/env bash
# The main job for a newcomer: install what is missing, build overlay, and run the end-to-end
# demo on the bundled example install (examples/cpu_smoke).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh --demo
cmake -S . -B build -G Ninja -DOVERLAY_BUILD_TESTS=OFF >/dev/null
cmake --build build --target overlay
bash examples/cpu_smoke/demo.sh "$PWD/build/overlay"
