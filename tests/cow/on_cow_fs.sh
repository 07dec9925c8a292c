#!/usr/bin/env bash
# on_cow_fs.sh FSTYPE COMMAND...: runs COMMAND with $TMPDIR on a fresh, loop-mounted filesystem
# of type FSTYPE (xfs, made with reflink; btrfs), so every test directory — install, overlay,
# backups — lives on a copy-on-write filesystem; unmounts and deletes the image afterwards.
# Exits 77 (ctest: skipped) with the reason where that cannot be done here.
set -uo pipefail
fstype=$1
shift
skip() {
  echo "SKIP: $fstype: $*"
  exit 77
}
[[ $(id -u) -eq 0 ]] || skip "not root: a loop mount needs root"
command -v "mkfs.$fstype" >/dev/null || skip "mkfs.$fstype is not installed (Debian: xfsprogs, btrfs-progs)"
work=$(mktemp -d)
mnt=$work/mnt
mkdir "$mnt"
cleanup() {
  mountpoint -q "$mnt" && { umount "$mnt" 2>/dev/null || umount -l "$mnt"; }
  rm -rf "$work"
}
trap cleanup EXIT
# Sparse: the image takes only what the tests write.
truncate -s "${OVERLAY_COW_IMAGE_MIB:-2048}M" "$work/fs.img"
case $fstype in
  xfs) mkfs.xfs -q -m reflink=1 "$work/fs.img" >"$work/mkfs.log" 2>&1 ;;
  btrfs) mkfs.btrfs -q "$work/fs.img" >"$work/mkfs.log" 2>&1 ;;
  *) skip "unknown filesystem type" ;;
esac || skip "mkfs failed: $(tr '\n' ' ' <"$work/mkfs.log")"
mount -o loop "$work/fs.img" "$mnt" 2>"$work/mount.log" || skip "mount refused: $(tr '\n' ' ' <"$work/mount.log")"
echo "$fstype mounted at $mnt"
TMPDIR=$mnt "$@"
