#!/usr/bin/env bash
# The static binary where its users are (issue 32): a whole native cycle (add-native with a tar
# cache snapshot -> verify-native -> status -> revert; every byte, mode, owner compared: restored
# files get a fresh mtime by design, docs/design.md) and a Python overlay,
# run by `chroot` in
#   empty     a root holding only the binary, a static busybox (the build command) and the
#             test's files: no libc, no loader, no /proc, no python3;
#   debian11  a Debian 11 root made by debootstrap from Debian's archive (glibc 2.31, older than
#             the 2.35 of Ubuntu 22.04 serving images), where the Python overlay runs in its own
#             python3 and the dynamic binary is shown not to start.
# A STATIC_BINARY for aarch64 (cmake --preset static-aarch64) runs on an x86-64 host under
# qemu-user-static, named as each command's interpreter inside the root (what binfmt_misc would do;
# the processes it starts, the build's shell and python3, are the root's own and run natively).
# Usage: static_root_test.sh empty|debian11 STATIC_BINARY DYNAMIC_BINARY CACHE_DIR
# Exit 77 (skipped) where chroot is not permitted or busybox/debootstrap is not installed, unless
# OVERLAY_REQUIRE_STATIC_ROOTS=1 (CI), which makes that a failure.
set -euo pipefail
# A command that fails under set -e names itself (a silent exit would say nothing in ctest's log).
trap 'echo "FAILED at line $LINENO: $BASH_COMMAND" >&2' ERR
KIND=$1 BIN=$2 DYN=$3 CACHE=$4
mkdir -p "$CACHE"
skip() {
  echo "static_root_test: $1" >&2
  [[ -n ${OVERLAY_REQUIRE_STATIC_ROOTS:-} ]] && { echo "FAILED: required (OVERLAY_REQUIRE_STATIC_ROOTS)" >&2; exit 1; }
  exit 77
}
fail() { echo "FAILED: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || skip "chroot needs root"
BUSYBOX=/bin/busybox
[[ -x $BUSYBOX ]] && [[ $(file -L "$BUSYBOX") == *"statically linked"* ]] || skip "no static busybox (apt-get install busybox-static)"
[[ -e $BIN ]] || skip "no binary at $BIN"
# The binary's machine, and the emulator it needs here.
EMU=()
case $(file -L "$BIN") in
  *x86-64*) MACHINE=x86_64 ;;
  *aarch64*) MACHINE=aarch64 ;;
  *) fail "$BIN: unknown machine: $(file -L "$BIN")" ;;
esac
if [[ $MACHINE != $(uname -m) ]]; then
  QEMU=$(command -v "qemu-$MACHINE-static") || skip "no qemu-$MACHINE-static to run $BIN (bash scripts/deps.sh --aarch64)"
  EMU=("/qemu-$MACHINE-static")
fi

# The binary itself: nothing dynamic.
[[ $(file -L "$BIN") == *"statically linked"* ]] || fail "$BIN is not statically linked: $(file -L "$BIN")"
if [[ $(readelf -d "$BIN" 2>&1) == *NEEDED* ]]; then fail "$BIN has NEEDED entries"; fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/overlay-static-$KIND.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
R=$WORK/root
case $KIND in
  empty)
    mkdir -p "$R/bin" "$R/tmp"
    cp "$BUSYBOX" "$R/bin/busybox"
    SH="/bin/busybox sh"
    ;;
  debian11)
    command -v debootstrap >/dev/null || skip "no debootstrap (apt-get install debootstrap)"
    BASE=$CACHE/debian11
    bash "$(dirname "$0")/debian11_root.sh" "$CACHE" || fail "no Debian 11 root (debian11_root.sh failed)"
    cp -a "$BASE" "$R"
    SH="/bin/sh"
    glibc=$(chroot "$R" /usr/bin/ldd --version | awk 'NR == 1 {print $NF}')
    [[ $glibc == 2.31 ]] || fail "the Debian 11 root's glibc is $glibc, not 2.31"
    # What issue 32 reported: the dynamic binary cannot start there.
    cp "$DYN" "$R/overlay-dynamic"
    if out=$(chroot "$R" /overlay-dynamic --version 2>&1); then fail "the dynamic binary started on glibc 2.31: $out"; fi
    grep -q "GLIBC_2.3[5-9]' not found" <<<"$out" || fail "the dynamic binary failed otherwise: $out"
    echo "dynamic binary on glibc $glibc: ${out##*: }"
    ;;
  *) fail "unknown root kind $KIND" ;;
