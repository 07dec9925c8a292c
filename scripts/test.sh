#!/usr/bin/env bash
# Installs what is missing, configures, builds and runs every test:
#   1. the release build (warnings as errors): every ctest but the `long` label;
#   2. the same suite under AddressSanitizer + UndefinedBehaviorSanitizer (fewer crash trials and
#      power-loss states);
#   3. a fuzz smoke: each libFuzzer target for 20 s (60 s in all);
#   and a bench smoke on a small workload between 1 and 2.
# Knobs: OVERLAY_SKIP_SANITIZE=1, OVERLAY_SKIP_FUZZ=1 (quicker local runs); `OVERLAY_LONG_TESTS=1 ctest -L long`
# in build-test runs the long reliability mode (200 crash trials each way) and the power-loss
# explorer's exhaustive bound.
set -euo pipefail
cd "$(dirname "$0")/.."
# Where the time goes: each phase's wall seconds, printed as a table at the end.
PHASES=$(mktemp)
PHASE="install dependencies" PHASE_T=$SECONDS
phase() {
  printf '%-44s %5d s\n' "$PHASE" $((SECONDS - PHASE_T)) >>"$PHASES"
  PHASE=$1 PHASE_T=$SECONDS
  [[ $1 == end ]] || echo "== $1"
}
bash scripts/deps.sh clang libclang-rt-14-dev

LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS" "$PHASES"' EXIT

phase "format check"
bash scripts/check_format.sh
# Every test that needs ../shared/reference (upstream's scripts) or the static roots runs here:
# where one is missing, it fails rather than skips.
export OVERLAY_REQUIRE_SHARED=1 OVERLAY_REQUIRE_STATIC_ROOTS=1

phase "release build"
cmake -S . -B build-test -G Ninja -DOVERLAY_BUILD_TESTS=ON -DOVERLAY_WERROR=ON
# The static label's Debian 11 root comes from Debian's archive: fetched while the build
# compiles (the test waits for it under its lock, or makes it if this failed).
bash tests/static/debian11_root.sh build-test/roots >"$LOGS/debian11.log" 2>&1 &
# The aarch64 cross toolchain, arm64 archives and qemu-user-static (≈ 170 MB from Debian's
# archive, for the static label's aarch64 tests), installed while the build compiles too.
bash scripts/deps.sh --aarch64 >"$LOGS/aarch64-deps.log" 2>&1 &
AARCH64_DEPS=$!
cmake --build build-test
if ! wait $AARCH64_DEPS; then
  cat "$LOGS/aarch64-deps.log" >&2
  echo "test.sh: scripts/deps.sh --aarch64 failed (above)" >&2
  exit 1
fi
# The release preset resolves (the static archives are found); its binary is the one the test
# build links as build-test/static/overlay from the same objects, which the static label runs.
cmake --preset static >/dev/null
if [[ -z ${OVERLAY_SKIP_SANITIZE:-} ]]; then
  # The sanitizer build compiles while the release tests run, at the lowest priority: it takes
  # the CPU they leave idle (a good part of their time is waiting: on Slurm's nodes, on kill -9'd
  # runs, on loop devices and fsyncs) and gives it back the moment they want it; what is left of
  # it once they end runs at full speed. Its configure reads the release build's test lists.
  # Not repeated here: the large real-world runs whose time is a third-party compile (the torch
  # JIT extension, googletest's CMake build, and their discover runs: ≈ 340 s at release speed;
  # the Make, setuptools and back-to-back real-world cycles still run sanitized), the claims
  # and store checkers (their interleavings are the binary's release behaviour), and on the XFS and btrfs
  # images all but the unit tests (the clone and traded-backup code with its fault sweeps: the
  # CLI, crash, power-loss and interop runs there reach that same code through the binary; ≈ 500 s
  # of this phase; and the unit tests on XFS only: btrfs runs the same FICLONE path of ours). The
  # runtime's Python suites (upstream's, drop-in, stacking, source launch, runtime, distribution: ≈ 310 s here) run
  # in release only: their time is the interpreters', and the sanitized binary's part in them (the
  # add-* verbs, merge) is what the cli suites drive sanitized. The
  # power-loss explorer takes every 8th crash point (each model its own offset) with fewer states
  # per point; release explores them all. Of the fleet cases, the two that wait out Slurm's node
  # timeouts (≈ 20 s each) run in release only; the A/B and the partial failure run sanitized.
  # -O1 and line tables only: what ASan's docs recommend, and it halves this phase's compile (a
  # heavy file: 66 s at RelWithDebInfo's -O2 -g, 41 s at -O1 -g1; a test file 56 s -> 29 s);
  # stack traces still name file and line. The libraries compile as unity translation units
  # (OVERLAY_UNITY): their compile's CPU time is a third of one file at a time; the test code is
  # not instrumented (tests/CMakeLists.txt), only what it drives; and the suites that only drive
  # the binary (cli, reliability, realworld, interop, smoke) are not compiled again: the release
  # build's executables run them against the sanitized binary (OVERLAY_DRIVER_TESTS_FROM).
  asan_build() {
    cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
      -DOVERLAY_BUILD_TESTS=ON -DOVERLAY_SANITIZE=ON -DOVERLAY_UNITY=ON -DOVERLAY_DRIVER_TESTS_FROM="$PWD/build-test"
    cmake --build build-asan
  }
  nice -n 19 bash -c "$(declare -f asan_build); asan_build" >"$LOGS/asan-build.log" 2>&1 &
  ASAN_BUILD=$!
