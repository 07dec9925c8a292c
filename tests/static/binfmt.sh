#!/usr/bin/env bash
# Runs COMMAND as an aarch64 machine would: in a user and mount namespace of its own whose private
# binfmt_misc (Linux >= 6.7 gives each user namespace its own) hands every aarch64 ELF executable
# to qemu-aarch64-static, so a program that execs the aarch64 binary (the wheel's overlay_setup
# shim) runs it as is. Nothing is registered on the host.
# Usage: binfmt.sh COMMAND [ARG...]
# Exit 77 where this cannot be set up (no qemu-aarch64-static, no user namespaces, an older kernel).
set -euo pipefail
QEMU=$(command -v qemu-aarch64-static) || { echo "binfmt.sh: no qemu-aarch64-static (bash scripts/deps.sh --aarch64)" >&2; exit 77; }
# The ELF header of an aarch64 executable (class 64, little-endian, e_machine 0xb7), as Debian's
# qemu-user-static registers it; F: the emulator is opened now, so it also serves inside a chroot.
MAGIC='\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00'
MASK='\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff'
# shellcheck disable=SC2016
SETUP='mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null &&
       printf "%s" "$1" >/proc/sys/fs/binfmt_misc/register 2>/dev/null || exit 199
       shift; exec "$@"'
why="Linux >= 6.7 and user namespaces needed; $(uname -r)"
unshare --user --map-root-user --mount true 2>/dev/null || { echo "binfmt.sh: no user namespace here ($why)" >&2; exit 77; }
rc=0
unshare --user --map-root-user --mount sh -c "$SETUP" binfmt ":qemu-aarch64:M::$MAGIC:$MASK:$QEMU:F" "$@" || rc=$?
if [[ $rc -eq 199 ]]; then
  echo "binfmt.sh: no binfmt_misc of its own in a user namespace here ($why)" >&2
  exit 77
fi
exit $rc
