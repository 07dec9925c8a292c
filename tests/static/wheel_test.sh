#!/usr/bin/env bash
# The wheel (issue 32): scripts/wheel.sh builds it from the static binary; pip installs it with
# --no-index into a fresh venv; the venv's `overlay`, `python -m overlay_setup` and
# `import overlay_setup` run one A/B cycle (add-native -> verify-native -> revert, every byte
# compared); `pip uninstall` removes every file it installed.
# An aarch64 binary (cmake --preset static-aarch64) makes the manylinux_2_17_aarch64 wheel; on an
# x86-64 host everything that runs it (the venv's overlay, the shim that execs it) runs inside
# tests/static/binfmt.sh, where the kernel hands aarch64 executables to qemu-aarch64-static.
# Usage: wheel_test.sh STATIC_BINARY   (python: $OVERLAY_WHEEL_PYTHON, default python3)
# Exit 77 (skipped) where the binary's machine cannot be run here, unless
# OVERLAY_REQUIRE_STATIC_ROOTS=1 (CI).
set -euo pipefail
# A command that fails under set -e names itself (a silent exit would say nothing in ctest's log).
trap 'echo "FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
BIN=$1
PY=${OVERLAY_WHEEL_PYTHON:-python3}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAILED: $*" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

[[ -e $BIN ]] || fail "no binary at $BIN"
case $(file -L "$BIN") in
  *x86-64*) MACHINE=x86_64 ;;
  *aarch64*) MACHINE=aarch64 ;;
  *) fail "$BIN: unknown machine: $(file -L "$BIN")" ;;
esac
# RUN: what runs a command that executes the wheel's binary.
RUN=()
if [[ $MACHINE != $(uname -m) ]]; then
  RUN=(bash "$HERE/tests/static/binfmt.sh")
  rc=0
  "${RUN[@]}" "$BIN" --version >/dev/null || rc=$?
  if [[ $rc -eq 77 ]]; then
    [[ -n ${OVERLAY_REQUIRE_STATIC_ROOTS:-} ]] && fail "cannot run the $MACHINE binary here (required: OVERLAY_REQUIRE_STATIC_ROOTS)"
    exit 77
  fi
  [[ $rc -eq 0 ]] || fail "the $MACHINE binary does not start under binfmt.sh"
fi

