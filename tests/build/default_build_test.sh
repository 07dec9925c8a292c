#!/usr/bin/env bash
# default_build_test.sh SOURCE_DIR: README's build-by-hand configure, run verbatim on a machine
# that lacks the static archives only the static twin needs (libacl.a, libzstd.a, liblz4.a: what
# a demo-only machine lacks). They are hidden by an overlayfs over the multiarch library
# directory with whiteouts, in a mount namespace of this test alone. Expected there:
#   * the configure succeeds, with one status line naming the archives and their packages;
#   * no build step links the static twin or names a hidden archive, and the dry run plans the
#     whole build; ctest has no `static` test;
#   * OVERLAY_REQUIRE_STATIC_ROOTS=1 (CI) and the static preset refuse, naming them;
# and, as the control, the same configure with nothing hidden has the static twin.
# Exits 77 (skipped) where a mount namespace cannot be made (not root).
set -uo pipefail
src=$(realpath "$1")
skip() {
  echo "SKIP: $*"
  exit 77
}
fail() {
  echo "FAILED: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || skip "not root: hiding the archives needs a mount namespace"
# CI's switch is set around this test: the machine it plays is not CI, until it is asked to be.
unset OVERLAY_REQUIRE_STATIC_ROOTS
command -v unshare >/dev/null || skip "unshare is not installed (util-linux)"
libdir=/usr/lib/$(gcc -print-multiarch)
hidden=(libacl.a libzstd.a liblz4.a)
for a in "${hidden[@]}"; do [[ -f $libdir/$a ]] || skip "$libdir/$a is not installed: nothing to hide"; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The tracked tree, without build directories: README's line runs in a checkout of its own.
mkdir "$work/src"
tar -C "$src" --exclude='./build*' --exclude='./.git' --exclude='./dist' -cf - . | tar -C "$work/src" -xf -
line=$(sed -n 's/^Build by hand[^`]*`\([^`]*\)`.*/\1/p' "$src/README.md" | head -1)
[[ -n $line ]] || fail "README.md has no 'Build by hand' line"
configure=${line%%&&*}
[[ $configure == cmake\ -S\ .\ -B\ build* ]] || fail "README's line does not start with a configure: $line"
echo "README's configure: $configure"

mkdir "$work/upper" "$work/overlay-work"
for a in "${hidden[@]}"; do mknod "$work/upper/$a" c 0 0; done
unshare -m bash -s "$work" "$libdir" "$configure" <<'INNER' || exit $?
set -uo pipefail
work=$1 libdir=$2 configure=$3
fail() { echo "FAILED: $*" >&2; exit 1; }
mount -t overlay overlay -o "lowerdir=$libdir,upperdir=$work/upper,workdir=$work/overlay-work" "$libdir" ||
  { echo "SKIP: overlayfs mount refused"; exit 77; }
for a in libacl.a libzstd.a liblz4.a; do [[ ! -e $libdir/$a ]] || fail "$libdir/$a is still visible"; done
cd "$work/src"
eval "$configure" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "README's configure failed without the static archives"; }
want="-- overlay: static twin (static/overlay, ctest label static) left out: no libacl.a, libzstd.a, liblz4.a (apt-get install libacl1-dev libzstd-dev liblz4-dev)"
grep -qxF -- "$want" "$work/configure.log" || { cat "$work/configure.log"; fail "no status line naming the archives"; }
echo "configure: ok; $want"
# Captured before grep reads them (grep -q would close the pipe early: SIGPIPE under pipefail).
targets=$(ninja -C build -t targets all) || fail "ninja cannot read the build"
grep -q '^static/overlay:' <<<"$targets" && fail "the static twin is still a target"
# Every command of the whole build, planned without running one: none names a hidden archive.
plan=$(ninja -C build -t commands all) || fail "ninja cannot plan the build"
grep -Eq -- '-l(acl|zstd|lz4)( |$)' <<<"$plan" && fail "a link command names a hidden archive"
[[ $(ctest --test-dir build -N -L static | grep -c 'Test *#') -eq 0 ]] || fail "ctest lists static tests"
echo "build plan: $(wc -l <<<"$plan") commands, none linking the static twin; ctest -L static: none"
OVERLAY_REQUIRE_STATIC_ROOTS=1 cmake -S . -B build-ci -G Ninja >"$work/ci.log" 2>&1 && fail "OVERLAY_REQUIRE_STATIC_ROOTS=1 configured"
grep -q "the fully static binary cannot be linked: no libacl.a, libzstd.a, liblz4.a" "$work/ci.log" ||
  { cat "$work/ci.log"; fail "the CI configure's error does not name the archives"; }
cmake --preset static >"$work/preset.log" 2>&1 && fail "the static preset configured"
grep -q "apt-get install libacl1-dev libzstd-dev liblz4-dev" "$work/preset.log" ||
  { cat "$work/preset.log"; fail "the static preset's error does not name the packages"; }
echo "OVERLAY_REQUIRE_STATIC_ROOTS=1 and --preset static: refused, naming them"
INNER
# The control: nothing hidden, the same configure has the static twin.
cd "$work/src" && rm -rf build && eval "$configure" >"$work/control.log" 2>&1 || { cat "$work/control.log"; fail "the control configure failed"; }
grep -q "static twin .* left out" "$work/control.log" && fail "the control left the static twin out"
targets=$(ninja -C build -t targets all) || fail "ninja cannot read the control's build"
grep -q '^static/overlay:' <<<"$targets" || fail "the control has no static twin"
echo "control (archives present): static/overlay is a target"
echo "PASSED"