esac
cp "$BIN" "$R/overlay"
[[ ${#EMU[@]} -eq 0 ]] || cp "$QEMU" "$R${EMU[0]}"
# Debian 11's own environment (PYTHONPATH passed through); the empty root has no env to run.
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/tmp ${PYTHONPATH:+PYTHONPATH=$PYTHONPATH} "$@" 2>&1; }
ov() { if [[ $KIND == empty ]]; then chroot "$R" "${EMU[@]}" /overlay "$@" 2>&1; else in_root "${EMU[@]}" /overlay "$@"; fi; }
out=$(ov --version) || fail "the $MACHINE binary does not start in the $KIND root: $out"
echo "$MACHINE binary in the $KIND root${EMU:+ (under ${EMU[0]#/})}: $out"

# --- the native cycle: a kernel source, its object, a 40-file cache, all restored byte for byte.
I=$R/w/install
mkdir -p "$I/src" "$I/build" "$I/cache/sub" "$R/w/patched"
printf '__global__ void k() { /* SOURCE v1 */ }\n' >"$I/src/k.cu"
sed 's/SOURCE/OBJECT/' "$I/src/k.cu" >"$I/build/k.o"
for n in $(seq 1 40); do printf 'cached %d\n' "$n" >"$I/cache/sub/e$n.bin"; done
ln -s sub/e1.bin "$I/cache/link"
printf 'latin-1 name\n' >"$I/cache/sub/caf"$'\xe9'".bin"  # not UTF-8: through the tar snapshot too
printf 'utf-8 name\n' >"$I/cache/sub/caf"$'\xc3\xa9'".bin"
printf '__global__ void k() { /* SOURCE v2 */ }\n' >"$R/w/patched/k.cu"
before=$(cd "$I" && find . -print0 | sort -z | xargs -0 stat -c '%n %a %u:%g %F' ; find . -type f -print0 | sort -z | xargs -0 sha256sum)
BUILD="$SH -c 'sed s/SOURCE/OBJECT/ /w/install/src/k.cu > /w/install/build/k.o'"
[[ $KIND == empty ]] && BUILD="/bin/busybox sh -c '/bin/busybox sed s/SOURCE/OBJECT/ /w/install/src/k.cu > /w/install/build/k.o'"

out=$(ov add-native --overlay /w/ov --target /w/install/src/k.cu --patched-file /w/patched/k.cu \
  --artifact /w/install/build/k.o --invalidate-cache /w/install/cache --cache-snapshot tar --build-cmd "$BUILD") ||
  fail "add-native: $out"
grep -qx 'OVERLAY_DIR=/w/ov' <<<"$out" || fail "add-native printed: $out"
grep -q 'add-native /w/install/src/k.cu  (sources=1 artifacts=1 caches=1 build=yes)' <<<"$out" || fail "add-native printed: $out"
grep -q 'OBJECT v2' "$I/build/k.o" || fail "the build did not run: $(cat "$I/build/k.o")"
[[ ! -e $I/cache ]] || [[ -z $(ls -A "$I/cache") ]] || fail "the cache was not invalidated"
out=$(ov verify-native --overlay /w/ov) || fail "verify-native: $out"
[[ $(tail -1 <<<"$out") == 'FRESH_BUILD_OK (checked 1)' ]] || fail "verify-native printed: $out"
out=$(ov status --overlay /w/ov) || fail "status: $out"
out=$(ov revert --overlay /w/ov) || fail "revert: $out"
grep -qx 'revert: restored native changes in /w/ov' <<<"$out" || fail "revert printed: $out"
after=$(cd "$I" && find . -print0 | sort -z | xargs -0 stat -c '%n %a %u:%g %F' ; find . -type f -print0 | sort -z | xargs -0 sha256sum)
[[ $before == "$after" ]] || fail "the install differs after revert: $(diff <(echo "$before") <(echo "$after"))"
out=$(ov status --overlay /w/ov --check-clean) || fail "status --check-clean after revert: $out"
echo "native cycle in the $KIND root ($MACHINE): add-native (tar cache) -> verify-native -> revert: byte- and metadata-exact"

# --- a Python overlay: a patched module and a rebind.
P=$R/w/py
mkdir -p "$P/pkg/mypkg"
printf '' >"$P/pkg/mypkg/__init__.py"
printf 'def f():\n    return "install"\n' >"$P/pkg/mypkg/kern.py"
printf 'def f():\n    return "patched"\n' >"$P/kern_patched.py"
printf 'def h():\n    return "install"\n' >"$P/pkg/mypkg/other.py"
printf 'def g():\n    return "rebound"\n' >"$P/impl.py"
# add-module finds the installed module by asking python3 (or patches it with GNU patch): the
# empty root has neither, so there only the entries that need no interpreter are written.
if [[ $KIND == debian11 ]]; then
  out=$(PYTHONPATH=/w/py/pkg ov add-module --overlay /w/pyov --module mypkg.kern --patched-file /w/py/kern_patched.py) ||
    fail "add-module: $out"
  grep -q 'launch with: PYTHONPATH=/w/pyov:' <<<"$out" || fail "add-module printed: $out"
fi
out=$(ov add-rebind --overlay /w/pyov --target mypkg.other:h --impl-module impl --impl-attr g --impl-file /w/py/impl.py) ||
  fail "add-rebind: $out"
grep -q 'launch with: PYTHONPATH=/w/pyov:' <<<"$out" || fail "add-rebind printed: $out"
out=$(ov add-capture --overlay /w/pyov --target mypkg.other:h --out /w/shapes --max 2) || fail "add-capture: $out"
[[ -f $R/w/pyov/sitecustomize.py && -f $R/w/pyov/impl.py && -f $R/w/pyov/capture_shapes.py ]] ||
  fail "the Python overlay is incomplete: $(ls -R "$R/w/pyov")"
/usr/bin/python3 - "$R/w/pyov/_overlay_manifest.json" "$KIND" <<'PY' || fail "the Python overlay's manifest"
import json, sys
m = json.load(open(sys.argv[1]))
assert [e["module"] for e in m.get("modules", [])] == (["mypkg.kern"] if sys.argv[2] == "debian11" else []), m
assert [(e["target"], e["out"], e["max"]) for e in m["captures"]] == [("mypkg.other:h", "/w/shapes", 2)], m
assert [e["target"] for e in m["rebinds"]] == ["mypkg.other:h"], m
PY
if [[ $KIND == debian11 ]]; then
  out=$(in_root sh -c 'PYTHONPATH=/w/pyov:/w/py/pkg python3 -c "import mypkg.kern as k, mypkg.other as o; print(k.f(), o.h())"') ||
    fail "python3 with the overlay: $out"
  grep -qx 'patched rebound' <<<"$out" || fail "python3 with the overlay printed: $out"
  out=$(in_root sh -c 'PYTHONPATH=/w/py/pkg python3 -c "import mypkg.kern as k; print(k.f())"')
  [[ $out == install ]] || fail "python3 without the overlay printed: $out"
  out=$(PYTHONPATH=/w/pyov:/w/py/pkg ov check --module mypkg.kern) || fail "check: $out"
  grep -q 'OVERLAY_ACTIVE' <<<"$out" || fail "check printed: $out"
  echo "Python overlay in the debian11 root: python3 $(in_root python3 -c 'import sys; print(sys.version.split()[0])') ran the patched module and the rebind"
else
  echo "Python overlay in the empty root: add-rebind and add-capture wrote the overlay"
fi
echo "static_root_test $KIND ($MACHINE): OK"