whl=$(bash "$HERE/scripts/wheel.sh" "$BIN" "$WORK/dist") || fail "wheel.sh"
[[ $(basename "$whl") =~ ^overlay-[0-9.]+-py3-none-manylinux_2_17_${MACHINE}\.whl$ ]] || fail "wheel name: $whl"
"$PY" -m venv "$WORK/venv" || fail "$PY -m venv (Debian: apt-get install python3-venv)"
V=$WORK/venv/bin
listing() { (cd "$WORK/venv" && find . -not -path '*/__pycache__*' | sort); }
before=$(listing)
if [[ ${#RUN[@]} -eq 0 ]]; then
  out=$("$V/pip" install --no-index --disable-pip-version-check "$whl" 2>&1) || fail "pip install: $out"
  S=$V PYRUN=("$V/python") SHIM_DIRS=
else
  # pip installs into a venv only the wheels of its own platform; for another it takes --platform
  # with --target: the tag is checked against manylinux_2_17_aarch64 as an aarch64 pip would, and
  # the files go into that directory (the script into its bin/), where the shim finds the binary on
  # PATH (a --target install has no prefix of its own).
  T=$WORK/target
  out=$("$V/pip" install --no-index --disable-pip-version-check --platform "manylinux_2_17_$MACHINE" --only-binary=:all: \
    --target "$T" "$whl" 2>&1) || fail "pip install --platform manylinux_2_17_$MACHINE: $out"
  S=$T/bin PYRUN=(env "PYTHONPATH=$T" "$V/python") SHIM_DIRS=$T/bin:
fi
# SHIM_DIRS: what the shim needs on PATH to find the binary (nothing in a venv: sys.prefix's bin/).
[[ $(PATH=$S:/usr/bin:/bin command -v overlay) == "$S/overlay" ]] || fail "overlay is not on the venv's PATH"
[[ $(file -L "$S/overlay") == *"statically linked"* ]] || fail "the installed overlay is not the static binary"
[[ $(file -L "$S/overlay") == *"${MACHINE/_/-}"* ]] || fail "the installed overlay is not for $MACHINE: $(file -L "$S/overlay")"
ver=$("${RUN[@]}" "$S/overlay" --version) || fail "overlay --version"
[[ $ver == "overlay "* ]] || fail "overlay --version printed: $ver"
[[ $(PATH=$SHIM_DIRS$PATH "${RUN[@]}" "${PYRUN[@]}" -m overlay_setup --version) == "$ver" ]] || fail "python -m overlay_setup --version"
got=$(cd / && env -u OVERLAY_BIN PATH=$SHIM_DIRS/usr/bin:/bin "${PYRUN[@]}" -c 'import overlay_setup; print(overlay_setup.overlay_binary())')
[[ $got == "$S/overlay" ]] || fail "import overlay_setup runs $got, not the wheel's binary"

# One A/B cycle: the venv's overlay applies, the shim verifies, import overlay_setup reverts.
I=$WORK/install
mkdir -p "$I/src" "$I/build"
printf 'kernel v1\n' >"$I/src/k.cu"
printf 'object of kernel v1\n' >"$I/build/k.o"
printf 'kernel v2\n' >"$WORK/k_patched.cu"
digest() { (cd "$I" && find . -type f -print0 | sort -z | xargs -0 sha256sum; find . -print0 | sort -z | xargs -0 stat -c '%n %a %F'); }
clean=$(digest)
out=$("${RUN[@]}" env -u OVERLAY_BIN PATH=$S:/usr/bin:/bin overlay add-native --overlay "$WORK/ov" --target "$I/src/k.cu" \
  --patched-file "$WORK/k_patched.cu" --artifact "$I/build/k.o" \
  --build-cmd "sh -c 'sed s/^/object\\ of\\ / $I/src/k.cu > $I/build/k.o'") || fail "add-native: $out"
[[ $(cat "$I/build/k.o") == 'object of kernel v2' ]] || fail "the build did not run: $(cat "$I/build/k.o")"
out=$("${RUN[@]}" env -u OVERLAY_BIN PATH=$SHIM_DIRS$PATH "${PYRUN[@]}" -m overlay_setup verify-native --overlay "$WORK/ov") || fail "verify-native: $out"
[[ $(tail -1 <<<"$out") == 'FRESH_BUILD_OK (checked 1)' ]] || fail "verify-native printed: $out"
"${RUN[@]}" env -u OVERLAY_BIN PATH=$SHIM_DIRS$PATH "${PYRUN[@]}" -c 'import sys, overlay_setup; overlay_setup.main(["revert", "--overlay", sys.argv[1]])' "$WORK/ov" ||
  fail "revert through import overlay_setup"
[[ $(digest) == "$clean" ]] || fail "the install differs after revert"
echo "wheel: $(basename "$whl") installed; $MACHINE binary${RUN:+ (binfmt: qemu-aarch64-static)}; A/B cycle through the venv's overlay and overlay_setup: byte-exact"

if [[ ${#RUN[@]} -ne 0 ]]; then
  echo "wheel: installed with --target (another machine's wheel): no pip uninstall to check"
  exit 0
fi
out=$("$V/pip" uninstall -y --disable-pip-version-check overlay 2>&1) || fail "pip uninstall: $out"
[[ ! -e $V/overlay ]] || fail "pip uninstall left the venv's overlay"
if "$V/python" -c 'import overlay_setup' 2>/dev/null; then fail "pip uninstall left overlay_setup importable"; fi
after=$(listing)
[[ $after == "$before" ]] || fail "pip uninstall left: $(diff <(echo "$before") <(echo "$after"))"
echo "wheel: pip uninstall removed all of it"
