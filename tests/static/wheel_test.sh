#!/usr/bin/env bash
# The wheel (issue 32): scripts/wheel.sh builds it from the static binary; pip installs it with
# --no-index into a fresh venv; the venv's `overlay`, `python -m overlay_setup` and
# `import overlay_setup` run one A/B cycle (add-native -> verify-native -> revert, every byte
# compared); `pip uninstall` removes every file it installed.
# Usage: wheel_test.sh STATIC_BINARY   (python: $OVERLAY_WHEEL_PYTHON, default python3)
set -euo pipefail
# A command that fails under set -e names itself (a silent exit would say nothing in ctest's log).
trap 'echo "FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
BIN=$1
PY=${OVERLAY_WHEEL_PYTHON:-python3}
HERE=$(cd "$(dirname "$0")/../.." && pwd)
fail() { echo "FAILED: $*" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

whl=$(bash "$HERE/scripts/wheel.sh" "$BIN" "$WORK/dist") || fail "wheel.sh"
[[ $(basename "$whl") =~ ^overlay-[0-9.]+-py3-none-manylinux_2_17_x86_64\.whl$ ]] || fail "wheel name: $whl"
"$PY" -m venv "$WORK/venv" || fail "$PY -m venv (Debian: apt-get install python3-venv)"
V=$WORK/venv/bin
listing() { (cd "$WORK/venv" && find . -not -path '*/__pycache__*' | sort); }
before=$(listing)
out=$("$V/pip" install --no-index --disable-pip-version-check "$whl" 2>&1) || fail "pip install: $out"
[[ $(PATH=$V:/usr/bin:/bin command -v overlay) == "$V/overlay" ]] || fail "overlay is not on the venv's PATH"
[[ $(file -L "$V/overlay") == *"statically linked"* ]] || fail "the installed overlay is not the static binary"
ver=$("$V/overlay" --version) || fail "overlay --version"
[[ $ver == "overlay "* ]] || fail "overlay --version printed: $ver"
[[ $("$V/python" -m overlay_setup --version) == "$ver" ]] || fail "python -m overlay_setup --version"
got=$(cd / && env -u OVERLAY_BIN PATH=/usr/bin:/bin "$V/python" -c 'import overlay_setup; print(overlay_setup.overlay_binary())')
[[ $got == "$V/overlay" ]] || fail "import overlay_setup runs $got, not the venv's binary"

# One A/B cycle: the venv's overlay applies, the shim verifies, import overlay_setup reverts.
I=$WORK/install
mkdir -p "$I/src" "$I/build"
printf 'kernel v1\n' >"$I/src/k.cu"
printf 'object of kernel v1\n' >"$I/build/k.o"
printf 'kernel v2\n' >"$WORK/k_patched.cu"
digest() { (cd "$I" && find . -type f -print0 | sort -z | xargs -0 sha256sum; find . -print0 | sort -z | xargs -0 stat -c '%n %a %F'); }
clean=$(digest)
out=$(env -u OVERLAY_BIN PATH=$V:/usr/bin:/bin overlay add-native --overlay "$WORK/ov" --target "$I/src/k.cu" \
  --patched-file "$WORK/k_patched.cu" --artifact "$I/build/k.o" \
  --build-cmd "sh -c 'sed s/^/object\\ of\\ / $I/src/k.cu > $I/build/k.o'") || fail "add-native: $out"
[[ $(cat "$I/build/k.o") == 'object of kernel v2' ]] || fail "the build did not run: $(cat "$I/build/k.o")"
out=$(env -u OVERLAY_BIN "$V/python" -m overlay_setup verify-native --overlay "$WORK/ov") || fail "verify-native: $out"
[[ $(tail -1 <<<"$out") == 'FRESH_BUILD_OK (checked 1)' ]] || fail "verify-native printed: $out"
env -u OVERLAY_BIN "$V/python" -c 'import sys, overlay_setup; overlay_setup.main(["revert", "--overlay", sys.argv[1]])' "$WORK/ov" ||
  fail "revert through import overlay_setup"
[[ $(digest) == "$clean" ]] || fail "the install differs after revert"
echo "wheel: $(basename "$whl") installed; A/B cycle through the venv's overlay and overlay_setup: byte-exact"

out=$("$V/pip" uninstall -y --disable-pip-version-check overlay 2>&1) || fail "pip uninstall: $out"
[[ ! -e $V/overlay ]] || fail "pip uninstall left the venv's overlay"
if "$V/python" -c 'import overlay_setup' 2>/dev/null; then fail "pip uninstall left overlay_setup importable"; fi
after=$(listing)
[[ $after == "$before" ]] || fail "pip uninstall left: $(diff <(echo "$before") <(echo "$after"))"
echo "wheel: pip uninstall removed all of it"