fi
phase "release tests"
# The static label's empty and Debian 11 roots and the wheel's venv must run here, not skip.
# 12 random kill -9 points per direction (the test's default is 20; the cow label adds 8 on each
# image and the sanitizer pass 6; the `long` label runs 200): ≈ 40 s of the 35-minute budget.
OVERLAY_CRASH_TRIALS=12 ctest --test-dir build-test --output-on-failure -j2 -LE long | tee "$LOGS/release.log"
echo "   upstream's own suites against the shim (ctest upstream_suites):"
sed -n '/^suite  /,/^shim: /p' build-test/Testing/Temporary/LastTest.log | sed 's/^/   /'

phase "bench smoke"
echo "   a small workload: keeps bench/ working; it reports, it does not assert"
BENCH_WORK=$(mktemp -d)
python3 bench/run.py --overlay build-test/overlay --static-overlay build-test/static/overlay --rounds 1 --work "$BENCH_WORK" \
  --artifact-mib 8 --cache-files 50 --tree-files 500 --cache-sizes 300 --cache-rounds 1
rm -rf "$BENCH_WORK"
phase "sweep smoke"
echo "   bench/sweep.py and bench/plot.py on two tiny points; the real sweep is not run in CI"
python3 bench/sweep.py --overlay build-test/overlay --sizes-mib 2,4 --cache-files 50,100 \
  --work "$(mktemp -d)/sweep" --csv "$LOGS/sweep.csv"
/usr/bin/python3 bench/plot.py "$LOGS/sweep.csv" "$LOGS/plots"

if [[ -z ${OVERLAY_SKIP_SANITIZE:-} ]]; then
  phase "ASan + UBSan build (what is left of it)"
  if ! wait "$ASAN_BUILD"; then
    cat "$LOGS/asan-build.log" >&2
    echo "test.sh: the ASan + UBSan build failed (above)" >&2
    exit 1
  fi
  phase "ASan + UBSan tests"
  OVERLAY_CRASH_TRIALS=6 OVERLAY_CONCURRENCY_TRIALS=5 OVERLAY_POWERLOSS_BOUND=8 OVERLAY_POWERLOSS_SAMPLES=2 OVERLAY_POWERLOSS_STRIDE=8 \
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j2 -LE long \
    -E 'DiscoverRealWorld\.(Googletest|Torch)|RealWorld\.(TorchCppExtensionJit|DebianGoogletestCMakeNinja)|cow_.*_(cli|crash|powerloss|interop)|cow_btrfs_unit|model_(claims|store)|fleet_(node|coordinator)_killed|^(upstream_suites|drop_in_round_two|python_stacking|source_launch|python_runtime|python_distribution)(_planned)?$|^python_start_plan$' | tee "$LOGS/asan.log"
fi

if [[ -z ${OVERLAY_SKIP_FUZZ:-} ]]; then
  phase "fuzz build and smoke"
  bash scripts/fuzz.sh 20
fi

phase end
echo "== time per phase"
cat "$PHASES"
printf '%-44s %5d s\n' "total" "$SECONDS"
rm -f "$PHASES"

# One closing line over every ctest run above (ctest exits non-zero, and so this script, on any failure).
awk '/tests passed, [0-9]+ tests failed out of/ {passed += $NF - $4; failed += $4}
     END {printf "tests: %d passed, %d failed\n", passed, failed}' "$LOGS"/*.log
