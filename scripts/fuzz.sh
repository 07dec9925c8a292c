#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for SECONDS (default 20),
# starting from the seed corpora in tests/fuzz/corpus (copied: the committed seeds never change).
# Usage: scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-20}
bash scripts/deps.sh clang libclang-rt-14-dev
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
CXX=clang++ cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DOVERLAY_FUZZ=ON -DOVERLAY_BUILD_TESTS=OFF >/dev/null
cmake --build "$BUILD" --target manifest_fuzz words_fuzz tar_fuzz
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The three run side by side (each is one process; run one after another, a core stood idle).
for t in manifest words tar; do
  mkdir -p "$WORK/$t"
  cp tests/fuzz/corpus/$t/* "$WORK/$t/"
  echo "fuzz: $t for ${SECONDS_EACH}s"
  "$BUILD/tests/fuzz/${t}_fuzz" -max_total_time="$SECONDS_EACH" -print_final_stats=1 -artifact_prefix="$WORK/$t-" "$WORK/$t" \
    >"$WORK/$t.log" 2>&1 &
  echo $! >"$WORK/$t.pid"
done
failed=0
for t in manifest words tar; do
  rc=0
  wait "$(cat "$WORK/$t.pid")" || rc=$?
  grep -E "stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY|Done" "$WORK/$t.log" | sed "s/^/$t: /" || true
  [[ $rc -eq 0 ]] || { echo "fuzz: $t FAILED (exit $rc)"; tail -40 "$WORK/$t.log"; failed=1; }
done
[[ $failed -eq 0 ]] || exit 1
echo "fuzz: all targets clean"
