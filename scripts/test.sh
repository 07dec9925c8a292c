#!/usr/bin/env bash
# Installs what is missing, configures, builds (warnings as errors) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD=${BUILD_DIR:-build-test}
cmake -S . -B "$BUILD" -G Ninja -DOVERLAY_BUILD_TESTS=ON -DOVERLAY_WERROR=ON
cmake --build "$BUILD"
ctest --test-dir "$BUILD" --output-on-failure -j2
